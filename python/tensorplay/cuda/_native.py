"""CUDA paths of eager ops that the lowering does not serve (tensorplay.cuda.
_eager.dispatch tries them first): compositions of ops that are native on
CUDA (views, pointwise kernels, cat, cuBLAS), and the hand-written kernels
of _kernels for sorting, scans, stream compaction, scatter-add and matmul
of integer and half dtypes.

Each function takes the op's arguments as the CPU implementation does and
returns its result with the CPU's dtypes and NaN rules, or NotImplemented
for what it does not cover (the dispatcher then tries the generated kernel
and finally the host, which raises eager's error for bad arguments). The
functions work on host tensors too when _kernels runs kernels on the host
(tests/_cuda_emu.py): that is how they are tested without a GPU.
"""
import inspect
import math

from tensorplay import _C
from tensorplay.cuda import _kernels as K


def _tp():
    import tensorplay
    return tensorplay


def _is_t(v):
    return isinstance(v, _C.Tensor)


def _dt(t):
    return K.dtype_name(t.dtype)


def _wrap_dim(dim, nd):
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise _Skip
    lo, hi = (-1, 0) if nd == 0 else (-nd, nd - 1)
    if dim < lo or dim > hi:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{lo}, {hi}], but got {dim})")
    return dim + nd if dim < 0 else dim


class _Skip(Exception):
    """an argument this path does not cover: NotImplemented"""


def _empty(shape, dtype, like):
    return _tp().empty(tuple(shape), dtype=dtype, device=like.device)


