"""Ops a PyTorch user expects (found missing by a new-user trial), compared
with PyTorch where `import torch` works; softmax's implicit dim; no
internal jargon in user-facing messages."""
import re
import warnings

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

try:
    import torch
except Exception:  # noqa: BLE001 - torch is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not importable")


def _pair(a):
    a = np.asarray(a)
    return tp.tensor(a), (torch.tensor(a) if torch is not None else None)


def _same(got, want):
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    if isinstance(want, bool):
        assert got is want or got == want
        return
    g = got.numpy() if isinstance(got, tp.Tensor) else np.asarray(got)
    w = want.numpy()
    assert g.shape == w.shape, (g.shape, w.shape)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                               rtol=1e-5, atol=1e-6, equal_nan=True)


RNG = np.random.default_rng(0)
A = RNG.permutation(24).astype(np.float32).reshape(2, 3, 4) - 11
M = np.array([[1.0, np.nan, 3.0], [2.0, 2.0, -1.0]], np.float32)
I = np.array([[3, 1, 3], [2, 1, 0]], np.int64)

CASES = [
    ("isclose", lambda m, x: m.isclose(x, x + 1e-6)),
    ("isclose_nan", lambda m, x: m.isclose(x, x, equal_nan=True), M),
    ("isclose_inf", lambda m, x: m.isclose(x, x * np.inf if m is np else x * float("inf")), M),
    ("allclose", lambda m, x: m.allclose(x, x + 1e-3)),
    ("allclose_tol", lambda m, x: m.allclose(x, x + 1e-3, atol=1e-2)),
    ("flip", lambda m, x: m.flip(x, [0, 2])),
    ("flip_m", lambda m, x: x.flip(1)),
    ("roll", lambda m, x: m.roll(x, 2, 1)),
    ("roll2", lambda m, x: m.roll(x, (1, -1), (0, 2))),
    ("roll_flat", lambda m, x: m.roll(x, 5)),
    ("tril", lambda m, x: m.tril(x)),
    ("triu", lambda m, x: m.triu(x, 1)),
    ("tril_m", lambda m, x: x.tril(-1)),
    ("repeat", lambda m, x: x.repeat(2, 1, 3)),
    ("repeat_more", lambda m, x: x.repeat((2, 1, 1, 2))),
    ("sort", lambda m, x: m.sort(x, 1)),
    ("sort_desc", lambda m, x: x.sort(dim=-1, descending=True)),
    ("sort_nan", lambda m, x: m.sort(x, descending=True), M),
    ("sort_nan_asc", lambda m, x: m.sort(x), M),
    ("sort_stable_ties", lambda m, x: m.sort(x, stable=True), I),
    ("argsort", lambda m, x: m.argsort(x, 0)),
    ("argsort_desc", lambda m, x: x.argsort(descending=True)),
    ("topk", lambda m, x: m.topk(x, 2)),
    ("topk_small", lambda m, x: x.topk(2, dim=0, largest=False)),
    ("median", lambda m, x: m.median(x)),
    ("median_even", lambda m, x: m.median(x[0, 0])),
    ("median_dim", lambda m, x: x.median(1)),
    ("median_keep", lambda m, x: m.median(x, -1, keepdim=True)),
    ("median_nan", lambda m, x: m.median(x), M),
    ("median_int", lambda m, x: m.median(x), I),
    ("nonzero", lambda m, x: m.nonzero(x > 0)),
    ("nonzero_t", lambda m, x: (x > 0).nonzero(as_tuple=True)),
    ("unique", lambda m, x: m.unique(x), I),
    ("unique_all", lambda m, x: m.unique(x, return_inverse=True, return_counts=True), I),
    ("unique_dim", lambda m, x: m.unique(x, dim=1, return_counts=True), I),
    ("cumprod", lambda m, x: m.cumprod(x, 1)),
    ("cumprod_int", lambda m, x: x.cumprod(0), I),
    ("diff", lambda m, x: m.diff(x)),
    ("diff2", lambda m, x: m.diff(x, n=2, dim=1)),
    ("einsum", lambda m, x: m.einsum("bij,bkj->bik", x, x)),
    ("einsum_list", lambda m, x: m.einsum("ijk->k", [x])),
    ("einsum_trace", lambda m, x: m.einsum("ii", x[0, :, :3])),
    ("index_add", lambda m, x: x.index_add(1, m.tensor([0, 2, 0]), x[:, :3] * 0 + 1)),
]


@needs_torch
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_vs_torch(case):
    name, f = case[0], case[1]
    a = case[2] if len(case) > 2 else A
    x, t = _pair(a)
    _same(f(tp, x), f(torch, t))


