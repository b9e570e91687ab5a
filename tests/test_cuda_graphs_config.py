"""CUDA graphs' setting and decision logic, checked without a GPU (the replays
themselves: tests/gpu/test_gpu_cuda_graphs.py).

tp.compiler.config.cuda_graphs is True, False or "auto" (default; the
environment's TENSORPLAY_CUDA_GRAPHS at import), read by the compiled-program
runtime on every call; a program's own `cuda_graphs` overrides it and
tp.compile(mode=...) sets that as torch's modes do. _C._cuda_graph_plan is
the per-call decision the runtime makes."""
import os
import subprocess
import sys

import pytest

import tensorplay as tp

C = tp._C
PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")


@pytest.fixture(autouse=True)
def _restore():
    old = tp.compiler.config.cuda_graphs
    yield
    tp.compiler.config.cuda_graphs = old


@pytest.mark.parametrize("v", [True, False, "auto"])
def test_config_values_reach_the_runtime(v):
    tp.compiler.config.cuda_graphs = v
    assert tp.compiler.config.cuda_graphs == v
    assert C._cuda_graphs_mode() == v


@pytest.mark.parametrize("v,exc", [("on", ValueError), ("Auto", ValueError), (1, TypeError),
                                   (0, TypeError), (None, TypeError), (2.0, TypeError)])
def test_config_rejects_other_values_naming_the_setting(v, exc):
    tp.compiler.config.cuda_graphs = "auto"
    with pytest.raises(exc, match=r"tp\.compiler\.config\.cuda_graphs must be True, False or \"auto\""):
        tp.compiler.config.cuda_graphs = v
    assert tp.compiler.config.cuda_graphs == "auto" and C._cuda_graphs_mode() == "auto"


def test_config_typo_names_the_setting():
    with pytest.raises(AttributeError, match="cuda_graphs"):
        tp.compiler.config.cuda_graph = True


def test_runtime_mode_rejects_other_values():
    with pytest.raises(ValueError, match="cuda_graphs"):
        C._cuda_graphs_mode("sometimes")
    assert C._cuda_graphs_mode() == tp.compiler.config.cuda_graphs


