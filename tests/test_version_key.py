"""A new version is keyed inside the one compile call (issue 12 items 3/4):
_C.stax_compile, given the call's key components, returns the version's
key (sigma, gamma_s, gamma_g, rho), its guards (the key's projection), the
data gates' outcomes checked by running the replay slice once, and the
requires-grad masks of its outputs (op table: detach, in-place writes), so
a recompile crosses Python->C once (csrc/guards/version.c)."""
import os
import sys

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _C

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from crossings import count, misses  # noqa: E402


def test_a_recompile_crosses_into_c_once():
    first, recompile = misses()
    assert recompile[1] == ["stax_compile"], recompile[1]
    # the call's key tuples come from C dispatch with the miss, the
    # generator's state at the trace's start is read inside stax_compile
    for name in ("_guard_call_key", "Generator.get_state"):
        assert name not in first[1]
    assert first[0] <= 14, first[1]


def _key(x_sig, rho=True, dtype="float32", paths=("inputs[0][0]",), dynamic=False):
    return ((x_sig,), (), (), None, rho, dtype, paths, (), dynamic)


def test_stax_compile_returns_the_key_and_guards_of_the_new_version():
    x = tp.randn(3, 4)

    def f(a):
        return tp.relu(a + 1) * 2

    sig = _C._guard_signature(x, False)
    got = _C.stax_compile(f, (x,), None, None, [x], None, None, {}, key=_key(sig))
    assert len(got) == 6
    tr, gm, art, err, counts, ver = got
    assert err is None and art is not None
    assert ver["key"] == (((sig,), (), ()), (), (), True)
    assert ver["gates"] == () and ver["replay"] is None and ver["replay_got"] is None
    assert ver["detach_masks"] is None
    rows = ver["guards"]
    assert rows[0] == ("inputs[0]", "len(inputs[0]) == 1", 1)
    assert ("inputs[0][0]", "type(inputs[0][0]) is Tensor", "Tensor") in rows
    assert ("inputs[0][0][2][1]", "inputs[0][0][2][1] == 4", 4) in rows
    assert ("inputs[0][0][3]", "inputs[0][0][3] == 'float32'", "float32") in rows
    assert rows[-2:] == [("grad_mode", "grad_mode == True", True),
                         ("default_dtype", "default_dtype == float32", "float32")]
    # without key=, the five items of before
    assert len(_C.stax_compile(f, (x,), None, None, [x])) == 5


def test_version_guards_are_the_rows_c_wrote():
    def f(x, n, opts):
        return x * n + opts["b"]

    cf = tp.compile(f)
    x = tp.randn(2, 3)
    cf(x, 3, {"b": 1.5})
    v = cf.versions[0]
    texts = [str(g) for g in v.guards]
    assert texts[:2] == ["len(inputs[0]) == 3", "type(inputs[0][0]) is Tensor"]
    assert "inputs[0][1][1] == 3" in texts
    assert "keys(inputs[0][2][1]) == ['b']" in texts
    assert "inputs[0][2][1]['b'][1] == 1.5" in texts
    assert "keys(inputs[1]) == []" in texts
    assert all(g.ok for g in v.guards)
    assert v.key[0][0] == tuple(_C._guard_signature(a, False) for a in (x, 3, {"b": 1.5}))


def test_aliasing_guard_text_comes_from_c():
    def f(a, b):
        return a + b

    cf = tp.compile(f)
    x = tp.randn(4)
    cf(x, x)
    texts = [str(g) for g in cf.versions[0].guards]
    assert "aliasing: inputs[0][1] shares inputs[0][0]'s storage" in texts
    assert cf.versions[0].key[0][3] == (0, 0)


def test_gate_outcomes_and_replay_check_in_stax_compile():
    x = tp.randn(5)

    def f(a):
        if a.sum() > 0:
            return a * 2
        return a - 1

    sig = _C._guard_signature(x, False)
    ver = _C.stax_compile(f, (x,), None, None, [x], None, None, None, key=_key(sig))[5]
    assert ver["gate_kinds"] == ("bool",)
    assert ver["gates"] == (bool(x.sum() > 0),)
    assert ver["key"][2] == ver["gates"]
    assert ver["replay"] is not None and ver["replay_got"] is None
    assert ver["replay_random"] is False
    assert ver["guards"][-1] == ("gates", _C._guard_gate_text, ver["gates"])