def _rows(x, d):
    """x with dim d last, contiguous: (that tensor, rows, n)"""
    xm = x.movedim(d, -1) if d != x.dim() - 1 else x
    xm = xm.contiguous()
    n = xm.shape[-1]
    return xm, (xm.numel() // n if n else 0), n


def _back(t, d, nd):
    """t (dim d moved last) in the original layout, contiguous"""
    if d == nd - 1:
        return t
    return t.movedim(-1, d).contiguous()


# ------------------------------------------------------------------- sort

def _sorted_rows(xm, rows, n, desc):
    """(key, idx, p): each row of xm (rows, n) sorted, padded to p = 2^m"""
    tp = _tp()
    dt = _dt(xm)
    p = 1 << max(0, (n - 1).bit_length())
    key = _empty((rows * p,), xm.dtype, xm)
    idx = _empty((rows * p,), tp.int64, xm)
    K.launch("sort", dt, f"sort_init_{dt}", rows * p, xm, key, idx, rows, n, p)
    k = 2
    while k <= p:
        j = k >> 1
        while j > 0:
            K.launch("sort", dt, f"sort_step_{dt}", rows * p, key, idx, rows, n, p, k, j,
                     int(bool(desc)))
            j >>= 1
        k <<= 1
    return key, idx, p


def _sort_impl(x, dim, desc, m=None):
    """(values, indices) of x sorted along dim, the first m of each row"""
    tp = _tp()
    if _dt(x) not in K.DTYPES:
        raise _Skip
    nd = x.dim()
    if nd == 0:
        return x.clone(), tp.zeros((), dtype=tp.int64, device=x.device)
    d = _wrap_dim(dim, nd)
    xm, rows, n = _rows(x, d)
    m = n if m is None else m
    shape = tuple(xm.shape[:-1]) + (m,)
    vals, ind = _empty(shape, x.dtype, x), _empty(shape, tp.int64, x)
    if rows and m:
        key, idx, p = _sorted_rows(xm, rows, n, desc)
        dt = _dt(x)
        K.launch("sort", dt, f"sort_out_{dt}", rows * m, key, idx, vals, ind, rows, p, m)
    return _back(vals, d, nd), _back(ind, d, nd)


def sort(input, dim=-1, descending=False, *, stable=False):
    """every sort is the stable one (see _kernels.SORT)"""
    from tensorplay._ops import return_types
    return return_types.sort(*_sort_impl(input, dim, descending))


def argsort(input, dim=-1, descending=False, *, stable=False):
    return _sort_impl(input, dim, descending)[1]


def topk(input, k, dim=-1, largest=True, sorted=True):
    from tensorplay._ops import return_types
    if isinstance(k, bool) or not isinstance(k, int):
        raise _Skip
    nd = input.dim()
    d = _wrap_dim(dim, nd)
    n = input.shape[d] if nd else 1
    if k < 0 or k > n:
        raise RuntimeError("selected index k out of range")
    return return_types.topk(*_sort_impl(input, d, largest, k))


def median(input, dim=None, keepdim=False):
    """the lower middle value; NaN (the first NaN's index) if a NaN"""
    from tensorplay._ops import return_types
    tp = _tp()
    dt = _dt(input)
    if dt not in K.DTYPES:
        raise _Skip
    if dim is None:
        if input.numel() == 0:
            # eager's (torch CPU's) NaN converted to the integer dtype:
            # INT_MIN for int32/int64, 0 for the narrower ones
            fill = float("nan") if input.dtype.is_floating_point else (
                -2**31 if input.dtype is tp.int32 else -2**63 if input.dtype is tp.int64 else 0)
            return tp.full((), fill, dtype=input.dtype, device=input.device)
        return _median_rows(input.reshape(1, -1))[0].reshape(())
    nd = input.dim()
    d = _wrap_dim(dim, nd)
    if nd == 0:
        return return_types.median(input.clone(),
                                   tp.zeros((), dtype=tp.int64, device=input.device))
    if input.shape[d] == 0:
        raise IndexError(f"median(): Expected reduction dim {d} to have non-zero size.")
    xm, rows, n = _rows(input, d)
    vals, ind = _median_rows(xm.reshape(rows, n))
    shape = tuple(xm.shape[:-1])
    vals, ind = vals.reshape(shape), ind.reshape(shape)
    if keepdim:
        vals, ind = vals.unsqueeze(d), ind.unsqueeze(d)
    return return_types.median(vals, ind)


def _median_rows(x2):
    tp = _tp()
    rows, n = x2.shape
    vals, ind = _empty((rows,), x2.dtype, x2), _empty((rows,), tp.int64, x2)
    if rows:
        dt = _dt(x2)
        key, idx, p = _sorted_rows(x2.contiguous(), rows, n, False)
        K.launch("sort", dt, f"median_pick_{dt}", rows, key, idx, vals, ind, rows, n, p)
    return vals, ind


# ------------------------------------------------------------------ scans

def _scan_rows(xm, rows, n, op, out_dtype=None):
    """inclusive scan (op "sum" / "prod") of each row of the contiguous xm,
    written as out_dtype (default xm's)"""
    tp = _tp()
    out_dtype = out_dtype or xm.dtype
    idt, dt = _dt(xm), K.dtype_name(out_dtype)
    out = _empty(tuple(xm.shape), out_dtype, xm)
    if rows == 0 or n == 0:
        return out
    cs = max(32, math.isqrt(n - 1) + 1)
    nc = -(-n // cs)
    acc = {"float32": tp.float32, "float16": tp.float32, "bfloat16": tp.float32,
           "float64": tp.float64}.get(dt, tp.int64)
    part = _empty((rows * nc,), acc, xm)
    key = (idt, dt, op)
    tag = f"{op}_{idt}_{dt}"
    K.launch("scan", key, f"scan_chunks_{tag}", rows * nc, xm, part, rows, n, cs, nc)
    K.launch("scan", key, f"scan_partials_{tag}", rows, part, rows, nc)
    K.launch("scan", key, f"scan_apply_{tag}", rows * nc, xm, part, out, rows, n, cs, nc)
    return out


def _scan(input, dim, dtype, op, floats):
    tp = _tp()
    if dtype is not None:
        out_dt = dtype
    elif input.dtype.is_floating_point:
        out_dt = input.dtype
    else:
        out_dt = tp.int64
    if out_dt.is_floating_point and not floats:
        raise _Skip                       # the lowering serves it
    name = K.dtype_name(out_dt)
    if name not in K.DTYPES or name == "bool":
        raise _Skip
    nd = input.dim()
    d = _wrap_dim(dim, nd)
    x = input
    if name in ("float16", "bfloat16") and x.dtype != out_dt:
        # eager converts the inputs to the float32 accumulator, not to out_dt
        return _scan(x.to(tp.float32), d, None, op, True).to(out_dt)
    if nd == 0:
        return x.to(out_dt, copy=True)
    if not (out_dt == tp.int64 and not x.dtype.is_floating_point):
        x = x.to(out_dt)             # else the kernel reads x's own dtype
    xm, rows, n = _rows(x, d)
    return _back(_scan_rows(xm, rows, n, op, out_dt), d, nd)


def cumsum(input, dim, *, dtype=None):
    """integer and bool cumsum (float cumsum is the lowering's matmul form)"""
    return _scan(input, dim, dtype, "sum", False)


def cumprod(input, dim, *, dtype=None):
    return _scan(input, dim, dtype, "prod", True)


# -------------------------------------------------------------- nonzero

def nonzero(input, *, as_tuple=False):
    """count (one synchronization, as torch's), then each nonzero element
    writes its coordinates at its rank among them"""
    tp = _tp()
    nd = input.dim()
    x = input.reshape(1) if nd == 0 else input
    flag = (x != 0).contiguous().reshape(-1)
    total = flag.numel()
    cnt = _scan_rows(flag.reshape(1, total), 1, total, "sum", tp.int64).reshape(-1)
    count = int(cnt[-1].item()) if total else 0
    xd = max(nd, 1)
    out = _empty((count, xd), tp.int64, x)
    if count:
        shape = tp.tensor(list(x.shape), dtype=tp.int64).to(x.device)
        K.launch("nonzero", None, "nonzero_scatter", total, flag, cnt, shape, out, total, xd)
    if nd == 0:
        out = out[:, :0]
        if as_tuple:
            return (tp.zeros(count, dtype=tp.int64, device=x.device),)
    if as_tuple:
        return tuple(out[:, i].contiguous() for i in range(nd))
    return out


# ----------------------------------------------------------------- unique

def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """eager's unique of the flattened input: sorted values (each NaN its
    own value, last, as torch), the inverse (input's shape), the counts. The sort's
    permutation, a "new value" flag per sorted element, its scan (group
    ids, one synchronization for their number), the group starts by
    nonzero, values gathered at the starts, the inverse scattered back."""
    tp = _tp()
    if _dt(input) not in K.DTYPES:
        raise _Skip
    if dim is not None:
        return _unique_dim(input, return_inverse, return_counts, dim)
    f = input.reshape(-1)
    N = f.numel()
    if N == 0:
        out = [input.reshape(0).clone()]
        if return_inverse:
            out.append(_empty(tuple(input.shape), tp.int64, input))
        if return_counts:
            out.append(_empty((0,), tp.int64, input))
        return out[0] if len(out) == 1 else tuple(out)
    sv, perm = _sort_impl(f, 0, False)
    new = sv[1:] != sv[:-1]         # NaN != NaN: each NaN its own entry
    flag = tp.cat([tp.ones(1, dtype=tp.bool, device=f.device), new])
    starts = nonzero(flag)[:, 0].contiguous()
    out = [sv.index_select(0, starts)]
    if return_inverse:
        gid = _scan_rows(flag.reshape(1, N), 1, N, "sum", tp.int64).reshape(-1) - 1
        inv = _empty((N,), tp.int64, f)
        K.launch("scatter", None, "scatter_i64", N, inv, perm, gid.contiguous(), N)
        out.append(inv.reshape(tuple(input.shape)))
    if return_counts:
        ends = tp.cat([starts[1:], tp.full((1,), N, dtype=tp.int64, device=f.device)])
        out.append(ends - starts)
    return out[0] if len(out) == 1 else tuple(out)


_UNIQUE_DIM_MAX_COLUMNS = 1024


def _unique_dim(input, return_inverse, return_counts, dim):
    """eager's unique(dim=): the slices along dim as rows, ordered, a row
    unequal to the one before starts a group (rows holding NaN never
    merge: NaN != NaN), then as unique's flat path. The order (_kernels
    UNIQUE_ROWS): without NaN the stable lexicographic sort, by one stable
    sort per column (last first) for rows of up to _UNIQUE_DIM_MAX_COLUMNS
    elements, else one bitonic network comparing whole rows; input holding
    NaN: libstdc++'s std::sort under torch's comparator (eager's order, no
    sort's), run by one thread. Empty input: the host. 1-D input without
    NaN: the flat path."""
    tp = _tp()
    nd = input.dim()
    d = _wrap_dim(dim, nd)
    if nd == 0 or input.numel() == 0:
        raise _Skip
    nan = input.is_floating_point() and bool(input.isnan().any())
    if nd == 1 and not nan:
        return unique(input, True, return_inverse, return_counts)
    x = input.movedim(d, 0)
    n = x.shape[0]
    rows = x.reshape(n, -1).contiguous()
    c = rows.shape[1]
    dt = _dt(input)
    if nan:
        perm = _empty((n,), tp.int64, input)
        K.launch("unique_rows", dt, f"std_sort_rows_{dt}", 1, rows, perm, n, c)
    elif c > _UNIQUE_DIM_MAX_COLUMNS:
        p = 1 << max(0, (n - 1).bit_length())
        idx = tp.arange(p, dtype=tp.int64, device=input.device)
        k = 2
        while k <= p:
            j = k >> 1
            while j > 0:
                K.launch("unique_rows", dt, f"rowsort_step_{dt}", p, rows, idx, n, c, p, k, j)
                j >>= 1
            k <<= 1
        perm = idx[:n].contiguous()
    else:
        perm = tp.arange(n, dtype=tp.int64, device=input.device)
        for j in reversed(range(c)):
            key = rows[:, j].index_select(0, perm)
            perm = perm.index_select(0, _sort_impl(key, 0, False)[1])
    sr = rows.index_select(0, perm)
    new = (sr[1:] != sr[:-1]).any(1)
    flag = tp.cat([tp.ones(1, dtype=tp.bool, device=input.device), new])
    starts = nonzero(flag)[:, 0].contiguous()
    u = sr.index_select(0, starts).reshape((starts.numel(),) + tuple(x.shape[1:]))
    out = [u.movedim(0, d).contiguous() if d else u]
    if return_inverse:
        gid = _scan_rows(flag.reshape(1, n), 1, n, "sum", tp.int64).reshape(-1) - 1
        inv = _empty((n,), tp.int64, input)
        K.launch("scatter", None, "scatter_i64", n, inv, perm, gid.contiguous(), n)
        out.append(inv)
    if return_counts:
        ends = tp.cat([starts[1:], tp.full((1,), n, dtype=tp.int64, device=input.device)])
        out.append(ends - starts)
    return out[0] if len(out) == 1 else tuple(out)


# ---------------------------------------------------- repeat_interleave

def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """tensor repeats: their inclusive sum (the int64 scan), the total (one
    synchronization, as torch's without output_size), each output position's
    source by binary search in the sums, one index_select. repeats=None:
    input holds the repeats of arange(len). Number repeats and bad
    arguments: NotImplemented (the generated kernel, or eager's error from
    the host)."""
    tp = _tp()
    if repeats is None:
        if not _is_t(input) or input.dim() != 1 or input.dtype not in (tp.int64, tp.int32):
            raise _Skip
        return repeat_interleave(tp.arange(input.numel(), dtype=tp.int64, device=input.device),
                                 input, 0, output_size=output_size)
    if not (_is_t(input) and _is_t(repeats)) or repeats.dtype not in (tp.int64, tp.int32) \
            or repeats.dim() > 1:
        raise _Skip
    if repeats.device != input.device:
        if repeats.is_cuda:
            raise _Skip
        repeats = repeats.to(input.device)
    x = input.reshape(-1) if dim is None else input
    if x.dim() == 0:
        x = x.reshape(1)
    d = 0 if dim is None else _wrap_dim(dim, x.dim())
    n = x.shape[d]
    rep = repeats.reshape(-1)
    if rep.numel() == 1 and n != 1:
        rep = rep.expand(n)
    if rep.numel() != n:
        raise _Skip                      # eager's error
    if n == 0:
        total = 0
        idx = _empty((0,), tp.int64, x)
    else:
        cum = _scan_rows(rep.contiguous().reshape(1, n), 1, n, "sum", tp.int64).reshape(-1)
        if bool((rep < 0).any().item()):
            raise _Skip                  # eager's error
        total = int(cum[-1].item())
        idx = _empty((total,), tp.int64, x)
        K.launch("repeat_index", None, "repeat_index", total, cum, idx, n, total)
    if output_size is not None and output_size != total:
        raise _Skip                      # eager's error
    return x.index_select(d, idx)


# --------------------------------------------------- as_strided_scatter

def as_strided_scatter(input, src, size, stride, storage_offset=None):
    """a contiguous copy of input with src written through the strided
    view (size, stride, storage_offset relative to input's storage offset)
    of that copy, overlapping views as copy_ writes them"""
    if not (_is_t(input) and _is_t(src)):
        raise _Skip
    size, stride = tuple(size), tuple(stride)
    off = 0 if storage_offset is None else storage_offset - input.storage_offset()
    if len(size) != len(stride) or off < 0 or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in size + stride):
        raise _Skip
    span = 0 if 0 in size else 1 + sum((a - 1) * st for a, st in zip(size, stride))
    if off + span > input.numel():
        raise _Skip                      # outside the copy: eager decides
    out = input.contiguous().clone()
    if span:
        out.as_strided(size, stride, off).copy_(src)
    return out


# ------------------------------------------------------------- index_add

def _index_add(input, dim, index, source, alpha):
    tp = _tp()
    dt = _dt(input)
    if (dt not in K.DTYPES or not _is_t(index)
            or not _is_t(source) or source.dtype != input.dtype or input.dim() == 0
            or index.dtype not in (tp.int64, tp.int32) or index.dim() > 1
            or (isinstance(alpha, bool) and dt != "bool")
            or (dt == "bool" and alpha not in (0, 1))
            or not isinstance(alpha, (int, float))
            or (dt not in K.FLOATS and not isinstance(alpha, int))):
        raise _Skip
    if dt == "bfloat16":
        # eager computes a bfloat16 op in float32 and rounds once
        return _index_add(input.float(), dim, index, source.float(), alpha).to(tp.bfloat16)
    nd = input.dim()
    d = _wrap_dim(dim, nd)
    m = index.numel()
    want = tuple(input.shape[:d]) + (m,) + tuple(input.shape[d + 1:])
    if tuple(source.shape) != want:
        raise _Skip
    n = input.shape[d]
    idx = index.reshape(-1).contiguous()
    if m and bool(((idx < 0) | (idx >= n)).any()):
        raise _Skip                      # the host raises eager's IndexError
    out = input.contiguous().clone()
    outer = math.prod(input.shape[:d])
    inner = math.prod(input.shape[d + 1:])
    ix = _dt(idx)
    K.launch("index_add", (dt, ix), f"index_add_{dt}_{ix}", outer * m * inner, out, idx,
             source.contiguous(), outer, n, m, inner,
             float(alpha) if dt in K.FLOATS else int(alpha))
    return out


def index_add(input, dim, index, source, *, alpha=1):
    return _index_add(input, dim, index, source, alpha)


def index_add_(input, dim, index, source, *, alpha=1):
    out = _index_add(input, dim, index, source, alpha)
    input.copy_(out)
    return input


# ----------------------------------------------------------------- matmul

MATMUL_DTYPES = ("float16", "bfloat16", "int8", "uint8", "int16", "int32", "int64")


def bmm_kernel(a, b):
    """(B, m, k) @ (B, k, n) of one dtype of MATMUL_DTYPES"""
    dt = _dt(a)
    if dt not in MATMUL_DTYPES or a.dtype != b.dtype:
        return NotImplemented
    B, m, k = a.shape
    n = b.shape[2]
    if b.shape[0] != B or b.shape[1] != k:
        return NotImplemented
    c = _empty((B, m, n), a.dtype, a)
    if B and m and n:
        if k == 0:
            return c.zero_()
        K.launch("matmul", dt, f"matmul_{dt}", B * m * n, a.contiguous(), b.contiguous(),
                 c, B, m, k, n)
    return c


# ----------------------------------------------------------- compositions

def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """numpy's formula (eager's): |x - y| <= atol + rtol*|y| where y is
    finite, or x == y; both NaN with equal_nan"""
    tp = _tp()
    if not (_is_t(input) and _is_t(other)) or isinstance(rtol, bool) \
            or isinstance(atol, bool):
        raise _Skip
    if rtol < 0:
        raise RuntimeError(f"rtol must be greater than or equal to zero, but got {rtol}")
    if atol < 0:
        raise RuntimeError(f"atol must be greater than or equal to zero, but got {atol}")
    x, y = input, other
    if x.dtype == tp.bool or y.dtype == tp.bool:
        return x == y
    if x.dtype != y.dtype:
        if x.dtype.is_floating_point or y.dtype.is_floating_point:
            raise _Skip                  # numpy's promotion of mixed dtypes
    if not y.dtype.is_floating_point:
        x, y = x.to(tp.float64), y.to(tp.float64)
    r = ((x - y).abs() <= atol + rtol * y.abs()) & y.isfinite() | (x == y)
    if equal_nan:
        r = r | (x.isnan() & y.isnan())
    return r


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    return bool(isclose(input, other, rtol, atol, equal_nan).all().item())


def diff(input, n=1, dim=-1, prepend=None, append=None):
    tp = _tp()
    if isinstance(n, bool) or not isinstance(n, int) or n < 0 or input.dim() == 0:
        raise _Skip
    d = _wrap_dim(dim, input.dim())
    parts = [p for p in (prepend, input, append) if p is not None]
    for p in parts:
        if not _is_t(p) or p.dim() != input.dim() or p.dtype != input.dtype:
            raise _Skip
    r = tp.cat(parts, d) if len(parts) > 1 else input
    if n == 0:
        return r.clone() if r is input else r
    for _ in range(n):
        L = r.shape[d]
        if L == 0:
            break
        hi, lo = r.narrow(d, 1, L - 1), r.narrow(d, 0, L - 1)
        r = hi != lo if r.dtype == tp.bool else hi - lo
    return r.contiguous()


def repeat(input, *sizes, **kw):
    if "repeats" in kw:
        sizes = (kw.pop("repeats"),)
    if kw:
        raise _Skip
    if len(sizes) == 1 and isinstance(sizes[0], (list, tuple)):
        sizes = tuple(sizes[0])
    if any(isinstance(s, bool) or not isinstance(s, int) for s in sizes):
        raise _Skip
    reps = tuple(sizes)
    nd = input.dim()
    if len(reps) < nd or any(r < 0 for r in reps):
        raise _Skip                      # eager's errors
    shape = (1,) * (len(reps) - nd) + tuple(input.shape)
    x = input.reshape(shape)
    # (1, s0, 1, s1, ...) expanded to (r0, s0, r1, s1, ...), then merged
    inter, big, out = [], [], []
    for r, s in zip(reps, shape):
        inter += [1, s]
        big += [r, s]
        out.append(r * s)
    return x.reshape(tuple(inter)).expand(tuple(big)).contiguous().reshape(tuple(out))


def roll(input, shifts, dims=None):
    tp = _tp()
    sh = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
    if any(isinstance(s, bool) or not isinstance(s, int) for s in sh):
        raise _Skip
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        if len(sh) != 1:
            raise _Skip
        return roll(input.reshape(-1), sh[0], 0).reshape(tuple(input.shape))
    dl = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    if len(dl) != len(sh) or input.dim() == 0:
        raise _Skip
    x = input
    for s, dd in zip(sh, dl):
        d = _wrap_dim(dd, x.dim())
        L = x.shape[d]
        if L == 0:
            continue
        s %= L
        if s:
            x = tp.cat([x.narrow(d, L - s, s), x.narrow(d, 0, L - s)], d)
    return x.clone() if x is input else x


def einsum(equation, *operands):
    """pairwise contractions as batched matmuls: repeated letters of one
    operand become its diagonal, `...` one letter per broadcast dim (right
    aligned, as NumPy), each operand's letters seen nowhere else are summed
    first; two operands become (batch, m, k) @ (batch, k, n). A size-1 dim
    broadcasts against a longer one of its letter (an expanded view)."""
    tp = _tp()
    if not isinstance(equation, str):
        raise _Skip
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands or not all(_is_t(t) for t in operands):
        raise _Skip
    originals = operands
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(operands):
        raise _Skip
    # `...`: fresh upper-case letters (the equation's own must be lower case)
    if any(c.isupper() for c in eq):
        raise _Skip
    ne = 0
    for s_, t in zip(ins, operands):
        if "..." in s_:
            ne = max(ne, t.dim() - (len(s_) - 3))
    if ne < 0 or ne > 26:
        raise _Skip
    ell = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:ne]
    fixed = []
    for s_, t in zip(ins, operands):
        if "..." in s_:
            k = t.dim() - (len(s_) - 3)
            if k < 0 or s_.count("...") != 1:
                raise _Skip
            s_ = s_.replace("...", ell[ne - k:])
        fixed.append(s_)
    ins = fixed
    if "." in "".join(ins) or (rhs.count(".") not in (0, 3)):
        raise _Skip
    if not arrow:
        allc = "".join(ins)
        rhs = ell + "".join(sorted(c for c in set(allc)
                                   if allc.count(c) == 1 and c.islower()))
    else:
        rhs = rhs.replace("...", ell)
    # a letter twice in one operand: its diagonal (a view; the letter moves
    # last, as Tensor.diagonal puts it)
    ops, subs = [], []
    for s_, t in zip(ins, operands):
        if len(s_) != t.dim():
            raise _Skip
        while len(set(s_)) != len(s_):
            c = next(c for c in s_ if s_.count(c) > 1)
            i = s_.index(c)
            j = s_.index(c, i + 1)
            if t.shape[i] != t.shape[j]:
                raise _Skip
            t = t.diagonal(0, i, j)
            s_ = "".join(x for k, x in enumerate(s_) if k not in (i, j)) + c
        ops.append(t)
        subs.append(s_)
    operands, ins = tuple(ops), subs
    if len(rhs) != len(set(rhs)) or not all(c.isalpha() for c in "".join(ins) + rhs):
        raise _Skip
    dt = operands[0].dtype
    size = {}
    for s, t in zip(ins, operands):
        if t.dtype != dt or len(s) != t.dim():
            raise _Skip
        for c, n in zip(s, t.shape):
            m = size.get(c)
            if m is None or m == 1:
                size[c] = n
            elif n != 1 and n != m:
                raise _Skip              # eager's error
    if any(c not in size for c in rhs):
        raise _Skip
    # a size-1 dim against a longer one broadcasts (an expanded view)
    operands = tuple(t.expand(tuple(size[c] for c in s))
                     if tuple(t.shape) != tuple(size[c] for c in s) else t
                     for s, t in zip(ins, operands))
    terms = list(zip(ins, operands))

    def needed(i):
        """letters used after the first i+1 terms, or in the output"""
        return set(rhs).union(*[set(s) for s, _ in terms[i + 1:]])

    def reduce_alone(s, t, keep):
        drop = [k for k, c in enumerate(s) if c not in keep]
        if drop:
            t = t.sum(drop)
            s = "".join(c for c in s if c in keep)
        return s, t

    s, t = terms[0]
    later = needed(0)
    s, t = reduce_alone(s, t, later)
    for i in range(1, len(terms)):
        s2, t2 = terms[i]
        later = needed(i)
        s2, t2 = reduce_alone(s2, t2, later | set(s))
        s, t = reduce_alone(s, t, later | set(s2))
        batch = [c for c in s if c in s2 and c in later]
        con = [c for c in s if c in s2 and c not in later]
        ao = [c for c in s if c not in s2]
        bo = [c for c in s2 if c not in s]
        A = t.permute([s.index(c) for c in batch + ao + con])
        B = t2.permute([s2.index(c) for c in batch + con + bo])
        nb = math.prod(size[c] for c in batch)
        m = math.prod(size[c] for c in ao)
        k = math.prod(size[c] for c in con)
        n = math.prod(size[c] for c in bo)
        A = A.reshape(nb, m, k)
        B = B.reshape(nb, k, n)
        r = tp.bmm(A, B) if k else tp.zeros((nb, m, n), dtype=dt, device=A.device)
        s = "".join(batch + ao + bo)
        t = r.reshape(tuple(size[c] for c in s))
    s, t = reduce_alone(s, t, set(rhs))
    r = t.permute([s.index(c) for c in rhs]) if s != rhs else t
    r = r.contiguous()
    if r.numel() and any(o.numel() and _overlap(r, o) for o in originals):
        r = r.clone()                    # only views were taken: a copy, as eager
    return r


