"""Tiered compilation on a GPU (csrc/backend_nvrtc/backend_nvrtc_init.c,
docs/gpu.md): a compiled function's first call launches each new kernel's
first version (--Ofast-compile=mid) while the final version compiles in the
background; a launch after it is done runs the final one. Both compute the
same bits, CUDA graphs take the swap, and the compile cache keeps only final
versions.

    sh scripts/gpu/build.sh .gpu python3 -m pytest tests/gpu   # on a GPU machine
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _C

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

F = tp.nn.functional


def _x(shape, dtype=np.float32, seed=0, special=False):
    a = np.random.default_rng(seed).standard_normal(shape) * 3
    if special:
        a.flat[::7] = np.nan
        a.flat[3::11] = np.inf
        a.flat[5::13] = -np.inf
    return tp.from_numpy(a.astype(dtype)).cuda()


CASES = [
    ("ex11", lambda x: (tp.relu(x + 1.5) * 2).sum(-1)),
    ("softmax", lambda x: F.softmax(x, -1)),
    ("log_softmax", lambda x: F.log_softmax(x, -1)),
    ("layer_norm", lambda x: F.layer_norm(x, (x.shape[-1],))),
    ("var_mean", lambda x: x.var(-1) + x.mean(-1)),
    ("gelu_mul_add", lambda x: F.gelu(x) * x + 0.5 * x),
    ("tanh_exp", lambda x: tp.tanh(x) * tp.exp(-x * x)),
    ("cols", lambda x: (x * x).sum(0)),
]
SHAPES = [(64, 4096), (300, 129), (2, 33)]
DTYPES = [np.float32, np.float64, np.float16]


def _bits(t):
    a = t.cpu().numpy()
    return a.view(np.uint8).tobytes() if a.dtype != np.bool_ else a.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_first_and_final_versions_compute_the_same_bits(name, fn, shape, dtype, monkeypatch):
    monkeypatch.setattr(tp.compiler.config, "cache", False)
    x = _x(shape, dtype, seed=len(name), special=name in ("ex11", "softmax", "cols"))
    monkeypatch.setenv("TENSORPLAY_NVRTC_TIERS", "quick")
    first = tp.compile(fn, strict_native=True)(x)
    monkeypatch.setenv("TENSORPLAY_NVRTC_TIERS", "0")
    final = tp.compile(fn, strict_native=True)(x)
    assert _bits(first) == _bits(final), name


def test_the_first_call_runs_a_first_version_and_a_later_one_the_final(monkeypatch):
    monkeypatch.setattr(tp.compiler.config, "cache", False)
    monkeypatch.delenv("TENSORPLAY_NVRTC_TIERS", raising=False)
    x = _x((128, 2053), seed=11)
    f = tp.compile(lambda a: F.softmax(a * 1.25, -1), strict_native=True)
    s0 = _C._nvrtc_tier_stats()
    a = f(x)
    s1 = _C._nvrtc_tier_stats()
    assert s1["first_versions"] == s0["first_versions"] + 1
    assert s1["final_queued"] == s0["final_queued"] + 1
    tp.cuda.finish_compiles()
    b = f(x)
    s2 = _C._nvrtc_tier_stats()
    assert s2["tiered_up"] == s1["tiered_up"] + 1 and s2["final_failed"] == s1["final_failed"]
    c = f(x)
    assert _C._nvrtc_tier_stats()["tiered_up"] == s2["tiered_up"]      # once
    assert _bits(a) == _bits(b) == _bits(c)
    want = F.softmax(x.cpu() * 1.25, -1).numpy()
    np.testing.assert_allclose(c.cpu().numpy(), want, rtol=1e-5, atol=1e-6)


def test_tiers_off_compiles_the_final_version_on_the_first_call(monkeypatch):
    monkeypatch.setattr(tp.compiler.config, "cache", False)
    monkeypatch.setenv("TENSORPLAY_NVRTC_TIERS", "off")
    s0 = _C._nvrtc_tier_stats()
    tp.compile(lambda a: a.exp().sum(-1) * 3)(_x((16, 777), seed=3))
    assert _C._nvrtc_tier_stats() == s0


def test_a_cuda_graph_takes_the_final_versions(monkeypatch):
    monkeypatch.setattr(tp.compiler.config, "cache", False)
    monkeypatch.delenv("TENSORPLAY_NVRTC_TIERS", raising=False)
    x, w = _x((96, 1031), seed=4), _x((1031,), seed=5)

    def fn(a, b):      # three kernels: a reduction, a normalization, a sum
        m = (a * b).amax(-1, keepdim=True)
        e = tp.exp(a - m)
        return (e / e.sum(-1, keepdim=True)).sum(0) + 1

    f = tp.compile(fn, strict_native=True)
    outs = [f(x, w)]
    p = f.versions[0].artifact
    p.cuda_graphs = True
    s0 = _C._nvrtc_tier_stats()
    outs += [f(x, w) for _ in range(2)]      # a graph of first versions (the final
    tp.cuda.finish_compiles()                # ones take ~100 ms to compile)
    outs += [f(x, w) for _ in range(3)]      # its nodes take the final versions
    info = p.cuda_graph
    assert info["graph_replays"] >= 4, info
    assert _C._nvrtc_tier_stats()["tiered_up"] > s0["tiered_up"]
    assert all(_bits(o) == _bits(outs[0]) for o in outs)
    np.testing.assert_allclose(outs[-1].cpu().numpy(), fn(x.cpu(), w.cpu()).numpy(),
                               rtol=1e-4, atol=1e-5)


def _child(cache_dir, code, **extra):
    env = dict(os.environ, TENSORPLAY_CACHE_DIR=str(cache_dir), TENSORPLAY_CACHE="1")
    env.pop("TENSORPLAY_NVRTC_TIERS", None)
    env.update(extra)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


CHILD = """
import json, numpy as np, tensorplay as tp
from tensorplay import _C
x = tp.from_numpy(np.linspace(-3, 3, 64 * 3001, dtype=np.float32).reshape(64, 3001)).cuda()
f = tp.compile(lambda a: (tp.relu(a - 0.25) * 3).sum(-1), strict_native=True)
a = f(x)
s = dict(_C._nvrtc_tier_stats())
tp.cuda.finish_compiles()
b = f(x)
s2 = _C._nvrtc_tier_stats()
print(json.dumps({"first": s["first_versions"], "up": s2["tiered_up"],
                  "same": a.cpu().numpy().tobytes() == b.cpu().numpy().tobytes(),
                  "sum": float(b.cpu().numpy().astype(np.float64).sum()),
                  "cache": tp.compiler.cache_info()}))
