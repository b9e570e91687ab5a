"""NVRTC back end: random ops (the loop IR's philox primitive) and the set of
primitives the CUDA C renderer accepts.

No GPU is needed: kernels are compiled to PTX, and the device function
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

import tensorplay._C as C

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

needs_nvrtc = pytest.mark.skipif(
    not C.nvrtc_available(),
    reason="libnvrtc not found (pip install nvidia-cuda-nvrtc-cu12)")

M = 0xFFFFFFFF


def _philox_source():
    """The CUDA C of a kernel using philox (pure rendering, no NVRTC)."""
    k = C.nvrtc_render_expr("(philox a b c)", [("int64", (8,))] * 3,
                            name="philox_words")
    assert k.output_dtype == "int64"
    return k.source


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
    tp = pytest.importorskip("tensorplay")
    F = tp.nn.functional
    try:
        log = C.nvrtc_shadow(True)
    except RuntimeError as e:
        pytest.skip(str(e))             # built without LLVM
    try:
        x = tp.randn(16, 40)
        cases = [lambda x: F.dropout(x, 0.5, training=True),
                 lambda x: tp.rand_like(x),
                 lambda x: tp.randn_like(x),
                 lambda x: tp.randn_like(x.double()) + 1]
        with tp.random.fork_rng():
            for fn in cases:
                tp.compile(fn)(x)
    finally:
        C.nvrtc_shadow(False)
    rand = [e for e in log if "philox" in (e["loop_ir"] or "")]
    if len(rand) < len(cases):
        pytest.skip("random ops did not lower natively")
    bad = [(e["name"], e["error"]) for e in log if not e["ok"]]
    assert not bad, bad
    for e in rand:
        assert "stax_philox(" in e["source"]
        assert "sizes.v[" in e["source"]       # seed, offset: size arguments
    ptx = C.nvrtc_compile(rand[0]["source"], rand[0]["name"])
    assert ".entry " + rand[0]["name"] in ptx
    assert "mul.wide.u32" in ptx or "mul.hi.u32" in ptx


@needs_nvrtc
def test_philox_expression_compiles():
    k = C.nvrtc_render_expr("(philox a b (add c 1))", [("int64", (8,))] * 3,
                            name="pw_philox")
    assert ".entry pw_philox" in C.nvrtc_compile(k.source, k.name)


# ---------------------------------------------------------- supports_op

def _ir_prims():
    """STAX_PRIM_LIST of csrc/lower/lower.h: name -> arity."""
    with open(os.path.join(ROOT, "csrc", "lower", "lower.h")) as f:
        h = f.read()
    block = h[h.index("#define STAX_PRIM_LIST"):]
    block = block[:block.index("\n/*")]
    return {n: int(a) for n, a in re.findall(r'X\(\w+, "(\w+)", (\d)\)',
                                             block)}


def _operands(name, arity):
    if name == "philox":
        return [("int64", (4,))] * 3
    if name in ("bitand", "bitor", "bitxor", "bitnot"):
        return [("int32", (4,))] * arity
    if name in ("and", "or", "xor", "not"):
        return [("bool", (4,))] * arity
    if name == "where":
        return [("bool", (4,)), ("float32", (4,)), ("float32", (4,))]
    return [("float32", (4,))] * arity


def test_supported_prims_are_ir_prims():
    sup = C.nvrtc_supported_prims()
    assert isinstance(sup, tuple) and "philox" in sup
    assert set(sup) <= set(_ir_prims())


@needs_nvrtc
def test_every_supported_prim_renders_and_compiles():
    """supports_op true => valid CUDA C; false => a clear
    NotImplementedError, never a compile error in NVRTC."""
    sup = set(C.nvrtc_supported_prims())
    for name, arity in sorted(_ir_prims().items()):
        expr = "(%s %s)" % (name, " ".join("abc"[:arity]))
        ops = _operands(name, arity)
        if name not in sup:
            with pytest.raises(NotImplementedError):
                C.nvrtc_render_expr(expr, ops)
            continue
        k = C.nvrtc_render_expr(expr, ops, name="p_" + name)
        assert ".entry p_" + name in C.nvrtc_compile(k.source, k.name), name


@pytest.mark.parametrize("expr", ["(bitand a b)", "(bitnot a)"])
def test_bitwise_on_floats_is_not_implemented_not_invalid_cuda(expr):
    with pytest.raises(NotImplementedError, match="float32"):
        C.nvrtc_render_expr(expr, [("float32", (4,))] * 2)
