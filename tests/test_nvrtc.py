"""NVRTC back end: the loop IR that the lower room makes -> CUDA C -> PTX, no
GPU needed.

Every program here is lowered exactly as tp.compile lowers it (tests/
_nvrtc.py: a tp.compile back end calling _C.nvrtc_render); the NVRTC back
end only renders and compiles. Skipped when libnvrtc cannot be found
(install the pip wheel `nvidia-cuda-nvrtc-cu12`, or set TENSORPLAY_NVRTC to
the library). Running the kernels needs a GPU: tests/gpu/ (python3 -m
pytest tests/gpu) compares them with the CPU there.
"""
import re

import numpy as np
import pytest

import tensorplay as tp
import tensorplay._C as C
from _nvrtc import (CTYPE, OP_DTYPES, dtype_name, nvrtc_compile,
                    nvrtc_kernels, out_ctype, pointwise_batch_case,
                    pointwise_rows, program_cases)

needs_nvrtc = pytest.mark.skipif(
    not C.nvrtc_available(),
    reason="libnvrtc not found (pip install nvidia-cuda-nvrtc-cu12)")

F = tp.nn.functional


def ex11(x, w):
    return (tp.relu(x + w) * 2).sum(-1)


def _xw():
    rng = np.random.default_rng(0)
    return (tp.from_numpy(rng.standard_normal((64, 128), dtype=np.float32)),
            tp.from_numpy(rng.standard_normal((64, 128), dtype=np.float32)))


def test_error_type_and_functions_exist():
    assert issubclass(C.NVRTCError, RuntimeError)
    assert isinstance(C.nvrtc_available(), bool)
    assert isinstance(C.cuda_available(), bool)


def test_render_needs_no_nvrtc():
    # the renderer is pure C: works even where NVRTC is missing
    ks = nvrtc_kernels(ex11, *_xw(), compile=False)
    assert len(ks) == 1                              # ONE fused kernel
    k = ks[0]
    assert 'extern "C" __global__ void %s(' % k.name in k.source
    assert "__shfl_down_sync" in k.source          # warp-level tree
    assert "__shared__" in k.source                 # one partial per warp
    assert "stax_maxnan" in k.source                # NaN-propagating relu
    assert out_ctype(k.source) == "float"           # float32 (64,) output
    assert "sum" in k.loop_ir


def _llvm_kernels(fn, *args):
    progs = []

    def stax(gm, example_inputs, **options):
        progs.append(C.stax_backend(gm, example_inputs))
        return progs[-1]

    tp.compile(fn, backend=stax)(*args)
    return [k.loop_ir for p in progs for k in p.kernels]


