"""Compiled var/std/var_mean/layer_norm agree with eager: float16 rows with a
spread past ~256 (squared deviations overflow float16: the statistics are
accumulated in float32) and corrections of n or more (divisor max(0, n - c))."""
import numpy as np
import pytest

import tensorplay as tp


def _same(e, c, atol):
    en, cn = e.numpy().astype(np.float64), c.numpy().astype(np.float64)
    assert en.shape == cn.shape
    np.testing.assert_allclose(cn, en, rtol=2e-3, atol=atol, equal_nan=True)


@pytest.mark.parametrize("fn", [
    lambda x: x.var(-1),
    lambda x: x.std(0, keepdim=True),
    lambda x: x.var(correction=0),
    lambda x: tp.var_mean(x, -1)[0],
    lambda x: tp.nn.functional.layer_norm(x, (7,)),
])
def test_float16_wide_rows(fn):
    rng = np.random.default_rng(0)
    a = tp.tensor((rng.standard_normal((3, 7)) * 100 + 1000).astype(np.float16))
    e = fn(a)
    c = tp.compile(fn, strict_native=True)(a)
    assert np.isfinite(c.numpy()).all()
    _same(e, c, atol=0.05)


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("fn", [
    lambda x: x.var(-1, correction=2),
    lambda x: x.std(-1, correction=3),
    lambda x: tp.var_mean(x, -1, correction=2)[0],
])
def test_correction_at_least_n(fn, dynamic):
    rng = np.random.default_rng(1)
    cf = tp.compile(fn, dynamic=dynamic)
    for n in (1, 2, 3):
        a = tp.tensor(rng.standard_normal((4, n)).astype(np.float32))
        _same(fn(a), cf(a), atol=1e-5)
