"""Tensor idioms a PyTorch user writes: ``v in t`` (the installed
__contains__ had no slot, so ``in`` iterated rows and raised "Boolean value
of Tensor with more than one value is ambiguous"), ``t.H``/``t.mH``/
``t.adjoint()`` with torch's errors."""
import pytest

import tensorplay as tp


def test_in_operator():
    x = tp.arange(12.0).reshape(3, 4)
    assert 5.0 in x and 5 in x and 100 not in x
    assert tp.tensor(7.0) in x
    assert True in (x > 10)
    assert 3 in tp.tensor(3) and 2 not in tp.tensor(3)
    with pytest.raises(RuntimeError, match="only supports Tensor or scalar"):
        "a" in x  # noqa: B015


def test_in_operator_parameter_subclass():
    p = tp.nn.Parameter(tp.tensor([1.0, 2.0]))
    assert 2.0 in p and 3.0 not in p


def test_H_mH_adjoint():
    x = tp.arange(6.0).reshape(2, 3)
    assert x.H.shape == (3, 2) and x.H.tolist() == x.T.tolist()
    b = tp.zeros(4, 2, 3)
    assert b.mH.shape == (4, 3, 2) and b.adjoint().shape == (4, 3, 2)
    with pytest.raises(RuntimeError, match=r"tensor.H is only supported on matrices \(2-D "
                                           r"tensors\). Got 1-D tensor."):
        tp.zeros(3).H
    with pytest.raises(RuntimeError, match="consider using tensor.mH"):
        b.H
    with pytest.raises(RuntimeError, match="tensor.mH is only supported on matrices or batches"):
        tp.zeros(3).mH


def test_H_under_compile():
    f = tp.compile(lambda a: a.mH @ a)
    x = tp.arange(6.0).reshape(2, 3)
    assert f(x).tolist() == (x.T @ x).tolist()
