"""Loop splitting and index simplification of CPU kernels (lower_simplify.c)
and contiguous masked loads (llvm_codegen.c): a loop var reached through
div/mod (reshape of a permuted tensor, im2col, pooling windows) becomes two
loops, the exact div/mod disappear, and the values stay eager's."""
import re

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F


@pytest.fixture(autouse=True)
def _unlimited_compiles():
    cfg = tp.compiler.config
    old = cfg.accumulated_cache_size_limit
    cfg.accumulated_cache_size_limit = 1 << 30
    yield
    cfg.accumulated_cache_size_limit = old


def _run(fn, *args):
    cf = tp.compile(fn, strict_native=True)
    with tp.no_grad():
        got = cf(*args)
        ref = fn(*args)
    return cf, got, ref


def _close(got, ref):
    if isinstance(got, (tuple, list)):
        for g, r in zip(got, ref):
            _close(g, r)
        return
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def _divmod_free(cf):
    irs = [k.loop_ir for v in cf.versions for k in v.kernels]
    return all("//" not in ir and " % " not in ir for ir in irs), irs


def test_unfold_im2col_has_no_div_mod():
    x = tp.randn(4, 3, 10, 12)
    cf, got, ref = _run(lambda x: F.unfold(x, (3, 3), padding=1) * 2, x)
    _close(got, ref)
    ok, irs = _divmod_free(cf)
    assert ok, irs


def test_conv2d_strided_padded_matches_eager():
    x, w = tp.randn(3, 4, 9, 11), tp.randn(5, 4, 3, 3)
    cf, got, ref = _run(lambda x, w: F.conv2d(x, w, stride=2, padding=1), x, w)
    _close(got, ref)
    ok, irs = _divmod_free(cf)
    assert ok, irs


def test_reshape_of_permuted_tensor():
    x = tp.randn(6, 8, 10)
    cf, got, ref = _run(lambda x: x.permute(2, 0, 1).reshape(10, 48) + 1, x)
    _close(got, ref)
    ok, irs = _divmod_free(cf)
    assert ok, irs


def test_max_pool_window_reduction_split():
    # batch * channels = 32: the parallel dim keeps >= 8 chunks after its split
    x = tp.randn(8, 4, 8, 8)
    cf, got, ref = _run(lambda x: F.max_pool2d(tp.relu(x), 2), x)
    _close(got, ref)
    ok, irs = _divmod_free(cf)
    assert ok, irs


@pytest.mark.parametrize("red", ["sum", "amax", "argmax", "argmin"])
def test_reductions_over_split_vars_keep_order(red):
    # ties everywhere: argmax/argmin must still return the first index
    x = tp.tensor(np.random.default_rng(0).integers(0, 3, (4, 6, 5)).astype(np.float32))

    def f(x):
        y = x.permute(2, 0, 1).reshape(5, 24)
        return getattr(y, red)(1)

    cf, got, ref = _run(f, x)
    _close(got, ref)


def test_reshape_not_divisible_and_odd_sizes():
    x = tp.randn(7, 5, 3)
    cf, got, ref = _run(lambda x: x.transpose(0, 2).reshape(15, 7).sum(0) + x.reshape(-1)[:7], x)
    _close(got, ref)


def test_avg_pool_ceil_mode_padding():
    x = tp.randn(2, 3, 7, 9)
    cf, got, ref = _run(lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True,
                                               count_include_pad=False), x)
    _close(got, ref)


def test_dynamic_kernels_not_split():
    # symbolic kernels are shared across sizes: no size-dependent split
    f = lambda x: x.t().reshape(-1) + 1  # noqa: E731
    cf = tp.compile(f, dynamic=True)
    for s in ((3, 4), (6, 9), (17, 33)):
        x = tp.randn(*s)
        np.testing.assert_allclose(cf(x).numpy(), f(x).numpy())
    assert sum(len(v.kernels) for v in cf.versions) == 1


def _has_avx2():
    try:
        with open("/proc/cpuinfo") as fh:
            return " avx2" in fh.read()
    except OSError:
        return False


@pytest.mark.skipif(not _has_avx2(), reason="masked vector loads need AVX2 or AVX-512")
def test_padded_im2col_uses_contiguous_masked_loads():
    x = tp.randn(2, 4, 16, 16)
    cf, got, ref = _run(lambda x: F.unfold(x, (3, 3), padding=1), x)
    _close(got, ref)
    src = "".join(k.source for v in cf.versions for k in v.kernels)
    assert re.search(r"llvm\.masked\.load\.v\d+f32", src), "no contiguous masked load"
    assert "masked.gather" not in src


@pytest.mark.parametrize("op", ["max", "min"])
def test_small_max_min_reduction_unrolled_nan(op):
    # a 2x2-window max/min: unrolled into the outer loops, NaN propagating
    a = np.random.default_rng(1).standard_normal((32, 4, 8, 8)).astype(np.float32)
    a[0, 0, 2, 3] = np.nan
    x = tp.tensor(a)
    pool = (lambda x: F.max_pool2d(x, 2)) if op == "max" else (lambda x: -F.max_pool2d(-x, 2))
    cf, got, ref = _run(pool, x)
    np.testing.assert_array_equal(np.isnan(got.numpy()), np.isnan(ref.numpy()))
    assert np.isnan(got.numpy()[0, 0, 1, 1])
    _close(got, ref)
    irs = [k.loop_ir for v in cf.versions for k in v.kernels]
    assert not any("reduce over" in ir for ir in irs), irs


def test_small_sum_reduction_kept_as_loop():
    # sums are not unrolled (the blocked float sum's order stays)
    x = tp.randn(16, 4, 8, 8)
    cf, got, ref = _run(lambda x: F.avg_pool2d(x, 2), x)
    _close(got, ref)
    irs = [k.loop_ir for v in cf.versions for k in v.kernels]
    assert any("reduce over" in ir for ir in irs), irs


def test_dim_amax_with_argmax_not_unrolled():
    x = tp.randn(16, 3)
    cf, got, ref = _run(lambda x: x.max(1), x)
    _close(got, ref)


def test_identical_kernels_of_one_program_compile_once():
    # the same block twice (a model's repeated layers): its kernels'
    # machine code is compiled once and shared; the values stay eager's
    from tensorplay import _C
    w1, w2 = tp.randn(16, 16), tp.randn(16, 16)

    def block(x, w):
        y = tp.relu(x @ w)
        return tp.softmax(y * 0.5 + 1, -1)

    def f(x):
        return block(block(x, w1), w2)

    x = tp.randn(8, 16)
    c0 = _C._jit_compile_count()
    cf, got, ref = _run(f, x)
    _close(got, ref)
    n = len(cf.versions[0].kernels)
    names = [k.name for k in cf.versions[0].kernels]
    assert len(set(names)) == n           # each kernel keeps its own name
    assert _C._jit_compile_count() - c0 < n, (names, _C._jit_compile_count() - c0)
