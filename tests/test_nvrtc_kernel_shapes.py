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


# ---------------------------------------------------------------- knobs off
# TENSORPLAY_NVRTC_VEC=1 (16-byte vector accesses in row loops of every
# length; by default only rows of 2048 points or more) and
# TENSORPLAY_NVRTC_ONEPASS=1 (online softmax), read at every rendering

@pytest.fixture
def knobs(monkeypatch):
    def set_(**kw):
        for k in ("VEC", "ONEPASS"):
            monkeypatch.delenv("TENSORPLAY_NVRTC_" + k, raising=False)
        for k, v in kw.items():
            monkeypatch.setenv("TENSORPLAY_NVRTC_" + k, v)
    set_()
    return set_


def _row_loops(src):
    return sorted(set(re.findall(r"int64_t rbase(\d+) = threadIdx.x;", src)))


def test_knobs_off_render_as_before(knobs):
    src = _one(lambda a: F.softmax(a, -1), _x(16, 1000))
    assert "stax_online" not in src and "stax_v4" not in src and "stax_vok" not in src
    assert _row_loops(src) == ["0", "1", "2"]
    knobs(VEC="0", ONEPASS="yes")          # only "1" turns a knob on
    assert _one(lambda a: F.softmax(a, -1), _x(16, 1000)) == src


@pytest.mark.parametrize("log", [False, True])
def test_onepass_folds_max_and_sum_into_one_row_loop(knobs, log):
    knobs(ONEPASS="1")
    fn = F.log_softmax if log else F.softmax
    src = _one(lambda a: fn(a, -1), _x(16, 1000))
    # the max loop (stage 0) also folds the sum (stage 1): two row loops
    assert _row_loops(src) == ["0", "2"]
    assert "if (mn != acc0) { acc1 *= stax_oexp(acc0 - mn); }" in src
    # -inf elements add 0 under the running max; a row whose max is -inf
    # gets the NaN sum the two loops give (exp(-inf - -inf))
    assert "acc0 == (float)__int_as_float((int)0xff800000) ? (float)0" in src
    assert "if (rnumel > 0 && acc0 == (float)__int_as_float((int)0xff800000)) {" in src
    assert "stax_block_online(acc0, acc1, (float *)stax_shv, (float *)stax_shi);" in src
    assert "stax_warp_online(acc0, acc1);" in src
    # the row cache still serves the output loop
    assert "stax_rc_on ? stax_rc0[rindex] : (buf0[" in src


def test_onepass_leaves_other_reductions_alone(knobs):
    knobs(ONEPASS="1")
    # logsumexp's sum is of exp(x - where(isinf(max), 0, max)): not the
    # pattern the rescaling is exact for
    src = _one(lambda a: a.logsumexp(-1), _x(8, 300))
    assert "stax_online" not in src and _row_loops(src) == ["0", "1"]
    # a max then a sum of something else
    src = _one(lambda a: (a - a.amax(-1, keepdim=True)).sum(-1), _x(8, 300))
    assert "stax_online" not in src


def test_vec_reads_and_writes_rows_four_at_a_time(knobs):
    knobs(VEC="1")
    src = _one(lambda a: F.softmax(a, -1), _x(16, 1000))
    # per row: every vector access aligned to its four elements, else the
    # scalar loops
    assert "stax_vok = stax_vok && stax_vaok(&buf0[(x0*1000LL + r0)]);" in src
    assert "stax_vok = stax_vok && stax_vaok(&buf1[(x0*1000LL + r0)]);" in src
    # first row loop: vector loads that also fill the row cache four at a
    # time; the last: vector reads of the cache, vector stores
    assert ("const stax_v4<float> stax_vl0 = *(const stax_v4<float> *)"
            "&buf0[(x0*1000LL + r0)];") in src
    assert "if (stax_rc_on) { *(stax_v4<float> *)&stax_rc0[rw] = stax_vl0; }" in src
    assert ("const stax_v4<float> stax_vl0 = stax_rc_on ? *(const stax_v4<float> *)"
            "&stax_rc0[rw] : *(const stax_v4<float> *)&buf0[(x0*1000LL + r0)];") in src
    assert "*(stax_v4<float> *)&buf1[(x0*1000LL + r0)] = stax_vs1;" in src
    # the scalar loops take the rest of the row past the last whole vector
    assert "rbase2 = (rnumel & ~(int64_t)3) + threadIdx.x;" in src
    for s in ("0", "1", "2"):
        assert f"rv{s} + 12 * (int64_t)blockDim.x + 3 < rnumel" in src


