"""Dispatch levels 2 and 3 in C (issue 12 item 4): a call of a known key
finds its version without entering the Python driver; only true misses,
data-gate replays and values the C key cannot encode exactly do."""
import collections
import os
import sys
import warnings

import numpy as np
import pytest

import tensorplay as tp
from _helpers import recompile_log

_DRIVER = os.path.join("compiler", "_driver.py")


def entries(cf):
    return cf._c_stats()["driver_entries"]


class DriverCalls:
    """The Python driver functions entered while the block runs."""

    def __init__(self):
        self.names = collections.Counter()

    def _prof(self, frame, event, arg):
        if event == "call" and frame.f_code.co_filename.endswith(_DRIVER):
            self.names[frame.f_code.co_name] += 1

    def __enter__(self):
        sys.setprofile(self._prof)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)


def test_fresh_tensors_of_a_known_key_do_not_enter_the_driver():
    def f(x, w):
        return tp.relu(x + w) * 2
    cf = tp.compile(f)
    cf(tp.randn(8), tp.randn(8))
    pool = [(tp.randn(8), tp.randn(8)) for _ in range(20)]
    e0, h3 = entries(cf), cf.stats()["hits_level3"]
    with DriverCalls() as d:
        outs = [cf(a, b) for a, b in pool]
    assert not d.names, d.names
    assert entries(cf) == e0
    assert cf.stats()["hits_level3"] == h3 + 20 and cf.stats()["compiles"] == 1
    for (a, b), o in zip(pool, outs):
        np.testing.assert_allclose(o.numpy(), f(a, b).numpy(), rtol=1e-6)


def test_level2_kwargs_in_c():
    cf = tp.compile(lambda x, a=1, b=2: x * a + b)
    x = tp.ones(2)
    cf(x, b=3, a=2)
    e0 = entries(cf)
    with DriverCalls() as d:
        for _ in range(5):
            assert cf(x, a=2, b=3).tolist() == [5.0, 5.0]
        assert cf(tp.ones(2), b=3, a=2).tolist() == [5.0, 5.0]   # level 3, keyword order
    assert not d.names and entries(cf) == e0
    s = cf.stats()
    assert s["hits_level2"] == 5 and s["hits_level3"] == 1 and s["compiles"] == 1


def test_scalar_value_guards_in_c(recompiles):
    cf = tp.compile(lambda x, k, s, flag, none: (x * k if flag else x - k) if none is None else x)
    args = [(2, "a", True), (3, "a", True), (2.5, "b", False), (2, "a", False)]
    for k, s, flag in args:
        cf(tp.ones(3), k, s, flag, None)
    assert cf.stats()["compiles"] == 4
    assert len(recompiles) == 3 and recompiles[0] == "recompiling '<lambda>': inputs[0][1][1] == 2"
    e0 = entries(cf)
    with DriverCalls() as d:
        for _ in range(3):
            for k, s, flag in args:
                want = (tp.ones(3) * k if flag else tp.ones(3) - k).tolist()
                assert cf(tp.ones(3), k, s, flag, None).tolist() == want
    assert not d.names and entries(cf) == e0 and cf.stats()["compiles"] == 4
    # a new value is a true miss: the driver compiles and logs it
    cf(tp.ones(3), 4, "a", True, None)
    assert cf.stats()["compiles"] == 5 and entries(cf) == e0 + 1
    assert len(recompiles) == 4


@pytest.fixture
def recompiles():
    with recompile_log(seed_lines_only=True) as lines:
        yield lines


def test_dynamic_versions_and_shape_guards_in_c():
    def g_(x):
        return x.reshape(x.shape[0], -1) * 2       # reads size 0: a shape guard
    cf = tp.compile(g_, dynamic=True)
    xs = {}
    for n in (4, 6, 5):
        xs[n] = tp.randn(n, 3)
        tp.compiler.mark_static(xs[n], 0)          # size 0 exact (not symbolic)
        cf(xs[n])
    assert cf.stats()["compiles"] == 3
    g = [str(x) for x in cf.versions[0].guards]
    assert "size(inputs[0][0], 0) == 4" in g
    e0 = entries(cf)
    with DriverCalls() as d:
        for n in (6, 4, 6, 4):
            x = tp.randn(n, 3)
            tp.compiler.mark_static(x, 0)
            np.testing.assert_allclose(cf(x).numpy(), g_(x).numpy(), rtol=1e-6)
    assert not d.names and entries(cf) == e0 and cf.stats()["compiles"] == 3


