"""Randomized differential sweep, eager tensorplay vs torch 2.13 (issue 13).

    python3 scripts/sweep_vs_torch.py SEED SECONDS

Draws unary/reduction and binary ops of the op table over float16, bfloat16,
float32, int8, uint8, int32, int64 and bool operands filled with edge values
(NaN, +-inf, -0.0, denormals, 65504, INT_MIN/INT_MAX) in 0-d, empty and small
shapes, and prints each (op, dtype, dtype/kwargs) whose outcome (dtype,
shape, values within a dtype tolerance and zero signs, or exception type)
differs from torch. Not part of the test suite (minutes, needs torch)."""
import collections
import sys
import time
import warnings

import numpy as np
import torch

import tensorplay as tp

warnings.simplefilter("ignore")
rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
DT = ["float16", "bfloat16", "float32", "int8", "uint8", "int32", "int64", "bool"]
EDGE_F = [float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1.0, -1.0, 0.5, 1e-40, 65504.0, 3.0, -2.5]
def edge_vals(dt):
    if dt in ("float16", "bfloat16", "float32"): return EDGE_F
    if dt == "bool": return [True, False]
    info = np.iinfo(dt)
    return [info.min, info.max, 0, 1, -1 if info.min < 0 else 2, 7, info.min + 1]
def make(dt, shape):
    vals = edge_vals(dt)
    a = np.array([vals[i] for i in rng.integers(0, len(vals), int(np.prod(shape)))], dtype=object).reshape(shape)
    return a
def totensor(m, a, dt):
    if dt == "bfloat16":
        t = m.tensor(a.astype(np.float32).tolist() if a.ndim else float(a.item()), dtype=m.float32).to(m.bfloat16)
    else:
        npd = np.float32 if dt == "float16" else dt
        t = m.tensor(np.asarray(a.tolist(), dtype=dt if dt != "bool" else bool).tolist(), dtype=getattr(m, dt))
    return t
UN = ["abs", "neg", "sign", "sqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tanh", "sigmoid", "floor", "ceil", "round", "trunc",
      "reciprocal", "rsqrt", "erf", "erfc", "isnan", "isinf", "isfinite", "logical_not", "bitwise_not", "square", "frac", "sgn", "signbit", "exp2", "log2", "relu",
      "sum", "prod", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "all", "any", "cumsum", "cumprod", "logsumexp", "std", "var", "nansum", "count_nonzero", "norm", "median", "nan_to_num"]
BIN = ["add", "sub", "mul", "div", "floor_divide", "remainder", "fmod", "pow", "maximum", "minimum", "fmax", "fmin", "eq", "ne", "lt", "le", "gt", "ge",
       "atan2", "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or", "logical_xor", "hypot", "copysign", "xlogy", "true_divide", "bitwise_left_shift", "bitwise_right_shift"]
def outcome(m, f):
    try:
        r = f(m)
    except Exception as e:
        return ("exc", type(e).__name__)
    if isinstance(r, (tuple, list)) or hasattr(r, "_fields"):
        return tuple(outcome(m, lambda m, x=x: x) for x in r)
    if not hasattr(r, "dtype"):
        return ("py", repr(r))
    dt = str(r.dtype).split(".")[-1]
    v = r.float() if dt == "bfloat16" else r
    return ("t", dt, tuple(r.shape), np.asarray(v.tolist(), dtype=np.float64 if dt not in ("int64",) else np.int64))
def same(a, b, dt):
    if isinstance(a[0], tuple) or isinstance(b[0], tuple):
        if not (isinstance(a[0], tuple) and isinstance(b[0], tuple)) or len(a) != len(b): return False
        return all(same(p, q, dt) for p, q in zip(a, b))
    if a[0] != b[0]: return False
    if a[0] == "exc": return a[1] == b[1]
    if a[0] == "py": return a[1] == b[1]
    if a[0] == "t":
        if a[1:3] != b[1:3]: return False
        x, y = a[3], b[3]
        if x.dtype.kind == "i" or y.dtype.kind == "i": return np.array_equal(x, y)
        tol = {"float16": 2e-3, "bfloat16": 1.6e-2}.get(a[1], 2e-6)
        return bool(np.all((np.isnan(x) & np.isnan(y)) | (x == y) | (np.abs(x - y) <= tol * np.maximum(1e-30, np.abs(y)) + (1e-6 if a[1] == "float32" else 1e-3))) and np.array_equal(np.signbit(x[x == 0]), np.signbit(y[y == 0])))
    return all(same(p, q, dt) for p, q in zip(a, b)) and len(a) == len(b)
found = collections.OrderedDict()
t0 = time.time(); n = 0
limit = float(sys.argv[2]) if len(sys.argv) > 2 else 60
while time.time() - t0 < limit:
    n += 1
    dt = DT[rng.integers(len(DT))]
    shape = [(), (0,), (3,), (2, 3), (4, 0)][rng.integers(5)]
    a = make(dt, shape)
    if rng.random() < 0.6:
        op = UN[rng.integers(len(UN))]
        kw = {}
        if op in ("sum", "prod", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "all", "any", "cumsum", "cumprod", "logsumexp", "std", "var", "nansum", "count_nonzero", "norm", "median") and rng.random() < 0.5 and len(shape) > 0:
            kw = {"dim": int(rng.integers(-len(shape), len(shape)))}
        if op in ("cumsum", "cumprod", "logsumexp") and "dim" not in kw:
            kw = {"dim": 0}
        f = lambda m, op=op, kw=kw: getattr(m, op)(totensor(m, a, dt), **kw)
        key = (op, dt, str(kw))
    else:
        op = BIN[rng.integers(len(BIN))]
        dt2 = dt if rng.random() < 0.6 else DT[rng.integers(len(DT))]
        b = make(dt2, shape if rng.random() < 0.8 else ())
        if rng.random() < 0.2:
            sc = [2, -1, 0, 0.5, float("nan"), True, 2**31, -3.5][rng.integers(8)]
            f = lambda m, op=op: getattr(m, op)(totensor(m, a, dt), sc)
            key = (op, dt, "scalar " + repr(sc))
        else:
            f = lambda m, op=op: getattr(m, op)(totensor(m, a, dt), totensor(m, b, dt2))
            key = (op, dt, dt2)
    try:
        w = outcome(torch, f); g = outcome(tp, f)
    except Exception as e:
        continue
    if not same(g, w, dt):
        if key not in found:
            def short(o):
                if isinstance(o, tuple) and o and o[0] == "t":
                    return (o[1], o[2], o[3].reshape(-1).tolist()[:6])
                if isinstance(o, tuple) and o and isinstance(o[0], tuple):
                    return tuple(short(x) for x in o)
                return o
            found[key] = (a.tolist(), short(w), short(g))
print("cases", n, "divergent keys", len(found))
for k, v in found.items():
    print(k, "\n   in:", str(v[0])[:100], "\n   torch:", str(v[1])[:150], "\n   tp:   ", str(v[2])[:150])
