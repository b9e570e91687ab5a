"""Errors raised by dead code (issue 13): the compiled call raises what eager
raises even when the failing statement's result is never used, on the first
call (trace) and on later calls that reuse a compiled version (values the
guards do not fix, sizes of a dynamic-shape version); with two failing
statements, the first one's error."""
import warnings

import pytest

tp = pytest.importorskip("tensorplay")
F = tp.nn.functional


def _outcome(fn, args):
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001
        return type(e), str(e).splitlines()[0]
    return None, None


def _same_as_eager(fn, warm, bad, **kw):
    cf = tp.compile(fn, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for a in warm:
            cf(*a)
        want = _outcome(fn, bad)
        got = _outcome(cf, bad)
    assert want[0] is not None, "the repro must raise eagerly"
    assert got == want


# (dead statement, inputs of a first call that passes, inputs that make it raise)
VALUE_CASES = {
    "floordiv": (lambda x, i: (x // i, x + 1)[1], [tp.tensor([7, 3]), tp.tensor([2, 1])],
                 [tp.tensor([7, 3]), tp.tensor([0, 1])]),
    "remainder": (lambda x, i: (x % i, x + 1)[1], [tp.tensor([7, 3]), tp.tensor([2, 1])],
                  [tp.tensor([7, 3]), tp.tensor([0, 1])]),
    "fmod": (lambda x, i: (tp.fmod(x, i), x + 1)[1], [tp.tensor([7, 3]), tp.tensor([2, 1])],
             [tp.tensor([7, 3]), tp.tensor([0, 1])]),
    "div_trunc": (lambda x, i: (x.div(i, rounding_mode="trunc"), x + 1)[1],
                  [tp.tensor([7, 3]), tp.tensor([2, 1])], [tp.tensor([7, 3]), tp.tensor([0, 1])]),
    "index_tensor": (lambda x, i: (x[i], x + 1)[1], [tp.ones(3), tp.tensor([0, 1])],
                     [tp.ones(3), tp.tensor([0, 5])]),
    "index_tensor_neg": (lambda x, i: (x[:, i], x + 1)[1], [tp.ones(2, 3), tp.tensor([0, 1])],
                         [tp.ones(2, 3), tp.tensor([0, -5])]),
    "index_select": (lambda x, i: (x.index_select(0, i), x + 1)[1], [tp.ones(3), tp.tensor([0, 1])],
                     [tp.ones(3), tp.tensor([0, 5])]),
    "gather": (lambda x, i: (x.gather(0, i), x + 1)[1], [tp.ones(3), tp.tensor([0, 1])],
               [tp.ones(3), tp.tensor([0, 5])]),
    "embedding": (lambda w, i: (F.embedding(i, w), w + 1)[1], [tp.ones(3, 2), tp.tensor([0, 1])],
                  [tp.ones(3, 2), tp.tensor([0, 5])]),
    "one_hot": (lambda x, i: (F.one_hot(i, 3), x + 1)[1], [tp.ones(3, 2), tp.tensor([0, 1])],
                [tp.ones(3, 2), tp.tensor([0, 5])]),
    "scatter": (lambda x, i: (x.scatter(0, i, 1.0), x + 1)[1], [tp.ones(3), tp.tensor([0, 1])],
                [tp.ones(3), tp.tensor([0, 5])]),
    "index_add": (lambda x, i: (x.index_add(0, i, tp.ones(2)), x + 1)[1], [tp.ones(3), tp.tensor([0, 1])],
                  [tp.ones(3), tp.tensor([0, 5])]),
}


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("case", sorted(VALUE_CASES))
def test_dead_op_failing_on_values_raises_on_a_later_call(case, strict):
    fn, ok, bad = VALUE_CASES[case]
    _same_as_eager(fn, [ok], bad, strict_native=strict)


SIZE_CASES = {
    "view": (lambda x: (x.view(4, -1), x + 1)[1], [[tp.ones(12)], [tp.ones(16)]], [tp.ones(10)]),
    "int_index": (lambda x: (x[5], x + 1)[1], [[tp.ones(12)], [tp.ones(13)]], [tp.ones(4)]),
    "amax_empty": (lambda x: (x.amax(0), x + 1)[1], [[tp.ones(12)], [tp.ones(13)]], [tp.ones(0)]),
}


@pytest.mark.parametrize("dynamic", [True, None])
@pytest.mark.parametrize("case", sorted(SIZE_CASES))
def test_dead_op_failing_at_another_size_of_a_dynamic_version(case, dynamic):
    # dynamic=None: the second size makes the dims symbolic (automatic dynamic)
    fn, warm, bad = SIZE_CASES[case]
    _same_as_eager(fn, warm, bad, dynamic=dynamic)


def test_first_failing_statement_wins_over_a_later_output():
    def f(x, y):
        x[1:3:2, -4]                    # dead, fails first
        return y.view(4, 1, 3)          # an output, fails too
    args = [tp.ones(3, 0), tp.ones(3, 0)]
    for kw in ({}, {"strict_native": True}):
        _same_as_eager(f, [], args, **kw)
    with pytest.raises(IndexError, match="index -4 is out of bounds"):
        tp.compile(f)(*args)


def test_first_failing_statement_wins_over_a_later_gate():
    def f(x):
        x.amax((0, 1))                  # dead, fails first
        if x.amax() > 0:                # a data gate on a failing value
            return x + 1
        return x - 1
    for kw in ({}, {"strict_native": True}):
        cf = tp.compile(f, **kw)
        with pytest.raises(IndexError) as ei:
            cf(tp.ones(0, 4))
        # eager's own message: the first statement's, not the gate's
        assert str(ei.value) == _outcome(f, [tp.ones(0, 4)])[1]


def test_first_failing_statement_wins_over_a_later_raising_write():
    # fuzz N=20000 (program found at 994a830): layer_norm fails on the size-0
    # sample, then a setitem on an input raises at once during the trace;
    # eager stops at layer_norm, so its error is the one raised
    ln = tp.nn.LayerNorm(3).requires_grad_(False)   # strict: no backward to refuse

    def f(x):
        v = ln(x.float())
        x[0] = 2.0
        return tp.relu(v)
    for kw in ({}, {"strict_native": True}):
        _same_as_eager(f, [[tp.randn(3)]], [tp.zeros(0)], **kw)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        tp.compile(f)(tp.zeros(0))


def test_first_failing_statement_wins_over_a_later_python_raise():
    def f(x):
        x.amax((0, 1))                  # dead, fails first
        raise ValueError("the user's own error, after it")
    with pytest.raises(IndexError):
        tp.compile(f)(tp.ones(0, 4))


def test_dead_integer_division_is_only_a_check():
    """Keeping the dead division costs its zero-divisor check, not a result:
    a valid call still returns the live value."""
    f = tp.compile(lambda x, i: (x // i, x * 3)[1], strict_native=True)
    assert f(tp.tensor([7, 3]), tp.tensor([2, 1])).tolist() == [21, 9]
    assert f(tp.tensor([1, 2]), tp.tensor([5, 5])).tolist() == [3, 6]
