"""The per-op harness: every op of the op table over generated cases
(broadcasting, non-contiguous, zero-size, 0-d, NaN/inf, every dtype),
against NumPy and, where `import torch` works, against PyTorch.
Bad input raises torch's exception type with a torch-like message."""
import itertools
import math
import warnings

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.functional as F

try:
    import torch
    import torch.nn.functional as TF
except Exception:  # noqa: BLE001
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")

DTYPES = ["float32", "float64", "float16", "int64", "int32", "int16", "int8",
          "uint8", "bool"]
FLOATS = ["float32", "float64", "float16"]
TOL = {"float16": (2e-3, 2e-3), "float32": (2e-5, 1e-5), "float64": (1e-10, 1e-10)}


def tp_dtype(name):
    return getattr(tp, name)


def gen(shape, dtype, seed=0, special=False):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype in ("uint8",):
        return rng.integers(0, 20, shape).astype(dtype)
    if dtype.startswith("int"):
        return rng.integers(-20, 20, shape).astype(dtype)
    a = (rng.standard_normal(shape) * 2).astype(dtype)
    if special and a.size >= 4:
        flat = a.reshape(-1)
        flat[0], flat[1], flat[2] = np.nan, np.inf, -np.inf
    return a


def to_tp(a, layout="contig"):
    if layout == "contig":
        return tp.tensor(a)
    if layout == "transposed" and a.ndim >= 2:
        return tp.tensor(np.ascontiguousarray(a.T)).t() if a.ndim == 2 else tp.tensor(a)
    if layout == "strided" and a.ndim >= 1:
        big = np.repeat(a, 2, axis=-1)
        return tp.from_numpy(big[..., ::2])
    return tp.tensor(a)


def to_torch(a):
    return torch.from_numpy(np.array(a, copy=True))


def tnp(t):
    return np.asarray(t.numpy())


def check(res, ref, what, dtype_check=True):
    if isinstance(ref, (tuple, list)):
        assert len(res) == len(ref), what
        for r1, r2 in zip(res, ref):
            check(r1, r2, what, dtype_check)
        return
    if torch is not None and isinstance(ref, torch.Tensor):
        if dtype_check:
            assert str(res.dtype).split(".")[-1] == str(ref.dtype).split(".")[-1], \
                f"{what}: dtype {res.dtype} vs torch {ref.dtype}"
        ref = ref.numpy()
    r = tnp(res)
    ref = np.asarray(ref)
    assert r.shape == ref.shape, f"{what}: shape {r.shape} vs {ref.shape}"
    if r.dtype.kind == "f" or ref.dtype.kind == "f":
        rt, at = TOL.get(np.dtype(r.dtype).name, (1e-5, 1e-6))
        np.testing.assert_allclose(r.astype(np.float64), ref.astype(np.float64),
                                   rtol=rt * 10, atol=at * 10, equal_nan=True,
                                   err_msg=what)
    else:
        np.testing.assert_array_equal(r, ref, err_msg=what)


def both(tfn, pfn, what):
    """Run torch and tensorplay; both raise the same exception type, or
    both agree."""
    try:
        ref = tfn()
    except Exception as e:  # noqa: BLE001
        with pytest.raises(Exception) as ei:
            pfn()
        assert isinstance(ei.value, type(e)) or type(ei.value).__name__ == type(e).__name__, \
            f"{what}: tensorplay raised {type(ei.value).__name__}({ei.value}), torch {type(e).__name__}({e})"
        return
    check(pfn(), ref, what)


SHAPES = [(), (0,), (5,), (3, 4), (2, 3, 4)]
LAYOUTS = ["contig", "transposed", "strided"]

UNARY_FLOAT = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt",
               "rsqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh", "asin",
               "acos", "atan", "sigmoid", "erf", "erfc", "reciprocal"]
UNARY_ANY = ["neg", "abs", "sign", "floor", "ceil", "round", "trunc", "square",
             "isnan", "isinf", "isfinite", "logical_not", "relu"]


