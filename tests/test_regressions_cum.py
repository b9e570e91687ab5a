"""Eager cumsum/cumprod of float16 accumulate in float32 (as PyTorch and the
compiled kernels): a float16 running sum of ones stopped at 2048."""
import numpy as np

import tensorplay as tp


def test_cumsum_float16_accumulates_wide():
    a = np.ones((2, 5000), np.float16)
    a[:, 0] = 2000
    r = tp.tensor(a).cumsum(-1)
    assert r.dtype == tp.float16
    np.testing.assert_array_equal(r.numpy()[:, -1], [7000, 7000])
    c = tp.compile(lambda x: x.cumsum(-1))(tp.tensor(a))
    np.testing.assert_array_equal(c.numpy()[:, -1], r.numpy()[:, -1])


def test_cumprod_float16_accumulates_wide():
    a = np.full((3000,), 1.001, np.float16)
    r = tp.tensor(a).cumprod(0)
    assert r.dtype == tp.float16
    ref = np.cumprod(a.astype(np.float64))[-1]
    assert abs(float(r.numpy()[-1]) - ref) / ref < 2e-3
