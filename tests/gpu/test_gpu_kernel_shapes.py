"""The NVRTC kernels' loop shapes on a GPU (tests/test_nvrtc_kernel_shapes.py
checks their text without one): the row cache of multi-stage reductions
(on, off, and rows too long for it) and the unrolled loops' remainders,
each against the CPU.

    sh scripts/gpu/build.sh .gpu python3 -m pytest tests/gpu   # on a GPU machine
"""
import numpy as np
import pytest

import tensorplay as tp

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

F = tp.nn.functional

MULTI_STAGE = [
    lambda x, g, b: F.softmax(x, -1),
    lambda x, g, b: F.log_softmax(x, -1),
    lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b),
    lambda x, g, b: x.var(-1) + x.std(-1),
    lambda x, g, b: x - x.mean(-1, keepdim=True) * g,
]

# rows: one warp per row (short), unroll remainders at 256 and 1024
# threads, long rows that the cache holds (16384, 28160 = its 110 KiB of
# float32) and rows too long for it
ROWS = [1, 3, 129, 1025, 4099, 16384, 28160, 28161, 40000]


def _data(n, dtype, seed):
    rng = np.random.default_rng(seed)
    x = tp.from_numpy(rng.standard_normal((3, n)).astype(dtype) * 3)
    g = tp.from_numpy(rng.standard_normal(n).astype(dtype))
    b = tp.from_numpy(rng.standard_normal(n).astype(dtype))
    return x, g, b


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("which", range(len(MULTI_STAGE)))
def test_row_cache_on_and_off_match_each_other_and_the_cpu(which, dtype, monkeypatch):
    """the cached row loops read exactly the values global memory holds:
    results with the cache equal those without it bit for bit"""
    fn = MULTI_STAGE[which]
    monkeypatch.setattr(tp.compiler.config, "cache", False)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for n in ROWS:
        x, g, b = _data(n, dtype, seed=n)
        want = fn(x, g, b).numpy()
        monkeypatch.delenv("TENSORPLAY_NVRTC_ROW_CACHE", raising=False)
        on = tp.compile(lambda p, q, r: fn(p, q, r))(x.cuda(), g.cuda(), b.cuda()).cpu().numpy()
        monkeypatch.setenv("TENSORPLAY_NVRTC_ROW_CACHE", "0")
        off = tp.compile(lambda p, q, r: fn(p, q, r))(x.cuda(), g.cuda(), b.cuda()).cpu().numpy()
        assert np.array_equal(on, off, equal_nan=True), n
        np.testing.assert_allclose(on, want, rtol=tol, atol=tol * 10, err_msg=str(n))


def test_row_cache_in_eager_softmax_at_many_rows():
    """eager kernels launch resident too: many rows, a grid-stride over them"""
    rng = np.random.default_rng(7)
    x = tp.from_numpy(rng.standard_normal((3000, 2048)).astype(np.float32))
    np.testing.assert_allclose(F.softmax(x.cuda(), -1).cpu().numpy(),
                               F.softmax(x, -1).numpy(), rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize("n", [4 * 1081344 - 1, 4 * 1081344 + 5, 5 * 1081344 + 77])
def test_pointwise_unroll_remainders_match_cpu(n):
    """1081344 = 4224 blocks x 256 threads, the grid stride: sizes around
    whole groups of four strides"""
    x = tp.from_numpy(np.random.default_rng(n).standard_normal(n).astype(np.float32))
    f = tp.compile(lambda a: tp.where(a > 0, a * 2 + 1, -a))
    np.testing.assert_array_equal(f(x.cuda()).cpu().numpy(), f(x).numpy())


@pytest.mark.parametrize("which", [0, 2, 3])
def test_default_vector_loops_of_long_rows_match_the_scalar_loops(which, monkeypatch):
    """TENSORPLAY_NVRTC_VEC unset renders 16-byte vector loops for rows of
    2048 points or more (a per-row length and alignment check, scalar loops
    for the rest): around that bound, aligned and misaligned rows (a slice
    one element in), against the knob off and the CPU"""
    fn = MULTI_STAGE[which]
    monkeypatch.setattr(tp.compiler.config, "cache", False)
    for n in (2047, 2048, 2049, 4099, 16384):
        for sliced in (False, True):
            x, g, b = _data(n + 1, np.float32, seed=n)
            x = x[:, 1:] if sliced else x[:, :n].contiguous()
            g, b = g[:n].contiguous(), b[:n].contiguous()
            want = fn(x, g, b).numpy()
            got = {}
            for vec in (None, "0"):
                if vec is None:
                    monkeypatch.delenv("TENSORPLAY_NVRTC_VEC", raising=False)
                else:
                    monkeypatch.setenv("TENSORPLAY_NVRTC_VEC", vec)
                got[vec] = tp.compile(lambda p, q, r: fn(p, q, r))(
                    x.cuda(), g.cuda(), b.cuda()).cpu().numpy()
            for v in got.values():
                np.testing.assert_allclose(v, want, rtol=2e-5, atol=2e-4,
                                           err_msg=f"{n} sliced={sliced}")
