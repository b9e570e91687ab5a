"""Reliability (issue 13): edge cases found by trying to break main as a
user would -- each test is a repro that failed before its fix. Compiled
results are compared with eager's (and torch's, where installed)."""
import numpy as np
import pytest

import tensorplay as tp
from _helpers import isolate_compile_budget  # noqa: F401 - autouse

try:
    import torch
except ImportError:      # pragma: no cover
    torch = None


def _np(t):
    return np.asarray(t.float().numpy() if t.dtype in (tp.float16, tp.bfloat16) else t.numpy())


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int64", "bool"])
@pytest.mark.parametrize("shape,dim", [((0, 3), 0), ((3, 0), 1), ((0, 0), -1), ((2, 0, 3), 1)])
def test_cumsum_along_an_empty_dim_compiles(shape, dim, dtype):
    # the traced cumsum searched the first inf with an amin over the empty
    # dim, which raised "Expected reduction dim to have non-zero size"
    x = tp.zeros(*shape).to(getattr(tp, dtype))
    f = lambda x: x.cumsum(dim)
    e = f(x)
    c = tp.compile(f)(x)
    assert c.shape == e.shape == tuple(shape) and c.dtype == e.dtype
    if torch is not None:
        assert str(torch.zeros(*shape).to(getattr(torch, dtype)).cumsum(dim).dtype).split(".")[-1] \
            == str(c.dtype).split(".")[-1]


def test_cumsum_along_an_empty_dim_with_grad():
    x = tp.zeros(3, 0, requires_grad=True)
    c = tp.compile(lambda x: x.cumsum(1))(x)
    assert c.shape == (3, 0) and c.requires_grad
    c.sum().backward()
    assert x.grad.shape == (3, 0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_cumsum_dim_out_of_range_raises_eagers_index_error(dtype):
    # float32/float16 recursed through float64 and called .to() on the
    # NotImplemented of the bad dim: AttributeError instead of IndexError
    x = tp.ones(3).to(getattr(tp, dtype))
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.cumsum(5)
    with pytest.raises(IndexError, match="Dimension out of range"):
        tp.compile(lambda x: x.cumsum(5))(x)


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (0,)])
@pytest.mark.parametrize("fn", ["mul", "exp_sum", "transpose", "cumsum"])
def test_compiled_backward_of_an_empty_tensor(shape, fn):
    # the backward program refused the grad of an empty output: its strides
    # (0 for sum's broadcast grad) differed from the traced example's,
    # "input 1 has another type, shape, strides or dtype"
    f = {"mul": lambda x: x * 2, "exp_sum": lambda x: x.exp().sum(-1),
         "transpose": lambda x: (x * 2).t(), "cumsum": lambda x: x.cumsum(-1)}[fn]
    x = tp.zeros(*shape, requires_grad=True)
    y = tp.compile(f)(x)
    y.sum().backward()
    assert x.grad.shape == tuple(shape)
    x2 = tp.zeros(*shape, requires_grad=True)
    f(x2).sum().backward()
    assert x2.grad.shape == x.grad.shape
