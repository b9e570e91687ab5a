"""How the NVRTC renderer shapes its loops (no GPU needed: rendering, and
PTX through NVRTC where libnvrtc is found; tests/gpu/test_gpu_kernel_shapes.py
runs the same kernels on a GPU).

- Loops whose trips are independent are unrolled by 4 with no bound check
  while a whole group is in range, then a remainder loop (several loads in
  flight per thread).
- A multi-stage reduction (softmax, layer_norm, var) keeps the loads that
  two of its row loops share in dynamic shared memory (the row cache): the
  first row loop reads global memory and fills it, the later ones read it.
"""
import re

import numpy as np
import pytest

import tensorplay as tp
import tensorplay._C as C
from _nvrtc import nvrtc_kernels

needs_nvrtc = pytest.mark.skipif(
    not C.nvrtc_available(),
    reason="libnvrtc not found (pip install nvidia-cuda-nvrtc-cu12)")

F = tp.nn.functional


def _x(*shape, dtype=np.float32, seed=0):
    return tp.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def _one(fn, *args, compile=False):
    ks = nvrtc_kernels(fn, *args, compile=compile)
    assert len(ks) == 1, [k.name for k in ks]
    return ks[0].source


def test_softmax_reads_its_row_from_global_memory_once():
    src = _one(lambda a: F.softmax(a, -1), _x(16, 1000))
    # one cached load (buf0), sized from rnumel, on when the launch gave
    # enough dynamic shared memory
    assert len(re.findall(r"\*const stax_rc\d+ = ", src)) == 1
    assert "stax_dyn_smem() >= rnumel * 4LL" in src
    # the first row loop (max) fills it, in its unrolled and remainder loops
    assert src.count("if (stax_rc_on) { stax_rc0[rindex] = ") == 2
    # the two later row loops (sum of exp, the stores) read it
    assert src.count("stax_rc_on ? stax_rc0[rindex] : (buf0[") == 4
    # only the first row loop's loads go to global memory unconditionally
    assert len(re.findall(r"= buf0\[", src)) == 2


def test_layer_norm_caches_x_but_not_the_weight():
    src = _one(lambda a, g, b: F.layer_norm(a, (300,), g, b),
               _x(8, 300), _x(300, seed=1), _x(300, seed=2))
    decl = re.findall(r"float \*const stax_rc\d+ = .*// buf(\d+)", src)
    assert decl == ["0"], decl      # x; the weight and bias are read once


def test_single_stage_reduction_has_no_row_cache():
    src = _one(lambda a, b: (tp.relu(a + b) * 2).sum(-1), _x(64, 128), _x(64, 128, seed=1))
    assert "stax_dyn[]" not in src and "stax_rc" not in src


def test_row_cache_slots_widest_first():
    """a float64 slot before a float32 one, so every slot is aligned"""
    def f(a, b):
        c = a.double() * b
        return c - c.mean(-1, keepdim=True)
    src = _one(f, _x(4, 50), _x(4, 50, dtype=np.float64, seed=1))
    decl = re.findall(r"(\w+) \*const stax_rc\d+ = \(\w+ \*\)\(stax_dyn \+ rnumel \* (\d+)LL\)",
                      src)
    assert sorted(decl) == [("double", "0"), ("float", "8")], decl
    assert "stax_dyn_smem() >= rnumel * 12LL" in src


def test_loops_are_unrolled_with_a_remainder():
    src = _one(lambda a: a * 2 + 1, _x(300, 7))
    assert "for (; xbase + 3 * xstride < xnumel; xbase += 4 * xstride)" in src
    assert "#pragma unroll" in src
    assert "for (int64_t xindex = xbase; xindex < xnumel; xindex += xstride)" in src
    src = _one(lambda a: a.sum(-1), _x(30, 70))
    assert "rbase0 + 3 * (int64_t)blockDim.x < rnumel" in src
    assert "for (int64_t rindex = rbase0; rindex < rnumel; rindex += blockDim.x)" in src


@needs_nvrtc
@pytest.mark.parametrize("fn,args", [
    (lambda a: F.softmax(a, -1), (_x(16, 1000),)),
    (lambda a: F.log_softmax(a, -1), (_x(16, 1000, dtype=np.float64),)),
    (lambda a, g, b: F.layer_norm(a, (300,), g, b), (_x(8, 300), _x(300), _x(300))),
    (lambda a: a.var(-1) + a.std(-1), (_x(8, 33),)),
    (lambda a: a.argmax(-1) + a.sum(-1).long(), (_x(8, 33),)),
    (lambda a, b: (a.double() * b) - (a.double() * b).mean(-1, keepdim=True),
     (_x(4, 50), _x(4, 50, dtype=np.float64))),
    (lambda a: a.half() * 2, (_x(5, 3),)),
], ids=["softmax", "log_softmax64", "layer_norm", "var_std", "argmax_sum", "mixed", "half"])
def test_shaped_kernels_compile_to_ptx(fn, args):
    ks = nvrtc_kernels(fn, *args)
    assert ks and all(k.source for k in ks)


_UNROLL_CHILD = r"""
import sys
sys.path.insert(0, "tests")
import numpy as np
import tensorplay as tp
import tensorplay._C as C
from _nvrtc import nvrtc_kernels
x = tp.from_numpy(np.random.default_rng(0).standard_normal((16, 300)).astype(np.float32))
src = nvrtc_kernels(lambda a: tp.softmax(a, -1), x, compile=C.nvrtc_available())[0].source
print(repr(src))
"""


def _render_with_unroll(value):
    import ast
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TENSORPLAY_NVRTC_UNROLL=value)
    r = subprocess.run([sys.executable, "-c", _UNROLL_CHILD], cwd=root, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return ast.literal_eval(r.stdout.strip().splitlines()[-1])


def test_unroll_knob_cascades_descending_factors():
    """TENSORPLAY_NVRTC_UNROLL=8,4: groups of 8, then of 4, then one by
    one, in every row loop (compiled to PTX where NVRTC is found)"""
    src = _render_with_unroll("8,4")
    for s in range(3):
        a = src.index(f"for (; rbase{s} + 7 * (int64_t)blockDim.x < rnumel; "
                      f"rbase{s} += 8 * (int64_t)blockDim.x)")
        b = src.index(f"for (; rbase{s} + 3 * (int64_t)blockDim.x < rnumel; "
                      f"rbase{s} += 4 * (int64_t)blockDim.x)")
        c = src.index(f"for (int64_t rindex = rbase{s}; rindex < rnumel; rindex += blockDim.x)")
        assert a < b < c
    # a list that is not descending stops at the first bad entry; junk is
    # the default
    assert "rbase0 + 3 * (int64_t)blockDim.x" in _render_with_unroll("4,8")
    assert "rbase0 + 7 *" not in _render_with_unroll("4,8")
    assert "rbase0 + 3 * (int64_t)blockDim.x" in _render_with_unroll("junk")
