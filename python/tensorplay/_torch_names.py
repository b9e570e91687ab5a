"""Names a PyTorch user reaches for that tensorplay lacked: torch's aliases
(divide, multiply, concat, arccos, ...) and small composites (dot, outer,
addmm, addcmul, nansum, logaddexp, xlogy, tile, logsigmoid, glu, group_norm,
binary_cross_entropy, ...), with torch's semantics and error messages.

Every composite is written with op-table ops only, so it runs eagerly on
the ops' NumPy kernels, differentiates through their formulas, and under
tp.compile traces into those ops (native; no fallback kernel): the plain
functions are inlined when the tracer calls them with proxies, and each
Tensor method added here is registered as a trace-time decomposition under
its name (a proxy's method call would otherwise record an opaque node).

Aliases are the same objects as their targets (``tp.divide is tp.div``),
so the tracer and the op table see the original op."""
import builtins as _b
import math

from tensorplay import _C
from tensorplay import _tensor as _tensor_mod

_TENSORS = (_C.Tensor, _C.Proxy) if hasattr(_C, "Proxy") else (_C.Tensor,)


def _tp():
    import tensorplay
    return tensorplay


def _F():
    import tensorplay.functional as F
    return F


def _is_t(x):
    return isinstance(x, _TENSORS)


def _check_t(x, fname, argname, pos):
    if not _is_t(x):
        raise TypeError(f"{fname}(): argument '{argname}' (position {pos}) must be "
                        f"Tensor, not {type(x).__name__}")


def _float_of(x):
    """x promoted to the default float dtype if it is not floating."""
    return x if x.is_floating_point() else x.to(_tp().get_default_dtype())


# ------------------------------------------------------------ linear algebra

def dot(input, other):
    """dot(input (n,), other (n,)) -> 0-d tensor: the inner product of two
    1-D tensors of the same dtype. RuntimeError: not 1-D, sizes differ,
    dtypes differ (torch's wording)."""
    _check_t(input, "dot", "input", 1)
    _check_t(other, "dot", "tensor", 2)
    if input.dim() != 1 or other.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.dim()}D and "
                           f"{other.dim()}D tensors")
    if input.dtype != other.dtype:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found "
                           f"{_title(input.dtype)} and {_title(other.dtype)}")
    n, m = int(input.shape[0]), int(other.shape[0])
    if n != m:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{n}] and src [{m}] "
                           f"to have the same number of elements, but got {n} and {m} "
                           f"elements respectively")
    return input.matmul(other)


vdot = dot


def inner(input, other):
    """inner(input (..., k), other (..., k)) -> input.shape[:-1] +
    other.shape[:-1]: sums of products over the last dims (a product with
    a 0-d operand)."""
    _check_t(input, "inner", "input", 1)
    _check_t(other, "inner", "other", 2)
    if input.dim() == 0 or other.dim() == 0:
        return input * other
    k1, k2 = int(input.shape[-1]), int(other.shape[-1])
    if k1 != k2:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors "
                           f"but got shapes {list(input.shape)} and {list(other.shape)}")
    a = input.reshape(-1, k1)
    b = other.reshape(-1, k2)
    return a.matmul(b.t()).reshape(tuple(input.shape[:-1]) + tuple(other.shape[:-1]))


def outer(input, vec2):
    """outer(input (n,), vec2 (m,)) -> (n, m): input[i] * vec2[j]."""
    _check_t(input, "outer", "input", 1)
    _check_t(vec2, "outer", "vec2", 2)
    for name, t in (("self", input), ("vec2", vec2)):
        if t.dim() != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {name}, but got {t.dim()}-D")
    return input.unsqueeze(1) * vec2


ger = outer


def _scaled_sum(input, prod, beta, alpha):
    """beta * input + alpha * prod, torch's way: beta == 0 ignores input's
    values (NaN included), alpha == 1 / beta == 1 multiply nothing."""
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        return prod + _tp().zeros_like(input)
    return prod + (input if beta == 1 else input * beta)


def _need_dim(t, n, fname, argname):
    if t.dim() != n:
        raise RuntimeError(f"{argname} must be a {n}D tensor")


def addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (mat1 (n, k) @ mat2 (k, m)); input broadcasts
    to (n, m)."""
    _check_t(input, "addmm", "input", 1)
    _need_dim(mat1, 2, "addmm", "mat1")
    _need_dim(mat2, 2, "addmm", "mat2")
    from tensorplay._ops import _mm_bias_check
    if isinstance(input, _tp().Tensor):
        _mm_bias_check(input, mat2)
    return _out(_scaled_sum(input, mat1.matmul(mat2), beta, alpha), out, "addmm")


def addmv(input, mat, vec, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (mat (n, m) @ vec (m,))."""
    _check_t(input, "addmv", "input", 1)
    if mat.dim() != 2 or vec.dim() != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {input.dim()}, "
                           f"{mat.dim()}, {vec.dim()}")
    return _out(_scaled_sum(input, mat.matmul(vec), beta, alpha), out, "addmv")


def addbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * sum_b batch1[b] @ batch2[b]."""
    _need_dim(batch1, 3, "addbmm", "batch1")
    _need_dim(batch2, 3, "addbmm", "batch2")
    return _out(_scaled_sum(input, batch1.matmul(batch2).sum(0), beta, alpha), out, "addbmm")


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (batch1 (b, n, k) @ batch2 (b, k, m))."""
    _need_dim(batch1, 3, "baddbmm", "batch1")
    _need_dim(batch2, 3, "baddbmm", "batch2")
    return _out(_scaled_sum(input, batch1.matmul(batch2), beta, alpha), out, "baddbmm")


