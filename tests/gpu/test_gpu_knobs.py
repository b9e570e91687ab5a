"""The NVRTC back end's off-by-default kernel knobs on a GPU, each setting
against the CPU (tests/test_nvrtc_kernel_shapes.py checks their text and
PTX without one):

- TENSORPLAY_NVRTC_VEC=1: 16-byte vector loads and stores in row loops
  (rows aligned to four elements; the others, and the rest of a row past
  its last whole vector, run the scalar loops);
- TENSORPLAY_NVRTC_ONEPASS=1: softmax/log_softmax's max and sum of exp in
  one row loop (online rescaling), NaN/inf rows as the two loops give;
- TENSORPLAY_NVRTC_WARP_ROW=1024: rows of up to 1024 points one warp each;
- TENSORPLAY_NVRTC_THREADS=512/1024: blocks that size, where rows whose
  length is a multiple of 4 * the block size keep their row in registers.

The knobs are read when a kernel is rendered, so each test sets them and
compiles a new function (the compile cache off: its tag names the knobs,
but the test should not depend on it).

    sh scripts/gpu/build.sh .gpu python3 -m pytest tests/gpu   # on a GPU machine
"""
import numpy as np
import pytest

import tensorplay as tp

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

F = tp.nn.functional

SETTINGS = {
    "default": {},
    "vec": {"TENSORPLAY_NVRTC_VEC": "1"},
    "onepass": {"TENSORPLAY_NVRTC_ONEPASS": "1"},
    "vec_onepass_warprow": {"TENSORPLAY_NVRTC_VEC": "1", "TENSORPLAY_NVRTC_ONEPASS": "1",
                            "TENSORPLAY_NVRTC_WARP_ROW": "1024"},
    # blocks of 512 / 1024 threads: rows of 2048, 8192 and 16384 float32
    # points (aligned) take the register row path (nvrtc_render.c)
    "threads512": {"TENSORPLAY_NVRTC_THREADS": "512"},
    "threads1024_onepass": {"TENSORPLAY_NVRTC_THREADS": "1024", "TENSORPLAY_NVRTC_ONEPASS": "1"},
}

OPS = {
    "softmax": lambda x, g, b: F.softmax(x, -1),
    "log_softmax": lambda x, g, b: F.log_softmax(x, -1),
    "layer_norm": lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b),
    "var_std_lse": lambda x, g, b: x.var(-1) + x.std(-1) + x.logsumexp(-1),
    "centered": lambda x, g, b: x - x.mean(-1, keepdim=True) * g,
    "sum_amax": lambda x, g, b: x.sum(-1) + x.amax(-1),
}

SUMS = ("var_std_lse", "sum_amax")   # reductions: error grows with the row
ROWS = [1, 3, 31, 32, 33, 127, 128, 1000, 2048, 4097, 8192, 16384]
TOL = {np.float16: (2e-2, 2e-2), np.float32: (1e-4, 1e-5), np.float64: (1e-10, 1e-12)}


def _data(n, dtype, seed, special):
    """7 rows of n (a slice of 7 x (n + 1) when `special` is "sliced": rows
    of every alignment); with special rows: all -inf, a NaN, a +inf, -inf
    among finite values"""
    rng = np.random.default_rng(seed)
    h = (rng.standard_normal((7, n + 1)) * 3).astype(dtype)
    if special == "specials":
        h[0] = -np.inf
        h[1, n // 2] = np.nan
        h[2, n // 3] = np.inf
        h[3, ::2] = -np.inf
        h[4, :] = 1000                      # large constant row
    x = tp.from_numpy(h)
    x = x[:, 1:] if special == "sliced" else x[:, :n].contiguous()
    g = tp.from_numpy(rng.standard_normal(n).astype(dtype))
    b = tp.from_numpy(rng.standard_normal(n).astype(dtype))
    return x, g, b


_WANT = {}


def _want(op, dtype, n, layout, x, g, b):
    """the CPU's compiled result (the same loop IR through LLVM), once per
    case for all the settings"""
    key = (op, np.dtype(dtype).name, n, layout)
    if key not in _WANT:
        assert tp.compiler.config.accumulated_cache_size_limit > 1 << 20
        _WANT[key] = tp.compile(lambda p, q, r: OPS[op](p, q, r))(x, g, b).numpy()
    return _WANT[key]


def _set(monkeypatch, setting):
    # a new compiled version per case: none may fall back to eager
    monkeypatch.setattr(tp.compiler.config, "accumulated_cache_size_limit", 1 << 30)
    monkeypatch.setattr(tp.compiler.config, "cache", False)
    for k in ("VEC", "ONEPASS", "WARP_ROW", "THREADS"):
        monkeypatch.delenv("TENSORPLAY_NVRTC_" + k, raising=False)
    for k, v in SETTINGS[setting].items():
        monkeypatch.setenv(k, v)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64],
                         ids=["f16", "f32", "f64"])
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_knob_setting_matches_cpu(setting, op, dtype, monkeypatch):
    fn = OPS[op]
    _set(monkeypatch, setting)
    rtol, atol = TOL[dtype]
    layouts = ["contiguous", "specials"] + (["sliced"] if dtype == np.float32 else [])
    for n in ROWS:
        for layout in layouts:
            x, g, b = _data(n, dtype, n, layout)
            want = _want(op, dtype, n, layout, x, g, b)
            got = tp.compile(lambda p, q, r: fn(p, q, r))(
                x.cuda(), g.cuda(), b.cuda()).cpu().numpy()
            msg = f"{setting} {op} n={n} {layout}"
            assert np.array_equal(np.isnan(got), np.isnan(want)), msg
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=rtol, atol=atol * (float(np.sqrt(n)) if op in SUMS
                                                               else 1.0),
                                       err_msg=msg)


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_softmax_special_rows_exactly_as_cpu_eager(setting, monkeypatch):
    """rows of -inf (NaN out), a NaN, +inf, -inf among finite values, at
    lengths around the vector and warp sizes"""
    _set(monkeypatch, setting)
    for n in (1, 4, 5, 33, 1000, 4097):
        x, _, _ = _data(n, np.float32, n, "specials")
        for fn in (F.softmax, F.log_softmax):
            want = fn(x, -1).numpy()
            got = tp.compile(lambda p: fn(p, -1))(x.cuda()).cpu().numpy()
            assert np.array_equal(np.isnan(got), np.isnan(want)), (setting, n)
            assert np.array_equal(np.isinf(got), np.isinf(want)), (setting, n)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layer_norm"])
def test_tuned_long_rows_match_cpu(op, dtype, monkeypatch):
    """600 rows of 16384: enough rows that the launch searches its block
    size (128..1024 threads; for float32 512 and 1024 the register row
    path), then keeps the fastest; every size gives the CPU's rows. A
    float64 kernel needing more registers than 1024 threads a block allow
    runs smaller blocks (it failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)"""
    monkeypatch.setattr(tp.compiler.config, "cache", False)
    rng = np.random.default_rng(3)
    h = (rng.standard_normal((600, 16384)) * 4).astype(dtype)
    h[7, 5] = np.nan
    h[9] = -np.inf
    x = tp.from_numpy(h)
    fn = OPS[op]
    want = tp.compile(lambda p: fn(p, None, None))(x).numpy()
    cf = tp.compile(lambda p: fn(p, None, None))
    xc = x.cuda()
    for _ in range(2):                       # the searching call, then the kept size
        got = cf(xc).cpu().numpy()
        assert np.array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
