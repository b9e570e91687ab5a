"""CUDA graphs of compiled CUDA programs (issue 14, deliverable 4): a program
whose steps are all kernels replays its launches as one graph from its
second call (tp.compiler.config.cuda_graphs = True), never (False), or
where timing shows it is faster ("auto", the default).

Each call gets new tensors (other device addresses: the graph's kernel
nodes are updated), and the results are compared with the CPU's eager
ones for every mode. Random ops draw new numbers on every replay, in
eager's stream. `program.cuda_graph` counts the calls made kernel by
kernel and the graph replays.

    sh scripts/gpu/build.sh .gpu python3 -m pytest tests/gpu   # on a GPU machine
"""
import gc
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.compiler._aliasing import unwrap

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

F = tp.nn.functional
C = tp._C


@pytest.fixture(autouse=True)
def _mode():
    """each test sets the mode it needs; the default comes back after"""
    old = tp.compiler.config.cuda_graphs
    yield
    tp.compiler.config.cuda_graphs = old
    C._cuda_graph_inject("")


def _prog(cf, v=0):
    p = unwrap(cf.versions[v].artifact)     # under a view-outputs wrapper
    assert isinstance(p, C.CompiledProgram), type(p)
    return p


def _close(got, want, tol=2e-5):
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w, tol)
        return
    assert got.is_cuda, got.device
    g = got.cpu().numpy().astype(np.float64)
    w = want.numpy().astype(np.float64)
    np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def chain(x, w):
    """softmax (a row reduction), a pointwise product, a centring by the row
    mean (another reduction), gelu, and a column sum: several kernels"""
    y = F.softmax(x, -1) * w
    z = F.gelu(y - y.mean(-1, keepdim=True))
    return z, z.sum(0)


def _inputs(seed, n=64, m=96):
    rng = np.random.default_rng(seed)
    x = tp.from_numpy(rng.standard_normal((n, m)).astype(np.float32))
    w = tp.from_numpy(rng.standard_normal(m).astype(np.float32))
    return x, w


@pytest.mark.parametrize("mode", [True, False, "auto"])
def test_multi_kernel_program_matches_eager_in_every_mode(mode):
    tp.compiler.config.cuda_graphs = mode
    cf = tp.compile(chain)
    calls = 24
    keep = []                          # every call's tensors stay alive:
    for i in range(calls):             # new device addresses each call
        x, w = _inputs(i)
        args = (x.cuda(), w.cuda())
        out = cf(*args)
        _close(out, chain(x, w))
        keep.append((args, out))
    p = _prog(cf)
    info = p.cuda_graph
    assert len(p.kernels) >= 2, p.steps
    assert info["kernels"] == len(p.kernels) and info["calls"] == calls, info
    assert info["direct_calls"] + info["graph_replays"] == calls, info
    if mode is True:
        assert info["state"] == "graph" and info["reason"] is None, info
        assert info["direct_calls"] == 1 and info["graph_replays"] == calls - 1, info
        assert info["builds"] == 1 and info["nodes"] == len(p.kernels), info
        # the inputs moved every call: their nodes got the new addresses
        assert info["node_updates"] >= calls - 2, info
    elif mode is False:
        assert info["state"] == "off" and info["graph_replays"] == 0, info
        assert "False" in info["reason"], info
    else:
        # auto: the first call, then timed calls each way, then the faster
        assert info["state"] in ("graph", "direct"), info
        assert info["direct_us"] > 0 and info["graph_us"] > 0, info
        assert info["graph_replays"] >= 5, info
        assert (info["state"] == "graph") == (info["graph_us"] <= info["direct_us"]), info


def test_changing_the_mode_applies_to_the_next_call():
    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(chain)
    x, w = _inputs(0)
    for _ in range(3):
        cf(x.cuda(), w.cuda())
    assert _prog(cf).cuda_graph["graph_replays"] == 2
    tp.compiler.config.cuda_graphs = False
    for _ in range(3):
        _close(cf(x.cuda(), w.cuda()), chain(x, w))
    info = _prog(cf).cuda_graph
    assert info["graph_replays"] == 2 and info["direct_calls"] == 4, info


