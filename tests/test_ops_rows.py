"""Every row of the op table runs eagerly through tp.ops.<name>.<overload>
(and its public function / method where it has one)."""
import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _C

ROWS = _C._op_table()


def sample_args(name):
    x = tp.tensor(np.linspace(-0.9, 0.9, 12, dtype=np.float32).reshape(3, 4))
    i = tp.tensor(np.arange(12).reshape(3, 4) % 5)
    m = x > 0
    special = {
        "where": (m, x, 0.0), "masked_fill": (x, m, 1.0), "lerp": (x, x * 2, 0.5),
        "clamp": (x, -0.5, 0.5), "clip": (x, -0.5, 0.5), "clamp_min": (x, 0.0),
        "clamp_max": (x, 0.0), "pow": (x.abs(), 2.0),
        "bitwise_and": (i, 3), "bitwise_or": (i, 3), "bitwise_xor": (i, 3),
        "bitwise_not": (i,), "logsumexp": (x, 1), "cumsum": (x, 1),
        "softmax": (x, 1), "log_softmax": (x, 1), "_safe_softmax": (x, 1),
        "layer_norm": (x, (4,)),
        "native_layer_norm": (x, [4], None, None, 1e-5),
        "batch_norm": (x, tp.zeros(4), tp.ones(4)), "dropout": (x, 0.5, False),
        "embedding": (tp.tensor([0, 2]), x), "linear": (x, tp.ones(2, 4)),
        "mse_loss": (x, x * 0), "l1_loss": (x, x * 0), "smooth_l1_loss": (x, x * 0),
        "cross_entropy": (x, tp.tensor([0, 1, 3])),
        "nll_loss": (x, tp.tensor([0, 1, 3])),
        "binary_cross_entropy_with_logits": (x, (x > 0).float()),
        "pad": (x, (1, 1)), "matmul": (x, x.t()), "mm": (x, x.t()),
        "bmm": (x.unsqueeze(0), x.t().unsqueeze(0)), "cat": ([x, x], 0),
        "stack": ([x, x], 0), "index_select": (x, 1, tp.tensor([0, 2])),
        "gather": (x, 1, tp.tensor([[0], [1], [2]])), "copy_": (x.clone(), x),
        "select_scatter": (x, tp.zeros(4), 0, 1),
        "slice_scatter": (x, tp.zeros(3, 2), 1, 0, 2),
        "as_strided_scatter": (x, tp.zeros(2), (2,), (1,)),
        "setitem": (x.clone(), 0, tp.zeros(4)), "full_like": (x, 2.0),
        "getitem": (x, 1), "view": (x, [4, 3]), "reshape": (x, [4, 3]),
        "permute": (x, [1, 0]), "transpose": (x, 0, 1), "expand": (x[0:1], [3, 4]),
        "expand_as": (x, x), "unsqueeze": (x, 0), "squeeze": (x.unsqueeze(0),),
        "unflatten": (x, 1, (2, 2)), "narrow": (x, 1, 0, 2), "select": (x, 0, 1),
        "slice": (x, 1, 0, 2), "as_strided": (x, (2, 2), (1, 2)),
        "split": (x, 2, 1), "chunk": (x, 2, 1), "unbind": (x, 0),
        "bernoulli": ((x > 0).float(),), "uniform_": (x.clone(),), "normal_": (x.clone(),),
        "to": (x, tp.float64), "_to_copy": (x,), "alias": (x,), "max": (x,), "min": (x,),
        "var_mean": (x,), "std_mean": (x,), "div": (x, 2.0), "rsub": (x, 1.0),
        "floor_divide": (x, 0.3), "remainder": (x, 0.3), "fmod": (x, 0.3),
        "allclose": (x, x), "isclose": (x, x), "flip": (x, [0]), "roll": (x, 1, 1),
        "repeat": (x, [2, 1]), "topk": (x, 2), "cumprod": (x, 1),
        "index_add": (x, 0, tp.tensor([0, 2]), tp.ones(2, 4)),
        "index_add_": (x.clone(), 0, tp.tensor([0, 2]), tp.ones(2, 4)),
        "einsum": ("ij->ji", [x]), "alpha_dropout": (x, 0.5, False),
        "feature_alpha_dropout": (x, 0.5, False), "dropout1d": (x, 0.5, False),
        "dropout2d": (x.unsqueeze(0), 0.5, False),
        "dropout3d": (x.unsqueeze(0).unsqueeze(0), 0.5, False),
        "scatter": (x, 0, tp.tensor([[0, 1, 2, 0]]), x),
        "scatter_add": (x, 0, tp.tensor([[0, 1, 2, 0]]), x),
        "scatter_reduce": (x, 0, tp.tensor([[0, 1, 2, 0]]), x, "amax"),
        "index_copy": (x, 0, tp.tensor([2, 0]), tp.ones(2, 4)),
        "index_fill": (x, 1, tp.tensor([0, 2]), -1.0),
        "masked_select": (x, m), "repeat_interleave": (x, 2),
        "one_hot": (tp.tensor([0, 2, 1]),), "unfold": (x.reshape(1, 1, 3, 4), 2),
        "bitwise_left_shift": (i, 2), "bitwise_right_shift": (i, 1),
        "multinomial": (x.abs() + 0.1, 2),
        "polygamma": (1, x.abs() + 0.1), "gcd": (i, i * 3 + 1), "lcm": (i, i * 3 + 1),
        "logcumsumexp": (x, 1), "cummax": (x, 1), "cummin": (x, 0), "kthvalue": (x, 2),
        "searchsorted": (tp.tensor([-1.0, 0.0, 1.0]), x), "bucketize": (x, tp.tensor([0.0, 1.0])),
    }
    if name in special:
        return special[name]
    row = next(r for r in ROWS if r["name"] == name)
    base = name[:-1] if name.endswith("_") and name[:-1] in {r["name"] for r in ROWS} else None
    if base is not None:
        a = sample_args(base)
        return (a[0].clone(),) + tuple(a[1:])
    if row["arity"] >= 2:
        return (x, x * 0.5 + 0.25)
    if name.startswith("logical") or name in ("isnan", "isinf", "isfinite"):
        return (x,)
    return (x.abs() * 0.5 + 0.1,)