def test_replay_check_on_a_random_gate_leaves_the_generator():
    x = tp.randn(5)

    def f(a):
        if tp.rand(()) > 0.5:
            return a * 2
        return a - 1

    sig = _C._guard_signature(x, False)
    tp.manual_seed(3)
    _C.stax_compile(f, (x,), None, None, [x], None, None, None)
    without_check = tp.random.get_rng_state().tolist()
    tp.manual_seed(3)
    ver = _C.stax_compile(f, (x,), None, None, [x], None, None, None, key=_key(sig))[5]
    assert tp.random.get_rng_state().tolist() == without_check
    assert ver["replay_random"] is True
    assert ver["replay_got"] is None
    assert len(ver["gates"]) == 1


def test_gate_values_helper():
    t = tp.tensor([1.5, 2.5])
    assert _C._guard_gate_values(("bool", "int", "float", "tolist", "item"),
                                 (tp.tensor(True), tp.tensor(3), tp.tensor(2.5), t,
                                  tp.tensor(7))) == (True, 3, 2.5, (1.5, 2.5), 7)
    # plain values as they are, lists as tuples; zip() of the two
    assert _C._guard_gate_values(("int", "int"), ([1, [2]],)) == ((1, (2,)),)


def test_seeds_state0_is_set_before_the_trace():
    class Seeds:
        pass
    s = Seeds()
    tp.manual_seed(11)
    tp.rand(3)
    state = tp.random.get_rng_state().tolist()
    _C.stax_compile(lambda a: a + 1, (tp.ones(2),), None, None, [tp.ones(2)], seeds=s)
    assert s.state0 == state


def test_detach_masks_come_from_the_op_table():
    x, w = tp.randn(3), tp.randn(3)

    def f(a, b):
        return a.detach() * b, a * 2, tp.ops.detach.default(b) + 1

    key = ((_C._guard_signature(x, False), _C._guard_signature(w, False)), (), (), None,
           True, "float32", ("inputs[0][0]", "inputs[0][1]"), (), False)
    ver = _C.stax_compile(f, (x, w), None, None, [x, w], None, None, None, key=key)[5]
    assert ver["detach_masks"] == (0b10, 0b01, 0)


def test_detach_masks_follow_setitem_and_in_place_writes():
    x, w = tp.randn(3), tp.randn(3)

    def f(a, b):
        z = a.detach() * 1
        z[0] = b[1]
        y = a.detach() * 1
        y.add_(b)
        return z, y

    key = ((_C._guard_signature(x, False), _C._guard_signature(w, False)), (), (), None,
           True, "float32", ("inputs[0][0]", "inputs[0][1]"), (), False)
    ver = _C.stax_compile(f, (x, w), None, None, [x, w], None, None, None, key=key)[5]
    assert ver["detach_masks"] == (0b10, 0b10)


def test_compiled_requires_grad_past_detach_matches_eager():
    def f(a, b):
        return a.detach() * b, a.detach() + 1

    a = tp.randn(3, requires_grad=True)
    b = tp.randn(3)
    eager = f(a, b)
    cf = tp.compile(f)
    for _ in range(2):
        got = cf(a, b)
        assert [t.requires_grad for t in got] == [t.requires_grad for t in eager]
        np.testing.assert_allclose(got[0].detach().numpy(), eager[0].detach().numpy())


@pytest.mark.parametrize("bad", [(1, 2), ((), (), (), None, True, "float32", (), ())])
def test_stax_compile_rejects_a_malformed_key(bad):
    with pytest.raises(TypeError, match="key is"):
        _C.stax_compile(lambda a: a + 1, (tp.ones(2),), None, None, [tp.ones(2)], key=bad)


def test_count_still_sees_c_calls():
    n, names = count(lambda: _C._guard_grad_mode())
    assert n == 1 and names == ["_guard_grad_mode"]


def test_a_mutating_recompile_crosses_into_c_once():
    """The op-level graph of a function that writes in place runs each
    emitted op on the samples through the ops room, not through its
    tp.ops.<name>.<overload> object (which crossed back into C from Python:
    _op_call, once per op)."""
    def f(x, w):
        y = x * 1
        y.add_(w)
        return tp.relu(y) * 2

    cf = tp.compile(f)
    x, w = tp.randn(8), tp.randn(8)
    first = count(lambda: cf(x, w))
    np.testing.assert_allclose(cf(x, w).numpy(), f(x, w).numpy(), rtol=1e-6)
    y, v = tp.randn(4, 3), tp.randn(4, 3)
    recompile = count(lambda: cf(y, v))
    assert len(cf.versions) == 2
    assert "_op_call" not in first[1], first[1]
    assert recompile[1] == ["stax_compile"], recompile[1]