def test_in_place_writes_to_inputs_replay_in_order():
    def f(acc, x):
        acc.add_(x.softmax(-1))        # in place on an input
        return (acc * 2).sum(-1)

    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(f)
    acc_d = tp.zeros(32, 48, device="cuda")
    acc_h = tp.zeros(32, 48)
    for i in range(10):
        x, _ = _inputs(i, 32, 48)
        _close(cf(acc_d, x.cuda()), f(acc_h, x))
        _close(acc_d, acc_h)           # the write happened on every replay
    assert _prog(cf).cuda_graph["graph_replays"] == 9


def test_outputs_that_alias_inputs():
    def f(x, y):
        x.mul_(2)
        return x, (x + y).softmax(-1), y

    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(f)
    for i in range(6):
        a, b = _inputs(i, 16, 40)
        b = b.expand(16, 40).contiguous()
        ad, bd = a.cuda(), b.cuda()
        got = cf(ad, bd)
        want = f(a, b)
        _close(got, want)
        assert got[0].data_ptr() == ad.data_ptr() and got[2].data_ptr() == bd.data_ptr()
    assert _prog(cf).cuda_graph["graph_replays"] == 5


def test_random_ops_draw_new_numbers_on_every_replay():
    def f(x):
        return (x + tp.rand_like(x)).softmax(-1) * 2 + tp.rand_like(x)

    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(f)
    x = tp.ones(8, 64)
    xd = x.cuda()
    tp.manual_seed(7)
    got = [cf(xd).cpu().numpy() for _ in range(6)]
    tp.manual_seed(7)
    want = [f(x).numpy() for _ in range(6)]
    assert _prog(cf).cuda_graph["graph_replays"] == 5
    for i in range(1, 6):
        assert not np.allclose(got[i], got[i - 1]), f"replay {i} repeated the draws"
    # eager's Philox stream, call after call (the offsets advance per replay)
    np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=2e-5, atol=2e-5)


def test_dynamic_shapes_take_a_graph_per_size():
    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(chain, dynamic=True)
    sizes = [(16, 32), (24, 32), (16, 48), (24, 32), (16, 32), (16, 48)] * 3
    for i, (n, m) in enumerate(sizes):
        x, w = _inputs(i, n, m)
        _close(cf(x.cuda(), w.cuda()), chain(x, w))
    # the first size's program (each other size: a variant of it, its own
    # graph, so no node ever sees another size's launch configuration)
    info = _prog(cf).cuda_graph
    assert info["graph_replays"] >= 1 and info["builds"] == 1, info


def test_static_recompiles_for_new_sizes_get_their_own_graph():
    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(chain, dynamic=False)
    for i, (n, m) in enumerate([(16, 32), (8, 40)] * 4):
        x, w = _inputs(i, n, m)
        _close(cf(x.cuda(), w.cuda()), chain(x, w))
    assert len(cf.versions) == 2
    for v in range(len(cf.versions)):
        info = _prog(cf, v).cuda_graph
        assert info["graph_replays"] == 3 and info["builds"] == 1, info


def _library_prog(cf):
    p = _prog(cf)
    if "library" not in " ".join(p.steps):
        pytest.skip(f"matmul lowered to kernels here: {p.steps}")
    return p


def test_a_program_with_a_cublas_matmul_replays_as_one_graph():
    # the product is a child-graph node between the kernels; new tensors
    # every call: its capture is redone and the node updated
    def f(x, w):
        return F.gelu(F.softmax(x, -1) @ w)

    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(f)
    rng = np.random.default_rng(0)
    keep = []                  # every call's tensors alive: new addresses
    for _ in range(4):
        x = tp.from_numpy(rng.standard_normal((32, 64)).astype(np.float32))
        w = tp.from_numpy(rng.standard_normal((64, 16)).astype(np.float32))
        keep.append((x.cuda(), w.cuda()))
        keep.append(cf(*keep[-1]))
        _close(keep[-1], f(x, w), tol=2e-3)   # cuBLAS float32
    p = _library_prog(cf)
    info = p.cuda_graph
    assert info["state"] == "graph" and info["reason"] is None, info
    assert info["graph_replays"] == 3 and info["direct_calls"] == 1, info
    assert info["nodes"] >= 2 and info["node_updates"] > 0, info


