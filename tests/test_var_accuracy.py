"""Eager var/std (and their _mean twins) accumulate as torch's CPU kernels do.

torch reduces float32 variance in double and by Welford's update, so a constant slice has
variance exactly 0 and a large offset costs no precision. The eager NumPy path used float32 and
sum/n for the mean: a constant row of three float64 values gave 1.8e-32 (fuzz seed 1170: `v1 *
-inf` was -inf eagerly and NaN compiled), and 10000 + 0.01*randn lost three digits.
"""
import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dim", [-1, 0, (0, 1)])
def test_constant_slices_have_zero_variance(dtype, dim):
    a = np.array([[0.4795697747998722], [2.4243053153506944], [0.8373539970286326]], dtype=dtype)
    x = tp.from_numpy(a).expand(3, 3)
    v = x.var(dim=dim).numpy()
    ref = torch.from_numpy(a).expand(3, 3).var(dim=dim).numpy()
    np.testing.assert_array_equal(v == 0, ref == 0)
    if dim == -1:
        assert np.all(v == 0)


def test_fuzz_seed_1170_compiled_matches_eager():
    def f(x):
        v1 = x.var(dim=-1)
        return v1 * float("-inf")

    a = np.array([[0.4795697747998722], [2.4243053153506944], [0.8373539970286326]])
    e = f(tp.from_numpy(a).expand(3, 3)).numpy()
    c = tp.compile(f, strict_native=True)(tp.from_numpy(a).expand(3, 3)).numpy()
    np.testing.assert_array_equal(np.isnan(e), np.isnan(c))
    assert np.all(np.isnan(e))          # 0 * -inf, as torch


@pytest.mark.parametrize("fn", ["var", "std"])
@pytest.mark.parametrize("shape,dim", [((4, 1000), -1), ((1000, 3), 0), ((7, 5, 33), (0, 2))])
def test_large_offset_float32_as_torch(fn, shape, dim):
    rng = np.random.default_rng(0)
    a = (10000 + rng.standard_normal(shape) * 0.01).astype(np.float32)
    got = getattr(tp.from_numpy(a), fn)(dim=dim).numpy()
    ref = getattr(torch.from_numpy(a), fn)(dim=dim).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    v, m = tp.var_mean(tp.from_numpy(a), dim=dim)
    tv, tm = torch.var_mean(torch.from_numpy(a), dim=dim)
    np.testing.assert_allclose(v.numpy(), tv.numpy(), rtol=1e-6)
    np.testing.assert_allclose(m.numpy(), tm.numpy(), rtol=1e-7)


@pytest.mark.parametrize("vals", [[1.0, float("inf")], [float("inf"), 1.0], [1.0, float("nan")],
                                  [float("-inf"), float("-inf")], [], [3.0]])
def test_special_values_as_torch(vals):
    got = tp.tensor(vals).var().numpy()
    ref = torch.tensor(vals).var().numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    assert got.dtype == np.float32


@pytest.mark.parametrize("dtype", [tp.float16, tp.bfloat16])
def test_half_types_keep_their_dtype(dtype):
    x = tp.ones(2, 3, dtype=dtype) * 3
    assert x.var(1).dtype == dtype and float(x.var((0, 1))) == 0.0
