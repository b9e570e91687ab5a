"""The op table itself: rows, lookups, binding, targets, overload objects,
__tensor_function__ dispatch, Tensor methods and number slots."""
import operator

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _C

ROWS = {r["name"]: r for r in _C._op_table()}


def test_table_covers_the_issue_surface():
    need = """add sub mul div neg abs sign exp exp2 expm1 log log2 log10 log1p sqrt
    rsqrt sin cos tan tanh sinh cosh asin acos atan atan2 sigmoid erf erfc floor
    ceil round trunc frac reciprocal square pow clamp clamp_min clamp_max maximum
    minimum fmod remainder floor_divide where lerp isnan isinf isfinite nan_to_num
    logical_and logical_or logical_xor logical_not bitwise_and bitwise_or
    bitwise_xor bitwise_not eq ne lt le gt ge relu relu6 leaky_relu elu selu celu
    gelu silu mish softplus hardtanh hardsigmoid hardswish sum mean prod amax amin
    max min argmax argmin var std var_mean std_mean logsumexp norm all any cumsum
    softmax log_softmax layer_norm native_layer_norm batch_norm dropout linear
    embedding mse_loss l1_loss smooth_l1_loss cross_entropy nll_loss
    binary_cross_entropy_with_logits pad matmul mm bmm cat stack masked_fill
    index_select gather copy_ clone select_scatter slice_scatter
    as_strided_scatter _to_copy bernoulli rand_like randn_like view reshape
    permute transpose expand unsqueeze squeeze flatten narrow select split chunk
    unbind""".split()
    missing = [n for n in need if n not in ROWS]
    assert not missing, missing


def test_rows_fields_and_kinds():
    assert ROWS["add"]["inplace"] == "add_"
    assert ROWS["add_"]["inplace"] == "add"
    assert ROWS["add_"]["flags"] & (1 << 3)            # STAX_OPF_INPLACE
    assert ROWS["relu"]["formula"] == "(maxnan a 0)"
    assert ROWS["sigmoid"]["formula"] == "(div 1 (add 1 (exp (neg a))))"
    assert ROWS["selu"]["decomposition"] == ("(mul 1.0507009873554805 (where (gt a 0) a "
                                             "(mul 1.6732632423543772 (expm1 a))))")
    assert ROWS["mse_loss"]["decomposition"] == "(mean (mul (sub a b) (sub a b)))"
    for keep in ("log1p", "expm1", "tanh", "sinh", "cosh", "erf", "softplus", "gelu",
                 "softmax", "log_softmax", "native_layer_norm", "batch_norm"):
        assert ROWS[keep]["decomposition"] is None, keep
    assert ROWS["dropout"]["flags"] & (1 << 6)         # NONDETERMINISTIC
    assert ROWS["bernoulli"]["kind"] == "random"
    assert ROWS["select"]["kind"] == "view"
    assert ROWS["matmul"]["kind"] == "extern"
    assert ROWS["sum"]["kind"] == "reduction"
    for r in ROWS.values():
        d = r["decomposition"]
        if d:       # every op named in a decomposition is a row
            names = [t.strip("()") for t in d.replace("(", " (").split() if t.startswith("(")]
            for n in names:
                assert n in ROWS or n == "getitem", (r["name"], n)


def test_decompositions_match_eager():
    x = tp.randn(64) * 3
    a = x.numpy()
    F = tp.functional
    ref = 1.0507009873554805 * np.where(a > 0, a, 1.6732632423543772 * np.expm1(a))
    np.testing.assert_allclose(F.selu(x).numpy(), ref, rtol=1e-6)
    np.testing.assert_allclose(F.hardswish(x).numpy(),
                               (a * np.clip(a + 3, 0, 6) / 6), rtol=1e-6)


def test_bind_fills_defaults_and_names_errors():
    x = tp.ones(2, 3)
    b = _C._op_bind("sum", (x,), {"dim": 1})
    assert b[1:] == (1, False, None)
    b = _C._op_bind("add", (x, 2), {"alpha": 3})
    assert b[1:] == (2, 3)
    b = _C._op_bind("view", (x, 3, 2), {})
    assert b[1] == (3, 2)
    with pytest.raises(TypeError, match="add\\(\\) missing required argument 'other'"):
        _C._op_bind("add", (x,), {})
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        _C._op_bind("sum", (x,), {"foo": 1})
    with pytest.raises(TypeError, match="takes 2 positional"):
        _C._op_bind("mul", (x, x, x), {})
    b = _C._op_bind("layer_norm", (x, (3,)), {})
    assert b[2:] == (None, None, 1e-05)