"""


def test_the_cache_keeps_the_final_version_for_the_next_process(tmp_path):
    one = _child(tmp_path, CHILD)
    assert one["first"] == 1 and one["up"] == 1 and one["same"]
    # the entry was written when the final version swapped in; the next
    # process loads it: no first version, nothing to tier up
    two = _child(tmp_path, CHILD)
    assert two["first"] == 0 and two["up"] == 0 and two["same"]
    assert two["sum"] == one["sum"]


def test_first_versions_only_leave_the_cache_empty(tmp_path):
    # TENSORPLAY_NVRTC_TIERS=quick runs first versions and compiles no final
    # one: nothing is stored, so the next process compiles (and tiers) again
    # instead of loading a first version for good
    quick = _child(tmp_path, CHILD, TENSORPLAY_NVRTC_TIERS="quick")
    assert quick["first"] == 1 and quick["up"] == 0 and quick["same"]
    one = _child(tmp_path, CHILD)
    assert one["first"] == 1 and one["up"] == 1 and one["same"]
    two = _child(tmp_path, CHILD)
    assert two["first"] == 0 and two["up"] == 0
    assert quick["sum"] == one["sum"] == two["sum"]


ONE_CALL = """
import json, numpy as np, tensorplay as tp
from tensorplay import _C
x = tp.from_numpy(np.linspace(-2, 2, 32 * 2999, dtype=np.float32).reshape(32, 2999)).cuda()
y = tp.compile(lambda a: tp.nn.functional.softmax(a * 0.75, -1), strict_native=True)(x)
print(json.dumps({"first": _C._nvrtc_tier_stats()["first_versions"],
                  "bits": y.cpu().numpy().tobytes().hex()}))
"""


def test_a_process_that_exits_after_one_call_still_stores_the_final_version(tmp_path):
    # no launch swapped it in: exit waits for the compile and stores it
    one = _child(tmp_path, ONE_CALL)
    two = _child(tmp_path, ONE_CALL)
    assert one["first"] == 1 and two["first"] == 0
    assert one["bits"] == two["bits"]


def test_exit_right_after_a_first_call_is_clean(tmp_path):
    code = ("import tensorplay as tp\n"
            "x = tp.randn(512, 4099, device='cuda')\n"
            "y = tp.compile(lambda a: tp.nn.functional.layer_norm(a, (4099,)))(x)\n"
            "print(float(y.sum().item()) == float(y.sum().item()))\n")
    env = dict(os.environ, TENSORPLAY_CACHE_DIR=str(tmp_path))
    env.pop("TENSORPLAY_NVRTC_TIERS", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stdout + r.stderr
    assert r.stderr == ""
