"""In-place unary ops on strided views write each element's own result
(issue 13: x[:, 1].neg_() of a float32/int32 tensor wrote -x[0, 1:4], a
silent wrong answer: NumPy 2.4's SIMD negative reads an in == out strided
view as contiguous; eager computes such writes into a temporary)."""
import numpy as np
import pytest

import tensorplay as tp

OPS = ["neg_", "abs_", "square_", "sqrt_", "exp_", "sign_", "floor_", "relu_",
       "sigmoid_", "tanh_", "reciprocal_", "trunc_", "ceil_", "round_"]
DTYPES = ["float32", "int32", "float64", "float16", "int64", "int16", "int8", "bfloat16"]
VIEWS = {"column": lambda x: x[..., 1], "transposed_row": lambda x: x.transpose(0, 2)[2],
         "step": lambda x: x[:, ::2, 1:], "expanded_free": lambda x: x[0, :, 1::3]}


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_inplace_unary_on_a_strided_view(op, dtype, view):
    base = tp.arange(-12, 12).reshape(2, 3, 4).to(getattr(tp, dtype))
    x = base.clone()
    v = VIEWS[view](x)
    try:
        want = getattr(v.clone(), op[:-1])()
    except Exception as e:      # noqa: BLE001 - the op's own dtype error
        with pytest.raises(type(e)):
            getattr(v, op)()
        return
    if want.dtype != v.dtype:
        return                  # not an in-place op for this dtype
    got = getattr(v, op)()
    assert got is v
    np.testing.assert_array_equal(v.float().numpy(), want.float().numpy())
    # the elements outside the view are untouched
    mask = tp.ones(2, 3, 4, dtype=tp.bool)
    VIEWS[view](mask).fill_(False)
    np.testing.assert_array_equal(x[mask].float().numpy(), base[mask].float().numpy())


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_neg_of_a_column_against_torch(dtype):
    torch = pytest.importorskip("torch")
    x = tp.arange(12).reshape(3, 4).to(getattr(tp, dtype))
    y = torch.arange(12).reshape(3, 4).to(getattr(torch, dtype))
    x[:, 1].neg_()
    y[:, 1].neg_()
    np.testing.assert_array_equal(x.numpy(), y.numpy())
