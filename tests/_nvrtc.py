"""Shared by tests/test_nvrtc*.py and tests/gpu/: programs lowered exactly as
tp.compile lowers them, with every kernel of the loop IR handed to the NVRTC
back end (_C.nvrtc_render) instead of the inputs' device's (LLVM on cpu)."""
import numpy as np

import tensorplay as tp
from tensorplay import _C as C


def nvrtc_compile(fn, *args, compile=True, strict=True, dynamic=False,
                  run_on_gpu=False):
    """tp.compile(fn) with a back end that lowers each captured graph with
    the lower room (trace, front-end passes, op-level graph, lowering: what
    the 'stax' back end gets) and compiles every kernel with NVRTC. Calls
    the compiled function once on args. Returns (compiled function, list of
    the CompiledPrograms made): the function runs those programs on the GPU
    if run_on_gpu, else eagerly."""
    progs = []

    def nvrtc(gm, example_inputs, **options):
        p = C.nvrtc_render(gm, example_inputs, compile=compile,
                           strict=strict, dynamic=dynamic)
        progs.append(p)
        return p if run_on_gpu else gm

    cfg = tp.compiler.config
    old = cfg.accumulated_cache_size_limit
    cfg.accumulated_cache_size_limit = 1 << 30   # many programs, one helper
    try:
        cf = tp.compile(fn, backend=nvrtc, strict_native=True)
        cf(*args)
    finally:
        cfg.accumulated_cache_size_limit = old
    return cf, progs


def nvrtc_program(fn, *args):
    """The one CompiledProgram nvrtc_compile makes for fn(*args), checked to
    be the NVRTC back end's with nothing run eagerly."""
    _, progs = nvrtc_compile(fn, *args)
    assert len(progs) == 1
    p = progs[0]
    assert p.backend == "nvrtc" and p.fallbacks == 0
    return p


def nvrtc_kernels(fn, *args, **kw):
    """The kernels (name, source = CUDA C, loop_ir, bytes_read,
    bytes_written) of every program nvrtc_compile makes for fn(*args)."""
    _, progs = nvrtc_compile(fn, *args, **kw)
    assert progs, "tp.compile lowered nothing"
    for p in progs:
        assert p.backend == "nvrtc"
        assert p.fallbacks == 0
    return [k for p in progs for k in p.kernels]


def out_ctype(source):
    """C type of the first buffer the kernel writes (its signature)."""
    sig = source[source.index('extern "C" __global__'):]
    sig = sig[sig.index("(") + 1:sig.index(")")]
    for arg in sig.split(", "):
        if arg.startswith("const ") or "*" not in arg:
            continue
        return arg[:arg.index("*")].strip()
    return None


CTYPE = {"bool": "unsigned char", "uint8": "unsigned char",
         "int8": "signed char", "int16": "short", "int32": "int",
         "int64": "long long", "float16": "unsigned short",
         "float32": "float", "float64": "double"}


def dtype_name(t):
    return str(t.dtype).split(".")[-1]


# ------------------------------------------------------------ programs