def test_vec_is_the_default_for_long_rows_only(knobs):
    """TENSORPLAY_NVRTC_VEC unset: rows of a constant length of at least
    2048 points get the vector loops behind a row-length check, shorter
    constant rows render exactly as with VEC=0 (on the H200 the vector loops
    won for rows of 16384 and lost for rows of 128); a row length known only
    at launch gets the vector loops and the check"""
    long_src = _one(lambda a: F.softmax(a, -1), _x(4, 4096))
    assert "stax_vok = rnumel >= 2048LL;" in long_src
    assert "stax_vaok(&buf0[" in long_src and "stax_v4<float>" in long_src
    short = _one(lambda a, b: (tp.relu(a + b) * 2).sum(-1), _x(64, 128), _x(64, 128, seed=1))
    assert "stax_v4" not in short and "stax_vok" not in short
    ks = nvrtc_kernels(lambda a: F.layer_norm(a, (a.shape[-1],)), _x(6, 300),
                       compile=False, dynamic=True)
    assert any("stax_vok = rnumel >= 2048LL;" in k.source for k in ks)
    knobs(VEC="0")
    off = _one(lambda a: F.softmax(a, -1), _x(4, 4096))
    assert "stax_v4" not in off and "stax_vok" not in off
    knobs(VEC="0")
    assert _one(lambda a, b: (tp.relu(a + b) * 2).sum(-1), _x(64, 128),
                _x(64, 128, seed=1)) == short
    knobs(VEC="1")                 # every row length, no length check
    forced = _one(lambda a: F.softmax(a, -1), _x(4, 4096))
    assert "bool stax_vok = true;" in forced and "rnumel >= 2048LL" not in forced
    assert forced.replace("bool stax_vok = true;",
                          "bool stax_vok = rnumel >= 2048LL;") == long_src
    assert "stax_v4" in _one(lambda a, b: (tp.relu(a + b) * 2).sum(-1), _x(64, 128),
                             _x(64, 128, seed=1))


@needs_nvrtc
def test_default_long_row_kernels_compile_to_ptx_with_vector_loads(knobs):
    src = _one(lambda a: F.layer_norm(a, (a.shape[-1],)), _x(4, 4096))
    ptx = C.nvrtc_compile(src, "kernel0_fused_layer_norm")
    assert "ld.global.nc.v4.f32" in ptx and "st.global.v4.f32" in ptx


def test_vec_skips_strided_masked_and_in_place_accesses(knobs):
    knobs(VEC="1")
    # rows of the transposed input are strided: its loads stay scalar, the
    # contiguous output is written four at a time
    src = _one(lambda a: F.softmax(a.t(), -1), _x(300, 7))
    assert "stax_vl" not in src and "stax_vaok(&buf0[" not in src
    assert "stax_vaok(&buf1[" in src and "= stax_vs" in src
    # a padded row reads under a mask (out of range where it is false)
    ks = nvrtc_kernels(lambda a: F.softmax(F.pad(a, (2, 2)), -1), _x(30, 68),
                       compile=False)
    src = ks[-1].source
    assert " ? (float)(buf0[" in src and "stax_vaok(&buf0[" not in src
    # two inner loop variables: scalar loops only
    src = _one(lambda a: a.sum((1, 2)), _x(4, 6, 8))
    assert "stax_v4" not in src
    # a pointwise kernel: not vectorized by this knob
    src = _one(lambda a: a * 2 + 1, _x(300, 8))
    assert "stax_v4" not in src


@needs_nvrtc
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("setting", [dict(VEC="1"), dict(ONEPASS="1"),
                                     dict(VEC="1", ONEPASS="1")],
                         ids=["vec", "onepass", "vec_onepass"])