@pytest.mark.parametrize("dt", [tp.float32, tp.float64, tp.float16, tp.bfloat16])
def test_linear_stack_in_a_graph_matches_eager(dt):
    tp.manual_seed(0)

    def stack():
        return tp.nn.Sequential(tp.nn.Linear(48, 96), tp.nn.GELU(), tp.nn.Linear(96, 24),
                                tp.nn.LayerNorm(24)).to(dt)

    ref = stack()                          # eager on the CPU
    gm = stack()
    gm.load_state_dict(ref.state_dict())   # the same parameters, on CUDA
    gm = gm.cuda()
    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(gm)
    rng = np.random.default_rng(1)
    tol = 2e-3 if dt in (tp.float32, tp.float64) else 3e-2
    with tp.no_grad():
        for _ in range(4):
            x = tp.from_numpy(rng.standard_normal((40, 48)).astype(np.float32)).to(dt)
            _close(cf(x.cuda()).float(), ref(x).float(), tol=tol)
    info = _library_prog(cf).cuda_graph
    assert info["state"] == "graph" and info["graph_replays"] == 3, info


def test_batched_matmul_in_a_graph():
    def f(a, b):
        return (tp.bmm(a.tanh(), b) * 0.5).softmax(-1)

    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(f)
    rng = np.random.default_rng(2)
    for _ in range(4):
        a = tp.from_numpy(rng.standard_normal((3, 20, 30)).astype(np.float32))
        b = tp.from_numpy(rng.standard_normal((3, 30, 10)).astype(np.float32))
        _close(cf(a.cuda(), b.cuda()), f(a, b), tol=2e-3)
    info = _library_prog(cf).cuda_graph
    assert info["state"] == "graph" and info["graph_replays"] == 3, info


def test_same_tensors_every_call_leave_the_product_node_alone():
    def f(x, w):
        return (x.relu() @ w).sum(-1)

    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(f)
    rng = np.random.default_rng(3)
    x = tp.from_numpy(rng.standard_normal((64, 32)).astype(np.float32))
    w = tp.from_numpy(rng.standard_normal((32, 8)).astype(np.float32))
    xc, wc = x.cuda(), w.cuda()
    want = f(x, w)
    for _ in range(6):
        _close(cf(xc, wc), want, tol=2e-3)
    info = _library_prog(cf).cuda_graph
    assert info["graph_replays"] == 5 and info["builds"] == 1, info


def test_a_product_node_that_cannot_be_updated_rebuilds_the_graph():
    def f(x, w):
        return F.gelu(x @ w) + 1

    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(f)
    rng = np.random.default_rng(4)
    keep = []                  # every call's tensors alive: new addresses
    for i in range(4):
        x = tp.from_numpy(rng.standard_normal((16, 24)).astype(np.float32))
        w = tp.from_numpy(rng.standard_normal((24, 12)).astype(np.float32))
        if i == 2:
            C._cuda_graph_inject("cuGraphExecChildGraphNodeSetParams")
        keep.append((x.cuda(), w.cuda()))
        keep.append(cf(*keep[-1]))
        _close(keep[-1], f(x, w), tol=2e-3)
    info = _library_prog(cf).cuda_graph
    assert info["state"] == "graph" and info["graph_replays"] == 3, info
    assert info["builds"] == 2, info


