"""NVRTC back end: random ops (the loop IR's philox primitive) and the set of
primitives the CUDA C renderer accepts.

Kernels come from the lower room, lowered as tp.compile lowers them
(tests/_nvrtc.py). No GPU is needed: kernels are compiled to PTX, and the
device function
`stax_philox` is checked against the CPU generator (docs/rng.md) by a NumPy
re-implementation that takes its constants and round count from the CUDA C
source itself, and (where a C compiler is present) by running the very text
of the device function on the host.
"""
import ctypes
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import tensorplay as tp
import tensorplay._C as C
from _nvrtc import nvrtc_kernels, pointwise_op_case, pointwise_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

needs_nvrtc = pytest.mark.skipif(
    not C.nvrtc_available(),
    reason="libnvrtc not found (pip install nvidia-cuda-nvrtc-cu12)")

M = 0xFFFFFFFF


def _philox_source():
    """The CUDA C of a kernel using philox (pure rendering, no NVRTC)."""
    ks = nvrtc_kernels(lambda x: tp.rand_like(x), tp.zeros(8),
                       compile=False)
    assert len(ks) == 1 and "philox(" in ks[0].loop_ir
    return ks[0].source


def _device_function(src):
    """The preamble's philox constants and device function, verbatim."""
    start = src.index("#define STAX_PHILOX_M0")
    body = src.index("stax_philox(long long seed", start)
    end = src.index("\n}\n", body) + 3
    return src[start:end]


def _constants(src):
    text = _device_function(src)
    c = {name: int(v, 16) for name, v in re.findall(
        r"#define STAX_PHILOX_(M0|M1|W0|W1) (0x[0-9A-Fa-f]+)u", text)}
    c["rounds"] = int(re.search(r"#define STAX_PHILOX_ROUNDS (\d+)",
                                text).group(1))
    return c


def _doc_constants():
    with open(os.path.join(ROOT, "docs", "rng.md")) as f:
        doc = f.read()
    c = {name: int(v, 16) for name, v in re.findall(
        r"(M0|M1|W0|W1) = (0x[0-9A-Fa-f]+)", doc)}
    c["rounds"] = 10 if "repeat 10 times" in doc else None
    return c


def np_philox_words(seed, offset, j, const):
    """Word j of the stream (docs/rng.md), vectorized over j (uint64 math),
    written the way the device function computes it."""
    j = np.asarray(j, dtype=np.uint64)
    c = (np.uint64(offset) >> np.uint64(2)) + (j >> np.uint64(2))
    c0 = c & np.uint64(M)
    c1 = c >> np.uint64(32)
    c2 = np.zeros_like(c)
    c3 = np.zeros_like(c)
    k0 = np.uint64(seed & M)
    k1 = np.uint64((seed >> 32) & M)
    m0, m1 = np.uint64(const["M0"]), np.uint64(const["M1"])
    for _ in range(const["rounds"]):
        p0 = m0 * c0                      # < 2^64: no wrap-around
        p1 = m1 * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0,
                          p1 & np.uint64(M),
                          (p0 >> np.uint64(32)) ^ c3 ^ k1,
                          p0 & np.uint64(M))
        k0 = (k0 + np.uint64(const["W0"])) & np.uint64(M)
        k1 = (k1 + np.uint64(const["W1"])) & np.uint64(M)
    sel = j & np.uint64(3)
    return np.where(sel == 0, c0, np.where(sel == 1, c1,
                                           np.where(sel == 2, c2, c3)))


def test_philox_renders_as_a_device_function():
    src = _philox_source()
    assert "#define STAX_D static __device__" in src
    assert "STAX_D long long stax_philox(" in _device_function(src)
    assert re.search(r"const long long tmp\d+ = stax_philox\(tmp\d+, "
                     r"tmp\d+, tmp\d+\);", src)


def test_device_constants_and_rounds_match_rng_doc():
    const = _constants(_philox_source())
    assert const == _doc_constants()
    assert const == {"M0": 0xD2511F53, "M1": 0xCD9E8D57, "W0": 0x9E3779B9,
                     "W1": 0xBB67AE85, "rounds": 10}


KEYS_CTRS = [((0, 0), 0), ((0x12345678, 0x9ABCDEF0), 1),
             ((M, M), (1 << 32) + 7), ((67280421310721 & M,
                                         67280421310721 >> 32), 12345),
             ((5, 0), (1 << 62) - 1)]