# ------------------------------------------------------- advanced indexing

def _one_key(key, t):
    """the index tensor of x[key] / x[key] = v, on t's device; else _Skip"""
    if isinstance(key, tuple) and len(key) == 1:
        key = key[0]
    if not _is_t(key) or key.device != t.device:
        raise _Skip
    return key


def _mask_rows(key, t):
    """(row numbers of the True elements of the bool mask key, the shape
    of one row) for t viewed as (rows of key's elements, rest)"""
    k = key.dim()
    if k == 0 or k > t.dim() or tuple(key.shape) != tuple(t.shape[:k]):
        raise _Skip                      # the host raises eager's IndexError
    return nonzero(key.reshape(-1))[:, 0].contiguous(), tuple(t.shape[k:])


def _simple_getitem(t, key):
    """x[mask] (a bool tensor over x's leading dims): the True rows, by
    nonzero and index_select; x[index] (an int64 tensor): index_select of
    dim 0, negative indices wrapped, out-of-range ones left to the host
    (eager's IndexError)"""
    tp = _tp()
    key = _one_key(key, t)
    if key.dtype == tp.bool:
        rows, rest = _mask_rows(key, t)
        return t.reshape((-1,) + rest).index_select(0, rows)
    if key.dtype != tp.int64 or t.dim() == 0:
        raise _Skip
    n = t.shape[0]
    idx = key.reshape(-1)
    if idx.numel() and bool(((idx < -n) | (idx >= n)).any()):
        raise _Skip
    idx = tp.where(idx < 0, idx + n, idx)
    return t.index_select(0, idx).reshape(tuple(key.shape) + tuple(t.shape[1:]))