def _import_with(env_value):
    env = dict(os.environ, PYTHONPATH=PY, TENSORPLAY_CUDA_GRAPHS=env_value)
    r = subprocess.run([sys.executable, "-W", "always", "-c",
                        "import tensorplay as tp; print(repr(tp.compiler.config.cuda_graphs), "
                        "repr(tp._C._cuda_graphs_mode()))"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split(), r.stderr


@pytest.mark.parametrize("raw,want", [("auto", "'auto'"), ("1", "True"), ("on", "True"),
                                      ("TRUE", "True"), ("0", "False"), ("off", "False"),
                                      ("no", "False"), ("", "'auto'")])
def test_environment_variable_sets_the_default(raw, want):
    out, err = _import_with(raw)
    assert out == [want, want], (out, err)
    assert "TENSORPLAY_CUDA_GRAPHS" not in err


def test_invalid_environment_variable_warns_naming_it_and_uses_auto():
    out, err = _import_with("sometimes")
    assert out == ["'auto'", "'auto'"]
    assert "RuntimeWarning" in err and "TENSORPLAY_CUDA_GRAPHS='sometimes'" in err, err


# the decision: (mode, kernels per call, calls made before, direct samples,
# graph samples) -> (action, reason)
def plan(mode, nk, calls, d=(), g=()):
    return C._cuda_graph_plan(mode, nk, calls, list(d), list(g))


def test_off_never_takes_a_graph():
    for calls in (0, 1, 100):
        act, why = plan(False, 5, calls)
        assert act == "direct" and "False" in why


def test_the_first_call_is_a_warm_up_in_every_mode():
    for mode in (True, "auto"):
        act, why = plan(mode, 5, 0)
        assert act == "direct" and "warm-up" in why


def test_on_takes_a_graph_from_the_second_call_even_for_one_kernel():
    assert plan(True, 1, 1) == ("graph", None)
    assert plan(True, 7, 50) == ("graph", None)


def test_auto_measures_a_one_kernel_program_too():
    # a one-node graph's launch was cheaper than the launch on the H200
    assert plan("auto", 1, 1) == ("measure direct", None)
    assert plan("auto", 1, 12, [5.0] * 5, [9.0, 3.0, 3.0, 3.0, 3.0, 3.0]) == ("graph", None)


def test_auto_measures_direct_then_graph_calls():
    n = 5
    for k in range(n):
        assert plan("auto", 3, 1 + k, [10.0] * k) == ("measure direct", None)
    for k in range(n + 1):
        assert plan("auto", 3, 1 + n + k, [10.0] * n, [9.0] * k) == ("measure graph", None)


def test_auto_keeps_the_faster_way_by_medians_and_ignores_the_build():
    d = [10.0, 11.0, 9.0, 50.0, 10.0]                 # median 10
    # the first graph sample built the graph (slow): not compared
    assert plan("auto", 3, 12, d, [500.0, 6.0, 7.0, 6.0, 90.0, 6.0]) == ("graph", None)
    assert plan("auto", 3, 12, d, [500.0, 10.0, 10.0, 10.0, 10.0, 10.0]) == ("graph", None)
    act, why = plan("auto", 3, 12, d, [1.0, 12.0, 13.0, 11.0, 12.0, 2.0])
    assert act == "direct" and "12.0 us per call with a graph, 10.0 us without" in why


def test_plan_rejects_a_bad_mode_and_too_many_samples():
    with pytest.raises(ValueError):
        plan("maybe", 2, 1)
    with pytest.raises(ValueError, match="samples"):
        plan("auto", 2, 1, [1.0] * 6)


def test_a_cpu_program_reports_no_graph():
    cf = tp.compile(lambda x: (x.softmax(-1) + 1).sum(0))
    cf(tp.ones(4, 5))
    p = cf.versions[0].artifact
    info = p.cuda_graph
    assert info["state"] == "off" and info["reason"] == "not a CUDA program", info
    assert info["graph_replays"] == 0 and info["builds"] == 0
    assert set(info) == {"mode", "state", "reason", "kernels", "calls", "direct_calls",
                         "graph_replays", "builds", "node_updates", "nodes", "direct_us",
                         "graph_us"}


def test_program_override_validates_and_follows_the_config_when_none():
    cf = tp.compile(lambda x: x * 2 + 1)
    cf(tp.ones(3))
    p = cf.versions[0].artifact
    assert p.cuda_graphs is None
    tp.compiler.config.cuda_graphs = False
    assert p.cuda_graph["mode"] == "off"
    for v, name in ((True, "on"), ("auto", "auto"), (False, "off")):
        p.cuda_graphs = v
        assert p.cuda_graphs == v and p.cuda_graph["mode"] == name
    p.cuda_graphs = None
    tp.compiler.config.cuda_graphs = True
    assert p.cuda_graphs is None and p.cuda_graph["mode"] == "on"
    with pytest.raises(ValueError, match="cuda_graphs must be True, False or \"auto\""):
        p.cuda_graphs = "yes"
    with pytest.raises(TypeError, match="cuda_graphs"):
        p.cuda_graphs = 1
    with pytest.raises(AttributeError):
        del p.cuda_graphs


@pytest.mark.parametrize("mode,want", [("reduce-overhead", True), ("max-autotune", True),
                                       ("max-autotune-no-cudagraphs", False), ("default", None),
                                       (None, None)])
def test_compile_modes_set_the_programs_own_cuda_graphs(mode, want):
    cf = tp.compile(lambda x: (x - x.mean()).exp(), mode=mode)
    cf(tp.ones(6))
    assert cf.versions[0].artifact.cuda_graphs is want


@pytest.mark.skipif(tp.cuda.is_available(), reason="checks the answer without a GPU")
def test_without_cuda_graphs_are_unavailable_and_say_why():
    why = C._cuda_graphs_available()
    assert isinstance(why, str) and "CUDA is not available" in why
