"""Guards room: signatures, keys, guards, recompile logs, lifting (seed section 2, 3.5)."""
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _C
from _helpers import recompile_log

BACKEND = "stax"


def comp(fn, **kw):
    kw.setdefault("backend", BACKEND)
    return tp.compile(fn, **kw)


@pytest.fixture
def recompiles():
    # the per-version detail line is checked in test_reliability_strict.py
    with recompile_log(seed_lines_only=True) as lines:
        yield lines


def test_signature_layout():
    x = tp.ones(4, 8)
    s = _C._guard_signature(x)
    assert s[0] == "tensor" and s[2] == (4, 8) and s[3] == "float32" and s[6] == (8, 1)
    assert s[5] is False
    assert _C._guard_signature(3) == (int, 3)
    assert _C._guard_signature([x, 2.0])[1][1] == (float, 2.0)


def test_stride_signature_dynamic():
    sig = lambda t: _C._guard_signature(t, True)  # noqa: E731
    a, b = tp.randn(4, 4), tp.randn(6, 6)
    assert sig(a) == sig(b)
    assert sig(a.t()) == sig(b.t()) != sig(a)
    assert sig(a)[2] == 2 and sig(a)[6] == ("size1*1", 1)
    assert sig(a.t())[6] == (1, "size0*1")
    assert sig(tp.randn(8, 1).expand(8, 8))[6] == (1, 0)
    assert sig(tp.randn(8, 16)[:, ::2])[6] == ("size1*2", 2)


def test_fingerprint_tracks_identity_and_version():
    x = tp.ones(3)
    f1 = _C._guard_fingerprint((x, 3))
    assert f1 == _C._guard_fingerprint((x, 3))
    assert f1 != _C._guard_fingerprint((x, 4))
    x.add_(1)
    assert f1 != _C._guard_fingerprint((x, 3))


def test_example_2_1_scalars_by_value():
    x = tp.ones(3)
    cf = comp(lambda x, k: x * k)
    cf(x, 3)
    cf(x, 4)
    assert len(cf.versions) == 2
    cf2 = comp(lambda x, k: x * k)
    r1 = cf2(x, tp.tensor(3.0))
    r2 = cf2(x, tp.tensor(4.0))
    assert len(cf2.versions) == 1
    assert r1.numpy()[0] == 3.0 and r2.numpy()[0] == 4.0


SCALE = None


def test_example_2_2_lifted_global(recompiles):
    global SCALE
    SCALE = tp.ones(128)

    def f(x):
        return x * SCALE

    cf = comp(f)
    x = tp.ones(128)
    assert cf(x).numpy()[0] == 1.0
    SCALE.mul_(2)
    assert cf(x).numpy()[0] == 2.0
    assert len(cf.versions) == 1 and not recompiles
    assert cf.stats()["hits_level3"] >= 1
    SCALE = tp.ones(1) * 3          # rebinding to another shape
    assert cf(x).numpy()[0] == 3.0
    assert len(cf.versions) == 2
    assert recompiles[-1] == "recompiling 'f': globals['SCALE'][2][0] == 128"
    SCALE = 5.0                     # rebinding to a non-tensor
    assert cf(x).numpy()[0] == 5.0
    assert len(cf.versions) == 3
    assert "type(globals['SCALE']) is Tensor" in recompiles[-1]


def test_closure_and_attribute_chain_guards(recompiles):
    class Cfg:
        flag = True
    cfg = Cfg()
    k = 2

    def g(x):
        return x * k + (1 if cfg.flag else 0)

    cf = comp(g)
    x = tp.ones(2)
    assert cf(x).numpy()[0] == 3
    k = 3
    assert cf(x).numpy()[0] == 4
    assert recompiles[-1] == "recompiling 'g': closure['k'][1] == 2"
    cfg.flag = False
    assert cf(x).numpy()[0] == 3
    assert "closure['cfg'].flag[1] == True" in recompiles[-1]
    assert len(cf.versions) == 3


def test_closure_tensor_lifted():
    w = tp.ones(4)

    def h(x):
        return x + w

    cf = comp(h)
    x = tp.ones(4)
    assert cf(x).numpy()[0] == 2
    w.add_(1)
    assert cf(x).numpy()[0] == 3
    assert len(cf.versions) == 1