def _key_items(key, t):
    """the items of an index key, Ellipsis expanded to full slices, lists
    made tensors and index tensors moved to t's device; _Skip for what the
    host should judge (bool scalars, float tensors, too many indices)"""
    tp = _tp()
    items = list(key) if isinstance(key, tuple) else [key]
    out, used, ell = [], 0, 0
    for k in items:
        if isinstance(k, list):
            try:
                k = tp.tensor(k)
            except Exception:  # noqa: BLE001 - eager's error from the host
                raise _Skip from None
            if k.dtype not in (tp.int64, tp.bool):
                raise _Skip
        if _is_t(k):
            if k.dtype not in (tp.int64, tp.int32, tp.bool) or (k.dtype == tp.bool
                                                                and k.dim() == 0):
                raise _Skip
            if k.device != t.device:
                if k.is_cuda:
                    raise _Skip
                k = k.to(t.device)
            used += k.dim() if k.dtype == tp.bool else 1
        elif k is Ellipsis:
            ell += 1
        elif isinstance(k, bool) or not (k is None or isinstance(k, (int, slice))):
            raise _Skip
        elif k is not None:
            used += 1
        out.append(k)
    if ell > 1 or used > t.dim():
        raise _Skip
    if ell:
        i = out.index(Ellipsis)
        out[i:i + 1] = [slice(None)] * (t.dim() - used)
    return out