def test_knob_kernels_compile_to_ptx(knobs, setting, dtype):
    knobs(**setting)
    fns = [lambda a, g, b: F.softmax(a, -1),
           lambda a, g, b: F.log_softmax(a, -1),
           lambda a, g, b: F.layer_norm(a, (a.shape[-1],), g, b),
           lambda a, g, b: a.var(-1) + a.std(-1) + a.logsumexp(-1),
           lambda a, g, b: a.argmax(-1) + a.sum(-1).long(),
           lambda a, g, b: a - a.mean(-1, keepdim=True) * g]
    x, g, b = (_x(8, 300, dtype=dtype), _x(300, dtype=dtype, seed=1),
               _x(300, dtype=dtype, seed=2))
    srcs = []
    for fn in fns:
        ks = nvrtc_kernels(fn, x, g, b)
        assert ks and all(k.source for k in ks)
        srcs.append("".join(k.source for k in ks))
    if "VEC" in setting:
        assert all("stax_v4<" in s for s in srcs[:3])
    if "ONEPASS" in setting:
        assert all("stax_block_online" in s for s in srcs[:2])


@needs_nvrtc
def test_vec_kernels_use_vector_instructions(knobs):
    knobs(VEC="1", ONEPASS="1")
    src = _one(lambda a: F.softmax(a, -1), _x(16, 1000))
    ptx = C.nvrtc_compile(src, "kernel0_fused_softmax")
    assert "ld.global.nc.v4.f32" in ptx and "st.global.v4.f32" in ptx
    assert "ld.shared.v4.f32" in ptx and "st.shared.v4.f32" in ptx


def test_register_row_paths_for_long_static_rows():
    """softmax/layer_norm rows of a length known when rendering, a multiple
    of 4 * BX: a path per block size BX that loads each thread's vectors of
    the row once into registers (all V loads at once), the later row loops
    reading them back; 32 floats a thread at most (16384: BX 512 and 1024,
    not 256)"""
    src = _one(lambda a: F.softmax(a, -1), _x(4, 16384))
    assert "blockDim.x == 512 && blockDim.y == 1" in src
    assert "blockDim.x == 1024 && blockDim.y == 1" in src
    assert "blockDim.x == 256 &&" not in src
    assert "stax_v4<float> stax_rr0[8];" in src and "stax_v4<float> stax_rr0[4];" in src
    assert "STAX_LB kernel0_fused_softmax(" in src
    # filled in the first row loop, read back (not from memory) in the others
    assert src.count("stax_rr0[vu] = stax_vl0;") == 2
    assert src.count("stax_vl0 = stax_rr0[vu];") == 4
    src = _one(lambda a: F.layer_norm(a, (a.shape[-1],)), _x(4, 4096))
    assert "blockDim.x == 256 &&" in src and "stax_rr0[4];" in src
    assert "blockDim.x == 1024 &&" in src and "stax_rr0[1];" in src
    # no shared row (one row loop), a row length not a multiple of 4 * 256,
    # short rows, and a row length that is a size argument: no such path
    for fn, x, kw in [(lambda a: a.sum(-1), _x(4, 16384), {}),
                      (lambda a: F.softmax(a, -1), _x(4, 16383), {}),
                      (lambda a: F.softmax(a, -1), _x(4, 1024), {}),
                      (lambda a: F.softmax(a, -1), _x(4, 16384), {"dynamic": True})]:
        src = "".join(k.source for k in nvrtc_kernels(fn, x, compile=False, **kw))
        assert "stax_rr" not in src


@needs_nvrtc
def test_register_row_kernels_keep_the_row_in_registers():
    """the unrolled path holds its row in registers: no local memory (a
    stack array) in the PTX, 16-byte loads and stores, at most 1024 threads
    a block declared (so ptxas keeps to 64 registers a thread)"""
    for fn, name, x in [(lambda a: F.softmax(a, -1), "kernel0_fused_softmax", _x(4, 16384)),
                        (lambda a: F.layer_norm(a, (a.shape[-1],)), "kernel0_fused_layer_norm",
                         _x(4, 16384))]:
        src = _one(fn, x)
        ptx = C.nvrtc_compile(src, name)
        assert ".local" not in ptx and "ld.local" not in ptx, name
        assert ".maxntid 1024" in ptx
        assert "ld.global.nc.v4.f32" in ptx and "st.global.v4.f32" in ptx
