"""The guards read a compiled module's children, parameters and buffers
from its dicts (csrc/guards/dispatch.c, module_child) instead of through
Module.__getattr__ (a failed generic lookup, an AttributeError and a Python
call per step of every attribute chain: 420 calls, a third of a GPT
decoding step). Same answers as getattr: replaced parameters and modules
are seen, and a type that changes attribute lookup keeps its own."""
import numpy as np

import tensorplay as tp
import tensorplay.nn.modules as M


class Net(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = tp.nn.Linear(4, 4)
        self.b = tp.nn.Sequential(tp.nn.Linear(4, 3))
        self.register_buffer("shift", tp.ones(3))

    def forward(self, x):
        return self.b(self.a(x)) + self.shift


def x_of(seed):
    return tp.tensor(np.random.default_rng(seed).standard_normal((2, 4)).astype(np.float32))


def close(a, b):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_guard_reads_skip_module_getattr(monkeypatch):
    n = Net()
    f = tp.compile(n)
    with tp.no_grad():
        f(x_of(0))
        f(x_of(1))
        calls = []
        orig = M.Module.__getattr__

        def __getattr__(self, name):          # noqa: N807 - the same function, counted
            calls.append(name)
            return orig(self, name)
        __getattr__.__qualname__ = orig.__qualname__
        __getattr__.__module__ = orig.__module__
        monkeypatch.setattr(M.Module, "__getattr__", __getattr__)
        for s in range(2, 5):               # new inputs: the full guard path
            close(f(x_of(s)), n(x_of(s)))
    calls.clear()
    with tp.no_grad():
        f(x_of(9))
    assert calls == []


def test_replaced_parameter_buffer_and_child_are_seen():
    n = Net()
    f = tp.compile(n)
    with tp.no_grad():
        close(f(x_of(0)), n(x_of(0)))
        n.a.weight = tp.nn.Parameter(n.a.weight * 2.0)
        close(f(x_of(1)), n(x_of(1)))
        n.shift = tp.full((3,), 5.0)
        close(f(x_of(2)), n(x_of(2)))
        n.b = tp.nn.Sequential(tp.nn.Linear(4, 3))
        close(f(x_of(3)), n(x_of(3)))


def test_instance_attribute_and_own_getattr_win():
    class Shadow(Net):
        pass

    class OwnGetattr(Net):
        def __getattr__(self, name):
            if name == "shift":
                return tp.full((3,), -1.0)
            return super().__getattr__(name)

    with tp.no_grad():
        s = Shadow()
        f = tp.compile(s)
        close(f(x_of(0)), s(x_of(0)))
        # an instance dict entry shadows the buffer for getattr
        object.__setattr__(s, "shift", tp.full((3,), 7.0))
        close(f(x_of(1)), s(x_of(1)))
        o = OwnGetattr()
        del o._buffers["shift"]
        g = tp.compile(o)
        close(g(x_of(2)), o(x_of(2)))
        close(g(x_of(3)), o(x_of(3)))


VIA_READS = []


class Deep(tp.nn.Module):
    """sources sharing prefixes: self.h[i].lin.weight / .bias, and a path
    through a property (Python code on every read)"""

    def __init__(self):
        super().__init__()
        self.h = tp.nn.ModuleList([tp.nn.Sequential(tp.nn.Linear(4, 4)) for _ in range(3)])
        self.side = tp.nn.Linear(4, 4)

    @property
    def via(self):
        VIA_READS.append(1)
        return self.side

    def forward(self, x):
        for blk in self.h:
            x = blk(x)
        return self.via(x) + self.h[0][0].bias


def test_shared_prefixes_see_every_replacement():
    """consecutive sources reuse the walk of their common prefix within one
    guard check (dispatch.c, prefix_t): a replaced leaf, a replaced middle
    module and a replaced list entry are all still seen"""
    n = Deep()
    f = tp.compile(n)
    with tp.no_grad():
        for s, change in enumerate([
                None,
                lambda: setattr(n.h[1][0], "bias", tp.nn.Parameter(tp.full((4,), 3.0))),
                lambda: setattr(n.h[2], "0", tp.nn.Linear(4, 4)),
                lambda: n.h.__setitem__(0, tp.nn.Sequential(tp.nn.Linear(4, 4))),
                lambda: setattr(n, "side", tp.nn.Linear(4, 4))]):
            if change is not None:
                change()
            close(f(x_of(s)), n(x_of(s)))
            close(f(x_of(s + 10)), n(x_of(s + 10)))

