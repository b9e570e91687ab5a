"""Tensors the compiled function writes in place but does not take as
arguments (issue 13's silent divergence; issue 17's copied constants).

A tensor the function reaches through its own code, its helpers' code, a
closure, ``self`` or a constant subscript is lifted: every call reads it
again from its place and the program writes it, strict_native included. A
tensor reached any other way is a constant held by reference; an eager
write to it is caught by the trace's write journal, undone, and that
version runs eagerly (strict_native: NativeCompileError). No constant is
copied for being read."""
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _C


def _run_both(make, calls=3, strict=False):
    """make() -> (fn, state reader); the same calls eagerly and compiled,
    each on fresh state: (eager outputs and states, compiled ones, the
    compiled function)"""
    res = []
    for compiled in (False, True):
        fn, state = make()
        cf = tp.compile(fn, strict_native=strict) if compiled else fn
        outs = []
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            for i in range(calls):
                o = cf(tp.full((3,), float(i + 1)))
                outs.append((o.numpy().copy(), [s.numpy().copy() for s in state()]))
        res.append((outs, cf))
    return res[0][0], res[1][0], res[1][1]


def _same(eager, compiled):
    assert len(eager) == len(compiled)
    for (eo, es), (co, cs) in zip(eager, compiled):
        np.testing.assert_array_equal(co, eo)
        for a, b in zip(es, cs):
            np.testing.assert_array_equal(b, a)


def _native(cf):
    st = cf.stats()
    assert st["eager_calls"] == 0 and st["fallbacks"] == 0, st
    assert st["versions"] == 1, st


def _module_ns():
    """a fresh namespace for functions whose globals are rebound"""
    return {"tp": tp}


@pytest.mark.parametrize("strict", [False, True])
def test_direct_global_written(strict):
    def make():
        ns = _module_ns()
        exec("G = tp.zeros(3)\n"
             "def f(x):\n"
             "    G.add_(1)\n"
             "    return x * 2\n", ns)
        return ns["f"], lambda: [ns["G"]]
    eager, comp, cf = _run_both(make, strict=strict)
    _same(eager, comp)
    np.testing.assert_array_equal(comp[-1][1][0], 3.0)
    _native(cf)


@pytest.mark.parametrize("strict", [False, True])
def test_global_returned_by_a_helper_and_written(strict):
    # the repro: the helper's global is lifted from its own globals
    def make():
        ns = _module_ns()
        exec("G = tp.zeros(3)\n"
             "def helper():\n"
             "    return G\n"
             "f = lambda x: (helper().add_(1), x * 2)[1]\n", ns)
        return ns["f"], lambda: [ns["G"]]
    eager, comp, cf = _run_both(make, strict=strict)
    _same(eager, comp)
    np.testing.assert_array_equal(comp[-1][1][0], 3.0)
    _native(cf)


def test_helper_of_a_helper_and_its_closure():
    def make():
        cell = tp.zeros(3)

        def inner():
            return cell

        def outer():
            return inner()

        def f(x):
            outer().add_(x)
            return x + 1
        return f, lambda: [cell]
    eager, comp, cf = _run_both(make, strict=True)
    _same(eager, comp)
    np.testing.assert_array_equal(comp[-1][1][0], 6.0)
    _native(cf)


@pytest.mark.parametrize("strict", [False, True])
def test_closure_cell_written(strict):
    def make():
        c = tp.zeros(3)

        def f(x):
            c.mul_(2).add_(x)
            return x - 1
        return f, lambda: [c]
    eager, comp, cf = _run_both(make, strict=strict)
    _same(eager, comp)
    _native(cf)


class _Plain(tp.nn.Module):
    """a tensor attribute that is neither a parameter nor a buffer"""

    def __init__(self):
        super().__init__()
        self.count = tp.zeros(3)

    def state(self):
        return self.count

    def forward(self, x):
        self.count.add_(1)
        self.state().mul_(2)          # through a method of self
        return x + self.count


@pytest.mark.parametrize("strict", [False, True])
def test_module_attribute_not_registered(strict):
    def make():
        m = _Plain()
        return m, lambda: [m.count]
    eager, comp, cf = _run_both(make, strict=strict)
    _same(eager, comp)
    np.testing.assert_array_equal(comp[-1][1][0], 14.0)
    _native(cf)


@pytest.mark.parametrize("strict", [False, True])
def test_list_element_written(strict):
    def make():
        ns = _module_ns()
        exec("L = [tp.zeros(3), tp.ones(3)]\n"
             "def f(x):\n"
             "    L[0].add_(x)\n"
             "    L[1].mul_(2)\n"
             "    return x * L[1]\n", ns)
        return ns["f"], lambda: list(ns["L"])
    eager, comp, cf = _run_both(make, strict=strict)
    _same(eager, comp)
    _native(cf)


def test_dict_item_of_a_closure_written():
    def make():
        d = {"acc": tp.zeros(3)}

        def f(x):
            d["acc"].add_(x)
            return x * 1
        return f, lambda: [d["acc"]]
    eager, comp, cf = _run_both(make, strict=True)
    _same(eager, comp)
    _native(cf)


@pytest.mark.parametrize("strict", [False, True])
def test_written_through_views(strict):
    def make():
        ns = _module_ns()
        exec("G = tp.arange(6.0).reshape(2, 3)\n"
             "def helper():\n"
             "    return G\n"
             "def f(x):\n"
             "    helper()[0].add_(1)\n"
             "    helper()[:, :2].zero_()\n"
             "    helper()[1][2:].mul_(x[:1])\n"
             "    return x + 0\n", ns)
        return ns["f"], lambda: [ns["G"]]
    eager, comp, cf = _run_both(make, strict=strict)
    _same(eager, comp)
    _native(cf)


