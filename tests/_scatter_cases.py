"""The scatter family's compiled cases and checks, shared by the GPU test
(tests/gpu/test_gpu_compiled_scatter.py: compiled CUDA against CPU eager)
and its CPU twin (tests/test_nvrtc_scatter.py: the same cases compiled on
the CPU against CPU eager, which checks the cases and the checks).

Kernels with atomics combine the elements of one position in an
unspecified order, so results are compared with what any order may give:
* integers (sums and products wrap, max, min, floor mean): exactly;
* float max / min (NaN propagates): exactly;
* float sums and means: within the bound of two summation orders,
  |got - want| <= 2 (k + 1) eps (|self| + sum |terms|) / count at each
  position of k terms (eps: the dtype's machine epsilon; count: mean's
  divisor, 1 otherwise); the cases' values are multiples of 1/8 of
  magnitude <= 1.5, whose sums are exact, so these compare exactly too,
  and random normal values test the bound (test_float_sums_within_order_bound);
* float products: |got - want| <= 2 (k + 1) eps |want|;
* scatter / index_copy with a duplicated index: each position holds one of
  the values written to it (which one is unspecified on CUDA, as in
  torch's CUDA kernels; the CPU's is the last in C order); a position no
  element reaches keeps self.
"""
import numpy as np

import tensorplay as tp

DTYPES = ["float32", "float64", "int32", "int64"]
SHAPES = [((6, 9), 0), ((6, 9), 1), ((6, 9), -1), ((4, 5, 6), 0), ((4, 5, 6), 1),
          ((4, 5, 6), 2)]
REDUCE = ["sum", "prod", "mean", "amax", "amin"]
# mode -> (how a position combines, whether a duplicated index makes the
# result depend on the order)
MODES = {"scatter": "set", "scatter_value": "set", "scatter_add": "sum",
         "scatter_multiply": "prod", "scatter_add_value": "sum", "index_add": "sum",
         "index_add_alpha": "sum", "index_copy": "set", "index_fill": "set"}
for _r in REDUCE:
    MODES[f"scatter_reduce_{_r}_True"] = _r
    MODES[f"scatter_reduce_{_r}_False"] = _r
INDEX1D = ("index_add", "index_add_alpha", "index_copy", "index_fill")


def _np_dt(dt):
    return {"float32": np.float32, "float64": np.float64, "int32": np.int32,
            "int64": np.int64}[dt]