def addr(input, vec1, vec2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * outer(vec1, vec2)."""
    return _out(_scaled_sum(input, outer(vec1, vec2), beta, alpha), out, "addr")


def trace(input):
    """The sum of a 2-D tensor's main diagonal (integers give int64)."""
    _check_t(input, "trace", "input", 1)
    if input.dim() != 2:
        raise RuntimeError("trace: expected a matrix, but got tensor with dim "
                           f"{input.dim()}")
    return input.diagonal().sum()


def diag(input, diagonal=0):
    """diag(1-D (n,)) -> the (n+|k|, n+|k|) matrix with input on diagonal
    k; diag(2-D) -> a copy of diagonal k."""
    _check_t(input, "diag", "input", 1)
    tp = _tp()
    if input.dim() == 2:
        return input.diagonal(diagonal).clone()
    if input.dim() != 1:
        raise RuntimeError("diag(): Supports 1D or 2D tensors. Got "
                           f"{input.dim()}D")
    k = int(diagonal)
    n = int(input.shape[0]) + _b.abs(k)
    rows = tp.arange(n).reshape(n, 1)
    cols = tp.arange(n).reshape(1, n)
    hit = (cols - rows) == k
    # the value of diagonal k at row i is input[i] (k >= 0) or input[i + k]
    src = tp.arange(n) if k >= 0 else tp.arange(n) + k
    idx = src.clamp(0, _b.max(int(input.shape[0]) - 1, 0))
    vals = input.index_select(0, idx) if int(input.shape[0]) else tp.zeros(n, dtype=input.dtype)
    return tp.where(hit, vals.reshape(n, 1), tp.zeros((), dtype=input.dtype))


# ------------------------------------------------------------ pointwise

def addcmul(input, tensor1, tensor2, *, value=1, out=None):
    """input + value * tensor1 * tensor2 (broadcast)."""
    _check_t(input, "addcmul", "input", 1)
    prod = tensor1 * tensor2
    return _out(input + (prod if value == 1 else prod * value), out, "addcmul")


def addcdiv(input, tensor1, tensor2, *, value=1, out=None):
    """input + value * tensor1 / tensor2 (true division; integer tensor1
    and tensor2 raise like torch)."""
    _check_t(input, "addcdiv", "input", 1)
    if (_is_t(tensor1) and not tensor1.is_floating_point()
            and _is_t(tensor2) and not tensor2.is_floating_point()):
        raise RuntimeError("Integer division with addcdiv is no longer supported, and in a "
                           "future  release addcdiv will perform a true division of tensor1 "
                           "and tensor2. The historic addcdiv behavior can be implemented "
                           "as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) "
                           "for integer inputs and as (input + value * tensor1 / tensor2) "
                           "for float inputs. The future addcdiv behavior is just the latter "
                           "implementation: (input + value * tensor1 / tensor2), for all "
                           "dtypes.")
    q = tensor1 / tensor2
    return _out(input + (q if value == 1 else q * value), out, "addcdiv")


def logaddexp(input, other):
    """log(exp(input) + exp(other)), without overflow; equal infinities
    give themselves."""
    tp = _tp()
    m = tp.maximum(input, other)
    r = m + (-(input - other).abs()).exp().log1p()
    return tp.where(m.isinf().logical_and(input == other), m, r)


def logaddexp2(input, other):
    """log2(2**input + 2**other), without overflow."""
    tp = _tp()
    m = tp.maximum(input, other)
    r = m + (-(input - other).abs() * math.log(2.0)).exp().log1p() / math.log(2.0)
    return tp.where(m.isinf().logical_and(input == other), m, r)


def _float_result(input, other):
    """torch's result dtype of xlogy/copysign: the operands' promotion, the
    default float dtype when that is integral or bool (Python scalars take
    part as torch's wrapped numbers)."""
    tp = _tp()
    dt = _result_type(input, other)
    return dt if dt.is_floating_point else tp.get_default_dtype()


def _result_type(*xs):
    """tp.result_type, also of proxies (a traced tensor stands in as an
    empty tensor of its dtype and rank: promotion reads only those)."""
    tp = _tp()
    return tp.result_type(*[tp.empty([0] * x.dim() if x.dim() else [], dtype=x.dtype)
                            if _is_t(x) and not isinstance(x, _C.Tensor) else x for x in xs])


def _as_tensor_of(x, dt):
    tp = _tp()
    return x.to(dt) if _is_t(x) else tp.tensor(x, dtype=dt)


def xlogy(input, other):
    """input * log(other), 0 where input is 0 (unless other is NaN). The
    result dtype is the operands' promoted dtype (the default float dtype
    for integers), as torch's."""
    tp = _tp()
    dt = _float_result(input, other)
    input, other = _as_tensor_of(input, dt), _as_tensor_of(other, dt)
    r = input * other.log()
    r = tp.where(input == 0, tp.zeros((), dtype=r.dtype), r)
    return tp.where(other.isnan(), other, r)


def copysign(input, other):
    """|input| with the sign bit of other (a NaN's sign bit too); the result
    dtype is the operands' promoted dtype, the default float dtype for
    integers and bool, as torch's."""
    tp = _tp()
    if not _is_t(input):
        raise TypeError("copysign(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    dt = _float_result(input, other)
    a, b = _as_tensor_of(input, dt), _as_tensor_of(other, dt)
    m = a.abs()
    return tp.where(b.signbit(), -m, m)


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """Drop all but the first of each run of equal consecutive elements
    (dim=None: of the flattened input; dim=d: of consecutive equal slices
    along d). NaN never equals NaN, so each NaN stays; -0.0 equals 0.0.
    Returns output, or a tuple (output, inverse?, counts?): inverse (int64)
    maps each element (dim=None: input's shape) or slice (dim: (size,)) to
    its run, counts (int64) is each run's length. The output's length
    depends on the values (a traced call is not native)."""
    tp = _tp()
    if not _is_t(input):
        raise TypeError("unique_consecutive(): argument 'input' (position 1) must be Tensor, "
                        f"not {type(input).__name__}")
    if dim is None:
        x = input.reshape(-1)
        n = x.shape[0]
        new = x[1:] != x[:-1] if n > 1 else None
    else:
        if input.dim() == 0:
            raise IndexError("Dimension specified as " + str(dim) + " but tensor has no "
                             "dimensions")
        d = dim + input.dim() if dim < 0 else dim
        if not 0 <= d < input.dim():
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-input.dim()}, {input.dim() - 1}], but got {dim})")
        x = input.movedim(d, 0)
        n = x.shape[0]
        new = None
        if n > 1:
            ne = (x[1:] != x[:-1]).reshape(n - 1, -1)
            new = ne.any(1) if ne.shape[1] else tp.zeros(n - 1, dtype=tp.bool)
    if n == 0:
        keep = tp.zeros(0, dtype=tp.bool)
    else:
        first = tp.ones(1, dtype=tp.bool)
        keep = first if new is None else tp.cat([first, new])
    out = x[keep]
    if dim is not None:
        out = out.movedim(0, d)
    res = [out]
    if return_inverse:
        inv = keep.to(tp.int64).cumsum(0) - 1
        res.append(inv.reshape(tuple(input.shape)) if dim is None else inv)
    if return_counts:
        starts = keep.nonzero().reshape(-1)
        ends = tp.cat([starts[1:], tp.tensor([n], dtype=tp.int64)])
        res.append(ends - starts)
    return res[0] if len(res) == 1 else tuple(res)


