"""var / std / var_mean / std_mean / layer_norm statistics in one pass over
the data (issue 16 item 5): one REDUCE stage of shifted sums per statistic,
exact enough on data with a large offset, where the naive one-pass formula
sum(x*x) - sum(x)**2 / n cancels catastrophically."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F


def _data(offset, shape=(16, 2048), seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) + offset).astype(np.float32)


@pytest.mark.parametrize("offset", [0.0, 1e4, -3e5])
def test_variance_family_large_offset(offset):
    x = _data(offset)
    x64 = x.astype(np.float64)
    cf = tp.compile(lambda a: (a.var(1), a.std(0), tp.var_mean(a, 1), tp.std_mean(a, 0, correction=0)),
                    strict_native=True)
    v, s, (vm_v, vm_m), (sm_s, sm_m) = cf(tp.from_numpy(x))
    tol = 1e-5 * max(1.0, abs(offset))
    np.testing.assert_allclose(v.numpy(), x64.var(1, ddof=1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(s.numpy(), x64.std(0, ddof=1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(vm_v.numpy(), x64.var(1, ddof=1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(vm_m.numpy(), x64.mean(1), rtol=1e-6, atol=tol)
    np.testing.assert_allclose(sm_s.numpy(), x64.std(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sm_m.numpy(), x64.mean(0), rtol=1e-6, atol=tol)
    # the naive one-pass formula in float32 is far off here (what the test guards)
    if abs(offset) >= 1e4:
        xs = x.astype(np.float32)
        naive = ((xs * xs).sum(1, dtype=np.float32)
                 - xs.sum(1, dtype=np.float32) ** 2 / xs.shape[1]) / (xs.shape[1] - 1)
        assert np.abs(naive - x64.var(1, ddof=1)).max() > 1e-2


def test_layer_norm_large_offset_vs_float64():
    x = _data(1e4, (8, 4096), seed=1)
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    got = tp.compile(lambda a: F.layer_norm(a, (4096,)), strict_native=True)(tp.from_numpy(x))
    # float32 input resolution at 1e4 is 1e-3: the error is the input's
    np.testing.assert_allclose(got.numpy(), ref, atol=2e-3)


def test_statistics_read_the_row_once():
    cf = tp.compile(lambda a: (a.var(1), F.layer_norm(a, (64,))), strict_native=True)
    cf(tp.randn(8, 64))
    ir = "\n".join(k.loop_ir for k in cf.versions[0].kernels)
    # var: one reduce loop; layer_norm: one reduce loop + the output loop
    assert ir.count("# reduce over") == 2, ir


def test_variance_edge_sizes():
    for n in (0, 1, 2, 3):
        x = tp.randn(4, n) + 100.0
        cf = tp.compile(lambda a: (a.var(1), a.var(1, correction=0)))
        got = cf(x)
        want = (x.var(1), x.var(1, correction=0))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-4, equal_nan=True)


def test_variance_of_rows_with_inf_and_nan_is_nan_as_eager():
    x = tp.from_numpy(np.array([[np.inf, 1.0, 2.0], [1.0, np.nan, 3.0], [1.0, 2.0, 3.0],
                                [-np.inf, np.inf, 0.0]], dtype=np.float32))
    cf = tp.compile(lambda a: (a.var(1), F.layer_norm(a, (3,))), strict_native=True)
    for g, w in zip(cf(x), (x.var(1), F.layer_norm(x, (3,)))):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5, equal_nan=True)
