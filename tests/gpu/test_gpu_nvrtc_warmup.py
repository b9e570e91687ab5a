"""The NVRTC warm-up on a GPU machine (csrc/backend_nvrtc/nvrtc_loader.c):
the first CUDA tensor starts a background thread that compiles one kernel; a compiled function's first call then
finds NVRTC started. Each case runs in a fresh process (the warm-up happens
once per process).

    sh scripts/gpu/build.sh .gpu python3 -m pytest tests/gpu   # on a GPU machine
"""
import json

import pytest

import tensorplay as tp
from _helpers import run_python

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")


def test_first_cuda_tensor_starts_the_warmup_and_it_compiles():
    r = run_python("import json, tensorplay as tp\n"
             "from tensorplay import _C\n"
             "assert _C._nvrtc_warmup()['started'] is False\n"
             "x = tp.ones(3, device='cuda')\n"
             "print(json.dumps(_C._nvrtc_warmup(True)))\n")
    info = json.loads(r.stdout.strip().splitlines()[-1])
    assert info["started"] and info["done"] and info["status"] == 0
    assert info["ms"] > 0 and info["arch"].startswith("sm_")


def test_warmup_can_be_turned_off():
    r = run_python("import json, tensorplay as tp\n"
             "from tensorplay import _C\n"
             "x = tp.ones(3, device='cuda')\n"
             "print(json.dumps(_C._nvrtc_warmup(True)))\n",
             TENSORPLAY_NVRTC_WARMUP="0")
    info = json.loads(r.stdout.strip().splitlines()[-1])
    assert info["started"] is False and info["done"] is False


def test_exit_right_after_the_first_cuda_tensor_is_clean():
    # the interpreter waits for the thread: no crash in libnvrtc at exit
    for _ in range(3):
        r = run_python("import tensorplay as tp\nx = tp.ones(3, device='cuda')\n")
        assert r.stderr == ""


def test_compiled_first_call_with_the_warmup_running_is_right():
    # a compile racing the warm-up (separate NVRTC programs) gives the same
    r = run_python("import numpy as np, tensorplay as tp\n"
             "a = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64) / 1e4\n"
             "x = tp.from_numpy(a).cuda()\n"
             "f = tp.compile(lambda x: tp.nn.functional.softmax(x, -1) * 2, strict_native=True)\n"
             "got = f(x).cpu().numpy()\n"
             "e = np.exp(a - a.max(-1, keepdims=True)); want = 2 * e / e.sum(-1, keepdims=True)\n"
             "assert np.allclose(got, want, rtol=1e-5, atol=1e-6), abs(got - want).max()\n"
             "print('ok')\n")
    assert r.stdout.strip() == "ok"
