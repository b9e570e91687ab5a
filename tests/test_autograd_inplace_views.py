"""Eager autograd leftovers of issue 15: in-place writes into views of
tensors that require grad (torch's CopySlices), einsum's gradient with
'...', cumprod's gradient through zeros. Gradients against torch 2.13 (the
torch comparisons skip without torch) and against finite differences."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

try:
    import torch
except Exception:  # torch is optional
    torch = None


def _both(fn, *arrays, rg=None):
    """fn(m, *tensors) -> scalar loss for m in (tp, torch): the gradients of
    the inputs (all require grad unless rg says which), tp's and torch's."""
    rg = range(len(arrays)) if rg is None else rg
    xs = [tp.tensor(a, requires_grad=i in rg) for i, a in enumerate(arrays)]
    fn(tp, *xs).backward()
    got = [xs[i].grad.numpy() for i in rg]
    if torch is None:
        return got, None
    ts = [torch.tensor(a, requires_grad=i in rg) for i, a in enumerate(arrays)]
    fn(torch, *ts).backward()
    return got, [ts[i].grad.numpy() for i in rg]


def _check(fn, *arrays, rg=None):
    got, want = _both(fn, *arrays, rg=rg)
    if want is not None:
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    return got


R = np.random.default_rng(0)
A34 = R.standard_normal((3, 4)).astype(np.float32)
A2 = R.standard_normal((2,)).astype(np.float32)
A4 = R.standard_normal((4,)).astype(np.float32)


def test_inplace_mul_on_a_slice_of_a_nonleaf():
    def f(m, x):
        b = x * 1
        v = b[1:3]
        v.mul_(2)
        return (b * b).sum()
    _check(f, A34)


def test_copy_into_a_column_view_gives_both_gradients():
    def f(m, x, y):
        b = x.clone()
        b[:, 0].copy_(y * 3)
        return (b.sin() * m.arange(4.0)).sum()
    _check(f, A34, A34[:, 1].copy())


def test_setitem_into_a_view_and_view_of_a_view():
    def f(m, x, y):
        b = x + 0
        v = b[0]
        v[1:3] = y * y
        w = b.t()[2]
        w.add_(1)
        return (b * b).sum() + v.sum() + w.pow(2).sum()
    _check(f, A34, A2)


def test_zero_and_fill_on_views_and_inplace_activation():
    def f(m, x):
        b = x * 2
        b[1].zero_()
        b[2, 1:].fill_(0.5)
        v = b[0]
        m.nn.functional.relu(v, inplace=True)
        return (b.exp() * x).sum()
    _check(f, A34)


def test_base_history_is_copy_slices_and_view_keeps_rebasing():
    x = tp.tensor(A34, requires_grad=True)
    b = x * 1
    v = b[0]
    v.mul_(3)
    assert b.grad_fn.name() == "CopySlices"
    v.add_(1)                                   # a second write into the same view
    b.sum().backward()
    want = np.ones((3, 4), np.float32)
    want[0] = 3
    np.testing.assert_allclose(x.grad.numpy(), want)


def test_view_of_a_leaf_that_requires_grad_in_place_raises_torch_error():
    x = tp.tensor(A34, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad is "
                                           "being used in an in-place operation"):
        x[0].mul_(2)
    with tp.no_grad():
        x[0].mul_(2)                            # without grad mode: allowed


def test_saved_view_input_still_version_checked():
    x = tp.tensor(A4, requires_grad=True)
    b = x * 1
    v = b[1:3]
    s = v.exp()                                 # exp saves its output, not v
    v.mul_(2)
    s.sum().backward()                          # fine: exp's output was not written
    y = b.sin()                                 # sin saves b
    b[0:2].mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("eq,shapes", [
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    ("b...,b...->b...", [(3, 2, 4), (3, 1, 4)]),
    ("i...->...", [(3, 2, 5)]),
])
def test_einsum_with_ellipsis_gradients(eq, shapes):
    arrs = [R.standard_normal(s).astype(np.float32) for s in shapes]

    def f(m, *xs):
        out = m.einsum(eq, *xs) if m is torch else m.einsum(eq, list(xs))
        return (out * out).sum()
    got = _check(f, *arrs)
    assert [g.shape for g in got] == [tuple(s) for s in shapes]


@pytest.mark.parametrize("arr,dim", [
    (np.array([2.0, 0.0, 3.0, 0.0, 4.0]), 0),
    (np.array([[1.5, 0.0, 2.0], [0.0, 0.0, 1.0], [3.0, -1.0, 0.5]]), 1),
    (np.array([[1.5, 0.0, 2.0], [0.0, 0.0, 1.0], [3.0, -1.0, 0.5]]), 0),
])
def test_cumprod_gradient_through_zeros(arr, dim):
    w = np.random.default_rng(1).standard_normal(arr.shape)

    def f(m, x, ww):
        return (m.cumprod(x, dim) * ww).sum()
    got = _check(f, arr, w, rg=(0,))[0]
    # finite differences (float64)
    num = np.zeros_like(arr)
    for ix in np.ndindex(arr.shape):
        e = np.zeros_like(arr)
        e[ix] = 1e-6
        num[ix] = ((np.cumprod(arr + e, dim) * w).sum() - (np.cumprod(arr - e, dim) * w).sum()) / 2e-6
    np.testing.assert_allclose(got, num, rtol=1e-5, atol=1e-6)
    assert np.isfinite(got).all()


def test_compiled_cumprod_and_einsum_ellipsis_gradients():
    x = tp.tensor(np.array([[2.0, 0.0, 3.0], [1.0, 2.0, 0.0]], np.float32), requires_grad=True)
    a = tp.tensor(R.standard_normal((2, 3, 4)).astype(np.float32), requires_grad=True)
    b = tp.tensor(R.standard_normal((4, 5)).astype(np.float32), requires_grad=True)

    def f(x, a, b):
        return x.cumprod(1).sum() + tp.einsum("...ij,...jk->...ik", [a, b]).sum()
    f(x, a, b).backward()
    ge = [t.grad.clone() for t in (x, a, b)]
    for t in (x, a, b):
        t.grad = None
    tp.compile(f)(x, a, b).backward()
    for t, g in zip((x, a, b), ge):
        np.testing.assert_allclose(t.grad.numpy(), g.numpy(), rtol=1e-5, atol=1e-6)
