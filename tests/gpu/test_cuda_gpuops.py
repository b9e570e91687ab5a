"""On CUDA tensors, the paths added for ops that used to go through the host
(issue 14): float16/bfloat16 matmul through cuBLAS GemmEx, and the kernels and
compositions of tensorplay.cuda._native checked without a GPU by
tests/test_cuda_gpuops_host.py. Each equals CPU eager and counts no host
fallback.

    sh scripts/gpu/build.sh .gpu python3 -m pytest tests/gpu   # on a GPU machine
"""
import numpy as np
import pytest

import tensorplay as tp
from tensorplay.cuda import _native

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

from _cuda_data import data  # noqa: E402


def same(got, want, tol=None):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w, tol)
        return
    assert got.is_cuda, "result left the device"
    assert tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    g, w = got.cpu(), want
    if str(w.dtype).endswith("bfloat16"):
        g, w = g.float(), w.float()
    g, w = g.numpy(), w.numpy()
    if tol is None or g.dtype.kind in "biu":
        assert np.array_equal(g, w, equal_nan=True), (g, w)
    else:
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                   rtol=tol, atol=tol, equal_nan=True)


class on_device:
    """no host fallback for the ops named, and nothing new served by the
    host through the tensor room's hook"""

    def __init__(self, *names):
        self.names = names

    def __enter__(self):
        self.before = dict(tp.cuda.host_fallbacks())
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            tp.cuda.synchronize()
            after = tp.cuda.host_fallbacks()
            for n in self.names:
                assert after.get(n, 0) == self.before.get(n, 0), f"{n} ran on the host"


# ------------------------------------------------------------ cuBLAS GemmEx

@pytest.mark.parametrize("dtype", [tp.float16, tp.bfloat16])
def test_half_matmul_runs_on_cublas_with_float32_accumulation(dtype, monkeypatch):
    assert tp._C.cublas_available()

    def no_kernel(a, b):
        raise AssertionError("half matmul took the naive kernel, not GemmEx")

    monkeypatch.setattr(_native, "bmm_kernel", no_kernel)
    rng = np.random.default_rng(0)
    # a long k: float16 accumulation would drift far beyond one rounding
    a64 = rng.standard_normal((64, 4096))
    b64 = rng.standard_normal((4096, 48))
    a = tp.tensor(a64.tolist()).to(dtype)
    b = tp.tensor(b64.tolist()).to(dtype)
    with on_device("matmul", "mm", "bmm", "linear"):
        got = (a.cuda() @ b.cuda())
        assert got.dtype == dtype and got.is_cuda
        exact = a.double().numpy() @ b.double().numpy()
        err = np.abs(got.cpu().double().numpy() - exact).max()
        scale = np.abs(exact).max()
        # one rounding of the float32 sum to the result's dtype, plus float32 noise
        assert err <= scale * (2 ** -10 if dtype == tp.float16 else 2 ** -7), err
        tol = 2e-2 if dtype == tp.bfloat16 else 2e-3
        same(got, a @ b, tol * 4)
        same(tp.bmm(a.reshape(4, 16, 4096).cuda(), b.reshape(4, 1024, 48).cuda()),
             tp.bmm(a.reshape(4, 16, 4096), b.reshape(4, 1024, 48)), tol * 4)
        w = data((7, 4096), dtype, seed=3, special=False)
        bias = data((7,), dtype, seed=4, special=False)
        same(tp.nn.functional.linear(a.cuda(), w.cuda(), bias.cuda()),
             tp.nn.functional.linear(a, w, bias), 0.1)
        same(a[:5, :8].cuda().t() @ a[:5, :9].cuda(), a[:5, :8].t() @ a[:5, :9], tol)
        z = tp.zeros(3, 0, dtype=dtype)
        same(z.cuda() @ z.t().cuda(), z @ z.t())
