"""A first compiled call on CUDA inputs costs compile time, not eager
kernels: the trace defers the samples of the ops it records on CUDA tensors
(csrc/ops/ops_func.c, run_op_meta_cuda: metadata from host stand-ins, an
unfilled device result), filling one only where the traced code asks for
values (csrc/trace/trace_lazy.c). TENSORPLAY_CUDA_META=0 computes them
(an eager NVRTC kernel per op, as before).

    sh scripts/gpu/build.sh .gpu python3 -m pytest tests/gpu   # on a GPU machine
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.cuda import _eager

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

F = tp.nn.functional


def _x(*shape, seed=0):
    return tp.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


CASES = [
    ("ex11", lambda x, w: (tp.relu(x + w) * 2).sum(-1)),
    ("softmax", lambda x, w: F.softmax(x, -1) * w),
    ("layer_norm", lambda x, w: F.layer_norm(x, (x.shape[-1],), w[0], None)),
    ("strided", lambda x, w: (x.t() * 3 + w.t()).amax(0)),
    ("scalar_tensor", lambda x, w: x * tp.tensor(2.5) + w.mean()),
]


@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_trace_over_cuda_inputs_builds_no_eager_kernel(name, fn, monkeypatch):
    monkeypatch.setattr(tp.compiler.config, "cache", False)
    shape = (37, 4099)                     # sizes no other test's eager kernel has
    x, w = _x(*shape, seed=1), _x(*shape, seed=2)
    want = fn(x, w).numpy()
    monkeypatch.delenv("TENSORPLAY_CUDA_META", raising=False)
    before = set(_eager._kernels)
    got = tp.compile(fn)(x.cuda(), w.cuda())
    assert got.is_cuda
    assert set(_eager._kernels) == before, set(_eager._kernels) - before
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-4, atol=1e-4)
    # the old way, for contrast: the samples computed by eager kernels
    monkeypatch.setenv("TENSORPLAY_CUDA_META", "0")
    x2, w2 = _x(41, 4101, seed=3), _x(41, 4101, seed=4)
    before = set(_eager._kernels)
    got = tp.compile(fn)(x2.cuda(), w2.cuda())
    assert set(_eager._kernels) != before
    np.testing.assert_allclose(got.cpu().numpy(), fn(x2, w2).numpy(), rtol=1e-4, atol=1e-4)


def test_a_gate_on_a_deferred_cuda_sample_fills_it():
    """the gate needs y's values: y (deferred) is computed then, on the
    device, and the version of each branch is right"""
    def f(x, w):
        y = tp.relu(x + w) * 2
        if y.sum() > 100:
            return y.sum(-1)
        return -y.amax(-1)
    g = tp.compile(f)
    for s in (1.0, 0.001, 1.0, 0.001):
        x, w = _x(16, 300, seed=5) * s, _x(16, 300, seed=6) * s
        np.testing.assert_allclose(g(x.cuda(), w.cuda()).cpu().numpy(), f(x, w).numpy(),
                                   rtol=1e-5, atol=1e-5)


def test_item_and_host_copy_of_a_deferred_cuda_sample():
    def f(x):
        y = x * 3 + 1
        m = float(y.mean())               # a value the trace must read
        return y - m, y.cpu().sum()
    x = _x(8, 64, seed=7)
    a, b = tp.compile(f)(x.cuda())
    wa, wb = f(x)
    np.testing.assert_allclose(a.cpu().numpy(), wa.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.numpy(), wb.numpy(), rtol=1e-5)


def test_an_in_place_write_after_deferred_cuda_samples():
    def f(x):
        y = x * 2
        z = y + 1
        y.add_(5)
        return z * y
    x = _x(8, 64, seed=8)
    np.testing.assert_allclose(tp.compile(f)(x.cuda()).cpu().numpy(), f(x).numpy(),
                               rtol=1e-5, atol=1e-5)


def test_mixing_devices_in_a_traced_op_raises_torchs_error():
    f = tp.compile(lambda a, b: a + b)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        f(_x(4, 5).cuda(), _x(4, 5))


def test_first_call_in_a_fresh_process_builds_no_eager_kernel():
    """Example 1.1 at 4096x4096 in a new process: the only NVRTC builds of
    the first call are the compiled program's (the eager kernel table stays
    empty), and the time is printed for the record"""
    code = (
        "import time, tensorplay as tp\n"
        "from tensorplay.cuda import _eager\n"
        "tp.compiler.config.cache = False\n"
        "x = tp.randn(4096, 4096, device='cuda'); w = tp.randn(4096, 4096, device='cuda')\n"
        "tp.cuda.synchronize(); n0 = len(_eager._kernels)\n"
        "f = tp.compile(lambda a, b: (tp.relu(a + b) * 2).sum(-1))\n"
        "t0 = time.perf_counter(); r = f(x, w); tp.cuda.synchronize()\n"
        "ms = (time.perf_counter() - t0) * 1e3; built = len(_eager._kernels) - n0\n"
        "ok = abs(float((r - (tp.relu(x + w) * 2).sum(-1)).abs().max())) < 1e-2\n"
        "print('FIRST', round(ms, 1), built, ok)\n")
    env = dict(os.environ)
    env.pop("TENSORPLAY_CUDA_META", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("FIRST")]
    assert line, out.stderr[-2000:]
    _, ms, built, ok = line[0].split()
    print("first call, ms:", ms)
    assert built == "0" and ok == "True", line