@needs_torch
def test_named_tuples_like_torch():
    x, t = _pair(A)
    for m, tm in ((tp.sort(x), torch.sort(t)), (x.topk(2), t.topk(2)),
                  (x.median(0), t.median(0))):
        assert type(m).__name__ == type(tm).__name__
        _same(m.values, tm.values)
        _same(m.indices, tm.indices)
        v, i = m
        _same(v, tm[0])


def test_inplace_methods():
    x = tp.tensor(A.copy())
    x.tril_()
    np.testing.assert_array_equal(x.numpy(), np.tril(A))
    y = tp.zeros(3)
    r = y.index_add_(0, tp.tensor([0, 0, 2]), tp.ones(3))
    assert r is y
    np.testing.assert_array_equal(y.numpy(), [2, 0, 1])
    z = tp.tensor(A.copy())
    z.masked_fill_(z > 0, 0.0)
    np.testing.assert_array_equal(z.numpy(), np.where(A > 0, 0, A))
    c = tp.tensor([[1.0, 2.0], [3.0, 4.0]])
    c.cumprod_(1)
    np.testing.assert_array_equal(c.numpy(), [[1, 2], [3, 12]])


def test_new_methods_and_clone_memory_format():
    x = tp.tensor(A)
    assert x.new_zeros(2, 3).shape == (2, 3) and x.new_zeros(2).dtype == x.dtype
    assert float(x.new_ones((2,)).sum()) == 2.0
    assert float(x.new_full((2,), 3.0).sum()) == 6.0
    assert x.new_empty(4).shape == (4,)
    assert x.new_tensor([1, 2]).dtype == x.dtype
    assert x.type_as(tp.tensor([1])).dtype == tp.int64
    for mf in (tp.contiguous_format, tp.preserve_format, None):
        c = x.clone(memory_format=mf)
        assert c is not x
        np.testing.assert_array_equal(c.numpy(), A)
    np.testing.assert_array_equal(tp.clone(x, memory_format=tp.contiguous_format).numpy(), A)


def test_errors_like_torch():
    x = tp.tensor(A)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        tp.tril(tp.ones(3))
    with pytest.raises(RuntimeError, match="can not be smaller"):
        x.repeat(2, 2)
    with pytest.raises(RuntimeError, match="out of range"):
        x.topk(9)
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.alpha_dropout(x, 1.5, True)


def test_traced_and_compiled():
    x = tp.tensor(A)
    for f in (lambda x: x.sort(1).values * 2, lambda x: x.flip(0) + x.roll(1, 2),
              lambda x: tp.einsum("bij,bkj->bik", x, x) + 1,
              lambda x: x.tril() + x.triu(1), lambda x: x.repeat(1, 2, 1) * 2,
              lambda x: x.topk(2).indices + 1, lambda x: x.cumprod(2) - 1,
              lambda x: x.median(1).values * 2, lambda x: x.argsort(0) * 1):
        np.testing.assert_allclose(tp.compile(f)(x).numpy(), f(x).numpy())


def test_dropout_variants_train_and_eval():
    x = tp.ones(4, 3, 8)
    for f in (F.alpha_dropout, F.feature_alpha_dropout):
        assert f(x, 0.5) is x                          # training=False default
        y = f(x, 0.5, True)
        assert y.shape == x.shape
    for k, f in ((1, F.dropout1d), (2, F.dropout2d), (3, F.dropout3d)):
        xi = tp.ones(*([4, 3] + [5] * k))
        assert f(xi, 0.5, training=False) is xi
        y = f(xi, 0.5).numpy()
        # whole channels are kept (scaled by 2) or zeroed
        flat = y.reshape(4, 3, -1)
        assert np.all((flat == 0).all(-1) | (flat == 2).all(-1))


def _softmax_case(shape):
    return tp.tensor(RNG.standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize("shape", [(5,), (2, 3), (2, 3, 4), (2, 3, 4, 5)])
@pytest.mark.parametrize("fname", ["softmax", "log_softmax"])
def test_softmax_implicit_dim(shape, fname):
    x = _softmax_case(shape)
    d = 0 if len(shape) in (0, 1, 3) else 1
    with pytest.warns(UserWarning, match=f"Implicit dimension choice for "
                                         f"{fname} has been deprecated") as rec:
        y = getattr(F, fname)(x)
    assert any(r.filename == __file__ for r in rec)    # points at the caller
    np.testing.assert_allclose(y.numpy(), getattr(F, fname)(x, d).numpy())
    if torch is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = getattr(torch.nn.functional, fname)(torch.tensor(x.numpy()))
        np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        getattr(F, fname)(x, dim=-1)                   # explicit: no warning


def test_no_internal_jargon_in_messages():
    import tensorplay._ops as ops
    src = open(ops.__file__).read()
    strings = re.findall(r'"[^"\n]*"', src)
    assert not [s for s in strings if re.search(r"\broom\b", s)]
    assert not re.search(r"\broom\b", tp.functional.dropout.__doc__ or "")