@pytest.mark.parametrize("key,ctr", KEYS_CTRS)
def test_numpy_model_of_device_function_matches_cpu_block(key, ctr):
    """The device algorithm (constants from the CUDA C source) gives the
    CPU's words (_C._philox4x32) for word layout key = (lo32, hi32) of the
    seed, counter (lo32(c), hi32(c), 0, 0)."""
    const = _constants(_philox_source())
    seed = key[0] | (key[1] << 32)
    want = C._philox4x32(key, (ctr & M, ctr >> 32, 0, 0))
    # offset is in words: counter ctr starts at word 4 * ctr
    got = np_philox_words(seed, 4 * ctr, np.arange(4), const)
    assert [int(w) for w in got] == list(want)
    # the same block reached through j instead of offset
    got = np_philox_words(seed, 0, np.uint64(4 * ctr)
                          + np.arange(4, dtype=np.uint64), const)
    assert [int(w) for w in got] == list(want)
    if key == (0, 0) and ctr == 0:   # docs/rng.md's known answer
        assert [hex(int(w)) for w in got] == [
            "0x6627e8d5", "0xe169c58d", "0xbc57ac4c", "0x9b00dbd8"]


def test_numpy_model_reproduces_eager_rand_stream():
    tp = pytest.importorskip("tensorplay")
    const = _constants(_philox_source())
    with tp.random.fork_rng():
        tp.manual_seed(1234)
        tp.rand(3)                                   # offset 4: not zero
        g = tp.default_generator
        seed, off = g.initial_seed(), g.offset
        u = tp.rand(5, 7).numpy().ravel()            # float32: 1 word each
        d = tp.rand(6, dtype=tp.float64).numpy()     # float64: 2 words each
        off2 = off + 36                              # 35 words -> 36
    w = np_philox_words(seed, off, np.arange(35), const)
    assert np.array_equal(((w >> np.uint64(8)).astype(np.float64)
                           * 2.0 ** -24).astype(np.float32), u)
    w = np_philox_words(seed, off2, np.arange(12), const)
    a, b = w[0::2], w[1::2]
    want = ((a >> np.uint64(5)).astype(np.float64) * 67108864.0
            + (b >> np.uint64(6)).astype(np.float64)) * 2.0 ** -53
    assert np.array_equal(want, d)