def logit(input, eps=None):
    """log(p / (1 - p)); with eps, p is clamped to [eps, 1 - eps] first."""
    x = _float_of(input)
    if eps is not None:
        x = x.clamp(eps, 1 - eps)
    return (x / (1 - x)).log()


def hypot(input, other):
    """sqrt(input**2 + other**2) without overflow; an infinity gives inf.
    Integer/bool operands of an integral promotion raise torch's
    NotImplementedError."""
    tp = _tp()
    dt = _result_type(input, other)
    if not dt.is_floating_point:
        raise NotImplementedError(f'"hypot_cpu" not implemented for '
                                  f"'{_TITLE_NAMES.get(str(dt).split('.')[-1], str(dt))}'")
    a, b = input.abs(), other.abs()
    hi = tp.maximum(a, b).detach()
    # a constant scale (detached: the gradient stays input / result)
    s = tp.where(hi == 0, tp.ones((), dtype=hi.dtype), hi)
    r = s * ((input / s) ** 2 + (other / s) ** 2).sqrt()
    return tp.where(a.isinf().logical_or(b.isinf()), math.inf, r)


def _title_of(dt):
    n = str(dt).split(".")[-1]
    return {"float32": "Float", "float64": "Double", "float16": "Half",
            "bfloat16": "BFloat16"}.get(n, _TITLE_NAMES.get(n, n))


def _wdim(d, n, name=None):
    if not -_b.max(n, 1) <= d < _b.max(n, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-_b.max(n, 1)}, {_b.max(n, 1) - 1}], but got {d})")
    return d % _b.max(n, 1)


def tensor_split(input, indices_or_sections, dim=0):
    """Split into n nearly equal parts (the first size % n get one more)
    or at the given indices, along dim; views."""
    _check_t(input, "tensor_split", "input", 1)
    d = _wdim(dim, input.dim())
    size = int(input.shape[d])
    if _is_t(indices_or_sections):
        ios = indices_or_sections
        if ios.dim() == 0:
            indices_or_sections = int(ios.item())
        else:
            indices_or_sections = [int(v) for v in ios.tolist()]
    if isinstance(indices_or_sections, int):
        n = indices_or_sections
        if n <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {n}")
        q, r = divmod(size, n)
        bounds, start = [], 0
        for k in range(n):
            stop = start + q + (1 if k < r else 0)
            bounds.append((start, stop))
            start = stop
    else:
        idx = [int(i) for i in indices_or_sections]
        bounds, start = [], 0
        for i in idx + [size]:
            a = _b.min(_b.max(start, 0), size)
            b = _b.min(_b.max(i if i >= 0 else i + size, a), size)
            bounds.append((a, b))
            start = i if i >= 0 else i + size
    return tuple(input.narrow(d, a, b - a) for a, b in bounds)


def take(input, index):
    """input.flatten()[index] with negative indices counted from the end;
    the result has index's shape."""
    _check_t(input, "take", "input", 1)
    n = input.numel()
    flat = input.reshape(-1)
    i = index.reshape(-1)
    if i.numel() and n == 0:
        raise IndexError("take(): tried to take from an empty tensor")
    return flat[i].reshape(tuple(index.shape))


def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """p-norm distances between the rows of x1 (..., P, M) and x2 (..., R,
    M): (..., P, R)."""
    if x1.dim() < 2 or x2.dim() < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.dim()}D")
    if int(x1.shape[-1]) != int(x2.shape[-1]):
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: "
                           f"{int(x1.shape[-1])} X2: {int(x2.shape[-1])}")
    if p < 0:
        raise RuntimeError(f"cdist only supports non-negative p values")
    d = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()
    if p == 0:
        return (d != 0).to(d.dtype).sum(-1)
    if p == float("inf"):
        return d.amax(-1) if int(d.shape[-1]) else d.sum(-1)
    if p == 1:
        return d.sum(-1)
    if p == 2:
        return (d * d).sum(-1).sqrt()
    return (d ** p).sum(-1) ** (1.0 / p)


