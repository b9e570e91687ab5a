"""The persistent compile cache on CUDA inputs (issue 17 deliverable 1,
NVRTC: the CUBIN): a new process with a warm cache directory loads each
kernel's CUBIN (built by NVRTC for the device's arch) instead of running
NVRTC, and computes the same values.

    sh scripts/gpu/build.sh .gpu python3 -m pytest tests/gpu/test_gpu_cache.py
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import tensorplay as tp

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_SCRIPT = textwrap.dedent("""
    import json, time
    import numpy as np
    import tensorplay as tp
    import tensorplay.nn.functional as F
    def f(x, w):
        return (tp.relu(x + w) * 2).sum(-1), F.softmax(x * w, -1)
    rng = np.random.default_rng(0)
    x = tp.from_numpy(rng.standard_normal((256, 512)).astype(np.float32)).cuda()
    w = tp.from_numpy(rng.standard_normal((256, 512)).astype(np.float32)).cuda()
    cf = tp.compile(f, strict_native=True)
    t = time.perf_counter()
    a, b = cf(x, w)
    tp.cuda.synchronize()
    ms = (time.perf_counter() - t) * 1e3
    s = cf.stats()
    print(json.dumps({"compiles": s["backend_compiles"], "hits": s["cache_hits"],
                      "misses": s["cache_misses"], "ms": ms,
                      "a": a.cpu().numpy().tolist(), "b": b.cpu().numpy()[:4].tolist()}))
""")


def _run(cache_dir):
    env = dict(os.environ, TENSORPLAY_CACHE_DIR=str(cache_dir), TENSORPLAY_CACHE="1")
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_warm_cache_loads_the_cubin_without_nvrtc(tmp_path):
    cold = _run(tmp_path)
    warm = _run(tmp_path)
    assert cold["compiles"] > 0 and cold["misses"] > 0
    assert warm["compiles"] == 0 and warm["hits"] == cold["misses"]
    assert warm["a"] == cold["a"] and warm["b"] == cold["b"]
    assert any(p.is_file() for p in tmp_path.rglob("*"))