def test_a_failing_product_node_turns_graphs_off_with_a_warning():
    def f(x, w):
        return F.relu(x @ w) * 3

    tp.compiler.config.cuda_graphs = "auto"
    cf = tp.compile(f)
    rng = np.random.default_rng(6)
    x = tp.from_numpy(rng.standard_normal((16, 24)).astype(np.float32))
    w = tp.from_numpy(rng.standard_normal((24, 12)).astype(np.float32))
    xc, wc = x.cuda(), w.cuda()
    for _ in range(6):                 # warm-up and the direct samples
        cf(xc, wc)
    _library_prog(cf)
    C._cuda_graph_inject("cuGraphAddChildGraphNode")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = cf(xc, wc)
    _close(got, f(x, w), tol=2e-3)
    assert any("CUDA_ERROR_NOT_SUPPORTED" in str(r.message) for r in rec), \
        [str(r.message) for r in rec]
    assert _prog(cf).cuda_graph["state"] == "off"
    _close(cf(xc, wc), f(x, w), tol=2e-3)


def test_an_integer_matmul_program_takes_no_graph_attempt():
    # integer products do not go straight to cuBLAS: no node for them
    def f(x, w):
        return (x @ w) + 1

    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(f)
    x = tp.arange(12).reshape(3, 4)
    w = tp.arange(8).reshape(4, 2)
    for _ in range(3):
        got = cf(x.cuda(), w.cuda())
        assert got.cpu().tolist() == f(x, w).tolist()


def test_an_empty_inner_dimension_breaks_the_recording_and_stays_right():
    # K == 0: the product is a fill of zeros (a memset), not a cuBLAS call
    def f(x, w):
        return (x @ w + 1).relu()

    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(f)
    x = tp.zeros(5, 0)
    w = tp.zeros(0, 7)
    for _ in range(3):
        _close(cf(x.cuda(), w.cuda()), f(x, w))


def test_auto_chooses_for_a_cublas_program_and_stays_right():
    def f(x, w):
        return F.layer_norm(F.gelu(x @ w), (w.shape[1],))

    tp.compiler.config.cuda_graphs = "auto"
    cf = tp.compile(f)
    rng = np.random.default_rng(5)
    x = tp.from_numpy(rng.standard_normal((64, 128)).astype(np.float32))
    w = tp.from_numpy(rng.standard_normal((128, 64)).astype(np.float32))
    xc, wc = x.cuda(), w.cuda()
    want = f(x, w)
    for _ in range(16):
        _close(cf(xc, wc), want, tol=2e-3)
    info = _library_prog(cf).cuda_graph
    assert info["state"] in ("graph", "direct"), info
    assert info["direct_us"] is not None and info["graph_us"] is not None, info


def test_one_kernel_program_is_measured_under_auto():
    tp.compiler.config.cuda_graphs = "auto"
    f = lambda x: x * 2 + 1        # noqa: E731
    cf = tp.compile(f)
    x = tp.arange(1000.0)
    for _ in range(15):
        _close(cf(x.cuda()), f(x))
    info = _prog(cf).cuda_graph
    assert info["kernels"] == 1 and info["state"] in ("graph", "direct"), info
    assert info["direct_us"] > 0 and info["graph_us"] > 0, info
    assert (info["state"] == "graph") == (info["graph_us"] <= info["direct_us"]), info


def test_reduce_overhead_mode_forces_graphs_over_the_config():
    tp.compiler.config.cuda_graphs = False
    cf = tp.compile(chain, mode="reduce-overhead")
    x, w = _inputs(3)
    for _ in range(4):
        _close(cf(x.cuda(), w.cuda()), chain(x, w))
    p = _prog(cf)
    assert p.cuda_graphs is True
    assert p.cuda_graph["graph_replays"] == 3, p.cuda_graph
    off = tp.compile(chain, mode="max-autotune-no-cudagraphs")
    tp.compiler.config.cuda_graphs = True
    for _ in range(3):
        off(x.cuda(), w.cuda())
    assert _prog(off).cuda_graph["graph_replays"] == 0


@pytest.mark.parametrize("call", ["cuGraphInstantiateWithFlags", "cuGraphLaunch",
                                  "cuGraphExecKernelNodeSetParams"])