def test_dynamic_symbolic_shape_guards_in_c():
    # a symbolic size read: one version for every size >= 2, its relation
    # guards (s0 >= 2, s0 <= 8) checked in C (no driver entry per call)
    def f(x):
        n = x.shape[0]
        if n <= 8:
            return x.reshape(n, -1) * 2
        return x.reshape(n, -1) * 3
    cf = tp.compile(f, dynamic=True)
    cf(tp.randn(4, 3))
    g = [str(x) for x in cf.versions[0].guards]
    assert "s0 >= 2" in g and "s0 <= 8" in g
    e0 = entries(cf)
    with DriverCalls() as d:
        for n in (6, 4, 8, 7):
            x = tp.randn(n, 3)
            np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-6)
    assert not d.names and entries(cf) == e0 and cf.stats()["compiles"] == 1
    x = tp.randn(9, 3)                             # s0 <= 8 fails: a miss
    np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-6)
    assert cf.stats()["compiles"] == 2
    x = tp.randn(1, 3)                             # size 1 specializes (s0 >= 2 fails)
    np.testing.assert_allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-6)
    assert cf.stats()["compiles"] == 3


def test_dynamic_one_version_many_sizes_in_c():
    cf = tp.compile(lambda x: x * 2 + 1, dynamic=True)
    cf(tp.randn(4))
    e0 = entries(cf)
    with DriverCalls() as d:
        for n in (5, 9, 17, 4):
            x = tp.randn(n)
            np.testing.assert_allclose(cf(x).numpy(), x.numpy() * 2 + 1, rtol=1e-6)
    assert not d.names and entries(cf) == e0 and len(cf.versions) == 1


def test_aliasing_of_inputs_changes_the_key_in_c():
    def f(a, b):
        return a * 2 + b
    cf = tp.compile(f, backend="eager")
    x = tp.ones(2)
    cf(x, x)
    cf(tp.ones(2), tp.ones(2))
    assert cf.stats()["compiles"] == 2
    assert any(g.path == "aliasing" for g in cf.versions[0].guards)
    e0 = entries(cf)
    with DriverCalls() as d:
        for _ in range(3):
            y = tp.ones(2)
            assert cf(y, y).tolist() == [3.0, 3.0]
            assert cf(tp.ones(2), tp.zeros(2)).tolist() == [2.0, 2.0]
            z = tp.zeros(4)
            assert cf(z[:2], z[2:]).tolist() == [0.0, 0.0]    # views of one storage alias
    assert not d.names and entries(cf) == e0 and cf.stats()["compiles"] == 2


def test_grad_mode_and_default_dtype_change_the_key_in_c():
    cf = tp.compile(lambda x: x + 1)
    cf(tp.ones(2))
    with tp.no_grad():
        cf(tp.ones(2))
    old = tp.get_default_dtype()
    tp.set_default_dtype(tp.float64)
    try:
        cf(tp.ones(2, dtype=tp.float32))
    finally:
        tp.set_default_dtype(old)
    assert cf.stats()["compiles"] == 3
    e0 = entries(cf)
    with DriverCalls() as d:
        for _ in range(3):
            cf(tp.ones(2))
            with tp.no_grad():
                cf(tp.ones(2))
            tp.set_default_dtype(tp.float64)
            try:
                cf(tp.ones(2, dtype=tp.float32))
            finally:
                tp.set_default_dtype(old)
    assert not d.names and entries(cf) == e0 and cf.stats()["compiles"] == 3
    assert cf.stats()["hits_level3"] == 9


def test_free_variables_read_in_c():
    w = tp.ones(3)
    k = 2

    def f(x):
        return x * w + k
    cf = tp.compile(f)
    cf(tp.ones(3))
    k = 5
    assert cf(tp.ones(3)).tolist() == [6.0] * 3     # closure value guard: a miss
    assert cf.stats()["compiles"] == 2
    e0 = entries(cf)
    with DriverCalls() as d:
        k = 2
        assert cf(tp.ones(3)).tolist() == [3.0] * 3
        w.mul_(2)                                   # lifted: its data is not in the key
        assert cf(tp.ones(3)).tolist() == [4.0] * 3
        k = 5
        assert cf(tp.ones(3)).tolist() == [7.0] * 3
    assert not d.names and entries(cf) == e0 and cf.stats()["compiles"] == 2


_log = []


