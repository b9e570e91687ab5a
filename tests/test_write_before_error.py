"""A compiled call that writes a global or an argument in place and then
raises leaves the write made, as eager does (the trace's sampled write was
undone with the trace; the call reruns eagerly and raises there). It was
lost: the global/argument kept its old value while eager's moved on."""
import numpy as np
import pytest

import tensorplay as tp


def _calls(f, state, make_arg, n):
    """(results or error names, the state after each call) over n calls"""
    out = []
    for i in range(n):
        try:
            r = f(make_arg(i)).numpy().tolist()
        except (ValueError, RuntimeError) as e:
            r = type(e).__name__
        out.append((r, state().numpy().tolist()))
    return out


@pytest.mark.parametrize("start", [0.0, 10.0])
def test_global_written_then_a_data_dependent_raise(start):
    def run(compiled):
        g = tp.full((3,), start)

        def f(x):
            g.add_(x)
            if g.sum() > 4:
                raise ValueError("big")
            return g * 1
        return _calls(tp.compile(f) if compiled else f, lambda: g, lambda i: tp.ones(3), 4)
    assert run(True) == run(False)


def test_argument_written_then_a_raise():
    def run(compiled):
        a = tp.zeros(3)

        def f(x):
            x.add_(1)
            if x.sum() > 4:
                raise ValueError("big")
            return x * 1
        return _calls(tp.compile(f) if compiled else f, lambda: a, lambda i: a, 3)
    assert run(True) == run(False)


def test_global_written_then_an_op_error():
    def run(compiled):
        g = tp.zeros(3)

        def f(x):
            g.add_(x)
            return x.reshape(7)
        return _calls(tp.compile(f) if compiled else f, lambda: g, lambda i: tp.ones(3), 2)
    got, want = run(True), run(False)
    assert got == want
    np.testing.assert_array_equal(np.array(got[-1][1]), 2.0)


G = tp.zeros(3)


def _module_global(x):
    G.add_(x)
    if G.sum() > 4:
        raise ValueError("big")
    return G * 1


def test_module_global_written_then_a_raise():
    G.zero_()
    want = _calls(_module_global, lambda: G, lambda i: tp.ones(3), 4)
    G.zero_()
    got = _calls(tp.compile(_module_global), lambda: G, lambda i: tp.ones(3), 4)
    assert got == want
