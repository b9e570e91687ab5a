"""The special functions, scans, order statistics and searches of
tensorplay/_special_ops.py on CUDA tensors: eagerly (the dispatcher's
generated kernel: the op's trace-time decomposition lowered for NVRTC, no
host fallback) and under tp.compile, against the CPU.

Skipped without an NVIDIA GPU and its driver."""
import numpy as np
import pytest

import tensorplay as tp

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

RNG = np.random.default_rng(5)
X = RNG.standard_normal((4, 9)).astype(np.float32)
I = RNG.integers(-60, 60, (4, 9)).astype(np.int32)
SEQ = np.sort(RNG.standard_normal(11)).astype(np.float32)

CASES = [
    ("lgamma", lambda a: (a * 4).lgamma(), (X,)),
    ("digamma", lambda a: (a * 4).digamma(), (X,)),
    ("polygamma", lambda a: tp.polygamma(2, a.abs() + 0.3), (X,)),
    ("erfinv", lambda a: (a / 3).tanh().erfinv(), (X,)),
    ("gcd", lambda a, b: a.gcd(b), (I, I[::-1].copy())),
    ("lcm", lambda a, b: tp.lcm(a, b), (I, I[::-1].copy())),
    ("logcumsumexp", lambda a: a.logcumsumexp(1), (X,)),
    ("cummax", lambda a: tuple(a.cummax(1)), (X,)),
    ("cummin", lambda a: tuple(a.round().cummin(0)), (X,)),
    ("kthvalue", lambda a: tuple(a.kthvalue(3, 1)), (X,)),
    ("mode", lambda a: tuple(a.mode(1)), (I // 20,)),
    ("nanmedian", lambda a: tuple(a.nanmedian(1)), (X,)),
    ("searchsorted", lambda s, v: tp.searchsorted(s, v), (SEQ, X)),
    ("bucketize", lambda s, v: tp.bucketize(v, s, right=True), (SEQ, X)),
    ("unfold", lambda a: a.unfold(1, 3, 2) * 2, (X,)),
]


def _check(got, want):
    if isinstance(want, tuple):
        for g, w in zip(got, want):
            _check(g, w)
        return
    assert got.is_cuda and got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.cpu().numpy().astype(np.float64),
                               want.numpy().astype(np.float64), rtol=2e-5, atol=2e-5,
                               equal_nan=True)


@pytest.mark.parametrize("name,fn,args", CASES, ids=[c[0] for c in CASES])
def test_eager_and_compiled_on_cuda(name, fn, args):
    want = fn(*[tp.tensor(a) for a in args])
    before = dict(tp.cuda.host_fallbacks())
    got = fn(*[tp.tensor(a).cuda() for a in args])
    _check(got, want)
    after = tp.cuda.host_fallbacks()
    # the eager call runs the op's generated kernel on the device
    assert after.get(name, 0) == before.get(name, 0), after
    cf = tp.compile(fn, strict_native=True)
    _check(cf(*[tp.tensor(a).cuda() for a in args]), want)
