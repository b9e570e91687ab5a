"""unique keeps every NaN as its own entry, as torch 2.13's CPU unique
(issue 13: NumPy's unique merged them): values sorted with NaN last, each
NaN a count of 1, the inverse in order of appearance, -0.0 and 0.0 one
entry; with dim=, torch's std::sort of the slices (its comparison skips NaN
elements, so the order is the algorithm's own) and no two slices holding a
NaN equal. Also an empty int64/bool tensor's repr names its dtype, as
torch's does. Eager and compiled (which runs unique eagerly)."""
import warnings

import numpy as np
import pytest

import tensorplay as tp

try:
    import torch
except Exception:  # torch is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")
NAN = float("nan")


def test_unique_keeps_each_nan():
    x = tp.tensor([NAN, 1.0, NAN, 1.0, -0.0, 0.0, float("inf"), NAN, 2.0])
    u, inv, cnt = tp.unique(x, return_inverse=True, return_counts=True)
    assert repr(u.tolist()) == repr([-0.0, 1.0, 2.0, float("inf"), NAN, NAN, NAN])
    assert inv.tolist() == [4, 1, 5, 1, 0, 0, 3, 6, 2]
    assert cnt.tolist() == [2, 2, 1, 1, 1, 1, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = tp.compile(lambda x: tp.unique(x, return_counts=True))
        u2, c2 = f(x)
    assert repr(u2.tolist()) == repr(u.tolist()) and c2.tolist() == cnt.tolist()


def _res(m, data, dtype, kw):
    r = m.unique(m.tensor(data, dtype=getattr(m, dtype)), **kw)
    r = r if isinstance(r, tuple) else (r,)
    return [(str(t.dtype).split(".")[-1], repr(t.float().tolist())) for t in r]


DATA = [
    [NAN, 1.0, NAN, 1.0, -0.0, 0.0, float("inf"), NAN, 2.0],
    [NAN, NAN],
    [],
    [3, 1, 2, 1],
    [[NAN, 1.0], [NAN, 1.0], [0, 1]],
    [[2, 1], [1, 1], [2, 1]],
]
KWARGS = [dict(), dict(return_inverse=True, return_counts=True),
          dict(sorted=False, return_inverse=True),
          dict(dim=0, return_inverse=True, return_counts=True),
          dict(dim=-1, return_counts=True)]


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int64", "bool"])
@pytest.mark.parametrize("case", range(len(DATA)))
def test_unique_like_torch(case, dtype):
    data = DATA[case]
    if dtype in ("int64", "bool") and np.isnan(np.asarray(data, float)).any():
        pytest.skip("NaN has no integer value")
    for kw in KWARGS:
        assert _res(tp, data, dtype, kw) == _res(torch, data, dtype, kw), kw


@needs_torch
def test_unique_dim_nan_rows_follow_torchs_sort():
    # more than 16 rows: introsort's partitions and the final insertion sort
    rng = np.random.default_rng(0)
    for trial in range(40):
        n, k = int(rng.integers(2, 120)), int(rng.integers(1, 4))
        a = rng.integers(0, 4, size=(n, k)).astype(np.float32)
        a[rng.random((n, k)) < rng.random() * 0.5] = np.nan
        for dim in (0, 1):
            want = torch.unique(torch.tensor(a), dim=dim, return_inverse=True,
                                return_counts=True)
            got = tp.unique(tp.tensor(a), dim=dim, return_inverse=True, return_counts=True)
            for w, g in zip(want, got):
                assert np.array_equal(w.numpy(), g.numpy(), equal_nan=True), (trial, dim)


def test_empty_integer_repr_names_dtype():
    assert repr(tp.tensor([], dtype=tp.int64)) == "tensor([], dtype=tensorplay.int64)"
    assert repr(tp.zeros(0, dtype=tp.bool)) == "tensor([], dtype=tensorplay.bool)"
    assert repr(tp.zeros(0, 3)) == "tensor([], size=(0, 3))"
