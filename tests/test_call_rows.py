"""Issue 12: call targets without an op row (method aliases, factories,
movedim/diagonal, zero_/fill_, size) are ops.def's STAX_CALL rows, resolved
to a key once; lowering switches on the key. Each spelling lowers natively
(strict_native) and matches eager."""
import numpy as np
import pytest

import tensorplay as tp

CASES = {
    "float": lambda x: (x * 4).int().float(),
    "double": lambda x: x.double() + 1,
    "half": lambda x: x.half() * 2,
    "long": lambda x: (x * 8).long(),
    "bool": lambda x: (x > 0.5).byte().bool(),
    "type_as": lambda x: x.type_as(x.double()) + 1,
    "zeros": lambda x: x + tp.zeros(2, 3),
    "ones": lambda x: x + tp.ones(2, 3),
    "full": lambda x: x * tp.full((2, 3), 2.5),
    "arange": lambda x: x + tp.arange(3),
    "movedim": lambda x: tp.movedim(x * 2, 0, 1),
    "moveaxis": lambda x: x.moveaxis(1, 0) + 1,
    "diagonal": lambda x: tp.diagonal(x * 2, 0, 0, 1),
    "diagonal_offset": lambda x: tp.diagonal(x * 2, 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_call_row_lowers_natively(name):
    fn = CASES[name]
    x = tp.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 7)
    want = fn(x)
    got = tp.compile(fn, strict_native=True)(x)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("method", ["zero_", "fill_"])
def test_fill_methods_write_their_constant(method):
    def fn(x):
        y = x * 2
        getattr(y, method)(*(() if method == "zero_" else (1.5,)))
        return y + x

    x = tp.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    want = fn(x)
    got = tp.compile(fn)(x)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_rand_factory_draws_like_eager():
    def fn(x):
        return x + tp.rand(2, 3) + tp.randn(2, 3)

    x = tp.ones(2, 3)
    tp.manual_seed(3)
    want = fn(x)
    tp.manual_seed(3)
    got = tp.compile(fn, strict_native=True)(x)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