def test_example_3_2_gate_log(recompiles):
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x - 1

    cf = comp(f)
    a = cf(tp.ones(4, 8)).numpy()
    b = cf(-2 * tp.ones(4, 8)).numpy()
    c = cf(tp.ones(6, 8)).numpy()
    assert (a == 2).all() and (b == -3).all() and (c == 2).all()
    assert len(cf.versions) == 3
    assert recompiles == [
        "recompiling 'f': control-flow gate outcomes match the traced branch",
        "recompiling 'f': inputs[0][0][2][0] == 4; inputs[0][0][2][0] == 4; "
        "control-flow gate outcomes match the traced branch",
    ]
    g = cf.versions[0].guards
    assert any(str(x) == "inputs[0][0][2][0] == 4" for x in g)
    # the gated function never takes level 1, but hits at level 2/3
    cf(tp.ones(4, 8))
    assert cf.stats()["hits_level1"] == 0


def test_strides_four_layouts():
    cf = comp(lambda x: x * 2 + 1)
    base = tp.randn(8, 8)
    lays = [base, base.t(), tp.randn(8, 1).expand(8, 8), tp.randn(8, 16)[:, ::2]]
    for t in lays:
        cf(t)
    assert cf.stats()["compiles"] == 4
    for t in lays:
        np.testing.assert_allclose(cf(t).numpy(), t.numpy() * 2 + 1, rtol=1e-6)
    assert cf.stats()["compiles"] == 4 and len(cf.versions) == 4


def test_strides_dynamic_two_artifacts():
    cf = comp(lambda x: x * 2 + 1, dynamic=True)
    for n in (4, 6, 8):
        a = tp.randn(n, n)
        for t in (a, a.t()):
            np.testing.assert_allclose(cf(t).numpy(), t.numpy() * 2 + 1, rtol=1e-6)
    assert len(cf.versions) == 2


def test_grad_mode_recompiles(recompiles):
    cf = comp(lambda x: x + 1)
    x = tp.ones(2)
    cf(x)
    with tp.no_grad():
        cf(x)
    assert len(cf.versions) == 2
    assert recompiles[-1].endswith("grad_mode == True")


def test_requires_grad_recompiles(recompiles):
    cf = comp(lambda x: x * 3)
    x = tp.ones(2)
    cf(x)
    x.requires_grad_(True)
    cf(x)
    assert len(cf.versions) == 2
    assert "inputs[0][0][5] == False" in recompiles[-1]


def test_limits_warn_then_eager():
    old = tp.compiler.config.cache_size_limit
    tp.compiler.config.cache_size_limit = 2
    try:
        cf = comp(lambda x, k: x * k)
        x = tp.ones(2)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for k in range(5):
                assert cf(x, k).numpy()[0] == k
        lim = [m for m in w if "cache_size_limit" in str(m.message)]
        assert len(lim) == 1 and "'<lambda>'" in str(lim[0].message)
        assert "inputs[0][1][1] == 1" in str(lim[0].message)
        assert len(cf.versions) == 2 and cf.stats()["fallbacks"] >= 3
        cs = comp(lambda x, k: x * k, strict_native=True)
        cs(x, 1)
        cs(x, 2)
        with pytest.raises(tp.compiler.RecompileLimitError):
            cs(x, 3)
    finally:
        tp.compiler.config.cache_size_limit = old


def test_kwargs_keyed_by_name():
    cf = comp(lambda x, a=1, b=2: x * a + b)
    x = tp.ones(2)
    assert cf(x, a=2, b=3).numpy()[0] == 5
    assert cf(x, b=3, a=2).numpy()[0] == 5
    assert len(cf.versions) == 1
    assert cf(x, a=3, b=3).numpy()[0] == 6
    assert len(cf.versions) == 2
    assert cf(x, a=3, b=3).numpy()[0] == 6
    assert cf.stats()["hits_level2"] >= 1


def test_dispatch_levels_counted():
    cf = comp(lambda x: x + 1)
    x = tp.ones(1)
    for _ in range(5):
        cf(x)
    s = cf.stats()
    assert s["calls"] == 5 and s["compiles"] == 1 and s["hits_level1"] == 4
    cf(tp.ones(1))
    assert cf.stats()["hits_level3"] == 1
    x.add_(1)                      # new version: level 1 misses, level 3 hits
    assert cf(x).numpy()[0] == 3
    assert cf.stats()["hits_level1"] == 4


class _Cfg:
    flag = True


CFG = _Cfg()


def test_global_attribute_chain_and_default_dtype(recompiles):
    def f(x):
        return x * 2 if CFG.flag else x * 3

    cf = comp(f)
    x = tp.ones(2)
    assert cf(x).numpy()[0] == 2
    CFG.flag = False
    try:
        assert cf(x).numpy()[0] == 3
        assert recompiles[-1] == "recompiling 'f': globals['CFG'].flag[1] == True"
    finally:
        CFG.flag = True
    old = tp.get_default_dtype()
    tp.set_default_dtype(tp.float64)
    try:
        cf(x)
        assert "default_dtype == float32" in recompiles[-1]
    finally:
        tp.set_default_dtype(old)
    assert len(cf.versions) == 3


