"""Issue 12: lowering always takes the op-level graph. Views outside the op
table become as_strided there (lowered as an index map over the argument's
values), slice bounds stay as written (None, negative, a symbolic size) so
dynamic shapes get the slice their sizes give, and an op graph that holds
at its samples' sizes only (as_strided) is taken again for other sizes."""
import numpy as np
import pytest

import tensorplay as tp


def _close(got, want):
    assert tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def _diag_write(x):
    x.diagonal().mul_(2)
    return x + 0


AS_STRIDED = {
    "swapaxes": lambda x: (x + 1).swapaxes(0, 1) * 2,
    "as_strided": lambda x: (x + 1).as_strided((2, 3), (1, 2), 1) * 3,
    "swapaxes_3d": lambda x: (x * 2).reshape(2, 3, 6).swapaxes(0, 2) + 1,
}


@pytest.mark.parametrize("name", sorted(AS_STRIDED))
def test_as_strided_lowers_natively(name):
    fn = AS_STRIDED[name]
    x = tp.randn(6, 6)
    cf = tp.compile(fn, strict_native=True)
    _close(cf(x), fn(x))
    assert "as_strided" in str(cf.versions[0].op_graph)


@pytest.mark.parametrize("fn", [AS_STRIDED["swapaxes"], _diag_write],
                         ids=["swapaxes", "diagonal_write"])
def test_sample_sized_op_graph_is_taken_again_at_other_sizes(fn):
    cf = tp.compile(fn, dynamic=True)
    for n in (6, 7, 9, 6):
        x = tp.randn(n, n)
        x2 = x.clone()
        _close(cf(x), fn(x2))
        _close(x, x2)          # the write through the view reached x
    assert len(cf.versions) == 1


SLICES = {
    "step2": lambda x: x[:, ::2] * 2,
    "negative": lambda x: x[1:-1] + 1,
    "literal_stop": lambda x: x[:5] * 3,       # x[:5] is x only at 5 rows
    "size_node": lambda x: x[: x.size(0) - 1, 1:] + x.size(1),
    "select_size_node": lambda x: x[x.size(0) - 2] * 2,
}


@pytest.mark.parametrize("name", sorted(SLICES))
def test_slice_bounds_stay_symbolic(name):
    fn = SLICES[name]
    cf = tp.compile(fn, dynamic=True)
    for n in (5, 7, 9, 6):
        x = tp.randn(n, n + 1)
        _close(cf(x), fn(x))
    assert len(cf.versions) == 1


def test_op_graph_slice_keeps_the_written_bounds():
    cf = tp.compile(lambda x: x[1:-1, ::2] * 2)
    cf(tp.randn(6, 8))
    s = str(cf.versions[0].op_graph)
    assert "slice.Tensor(primals_1, 0, 1, -1, 1)" in s, s