def bincount(input, weights=None, minlength=0):
    """Counts of each value 0..max(input) in a 1-D non-negative integer
    tensor (at least minlength bins); with weights, their sums (float)."""
    tp = _tp()
    if input.dim() != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if input.is_floating_point():
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for "
                                  f"'{_title_of(input.dtype)}'")
    if input.dtype is tp.bool:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if input.numel() and int(input.min()) < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    n = _b.max(int(input.max()) + 1 if input.numel() else 0, int(minlength))
    idx = input.to(tp.int64)
    if weights is None:
        return tp.zeros(n, dtype=tp.int64).index_add(0, idx, tp.ones(int(input.shape[0]),
                                                                      dtype=tp.int64))
    wdt = weights.dtype if weights.is_floating_point() else tp.float64
    if weights.dtype is tp.float32:
        wdt = tp.float32
    return tp.zeros(n, dtype=wdt).index_add(0, idx, weights.to(wdt))


def histc(input, bins=100, min=0, max=0):
    """Histogram of input in `bins` equal bins over [min, max] (both 0:
    the data's range); values outside are ignored, NaN ignored."""
    tp = _tp()
    if not input.is_floating_point():
        raise NotImplementedError(f"\"histogram_cpu\" not implemented for "
                                  f"'{_title_of(input.dtype)}'")
    if bins <= 0:
        raise RuntimeError(f"torch.histc: bins must be > 0, but got {bins} for bins")
    lo, hi = float(min), float(max)
    x = input.reshape(-1)
    if lo == hi and x.numel():
        fin = x[x.isfinite()]
        if fin.numel():
            lo, hi = float(fin.min()), float(fin.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise RuntimeError(f"torch.histc: min {lo} must be less than or equal to max {hi}")
    keep = (x >= lo).logical_and(x <= hi)
    v = x[keep].to(tp.float64)
    i = ((v - lo) * bins / (hi - lo)).floor().to(tp.int64).clamp(0, bins - 1)
    return tp.zeros(bins, dtype=input.dtype).index_add(
        0, i, tp.ones(int(i.shape[0]), dtype=input.dtype))


def argwhere(input):
    """(n, ndim) int64 indices of the nonzero elements (torch.nonzero)."""
    return _tp().nonzero(input)


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """Tensors whose diagonals (offset, between dims dim1 and dim2 of the
    result) are input's last dim."""
    tp = _tp()
    n = int(input.shape[-1]) + _b.abs(int(offset))
    nd = input.dim() + 1
    d1, d2 = _wdim(dim1, nd), _wdim(dim2, nd)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    rows = tp.arange(n).reshape(n, 1)
    cols = tp.arange(n).reshape(1, n)
    hit = (cols - rows) == int(offset)
    k = int(offset)
    src = (tp.arange(n) if k >= 0 else tp.arange(n) + k).clamp(0, _b.max(int(input.shape[-1]) - 1, 0))
    vals = input.index_select(-1, src) if int(input.shape[-1]) else \
        tp.zeros(tuple(input.shape[:-1]) + (n,), dtype=input.dtype)
    # value of (row i, col j) on the diagonal: input[..., i] (k >= 0) or [..., i + k]
    out = tp.where(hit, vals.unsqueeze(-1), tp.zeros((), dtype=input.dtype))
    # out has (..., n_rows, n_cols); move them to d1, d2
    return out.movedim((-2, -1), (d1, d2)) if (d1, d2) != (nd - 2, nd - 1) else out


def rot90(input, k=1, dims=(0, 1)):
    """Rotate by 90 degrees k times in the plane of dims (from the first
    towards the second)."""
    dims = list(dims)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if input.dim() < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {input.dim()}")
    a, b = _wdim(dims[0], input.dim()), _wdim(dims[1], input.dim())
    if a == b:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {a} and "
                           f"dim1 = {b}")
    k = k % 4
    if k == 1:
        return input.flip([b]).transpose(a, b)
    if k == 2:
        return input.flip([a, b])
    if k == 3:
        return input.flip([a]).transpose(a, b)
    return input.clone()


def heaviside(input, values):
    """0 where input < 0, values where input == 0, 1 where input > 0
    (NaN gives 0); input and values of one dtype, as torch requires."""
    tp = _tp()
    if _is_t(values) and values.dtype != input.dtype:
        raise RuntimeError(f"heaviside is not yet implemented for tensors with different "
                           f"dtypes")
    z = tp.zeros((), dtype=input.dtype)
    r = tp.where(input > 0, tp.ones((), dtype=input.dtype), z)
    return tp.where(input == 0, values, r)


def equal(input, other):
    """True when both have the same shape and equal elements (NaN is never
    equal); dtypes may differ (values are compared)."""
    if tuple(input.shape) != tuple(other.shape):
        return False
    return bool((input == other).all())


def mv(input, vec):
    """Matrix (n, m) times vector (m,): (n,)."""
    if input.dim() != 2 or vec.dim() != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {input.dim()}, "
                           f"{vec.dim()}")
    return _tp().matmul(input, vec)


def cartesian_prod(*tensors):
    """Cartesian product of 1-D tensors: (prod(n_i), len(tensors)) (1 tensor: itself)."""
    tp = _tp()
    if len(tensors) == 1:
        return tensors[0]
    grids = tp.meshgrid(*tensors, indexing="ij")
    return tp.stack([g.reshape(-1) for g in grids], 1)


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """Trapezoid-rule integral of y along dim (spacing dx, default 1, or
    sample points x)."""
    d = _wdim(dim, y.dim())
    n = int(y.shape[d])
    if n == 0:
        return y.sum(d)
    left, right = y.narrow(d, 0, n - 1), y.narrow(d, 1, n - 1)
    if x is not None:
        xd = x if x.dim() == 1 else x
        if x.dim() == 1:
            dxs = (x[1:] - x[:-1]).reshape(tuple(-1 if i == d else 1 for i in range(y.dim())))
        else:
            dxs = x.narrow(d, 1, n - 1) - xd.narrow(d, 0, n - 1)
        return ((left + right) * dxs).sum(d) / 2
    h = 1.0 if dx is None else dx
    return (left + right).sum(d) * (h / 2)


