"""The background NVRTC worker (csrc/backend_nvrtc/nvrtc_loader.c, "compile
worker") under abuse: a fork with many compiles queued, compiles that make
no CUBIN, option strings NVRTC would read cut short. Subprocesses for
anything that could hang, always with a timeout."""

import pytest

from tensorplay import _C
from _helpers import run_python

needs_nvrtc = pytest.mark.skipif(not _C.nvrtc_available(),
                                 reason="libnvrtc not found (pip install nvidia-cuda-nvrtc-cu12)")

KERNEL = 'extern "C" __global__ void k%d(float *x) { x[threadIdx.x] *= %d.0f; }'


def _py(code, timeout=120):
    r = run_python(code, timeout)
    assert r.stderr == ""
    return r


@needs_nvrtc
def test_a_fork_waits_for_one_compile_not_the_whole_queue():
    # fork_prepare waits for the compile in progress; the worker must not
    # start the next queued job meanwhile, or os.fork (holding the GIL)
    # waits until the whole queue has drained
    r = _py("import os, threading, time\n"
            "from tensorplay import _C\n"
            f"K = {KERNEL!r}\n"
            "_C._nvrtc_compile_in_background(K % (0, 0), 'k.cu', 'sm_90')\n"
            "t0 = time.monotonic()\n"
            "_C._nvrtc_compile_in_background(K % (0, 1), 'k.cu', 'sm_90')\n"
            "one = time.monotonic() - t0\n"
            "for rep in range(3):\n"
            "    ts = [threading.Thread(target=_C._nvrtc_compile_in_background,\n"
            "                           args=(K % (i, rep), 'k.cu', 'sm_90')) for i in range(40)]\n"
            "    [t.start() for t in ts]\n"
            "    time.sleep(0.1)\n"
            "    t0 = time.monotonic()\n"
            "    pid = os.fork()\n"
            "    if pid == 0:\n"
            "        os._exit(0)\n"
            "    print((time.monotonic() - t0) / one)\n"
            "    os.waitpid(pid, 0)\n"
            "    [t.join() for t in ts]\n")
    # each fork took about one compile at most (the whole queue: ~40)
    assert max(float(x) for x in r.stdout.split()) < 8, r.stdout


@needs_nvrtc
def test_forks_of_forks_while_compiles_wait_do_not_hang():
    # threads wait on the worker's condition variable when the fork comes:
    # the child (and its own forks) must not wait for those waiters
    r = _py("import os, threading\n"
            "from tensorplay import _C\n"
            f"K = {KERNEL!r}\n"
            "res = {}\n"
            "def sub(i):\n"
            "    res[i] = _C._nvrtc_compile_in_background(K % (i, i), 'k.cu', 'sm_90')\n"
            "ts = [threading.Thread(target=sub, args=(i,)) for i in range(8)]\n"
            "[t.start() for t in ts]\n"
            "ww = threading.Thread(target=_C._nvrtc_warmup, args=(True, 'sm_90'))\n"
            "ww.start()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    a = _C.nvrtc_compile(K % (99, 99), 'k.cu', 'sm_90')\n"
            "    _C._nvrtc_finish_compiles()\n"
            "    _C._nvrtc_warmup(True)\n"
            "    p2 = os.fork()\n"
            "    if p2 == 0:\n"
            "        os._exit(0 if _C.nvrtc_compile(K % (98, 98), 'k.cu', 'sm_90') else 3)\n"
            "    _, st = os.waitpid(p2, 0)\n"
            "    os._exit(os.waitstatus_to_exitcode(st) or (0 if a else 4))\n"
            "_, st = os.waitpid(pid, 0)\n"
            "[t.join() for t in ts + [ww]]\n"
            "ok = all(res[i] == _C.nvrtc_compile(K % (i, i), 'k.cu', 'sm_90') for i in range(8))\n"
            "print(os.waitstatus_to_exitcode(st), ok)\n", timeout=60)
    assert r.stdout.split() == ["0", "True"]


@needs_nvrtc
def test_a_compile_that_makes_no_cubin_is_an_error():
    # -dlto (say in TENSORPLAY_NVRTC_OPTIONS) makes LTO IR: NVRTC reports
    # success with a 0-byte CUBIN, which no module load takes
    src = KERNEL % (1, 1)
    with pytest.raises(_C.NVRTCError, match="no CUBIN"):
        _C.nvrtc_compile(src, "k.cu", "sm_90", ["-dlto"])
    with pytest.raises(_C.NVRTCError, match="no CUBIN"):
        _C._nvrtc_compile_in_background(src, "k.cu", "sm_90", ["-dlto"])
    assert _C._nvrtc_compile_in_background(src, "k.cu", "sm_90") == \
        _C.nvrtc_compile(src, "k.cu", "sm_90")


@needs_nvrtc
@pytest.mark.parametrize("compile_", [_C.nvrtc_compile, _C._nvrtc_compile_in_background])
def test_options_nvrtc_would_misread_are_refused(compile_):
    src = KERNEL % (1, 1)
    # NVRTC reads a C string: "-w\0junk" went in as "-w"
    with pytest.raises(ValueError, match="embedded null character"):
        compile_(src, "k.cu", "sm_90", ["-w\0--use_fast_math"])
    # a str is a sequence of one-character options
    with pytest.raises(TypeError, match="not str"):
        compile_(src, "k.cu", "sm_90", "-w")
    assert compile_(src, "k.cu", "sm_90", ("-w",)) == _C.nvrtc_compile(src, "k.cu", "sm_90",
                                                                       ["-w"])