def _advanced(t, key):
    """(v, [(dim of v, int64 index tensor)]): the basic part of key applied
    to t as views (ints select first, as eager), each bool mask replaced by
    the int64 coordinates of its True elements"""
    tp = _tp()
    v, d, adv = t, 0, []
    for k in _key_items(key, t):
        if k is None:
            v = v.unsqueeze(d)
            d += 1
        elif isinstance(k, int):
            n = v.shape[d]
            if not -n <= k < n:
                raise _Skip                  # eager's IndexError from the host
            v = v.select(d, k)
        elif isinstance(k, slice):
            v = v[(slice(None),) * d + (k,)]
            d += 1
        elif k.dtype == tp.bool:
            kd = k.dim()
            if tuple(k.shape) != tuple(v.shape[d:d + kd]):
                raise _Skip
            nz = nonzero(k)
            for j in range(kd):
                adv.append((d + j, nz[:, j].contiguous()))
            d += kd
        else:
            adv.append((d, k.to(tp.int64) if k.dtype != tp.int64 else k))
            d += 1
    if not adv:
        raise _Skip
    return v, adv


def getitem(t, key):
    """x[key] for an advanced key: index tensors (int64, int32; several of
    them broadcast together), bool masks anywhere (their True coordinates),
    lists, mixed with ints, slices, None and Ellipsis. Eager's (torch's)
    placement: the broadcast index dims replace the indexed dims where
    those are adjacent, else lead the result. One synchronization checks
    the bounds (out of range: the host raises eager's IndexError)."""
    tp = _tp()
    try:
        return _simple_getitem(t, key)
    except _Skip:
        pass
    v, adv = _advanced(t, key)
    bad = None
    idxs = []
    for pos, ix in adv:
        n = v.shape[pos]
        b = ((ix < -n) | (ix >= n)).any()
        bad = b if bad is None else bad | b
        idxs.append(tp.where(ix < 0, ix + n, ix))
    if bool(bad.item()):
        raise _Skip
    try:
        idxs = list(tp.broadcast_tensors(*idxs)) if len(idxs) > 1 else idxs
    except Exception:  # noqa: BLE001 - shapes: eager's error from the host
        raise _Skip from None
    bshape = tuple(idxs[0].shape)
    pos = [p for p, _ in adv]
    if len(adv) == 1:
        p = pos[0]
        r = v.index_select(p, idxs[0].reshape(-1))
        return r.reshape(tuple(v.shape[:p]) + bshape + tuple(v.shape[p + 1:]))
    rest = [i for i in range(v.dim()) if i not in pos]
    vp = v.permute(pos + rest)
    sizes = [v.shape[p] for p in pos]
    lin = None
    for j, ix in enumerate(idxs):
        term = ix * math.prod(sizes[j + 1:])
        lin = term if lin is None else lin + term
    rshape = tuple(vp.shape[len(pos):])
    flat = vp.reshape((math.prod(sizes),) + rshape)
    r = flat.index_select(0, lin.reshape(-1)).reshape(bshape + rshape)
    p0 = pos[0]
    if pos == list(range(p0, p0 + len(pos))) and p0 > 0 and bshape:
        nb = len(bshape)
        r = r.movedim(list(range(nb)), list(range(p0, p0 + nb))).contiguous()
    return r