def program_cases():
    """(label, fn, args, tolerance) over pointwise chains, broadcasting,
    views and transposes, reductions, normalizations, random ops and every
    dtype class; tolerance is for the GPU's result against the CPU's
    (0: exact; 'bits': random words, bit-identical to eager)."""
    F = tp.nn.functional
    rng = np.random.default_rng(0)

    def T(*s, dt=np.float32):
        return tp.from_numpy(rng.standard_normal(s).astype(dt))

    x, w, v = T(64, 128), T(64, 128), T(128)
    xt = T(128, 64).t()                           # strides (1, 64)
    x64, x16 = T(16, 40, dt=np.float64), T(16, 40, dt=np.float16)
    xi = tp.from_numpy(rng.integers(-50, 50, (16, 40)))
    xi32 = tp.from_numpy(rng.integers(1, 50, (16, 40)).astype(np.int32))
    b = tp.from_numpy(rng.random((16, 40)) > 0.5)
    ib = tp.from_numpy(rng.integers(-3, 4, (16, 40)))
    ie = tp.from_numpy(rng.integers(-3, 41, (16, 40)))
    idx = tp.from_numpy(np.array([3, 0, 5, 63, 1, 2]))   # torch's index_select does not wrap -1
    gidx = tp.from_numpy(rng.integers(0, 40, (16, 7)))
    emb = T(50, 12)
    tok = tp.from_numpy(rng.integers(0, 50, (4, 9)))
    big = T(33, 3000)
    bign = T(33, 3000)
    bign.numpy()[5, 7] = np.nan                   # a row with a NaN
    c3 = T(3, 50, 70, dt=np.float64)
    bb = tp.from_numpy(rng.standard_normal((40, 50)) > 1.5)
    W, bias = T(24, 128), T(24)
    f32, f64, f16 = 1e-5, 1e-12, 1e-2
    return [
        ("Example 1.1", lambda x, w: (tp.relu(x + w) * 2).sum(-1), (x, w),
         f32),
        ("pointwise chain", lambda x, w: tp.tanh(tp.exp(-x.abs()) * w)
         + tp.sigmoid(x) / (1 + w * w), (x, w), f32),
        ("broadcast a row", lambda x, v: x * v + 1, (x, v), f32),
        ("broadcast a column", lambda x: x - x[:, :1], (x,), f32),
        ("transposed input", lambda a, x: a * 2 + x, (xt, x), f32),
        ("permute and reshape", lambda x: (x.reshape(8, 8, 128)
                                           .permute(2, 0, 1)
                                           .reshape(128, 64) * 3), (x,), f32),
        ("strided slice", lambda x: x[::2, 1::3] - 1, (x,), f32),
        ("expand", lambda v: v.unsqueeze(0).expand(5, 128) * 2, (v,), f32),
        ("transpose of a result", lambda x, w: (x + w).t() * 2, (x, w),
         f32),
        ("cat", lambda x: tp.cat([x, x * 2], 0) + 1, (x,), f32),
        ("stack", lambda x, w: tp.stack([x, w], 1) * 2, (x, w), f32),
        ("pad", lambda x: F.pad(x, (1, 2)) * 2, (x,), f32),
        ("index_select", lambda x, i: x.index_select(0, i) * 2, (x, idx),
         f32),
        ("gather", lambda x, i: tp.gather(x, 1, i) + 1, (x64, gidx), f64),
        ("embedding", lambda t, e: F.embedding(t, e) * 2, (tok, emb), f32),
        ("where and compare", lambda x, w: tp.where(x > w, x.exp(),
                                                    w.tanh()), (x, w), f32),
        ("float64 chain",
         lambda a: (a * a - 1).sqrt().nan_to_num(0.0, 1.0, -1.0) + a,
         (x64,), f64),
        ("float16 chain", lambda a: (a * 0.5 + 1).relu() * a, (x16,), f16),
        ("int64 arithmetic", lambda a: a * 3 - a // 7 + a % 5, (xi,), 0),
        ("int32 true division", lambda a: a / 3, (xi32,), f32),
        ("int and float promote", lambda a, c: a + c, (xi32, x64), f64),
        ("bitwise int32", lambda a: (a & 12) ^ ~a, (xi32,), 0),
        ("integer pow, negative exponents wrap to 0 / +-1",
         lambda a, e: a ** e, (ib, ie), 0),
        ("bool logic", lambda m, a: m & (a > 0) | ~m, (b, x64), 0),
        ("cast to int", lambda a: (a * 10).to(tp.int32), (x64,), 0),
        ("sum over dims, keepdim", lambda a: a.sum((0, 2), keepdim=True),
         (x.reshape(8, 8, 128),), f32),
        ("sum of int32 is int64", lambda a: (a * 3).sum(), (xi32,), 0),
        ("mean of a transposed compare",
         lambda a: (a.t() > 0).float().mean(0), (x,), f32),
        ("mean float16", lambda a: a.mean(-1), (x16,), f16),
        ("max values and indices", lambda a: a.max(-1), (x,), 0),
        ("amax over dim 0", lambda a: a.amax(0), (x,), 0),
        ("argmax over rows of 3000", lambda a: a.argmax(-1), (big,), 0),
        ("argmin of all", lambda a: a.argmin(), (x,), 0),
        ("argmax and amax with a NaN (NaN is the max)",
         lambda a: (a.argmax(-1), a.amax(-1)), (bign,), 0),
        ("mean of squares over dims (0, 2), float64",
         lambda a: (a * a).mean((0, 2)), (c3,), f64),
        ("bool: all(not a) over rows", lambda m: (~m).all(-1), (bb,), 0),
        ("var", lambda a: a.var(-1), (x,), f32),
        ("var float64 dim 0", lambda a: a.var(0), (x64,), f64),
        ("std", lambda a: a.std(-1), (x,), f32),
        ("prod", lambda a: (a * 0.1 + 1).prod(-1), (x64,), f64),
        ("any and all", lambda a: ((a > 2).any(-1), (a > -3).all(0)), (x,),
         0),
        ("logsumexp", lambda a: tp.logsumexp(a, -1), (x,), f32),
        ("softmax", lambda a: F.softmax(a, -1), (x,), f32),
        ("softmax over rows of 3000", lambda a: F.softmax(a * 4, -1),
         (big,), f32),
        ("log_softmax dim 0", lambda a: F.log_softmax(a, 0), (x64,), f64),
        ("layer_norm * w", lambda a, w: F.layer_norm(a, (128,)) * w, (x, w),
         1e-4),
        ("layer_norm with weight and bias",
         lambda a, g, c: F.layer_norm(a, (128,), g, c), (x, v, v), 1e-4),
        ("linear + relu", lambda a, W, c: F.relu(F.linear(a, W, c)),
         (x, W, bias), 1e-4),
        ("dropout", lambda a: F.dropout(a, 0.5, training=True), (x,),
         "bits"),
        ("rand_like", lambda a: tp.rand_like(a), (x,), "bits"),
        ("randn_like", lambda a: tp.randn_like(a), (x,), "bits"),
        # the same Philox words; CUDA's double log/sqrt/cos may differ from
        # the host libm by an ulp
        ("randn_like float64", lambda a: tp.randn_like(a) + 1, (x64,),
         1e-15),
    ]


# ------------------------------------------------- the op table's rows

OP_DTYPES = ["float32", "float64", "float16", "int32", "int64", "bool"]
# arguments a schema cannot give (both bounds None is an error in PyTorch)
OP_KWARGS = {"clamp": dict(min=-0.5, max=0.5), "clip": dict(min=-0.5, max=0.5),
             "nan_to_num": dict(nan=0.0, posinf=1.0, neginf=-1.0),
             "to": dict(dtype=tp.float64), "_to_copy": dict(dtype=tp.float64)}


def _params(schema):
    out = []
    for p in schema.strip("()").split(", "):
        if p == "*":
            continue
        typ, _, rest = p.partition(" ")
        name, eq, _ = rest.partition("=")
        out.append((typ, name, bool(eq)))
    return out


def _tensor(dt, shape, seed):
    rng = np.random.default_rng(seed)
    if dt == "bool":
        a = rng.random(shape) > 0.5
    elif dt.startswith("int"):
        a = rng.integers(1, 9, shape).astype(dt)   # no division by zero
    elif dt == "bfloat16":          # no NumPy type: float32 values, rounded
        return tp.from_numpy((rng.standard_normal(shape) * 2).astype("float32")).bfloat16()
    else:
        a = (rng.standard_normal(shape) * 2).astype(dt)
    return tp.from_numpy(a)


def pointwise_op_case(row, dt):
    """A chain around the op of a pointwise row of the op table: where(m,
    a, a2) feeding the op (its other tensor operands broadcast, the first
    one transposed), the result and a comparison of it returned. (fn,
    args), or None if the op has no Python entry point."""
    name = row["name"]
    F = tp.nn.functional
    inplace = name.endswith("_") and not name.startswith("__")
    params = _params(row["schema"])
    kw = dict(OP_KWARGS.get(name.rstrip("_"), {}))
    tensors = [p for p in params if p[0] == "Tensor"][:max(row["arity"], 1)]
    for typ, pname, has_default in params[len(tensors):]:
        if not has_default and pname not in kw:
            kw[pname] = 2 if typ == "int" else 0.5
    if inplace:
        if not hasattr(tp.Tensor, name):
            return None

        def call(t, *rest):
            t = t.clone()
            getattr(t, name)(*rest, **kw)
            return t
    else:
        fn = getattr(tp, name, None) or getattr(F, name, None)
        if fn is None and hasattr(tp.Tensor, name):
            def fn(t, *rest, **k):
                return getattr(t, name)(*rest, **k)
        if fn is None:
            return None

        def call(*ts):
            return fn(*ts, **kw)
    shapes = [(10, 6), (6,), (10, 1)]
    args = []
    for i, (typ, pname, _) in enumerate(tensors):
        d = "bool" if pname in ("condition", "mask") else dt
        t = _tensor(d, shapes[i % 3] if i else (6, 10), i)
        args.append(t.t() if i == 0 else t)
    mask = _tensor("bool", (10, 6), 9)
    alt = _tensor(args[0].dtype and dtype_name(args[0]), (6,), 8)

    def f(m, a2, *ts):
        r = call(tp.where(m, ts[0], a2), *ts[1:])
        return r, r == r
    return f, (mask, alt, *args)


def pointwise_rows():
    return [r for r in C._op_table() if r["kind"] == "pointwise"]


def pointwise_batch_case(rows, dt):
    """One function computing pointwise_op_case of every row in rows that
    eager accepts at dtype dt (the others are skipped): (fn, args, names)."""
    parts, names, args = [], [], []
    for r in rows:
        c = pointwise_op_case(r, dt)
        if c is None:
            continue
        f, a = c
        try:
            f(*a)
        except Exception:  # noqa: BLE001 - eager refuses this dtype
            continue
        if not args:
            args = [a[0]]             # the mask, shared
        parts.append((f, len(a) - 1))
        args.extend(a[1:])
        names.append(r["name"])

    def fn(m, *ts):
        out, i = [], 0
        for f, n in parts:
            out.extend(f(m, *ts[i:i + n]))
            i += n
        return tuple(out)
    return fn, tuple(args), names