def test_written_several_times_and_read_after_write():
    def make():
        ns = _module_ns()
        exec("G = tp.ones(3)\n"
             "def get():\n"
             "    return G\n"
             "def f(x):\n"
             "    a = x + get()          # read before the writes\n"
             "    get().add_(1)\n"
             "    get().mul_(x)\n"
             "    b = x * get()          # read after them\n"
             "    get().sub_(0.5)\n"
             "    return a + b + get().sum()\n", ns)
        return ns["f"], lambda: [ns["G"]]
    eager, comp, cf = _run_both(make, strict=True)
    _same(eager, comp)
    _native(cf)


@pytest.mark.parametrize("via_helper", [False, True])
def test_rebound_global_is_read_again(via_helper):
    ns = _module_ns()
    body = "helper()" if via_helper else "G"
    exec("G = tp.zeros(3)\n"
         "def helper():\n"
         "    return G\n"
         f"def f(x):\n"
         f"    {body}.add_(x)\n"
         f"    return x * 2\n", ns)
    cf = tp.compile(ns["f"], strict_native=True)
    old = ns["G"]
    cf(tp.ones(3))
    cf(tp.ones(3))
    np.testing.assert_array_equal(old.numpy(), 2.0)
    ns["G"] = tp.full((3,), 10.0)             # rebinding, as eager sees it
    cf(tp.ones(3))
    np.testing.assert_array_equal(ns["G"].numpy(), 11.0)
    np.testing.assert_array_equal(old.numpy(), 2.0)
    ns["G"] = tp.zeros(2, 2)                   # another shape: a new version
    cf(tp.ones(2, 2))
    np.testing.assert_array_equal(ns["G"].numpy(), 1.0)


class _Holder:
    def __init__(self, t):
        self._t = t

    def get(self):
        return self._t


def test_unlifted_write_runs_eagerly_and_applies_once():
    # reached through a plain object's method: not lifted; the write journal
    # catches the eager write, undoes the trace's, and the version runs
    # eagerly, so every call (the first included) writes exactly once
    h = _Holder(tp.zeros(3))
    holders = {"h": h}

    def f(x):
        holders["h"].get().add_(1)
        return x * 2
    cf = tp.compile(f)
    with pytest.warns(RuntimeWarning, match="in place outside the graph"):
        out = cf(tp.ones(3))
    np.testing.assert_array_equal(out.numpy(), 2.0)
    np.testing.assert_array_equal(h.get().numpy(), 1.0)
    for _ in range(2):
        cf(tp.ones(3))
    np.testing.assert_array_equal(h.get().numpy(), 3.0)


def test_unlifted_write_is_a_strict_error():
    h = _Holder(tp.zeros(3))
    holders = {"h": h}

    def f(x):
        holders["h"].get().add_(1)
        return x * 2
    with pytest.raises(_C.NativeCompileError, match=r"writes a tensor of shape \[3\]"):
        tp.compile(f, strict_native=True)(tp.ones(3))
    np.testing.assert_array_equal(h.get().numpy(), 0.0)   # the trace's write undone


def test_a_constant_only_read_is_not_copied():
    h = _Holder(tp.ones(256, 256))
    holders = {"h": h}      # (h.get() itself is looked into and lifted)

    def f(x):
        return x + holders["h"].get()          # a constant held by reference
    before = _C._trace_snapshot_bytes()
    out = tp.compile(f)(tp.ones(256, 256))
    np.testing.assert_array_equal(out.numpy(), 2.0)
    assert _C._trace_snapshot_bytes() == before


def test_a_written_constant_is_journaled_once_and_restored():
    h = _Holder(tp.ones(64))
    holders = {"h": h}      # (h.get() itself is looked into and lifted)

    def f(x):
        t = holders["h"].get()
        t.add_(x)                     # recorded: x is traced
        t.mul_(x)
        return x + 1
    before = _C._trace_snapshot_bytes()
    cf = tp.compile(f)
    cf(tp.full((64,), 2.0))
    assert _C._trace_snapshot_bytes() == before + 64 * 4
    np.testing.assert_array_equal(h.get().numpy(), 6.0)   # once, by the program
    cf(tp.full((64,), 2.0))
    np.testing.assert_array_equal(h.get().numpy(), 16.0)


@pytest.mark.parametrize("how", ["raise", "sample_error"])
def test_unlifted_write_before_an_error_is_made_as_eager_makes_it(how):
    # eager writes, then raises; the trace undid its write, so the call
    # runs eagerly and raises there, after the write
    h = _Holder(tp.zeros(3))
    holders = {"h": h}

    def f(x):
        holders["h"].get().add_(1)
        if how == "raise":
            raise ValueError("boom")
        return x.reshape(7)
    err = ValueError if how == "raise" else RuntimeError
    with pytest.raises(err):
        f(tp.ones(3))
    np.testing.assert_array_equal(h.get().numpy(), 1.0)
    with pytest.raises(err):
        tp.compile(f)(tp.ones(3))
    np.testing.assert_array_equal(h.get().numpy(), 2.0)


def test_a_helpers_effect_only_container_is_replayed_every_call():
    # the helper only appends to its global list: a side effect replayed by
    # every call of one version (it ran at trace time only, before helpers
    # were looked into)
    ns = _module_ns()
    exec("calls = []\n"
         "def log(v):\n"
         "    calls.append(v)\n"
         "def f(x):\n"
         "    log(1)\n"
         "    return x * 2\n", ns)
    cf = tp.compile(ns["f"], strict_native=True)
    for _ in range(4):
        np.testing.assert_array_equal(cf(tp.ones(3)).numpy(), 2.0)
    assert ns["calls"] == [1, 1, 1, 1]
    assert cf.stats()["versions"] == 1