@needs_torch
@pytest.mark.parametrize("name", UNARY_FLOAT + UNARY_ANY + ["frac"])
def test_unary_vs_torch(name):
    for dt, shape, layout in itertools.product(DTYPES, SHAPES, LAYOUTS):
        if name == "frac" and dt not in FLOATS:
            continue
        if dt == "bool" and name in ("neg", "sign", "abs", "square", "relu",
                                     "floor", "ceil", "round", "trunc"):
            continue
        if dt == "float16" and name in ("erfc",):
            continue
        a = gen(shape, dt, special=dt in FLOATS)
        x = to_tp(a, layout)
        tx = to_torch(np.asarray(tnp(x)))
        both(lambda: getattr(torch, name)(tx), lambda: getattr(tp, name)(x),
             f"{name} {dt} {shape} {layout}")
        if hasattr(x, name):
            both(lambda: getattr(tx, name)(), lambda: getattr(x, name)(),
                 f"x.{name}() {dt}")


BINARY = ["add", "sub", "mul", "div", "floor_divide", "remainder", "fmod",
          "pow", "atan2", "maximum", "minimum", "eq", "ne", "lt", "le", "gt",
          "ge", "logical_and", "logical_or", "logical_xor", "bitwise_and",
          "bitwise_or", "bitwise_xor"]
BSHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (3,)),
           ((0, 4), (1, 4)), ((5,), ())]


def _binary_ok(name, da, db):
    isf = da in FLOATS or db in FLOATS
    if name.startswith("bitwise") and isf:
        return False
    if name == "sub" and da == "bool" and db == "bool":
        return False
    if name == "atan2" and not isf:
        return True
    return True


@needs_torch
@pytest.mark.parametrize("name", BINARY)
def test_binary_vs_torch(name):
    pairs = [("float32", "float32"), ("float32", "float64"), ("int64", "float32"),
             ("int32", "int64"), ("float16", "float16"), ("uint8", "int8"),
             ("bool", "int32"), ("bool", "bool"), ("int64", "int64")]
    for (da, db), (sa, sb) in itertools.product(pairs, BSHAPES):
        if not _binary_ok(name, da, db):
            continue
        a, b = gen(sa, da, 1, True), gen(sb, db, 2)
        if name in ("floor_divide", "remainder", "fmod", "div") and b.dtype.kind in "iub":
            b = np.where(b == 0, 3, b).astype(b.dtype)
        x, y = tp.tensor(a), tp.tensor(b)
        both(lambda: getattr(torch, name)(to_torch(a), to_torch(b)),
             lambda: getattr(tp, name)(x, y), f"{name} {da}{sa} {db}{sb}")
    # scalars on both sides, Python operators
    a = gen((3, 4), "float32", 3)
    x, tx = tp.tensor(a), to_torch(a)
    for s in (2, 2.5, True):
        if name.startswith("bitwise") or (name.startswith("logical") and False):
            continue
        both(lambda: getattr(torch, name)(tx, s), lambda: getattr(tp, name)(x, s),
             f"{name} scalar {s}")
    ai = gen((3, 4), "int32", 4)
    xi, txi = tp.tensor(ai), to_torch(ai)
    for s in (3, 2.5):
        if name.startswith("bitwise") and isinstance(s, float):
            continue
        both(lambda: getattr(torch, name)(txi, s), lambda: getattr(tp, name)(xi, s),
             f"{name} int scalar {s}")