def _host_philox():
    """The device function's text compiled for the host (the CUDA keywords
    defined away) and loaded with ctypes; None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    import tempfile
    d = tempfile.mkdtemp(prefix="stax_philox_")
    c_path, so = os.path.join(d, "philox.c"), os.path.join(d, "philox.so")
    with open(c_path, "w") as f:
        f.write("#define STAX_D static inline\n"
                + _device_function(_philox_source())
                + "\nlong long host_philox(long long s, long long o, "
                  "long long j) { return stax_philox(s, o, j); }\n")
    r = subprocess.run([cc, "-O1", "-shared", "-fPIC", "-w", c_path, "-o", so],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail("the device function is not plain C: " + r.stderr)
    lib = ctypes.CDLL(so)
    lib.host_philox.restype = ctypes.c_longlong
    lib.host_philox.argtypes = [ctypes.c_longlong] * 3
    return lib.host_philox


def test_device_function_text_gives_cpu_words():
    f = _host_philox()
    if f is None:
        pytest.skip("no C compiler to run the device function's text")
    def s64(v):   # the int64 the kernel's size arguments carry
        v &= (1 << 64) - 1
        return v - (1 << 64) if v >= 1 << 63 else v
    for key, ctr in KEYS_CTRS:
        seed = key[0] | (key[1] << 32)
        want = C._philox4x32(key, (ctr & M, ctr >> 32, 0, 0))
        got = [f(s64(seed), s64(4 * ctr), j) for j in range(4)]
        assert got == list(want)
        if ctr:   # the block reached through j
            got = [f(s64(seed), 4, s64(4 * ctr - 4 + j)) for j in range(4)]
            assert got == list(want)
    # a run of words across block boundaries, against the NumPy model
    const = _constants(_philox_source())
    want = np_philox_words(67280421310721, 8, np.arange(64), const)
    assert [f(67280421310721, 8, j) for j in range(64)] == [
        int(w) for w in want]


@needs_nvrtc
def test_random_ops_render_and_compile_to_ptx():
    """Kernels that tp.compile lowers for dropout / rand_like / randn_like
    (loop IR with philox) render as CUDA C and compile with NVRTC."""
    F = tp.nn.functional
    x = tp.randn(16, 40)
    cases = [lambda x: F.dropout(x, 0.5, training=True),
             lambda x: tp.rand_like(x),
             lambda x: tp.randn_like(x),
             lambda x: tp.randn_like(x.double()) + 1]
    rand = []
    with tp.random.fork_rng():
        for fn in cases:
            ks = nvrtc_kernels(fn, x)
            rand += [k for k in ks if "philox" in k.loop_ir]
    assert len(rand) == len(cases)                # each lowered natively
    for k in rand:
        assert "stax_philox(" in k.source
        assert "sizes.v[" in k.source          # seed, offset: size arguments
    ptx = C.nvrtc_compile(rand[0].source, rand[0].name)
    assert ".entry " + rand[0].name in ptx
    assert "mul.wide.u32" in ptx or "mul.hi.u32" in ptx


@needs_nvrtc
def test_philox_words_at_shifted_offsets_compile():
    # float64 draws take two words each: philox(seed, offset, j) and
    # philox(seed, offset, j + 1)
    ks = nvrtc_kernels(lambda x: tp.rand_like(x), tp.zeros(8,
                                                           dtype=tp.float64))
    assert ks[0].loop_ir.count("philox(") == 2
    assert ".entry " + ks[0].name in C.nvrtc_compile(ks[0].source,
                                                    ks[0].name)


# ---------------------------------------------------------- supports_op

def _ir_prims():
    """STAX_PRIM_LIST of csrc/lower/lower.h: name -> arity."""
    with open(os.path.join(ROOT, "csrc", "lower", "lower.h")) as f:
        h = f.read()
    block = h[h.index("#define STAX_PRIM_LIST"):]
    block = block[:block.index("\n/*")]
    return {n: int(a) for n, a in re.findall(r'X\(\w+, "(\w+)", (\d)\)',
                                             block)}


def _uses(ir, prim):
    return re.search(r"\b%s\(" % prim, ir) is not None


def _producers():
    """prim -> a (fn, args) whose lowered loop IR uses it: a pointwise row
    of the op table whose formula names it, at the first dtype eager
    accepts; index clamps, random draws and a bit-not for the rest."""
    x = tp.randn(6, 10)
    cands = {"philox": [(lambda a: tp.rand_like(a), (x,))],
             "max": [(lambda a, i: a.index_select(0, i),
                      (x, tp.tensor([0, 3, 5])))],
             "not": [(lambda a: ~(a > 0), (x,))]}
    cands["min"] = cands["max"]
    for r in pointwise_rows():
        for prim in set(re.findall(r"\((\w+)", r["formula"] or "")):
            for dt in ("float32", "int32", "bool"):
                c = pointwise_op_case(r, dt)
                try:
                    c[0](*c[1])
                except Exception:  # noqa: BLE001 - not at this dtype
                    continue
                cands.setdefault(prim, []).append(c)
                break
    out = {}
    for prim, cs in cands.items():
        for fn, args in cs:
            ks = nvrtc_kernels(fn, *args, compile=False)
            if any(_uses(k.loop_ir, prim) for k in ks):
                out[prim] = (fn, args)
                break
    return out


def test_supported_prims_are_ir_prims():
    sup = C.nvrtc_supported_prims()
    assert isinstance(sup, tuple) and "philox" in sup
    assert set(sup) <= set(_ir_prims())


@needs_nvrtc
def test_every_supported_prim_renders_and_compiles():
    """Each loop-IR primitive, reached through lowering: supports_op true
    => valid CUDA C; false => a clear NotImplementedError, never a compile
    error in NVRTC."""
    sup = set(C.nvrtc_supported_prims())
    prods = _producers()
    reached = set()
    for name in sorted(_ir_prims()):
        if name not in prods:
            continue
        fn, args = prods[name]
        if name not in sup:
            with pytest.raises(NotImplementedError):
                nvrtc_kernels(fn, *args)
            continue
        ks = nvrtc_kernels(fn, *args)
        ir = "".join(k.loop_ir for k in ks)
        assert _uses(ir, name), name
        reached |= {p for p in _ir_prims() if _uses(ir, p)}
    # lowering reaches nearly every primitive this way; each one reached
    # compiled above (nvrtc_kernels compiles every kernel to PTX)
    missing = set(_ir_prims()) - reached
    assert len(missing) <= 3, missing


def test_bitwise_on_floats_is_eagers_error_not_invalid_cuda():
    # the renderer refuses bit operations on floats (NotImplementedError);
    # lowering never hands it one: compiling raises what eager raises
    x = tp.randn(4)
    for fn in (lambda a: a & a, lambda a: ~a):
        with pytest.raises(RuntimeError, match="not implemented for 'Float'"):
            fn(x)
        with pytest.raises(RuntimeError, match="not implemented for 'Float'"):
            nvrtc_kernels(fn, x, compile=False)