def test_host_checks_follow_the_backend_caps():
    # the zero-divisor check read back on the host is the CPU back end's
    # (torch raises there; CUDA kernels give an unspecified quotient, so the
    # NVRTC back end's caps drop it); the index-range check is every back
    # end's (NVRTC kernels clamp their loads but assert nothing on the
    # device: tests/test_compiled_index_bounds.py)
    a = tp.arange(1, 9, dtype=tp.int32)
    b = tp.full((8,), 3, dtype=tp.int32)
    x, i = tp.randn(4, 3), tp.tensor([0, 2])
    assert any("zero_divisor" in ir for ir in _llvm_kernels(lambda a, b: a // b, a, b))
    ks = nvrtc_kernels(lambda a, b: a // b, a, b, compile=False)
    assert not any("zero_divisor" in k.loop_ir for k in ks)
    fn = lambda x, i: x.index_select(0, i)
    assert any("index_check" in ir for ir in _llvm_kernels(fn, x, i))
    ks = nvrtc_kernels(fn, x, i, compile=False)
    assert any("index_check" in k.loop_ir for k in ks)


@needs_nvrtc
def test_example_1_1_fused_kernel_compiles_to_ptx():
    ks = nvrtc_kernels(ex11, *_xw())
    assert len(ks) == 1                              # ONE fused kernel
    k = ks[0]
    assert "acc0 = sum" in k.loop_ir                 # a reduction kernel
    assert k.bytes_read == 2 * 64 * 128 * 4 and k.bytes_written == 64 * 4
    ptx = C.nvrtc_compile(k.source, k.name)
    assert isinstance(ptx, str)
    assert ".entry " + k.name in ptx
    assert "shfl.sync.down" in ptx


def test_back_end_is_chosen_by_device():
    # cpu inputs (tensors or NumPy arrays): the stax back end compiles with
    # LLVM; nvrtc_render hands the same lowering to the NVRTC back end
    x, w = _xw()
    progs = []

    def grab(gm, example_inputs, **options):
        progs.append((gm, list(example_inputs)))
        return gm
    tp.compile(ex11, backend=grab)(x, w)
    gm, ex = progs[0]
    assert x.device.type == "cpu"
    cpu = C.stax_backend(gm, ex)
    assert cpu.backend == "llvm"
    assert C.stax_backend(gm, [x.numpy(), w.numpy()]).backend == "llvm"
    assert "define" in cpu.kernels[0].source        # LLVM IR
    gpu = C.nvrtc_render(gm, ex, compile=False)
    assert gpu.backend == "nvrtc"
    assert [k.loop_ir for k in gpu.kernels] == [k.loop_ir for k in
                                                 cpu.kernels]
    assert '__global__' in gpu.kernels[0].source   # CUDA C


@needs_nvrtc
def test_compile_through_the_backend_vtable():
    # the stax_backend "nvrtc": compile_kernel renders the loop IR and
    # compiles it to PTX (a kernel NVRTC rejected would raise NVRTCError)
    _, progs = nvrtc_compile(ex11, *_xw())
    assert len(progs) == 1 and progs[0].backend == "nvrtc"
    assert progs[0].steps == ["kernel " + progs[0].kernels[0].name]


@needs_nvrtc
def test_example_1_1_from_a_traced_graph():
    x, w = _xw()
    gm = C.trace(ex11, (x, w)).graph_module
    prog = C.nvrtc_render(gm, [x, w])
    assert len(prog.kernels) == 1
    k = prog.kernels[0]
    assert ".entry " + k.name in C.nvrtc_compile(k.source, k.name)


@needs_nvrtc
def test_syntax_error_raises_nvrtc_error_with_log():
    src = 'extern "C" __global__ void broken(float *p) { p[0] = ; }'
    with pytest.raises(C.NVRTCError) as ei:
        C.nvrtc_compile(src, "broken.cu")
    e = ei.value
    assert isinstance(e, RuntimeError)
    assert "broken.cu" in e.log and "error" in e.log
    assert e.log in str(e)                           # the log is in the message


@needs_nvrtc
def test_bad_arch_and_version():
    major, minor = C.nvrtc_version()
    assert major >= 11
    with pytest.raises(ValueError):
        C.nvrtc_compile('extern "C" __global__ void k() {}', "k", arch="x86")
    cubin = C.nvrtc_compile('extern "C" __global__ void k() {}', "k",
                            arch="sm_90")
    assert isinstance(cubin, bytes) and cubin[:4] == b"\x7fELF"


def _t(dt, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dt.startswith("int"):
        return tp.from_numpy(rng.integers(1, 9, shape).astype(dt))
    return tp.from_numpy(rng.standard_normal(shape).astype(dt))


# pointwise formulas over several dtypes, written as tensor code; each
# lowers to ONE kernel that renders and compiles, storing eager's dtype
POINTWISE = [
    ("add", lambda a, b: a + b, ["float32", "float32"]),
    ("sub mul", lambda a, b: a - b * 0.5, ["float64", "float32"]),
    ("true division of ints", lambda a, b: a / b, ["int32", "int64"]),
    ("leaky_relu by hand", lambda a: tp.where(a > 0, a, 0.01 * a),
     ["float32"]),
    ("sigmoid by hand", lambda a: 1 / (1 + tp.exp(-a)), ["float32"]),
    ("sigmoid", lambda a: tp.sigmoid(a), ["float64"]),
    ("clamp", lambda a: a.clamp(-1.5, 2.5), ["float32"]),
    ("isfinite and not isnan", lambda a, b: tp.isfinite(a) & ~tp.isnan(b),
     ["float32", "float64"]),
    ("floor_divide", lambda a, b: a // b, ["int64", "int64"]),
    ("remainder", lambda a, b: a % b, ["float32", "float32"]),
    ("pow", lambda a: a ** 3, ["int32"]),
    ("bitxor bitnot", lambda a, b: a ^ ~b, ["int16", "int16"]),
    ("round", lambda a: tp.round(a * 10), ["float16"]),
    ("abs sign", lambda a: tp.abs(tp.sign(a)), ["int8"]),
    ("tanh log1p sqrt abs", lambda a: tp.tanh(tp.log1p(tp.sqrt(tp.abs(a)))),
     ["float32"]),
]


@needs_nvrtc
@pytest.mark.parametrize("label,fn,dtypes", POINTWISE,
                         ids=[p[0] for p in POINTWISE])
def test_pointwise_formula_compiles(label, fn, dtypes):
    args = [_t(dt, (3, 5) if i == 0 else (5,), i)
            for i, dt in enumerate(dtypes)]
    ks = nvrtc_kernels(fn, *args)
    assert len(ks) == 1
    assert out_ctype(ks[0].source) == CTYPE[dtype_name(fn(*args))]


@needs_nvrtc
@pytest.mark.parametrize("dt", OP_DTYPES)
@pytest.mark.parametrize("first", range(0, len(pointwise_rows()), 12))
def test_every_pointwise_op_of_the_op_table_compiles(dt, first):
    """Every pointwise row of the op table (in-place twins included), at
    every dtype eager accepts it, inside a chain: where -> op -> eq, its
    first operand transposed and the others broadcast. Lowered strictly
    (no fallback), fused into one kernel, compiled to PTX."""
    rows = pointwise_rows()[first:first + 12]
    fn, args, names = pointwise_batch_case(rows, dt)
    if not names:
        pytest.skip(f"no op of this slice takes {dt}")
    ks = nvrtc_kernels(fn, *args)
    assert len(ks) == 1, [k.name for k in ks]
    # each op's result and its comparison: two outputs of the one kernel
    header = ks[0].loop_ir.splitlines()[0]
    assert header.count(" out") == 2 * len(names), (names, header)


def test_every_pointwise_row_has_an_entry_point_or_is_internal():
    """the op-table test above covers every row it can call"""
    from _nvrtc import pointwise_op_case
    missing = [r["name"] for r in pointwise_rows()
               if pointwise_op_case(r, "float32") is None]
    assert set(missing) <= {"_to_copy"}, missing   # aten-only, made by passes


@needs_nvrtc
@pytest.mark.parametrize("red,fn,dt,out_dt", [
    ("amax", lambda a: (a * 3).amax(0), "float32", "float32"),
    ("mean", lambda a: (a * 3).mean(), "float64", "float64"),
    ("sum", lambda a: (a * 3).sum(1), "int32", "int64"),
    ("argmax", lambda a: (a * 3).argmax(-1), "float32", "int64"),
    ("any", lambda a: (a * 3 > 1).any(-1), "float32", "bool"),
])
def test_reductions_compile(red, fn, dt, out_dt):
    a = _t(dt, (4, 6, 8))
    ks = nvrtc_kernels(fn, a)
    assert len(ks) == 1 and red in ks[0].loop_ir
    assert dtype_name(fn(a)) == out_dt
    assert out_ctype(ks[0].source) == CTYPE[out_dt]


def test_broadcast_and_strided_inputs_index_maps():
    x = tp.from_numpy(np.zeros((8, 6), np.float32)).t()   # strides (1, 6)
    b = tp.from_numpy(np.zeros((8,), np.float32))         # broadcast on dim 0
    ks = nvrtc_kernels(lambda x, b: x + b, x, b, compile=False)
    assert len(ks) == 1
    src = ks[0].source
    assert "buf0[(x0 + x1*6LL)]" in src               # no copy to contiguous
    assert "buf1[x1]" in src                           # stride-0 broadcast


def test_unsupported_op_is_a_clear_error():
    # an op lowering cannot take: strict names it; otherwise it is a
    # fallback step and the kernels around it still render
    def f(t):
        return (t * 2).cumprod(0) + 1
    with pytest.raises(C.NativeCompileError, match="cumprod"):
        nvrtc_kernels(f, tp.randn(4), compile=False)
    _, progs = nvrtc_compile(f, tp.randn(4), compile=False, strict=False)
    assert progs[0].fallbacks == 1 and len(progs[0].kernels) == 2


def test_launch_without_gpu_is_a_clear_error():
    if C.cuda_available():
        pytest.skip("a GPU is present: see tests/gpu/")
    with pytest.raises(RuntimeError, match="GPU"):
        nvrtc_compile(lambda a, b: a + b, tp.ones(4), tp.ones(4),
                      compile=False, run_on_gpu=True)


def test_multi_stage_kernel_renders_like_lowers_softmax():
    ks = nvrtc_kernels(lambda a: F.softmax(a, -1), tp.randn(32, 1000),
                       compile=False)
    assert len(ks) == 1
    k = ks[0]
    # two block reductions, then an INNER stage reading both accumulators
    assert k.source.count("stax_block_reduce(acc") == 2
    assert "expf(" in k.source and "acc1" in k.loop_ir


@needs_nvrtc
def test_multi_stage_kernels_compile():
    ks = nvrtc_kernels(lambda a: F.softmax(a, -1),
                       tp.randn(8, 300, dtype=tp.float64))
    assert len(ks) == 1 and out_ctype(ks[0].source) == "double"
    # layer_norm: mean, variance, normalized rows (times a weight)
    ks = nvrtc_kernels(lambda a, g: F.layer_norm(a, (300,), g),
                       tp.randn(8, 300), tp.randn(300))
    assert len(ks) == 1
    assert ks[0].source.count("stax_block_reduce(acc") >= 1
    # argmax over dim 0 of a transposed view, keepdim
    x = tp.from_numpy(np.zeros((5, 7), np.float32)).t()
    ks = nvrtc_kernels(lambda a: a.argmax(0, keepdim=True), x)
    assert len(ks) == 1 and out_ctype(ks[0].source) == "long long"


@needs_nvrtc
def test_every_kernel_the_lower_room_makes_renders_and_compiles():
    """The same loop IR through both back ends: each kernel lowering makes
    for these programs is rendered as CUDA C and compiled to PTX."""
    x, w = tp.randn(16, 40), tp.randn(16, 40)
    fns = [
        (ex11, (x, w)),
        (lambda x: F.softmax(x, -1), (x,)),
        (lambda x, w: F.layer_norm(x, (40,)) * w, (x, w)),
        (lambda x: tp.cat([x, x * 2], 0).argmax(-1), (x,)),
        (lambda x: (x.t() > 0).float().mean(0), (x,)),
        (lambda x, w: tp.where(x > w, x.exp(), w.tanh()).amax(0), (x, w)),
    ]
    srcs = [k.source for fn, args in fns for k in nvrtc_kernels(fn, *args)]
    assert any("__shfl_down_sync" in s for s in srcs)
    assert any("sizes.v[" in s for s in srcs)   # sizes as arguments


@needs_nvrtc
@pytest.mark.parametrize("case", program_cases(), ids=lambda c: c[0])
def test_program_cases_compile(case):
    """what tests/gpu runs on a GPU: views, transposes, broadcasting,
    reductions, normalizations, random ops, every dtype class"""
    label, fn, args, _ = case
    ks = nvrtc_kernels(fn, *args)
    assert ks
    for k in ks:
        assert re.search(r'extern "C" __global__ void %s\(' % k.name,
                         k.source)


@needs_nvrtc
def test_dynamic_programs_take_sizes_as_arguments():
    fn = ex11
    _, progs = nvrtc_compile(fn, *_xw(), dynamic=True)
    assert progs[0].dynamic
    src = progs[0].kernels[0].source
    assert "sizes.v[" in src and "128LL" not in src   # strides are sizes too


def test_backend_includes_no_graph_or_op_table():
    """NVRTC is a pure back end: its sources see the loop IR (lower.h) and
    tensor dtypes, never the graph room or the op table (ops.def)."""
    import glob
    import os
    import shutil
    import subprocess
    import sysconfig
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to list the includes")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    srcs = sorted(glob.glob(os.path.join(root, "csrc", "backend_nvrtc", "*.c")))
    assert srcs
    for src in srcs:
        deps = subprocess.run(
            [cc, "-MM", "-std=c11", "-D_GNU_SOURCE", "-I" + os.path.join(root, "csrc"),
             "-I" + sysconfig.get_paths()["include"], src],
            capture_output=True, text=True, check=True).stdout
        assert "csrc/graph/" not in deps and "csrc/ops/" not in deps, (src, deps)
        assert "lower/lower.h" in deps


@needs_nvrtc
def test_ptx_goes_through_the_compile_cache(tmp_path, monkeypatch):
    """Issue 17 item 3: the NVRTC back end stores each kernel's PTX in the
    persistent compile cache and a later lowering of the same loop IR loads
    it instead of running NVRTC (no GPU needed: the round trip of the
    entry). A kernel of another function with the same loop IR launches the
    stored entry point by its name."""
    cfg = tp.compiler.config
    monkeypatch.setattr(cfg, "cache_dir", str(tmp_path / "c"))
    monkeypatch.setattr(cfg, "cache", True)
    from tensorplay.compiler import _cache
    _cache.sync()
    x, w = _xw()
    gm = C.trace(ex11, (x, w)).graph_module
    c0 = C._cache_counters()
    p1 = C.nvrtc_render(gm, [x, w])
    c1 = C._cache_counters()
    assert (c1[1] - c0[1], c1[2] - c0[2]) == (1, 1)          # a miss, compiled
    ents = list((tmp_path / "c" / "kernels").glob("*.tpk"))
    assert len(ents) == 1 and b"PTX1" in ents[0].read_bytes()
    assert b".entry " + p1.kernels[0].name.encode() in ents[0].read_bytes()
    p2 = C.nvrtc_render(gm, [x, w])
    c2 = C._cache_counters()
    assert (c2[0] - c1[0], c2[2] - c1[2]) == (1, 0)          # a hit, no NVRTC
    assert p2.kernels[0].source == p1.kernels[0].source
    # a damaged entry is recompiled, never loaded
    b = bytearray(ents[0].read_bytes())
    b[len(b) // 2] ^= 0x20
    ents[0].write_bytes(bytes(b))
    C.nvrtc_render(gm, [x, w])
    c3 = C._cache_counters()
    assert (c3[0] - c2[0], c3[2] - c2[2]) == (0, 1)


@needs_nvrtc
@pytest.mark.parametrize("right", [False, True])
def test_kernel_of_more_than_512_values_compiles(right):
    """searchsorted's unrolled binary search (tp.searchsorted over 11
    elements: ~900 values in one kernel) compiles: the renderer's memo of
    values held in tmps had 512 slots and dropped the rest, whose uses then
    read an undefined "tmp-1" (NVRTC_ERROR_COMPILATION on the GPU)"""
    s = tp.tensor(np.sort(np.random.default_rng(5).standard_normal(11)).astype(np.float32))
    v = tp.tensor(np.random.default_rng(6).standard_normal((4, 9)).astype(np.float32))
    cf, progs = nvrtc_compile(lambda s, v: tp.searchsorted(s, v, right=right), s, v)
    assert progs and all(p.backend == "nvrtc" and p.fallbacks == 0 for p in progs)
    src = "".join(k.source for p in progs for k in p.kernels)
    assert "tmp-" not in src and src.count("const ") > 512


def test_searchsorted_traces_no_host_constant():
    """the traced searchsorted of tensor values makes its bounds from the
    values (zeros_like/full_like), not as constants: the eager CUDA kernel
    (cuda/_eager.py) traces over host stand-ins, where a constant is a host
    tensor that the CUDA program refuses, so the op went to the host"""
    s, v = tp.randn(11).sort()[0], tp.randn(4, 9)
    for fn in (lambda s, v: tp.searchsorted(s, v), lambda s, v: tp.bucketize(v, s, right=True)):
        prev = C.is_grad_enabled()
        C._set_grad_enabled(False)
        try:
            tr = C.trace(fn, (s, v), {}, None, True)
        finally:
            C._set_grad_enabled(prev)
        assert "_tensor_constant" not in tr.graph_module.code
        np.testing.assert_array_equal(tp.compile(fn, strict_native=True)(s, v).numpy(),
                                      fn(s, v).numpy())


@pytest.mark.parametrize("value", [0.3, 2, -1e9, float("nan"), float("inf"), True])
@pytest.mark.parametrize("seq_dtype", [tp.float32, tp.int64])
def test_searchsorted_of_a_python_scalar_traces_no_host_constant(value, seq_dtype):
    """a Python scalar value is made a 0-d value from the sequence
    (full_like), not a constant: the constant, and the bounds and midpoints
    folded from it, were host tensors that a CUDA program refuses (the op
    went to the host); eager's index and dtype either way"""
    s = tp.tensor([-3.0, 0.0, 0.3, 0.3, 2.0, 2.0, 7.5, 1e9]).to(seq_dtype)
    fns = (lambda s: tp.searchsorted(s, value),
           lambda s: tp.searchsorted(s, value, right=True, out_int32=True),
           lambda s: tp.bucketize(value, s, right=True))
    for fn in fns:
        prev = C.is_grad_enabled()
        C._set_grad_enabled(False)
        try:
            tr = C.trace(fn, (s,), {}, None, True)
        finally:
            C._set_grad_enabled(prev)
        assert "_tensor_constant" not in tr.graph_module.code
        got, want = tp.compile(fn, strict_native=True)(s), fn(s)
        assert got.dtype == want.dtype and tuple(got.shape) == ()
        assert got.item() == want.item()
    # an empty sequence: index 0
    e = tp.zeros(0, dtype=seq_dtype)
    assert tp.compile(fns[0], strict_native=True)(e).item() == 0


def test_searchsorted_compares_a_python_scalar_in_the_result_type():
    """torch wraps the scalar and compares in the result type: 0.3 against
    float32 values is float32's 0.3, equal to the stored 0.3s (right: 4;
    eager compared float64's 0.3 and said 2), and -1e9 against float16 is
    -inf; eager, compiled and torch agree"""
    s = tp.tensor([-3.0, 0.0, 0.3, 0.3, 2.0, 2.0, 7.5, 1e9])
    h = tp.tensor([1.0, 2.0, 3.0], dtype=tp.float16)
    i = tp.tensor([1, 2, 3], dtype=tp.int32)
    for seq, val, right, want in [(s, 0.3, True, 4), (s, 0.3, False, 2), (h, -1e9, False, 0),
                                  (h, 1e9, True, 3), (i, 2.5, False, 2), (i, 2, True, 2)]:
        fn = lambda q, val=val, right=right: tp.searchsorted(q, val, right=right)  # noqa: E731
        assert fn(seq).item() == want, (seq, val, right)
        assert tp.compile(fn, strict_native=True)(seq).item() == want, (seq, val, right)
        assert tp.bucketize(val, seq, right=right).item() == want


@needs_nvrtc
def test_kernel_whose_values_share_subtrees_compiles_in_seconds():
    """polygamma(2, x) lowers to one kernel whose values are a DAG sharing
    subtrees (the zeta series); the back end walked it as a tree in three
    places (size symbols, accesses, reads-its-output), which took hours
    (tests/gpu's polygamma case never finished); each node once: ~1 s"""
    import subprocess
    import sys
    code = ("import numpy as np, tensorplay as tp\n"
            "from _nvrtc import nvrtc_compile\n"
            "x = tp.tensor(np.linspace(-2, 2, 36, dtype=np.float32).reshape(4, 9))\n"
            "cf, progs = nvrtc_compile(lambda a: tp.polygamma(2, a.abs() + 0.3), x)\n"
            "assert progs and all(p.backend == 'nvrtc' and p.fallbacks == 0 for p in progs)\n")
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


@needs_nvrtc
@pytest.mark.parametrize("src", [tp.float32, tp.float64, tp.float16, tp.bfloat16])
def test_float_to_small_integer_casts_go_through_int32_or_int64(src):
    """C's (unsigned char)-1.5f saturates to 0 on the GPU and (short)7e4f to
    32767; torch's CUDA (and the eager CUDA kernels) keep the low byte of the
    int64 and the low bits of the saturated int32: the compiled kernel spells
    those conversions (the GPU's values: tests/gpu/test_gpu_compiled_casts.py)"""
    x = tp.randn(4, 8).to(src)
    for dst, helper in [(tp.uint8, "stax_f2i64((double)"), (tp.int8, "stax_f2i32((double)"),
                        (tp.int16, "stax_f2i32((double)"), (tp.int32, "stax_f2i32((double)"),
                        (tp.int64, "stax_f2i64((double)")]:
        ks = nvrtc_kernels(lambda a: (a * 2).to(dst), x)
        body = ks[0].source[ks[0].source.index('extern "C" __global__'):]
        assert helper in body, (dst, body)
    ks = nvrtc_kernels(lambda a: a.to(tp.int64).to(tp.uint8), tp.randn(4, 8))
    body = ks[0].source[ks[0].source.index('extern "C" __global__'):]
    # float -> int64 through the helper, then int64 -> uint8 is C's (modular)
    assert "(long long)stax_f2i64((double)" in body
    assert "(unsigned char)stax_f2i64" not in body