@needs_torch
def test_operators_and_reflected():
    a = gen((3, 4), "float32", 5)
    b = np.abs(gen((4,), "float32", 6)) + 0.5
    x, y, tx, ty = tp.tensor(a), tp.tensor(b), to_torch(a), to_torch(b)
    import operator as op
    for f in (op.add, op.sub, op.mul, op.truediv, op.floordiv, op.mod, op.pow,
              op.lt, op.le, op.eq, op.ne, op.gt, op.ge):
        check(f(x, y), f(tx, ty), f.__name__)
        check(f(x, 2), f(tx, 2), f.__name__ + " scalar")
        check(f(3, y), f(3, ty), f.__name__ + " reflected")
    check(-x, -tx, "neg")
    check(abs(x), abs(tx), "abs")
    m = tp.tensor(gen((3, 4), "int64", 7))
    tm = to_torch(tnp(m))
    check(~m, ~tm, "invert")
    check(m & 3, tm & 3, "and")
    check(m | 3, tm | 3, "or")
    check(m ^ 3, tm ^ 3, "xor")
    check(x @ tp.tensor(a.T.copy()), tx @ to_torch(a.T.copy()), "matmul")


def test_inplace_bumps_version_and_views():
    x = tp.zeros(3, 4)
    v = x.select(0, 0)
    v0 = x._version
    x += 1
    assert x._version == v0 + 1
    v.mul_(3)
    assert x._version == v0 + 2
    np.testing.assert_array_equal(tnp(x)[0], [3, 3, 3, 3])
    np.testing.assert_array_equal(tnp(x)[1], [1, 1, 1, 1])
    x.relu_()
    x.clamp_(max=2)
    assert tnp(x).max() == 2
    x.add_(tp.ones(4), alpha=2)
    np.testing.assert_array_equal(tnp(x)[1], [3, 3, 3, 3])
    xi = tp.ones(3, dtype=tp.int64)
    with pytest.raises(RuntimeError, match="result type Float can't be cast"):
        xi.div_(2)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        tp.ones(3).add_(tp.ones(2, 3))