def test_effect_only_container_replayed_in_c():
    _log.clear()

    def f(x):
        _log.append(1)
        return x * 2
    cf = tp.compile(f)
    cf(tp.ones(2))
    e0 = entries(cf)
    with DriverCalls() as d:
        for _ in range(4):
            assert cf(tp.ones(2)).tolist() == [2.0, 2.0]
    assert not d.names and entries(cf) == e0
    assert _log == [1] * 5 and cf.stats()["compiles"] == 1


def test_data_gates_replay_in_python_without_a_miss():
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x - 1
    cf = tp.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cf(tp.ones(4))
        cf(-tp.ones(4))
    assert cf.stats()["compiles"] == 2
    with DriverCalls() as d:
        for v in (1.0, -1.0, 2.0, -3.0):
            x = tp.ones(4) * v
            assert cf(x).tolist() == f(x).tolist()
    # the replay is the only Python the call needs: no miss, no compile
    assert d.names["_gates_hold_index"] == 4 + 2      # -1/-3 try version 0 first
    assert not {"_miss", "_dispatch", "_compile"} & set(d.names)
    assert cf.stats()["compiles"] == 2


def test_values_c_cannot_encode_take_the_python_path():
    Pair = collections.namedtuple("Pair", "a b")
    cf = tp.compile(lambda p, k: p.a * k + p.b)
    for _ in range(3):
        assert cf(Pair(tp.ones(2), tp.ones(2)), 2).tolist() == [3.0, 3.0]
    assert cf.stats()["compiles"] == 1 and cf.stats()["hits_level3"] == 2
    big = 1 << 80
    cg = tp.compile(lambda x, k: x + (k > 0))
    for _ in range(3):
        assert cg(tp.ones(2), big).tolist() == [2.0, 2.0]
    assert cg.stats()["compiles"] == 1 and cg.stats()["hits_level3"] == 2


def test_negative_zero_keys_like_zero():
    cf = tp.compile(lambda x, k: x + k)
    cf(tp.ones(2), 0.0)
    e0 = entries(cf)
    cf(tp.ones(2), -0.0)
    assert entries(cf) == e0 and cf.stats()["compiles"] == 1


def test_reset_forgets_the_c_cache():
    cf = tp.compile(lambda x: x + 1)
    cf(tp.ones(2))
    cf(tp.ones(2))
    assert cf.stats()["hits_level3"] == 1
    tp.compiler.reset()
    assert cf(tp.ones(2)).tolist() == [2.0, 2.0]
    s = cf.stats()
    assert s["compiles"] == 1 and s["hits_level3"] == 0 and s["calls"] == 1
    assert cf(tp.ones(2)).tolist() == [2.0, 2.0] and cf.stats()["hits_level3"] == 1


def test_exceptions_from_the_artifact_propagate_from_c():
    def bad(gm, example_inputs, **kw):
        def run(*ts):
            if ts[0].sum().item() < 0:
                raise ValueError("negative")
            return gm(*ts)
        return run
    cf = tp.compile(lambda x: x + 1, backend=bad)
    cf(tp.ones(2))
    with pytest.raises(ValueError, match="negative"):
        cf(-tp.ones(2))
    assert cf(tp.ones(2)).tolist() == [2.0, 2.0] and cf.stats()["compiles"] == 1


def test_c_levels_do_not_keep_the_callers_tensors_alive():
    """Level 2's memory of the last call (set by C on level-3 hits and on
    misses) holds its tensors weakly, as the driver's _hold does."""
    import gc
    import weakref
    cf = tp.compile(lambda x: x * 2)
    cf(tp.ones(4))
    for shape in ((4,), (5,)):           # a level-3 hit in C, then a miss
        x = tp.ones(*shape)
        r = weakref.ref(x)
        cf(x)
        del x
        gc.collect()
        assert r() is None, shape
    y = tp.ones(5)
    cf(y)
    h2 = cf.stats()["hits_level2"]
    cf(y)                                # level 1 or 2 still hit while it lives
    assert cf.stats()["hits_level1"] + cf.stats()["hits_level2"] > h2



def test_a_call_resolved_in_c_arms_level1():
    """After a fresh-tensor call found its version in C, the same objects
    called again take level 1 (not level 2)."""
    cf = tp.compile(lambda x, w: tp.relu(x + w) * 2)
    cf(tp.randn(8), tp.randn(8))
    x, w = tp.randn(8), tp.randn(8)
    cf(x, w)                                  # level 3 in C, arms level 1
    for _ in range(3):
        cf(x, w)
    s = cf._c_stats()
    assert s["hits_level3"] == 1 and s["hits_level1"] == 3 and s["hits_level2"] == 0, s