NEEDS_TENSOR_ROOM = set()   # rows with no eager entry point yet


@pytest.mark.parametrize("row", ROWS, ids=[r["name"] for r in ROWS])
def test_every_row_runs(row):
    name = row["name"]
    if name in NEEDS_TENSOR_ROOM:
        pytest.skip("implemented by the op-level graph only")
    args = sample_args(name)
    ovl = (row["overloads"] or "default").split(",")[0]
    packet = tp.ops.get(name)
    res = getattr(packet, ovl)(*args)
    assert res is not None or name == "setitem"
    f = getattr(tp.functional, name, None)
    if f is not None:
        res2 = f(*sample_args(name))
        if isinstance(res, tp.Tensor) and not (row["flags"] & (1 << 6)):
            np.testing.assert_allclose(res.detach().numpy().astype(np.float64),
                                       res2.detach().numpy().astype(np.float64),
                                       equal_nan=True)


def test_inplace_target_requires_grad_like_torch():
    """with grad mode on, an in-place op whose other operand requires grad
    makes its target require grad (and a non-leaf); no_grad, integer targets
    and targets that already require grad are left alone"""
    w = tp.ones(3, requires_grad=True)
    a, b, c, d = tp.ones(3), tp.ones(3), tp.ones(3), tp.zeros(())
    a.add_(w)
    b.copy_(w * 2)
    c += w
    d.fill_(w.sum())
    assert all(t.requires_grad and not t.is_leaf for t in (a, b, c, d))
    e = tp.ones(3)
    e.add_(1)
    assert not e.requires_grad and e.is_leaf
    with tp.no_grad():
        f = tp.ones(3)
        f.add_(w)
        f.copy_(w)
    assert not f.requires_grad
    g = tp.ones(3, dtype=tp.int64)
    g.add_(tp.ones(3, dtype=tp.int64))
    assert not g.requires_grad
    w2 = tp.ones(3, requires_grad=True)
    # torch refuses an in-place op on a leaf that requires grad (grad mode on)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used "
                                           "in an in-place operation."):
        w2.add_(1)
    assert w2.requires_grad and w2.is_leaf
    with tp.no_grad():
        w2.add_(1)
    assert w2.requires_grad and w2.is_leaf
    # the targets now carry the history of the write
    (a.sum() + b.sum() + c.sum() + d).backward()
    np.testing.assert_allclose(w.grad.numpy(), [5, 5, 5])
