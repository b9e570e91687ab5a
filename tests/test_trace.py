"""Tracer (seed section 3): proxies, hybrid sampling, data gates, replay,
stand-ins, side-effect isolation."""
import gc
import operator

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _C

LISTING_3_1 = """graph(
    %x : [num_users=1] = placeholder[target=x]
    %w : [num_users=1] = placeholder[target=w]
    %add shape=(64, 128) : [num_users=1] = call_function[target=operator.add](args = (%x, %w), kwargs = {})
    %relu shape=(64, 128) : [num_users=1] = call_function[target=tensorplay.functional.relu](args = (%add,), kwargs = {})
    %mul shape=(64, 128) : [num_users=1] = call_function[target=operator.mul](args = (%relu, 2), kwargs = {})
    %sum_0 shape=(64,) : [num_users=1] = call_method[target=sum](args = (%mul, -1), kwargs = {})
    return sum_0
)"""


def f11(x, w):
    return (tp.relu(x + w) * 2).sum(-1)


def ex31(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def call_nodes(g):
    return [n for n in g.nodes if n.op.startswith("call")]


def test_listing_3_1_exact():
    x, w = tp.randn(64, 128), tp.randn(64, 128)
    r = _C.trace(f11, (x, w))
    assert str(r.graph_module.graph) == LISTING_3_1
    r.graph_module.graph.lint()
    assert r.gates == [] and r.mutated_inputs == []


def test_gm_call_equals_eager():
    x, w = tp.randn(64, 128), tp.randn(64, 128)
    gm = _C.trace(f11, (x, w)).graph_module
    assert "def forward(self, x, w):" in gm.code
    np.testing.assert_allclose(gm(x, w).numpy(), f11(x, w).numpy(), rtol=1e-6)


def test_example_3_1_and_3_2_gates_and_replay():
    r = _C.trace(ex31, (tp.ones(4, 8),))
    assert [(k, v) for _, k, v in r.gates] == [("bool", True)]
    gate_node = r.gates[0][0]
    assert gate_node.target is operator.gt
    # the gate node stays in the graph (no DCE yet), with no users
    assert gate_node.graph is r.graph_module.graph
    rep = r.replay
    calls = call_nodes(rep.graph)
    assert [n.name for n in calls] == ["sum_0", "gt"]
    assert len(calls) == 2
    # replay on other inputs re-evaluates the gate
    assert bool(rep(-2 * tp.ones(4, 8))[0]) is False
    assert bool(rep(tp.ones(6, 8))[0]) is True
    r2 = _C.trace(ex31, (-2 * tp.ones(4, 8),))
    assert r2.gates[0][2] is False
    np.testing.assert_allclose(r2.graph_module(-2 * tp.ones(4, 8)).numpy(), -3)


def test_example_3_3_value_gate_vs_gate():
    def f1(x):
        n = int(x.sum())
        return x * n

    def f2(x):
        n = tp.graph.gate(x.sum())
        return x * n

    o = tp.ones(2, 3)
    r1 = _C.trace(f1, (o,))
    assert [(k, v) for _, k, v in r1.gates] == [("int", 6)]
    assert "operator.mul](args = (%x, 6)" in str(r1.graph_module.graph)
    r2 = _C.trace(f2, (o,))
    assert r2.gates == []
    t = 2 * tp.ones(2, 3)
    assert float(r2.graph_module(t).numpy()[0, 0]) == 24
    assert float(r2.graph_module(o).numpy()[0, 0]) == 6
    # int() of a gate()d value still freezes
    r3 = _C.trace(lambda x: x * int(tp.graph.gate(x.sum())), (o,))
    assert [k for _, k, _ in r3.gates] == ["int"]
    # outside tracing gate is the identity
    assert tp.graph.gate(o) is o


def test_value_gates_kinds():
    def f(x):
        a = float(x[0])
        b = x[1].item()
        c = x.tolist()
        d = [10, 20, 30][x[2].long()] if hasattr(x, "long") else 0
        return x * (a + b + len(c) + d)

    x = tp.tensor([1.0, 2.0, 0.0])
    r = _C.trace(f, (x,))
    kinds = [k for _, k, _ in r.gates]
    assert kinds[:3] == ["float", "item", "tolist"]
    np.testing.assert_allclose(r.graph_module(x).numpy(), f(x).numpy())


def test_shape_reads():
    def f(x, y):
        n = x.shape[0]
        return y * len(y) + n

    r = _C.trace(f, (tp.ones(3, 4), tp.ones(5)))
    assert (0, 0) in r.shape_reads and (0, 1) in r.shape_reads
    assert (1, 0) in r.shape_reads
    assert r.gates == []


def test_proxy_surface():
    def f(x, y):
        a = 2 * x                # reflected
        b = x - 1
        a += y                   # in place
        c = (x > 0) & (y < 1)
        d = x[0] + x[:, 1:2].sum()
        e = x.T.t()
        rows = [r * 1 for r in x]  # iteration unrolled over dim 0
        s = x.size(1) + x.dim() + x.ndim + x.numel()
        return a, b, c, d, e, rows, s, x.dtype, x.mT

    x, y = tp.randn(3, 4), tp.randn(3, 4)
    r = _C.trace(f, (x, y))
    g = r.graph_module.graph
    txt = str(g)
    assert "operator.mul](args = (2, %x)" in txt
    assert "call_method[target=add_]" in txt
    assert "target=operator.getitem" in txt
    g.lint()
    got = r.graph_module(x, y)
    want = f(x, y)
    for a, b in zip(got[:5], want[:5]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    assert len(got[5]) == 3 and got[6] == want[6]


def test_setitem_and_methods_through_getattr():
    def f(x):
        y = x.clone()
        y[0] = 5.0
        return y.exp().clamp(min=0.5)

    x = tp.randn(3)
    r = _C.trace(f, (x,))
    txt = str(r.graph_module.graph)
    assert "operator.setitem" in txt and "call_method[target=exp]" in txt
    np.testing.assert_allclose(r.graph_module(x).numpy(), f(x).numpy(), rtol=1e-6)


def test_module_inlined():
    lin = tp.nn.Linear(4, 3)

    def f(x):
        return tp.relu(lin(x))

    x = tp.randn(2, 4)
    r = _C.trace(f, (x,))
    assert all(n.op != "call_module" for n in r.graph_module.graph.nodes)
    assert len(r.constants) >= 1    # weight/bias held by reference
    for t in r.constants.values():
        assert any(t is p for p in lin.parameters())
    with tp.no_grad():
        np.testing.assert_allclose(r.graph_module(x).numpy(), f(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("make", [
    lambda: tp.randn(8, 8),
    lambda: tp.randn(8, 8).t(),
    lambda: tp.randn(8, 1).expand(8, 8),
    lambda: tp.randn(8, 16)[:, ::2],
    lambda: tp.randn(20)[3:11],
])
def test_stand_in_keeps_layout(make):
    x = make()
    seen = {}

    def f(p):
        seen["v"] = p.node.meta["val"]
        return p * 2 + 1

    r = _C.trace(f, (x,))
    si = seen["v"]
    assert si is not x
    assert tuple(si.shape) == tuple(x.shape)
    assert si.stride() == x.stride()
    assert si.storage_offset() == x.storage_offset() or x.storage_offset() > 0
    np.testing.assert_array_equal(si.numpy(), x.numpy())
    np.testing.assert_allclose(r.graph_module(x).numpy(), (x * 2 + 1).numpy())


def test_offset_preserved():
    base = tp.randn(20)
    x = base[3:11]
    seen = {}

    def f(p):
        seen["v"] = p.node.meta["val"]
        return p + 1

    _C.trace(f, (x,))
    assert seen["v"].storage_offset() == x.storage_offset() == 3


def test_mutation_invisible_and_reported():
    def f(x, y):
        x.mul_(2)
        y.add_(1)
        return x + y

    x0 = np.random.rand(3, 4).astype(np.float32)
    y0 = np.random.rand(3, 4).astype(np.float32)
    x, y = tp.tensor(x0), tp.tensor(y0)
    vx, vy = x._version, y._version
    r = _C.trace(f, (x, y))
    np.testing.assert_array_equal(x.numpy(), x0)
    np.testing.assert_array_equal(y.numpy(), y0)
    assert (x._version, y._version) == (vx, vy)
    assert r.mutated_inputs == [0, 1]


def test_module_buffers_restored():
    bn = tp.nn.BatchNorm1d(4) if hasattr(tp.nn, "BatchNorm1d") else None
    if bn is None:
        pytest.skip("no BatchNorm1d")
    bufs = [b.numpy().copy() for b in bn.buffers()]
    _C.trace(bn, (tp.randn(8, 4),))
    for b, b0 in zip(bn.buffers(), bufs):
        np.testing.assert_array_equal(b.numpy(), b0)


def test_rng_untouched():
    def f(x):
        return x + tp.randn(3)

    tp.manual_seed(7)
    a = tp.randn(3).numpy()
    tp.manual_seed(7)
    _C.trace(f, (tp.ones(3),))
    b = tp.randn(3).numpy()
    np.testing.assert_array_equal(a, b)


def test_deferred_sample_error():
    def f(x, y):
        z = x + y               # shapes do not broadcast: sample fails
        w = x * 2               # tracing goes on
        if z.sum() > 0:         # the value is needed here
            return w
        return w

    with pytest.raises(Exception) as ei:
        _C.trace(f, (tp.ones(3), tp.ones(4)))
    msg = str(ei.value)
    assert "%add" in msg and "test_trace.py" in msg and "z = x + y" in msg
    assert ei.value.__cause__ is not None


def test_failed_write_raises_at_trace_time():
    """A write (in-place op, setitem) that raises on the sample raises the
    user's error right there, as eager does: the target's later value is
    unknown to the graph. The failed write leaves no node, so fn's own
    try/except sees the eager error and goes on."""
    def f(x, y):
        x.add_(y)               # (1,) += (3,): would resize x
        return x * 1

    with pytest.raises(RuntimeError, match="broadcast shape"):
        _C.trace(f, (tp.ones(1), tp.ones(3)))

    def g(x, y):
        try:
            x.add_(y)
        except RuntimeError:
            x.mul_(5)
        return x * 1

    gm = _C.trace(g, (tp.ones(1), tp.ones(3))).graph_module
    assert [n.target for n in gm.graph.nodes if n.op == "call_method"] == ["mul_"]
    assert tp.compile(g)(tp.ones(1), tp.ones(3)).tolist() == g(tp.ones(1), tp.ones(3)).tolist() == [5.0]


def test_sample_failure_not_needed_is_symbolic():
    def f(x):
        bad = x + tp.ones(5)     # fails on the sample, result unused
        return x * 2

    r = _C.trace(f, (tp.ones(3),))
    add = [n for n in r.graph_module.graph.nodes if n.name == "add"][0]
    assert "val" not in add.meta and "sample_error" in add.meta


def test_user_exception_propagates_unchanged():
    class Boom(Exception):
        pass

    def f(x):
        raise Boom("no")

    with pytest.raises(Boom, match="no"):
        _C.trace(f, (tp.ones(3),))
    assert not _C.is_tracing()

    def g(x):
        for _ in tp.tensor(3.0) * x.sum():
            pass

    with pytest.raises(TypeError, match="0-d"):
        _C.trace(g, (tp.ones(3),))


def test_stack_meta_and_names():
    def f(x, *rest, scale=None):
        return x * scale + rest[0]

    r = _C.trace(f, (tp.ones(3), tp.ones(3)), {"scale": tp.ones(3)})
    names = [n.name for n in r.graph_module.graph.nodes if n.op == "placeholder"]
    assert names == ["x", "rest_0", "scale"]
    mul = [n for n in r.graph_module.graph.nodes if n.name == "mul"][0]
    assert "test_trace.py" in mul.meta["stack"] and "in f:" in mul.meta["stack"]
    r2 = _C.trace(f, (tp.ones(3), tp.ones(3)), {"scale": tp.ones(3)},
                  ["a", "b"])
    names = [n.name for n in r2.graph_module.graph.nodes if n.op == "placeholder"]
    assert names == ["a", "b", "scale"]


def test_nested_containers_and_outputs():
    def f(xs, d):
        return {"s": xs[0] + xs[1], "t": (d["k"] * 2, 3)}

    a, b, k = tp.ones(2), tp.ones(2), tp.ones(2)
    r = _C.trace(f, ([a, b], {"k": k}))
    names = [n.name for n in r.graph_module.graph.nodes if n.op == "placeholder"]
    assert names == ["xs_0", "xs_1", "d_0"]
    out = r.graph_module(a, b, k)
    assert out["t"][1] == 3
    np.testing.assert_allclose(out["s"].numpy(), 2)


def test_proxy_escaping_trace_raises():
    keep = []

    def f(x):
        keep.append(x)
        return x + 1

    _C.trace(f, (tp.ones(2),))
    with pytest.raises(RuntimeError, match="after its trace ended"):
        keep[0] + 1


def test_no_leak_in_trace_loop():
    x, w = tp.randn(4, 8), tp.randn(4, 8)
    for _ in range(50):
        _C.trace(ex31, (x,))
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(5000):       # 10k traces
        _C.trace(ex31, (x,))
        _C.trace(f11, (x, w))
    gc.collect()
    after = len(gc.get_objects())
    assert after - before < 300


def test_random_creation_recorded_not_frozen():
    def f(x):
        return x + tp.randn(3)

    r = _C.trace(f, (tp.zeros(3),))
    txt = str(r.graph_module.graph)
    assert "randn](args = (3,)" in txt and r.constants == {}
    assert tp.randn is not None and type(tp.randn).__name__ == "function"
    gm = r.graph_module
    tp.manual_seed(3)
    a = gm(tp.zeros(3)).numpy()
    b = gm(tp.zeros(3)).numpy()
    tp.manual_seed(3)
    e = f(tp.zeros(3)).numpy()
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, e)


def test_tensor_with_proxy_argument_and_functions():
    import tensorplay.nn.functional as F

    def f(x, y):
        t = tp.ones(3)
        return (t + x, tp.cat([x, y]), tp.where(x > 0, x, y),
                F.softmax(x, dim=0), x.add(y, alpha=2))

    x, y = tp.randn(3), tp.randn(3)
    r = _C.trace(f, (x, y))
    txt = str(r.graph_module.graph)
    assert "get_attr[target=_tensor_constant0]" in txt
    assert "tensorplay.functional.cat](args = ([%x, %y],)" in txt
    assert "kwargs = {alpha: 2}" in txt
    for a, b in zip(r.graph_module(x, y), f(x, y)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


CONST = None


def test_constant_mutated_in_place_is_restored():
    global CONST
    CONST = tp.ones(3)
    v0 = CONST._version

    def f(x):
        CONST.add_(x)
        return CONST * 2

    r = _C.trace(f, (tp.ones(3),))
    np.testing.assert_array_equal(CONST.numpy(), 1.0)
    assert CONST._version == v0
    assert any(t is CONST for t in r.constants.values())


def test_constants_met_after_the_function_returned_are_not_copied():
    # a constant is held by reference and never copied for being read; the
    # write journal copies a storage only when the trace writes it (and
    # undoes the write); creations demoted to constants at the output and
    # tensors returned as they are are not copied either
    used = tp.ones(32, 32)
    kept = tp.ones(64, 64)

    def f(x):
        m = tp.ones(128, 128)     # a creation: demoted to a get_attr constant
        return x + m, kept

    def g(x):
        return x * used

    before = _C._trace_snapshot_bytes()
    r = _C.trace(f, (tp.ones(128, 128),))
    assert _C._trace_snapshot_bytes() == before
    assert any(t is kept for t in r.constants.values())
    assert any(tuple(t.shape) == (128, 128) for t in r.constants.values())
    a, b = r.graph_module(tp.ones(128, 128))
    np.testing.assert_array_equal(a.numpy(), 2.0)
    assert b is kept
    _C.trace(g, (tp.ones(32, 32),))
    assert _C._trace_snapshot_bytes() == before

    def h(x):
        used.add_(x)              # a recorded write of the constant
        return x * used

    r = _C.trace(h, (tp.ones(32, 32),))
    assert _C._trace_snapshot_bytes() == before + 32 * 32 * 4
    np.testing.assert_array_equal(used.numpy(), 1.0)     # undone
    out = r.graph_module(tp.ones(32, 32))
    np.testing.assert_array_equal(out.numpy(), 2.0)
    np.testing.assert_array_equal(used.numpy(), 2.0)     # the graph writes it


def test_generator_function_rejected():
    def g(x):
        yield x + 1

    with pytest.raises(TypeError, match="generator"):
        _C.trace(g, (tp.ones(2),))


def test_example_4_1_before_normalization():
    r = _C.trace(lambda x: (2 * x + 0).exp(), (tp.ones(3),))
    txt = str(r.graph_module.graph)
    assert "call_function[target=operator.mul](args = (2, %x), kwargs = {})" in txt
    assert "call_function[target=operator.add](args = (%mul, 0), kwargs = {})" in txt
    assert "call_method[target=exp](args = (%add,), kwargs = {})" in txt


def test_numpy_is_a_tolist_gate():
    r = _C.trace(lambda x: x * float(np.asarray(x.sum())), (tp.ones(3),))
    kinds = [(k, v) for _, k, v in r.gates]
    assert kinds[0] == ("tolist", 3.0)


def test_format_reads_sample_without_gate():
    out = []
    r = _C.trace(lambda x: out.append(f"{x.sum():.1f}") or x + 1, (tp.ones(3),))
    assert out == ["3.0"] and r.gates == []


def test_fresh_buffer_mutated_inside_fn_is_not_frozen():
    def f(x):
        out = tp.zeros(3)
        out[0] = x.sum()          # a proxy value into a fresh tensor
        out.add_(x)
        return out

    x = tp.ones(3)
    r = _C.trace(f, (x,))
    txt = str(r.graph_module.graph)
    assert "zeros](args = (3,)" in txt and "operator.setitem" in txt
    assert r.gates == []
    gm = r.graph_module
    a = gm(x).numpy().copy()
    b = gm(x).numpy()             # a fresh buffer every call
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, f(x).numpy())


def test_unmutated_creation_becomes_constant_and_literal_gates_vanish():
    def f(x):
        c = tp.ones(3) * 2
        if tp.tensor(1.0) > 0:    # a function of literals: no data gate
            return x + c
        return x

    r = _C.trace(f, (tp.ones(3),))
    txt = str(r.graph_module.graph)
    assert "get_attr[target=_tensor_constant0]" in txt
    assert "ones](" not in txt
    assert r.gates == []
    np.testing.assert_allclose(r.graph_module(tp.ones(3)).numpy(), 3.0)


def test_module_built_inside_fn_gets_real_parameters():
    def f(x):
        return tp.nn.Linear(4, 2)(x)

    r = _C.trace(f, (tp.ones(3, 4),))
    assert len(r.constants) >= 1
    with pytest.raises(RuntimeError):
        _C.trace(lambda x: tp.nn.Linear(3, 2)(x), (tp.ones(2, 4),))


def test_aliased_arguments_alias_in_the_trace():
    base = tp.randn(4, 4)
    a, b = base, base.t()
    seen = {}

    def f(x, y):
        x.mul_(0)                  # through x ...
        seen["y"] = y.sum().item()  # ... visible through y, as in eager
        return x + y

    r = _C.trace(f, (a, b))
    assert seen["y"] == 0.0
    assert r.mutated_inputs == [0, 1]
    assert np.abs(base.numpy()).sum() > 0      # the caller's tensor untouched
    row = base[1]
    seen.clear()

    def g(x, r0):
        seen["same"] = r0.node.meta["val"].storage_offset()
        return x + 1

    _C.trace(g, (base, row))
    assert seen["same"] == 4


def test_module_as_fn_names_from_forward():
    lin = tp.nn.Linear(4, 2)
    r = _C.trace(lin, (tp.ones(3, 4),))
    names = [n.name for n in r.graph_module.graph.nodes if n.op == "placeholder"]
    assert names == ["input_0"]      # forward(self, input); 'input' is a builtin


# ---------------------------------------------------------------------------
# replay slice and mutations (Algorithm 3.1 with in-place ops before a gate)

def _replay_targets(r):
    return [n.target if isinstance(n.target, str) else n.target.__name__
            for n in r.replay.graph.nodes if n.op in ("call_function", "call_method")]


def test_replay_takes_inplace_before_gate_and_spares_the_input():
    def f(x):
        x.add_(1)
        if x.sum() > 0:
            return x * 2
        return x - 1
    x = tp.tensor([-1.5, 0.0])
    r = _C.trace(f, (x,))
    assert [(k, v) for _, k, v in r.gates] == [("bool", True)]
    # the input is written by the slice: cloned first, then add_, sum, gt
    assert _replay_targets(r) == ["clone", "add_", "sum", "gt"]
    v0, before = x._version, x.tolist()
    assert [bool(t) for t in r.replay(x)] == [True]       # sees x + 1
    assert x.tolist() == before and x._version == v0       # caller untouched
    y = tp.tensor([-3.0, 0.0])
    assert [bool(t) for t in r.replay(y)] == [False]
    assert y.tolist() == [-3.0, 0.0]


@pytest.mark.parametrize("case", ["setitem", "view", "reshape_view", "intermediate", "copy_"])
def test_replay_takes_mutations_through_views_setitem_copy(case):
    def f(x):
        if case == "setitem":
            x[:, 1:] = -5.0
        elif case == "view":
            x.view(-1).mul_(-1)
        elif case == "reshape_view":
            x.reshape(1, -1, 1).mul_(-1)
        elif case == "copy_":
            x[0].copy_(x[1] * -10)
        else:
            x = x * 2
            x.sub_(10)
        return x + int((x > 0).sum())
    x = tp.ones(2, 3)
    r = _C.trace(f, (x,))
    want = r.gates[0][2]
    v0 = x._version
    got = int(r.replay(x)[0])
    assert got == want, (case, _replay_targets(r))
    assert x.tolist() == [[1.0] * 3] * 2 and x._version == v0
    # and on another input the replay agrees with eager
    z = tp.tensor([[1.0, -2.0, 3.0], [-4.0, 5.0, 6.0]])
    zz = tp.tensor(z.tolist())
    f(zz)
    eager_gate = int(((zz if case != "intermediate" else (z * 2 - 10)) > 0).sum())
    assert int(r.replay(z)[0]) == eager_gate
    assert z.tolist() == [[1.0, -2.0, 3.0], [-4.0, 5.0, 6.0]]


def test_replay_leaves_out_mutations_no_gate_depends_on():
    def f(x, y):
        y.mul_(2)             # y never reaches a gate
        if x.sum() > 0:
            x.add_(1)         # after the last gate
            return x + y
        return x - y
    r = _C.trace(f, (tp.ones(2), tp.ones(2)))
    assert _replay_targets(r) == ["sum", "gt"]


def test_replay_gate_read_before_a_later_mutation_keeps_its_value():
    def f(x):
        a = int(x[0])         # gate 1 reads x[0] (a view of x) before the write
        x.neg_()
        b = int(x[0])         # gate 2 reads it after
        return x * (a + b)
    x = tp.tensor([3.0, 1.0])
    r = _C.trace(f, (x,))
    assert [v for _, _, v in r.gates] == [3, -3]
    assert [int(t) for t in r.replay(x)] == [3, -3]
    assert [int(t) for t in r.replay(tp.tensor([5.0, 0.0]))] == [5, -5]
    assert x.tolist() == [3.0, 1.0]


def test_replay_without_mutations_is_unchanged():
    r = _C.trace(ex31, (tp.ones(4, 8),))
    assert _replay_targets(r) == ["sum", "gt"]


@pytest.mark.parametrize("conv", ["to", "float", "contiguous", "type"])
def test_noop_conversion_is_the_argument(conv):
    """Fuzz seed 527: x.to(x.dtype) (x.float() on float32, x.contiguous() on
    a contiguous x) returns x itself in eager, so a later in-place op on the
    result writes x. The tracer records no node for it: the result is the
    argument's proxy."""
    def f(x):
        if conv == "to":
            v = x.to(tp.float32)
        elif conv == "type":
            v = x.type(tp.float32)
        else:
            v = getattr(x, conv)()
        assert v is x
        v.clamp_(min=2.0)
        return x * 1
    r = _C.trace(f, (tp.tensor([0.5, 3.0]),))
    assert [n.target for n in r.graph_module.graph.nodes if n.op == "call_method"] == ["clamp_"]
    assert r.mutated_inputs == [0]
    # a real conversion still records its node
    r2 = _C.trace(lambda x: x.to(tp.float64) + 1, (tp.ones(2),))
    assert [n.target for n in r2.graph_module.graph.nodes if n.op == "call_method"] == ["to"]


def test_replay_with_aliased_inputs_runs_on_aliasing_copies():
    """f(x, x): a write through `a` must be seen by the gate reading `b`.
    Separate clones would lose the aliasing: the trace result says so
    (replay_copies_inputs) and _trace_stand_ins copies the inputs keeping it."""
    def g(a, b):
        a.add_(1)
        if b.sum() > 0:
            return b * 2
        return b * 3
    x = -tp.ones(2)
    r = _C.trace(g, (x, x))
    assert r.replay_copies_inputs and [v for _, _, v in r.gates] == [False]
    assert "clone" not in _replay_targets(r)
    cp = _C._trace_stand_ins([x, x.t(), x[1:]])
    assert cp[0]._storage is cp[1]._storage is cp[2]._storage
    assert cp[0]._storage is not x._storage and cp[2].storage_offset() == 1
    assert [bool(t) for t in r.replay(*_C._trace_stand_ins([x, x]))] == [False]
    y = tp.tensor([-0.5, -0.5])
    assert [bool(t) for t in r.replay(*_C._trace_stand_ins([y, y]))] == [True]
    assert y.tolist() == [-0.5, -0.5] and x.tolist() == [-1.0, -1.0]
    r2 = _C.trace(g, (tp.ones(2), tp.ones(2)))
    assert not r2.replay_copies_inputs
