"""The traced decompositions of cummax/cummin/logcumsumexp/kthvalue/mode/
nanmedian compare every pair along their dim (O(n^2)): above
QUADRATIC_DIM_CAP the compiled call records the op itself (its eager kernel
as a counted fallback; strict_native raises NativeCompileError naming the
op) instead of building an n^2 kernel, and still gives torch's values."""
import time
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _special_ops

torch = pytest.importorskip("torch")

N = _special_ops.QUADRATIC_DIM_CAP + 1

OPS = [
    ("cummax", lambda m, x: m.cummax(x, 1)),
    ("cummin", lambda m, x: m.cummin(x, 1)),
    ("logcumsumexp", lambda m, x: m.logcumsumexp(x, 1)),
    ("kthvalue", lambda m, x: m.kthvalue(x, 3, 1)),
    ("mode", lambda m, x: m.mode(x, 1)),
    ("nanmedian", lambda m, x: m.nanmedian(x, 1)),
    ("nanmedian", lambda m, x: m.nanmedian(x)),
]


def _arr(r):
    rs = r if isinstance(r, tuple) else (r,)
    return [np.asarray(t.tolist()) for t in rs]


@pytest.mark.parametrize("name,f", OPS, ids=[f"{o[0]}{i}" for i, o in enumerate(OPS)])
def test_long_dim_is_a_counted_fallback_with_torch_values(name, f):
    a = np.random.default_rng(0).integers(-5, 5, size=(2, N)).astype(np.float32)
    ref = _arr(f(torch, torch.tensor(a)))
    # indices of tied values are torch's implementation detail (its
    # quickselect): the eager kernel's are the reference for those
    eager = _arr(f(tp, tp.tensor(a)))
    np.testing.assert_allclose(eager[0], ref[0], rtol=1e-5)
    c = tp.compile(lambda x: f(tp, x))
    t0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _arr(c(tp.tensor(a)))
    assert time.process_time() - t0 < 20
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5)
    for g, r in zip(got, eager):
        np.testing.assert_array_equal(g, r)
    assert c.stats()["fallbacks"] >= 1
    with pytest.raises(tp._C.NativeCompileError, match=name):
        tp.compile(lambda x: f(tp, x), strict_native=True)(tp.tensor(a))


@pytest.mark.parametrize("name,f", OPS[:1] + OPS[3:4], ids=["cummax", "kthvalue"])
def test_at_the_cap_stays_native(name, f):
    a = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    ref = _arr(f(torch, torch.tensor(a)))
    got = _arr(tp.compile(lambda x: f(tp, x), strict_native=True)(tp.tensor(a)))
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-6)