trapz = trapezoid


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """Running trapezoid-rule integrals of y along dim (one fewer element)."""
    d = _wdim(dim, y.dim())
    n = int(y.shape[d])
    if n == 0:
        return y.narrow(d, 0, 0)
    left, right = y.narrow(d, 0, n - 1), y.narrow(d, 1, n - 1)
    if x is not None:
        if x.dim() == 1:
            dxs = (x[1:] - x[:-1]).reshape(tuple(-1 if i == d else 1 for i in range(y.dim())))
        else:
            dxs = x.narrow(d, 1, n - 1) - x.narrow(d, 0, n - 1)
        return ((left + right) * dxs / 2).cumsum(d)
    h = 1.0 if dx is None else dx
    return ((left + right) * (h / 2)).cumsum(d)


def vander(x, N=None, increasing=False):
    """Vandermonde matrix of 1-D x: columns x**(N-1) ... x**0 (increasing:
    x**0 first); N defaults to len(x)."""
    tp = _tp()
    if x.dim() != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = int(x.shape[0]) if N is None else int(N)
    if n < 0:
        raise RuntimeError("N must be non-negative.")
    dt = x.dtype if x.is_floating_point() or x.dtype is not tp.bool else tp.int64
    if not x.is_floating_point():
        dt = tp.int64
    if n == 0:
        return tp.zeros(int(x.shape[0]), 0, dtype=dt)
    cols = [tp.ones(int(x.shape[0]), dtype=dt)]
    for _ in range(n - 1):
        cols.append(cols[-1] * x.to(dt))
    out = tp.stack(cols, 1)
    return out if increasing else out.flip([1])


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Randomized leaky ReLU: negative inputs times a slope drawn from
    U(lower, upper) per element when training, (lower + upper) / 2 in eval."""
    tp = _tp()
    if training:
        # empty_like of the input: traced, it is a node of the graph, so the
        # compiled function draws new slopes on every call (a tp.empty made
        # inside the package is not recorded: its draw froze into a constant)
        slope = tp.empty_like(input).uniform_(lower, upper)
    else:
        slope = (lower + upper) / 2
    r = tp.where(input >= 0, input, input * slope)
    if inplace:
        with tp.no_grad():
            input.copy_(r)
        return input
    return r


def index_put(self, indices, values, accumulate=False):
    """A copy of self with self[indices] = values (indices: a tuple of
    index tensors, as advanced indexing); accumulate=True adds, duplicate
    indices adding up."""
    return index_put_(self.clone(), indices, values, accumulate)


def index_put_(self, indices, values, accumulate=False):
    """In place: self[indices] = values, or += with accumulate=True
    (duplicates accumulate, as torch's). Returns self."""
    tp = _tp()
    indices = tuple(indices)
    if not accumulate:
        self[indices] = values
        return self
    if any(i is None for i in indices) or len(indices) > self.dim():
        raise IndexError("too many indices for tensor of dimension " + str(self.dim()))
    idx = [i.nonzero(as_tuple=True) if i.dtype is tp.bool else (i,) for i in indices]
    idx = [t for group in idx for t in group]
    idx = [t.to(tp.int64) for t in tp.broadcast_tensors(*idx)]
    k = len(idx)
    lead = tuple(int(s) for s in self.shape[:k])
    lin = tp.zeros(tuple(idx[0].shape), dtype=tp.int64)
    for j, t in enumerate(idx):
        lin = lin * lead[j] + tp.where(t < 0, t + lead[j], t)
    rest = tuple(self.shape[k:])
    flat_vals = tp.broadcast_to(values.to(self.dtype) if _is_t(values) else
                                tp.tensor(values, dtype=self.dtype),
                                tuple(lin.shape) + rest).reshape((-1,) + rest)
    view = self.view((-1,) + rest)
    view.index_add_(0, lin.reshape(-1), flat_vals)
    return self


_TITLE_NAMES = {"bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short",
                "int32": "Int", "int64": "Long"}


def deg2rad(input):
    return _float_of(input) * (math.pi / 180.0)


def rad2deg(input):
    return _float_of(input) * (180.0 / math.pi)


def fmax(input, other):
    """maximum that ignores a NaN (NaN only where both are NaN)."""
    tp = _tp()
    return tp.where(input.isnan(), other, tp.where(other.isnan(), input,
                                                   tp.maximum(input, other)))


def fmin(input, other):
    """minimum that ignores a NaN (NaN only where both are NaN)."""
    tp = _tp()
    return tp.where(input.isnan(), other, tp.where(other.isnan(), input,
                                                   tp.minimum(input, other)))


def isposinf(input):
    return input == math.inf if input.is_floating_point() else input != input


def isneginf(input):
    return input == -math.inf if input.is_floating_point() else input != input


def signbit(input):
    """True where the sign bit is set (-0.0 included)."""
    tp = _tp()
    if not input.is_floating_point():
        return input < 0
    # -0.0: 1 / -0.0 = -inf
    return (input < 0).logical_or((input == 0).logical_and((1.0 / input) < 0))


def sgn(input):
    return input.sign()


def sinc(input):
    """sin(pi x) / (pi x), 1 at 0."""
    tp = _tp()
    x = _float_of(input)
    px = x * math.pi
    safe = tp.where(x == 0, tp.ones((), dtype=x.dtype), px)
    return tp.where(x == 0, tp.ones((), dtype=x.dtype), safe.sin() / safe)


def float_power(input, exponent):
    """input ** exponent in float64."""
    tp = _tp()
    a = input.to(tp.float64) if _is_t(input) else input
    b = exponent.to(tp.float64) if _is_t(exponent) else exponent
    return a ** b if _is_t(a) else tp.tensor(a, dtype=tp.float64) ** b


# ------------------------------------------------------------ reductions

def nansum(input, dim=None, keepdim=False, *, dtype=None):
    """sum that counts NaN as 0."""
    _check_t(input, "nansum", "input", 1)
    x = input
    if x.is_floating_point():
        x = _tp().where(x.isnan(), _tp().zeros((), dtype=x.dtype), x)
    if dim is None:
        return x.sum(dtype=dtype) if not keepdim else x.sum(
            tuple(range(x.dim())), keepdim=True, dtype=dtype)
    return x.sum(dim, keepdim=keepdim, dtype=dtype)


def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    """mean over the non-NaN elements (NaN where all are NaN)."""
    _check_t(input, "nanmean", "input", 1)
    if not input.is_floating_point():
        raise RuntimeError("nanmean(): expected input to have floating point or complex "
                           f"dtype but got {_title(input.dtype)}")
    tp = _tp()
    x = input if dtype is None else input.to(dtype)
    keep = x.isnan().logical_not()
    cnt = nansum(keep.to(x.dtype), dim, keepdim)
    return nansum(x, dim, keepdim) / cnt


def count_nonzero(input, dim=None):
    """The number of non-zero elements (over dim, int or tuple)."""
    _check_t(input, "count_nonzero", "input", 1)
    nz = input != 0
    if dim is None:
        return nz.sum()
    return nz.sum(dim)


def aminmax(input, *, dim=None, keepdim=False):
    """(min, max) as torch.return_types.aminmax, one reduction each."""
    _check_t(input, "aminmax", "input", 1)
    rt = _tp().return_types.aminmax
    if dim is None:
        if keepdim:
            dims = tuple(range(input.dim()))
            return rt(input.amin(dims, keepdim=True), input.amax(dims, keepdim=True))
        return rt(input.amin(), input.amax())
    return rt(input.amin(dim, keepdim=keepdim), input.amax(dim, keepdim=keepdim))


def msort(input):
    return input.sort(0).values


def take_along_dim(input, indices, dim=None):
    """input's values at indices along dim (broadcast in the other dims);
    dim None: along the flattened input."""
    tp = _tp()
    if dim is None:
        return input.reshape(-1).gather(0, indices.reshape(-1))
    nd = input.dim()
    d = dim % nd if nd else 0
    si, sx = list(input.shape), list(indices.shape)
    if len(si) != len(sx):
        raise RuntimeError("torch.take_along_dim(): input and indices should have the same "
                           f"number of dimensions, but got {len(si)} dimensions for input, "
                           f"and {len(sx)} dimensions for indices")
    bs = [_b.max(a, b) for a, b in zip(si, sx)]
    xs, ix = list(bs), list(bs)
    xs[d], ix[d] = si[d], sx[d]
    return input.expand(xs).gather(d, indices.expand(ix))


# ------------------------------------------------------------ shapes

def ravel(input):
    return input.reshape(-1)


def broadcast_shapes(*shapes):
    """The broadcast of the shapes (ints or sequences), as a Size."""
    tp = _tp()
    out = []
    for k, s in enumerate(shapes):
        s = (s,) if isinstance(s, int) else tuple(int(v) for v in s)
        if len(s) > len(out):
            out = [1] * (len(s) - len(out)) + out
        for i in range(1, len(s) + 1):
            a, b = out[-i], s[-i]
            if a == b or b == 1:
                continue
            if a == 1:
                out[-i] = b
                continue
            raise RuntimeError(f"Attempting to broadcast a dimension of length {b} at {-i}! "
                               f"Mismatching argument at index {k} had {tuple(s)}; but "
                               f"expected shape should be broadcastable to {out}")
    return tp.Size(out)


def broadcast_to(input, size):
    return input.expand(tuple(size))


def broadcast_tensors(*tensors):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    shape = broadcast_shapes(*[tuple(t.shape) for t in tensors])
    return tuple(t.expand(tuple(shape)) for t in tensors)


def tile(input, dims):
    """input repeated dims[i] times along each dim (dims padded with
    leading 1s to input's rank, or input's shape with leading 1s)."""
    if isinstance(dims, int):
        dims = (dims,)
    dims = tuple(int(d) for d in dims)
    if len(dims) < input.dim():
        dims = (1,) * (input.dim() - len(dims)) + dims
    shape = (1,) * (len(dims) - input.dim()) + tuple(int(v) for v in input.shape)
    # a view that puts a size-1 dim before each dim, expanded to the
    # repeat count and merged: repeat()'s values, traced as view ops
    # (native) instead of the repeat fallback
    inter = []
    big = []
    for r, n in zip(dims, shape):
        inter += [1, n]
        big += [r, n]
    x = input.reshape(inter).expand(big)
    return x.reshape([r * n for r, n in zip(dims, shape)])


def atleast_1d(*tensors):
    one = len(tensors) == 1 and not isinstance(tensors[0], (list, tuple))
    ts = tensors[0] if len(tensors) == 1 and not one else tensors
    out = tuple(t.reshape(1) if t.dim() == 0 else t for t in ts)
    return out[0] if one else out


def atleast_2d(*tensors):
    one = len(tensors) == 1 and not isinstance(tensors[0], (list, tuple))
    ts = tensors[0] if len(tensors) == 1 and not one else tensors
    out = tuple(t.reshape(1, 1) if t.dim() == 0 else t.unsqueeze(0) if t.dim() == 1 else t
                for t in ts)
    return out[0] if one else out


def atleast_3d(*tensors):
    one = len(tensors) == 1 and not isinstance(tensors[0], (list, tuple))
    ts = tensors[0] if len(tensors) == 1 and not one else tensors
    res = []
    for t in ts:
        if t.dim() == 0:
            t = t.reshape(1, 1, 1)
        elif t.dim() == 1:
            t = t.reshape(1, -1, 1)
        elif t.dim() == 2:
            t = t.unsqueeze(-1)
        res.append(t)
    return res[0] if one else tuple(res)


def hstack(tensors):
    ts = atleast_1d(tuple(tensors))
    return _tp().cat(list(ts), 0 if ts[0].dim() == 1 else 1)


def vstack(tensors):
    return _tp().cat(list(atleast_2d(tuple(tensors))), 0)


row_stack = vstack


def dstack(tensors):
    return _tp().cat(list(atleast_3d(tuple(tensors))), 2)


def column_stack(tensors):
    ts = [t.reshape(-1, 1) if t.dim() <= 1 else t for t in tensors]
    return _tp().cat(ts, 1)


def fliplr(input):
    if input.dim() < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return input.flip(1)


def flipud(input):
    if input.dim() < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return input.flip(0)


# ------------------------------------------------------------ nn.functional

def logsigmoid(input):
    """log(sigmoid(x)) = -softplus(-x): stable, and its gradient is
    sigmoid(-x) everywhere (min(x, 0) - log1p(exp(-|x|)) has the same
    values but differentiates to 1 instead of 0.5 at x = 0)."""
    _check_t(input, "logsigmoid", "input", 1)
    if not input.is_floating_point():
        raise NotImplementedError(f"\"log_sigmoid_forward\" not implemented for "
                                  f"'{_title(input.dtype)}'")
    return -_tp().nn.functional.softplus(-input)


def softsign(input):
    return input / (1 + input.abs())


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    return _F().softmax(-input if dtype is None else -input.to(dtype), dim)


def tanhshrink(input):
    return input - input.tanh()


def softshrink(input, lambd=0.5):
    """x - lambd above lambd, x + lambd below -lambd, 0 between."""
    tp = _tp()
    if lambd < 0:
        hi = tp.finfo(input.dtype).max
        raise RuntimeError(f"lambda must be in range [0, {hi:g}] for input dtype "
                           f"{_title(input.dtype)}, but found {lambd:g}")
    z = tp.zeros((), dtype=input.dtype)
    return tp.where(input > lambd, input - lambd, tp.where(input < -lambd, input + lambd, z))


def hardshrink(input, lambd=0.5):
    tp = _tp()
    return tp.where(input.abs() > lambd, input, tp.zeros((), dtype=input.dtype))


def glu(input, dim=-1):
    """a * sigmoid(b), a and b the halves of input along dim."""
    if input.dim() == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    d = dim % input.dim()
    n = int(input.shape[d])
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {n}")
    a, b = input.split(n // 2, d)
    return a * b.sigmoid()


def _reduce(r, reduction):
    if reduction == "none":
        return r
    if reduction == "sum":
        return r.sum()
    if reduction == "mean":
        return r.mean()
    raise ValueError(f"{reduction} is not a valid value for reduction")


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """-(t log x + (1 - t) log(1 - x)), each log clamped at -100 (torch's)."""
    from tensorplay._ops import _legacy_reduction
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_t(input, "binary_cross_entropy", "input", 1)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({_tp().Size(target.shape)}) that is different "
                         f"to the input size ({_tp().Size(input.shape)}) is deprecated. "
                         f"Please ensure they have the same size.")
    if isinstance(input, _C.Tensor) and input.numel() and (
            bool((input < 0).any()) or bool((input > 1).any())):
        raise RuntimeError("all elements of input should be between 0 and 1")
    r = -(target * input.log().clamp(min=-100)
          + (1 - target) * (1 - input).log().clamp(min=-100))
    if weight is not None:
        r = r * weight
    return _reduce(r, reduction)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """0.5 d^2 where |d| < delta, else delta (|d| - delta / 2)."""
    from tensorplay._ops import _warn_target_size
    _warn_target_size(input, target)
    d = (input - target).abs()
    r = _tp().where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))
    if weight is not None:
        r = r * weight
    return _reduce(r, reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean",
           log_target=False):
    """target * (log target - input) pointwise (input holds log-probs)."""
    from tensorplay._ops import _legacy_reduction
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if log_target:
        r = target.exp() * (target - input)
    else:
        r = xlogy(target, target) - target * input
    if reduction == "batchmean":
        return r.sum() / (int(input.shape[0]) if input.dim() else 1)
    return _reduce(r, reduction)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-05):
    """Normalizes each of num_groups channel groups of every sample
    (input (N, C, *)) to mean 0 / variance 1, then weight/bias per channel."""
    _check_t(input, "group_norm", "input", 1)
    if input.dim() < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received "
                           f"{input.dim()}")
    N, C = int(input.shape[0]), int(input.shape[1])
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"GroupNormKernelImpl\" not implemented for "
                                  f"'{_tensor_mod._TYPE_NAMES[input.dtype]}'")
    if C % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {list(input.shape)} and "
                           f"num_groups={num_groups}")
    x = input.reshape(N, num_groups, -1)
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    y = ((x - mu) / (var + eps).sqrt()).reshape(tuple(input.shape))
    cshape = (1, C) + (1,) * (input.dim() - 2)
    if weight is not None:
        y = y * weight.reshape(cshape)
    if bias is not None:
        y = y + bias.reshape(cshape)
    return y


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2 over the last len(normalized_shape) dims) + eps)
    * weight; eps None: the dtype's machine epsilon (torch's)."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    k = len(normalized_shape)
    if tuple(input.shape[input.dim() - k:]) != tuple(normalized_shape):
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input "
                           f"with shape [*, {', '.join(str(s) for s in normalized_shape)}], "
                           f"but got input of size{_tp().Size(input.shape)}")
    if eps is None:
        eps = _tp().finfo(input.dtype).eps
    dims = tuple(range(input.dim() - k, input.dim()))
    y = input * ((input * input).mean(dims, keepdim=True) + eps).rsqrt()
    return y * weight if weight is not None else y