def test_int_semantics():
    x = tp.tensor([-7, 7, 5])
    assert tnp(x / 2).dtype == np.float32
    np.testing.assert_array_equal(tnp(x // 2), [-4, 3, 2])
    np.testing.assert_array_equal(tnp(x % 3), [2, 1, 2])
    np.testing.assert_array_equal(tnp(tp.div(x, 2, rounding_mode="trunc")), [-3, 3, 2])
    np.testing.assert_array_equal(tnp(tp.div(x, 2, rounding_mode="floor")), [-4, 3, 2])
    assert str((x > 0).dtype).endswith("bool")
    assert str(x.sum().dtype).endswith("int64")
    assert str(tp.tensor([1, 2], dtype=tp.int8).sum().dtype).endswith("int64")
    with pytest.raises(RuntimeError, match="mean\\(\\): could not infer output dtype"):
        x.mean()


def test_nan_propagation():
    x = tp.tensor([float("nan"), -1.0, 2.0])
    r = tnp(tp.relu(x))
    assert np.isnan(r[0]) and r[1] == 0 and r[2] == 2
    assert np.isnan(tnp(tp.maximum(x, tp.zeros(3)))[0])
    assert np.isnan(tnp(tp.minimum(x, tp.zeros(3)))[0])
    assert np.isnan(tnp(x.clamp(0, 1))[0])
    assert np.isnan(tnp(x.max()))
    assert int(tnp(x.argmax())) == 0


REDS = ["sum", "mean", "prod", "amax", "amin", "var", "std", "logsumexp",
        "norm", "all", "any", "argmax", "argmin"]


@needs_torch
@pytest.mark.parametrize("name", REDS)
def test_reductions_vs_torch(name):
    for dt, shape, layout in itertools.product(["float32", "float64", "float16", "int64", "int32", "uint8", "bool"],
                                               [(5,), (3, 4), (2, 3, 4)], LAYOUTS):
        if name in ("mean", "var", "std", "logsumexp", "norm") and dt not in FLOATS:
            continue
        if name in ("argmax", "argmin", "amax", "amin") and dt == "bool":
            continue
        a = gen(shape, dt, 11)
        x = to_tp(a, layout)
        ta = to_torch(tnp(x))
        f, tf = getattr(tp, name), getattr(torch, name)
        dims = [None, 0, -1, (0, -1)] if len(shape) > 1 else [None, 0]
        for d in dims:
            for keep in (False, True):
                if name in ("argmax", "argmin") and isinstance(d, tuple):
                    continue
                if name == "logsumexp" and d is None:
                    continue
                if name == "norm":
                    if d is None:
                        both(lambda: tf(ta), lambda: f(x), f"norm {dt}")
                    else:
                        both(lambda: tf(ta, 2, d, keep), lambda: f(x, 2, d, keep),
                             f"norm {dt} {d} {keep}")
                elif d is None:
                    if keep and name not in ("argmax", "argmin"):
                        continue
                    both(lambda: tf(ta), lambda: f(x), f"{name} {dt} {shape}")
                else:
                    both(lambda: tf(ta, d, keepdim=keep), lambda: f(x, d, keepdim=keep),
                         f"{name} {dt} {shape} {layout} dim={d} keep={keep}")


@needs_torch
def test_reduction_variants():
    a = gen((3, 4), "float32", 12)
    x, t = tp.tensor(a), to_torch(a)
    r = tp.max(x, 1)
    tr = torch.max(t, 1)
    check(r.values, tr.values, "max values")
    check(r.indices, tr.indices, "max indices")
    assert type(r).__name__ == "max"
    check(tp.min(x, 0, keepdim=True)[0], torch.min(t, 0, keepdim=True)[0], "min")
    check(tp.var(x, 0, unbiased=False), torch.var(t, 0, unbiased=False), "var unbiased")
    check(tp.var(x, 1, correction=0), torch.var(t, 1, correction=0), "var corr")
    check(tp.var_mean(x, 1), torch.var_mean(t, 1), "var_mean")
    check(tp.std_mean(x), torch.std_mean(t), "std_mean")
    check(tp.cumsum(x, 1), torch.cumsum(t, 1), "cumsum")
    check(tp.sum(x, dtype=tp.float64), torch.sum(t, dtype=torch.float64), "sum dtype")
    check(tp.argmax(tp.tensor([1.0, 3.0, 3.0])), torch.argmax(torch.tensor([1.0, 3.0, 3.0])), "ties")
    check(x.sum(1, True), t.sum(1, True), "method sum")


@needs_torch
def test_activations_vs_torch():
    for dt in FLOATS:
        a = gen((4, 5), dt, 13, special=True)
        a[np.isinf(a)] = 30.0
        x, t = tp.tensor(a), to_torch(a)
        for name, kw in [("relu", {}), ("relu6", {}), ("leaky_relu", {"negative_slope": 0.2}),
                         ("elu", {"alpha": 0.7}), ("selu", {}), ("celu", {"alpha": 1.3}),
                         ("gelu", {}), ("gelu", {"approximate": "tanh"}), ("silu", {}),
                         ("mish", {}), ("softplus", {"beta": 2.0}),
                         ("hardtanh", {"min_val": -0.5, "max_val": 0.5}),
                         ("hardsigmoid", {}), ("hardswish", {}), ("sigmoid", {}),
                         ("tanh", {})]:
            if dt == "float16" and name in ("mish", "gelu", "selu", "elu", "celu", "softplus", "silu"):
                tol_a = a.astype(np.float32)
                ref = getattr(TF, name)(to_torch(tol_a), **kw).to(torch.float16)
            else:
                ref = getattr(TF, name)(t, **kw)
            check(getattr(F, name)(x, **kw), ref, f"F.{name} {dt} {kw}")


@needs_torch
def test_composites_vs_torch():
    a = gen((4, 8), "float32", 14)
    x, t = tp.tensor(a), to_torch(a)
    w, b = gen((8,), "float32", 15), gen((8,), "float32", 16)
    for d in (0, 1, -1):
        check(F.softmax(x, d), TF.softmax(t, d), "softmax")
        check(F.log_softmax(x, d), TF.log_softmax(t, d), "log_softmax")
    check(F.layer_norm(x, (8,), tp.tensor(w), tp.tensor(b)),
          TF.layer_norm(t, (8,), to_torch(w), to_torch(b)), "layer_norm")
    out, mean, rstd = tp.ops.native_layer_norm.default(x, [8], tp.tensor(w), tp.tensor(b), 1e-5)
    tout, tmean, trstd = torch.ops.aten.native_layer_norm.default(t, [8], to_torch(w), to_torch(b), 1e-5)
    check((out, mean, rstd), (tout, tmean, trstd), "native_layer_norm")
    y = gen((4, 8), "float32", 17)
    for name in ("mse_loss", "l1_loss", "smooth_l1_loss"):
        for red in ("mean", "sum", "none"):
            check(getattr(F, name)(x, tp.tensor(y), reduction=red),
                  getattr(TF, name)(t, to_torch(y), reduction=red), f"{name} {red}")
    tgt = np.array([1, 0, 7, 3])
    for red in ("mean", "sum", "none"):
        check(F.cross_entropy(x, tp.tensor(tgt), reduction=red),
              TF.cross_entropy(t, to_torch(tgt), reduction=red), f"ce {red}")
        check(F.nll_loss(F.log_softmax(x, 1), tp.tensor(tgt), reduction=red),
              TF.nll_loss(TF.log_softmax(t, 1), to_torch(tgt), reduction=red), f"nll {red}")
    wt = np.abs(w) + 0.1
    check(F.cross_entropy(x, tp.tensor(tgt), weight=tp.tensor(wt), label_smoothing=0.1),
          TF.cross_entropy(t, to_torch(tgt), weight=to_torch(wt), label_smoothing=0.1), "ce ls w")
    tgt2 = np.array([1, -100, 7, 3])
    check(F.cross_entropy(x, tp.tensor(tgt2)), TF.cross_entropy(t, to_torch(tgt2)), "ce ignore")
    yb = (gen((4, 8), "float32", 18) > 0).astype(np.float32)
    check(F.binary_cross_entropy_with_logits(x, tp.tensor(yb)),
          TF.binary_cross_entropy_with_logits(t, to_torch(yb)), "bce")
    check(F.binary_cross_entropy_with_logits(x, tp.tensor(yb), pos_weight=tp.tensor(wt)),
          TF.binary_cross_entropy_with_logits(t, to_torch(yb), pos_weight=to_torch(wt)), "bce pw")
    for mode in ("constant", "reflect", "replicate", "circular"):
        check(F.pad(x, (1, 2), mode=mode), TF.pad(t, (1, 2), mode=mode), f"pad {mode}")
    check(F.pad(x, (1, -2, 0, 1), value=3.0), TF.pad(t, (1, -2, 0, 1), value=3.0), "pad neg")
    wl = gen((3, 8), "float32", 19)
    bl = gen((3,), "float32", 20)
    check(F.linear(x, tp.tensor(wl), tp.tensor(bl)), TF.linear(t, to_torch(wl), to_torch(bl)), "linear")
    emb = gen((10, 3), "float32", 21)
    idx = np.array([[1, 2], [9, 0]])
    check(F.embedding(tp.tensor(idx), tp.tensor(emb)), TF.embedding(to_torch(idx), to_torch(emb)), "embedding")
    # batch norm, training updates running stats
    xb = gen((6, 3), "float32", 22)
    rm, rv = tp.zeros(3), tp.ones(3)
    trm, trv = torch.zeros(3), torch.ones(3)
    check(F.batch_norm(tp.tensor(xb), rm, rv, training=True),
          TF.batch_norm(to_torch(xb), trm, trv, training=True), "bn train")
    check(rm, trm, "running mean")
    check(rv, trv, "running var")
    check(F.batch_norm(tp.tensor(xb), rm, rv), TF.batch_norm(to_torch(xb), trm, trv), "bn eval")


@needs_torch
def test_other_ops_vs_torch():
    a, b = gen((2, 3), "float32", 23), gen((2, 5), "float32", 24)
    x, y, t, u = tp.tensor(a), tp.tensor(b), to_torch(a), to_torch(b)
    check(tp.cat([x, y], 1), torch.cat([t, u], 1), "cat")
    check(tp.cat((x, x), 0), torch.cat((t, t), 0), "cat0")
    check(tp.stack([x, x], 1), torch.stack([t, t], 1), "stack")
    idx = np.array([2, 0, 2])
    check(tp.index_select(x, 1, tp.tensor(idx)), torch.index_select(t, 1, to_torch(idx)), "index_select")
    gi = np.array([[0, 2], [1, 1]])
    check(tp.gather(x, 1, tp.tensor(gi)), torch.gather(t, 1, to_torch(gi)), "gather")
    m = a > 0
    check(x.masked_fill(tp.tensor(m), -1.0), t.masked_fill(to_torch(m), -1.0), "masked_fill")
    check(tp.where(tp.tensor(m), x, 0.0), torch.where(to_torch(m), t, 0.0), "where")
    check(tp.where(tp.tensor(m), x, tp.tensor(b[:, :3].copy())),
          torch.where(to_torch(m), t, to_torch(b[:, :3].copy())), "where t")
    check(tp.lerp(x, tp.tensor(b[:, :3].copy()), 0.3), torch.lerp(t, to_torch(b[:, :3].copy()), 0.3), "lerp")
    check(tp.clamp(x, -0.5, 0.5), torch.clamp(t, -0.5, 0.5), "clamp")
    check(tp.clamp(x, min=0.1), torch.clamp(t, min=0.1), "clamp min")
    check(tp.clamp_max(x, 0.1), torch.clamp_max(t, 0.1), "clamp_max")
    s = gen((3,), "float32", 25)
    check(tp.select_scatter(x, tp.tensor(s), 0, 1), torch.select_scatter(t, to_torch(s), 0, 1), "select_scatter")
    s2 = gen((2, 2), "float32", 26)
    check(tp.slice_scatter(x, tp.tensor(s2), 1, 0, 3, 2), torch.slice_scatter(t, to_torch(s2), 1, 0, 3, 2), "slice_scatter")
    check(tp.as_strided_scatter(x, tp.tensor(s2), (2, 2), (1, 2)),
          torch.as_strided_scatter(t, to_torch(s2), (2, 2), (1, 2)), "as_strided_scatter")
    n = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    check(tp.nan_to_num(tp.tensor(n)), torch.nan_to_num(to_torch(n)), "nan_to_num")
    A, B = gen((2, 3, 4), "float32", 27), gen((2, 4, 5), "float32", 28)
    check(tp.bmm(tp.tensor(A), tp.tensor(B)), torch.bmm(to_torch(A), to_torch(B)), "bmm")
    check(tp.matmul(tp.tensor(A), tp.tensor(B[0].copy())), torch.matmul(to_torch(A), to_torch(B[0].copy())), "matmul bcast")
    check(tp.mm(tp.tensor(A[0].copy()), tp.tensor(B[0].copy())), torch.mm(to_torch(A[0].copy()), to_torch(B[0].copy())), "mm")


def test_numpy_reference_without_torch():
    """The same checks against NumPy only (run even without torch)."""
    a = gen((3, 4), "float32", 30, special=True)
    x = tp.tensor(a)
    with np.errstate(all="ignore"):
        for name, ref in [("exp", np.exp), ("log1p", np.log1p), ("sqrt", np.sqrt),
                          ("abs", np.abs), ("tanh", np.tanh), ("floor", np.floor)]:
            np.testing.assert_allclose(tnp(getattr(tp, name)(x)), ref(a), rtol=1e-6,
                                       equal_nan=True)
    np.testing.assert_allclose(tnp((x * 2 + 1).sum(1)), (a * 2 + 1).sum(1), rtol=1e-5,
                               equal_nan=True)


# ------------------------------------------------------------- bad input

def test_bad_input_messages():
    with pytest.raises(RuntimeError, match=r"The size of tensor a \(3\) must match the size "
                       r"of tensor b \(4\) at non-singleton dimension 1"):
        tp.ones(2, 3) + tp.ones(2, 4)
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range "
                       r"of \[-2, 1\], but got 2\)"):
        tp.ones(2, 3).sum(2)
    with pytest.raises(TypeError, match="must be Tensor, not str"):
        tp.exp("x")
    with pytest.raises(TypeError):
        tp.add(tp.ones(2), "a")
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        tp.sum(tp.ones(2), dimm=0)
    with pytest.raises(RuntimeError, match="not implemented for 'Float'"):
        tp.ones(2) & tp.ones(2)
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool"):
        tp.ones(2, dtype=tp.bool) - tp.ones(2, dtype=tp.bool)
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 1"):
        tp.cat([tp.ones(2, 3), tp.ones(3, 3)], 1)
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        tp.ones(2, 3) @ tp.ones(4, 5)
    with pytest.raises(RuntimeError, match="where expected condition to be a boolean"):
        tp.where(tp.ones(2), tp.ones(2), tp.ones(2))


@needs_torch
def test_bad_input_same_types_as_torch():
    cases = [
        lambda m: m.ones(2, 3) + m.ones(2, 4),
        lambda m: m.ones(2, 3).sum(2),
        lambda m: m.ones(2, 3).amax(-3),
        lambda m: m.exp("x"),
        lambda m: m.ones(2, 3) @ m.ones(4, 5),
        lambda m: m.cat([m.ones(2, 3), m.ones(3, 3)], 1),
        lambda m: m.ones(3).add_(m.ones(2, 3)),
        lambda m: m.ones(3, dtype=m.int64).div_(2),
        lambda m: m.ones(2, dtype=m.bool) - m.ones(2, dtype=m.bool),
        lambda m: m.ones(2, dtype=m.int64).mean(),
        lambda m: m.softmax(m.ones(2, 3), 2),
        lambda m: m.stack([m.ones(2), m.ones(3)]),
    ]
    for i, c in enumerate(cases):
        with pytest.raises(Exception) as e1:
            c(torch)
        with pytest.raises(Exception) as e2:
            c(tp)
        assert type(e2.value).__name__ == type(e1.value).__name__ or \
            issubclass(type(e2.value), type(e1.value)), \
            f"case {i}: {type(e2.value).__name__}({e2.value}) vs torch {type(e1.value).__name__}({e1.value})"


@needs_torch
def test_edge_shapes_vs_torch():
    cases = []
    for shape in [(), (0,), (0, 3), (3, 0), (1,)]:
        for dt in ["float32", "int64", "bool"]:
            a = gen(shape, dt, 40)
            cases.append((a, shape, dt))
    for a, shape, dt in cases:
        x, t = tp.tensor(a), to_torch(a)
        nd = max(len(shape), 1)
        for name in ["sum", "prod", "mean", "amax", "amin", "argmax", "all", "any",
                     "var", "std", "logsumexp", "max", "min", "cumsum", "norm"]:
            for d in [None] + list(range(-nd, nd)):
                if name in ("logsumexp", "cumsum") and d is None:
                    continue
                if name in ("mean", "var", "std", "logsumexp", "norm") and dt != "float32":
                    continue
                if d is None:
                    both(lambda: getattr(torch, name)(t), lambda: getattr(tp, name)(x),
                         f"{name} {dt} {shape}")
                else:
                    both(lambda: getattr(torch, name)(t, d), lambda: getattr(tp, name)(x, d),
                         f"{name} {dt} {shape} dim={d}")
        for name in ["softmax", "log_softmax"]:
            if dt == "float32":
                both(lambda: getattr(torch, name)(t, -1), lambda: getattr(tp, name)(x, -1),
                     f"{name} {shape}")