def _fill_value(t, value):
    """value (a number or a 0-d tensor) as t's dtype would take it, or
    _Skip where NumPy's cast rules differ (the host decides)"""
    tp = _tp()
    if _is_t(value) and value.dim() == 0 and (value.device == t.device or not value.is_cuda):
        value = value.item()
    if isinstance(value, (bool, int, float)):
        ok = (t.dtype.is_floating_point or (t.dtype != tp.bool and not isinstance(value, float))
              or isinstance(value, bool))
        if not ok:
            raise _Skip
    return value


def setitem(t, key, value):
    """x[mask] = number (or 0-d tensor): masked_fill_ with the mask
    broadcast over the rest; x[mask] = tensor: its rows (broadcast to
    (count, rest), t's dtype) written to the True rows of a contiguous x;
    any other advanced key: the element offsets it selects (the same key
    applied to an address tensor of t's layout), the value broadcast to
    them and converted to t's dtype, one scatter kernel (with repeated
    indices one of the writes wins, as torch's CUDA index_put_)"""
    tp = _tp()
    value = _fill_value(t, value)
    try:
        return _simple_setitem(t, key, value)
    except _Skip:
        pass
    if _dt(t) not in K.DTYPES:
        raise _Skip
    n = t.numel()
    span = 0 if n == 0 else 1 + sum((a - 1) * st for a, st in zip(t.shape, t.stride()))
    addr = tp.arange(span, dtype=tp.int64, device=t.device).as_strided(
        tuple(t.shape), t.stride(), 0)
    where = getitem(addr, key).contiguous()
    if isinstance(value, (bool, int, float)):
        value = tp.full((), value, dtype=t.dtype, device=t.device)
    if not _is_t(value) or value.device != t.device:
        raise _Skip
    try:
        src = value.expand(tuple(where.shape))
    except Exception:  # noqa: BLE001 - shapes: the host raises eager's error
        raise _Skip from None
    src = src.to(t.dtype).contiguous() if src.dtype != t.dtype else src.contiguous()
    count = where.numel()
    if count:
        dt = _dt(t)
        K.launch("put_at", dt, f"put_at_{dt}", count, t.data_ptr(), where, src, count)
    return None