def pairwise_distance(x1, x2, p=2.0, eps=1e-06, keepdim=False):
    """The p-norm of x1 - x2 + eps over the last dim."""
    return (x1 - x2 + eps).norm(p, -1, keepdim)


# ------------------------------------------------------------ helpers

def _title(dt):
    s = str(dt).split(".")[-1]
    return {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
            "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char",
            "uint8": "Byte", "bool": "Bool"}.get(s, s)


def _out(r, out, name):
    if out is None:
        return r
    from tensorplay._ops import _out_copy
    return _out_copy(out, r, name)


# ------------------------------------------------------------ installation

# torch's aliases: name -> the existing public name
ALIASES = {
    "divide": "div", "multiply": "mul", "subtract": "sub", "negative": "neg",
    "absolute": "abs", "arcsin": "asin", "arccos": "acos", "arctan": "atan",
    "arctan2": "atan2", "greater": "gt", "greater_equal": "ge", "less": "lt",
    "less_equal": "le", "not_equal": "ne", "concat": "cat", "concatenate": "cat",
    "fix": "trunc", "true_divide": "div", "clip": "clamp",
}

# new module-level functions of tensorplay
FUNCTIONS = [
    "dot", "vdot", "inner", "outer", "ger", "addmm", "addmv", "addbmm", "baddbmm", "addr",
    "trace", "diag", "addcmul", "addcdiv", "logaddexp", "logaddexp2", "xlogy", "logit",
    "hypot", "deg2rad", "rad2deg", "fmax", "fmin", "isposinf", "isneginf", "signbit", "sgn",
    "sinc", "float_power", "nansum", "nanmean", "count_nonzero", "aminmax", "msort",
    "take_along_dim", "ravel", "broadcast_shapes", "broadcast_to", "broadcast_tensors",
    "tile", "atleast_1d", "atleast_2d", "atleast_3d", "hstack", "vstack", "row_stack",
    "dstack", "column_stack", "fliplr", "flipud", "copysign", "unique_consecutive",
    "tensor_split", "take", "cdist", "bincount", "histc", "argwhere",
    "diag_embed", "rot90", "heaviside", "equal", "mv", "cartesian_prod", "trapezoid",
    "trapz", "cumulative_trapezoid", "vander",
]