def values(shape, dt, rng, special=False):
    """floats: multiples of 1/8 in +-[0.5, 1.5] (no zeros; sums exact);
    with special, NaN / inf / -inf at a few places; integers in [-9, 9]"""
    if dt.startswith("float"):
        a = rng.integers(4, 13, size=shape) / 8.0 * rng.choice([-1.0, 1.0], size=shape)
        if special and a.size >= 8:
            flat = a.reshape(-1)
            flat[[1, a.size // 2, a.size - 2]] = [np.nan, np.inf, -np.inf]
    else:
        a = rng.integers(-9, 10, size=shape)
    return tp.from_numpy(np.ascontiguousarray(a.astype(_np_dt(dt))))


def case(mode, dt, shape, dim, seed=0, m=None, unique=False):
    """(fn, x, index, src, visited) for mode on self of `shape` along dim:
    an index of m (default 2n + 3: duplicates) positions along dim, smaller
    than self off dim, a source larger than the index; visited(x, i, s)
    lists (position, value) in C order"""
    rng = np.random.default_rng(seed)
    nd = len(shape)
    d = dim % nd
    n = shape[d]
    red = MODES[mode]
    special = red in ("amax", "amin", "set")
    x = values(shape, dt, rng, special)
    if m is None:
        m = n if unique else 2 * n + 3
    if mode in INDEX1D:
        idx = rng.permutation(n)[:m] if unique else rng.integers(0, n, size=m)
        if mode == "index_fill":
            idx = idx - n * (idx % 2)                # index_fill counts from the end too
        i = tp.from_numpy(np.ascontiguousarray(idx.astype(np.int64)))
        sshape = list(shape)
        sshape[d] = m
        s = values(tuple(sshape), dt, rng, special)
        fl = dt.startswith("float")
        fns = {"index_add": lambda x, i, s: x.index_add(dim, i, s),
               "index_add_alpha": (lambda x, i, s: x.index_add(dim, i, s, alpha=0.5)) if fl
               else (lambda x, i, s: x.index_add(dim, i, s, alpha=3)),
               "index_copy": lambda x, i, s: x.index_copy(dim, i, s),
               "index_fill": (lambda x, i, s: x.index_fill(dim, i, 2.5)) if fl
               else (lambda x, i, s: x.index_fill(dim, i, 3))}
        alpha = {"index_add_alpha": 0.5 if fl else 3}.get(mode, 1)
        fill = 2.5 if fl else 3

        def visited(x, i, s):
            xa, ia, sa = x.numpy(), i.numpy(), s.numpy()
            out = []
            for e in np.ndindex(*sa.shape):
                pos = list(e)
                pos[d] = int(ia[e[d]]) % n
                v = fill if mode == "index_fill" else sa[e] * alpha
                out.append((tuple(pos), xa.dtype.type(v)))
            return out
        return fns[mode], x, i, s, visited
    ish = [max(1, k - 1) for k in shape]
    ish[d] = m
    if unique:
        idx = np.stack([rng.permutation(n)[:m] for _ in range(int(np.prod(ish)) // m)])
        idx = np.moveaxis(idx.reshape([k for j, k in enumerate(ish) if j != d] + [m]), -1, d)
    else:
        idx = rng.integers(0, n, size=ish)
    i = tp.from_numpy(np.ascontiguousarray(idx.astype(np.int64)))
    s = values(tuple(k + 1 for k in ish), dt, rng, special)
    fl = dt.startswith("float")
    val = 2.5 if fl else 3
    if mode.startswith("scatter_reduce_"):
        inc = mode.endswith("True")

        def fn(x, i, s):
            return x.scatter_reduce(dim, i, s, red, include_self=inc)
    else:
        fn = {"scatter": lambda x, i, s: x.scatter(dim, i, s),
              "scatter_value": lambda x, i, s: x.scatter(dim, i, val),
              "scatter_add": lambda x, i, s: x.scatter_add(dim, i, s),
              "scatter_multiply": lambda x, i, s: x.scatter(dim, i, s, reduce="multiply"),
              "scatter_add_value": lambda x, i, s: x.scatter(dim, i, val, reduce="add")}[mode]

    def visited(x, i, s):
        ia, sa = i.numpy(), s.numpy()
        out = []
        for e in np.ndindex(*ia.shape):
            pos = list(e)
            pos[d] = int(ia[e])
            v = val if mode in ("scatter_value", "scatter_add_value") else sa[e]
            out.append((tuple(pos), x.numpy().dtype.type(v)))
        return out
    return fn, x, i, s, visited


def check(mode, got, want, x, i, s, visited):
    """got (any device) against want (CPU eager), by the rules above"""
    assert tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    g = got.cpu().numpy()
    w = want.numpy()
    red = MODES[mode]
    xa = x.numpy()
    if red == "set":
        cand = {}
        for pos, v in visited(x, i, s):
            cand.setdefault(pos, []).append(v)
        for pos in np.ndindex(*xa.shape):
            vs = cand.get(pos, [xa[pos]])
            ok = any(g[pos] == v or (g[pos] != g[pos] and v != v) for v in vs)
            assert ok, (pos, g[pos], vs, w[pos])
        return
    if not g.dtype.kind == "f" or red in ("amax", "amin"):
        assert np.array_equal(g, w, equal_nan=True), (mode, g, w)
        return
    eps = np.finfo(g.dtype).eps
    k = np.zeros(xa.shape)
    mag = np.abs(xa).astype(np.float64)
    for pos, v in visited(x, i, s):
        k[pos] += 1
        mag[pos] += abs(float(v))
    if red == "prod":
        bound = 2 * (k + 1) * eps * np.abs(w.astype(np.float64))
    else:
        cnt = np.maximum(k + (0 if mode.endswith("False") else 1), 1) if red == "mean" else 1
        bound = 2 * (k + 1) * eps * mag / cnt + eps * np.abs(w.astype(np.float64))
    diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
    assert np.all(diff <= bound), (mode, g, w, bound)