def _simple_setitem(t, key, value):
    tp = _tp()
    key = _one_key(key, t)
    if key.dtype != tp.bool:
        raise _Skip
    if isinstance(value, (bool, int, float)):
        k = key.dim()
        if k == 0 or k > t.dim() or tuple(key.shape) != tuple(t.shape[:k]):
            raise _Skip
        t.masked_fill_(key.reshape(tuple(key.shape) + (1,) * (t.dim() - k)), value)
        return None
    if not _is_t(value) or value.device != t.device or value.dtype != t.dtype \
            or not t.is_contiguous() or _dt(t) not in K.DTYPES:
        raise _Skip
    rows, rest = _mask_rows(key, t)
    count = rows.numel()
    try:
        src = value.expand((count,) + rest).contiguous()
    except Exception:  # noqa: BLE001 - shapes: the host raises eager's error
        raise _Skip from None
    inner = math.prod(rest)
    dt = _dt(t)
    K.launch("put_rows", dt, f"put_rows_{dt}", count * inner, t, rows, src, count, inner)
    return None


# ------------------------------------------------- conversions and copies

def _strides_meta(shape, *stride_lists, like):
    """the cast kernel's (meta tensor, nd): sizes then each stride list"""
    tp = _tp()
    vals = list(shape)
    for st in stride_lists:
        vals += list(st)
    return tp.tensor(vals, dtype=tp.int64).to(like.device), len(shape)


def _contig_strides(shape):
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(st))


_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _cast_pair(src, dst, isz):
    """the cast kernel's (src, dst) names: a copy within one dtype moves
    bits (NaN payloads kept, as the host's copy)"""
    if src == dst:
        return _BITS[isz], _BITS[isz]
    if not K.cast_ok(src, dst):
        raise _Skip
    return src, dst


def to_dtype(t, dtype):
    """t converted to dtype (a contiguous copy; same dtype: clone), read
    through t's strides: no .contiguous() here, which comes back to this"""
    tp = _tp()
    src, dst = _cast_pair(_dt(t), K.dtype_name(dtype), t.element_size())
    shape = tuple(t.shape)
    out = _empty(shape, dtype, t)
    n = t.numel()
    if n == 0:
        return out
    if t.is_contiguous():
        meta, nd = out, 0
    else:
        meta, nd = _strides_meta(shape, t.stride(), _contig_strides(shape), like=t)
    K.launch("cast", (src, dst), f"cast_{src}_{dst}", n, t, out, meta, nd, n)
    return out


def _span(t):
    """[first, last] byte address t can reach"""
    isz = t.element_size()
    hi = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0)
    return t.data_ptr(), t.data_ptr() + hi * isz + isz - 1


def _overlap(a, b):
    x, y = _span(a), _span(b)
    return x[0] <= y[1] and y[0] <= x[1]


def _non_overlapping(t):
    """no two elements of t share memory (dims by stride: each stride
    reaches past the previous dim's extent)"""
    pairs = [(st, n) for n, st in zip(t.shape, t.stride()) if n > 1]
    pairs.sort()
    reach = 1
    for st, n in pairs:
        if st < reach:
            return False
        reach = st * n
    return True


def copy_into(dst, src):
    """dst[...] = src (a tensor of any dtype broadcast to dst, or a
    number), converted and written through dst's strides in one kernel"""
    tp = _tp()
    if dst.numel() == 0:
        return None
    last_wins = not _non_overlapping(dst)
    if last_wins and any(st == 0 and n > 1 for n, st in zip(dst.shape, dst.stride())):
        raise _Skip                      # an expanded dst: eager's error from the host
    if isinstance(src, (bool, int, float)) and not _is_t(src):
        if isinstance(src, float) and not dst.dtype.is_floating_point:
            raise _Skip
        if not isinstance(src, bool) and dst.dtype == tp.bool:
            raise _Skip
        src = tp.full((), src, dtype=dst.dtype)
    if not _is_t(src):
        raise _Skip
    if src.device != dst.device:
        src = src.to(dst.device)
    sd, dd = _cast_pair(_dt(src), _dt(dst), dst.element_size())
    try:
        s = src.expand(tuple(dst.shape))
    except Exception:  # noqa: BLE001 - the host raises eager's error
        raise _Skip from None
    if src.numel() and _overlap(s, dst):
        s = s.clone()                    # overlapping: read a copy
    if last_wins:
        _copy_last_wins(dst, s)
        return None
    shape = tuple(dst.shape)
    meta, nd = _strides_meta(shape, s.stride(), dst.stride(), like=dst)
    n = dst.numel()
    K.launch("cast", (sd, dd), f"cast_{sd}_{dd}", n, s, dst, meta, nd, n)
    return None


