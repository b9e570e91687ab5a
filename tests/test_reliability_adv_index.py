"""Reliability, round 2 (issue 13): advanced indexing with integer index
tensors, x[i], x[:, i], x[i, j], x[0, :, i], ..., compiled natively (a
gather in the loop IR, negative indices wrapped, the runtime index check
reruns a bad call eagerly for eager's IndexError) with torch's rules for
where the broadcast index dims go; eager follows torch too (ints select
first). A bool mask has a data-dependent shape and stays a fallback."""
import warnings

import numpy as np
import pytest

import tensorplay as tp
from _helpers import isolate_compile_budget  # noqa: F401 - autouse: no compile budget here

try:
    import torch
except ImportError:      # pragma: no cover
    torch = None

CASES = {
    "x[i]": lambda x, i, j, k: x[i],
    "x[:, i]": lambda x, i, j, k: x[:, i] + 1,
    "x[0, :, i]": lambda x, i, j, k: x[0, :, i],
    "x[i, :, j]": lambda x, i, j, k: x[i, :, j],
    "x[:, i, j]": lambda x, i, j, k: x[:, i, j],
    "x[0, i, :, j]": lambda x, i, j, k: x[0, i, :, j],
    "x[..., k]": lambda x, i, j, k: x[..., k],
    "x[None, i]": lambda x, i, j, k: x[None, i],
    "x[1:, i]": lambda x, i, j, k: x[1:, i],
    "x[:, i, 1]": lambda x, i, j, k: x[:, i, 1],
    "x[i, 1]": lambda x, i, j, k: x[i, 1],
    "x[:, i, 1:3, j]": lambda x, i, j, k: x[:, i, 1:3, j],
    "x[i, j, k3]": lambda x, i, j, k: x[i, j, k.reshape(3, 1, 1)],
    "x[:, :, k_int32]": lambda x, i, j, k: x[:, :, k.int()],
    "x.t()[k]": lambda x, i, j, k: x.sum(0).sum(0).t()[k - 1],
}


def _args(m):
    x = m.arange(120.).reshape(2, 3, 4, 5)
    return x, m.tensor([1, 0]), m.tensor([[0], [2]]), m.tensor([-1, 3, 0])


@pytest.mark.parametrize("name", sorted(CASES))
def test_advanced_index_native_matches_eager_and_torch(name):
    f = CASES[name]
    args = _args(tp)
    want = f(*args)
    got = tp.compile(f, strict_native=True, dynamic=False)(*args)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    if torch is not None:
        np.testing.assert_array_equal(want.numpy(), f(*_args(torch)).numpy())


def test_eager_int_and_index_tensor_select_first_like_torch():
    x = tp.zeros(2, 3, 4, 5)
    i = tp.tensor([1, 0])
    assert tuple(x[0, :, i].shape) == (3, 2, 5)
    assert tuple(x[0, i, :, tp.tensor([[0], [2]])].shape) == (2, 2, 4)
    assert tuple(x[:, i, 1].shape) == (2, 2, 5)
    x = tp.arange(24.).reshape(2, 3, 4)
    np.testing.assert_array_equal(x[1, :, tp.tensor([3, 0])].numpy(),
                                  x.numpy()[1][:, [3, 0]])


def test_advanced_index_in_a_mutating_function_and_its_errors():
    def f(x, i):
        y = x * 1
        y[0].zero_()
        x.add_(1)
        return y[i], x[:, i]
    cf = tp.compile(f, strict_native=True)
    for idx in ([1, 1], [-1, 2], [0, 2]):
        a, b = tp.arange(12.).reshape(3, 4), tp.arange(12.).reshape(3, 4)
        got, want = cf(a, tp.tensor(idx)), f(b, tp.tensor(idx))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    a = tp.arange(12.).reshape(3, 4)
    with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 3"):
        cf(a, tp.tensor([0, -4]))
    # eager's writes before the error, once
    np.testing.assert_array_equal(a.numpy(), np.arange(12.).reshape(3, 4) + 1)
    assert cf.stats()["compiles"] == 1


def test_advanced_index_gradient_compiled_forward():
    # the forward is native; the backward of a tensor-indexed getitem is
    # not built as a graph yet (the eager recompute backward gives it)
    w = tp.randn(5, 3, requires_grad=True)
    i = tp.tensor([4, 0, 4, -1])

    def f(w, i):
        return (w[i] * tp.arange(3.)).sum()
    f(w, i).backward()
    want = w.grad.clone()
    w.grad = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tp.compile(f)(w, i).backward()
    np.testing.assert_allclose(w.grad.numpy(), want.numpy(), rtol=1e-6)


def test_bool_mask_index_is_native_with_a_count_gate():
    # the result's shape depends on the mask's values: native for the
    # mask's count (a value gate), as masked_select (issue 13)
    f = lambda x: x[x > 3] * 2  # noqa: E731
    x = tp.arange(12.).reshape(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(tp.compile(f)(x).numpy(), f(x).numpy())
    cf = tp.compile(f, strict_native=True)
    for y in (x, x - 2, x * 0):
        np.testing.assert_array_equal(cf(y).numpy(), f(y).numpy())
