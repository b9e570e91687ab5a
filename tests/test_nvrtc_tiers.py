"""Tiered compilation of CUDA kernels (csrc/backend_nvrtc/backend_nvrtc_init.c,
the background worker in nvrtc_loader.c; docs/gpu.md): a compiled
function's first call launches a first version of each new kernel compiled
with --Ofast-compile=mid while its final version compiles on the worker.
Here (no GPU): the worker's compiles are NVRTC's, byte for byte, from any
thread, across a fork and at exit; errors carry NVRTC's log; the options
both versions share leave the compiler no contraction to choose.
tests/gpu/test_gpu_tiers.py runs both versions on a GPU."""
import json
import os
import re
import threading

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _C
from _helpers import run_python
from _nvrtc import nvrtc_kernels

needs_nvrtc = pytest.mark.skipif(not _C.nvrtc_available(),
                                 reason="libnvrtc not found (pip install nvidia-cuda-nvrtc-cu12)")
needs_fast = pytest.mark.skipif(not _C.nvrtc_available() or _C.nvrtc_version() < (12, 8),
                                reason="--Ofast-compile needs NVRTC >= 12.8")

F = tp.nn.functional
KERNEL = 'extern "C" __global__ void k%d(float *x) { x[threadIdx.x] *= %d.0f; }'


def _ex11_source():
    x = tp.from_numpy(np.ones((8, 4096), np.float32))
    (k,) = nvrtc_kernels(lambda a, b: (tp.relu(a + b) * 2).sum(-1), x, x, compile=False)
    return k.name, k.source


@needs_nvrtc
def test_the_worker_compiles_what_nvrtc_compiles_here():
    name, src = _ex11_source()
    for opts in (None, ["--fmad=false"]):
        bg = _C._nvrtc_compile_in_background(src, name + ".cu", "sm_90", opts)
        assert bg == _C.nvrtc_compile(src, name + ".cu", "sm_90", opts)


@needs_nvrtc
def test_many_threads_submit_at_once():
    out, errs = {}, []

    def one(i):
        try:
            out[i] = _C._nvrtc_compile_in_background(KERNEL % (i, i), "k%d.cu" % i, "sm_90")
        except Exception as e:      # noqa: BLE001 - reported below
            errs.append(e)
    ts = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errs
    for i in range(6):
        assert out[i] == _C.nvrtc_compile(KERNEL % (i, i), "k%d.cu" % i, "sm_90")
    _C._nvrtc_finish_compiles()     # nothing queued: returns at once


@needs_nvrtc
def test_errors_carry_nvrtcs_log_and_bad_arguments_are_refused():
    with pytest.raises(_C.NVRTCError, match="this declaration has no storage class") as e:
        _C._nvrtc_compile_in_background("garbage", "g.cu", "sm_90")
    assert "garbage" in e.value.log
    with pytest.raises(ValueError, match="arch must be 'sm_XY'"):
        _C._nvrtc_compile_in_background(KERNEL % (1, 1), "k.cu", "compute_90")
    with pytest.raises(ValueError, match="too many options"):
        _C._nvrtc_compile_in_background(KERNEL % (1, 1), "k.cu", "sm_90", ["-w"] * 17)
    with pytest.raises(TypeError):
        _C._nvrtc_compile_in_background(KERNEL % (1, 1), "k.cu", "sm_90", [1])
    # the worker survives all of it
    assert _C._nvrtc_compile_in_background(KERNEL % (2, 2), "k.cu", "sm_90")


@needs_nvrtc
def test_a_fork_while_the_worker_compiles_leaves_both_sides_working():
    name, src = _ex11_source()
    r = run_python("import os, threading\n"
            "from tensorplay import _C\n"
            f"src = {src!r}\n"
            "res = []\n"
            "t = threading.Thread(target=lambda: res.append(\n"
            "    _C._nvrtc_compile_in_background(src, 'k.cu', 'sm_90')))\n"
            "t.start()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    ok = _C.nvrtc_compile(src, 'k.cu', 'sm_90') is not None\n"
            "    os._exit(0 if ok else 3)\n"
            "_, st = os.waitpid(pid, 0)\n"
            "t.join()\n"
            "print('child', os.waitstatus_to_exitcode(st), res[0] == _C.nvrtc_compile(src, 'k.cu', 'sm_90'))\n")
    assert r.stdout.split() == ["child", "0", "True"]


@needs_nvrtc
def test_exit_with_compiles_queued_is_clean():
    # queued jobs are dropped, the one compiling finishes, the worker is joined
    r = run_python("import threading\n"
            "from tensorplay import _C\n"
            f"K = {KERNEL!r}\n"
            "for i in range(4):\n"
            "    threading.Thread(target=_C._nvrtc_compile_in_background,\n"
            "                     args=(K % (i, i), 'k.cu', 'sm_90'), daemon=True).start()\n")
    assert r.stderr == ""


def test_finish_compiles_is_public_and_returns_without_a_gpu():
    assert tp.cuda.finish_compiles() is None
    assert "finish_compiles" in tp.cuda.__all__
    assert set(_C._nvrtc_tier_stats()) == {"first_versions", "final_queued", "tiered_up",
                                          "final_failed"}


@needs_fast
def test_both_versions_spell_out_every_rounding():
    # --fmad=false (both versions) leaves no mul+add for the compiler to fuse:
    # the only fma in the PTX are the source's own fmaf calls
    name, src = _ex11_source()
    n_fmaf = src.count("fmaf(")
    for quick in ([], ["--Ofast-compile=mid"]):
        ptx = _C.nvrtc_compile(src, name + ".cu", "compute_90", ["--fmad=false"] + quick)
        assert not re.search(r"\bmul\.f32|\badd\.f32", ptx), "an unrounded op could fuse"
        assert len(re.findall(r"\bfma\.rn\.f32", ptx)) <= n_fmaf * 8


@needs_nvrtc
def test_long_nvrtc_options_are_each_their_own_cache_key(tmp_path):
    # TENSORPLAY_NVRTC_OPTIONS goes into the compile cache's key whole: option
    # strings alike in their first 200 bytes (the tag once kept no more) are
    # other kernels, and the same string again finds its entry
    here = os.path.dirname(os.path.abspath(__file__))
    r = run_python("import json, os, sys\n"
            f"sys.path.insert(0, {here!r})\n"
            "import numpy as np, tensorplay as tp\n"
            "from _nvrtc import nvrtc_kernels\n"
            "pre = ' '.join('-DSTAX_UNUSED_MACRO_NUMBER_%02d=1' % i for i in range(7))\n"
            "assert len(pre) > 200\n"
            "x = tp.from_numpy(np.ones((8, 64), np.float32))\n"
            "n = []\n"
            "for tail in ('-DTAIL=1', '-DTAIL=2', '-DTAIL=1'):\n"
            "    os.environ['TENSORPLAY_NVRTC_OPTIONS'] = pre + ' ' + tail\n"
            "    nvrtc_kernels(lambda a: (a * 3 + 1).sum(-1), x, compile=True)\n"
            "    n.append(tp.compiler.cache_info()['entries'])\n"
            "print(json.dumps(n))\n",
            TENSORPLAY_CACHE="1", TENSORPLAY_CACHE_DIR=str(tmp_path))
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [1, 2, 2]
