"""The NVRTC warm-up (csrc/backend_nvrtc/nvrtc_loader.c): when CUDA first
comes up, a background thread compiles one small kernel made of the rendered kernels' helpers, so that a compiled
function's first call on CUDA does not pay NVRTC's start-up (issue 14's
first-call goal). Here (no GPU): the kernel it compiles is valid CUDA C for
the architectures the back end targets, and nothing starts without CUDA.
tests/gpu/test_gpu_nvrtc_warmup.py checks the thread on a GPU machine."""
import json

import pytest

import tensorplay as tp
from tensorplay import _C
from _helpers import run_python

needs_nvrtc = pytest.mark.skipif(not _C.nvrtc_available(),
                                 reason="libnvrtc not found (pip install nvidia-cuda-nvrtc-cu12)")


def test_warm_source_is_made_of_the_rendered_kernels_preambles():
    src = _C._nvrtc_warmup_source()
    assert 'extern "C" __global__ void STAX_LB stax_warm(' in src
    # the same helper text every rendered kernel starts with
    assert "STAX_D float stax_h2f(unsigned short h)" in src
    assert "stax_block_reduce" in src and "stax_online_join" in src
    assert "stax_v4" in src


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_90", "sm_80", "compute_90"])
def test_warm_source_compiles(arch):
    out = _C.nvrtc_compile(_C._nvrtc_warmup_source(), "stax_warm.cu", arch)
    if arch.startswith("sm_"):
        assert isinstance(out, bytes) and len(out) > 1000
    else:
        assert ".entry stax_warm(" in out
        assert ".local" not in out        # the block reduction stays in registers/shared


@pytest.mark.skipif(tp.cuda.is_available(), reason="checks a machine without CUDA")
def test_nothing_starts_without_cuda():
    r = run_python("import json, tensorplay as tp\n"
            "from tensorplay import _C\n"
            "try:\n"
            "    tp.ones(2, device='cuda')\n"
            "except RuntimeError as e:\n"
            "    assert 'CUDA is not available' in str(e)\n"
            "print(json.dumps(_C._nvrtc_warmup(True)))\n")
    info = json.loads(r.stdout.strip().splitlines()[-1])
    assert info["started"] is False and info["done"] is False


@needs_nvrtc
def test_the_thread_compiles_the_warm_kernel():
    # started by hand for sm_90 (no GPU here): the same thread CUDA starts
    r = run_python("import json\n"
            "from tensorplay import _C\n"
            "print(json.dumps(_C._nvrtc_warmup(True, 'sm_90')))\n")
    info = json.loads(r.stdout.strip().splitlines()[-1])
    assert info["started"] and info["done"] and info["status"] == 0, info
    assert info["arch"] == "sm_90" and info["ms"] > 0


@needs_nvrtc
def test_exit_while_the_thread_runs_is_clean():
    # the interpreter joins the thread before NVRTC's own teardown
    for _ in range(2):
        r = run_python("from tensorplay import _C\n_C._nvrtc_warmup(False, 'sm_90')\n")
        assert r.stderr == ""


@needs_nvrtc
def test_it_starts_once_and_can_be_turned_off():
    r = run_python("import json\n"
            "from tensorplay import _C\n"
            "a = _C._nvrtc_warmup(True, 'sm_90')\n"
            "b = _C._nvrtc_warmup(True, 'sm_80')\n"
            "print(json.dumps([a['arch'], b['arch'], a['ms'] == b['ms']]))\n")
    assert json.loads(r.stdout.strip().splitlines()[-1]) == ["sm_90", "sm_90", True]
    r = run_python("import json\n"
            "from tensorplay import _C\n"
            "print(json.dumps(_C._nvrtc_warmup(True, 'sm_90')))\n",
            TENSORPLAY_NVRTC_WARMUP="0")
    assert json.loads(r.stdout.strip().splitlines()[-1])["started"] is False


@needs_nvrtc
def test_a_fork_during_the_warmup_leaves_the_child_a_working_nvrtc():
    # fork waits until the worker is not compiling (pthread_atfork): a child
    # forked while NVRTC held its locks in the thread would hang in its
    # first compile; the parent's warm-up still completes
    r = run_python("import os, sys\n"
            "from tensorplay import _C\n"
            "_C._nvrtc_warmup(False, 'sm_90')\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    _C.nvrtc_compile('extern \"C\" __global__ void k(float *x) { x[0] = 1; }',\n"
            "                     'k.cu', 'compute_90')\n"
            "    os._exit(0)\n"
            "_, st = os.waitpid(pid, 0)\n"
            "print('child', os.waitstatus_to_exitcode(st), _C._nvrtc_warmup(True)['done'])\n")
    assert r.stdout.split() == ["child", "0", "True"]


@needs_nvrtc
def test_waiting_from_many_threads_returns_in_all_of_them():
    r = run_python("import threading\n"
            "from tensorplay import _C\n"
            "_C._nvrtc_warmup(False, 'sm_90')\n"
            "out = []\n"
            "ts = [threading.Thread(target=lambda: out.append(_C._nvrtc_warmup(True)['done']))\n"
            "      for _ in range(4)]\n"
            "[t.start() for t in ts]\n"
            "[t.join() for t in ts]\n"
            "print(out)\n")
    assert r.stdout.strip() == "[True, True, True, True]"


@needs_nvrtc
@pytest.mark.parametrize("off", ["0", "false", "OFF", "no"])
def test_every_spelling_of_off_turns_it_off(off):
    r = run_python("import json\n"
            "from tensorplay import _C\n"
            "print(json.dumps(_C._nvrtc_warmup(True, 'sm_90')))\n",
            TENSORPLAY_NVRTC_WARMUP=off)
    assert json.loads(r.stdout.strip().splitlines()[-1])["started"] is False


def test_warmup_info_rejects_bad_arguments():
    with pytest.raises(TypeError):
        _C._nvrtc_warmup(1, 2, 3)
    with pytest.raises(ValueError, match="start_arch must be 'sm_XY'"):
        _C._nvrtc_warmup(False, "compute_90")
