"""`t.data = v` inside a compiled function behaves as eager (issue 13: it
raised AttributeError on a traced tensor). A tensor the function made
itself (no grad) is rebound natively, even under strict_native; the .data
of an input, of a tensor read from outside the function or of one that
requires grad cannot be replayed by a program: that version runs eagerly
(torch.compile's graph break), and strict_native raises NativeCompileError
naming the line."""
import re
import warnings

import pytest

import tensorplay as tp
from tensorplay import _C


def _intermediate(x):
    y = x * 2
    v = y[:2]                  # a view of the old values keeps them
    y.data = x + 10
    return y + 1, v * 1, y.shape


def _reshaped(x):
    y = x.sum(0)
    y.data = tp.zeros(2, 3)
    return y + x


@pytest.mark.parametrize("fn", [_intermediate, _reshaped])
def test_data_of_a_tensor_the_function_made_is_native(fn):
    c = tp.compile(fn, strict_native=True)
    for i in range(3):
        x = tp.full((2, 3), float(i))
        got, want = c(x), fn(x)
        if isinstance(want, tuple):
            assert got[0].tolist() == want[0].tolist()
            assert got[1].tolist() == want[1].tolist()
            assert got[2] == want[2]
        else:
            assert got.tolist() == want.tolist()


class _Holder:
    pass


_held = _Holder()
_held.t = tp.zeros(3)


def _input(x, w):
    w.data = x * 3
    return w + 1


def _lifted(x):
    _held.t.data = x * 3
    return x + 1


def _helper(box, x):
    box[0].data = x * 3
    return x + 1


def _grad(x):
    y = x * 2
    y.data = x + 10
    return y * 1


@pytest.mark.parametrize("case", ["input", "lifted", "helper", "grad"])
def test_data_of_a_tensor_from_outside_runs_eagerly(case):
    box = [tp.zeros(3)]
    if case == "input":
        fn, mk = _input, lambda i: (tp.full((3,), float(i)), tp.zeros(3))
        line = "w.data = x * 3"
    elif case == "lifted":
        fn, mk, line = _lifted, lambda i: (tp.full((3,), float(i)),), "_held.t.data = x * 3"
    elif case == "helper":
        fn = lambda x: _helper(box, x)          # noqa: E731
        mk, line = lambda i: (tp.full((3,), float(i)),), "box[0].data = x * 3"
    else:
        fn, line = _grad, "y.data = x + 10"
        mk = lambda i: (tp.full((3,), float(i), requires_grad=True),)   # noqa: E731
    c = tp.compile(fn)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for i in range(3):
            args = mk(i)
            ref = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)
            got = c(*args)
            if case == "lifted":
                assert _held.t.tolist() == [3.0 * i] * 3
            elif case == "helper":
                assert box[0].tolist() == [3.0 * i] * 3
            want = fn(*ref)
            assert got.tolist() == want.tolist()
            assert got.requires_grad == want.requires_grad
            assert [a.tolist() for a in args] == [a.tolist() for a in ref]
    assert any(".data" in str(x.message) and line in str(x.message) for x in w)
    cs = tp.compile(fn, strict_native=True)
    with pytest.raises(_C.NativeCompileError, match=re.escape(line)):
        cs(*mk(5))
