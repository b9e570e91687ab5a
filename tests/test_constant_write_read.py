"""A traced in-place op that writes a tensor the trace holds as a constant
(reached through a helper's argument, which is not lifted) is made by the
program on every call. A read of that tensor by an op without a traced
operand, before or after the write, was computed once while tracing and
returned stale: such a read makes the version run eagerly (strict_native
raises, naming the read's line); a write with no such read stays native."""
import re
import warnings

import pytest

import tensorplay as tp
from tensorplay import _C


def _helper(state, x):
    state[0].add_(x)
    return state[0] + 0


def test_a_recorded_write_to_a_constant_then_its_read():
    state = [tp.zeros(3)]
    c = tp.compile(lambda x: _helper(state, x))
    ref_state = [tp.zeros(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(3):
            x = tp.full((3,), float(i + 1))
            want = _helper(ref_state, x)
            got = c(x)
            assert got.tolist() == want.tolist(), i
            assert state[0].tolist() == ref_state[0].tolist(), i


class _Stats:
    pass


def _update(stats, items, x):
    stats.total += x
    items[0] += x
    return x * 2


def test_in_place_operator_on_a_constant_keeps_the_callers_tensor():
    """x += proxy with x a tensor held as a constant (a plain object's
    attribute, a list item reached through a helper's argument) stays x, as
    eager's +=: it became an out-of-place proxy stored into the caller's
    object, and every later call raised 'a proxy was used after its trace
    ended'"""
    stats, items = _Stats(), [tp.zeros(3)]
    stats.total = tp.zeros(3)
    c = tp.compile(lambda x: _update(stats, items, x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(3):
            assert c(tp.ones(3)).tolist() == [2.0] * 3
            assert type(stats.total) is tp.Tensor and type(items[0]) is tp.Tensor
            assert stats.total.tolist() == [i + 1.0] * 3
            assert items[0].tolist() == [i + 1.0] * 3


def test_a_recorded_write_to_a_constant_with_no_eager_read_stays_native():
    """only a read the write makes stale needs eager: `stats.total += x`
    alone compiles under strict_native and writes the caller's tensor on
    every call"""
    stats = _Stats()
    stats.total = tp.zeros(3)
    items = [tp.zeros(3)]
    c = tp.compile(lambda x: _update(stats, items, x), strict_native=True)
    for i in range(3):
        assert c(tp.full((3,), 2.0)).tolist() == [4.0] * 3
        assert stats.total.tolist() == [2.0 * (i + 1)] * 3
        assert items[0].tolist() == [2.0 * (i + 1)] * 3


def _read_before_write(state, x):
    before = state[0] * 2          # an eager op: its value is the trace's
    state[0].add_(x)
    return before + x


def test_an_eager_read_before_a_recorded_write_sees_each_calls_value():
    state, ref = [tp.zeros(3)], [tp.zeros(3)]
    c = tp.compile(lambda x: _read_before_write(state, x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(3):
            x = tp.full((3,), float(i + 1))
            assert c(x).tolist() == _read_before_write(ref, x).tolist(), i
            assert state[0].tolist() == ref[0].tolist(), i


@pytest.mark.parametrize("fn, line", [(_helper, "return state[0] + 0"),
                                      (_read_before_write, "before = state[0] * 2")])
def test_strict_names_the_eager_read_of_a_written_constant(fn, line):
    state = [tp.zeros(3)]
    c = tp.compile(lambda x: fn(state, x), strict_native=True)
    with pytest.raises(_C.NativeCompileError, match=re.escape(line)):
        c(tp.ones(3))
    assert state[0].tolist() == [0.0] * 3          # the trace's write undone


_READERS = {
    "item": lambda t: t[0].item(),
    "tolist": lambda t: t.tolist()[0],
    "float": lambda t: float(t[0]),
    "numpy": lambda t: float(t.numpy()[0]),
    "clone": lambda t: t.clone()[0],
    "bool": lambda t: 2.0 if bool(t[0] > 1.5) else 1.0,
    "mask": lambda t: t[t > 0].sum(),
}


@pytest.mark.parametrize("how", sorted(_READERS))
def test_every_kind_of_eager_read_after_a_recorded_write_sees_each_call(how):
    """value reads (item, tolist, float, numpy) and copies (clone) do not go
    through an op call: the tensor room's read hook reports them too"""
    reader = _READERS[how]

    def h(state, x):
        state[0].add_(x)
        return x * reader(state[0])
    state, ref = [tp.zeros(3)], [tp.zeros(3)]
    c = tp.compile(lambda x: h(state, x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(3):
            x = tp.ones(3)
            assert c(x).tolist() == h(ref, x).tolist(), i
            assert state[0].tolist() == ref[0].tolist(), i