class _Net(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = tp.nn.Parameter(tp.ones(3))

    def forward(self, x):
        return x * self.w


class _CNet(_Net):
    @tp.compile(backend="eager")
    def forward(self, x):
        return x * self.w


NET = None


def test_module_in_global_is_lifted():
    global NET
    NET = _Net()

    def f(x):
        return NET(x) + 1

    cf = comp(f)
    x = tp.ones(3)
    with tp.no_grad():
        assert cf(x).numpy()[0] == 2
        NET.w.mul_(2)
        assert cf(x).numpy()[0] == 3
        assert len(cf.versions) == 1
        NET.w = tp.nn.Parameter(tp.ones(1) * 4)
        assert cf(x).numpy()[0] == 5
        assert len(cf.versions) == 2


def test_method_compiled_on_class():
    x = tp.ones(3)
    with tp.no_grad():
        a, b = _CNet(), _CNet()
        assert a(x).numpy()[0] == 1
        a.w.mul_(5)
        assert a(x).numpy()[0] == 5
        assert b(x).numpy()[0] == 1
        assert len(_CNet.forward.versions) == 2   # self by identity: one per module


def test_nested_compiled_function_inlines():
    inner = comp(lambda x: x * 2)
    outer = comp(lambda x: inner(x) + 1)
    assert outer(tp.ones(2)).numpy()[0] == 3
    assert len(outer.versions) == 1


def test_dynamic_over_fixed_shape_backend():
    built = []

    def fixed(gm, example_inputs, **options):
        lay = [(tuple(t.shape), t.stride()) for t in example_inputs]
        built.append(lay)

        def run(*ts):
            assert [(tuple(t.shape), t.stride()) for t in ts] == lay
            return gm(*ts)
        return run

    cf = tp.compile(lambda x: x * 2 + 1, backend=fixed, dynamic=True)
    for _ in range(2):
        for n in (4, 6, 8):
            a = tp.randn(n, n)
            for t in (a, a.t()):
                np.testing.assert_allclose(cf(t).numpy(), t.numpy() * 2 + 1, rtol=1e-6)
    assert len(cf.versions) == 2 and len(built) == 6 and cf.stats()["artifacts"] == 6


def test_accumulated_limit_per_code_object():
    old = tp.compiler.config.accumulated_cache_size_limit
    tp.compiler.config.accumulated_cache_size_limit = 3
    try:
        x = tp.ones(2)
        cfs = []
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for k in range(4):        # the same code, recompiled through new wrappers
                cf = comp(lambda x, k: x + k)
                cfs.append(cf)
                assert cf(x, k).numpy()[0] == k + 1
        assert [len(c.versions) for c in cfs] == [1, 1, 1, 0]
        assert any("accumulated_cache_size_limit" in str(m.message) for m in w)
        assert cfs[-1].stats()["eager_calls"] == 1
        other = comp(lambda x: x * 2)      # another code object: unaffected
        assert other(x).numpy()[0] == 2 and len(other.versions) == 1
    finally:
        tp.compiler.config.accumulated_cache_size_limit = old


# ---------------------------------------------------------------------------
# data gates after in-place ops (fuzz seeds 12, 554, 781, 865), level 2 and
# data gates, tp.compiler.reset()

def _strict_no_warnings(fn):
    """Run fn; the compile-time replay check's warning is an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("error", message=".*guard replay subgraph.*")
        return fn()


def test_gate_after_inplace_two_outcomes_two_versions():
    """Fuzz seed 12: the replay must see v1 after mul_ (through a view of
    x0); the second call (x0 already mutated) takes the other outcome."""
    def f(x0, x1):
        v1 = x0.reshape(1, -1, 1)
        v1.mul_(x1)
        n0 = int((v1 > 0.0).sum())
        return v1 + n0, x0
    cf = comp(f, strict_native=True)
    e = [tp.tensor(1.5231), tp.tensor(-0.5108)]
    c = [tp.tensor(1.5231), tp.tensor(-0.5108)]
    for _ in range(2):
        want = f(*e)
        got = _strict_no_warnings(lambda: cf(*c))
        assert np.allclose(got[0].numpy(), want[0].numpy())
        assert np.allclose(c[0].numpy(), e[0].numpy())
    assert [v.gates for v in cf.versions] == [(0,), (1,)]
    assert cf.stats()["compiles"] == 2


@pytest.mark.parametrize("case", ["setitem", "mul_", "clamp_"])
def test_gate_after_inplace_compiles_once_per_outcome(case):
    """Fuzz seeds 554 (setitem on a slice), 781 (mul_), 865 (clamp_): one
    outcome over new inputs = one compile, no replay warning."""
    def f(x):
        if case == "setitem":
            x[:, 1:] = -1.5
        elif case == "mul_":
            x.mul_(0.0)
        else:
            x.clamp_(min=7)
        n = int((x > 0.0).sum())
        return x.relu() + n
    cf = comp(f, strict_native=case != "setitem")     # slice_scatter: lower room
    for k in range(4):
        x = tp.tensor([[1.0 + k, -2.0, 3.0], [-4.0, 5.0, 0.5 * k]])
        e, c = tp.tensor(x.tolist()), tp.tensor(x.tolist())
        want = f(e)
        got = _strict_no_warnings(lambda: cf(c))
        assert got.tolist() == want.tolist() and c.tolist() == e.tolist()
    assert cf.stats()["compiles"] == 1, [v.gates for v in cf.versions]


def test_gate_after_inplace_takes_the_right_branch():
    def f(x):
        x.neg_()
        if x.sum() > 0:
            return x + 100
        return x - 100
    cf = comp(f)
    for v in (1.0, -1.0, 2.0, -2.0):
        assert _strict_no_warnings(lambda: cf(tp.ones(3) * v)).tolist() == f(tp.ones(3) * v).tolist()
    assert cf.stats()["compiles"] == 2


def test_guard_replay_does_not_touch_the_callers_tensor():
    def f(x):
        x.add_(1)
        return x * 2 if x.sum() > 0 else x * 3
    cf = comp(f)
    x = tp.tensor([0.5, 0.5])
    cf(x)
    assert x.tolist() == [1.5, 1.5]          # exactly one add_ (the artifact's)
    v = cf.versions[0]
    before = x._version
    assert v.gate_outcomes([x]) == (True,)
    assert x.tolist() == [1.5, 1.5] and x._version == before


_GATE_CONST = tp.ones(3)


def _gate_const():
    return _GATE_CONST


def test_level2_replays_data_gates():
    """Level 2 (same tensors, same versions) must still run the replay when
    the version has data gates: a gate may read a constant held by reference
    (here a global read by a helper, not lifted) that changed meanwhile."""
    def f(x):
        if (_gate_const() + x).sum() > 0:
            return x + 1
        return x - 1
    cf = comp(f)
    x = tp.zeros(3)
    assert cf(x).tolist() == [1.0] * 3 and cf(x).tolist() == [1.0] * 3
    assert cf.stats()["hits_level2"] == 1 and cf.stats()["hits_level1"] == 0
    try:
        _GATE_CONST.mul_(-1)
        assert cf(x).tolist() == f(x).tolist() == [-1.0] * 3
        assert cf.stats()["compiles"] == 2
    finally:
        _GATE_CONST.mul_(-1)


def test_compiler_reset():
    def f(x, k):
        return x + k
    cf = comp(f)
    x = tp.ones(2)
    cf(x, 1), cf(x, 1), cf(x, 2)
    assert cf.stats()["versions"] == 2 and cf.stats()["calls"] == 3
    tp.compiler.reset()
    s = cf.stats()
    assert s["versions"] == 0 and s["calls"] == 0 and s["compiles"] == 0 and cf.versions == []
    assert cf(x, 1).tolist() == [2.0, 2.0]          # compiles again, level 1 was disarmed
    assert cf.stats()["compiles"] == 1 and cf.stats()["hits_level1"] == 0
    assert cf(x, 1).tolist() == [2.0, 2.0] and cf.stats()["hits_level1"] == 1


def test_compiler_reset_clears_accumulated_counts():
    old = tp.compiler.config.accumulated_cache_size_limit
    tp.compiler.config.accumulated_cache_size_limit = 2
    try:
        x = tp.ones(2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k in range(3):
                cf = comp(lambda x, k: x * k)
                cf(x, k)
            assert len(cf.versions) == 0          # the third hit the limit
            tp.compiler.reset()
            cf = comp(lambda x, k: x * k)         # same code object (a new wrapper)
            assert cf(x, 5).tolist() == [5.0, 5.0] and len(cf.versions) == 1
    finally:
        tp.compiler.config.accumulated_cache_size_limit = old


@pytest.mark.parametrize("backend", ["eager", BACKEND])
def test_gate_on_random_draw_matches_eager_stream(backend):
    """A data gate on a random draw: the guard replay runs on a fork of the
    generator, so it sees the numbers the artifact then draws (the branch
    eager takes) and the caller's stream moves once, as in eager."""
    def f(x):
        r = tp.rand(3)
        if r.sum() > 1.5:
            return x + r
        return x - r
    cf = comp(f, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in range(8):
            tp.manual_seed(s)
            e, e2 = f(tp.zeros(3)), tp.rand(1)
            tp.manual_seed(s)
            c, c2 = cf(tp.zeros(3)), tp.rand(1)
            assert c.tolist() == e.tolist() and c2.tolist() == e2.tolist(), s
    assert cf.stats()["versions"] == 2


def test_input_aliasing_is_keyed(recompiles):
    """f(x, x) and f(x, y) trace differently when f writes an input: which
    tensor inputs share a storage is part of sigma (one guard line)."""
    def f(a, b):
        a.add_(1)
        return b * 2
    cf = comp(f, backend="eager")
    x, xe = tp.ones(2), tp.ones(2)
    assert cf(x, x).tolist() == f(xe, xe).tolist() == [4.0, 4.0]
    assert cf(tp.ones(2), tp.ones(2)).tolist() == [2.0, 2.0]
    assert cf.stats()["compiles"] == 2
    assert recompiles == ["recompiling 'f': aliasing: inputs[0][1] shares inputs[0][0]'s storage"]
    x = tp.ones(2)
    assert cf(x, x).tolist() == [4.0, 4.0] and cf.stats()["compiles"] == 2
    assert any(g.path == "aliasing" for g in cf.versions[0].guards)
    assert not any(g.path == "aliasing" for g in cf.versions[1].guards)


def test_aliased_inputs_written_run_eagerly_on_native_backend():
    def g(a, b):
        a.add_(1)
        if b.sum() > 0:
            return b * 2
        return b * 3
    cf = comp(g)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for v in (-1.0, 0.5, -0.5, -3.0):
            x, xe = tp.ones(2) * v, tp.ones(2) * v
            assert cf(x, x).tolist() == g(xe, xe).tolist() and x.tolist() == xe.tolist(), v
    assert any("share a storage" in str(m.message) for m in w)
    assert cf.stats()["compiles"] == 2 and cf.stats()["fallbacks"] >= 2
    with pytest.raises(tp.compiler.NativeCompileError, match="share a storage"):
        x = tp.ones(2)
        comp(g, strict_native=True)(x, x)
    # without aliasing the native path is unchanged
    assert comp(g, strict_native=True)(tp.ones(2), tp.ones(2)).tolist() == [2.0, 2.0]


_effect_calls = []


def test_effect_only_global_container_is_not_in_the_key():
    """A global list the function only appends to: its contents are not a
    key component (the trace never reads them), the append still happens on
    every call (replayed), and no call recompiles."""
    _effect_calls.clear()

    def f(x):
        _effect_calls.append(1)
        return x * 2
    cf = comp(f)
    for _ in range(4):
        assert cf(tp.ones(2)).tolist() == [2.0, 2.0]
    assert _effect_calls == [1, 1, 1, 1]
    assert cf.stats()["compiles"] == 1
    assert not any("len(globals['_effect_calls']" in str(g) for g in cf.versions[0].guards)


def test_effect_only_closure_container_follows_the_traced_branch():
    evs, seen = [], {}

    def f(x):
        evs.append("call")
        seen.update(last=1)
        if x.sum() > 0:
            evs.append(("pos", 2))
        return x + 1
    cf = comp(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for v in (1.0, -1.0, 1.0, -1.0):
            cf(tp.ones(1) * v)
    assert evs == ["call", ("pos", 2), "call", "call", ("pos", 2), "call"]
    assert seen == {"last": 1}
    assert cf.stats()["compiles"] == 2


def test_read_container_stays_in_the_key():
    """len() of the container is a read: its contents are a key component
    (the result depends on it), so each append recompiles, as before."""
    log = []

    def f(x):
        log.append(1)
        return x * len(log)
    cf = comp(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [cf(tp.ones(1)).item() for _ in range(3)]
    assert got == [1.0, 2.0, 3.0] and len(log) == 3
    assert cf.stats()["compiles"] == 3


def test_effect_with_a_tensor_argument_runs_eagerly():
    keep = []

    def f(x):
        keep.append(x)
        return x + 1
    cf = comp(f)
    a, b = tp.ones(1), tp.zeros(1)
    cf(a)
    cf(b)
    assert len(keep) == 2 and keep[0] is a and keep[1] is b
