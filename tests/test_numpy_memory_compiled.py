"""NumPy memory a compiled function wraps (tp.from_numpy, tp.as_tensor of
an array) is the caller's (issue 13): a write the trace makes through it is
journaled and undone like a write to any tensor the function did not make,
so each call writes it exactly once, as eager does; writes by the user
between calls are seen."""
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _C


@pytest.mark.parametrize("wrap", ["from_numpy", "as_tensor"])
def test_recorded_write_into_a_wrapped_array_happens_once_per_call(wrap):
    arr = np.zeros(3, dtype=np.float32)
    mk = getattr(tp, wrap)

    def f(x):
        t = mk(arr)
        t.add_(x)                 # recorded: x is traced
        return x * 2
    cf = tp.compile(f)
    cf(tp.ones(3))
    np.testing.assert_array_equal(arr, 1.0)
    cf(tp.ones(3))
    np.testing.assert_array_equal(arr, 2.0)
    arr[:] = 10                   # the user writes between calls
    cf(tp.ones(3))
    np.testing.assert_array_equal(arr, 11.0)


def test_copy_into_a_wrapped_array_and_return_it():
    arr = np.zeros(3, dtype=np.float32)

    def f(x):
        t = tp.from_numpy(arr)
        t.copy_(x * 3)
        return t
    cf = tp.compile(f, strict_native=True)
    out = cf(tp.ones(3))
    np.testing.assert_array_equal(arr, 3.0)
    assert np.shares_memory(out.numpy(), arr)      # as eager's: the array's memory
    out = cf(tp.full((3,), 2.0))
    np.testing.assert_array_equal(arr, 6.0)


def test_write_into_a_wrapped_array_with_no_traced_operand_once_per_call():
    # the wrapped tensor is traced (held by reference): its add_(1) is
    # recorded, made by the program once per call, strict_native too (it
    # ran eagerly: every call of the version, strict refused)
    arr = np.zeros(3, dtype=np.float32)

    def f(x):
        tp.from_numpy(arr).add_(1)
        return x * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        cf = tp.compile(f)
        cf(tp.ones(3))
        np.testing.assert_array_equal(arr, 1.0)
        cf(tp.ones(3))
    np.testing.assert_array_equal(arr, 2.0)
    arr2 = np.zeros(3, dtype=np.float32)

    def g(x):
        tp.from_numpy(arr2).add_(1)
        return x * 2
    cg = tp.compile(g, strict_native=True)
    for i in range(3):
        assert cg(tp.ones(3)).tolist() == [2.0] * 3
        np.testing.assert_array_equal(arr2, float(i + 1))


def test_a_wrapped_array_read_sees_the_users_writes():
    arr = np.ones(3, dtype=np.float32)
    cf = tp.compile(lambda x: x + tp.from_numpy(arr))
    assert cf(tp.zeros(3)).tolist() == [1.0, 1.0, 1.0]
    arr[:] = 5
    assert cf(tp.zeros(3)).tolist() == [5.0, 5.0, 5.0]


@pytest.mark.parametrize("wrap", ["from_numpy", "as_tensor"])
def test_a_trace_time_computation_on_a_wrapped_array_sees_the_users_writes(wrap):
    # the wrapped tensor is the traced function's constant held by
    # reference: what it computes from it is recorded (it ran once, at
    # trace time, and its result was a stale constant)
    arr = np.ones(3, dtype=np.float32)
    mk = getattr(tp, wrap)
    cf = tp.compile(lambda x: x * mk(arr).sum(), strict_native=True)
    assert cf(tp.ones(3)).tolist() == [3.0, 3.0, 3.0]
    arr[:] = 2
    assert cf(tp.ones(3)).tolist() == [6.0, 6.0, 6.0]
    arr[1] = 5
    assert cf(tp.ones(3)).tolist() == [9.0, 9.0, 9.0]


def test_a_wrapped_array_computation_with_no_input():
    arr = np.arange(4, dtype=np.float64)
    cf = tp.compile(lambda: tp.from_numpy(arr).reshape(2, 2).sum(0) * 2, strict_native=True)
    assert cf().tolist() == [4.0, 8.0]
    arr *= 10
    assert cf().tolist() == [40.0, 80.0]


def test_a_converting_as_tensor_is_a_copy_made_at_trace_time_as_before():
    # as_tensor(arr, dtype=...) copies: that tensor is no view of arr
    arr = np.ones(3, dtype=np.float32)
    cf = tp.compile(lambda x: x + tp.as_tensor(arr, dtype=tp.float64))
    assert cf(tp.zeros(3, dtype=tp.float64)).tolist() == [1.0, 1.0, 1.0]