def test_a_driver_error_raises_with_its_cuda_name_then_runs_without_graph(call):
    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(chain)
    keep = []                          # alive: the next call's addresses are new
    # the warm-up call; then (but for the instantiation's error) the build
    for i in range(1 if call == "cuGraphInstantiateWithFlags" else 2):
        args = tuple(t.cuda() for t in _inputs(i))
        keep.append((args, cf(*args)))
    C._cuda_graph_inject(call)
    x, w = _inputs(1)
    with pytest.raises(RuntimeError, match=f"{call}.*CUDA_ERROR_NOT_SUPPORTED"):
        cf(x.cuda(), w.cuda())
    info = _prog(cf).cuda_graph
    assert info["state"] == "off" and "CUDA_ERROR_NOT_SUPPORTED" in info["reason"], info
    replays = info["graph_replays"]
    for i in range(3):                 # kernel by kernel from now on
        x, w = _inputs(10 + i)
        _close(cf(x.cuda(), w.cuda()), chain(x, w))
    assert _prog(cf).cuda_graph["graph_replays"] == replays


def test_under_auto_a_driver_error_warns_and_the_call_still_returns():
    tp.compiler.config.cuda_graphs = "auto"
    cf = tp.compile(chain)
    x, w = _inputs(2)
    for _ in range(6):                 # warm-up and the direct samples
        cf(x.cuda(), w.cuda())
    C._cuda_graph_inject("cuGraphInstantiateWithFlags")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        got = cf(x.cuda(), w.cuda())
    _close(got, chain(x, w))
    assert any("CUDA_ERROR_NOT_SUPPORTED" in str(r.message) for r in rec), [str(r.message) for r in rec]
    assert _prog(cf).cuda_graph["state"] == "off"


def test_missing_graph_entry_points_turn_the_feature_off():
    C._cuda_graph_inject("missing")
    assert "lacks" in C._cuda_graphs_available()
    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(chain)
    x, w = _inputs(4)
    for _ in range(3):
        _close(cf(x.cuda(), w.cuda()), chain(x, w))
    info = _prog(cf).cuda_graph
    assert info["state"] == "off" and "libcuda lacks" in info["reason"], info
    C._cuda_graph_inject("")
    assert C._cuda_graphs_available() is True


def test_a_host_read_inside_the_call_breaks_the_recording_safely():
    """an input written by the user between calls is read as written (the
    graph's nodes see the current buffers), and a data gate (a host read
    of the replay slice) around the program leaves results right"""
    def f(x):
        if x.sum() > 0:
            return F.softmax(x, -1) * 2 - x.mean()
        return F.softmax(-x, -1)

    tp.compiler.config.cuda_graphs = True
    cf = tp.compile(f)
    for i in range(8):
        x, _ = _inputs(i, 8, 16)
        x = x + (1.0 if i % 3 else -1.0) * 10
        _close(cf(x.cuda()), f(x))


def test_graphs_do_not_leak_over_10_5_calls_and_go_with_their_program():
    tp.compiler.config.cuda_graphs = True
    gc.collect()                       # earlier tests' programs go first
    live0 = C._cuda_graphs_live()
    cf = tp.compile(chain)
    xs = [tuple(t.cuda() for t in _inputs(i, 8, 32)) for i in range(3)]
    for i in range(200):
        out = cf(*xs[i % 3])
    del out
    gc.collect()
    tp.cuda.synchronize()
    s0 = C.cuda_memory_stats()
    for i in range(100_000):
        out = cf(*xs[i % 3])
    del out
    gc.collect()
    tp.cuda.synchronize()
    s1 = C.cuda_memory_stats()
    info = _prog(cf).cuda_graph
    assert info["graph_replays"] == 100_199 and info["builds"] == 1, info
    assert s1["allocated"] == s0["allocated"], (s0, s1)
    assert s1["driver_allocs"] == s0["driver_allocs"], (s0, s1)
    assert C._cuda_graphs_live() == live0 + 1
    _close(cf(*xs[0]), chain(*(t.cpu() for t in xs[0])))
    del cf
    gc.collect()
    assert C._cuda_graphs_live() == live0