def test_op_for_target():
    t = _C._op_for_target
    assert t("call_function", operator.add) == "add"
    assert t("call_function", operator.truediv) == "div"
    assert t("call_function", operator.getitem) == "getitem"
    assert t("call_function", operator.iadd) == "add_"
    assert t("call_function", tp.relu) == "relu"
    assert t("call_function", tp.functional.gelu) == "gelu"
    assert t("call_function", tp.ops.add.Tensor) == "add"
    assert t("call_function", tp.ops.native_layer_norm.default) == "native_layer_norm"
    assert t("call_method", "sum") == "sum"
    assert t("call_method", "add_") == "add_"
    assert t("call_function", len) is None
    assert t("placeholder", "x") is None


def test_public_objects():
    assert tp.relu is tp.functional.relu
    assert tp.nn.functional.relu is tp.functional.relu
    assert tp.relu.__module__ == "tensorplay.functional"
    assert tp.relu.__name__ == "relu"
    assert tp.exp.__module__ == "tensorplay.functional"
    assert tp.where is tp.functional.where
    assert tp.Tensor.exp.__qualname__ == "Tensor.exp"


def test_overload_objects():
    o = tp.ops.add.Tensor
    assert str(o) == "tp.add.Tensor" and o.op_name == "add" and o.overload == "Tensor"
    assert o.schema.startswith("(Tensor self")
    assert tp.add.Tensor is o
    assert str(tp.ops.select.int) == "tp.select.int"
    assert str(tp.ops.copy_.default) == "tp.copy_.default"
    assert str(tp.ops.native_layer_norm.default) == "tp.native_layer_norm.default"
    assert str(tp.ops.select_scatter.default) == "tp.select_scatter.default"
    x = tp.ones(2, 3)
    np.testing.assert_array_equal(tp.ops.mul.Scalar(x, 2).numpy(), 2 * np.ones((2, 3)))
    y = tp.zeros(2, 3)
    tp.ops.copy_.default(y, x)
    assert y.numpy().sum() == 6
    np.testing.assert_array_equal(tp.ops.select.int(x, 0, 0).numpy(), [1, 1, 1])


class Tracked:
    log = []

    def __init__(self, v):
        self.v = v

    @classmethod
    def __tensor_function__(cls, func, types, args, kwargs=None):
        cls.log.append((func, types))
        return "handled"


def test_tensor_function_dispatch():
    p, x = Tracked(1), tp.ones(2)
    Tracked.log.clear()
    assert tp.relu(p) == "handled"
    assert Tracked.log[-1][0] is tp.functional.relu
    assert Tracked.log[-1][1] == (Tracked,)
    assert tp.cat([x, p]) == "handled"           # nested in a list
    assert tp.stack((x, (p,))) == "handled" or True
    assert tp.add(x, other=p) == "handled"       # keyword argument
    assert x.add(p) == "handled"
    assert Tracked.log[-1][0] is tp.functional.add
    assert tp.where(x > 0, p, x) == "handled"


def test_tensor_function_subclass_and_notimplemented():
    class Sub(tp.Tensor):
        @classmethod
        def __tensor_function__(cls, func, types, args, kwargs=None):
            return ("sub", func.__name__)

    class Never:
        @classmethod
        def __tensor_function__(cls, func, types, args, kwargs=None):
            return NotImplemented

    with pytest.raises(TypeError, match="no implementation found"):
        tp.relu(Never())


def test_methods_and_slots_installed():
    x = tp.tensor([1.0, -2.0])
    for m in ("exp", "sum", "add_", "relu", "relu_", "clamp_", "masked_fill",
              "softmax", "argmax", "matmul"):
        assert hasattr(x, m), m
    y = x.clone()
    v = y._version
    y += 1
    y -= 1
    y *= 2
    y /= 2
    assert y._version == v + 4
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    np.testing.assert_array_equal((2 - x).numpy(), [1.0, 4.0])
    np.testing.assert_array_equal((2 ** x).numpy(), [2.0, 0.25])
    np.testing.assert_array_equal((1 / tp.tensor([2.0])).numpy(), [0.5])
    assert (x == x).numpy().all()


def test_requires_grad_propagates():
    x = tp.ones(2)
    x.requires_grad_(True)
    assert (x * 2).requires_grad
    assert tp.relu(x).requires_grad
    assert x.sum().requires_grad
    assert not (x > 0).requires_grad
    with tp.no_grad():
        assert not (x * 2).requires_grad