# Tensor methods: name -> function(self, *args)
METHODS = [
    "dot", "vdot", "inner", "outer", "ger", "addmm", "addmv", "addbmm", "baddbmm", "addr",
    "trace", "diag", "addcmul", "addcdiv", "logaddexp", "logaddexp2", "xlogy", "logit",
    "hypot", "deg2rad", "rad2deg", "fmax", "fmin", "isposinf", "isneginf", "signbit", "sgn",
    "sinc", "float_power", "nansum", "nanmean", "count_nonzero", "aminmax", "msort",
    "take_along_dim", "ravel", "broadcast_to", "tile", "fliplr", "flipud", "copysign",
    "unique_consecutive", "tensor_split", "take", "bincount", "histc", "argwhere",
    "diag_embed", "rot90", "heaviside", "equal", "mv", "index_put", "index_put_",
]

# nn.functional
FUNCTIONAL = [
    "logsigmoid", "softsign", "softmin", "tanhshrink", "softshrink", "hardshrink", "glu",
    "binary_cross_entropy", "huber_loss", "kl_div", "group_norm", "rms_norm",
    "pairwise_distance", "rrelu",
]


def _method_alias(target):
    def call(self, *args, **kwargs):
        return getattr(self, target)(*args, **kwargs)
    return call


def _traced_new(name):
    """Tensor.new_zeros/new_ones/new_empty/new_full/new_tensor while
    tracing: the factory call with self's dtype and device (native),
    instead of an opaque method node."""
    method = getattr(_C.Tensor, name)

    def call(self, *args, **kwargs):
        if name == "new_tensor" and args and _is_t(args[0]):
            data = args[0]
            dt = kwargs.get("dtype") or self.dtype
            r = data.detach().clone().to(dt)
            return r.requires_grad_() if kwargs.get("requires_grad") else r
        return method(self, *args, **kwargs)
    return call


