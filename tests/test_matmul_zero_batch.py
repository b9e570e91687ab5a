"""Compiled matmul/linear with a zero-size batch dim broadcast against a
size-1 (or missing) one give torch's size 0 (issue 13: the own GEMM's batch
broadcast took max(0, 1) = 1, so tp.compile(lambda x: x @ w.t()) of a
(0, 3, 3) x returned (1, 3, 1): a fuzz N=20000 find)."""
import numpy as np
import pytest

import tensorplay as tp

CASES = [((0, 3, 3), (3, 1)), ((0, 3, 3), (1, 3, 2)), ((1, 3, 3), (0, 3, 2)),
         ((2, 0, 3, 3), (1, 3, 2)), ((0, 1, 3, 3), (4, 3, 2)), ((2, 3), (0, 3, 4)),
         ((0, 4, 3), (3, 2))]


@pytest.mark.parametrize("sa,sb", CASES)
def test_compiled_matmul_zero_batch(sa, sb):
    a, b = tp.ones(*sa), tp.ones(*sb)
    want = a @ b
    got = tp.compile(lambda x, y: x @ y)(a, b)
    assert tuple(got.shape) == tuple(want.shape)
    assert np.array_equal(got.numpy(), want.numpy())
    torch = pytest.importorskip("torch")
    assert tuple(want.shape) == tuple((torch.ones(*sa) @ torch.ones(*sb)).shape)


@pytest.mark.parametrize("shape", [(0, 3, 3), (2, 0, 3), (0, 3)])
def test_compiled_linear_zero_batch(shape):
    tp.manual_seed(0)
    m = tp.nn.Linear(3, 1, bias=False)
    x = tp.zeros(*shape)
    want = m(x)
    got = tp.compile(m, strict_native=True)(x)
    assert tuple(got.shape) == tuple(want.shape)