def _copy_last_wins(dst, s):
    """dst[...] = s where dst's elements share memory (an as_strided view):
    at each address the element written last by eager's sequential copy,
    which walks dst's dims by stride, the largest outermost (ties in dim
    order), as torch's TensorIterator orders them"""
    tp = _tp()
    order = sorted(range(dst.dim()), key=lambda d: -dst.stride()[d])
    dst, s = dst.permute(order), s.permute(order)
    n = dst.numel()
    span = 1 + sum((a - 1) * st for a, st in zip(dst.shape, dst.stride()))
    off = tp.arange(span, dtype=tp.int64, device=dst.device).as_strided(
        tuple(dst.shape), dst.stride(), 0).contiguous()
    src = to_dtype(s, dst.dtype) if s.dtype != dst.dtype else s.contiguous()
    win = tp.zeros(span, dtype=tp.int64, device=dst.device)
    K.launch("last_writer", None, "last_writer", n, off, win, n)
    dt = _dt(dst)
    K.launch("put_last", dt, f"put_last_{dt}", n, dst.data_ptr(), off, win, src, n)


def device_op(what, t, key=None, value=None):
    """the tensor room's hook for what it would otherwise do through a host
    copy of a CUDA tensor: "getitem" (advanced index key) -> result,
    "setitem" -> None, "to" (key: the dtype) -> the converted copy, "copy"
    (key: the source) -> None; NotImplemented for what this does not cover
    (the host serves it)"""
    prev = _C.is_grad_enabled()
    _C._set_grad_enabled(False)
    try:
        if what == "getitem":
            r = getitem(t, key)
        elif what == "setitem":
            r = setitem(t, key, value)
        elif what == "to":
            r = to_dtype(t, key)
        elif what == "copy":
            r = copy_into(t, key)
        else:
            return NotImplemented
        on_device[what] = on_device.get(what, 0) + 1
        return r
    except _Skip:
        return NotImplemented
    finally:
        _C._set_grad_enabled(prev)


on_device = {}    # what -> calls of device_op served on the device (tests)


# ------------------------------------------- more compositions and copies

def flip(input, *dims, **kw):
    """one strided copy: the source read from its last element along each
    flipped dim with that stride negated (an address passed as an int)"""
    if "dims" in kw:
        dims = (kw.pop("dims"),)
    if kw:
        raise _Skip
    nd = input.dim()
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        # an empty list flips nothing (torch's flip(x, []))
        dims = tuple(dims[0])
    ds = [_wrap_dim(d, nd) for d in dims]
    if len(set(ds)) != len(ds):
        raise _Skip                      # eager's error
    shape = tuple(input.shape)
    out = _empty(shape, input.dtype, input)
    n = input.numel()
    if n == 0:
        return out
    isz = input.element_size()
    st = list(input.stride())
    base = input.data_ptr()
    for d in ds:
        base += (shape[d] - 1) * st[d] * isz
        st[d] = -st[d]
    a, b = _cast_pair(_dt(input), _dt(input), isz)
    meta, k = _strides_meta(shape, st, _contig_strides(shape), like=input)
    K.launch("cast", (a, b), f"cast_{a}_{b}", n, base, out, meta, k, n)
    return out


def _broadcast(sa, sb):
    n = max(len(sa), len(sb))
    sa, sb = (1,) * (n - len(sa)) + tuple(sa), (1,) * (n - len(sb)) + tuple(sb)
    out = []
    for x, y in zip(sa, sb):
        if x != y and 1 not in (x, y):
            raise _Skip                  # eager's error
        out.append(y if x == 1 else x)
    return tuple(out)


def masked_select(input, mask):
    """the elements where the (broadcast) mask is True, 1-D: nonzero of the
    flat mask, index_select of the flat input (eager's value gate, here one
    synchronization for the count)"""
    tp = _tp()
    if not _is_t(mask) or mask.dtype != tp.bool or mask.device != input.device:
        raise _Skip
    shape = _broadcast(input.shape, mask.shape)
    x = input.expand(shape).reshape(-1)
    rows = nonzero(mask.expand(shape).reshape(-1))[:, 0].contiguous()
    return x.index_select(0, rows)


def one_hot(input, num_classes=-1):
    """num_classes=-1: the class count from the data (one synchronization),
    then the generated kernel of one_hot(input, count)"""
    tp = _tp()
    if (isinstance(num_classes, bool) or num_classes != -1 or not _is_t(input)
            or input.dtype != tp.int64 or input.numel() == 0):
        raise _Skip
    if int(input.min().item()) < 0:
        raise _Skip                      # eager's error
    return tp.nn.functional.one_hot(input, int(input.max().item()) + 1)


def _inplace_twin(base):
    """op_(x, ...) as x.copy_(op(x, ...)): for the in-place ops whose
    out-of-place twin has a CUDA path and which the lowering does not take
    in place"""
    def fn(input, *args, **kwargs):
        if not _is_t(input):
            raise _Skip
        r = getattr(input, base)(*args, **kwargs)
        input.copy_(r)
        return input
    fn.__name__ = base + "_"
    return fn


OPS = {
    "sort": sort, "argsort": argsort, "topk": topk, "median": median,
    "cumsum": cumsum, "cumprod": cumprod, "nonzero": nonzero, "unique": unique,
    "index_add": index_add, "index_add_": index_add_,
    "isclose": isclose, "allclose": allclose, "diff": diff, "repeat": repeat,
    "roll": roll, "einsum": einsum, "flip": flip, "masked_select": masked_select,
    "one_hot": one_hot, "repeat_interleave": repeat_interleave,
    "as_strided_scatter": as_strided_scatter,
}
for _b in ("cumsum", "cumprod", "scatter", "scatter_add", "scatter_reduce", "index_copy",
           "index_fill"):
    OPS[_b + "_"] = _inplace_twin(_b)


_SIGS = {}


def run(name, args, kwargs):
    """OPS[name](*args, **kwargs), or NotImplemented where it does not
    cover the arguments (a TypeError binding them included)."""
    fn = OPS.get(name)
    if fn is None:
        return NotImplemented
    sig = _SIGS.get(name)
    if sig is None:
        sig = _SIGS[name] = inspect.signature(fn)
    try:
        sig.bind(*args, **kwargs)
    except TypeError:
        return NotImplemented            # eager raises its own TypeError
    try:
        return fn(*args, **kwargs)
    except _Skip:
        return NotImplemented