def install(tp_module, functional_module):
    """Puts the names on tensorplay, tensorplay.functional and Tensor, and
    registers the methods' trace-time decompositions. Never replaces a name
    that exists."""
    g = globals()
    added_tp, added_f = [], []
    rt = tp_module.return_types
    if not hasattr(rt, "aminmax"):
        import collections
        rt.aminmax = collections.namedtuple("aminmax", ["min", "max"])
    for name, target in ALIASES.items():
        if not hasattr(tp_module, name) and hasattr(tp_module, target):
            setattr(tp_module, name, getattr(tp_module, target))
            added_tp.append(name)
        if not hasattr(_C.Tensor, name) and hasattr(_C.Tensor, target):
            _C._tensor_install(name, getattr(_C.Tensor, target))
            _C._set_trace_decomposition(name, _method_alias(target))
    for name in FUNCTIONS:
        if not hasattr(tp_module, name):
            setattr(tp_module, name, g[name])
            added_tp.append(name)
    for name in METHODS:
        if not hasattr(_C.Tensor, name):
            _C._tensor_install(name, g[name])
            _C._set_trace_decomposition(name, g[name])
    for name in ("new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"):
        _C._set_trace_decomposition(name, _traced_new(name))
    for name in FUNCTIONAL:
        if not hasattr(functional_module, name):
            setattr(functional_module, name, g[name])
            added_f.append(name)
    return added_tp, added_f
