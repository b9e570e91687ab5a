"""torch's special functions, scans, order statistics and searches that are
rows of the op table (csrc/ops/ops.def): lgamma, digamma, polygamma,
erfinv, gcd, lcm, logcumsumexp, cummax, cummin, kthvalue, mode, nanmedian,
searchsorted, bucketize; and Tensor.unfold (a sliding-window view).

Each row has an eager implementation here (registered into the ops room,
run after autograd, which records the row's derivative column) and a
trace-time decomposition into op-table ops, so under tp.compile every one
of them is native (no fallback kernel, strict_native accepts it; on CUDA
the generic lowering serves them):

* lgamma / digamma / polygamma / erfinv: computed in float64 with the
  algorithms of torch's CPU kernels (ATen/native/Math.h: digamma's
  recurrence to 10 and asymptotic series, trigamma's, the Hurwitz zeta's
  Euler-Maclaurin sum, erfinv's rational guess and two Newton steps;
  lgamma: Lanczos (g=7, n=9) with the reflection formula), then rounded to
  the result dtype (integers give the default float dtype). Eagerly the
  same composition runs on the ops' kernels (grad off).
* gcd / lcm (integers): Euclid's steps as where/remainder; eagerly until
  every pair is done, traced unrolled to the dtype's worst case (a
  Fibonacci pair: 93 steps for int64).
* cummax / cummin, kthvalue, mode, nanmedian, logcumsumexp, searchsorted:
  eagerly NumPy kernels (O(n) scans, sorts, a vectorized binary search with
  torch's predicates); traced as fused O(n^2) (searchsorted: O(n*m))
  masked reductions and counts over a (..., n, n) broadcast that is never
  stored, the values taken with gather at the indices (so gradients reach
  the index torch's backward picks).
"""
import builtins as _b
import collections
import math

import numpy as np

from tensorplay import _C

_PROXY = getattr(_C, "Proxy", None)


def _tp():
    import tensorplay
    return tensorplay


def _is_proxy(x):
    return _PROXY is not None and isinstance(x, _PROXY)


def _traced(*xs):
    return any(_is_proxy(x) for x in xs)


def _title(dt):
    from tensorplay._torch_names import _title as t
    return t(dt)


def _check_t(x, fname, argname="input", pos=1):
    if not isinstance(x, _C.Tensor) and not _is_proxy(x):
        raise TypeError(f"{fname}(): argument '{argname}' (position {pos}) must be "
                        f"Tensor, not {type(x).__name__}")


def _wrap_dim(dim, nd):
    n = _b.max(nd, 1)
    if dim < -n or dim >= n:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-n}, {n - 1}], but got {dim})")
    return dim % n


class _NoGrad:
    def __enter__(self):
        self.prev = _C._set_grad_enabled(False)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self.prev)


def _float_dtype(x):
    tp = _tp()
    return x.dtype if x.is_floating_point() else tp.get_default_dtype()


# ================================================================ special functions
# All in float64; x is a float64 tensor (or proxy).

_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028,
            771.32342877765313, -176.61502916214059, 12.507343278686905,
            -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _lgamma64(x):
    tp = _tp()
    small = x < 0.5
    y = tp.where(small, 1.0 - x, x)
    a = tp.full_like(y, _LANCZOS[0])
    for i in range(1, 9):
        a = a + _LANCZOS[i] / (y + (i - 1))
    t = y + 6.5
    lg = (y - 0.5) * t.log() - t + a.log() + _HALF_LOG_2PI
    # reflection: lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x), with
    # |sin(pi x)| from x's distance to the nearest integer (exact), so
    # poles give exactly inf and x near a pole keeps its digits
    s = ((x - x.round()).abs() * math.pi).sin()
    refl = (math.pi / s).log() - lg
    r = tp.where(small, refl, lg)
    # lgamma(1) = lgamma(2) = 0 exactly (Lanczos leaves ~4e-16)
    r = tp.where((x == 1.0).logical_or(x == 2.0), 0.0, r)
    return tp.where(x.isinf(), math.inf, r)


_PSI_A = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
          -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
          8.33333333333333333333E-2)
_PSI_10 = 2.25175258906672110764


def _digamma_pos(x):
    """torch's calc_digamma for x >= 0 (x == 0 handled by the caller)."""
    tp = _tp()
    res = _tp().zeros_like(x)
    for _ in range(10):
        c = x < 10
        res = res - tp.where(c, 1.0 / tp.where(c, x, 1.0), 0.0)
        x = tp.where(c, x + 1, x)
    z = 1.0 / (x * x)
    p = tp.full_like(z, _PSI_A[0])
    for c in _PSI_A[1:]:
        p = p * z + c
    y = tp.where(x < 1.0e17, z * p, 0.0)
    r = res + x.log() - 0.5 / x - y
    return tp.where(x == 10, res + _PSI_10, r)


def _digamma64(x):
    tp = _tp()
    neg = x < 0
    pos = _digamma_pos(tp.where(neg, 1.0 - x, x))
    r = x - x.trunc()
    refl = pos - math.pi / (r * math.pi).tan()
    out = tp.where(neg, tp.where(x == x.trunc(), math.nan, refl), pos)
    # digamma(+-0) = -+inf (torch's copysign(inf, -x))
    zero = tp.where((1.0 / tp.where(x == 0, x, 1.0)) < 0, math.inf, -math.inf)
    return tp.where(x == 0, zero, out)


def _trigamma64(x):
    """torch's calc_trigamma."""
    tp = _tp()
    small = x < 0.5
    sp = (x * math.pi).sin()
    res = tp.where(small, -(math.pi * math.pi) / (sp * sp), 0.0)
    x = tp.where(small, 1.0 - x, x)
    for _ in range(6):
        res = res + 1.0 / (x * x)
        x = x + 1
    ixx = 1.0 / (x * x)
    res = res + (1 + 1 / (2 * x) + ixx * (1. / 6 - ixx * (1. / 30 - ixx * (1. / 42)))) / x
    return tp.where(small, -res, res)


_ZETA_C = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
           7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
           -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18)


def _zeta64(s, q):
    """torch's calc_zeta(s, q) for an integer s >= 2: the Euler-Maclaurin
    sum (its early exits only skip terms below float64's epsilon). The
    direct sum runs until q + i > 9, up to 16 more steps: exact for q > -7;
    torch sums further for more negative q)."""
    tp = _tp()
    acc = q ** (-s)
    a = q
    b = acc
    for _ in range(9):
        a = a + 1
        b = a ** (-s)
        acc = acc + b
    for _ in range(16):
        c = a <= 9.0
        a = tp.where(c, a + 1, a)
        b = tp.where(c, a ** (-s), b)
        acc = acc + tp.where(c, b, 0.0)
    w = a
    acc = acc + b * w / (s - 1) - 0.5 * b
    ac, k = 1.0, 0.0
    for i in range(12):
        ac *= s + k
        b = b / w
        acc = acc + ac * b / _ZETA_C[i]
        k += 1.0
        ac *= s + k
        b = b / w
        k += 1.0
    pole = (q <= 0).logical_and(q == q.floor())
    return tp.where(pole, math.inf, acc)


def _polygamma64(n, x):
    if n == 0:
        return _digamma64(x)
    if n == 1:
        return _trigamma64(x)
    return _zeta64(n + 1, x) * (float(math.factorial(n)) * (1.0 if n % 2 else -1.0))


_ERFINV_A = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
_ERFINV_B = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
_ERFINV_C = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
_ERFINV_D = (3.543889200, 1.637067800)


def _erfinv64(y):
    """torch's calc_erfinv: a rational first guess (central |y| <= 0.7,
    tails), then two Newton steps on erf."""
    tp = _tp()
    ya = y.abs()
    z = y * y
    num = ((_ERFINV_A[3] * z + _ERFINV_A[2]) * z + _ERFINV_A[1]) * z + _ERFINV_A[0]
    dem = (((_ERFINV_B[3] * z + _ERFINV_B[2]) * z + _ERFINV_B[1]) * z + _ERFINV_B[0]) * z + 1.0
    central = y * num / dem
    # the tail's log argument kept in (0, 1] where it is not used
    zt = (-((1.0 - tp.where(ya > 0.7, ya.clamp(max=1.0), 0.8)) / 2.0).log()).sqrt()
    num = ((_ERFINV_C[3] * zt + _ERFINV_C[2]) * zt + _ERFINV_C[1]) * zt + _ERFINV_C[0]
    dem = (_ERFINV_D[1] * zt + _ERFINV_D[0]) * zt + 1.0
    tail = tp.where(y < 0, -num, num) / dem
    x = tp.where(ya <= 0.7, central, tail)
    k = 2.0 / math.sqrt(math.pi)
    for _ in range(2):
        x = x - (x.erf() - y) / (k * (-x * x).exp())
    x = tp.where(ya == 1.0, tp.where(y < 0, -math.inf, math.inf), x)
    return tp.where(ya > 1.0, math.nan, x)


def _pointwise_f64(fn, x, *extra):
    """fn on x in float64, rounded to the result dtype (floats keep theirs,
    integers and bools give the default float dtype)."""
    tp = _tp()
    out = _float_dtype(x)
    r = fn(*extra, x.to(tp.float64))
    return r.to(out)


def lgamma_ops(input):
    return _pointwise_f64(_lgamma64, input)


def digamma_ops(input):
    return _pointwise_f64(_digamma64, input)


def erfinv_ops(input):
    return _pointwise_f64(_erfinv64, input)


def _check_polygamma_n(n):
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")


def polygamma_ops(n, input):
    _check_polygamma_n(n)
    return _pointwise_f64(_polygamma64, input, int(n))


# ================================================================ gcd / lcm

# Euclid's worst case for a dtype: the number of steps of the largest
# consecutive Fibonacci pair in range
def _euclid_steps(dtype):
    tp = _tp()
    hi = {tp.uint8: 255, tp.int8: 128, tp.int16: 1 << 15, tp.int32: 1 << 31}.get(dtype, 1 << 63)
    a, b, n = 1, 1, 1
    while b <= hi:
        a, b, n = b, a + b, n + 1
    return n + 1


def _gcd_dtype(name, a, b):
    tp = _tp()
    for t in (a, b):
        if t.is_floating_point() or t.dtype == tp.bool:
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{_title(t.dtype)}'")
    return tp.promote_types(a.dtype, b.dtype)


def _as_t(x, like):
    tp = _tp()
    if isinstance(x, _C.Tensor) or _is_proxy(x):
        return x
    return tp.tensor(x, device=like.device) if isinstance(x, int) and not isinstance(x, bool) \
        else tp.tensor(x)


def _rem_f64(b, a):
    """b mod a for float64 holding integers below 2**53 (b >= 0, a > 0):
    exact (the quotient's floor is exact below 2**31 * 2**22)."""
    return b - a * (b / a).floor()


def _rem_i64(b, a):
    """b mod a in int64 (b >= 0, a > 0) without an integer division (a
    compiled integer division carries a zero-divisor check per step): a
    float64 quotient, its remainder's error (a few thousand a at most)
    removed by a second float quotient, then one step either way."""
    tp = _tp()
    af = a.to(tp.float64)
    q = (b.to(tp.float64) / af).floor().clamp(0, 4.0e18).to(tp.int64)
    r = b - q * a
    q2 = (r.to(tp.float64) / af).floor().to(tp.int64)
    r = r - q2 * a
    r = tp.where(r < 0, r + a, r)
    r = tp.where(r >= a, r - a, r)
    return tp.where(a == 1, 0, r)


def _div_exact_i64(b, a):
    """b // a for b a multiple of a (b >= 0, a > 0), without an integer
    division: the float quotient corrected by the remainder's sign."""
    tp = _tp()
    q = (b.to(tp.float64) / a.to(tp.float64)).round().to(tp.int64)
    r = b - q * a
    q2 = (r.to(tp.float64) / a.to(tp.float64)).round().to(tp.int64)
    return q + q2


def _gcd_core(a, b, traced):
    """gcd of |a| and |b| (one integer dtype, broadcast): torch's loop
    `while a != 0: a, b = b % a, a`; eagerly until every a is 0, traced
    the dtype's worst case of steps."""
    tp = _tp()
    dt = a.dtype
    small = dt in (tp.uint8, tp.int8, tp.int16, tp.int32)
    wdt = tp.float64 if small else tp.int64
    a, b = a.to(wdt).abs(), b.to(wdt).abs()
    rem = _rem_f64 if small else _rem_i64
    steps = _euclid_steps(dt) if traced else None
    i = 0
    while True:
        if traced:
            if i >= steps:
                break
        elif not bool((a != 0).any()):
            break
        nz = a != 0
        r = rem(b, tp.where(nz, a, 1))
        a, b = tp.where(nz, r, 0), tp.where(nz, a, b)
        i += 1
    return b.to(dt)


def gcd_ops(input, other):
    _check_t(input, "gcd")
    other = _as_t(other, input)
    dt = _gcd_dtype("gcd", input, other)
    a, b = input.to(dt), other.to(dt)
    a, b = a + b * 0, b + a * 0            # broadcast
    return _gcd_core(a, b, _traced(input, other))


def lcm_ops(input, other):
    _check_t(input, "lcm")
    other = _as_t(other, input)
    tp = _tp()
    dt = _gcd_dtype("lcm", input, other)
    a, b = input.to(dt), other.to(dt)
    a, b = a + b * 0, b + a * 0
    g = _gcd_core(a, b, _traced(input, other))
    nz = g != 0
    # a / g is exact: the division of a float64 quotient (int32 and below)
    # or of the int64 remainder's pieces, as in _gcd_core
    gg = tp.where(nz, g, 1)
    if dt in (tp.uint8, tp.int8, tp.int16, tp.int32):
        q = (a.to(tp.float64) / gg.to(tp.float64)).to(dt)
    else:
        q = _div_exact_i64(a.abs(), gg) * a.sign()
    return tp.where(nz, (q * b).abs(), 0)


# ================================================================ helpers for dims

def _to_last(x, d):
    # permute, not movedim: a compiled backward differentiates op-table ops
    nd = x.dim()
    if d == nd - 1:
        return x
    return x.permute([k for k in range(nd) if k != d] + [d])


def _from_last(x, d, nd):
    if d == nd - 1:
        return x
    order = list(range(nd - 1))
    order.insert(d, nd - 1)
    return x.permute(order)


def _np(x):
    return _C._ops_array(x) if isinstance(x, _C.Tensor) else np.asarray(x)


def _wrap(a, *inputs):
    from tensorplay._ops import _wrap as w
    a = np.asarray(a)
    return w(a if a.flags.c_contiguous else a.copy(), *inputs)


def _rt(name):
    return getattr(_tp().return_types, name)


def _lowest(dtype):
    tp = _tp()
    if dtype.is_floating_point:
        return -math.inf
    if dtype == tp.bool:
        return 0
    return tp.iinfo(dtype).min


def _highest(dtype):
    tp = _tp()
    if dtype.is_floating_point:
        return math.inf
    if dtype == tp.bool:
        return 1
    return tp.iinfo(dtype).max


def _tri(n, strict=False, device=None):
    """(n, n) bool: j <= i (row i, column j); strict: j < i."""
    tp = _tp()
    kw = {"device": device} if device is not None and getattr(device, "type", "cpu") != "cpu" else {}
    i = tp.arange(n, **kw).reshape(n, 1)
    j = tp.arange(n, **kw).reshape(1, n)
    return (j < i) if strict else (j <= i)


def _dev(x):
    return getattr(x, "device", None)


# ================================================================ cummax / cummin

def _trivial(name, input):
    """(values, indices) of a scan/selection over a dim of size <= 1 or a
    0-d input: the input itself, indices 0 (native factories)."""
    tp = _tp()
    kw = {"device": _dev(input)} if _dev(input) is not None and _dev(input).type != "cpu" else {}
    return _rt(name)(input.clone(), tp.zeros(tuple(input.shape), dtype=tp.int64, **kw))


def _cum_check(name, input, dim):
    _check_t(input, name)
    return _wrap_dim(dim, input.dim())


def _cummaxmin_np(name, input, dim):
    d = _cum_check(name, input, dim)
    a = _np(input)
    if a.ndim == 0:
        return _rt(name)(_wrap(a.copy(), input), _wrap(np.zeros((), np.int64)))
    n = a.shape[d]
    if n == 0:
        return _rt(name)(_wrap(a.copy(), input), _wrap(np.zeros(a.shape, np.int64)))
    ufn = np.maximum if name == "cummax" else np.minimum
    v = ufn.accumulate(a, axis=d)
    # the running extreme changes exactly where x equals it (x >= / <= every
    # element before: torch's tie rule keeps the last one) or x is NaN
    hit = a == v
    if a.dtype.kind == "f":
        hit |= np.isnan(a)
    shape = [1] * a.ndim
    shape[d] = n
    pos = np.arange(n, dtype=np.int64).reshape(shape)
    idx = np.maximum.accumulate(np.where(hit, pos, 0), axis=d)
    return _rt(name)(_wrap(v, input), _wrap(idx))


# The traced decompositions compare every pair along the scanned/selected
# dim: O(n^2) work per row (measured, strict compile + second call, 1-D
# float32, loaded 2-core machine: logcumsumexp 14 ms at n=2048, 73 ms at
# 4096; eager's scans are O(n)). Above this size the op is recorded as
# itself (NotImplemented): its eager kernel runs as a counted fallback, and
# strict_native refuses it, rather than building an n^2 kernel.
QUADRATIC_DIM_CAP = 2048


def _too_long(n):
    return n > QUADRATIC_DIM_CAP


def _cummaxmin_traced(name, input, dim):
    tp = _tp()
    d = _cum_check(name, input, dim)
    nd = input.dim()
    if nd == 0 or int(input.shape[d]) == 0:
        return _trivial(name, input)
    if _too_long(int(input.shape[d])):
        return NotImplemented
    x = _to_last(input, d)
    n = int(x.shape[-1])
    tri = _tri(n, device=_dev(x))                       # (n, n): j <= i
    xd = x if x.dtype != tp.bool else x.to(tp.uint8)
    xjd = xd.unsqueeze(-2)
    # the masked entries hold row i's own element (one of the j <= i), not
    # a constant: int64's extremes do not survive a double constant
    fill = xd.unsqueeze(-1)
    if name == "cummax":
        v = tp.where(tri, xjd, fill).amax(-1)
    else:
        v = tp.where(tri, xjd, fill).amin(-1)
    hit = xd == v
    if x.is_floating_point():
        hit = hit.logical_or(x.isnan())
    pos = tp.arange(n, **({"device": _dev(x)} if _dev(x) is not None and _dev(x).type != "cpu" else {}))
    idx = tp.where(tri.logical_and(hit.unsqueeze(-2)), pos, 0).amax(-1)
    vals = x.gather(-1, idx)
    return _rt(name)(_from_last(vals, d, nd), _from_last(idx, d, nd))


# ================================================================ logcumsumexp

def _logcumsumexp_check(input, dim):
    _check_t(input, "logcumsumexp")
    if not input.is_floating_point():
        raise NotImplementedError(f"\"logcumsumexp_out_cpu\" not implemented for "
                                  f"'{_title(input.dtype)}'")
    return _wrap_dim(dim, input.dim())


def _logcumsumexp_np(input, dim):
    d = _logcumsumexp_check(input, dim)
    a = _np(input)
    if a.ndim == 0 or a.shape[d] == 0:
        return _wrap(a.copy(), input)
    # torch's CPU scan accumulates float/half in double
    r = np.logaddexp.accumulate(a.astype(np.float64), axis=d)
    return _wrap(r.astype(a.dtype), input)


def _logcumsumexp_traced(input, dim):
    tp = _tp()
    d = _logcumsumexp_check(input, dim)
    nd = input.dim()
    if nd == 0 or int(input.shape[d]) == 0:
        return input.clone()
    if _too_long(int(input.shape[d])):
        return NotImplemented
    x = _to_last(input, d).to(tp.float64)
    n = int(x.shape[-1])
    tri = _tri(n, device=_dev(x))
    m = tp.where(tri, x.unsqueeze(-2), -math.inf)         # (..., n, n)
    r = m.logsumexp(-1)
    return _from_last(r.to(input.dtype), d, nd)


# ================================================================ kthvalue / nanmedian

def _rank_stable(x):
    """Each element's position in a stable ascending sort along the last
    dim, NaN the largest: #{j: x_j < x_i} + #{j < i: x_j == x_i}; (..., n)."""
    tp = _tp()
    n = int(x.shape[-1])
    xi = x.unsqueeze(-1)                 # (..., n, 1)  i
    xj = x.unsqueeze(-2)                 # (..., 1, n)  j
    less = xj < xi
    eq = xj == xi
    if x.is_floating_point():
        ni, nj = xi.isnan(), xj.isnan()
        less = less.logical_or(ni.logical_and(nj.logical_not()))
        eq = eq.logical_or(ni.logical_and(nj))
    before = _tri(n, strict=True, device=_dev(x))    # j < i
    return less.sum(-1) + eq.logical_and(before).sum(-1)


def _rank_stable_desc(x):
    """Each element's position in a stable descending sort along the last
    dim (eager's order: NaN the largest, so first; ties by index):
    #{j: x_j > x_i} + #{j < i: x_j == x_i}; (..., n)."""
    n = int(x.shape[-1])
    xi = x.unsqueeze(-1)
    xj = x.unsqueeze(-2)
    greater = xj > xi
    eq = xj == xi
    if x.is_floating_point():
        ni, nj = xi.isnan(), xj.isnan()
        greater = greater.logical_or(nj.logical_and(ni.logical_not()))
        eq = eq.logical_or(ni.logical_and(nj))
    before = _tri(n, strict=True, device=_dev(x))
    return greater.sum(-1) + eq.logical_and(before).sum(-1)


def _order_by_rank(x, k, descending):
    """Indices (int64, (..., k)) of the elements of ranks 0..k-1: for
    position p the one index whose rank is p, a masked sum over n."""
    tp = _tp()
    n = int(x.shape[-1])
    kw = {"device": _dev(x)} if _dev(x) is not None and _dev(x).type != "cpu" else {}
    xx = x.to(tp.uint8) if x.dtype == tp.bool else x
    r = _rank_stable_desc(xx) if descending else _rank_stable(xx)     # (..., n)
    p = tp.arange(k, **kw).reshape(k, 1)
    pos = tp.arange(n, **kw)
    return tp.where(r.unsqueeze(-2) == p, pos, 0).sum(-1)              # (..., k)


def _sort_check(name, input, dim):
    _check_t(input, name)
    return _wrap_dim(dim, input.dim())


def _sort_traced(input, dim=-1, descending=False, *, stable=False):
    d = _sort_check("sort", input, dim)
    if input.dim() == 0 or int(input.shape[d]) <= 1:
        return _trivial("sort", input)
    n = int(input.shape[d])
    if _too_long(n):
        return NotImplemented
    x = _to_last(input, d)
    idx = _order_by_rank(x, n, bool(descending))
    nd = input.dim()
    return _rt("sort")(_from_last(x.gather(-1, idx), d, nd), _from_last(idx, d, nd))


def _argsort_traced(input, dim=-1, descending=False, *, stable=False):
    r = _sort_traced(input, dim, descending, stable=stable)
    return r if r is NotImplemented else r.indices


def _topk_traced(input, k, dim=-1, largest=True, sorted=True):
    if type(k) is not int or type(dim) is not int:
        return NotImplemented
    d = _sort_check("topk", input, dim)
    n = int(input.shape[d]) if input.dim() else 1
    if k < 0 or k > n:
        raise RuntimeError("selected index k out of range")
    if input.dim() == 0:
        return _trivial("topk", input)
    if _too_long(n):
        return NotImplemented
    x = _to_last(input, d)
    # sorted=False: torch leaves the order unspecified; eager's is sorted
    idx = _order_by_rank(x, k, bool(largest))
    nd = input.dim()
    return _rt("topk")(_from_last(x.gather(-1, idx), d, nd), _from_last(idx, d, nd))


def _select_rank(x, k):
    """Index (int64, (...,)) of the element of stable rank k along the last
    dim (k an int or a (...,) tensor)."""
    tp = _tp()
    n = int(x.shape[-1])
    r = _rank_stable(x)
    if not isinstance(k, int):
        k = k.unsqueeze(-1)
    pos = tp.arange(n, **({"device": _dev(x)} if _dev(x) is not None and _dev(x).type != "cpu" else {}))
    return tp.where(r == k, pos, 0).sum(-1)


def _kth_check(input, k, dim):
    _check_t(input, "kthvalue")
    d = _wrap_dim(dim, input.dim())
    n = int(input.shape[d]) if input.dim() else 1
    if n == 0:
        raise IndexError(f"kthvalue(): Expected reduction dim {d} to have non-zero size.")
    if k < 1 or k > n:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    return d


def _kthvalue_np(input, k, dim=-1, keepdim=False):
    d = _kth_check(input, k, dim)
    a = _np(input)
    if a.ndim == 0:
        return _rt("kthvalue")(_wrap(a.copy(), input), _wrap(np.zeros((), np.int64)))
    order = np.argsort(a, axis=d, kind="stable")
    ind = np.take(order, [k - 1], axis=d)
    val = np.take_along_axis(a, ind, d)
    if not keepdim:
        ind, val = np.squeeze(ind, d), np.squeeze(val, d)
    return _rt("kthvalue")(_wrap(val, input), _wrap(ind.astype(np.int64)))


def _finish_select(name, input, x, idx, d, keepdim):
    """values = x.gather(idx) (gradients reach idx), dims restored."""
    nd = input.dim()
    vals = x.gather(-1, idx.unsqueeze(-1))
    idx = idx.unsqueeze(-1)
    vals, idx = _from_last(vals, d, nd), _from_last(idx, d, nd)
    if not keepdim:
        vals, idx = vals.squeeze(d), idx.squeeze(d)
    return _rt(name)(vals, idx)


def _kthvalue_traced(input, k, dim=-1, keepdim=False):
    d = _kth_check(input, k, dim)
    if input.dim() == 0:
        return _trivial("kthvalue", input)
    if _too_long(int(input.shape[d])):
        return NotImplemented
    x = _to_last(input, d)
    return _finish_select("kthvalue", input, x, _select_rank(x, int(k) - 1), d, keepdim)


def _nanmedian_check(input, dim):
    _check_t(input, "nanmedian")
    if input.dtype is _C.bool:
        raise NotImplementedError(f"\"{'median_cpu' if dim is None else 'median_out'}\" not "
                                  "implemented for 'Bool'")
    if dim is None:
        return None
    d = _wrap_dim(dim, input.dim())
    if input.dim() and int(input.shape[d]) == 0:
        raise IndexError(f"median(): Expected reduction dim {d} to have non-zero size.")
    return d


def _nanmedian_np(input, dim=None, keepdim=False):
    d = _nanmedian_check(input, dim)
    a = _np(input)
    if a.dtype.kind != "f":
        return _tp().median(input) if dim is None else _rt("nanmedian")(
            *_tp().median(input, dim, keepdim))
    if d is None:
        f = a.reshape(-1)
        m = int(np.sum(~np.isnan(f)))
        if m == 0:
            return _wrap(np.asarray(np.nan, a.dtype), input)
        order = np.argsort(f, kind="stable")
        return _wrap(np.asarray(f[order[(m - 1) // 2]]), input)
    if a.ndim == 0:
        return _rt("nanmedian")(_wrap(a.copy(), input), _wrap(np.zeros((), np.int64)))
    m = np.sum(~np.isnan(a), axis=d, keepdims=True)
    k = np.maximum((m - 1) // 2, 0)
    order = np.argsort(a, axis=d, kind="stable")
    ind = np.take_along_axis(order, k, d)
    val = np.take_along_axis(a, ind, d)
    if not keepdim:
        ind, val = np.squeeze(ind, d), np.squeeze(val, d)
    return _rt("nanmedian")(_wrap(val, input), _wrap(ind.astype(np.int64)))


def _nanmedian_traced(input, dim=None, keepdim=False):
    tp = _tp()
    d = _nanmedian_check(input, dim)
    fl = input.is_floating_point()

    def count(x):
        if fl:
            return x.isnan().logical_not().sum(-1)
        return tp.full(tuple(x.shape[:-1]), int(x.shape[-1]), dtype=tp.int64)
    if d is None:
        if input.numel() == 0:
            return tp.full((), math.nan, dtype=input.dtype) if fl else NotImplemented
        if _too_long(input.numel()):
            return NotImplemented
        x = input.reshape(1, -1)
        m = count(x)
        idx = _select_rank(x, (m - 1).clamp(min=0) // 2)
        v = x.gather(-1, idx.unsqueeze(-1)).reshape(())
        return tp.where(m.reshape(()) == 0, math.nan, v) if fl else v
    if input.dim() == 0:
        return _trivial("nanmedian", input)
    if _too_long(int(input.shape[d])):
        return NotImplemented
    x = _to_last(input, d)
    m = count(x)
    return _finish_select("nanmedian", input, x, _select_rank(x, (m - 1).clamp(min=0) // 2), d,
                          keepdim)


# ================================================================ mode

def _mode_check(input, dim):
    _check_t(input, "mode")
    d = _wrap_dim(dim, input.dim())
    if input.dim() and int(input.shape[d]) == 0:
        raise IndexError(f"mode(): Expected reduction dim {d} to have non-zero size.")
    return d


def _mode_np(input, dim=-1, keepdim=False):
    d = _mode_check(input, dim)
    a = _np(input)
    if a.ndim == 0:
        return _rt("mode")(_wrap(a.copy(), input), _wrap(np.zeros((), np.int64)))
    x = np.moveaxis(a, d, -1)
    lead = x.shape[:-1]
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    # sorted runs (NaN != NaN: each NaN is a run of its own); the first of
    # the longest runs (the smallest value), at its last original index
    order = np.argsort(x2, axis=-1, kind="stable")
    s = np.take_along_axis(x2, order, -1)
    k = np.arange(n)
    start = np.ones_like(s, dtype=bool)
    start[:, 1:] = s[:, 1:] != s[:, :-1]
    end = np.ones_like(s, dtype=bool)
    end[:, :-1] = start[:, 1:]
    first = np.maximum.accumulate(np.where(start, k, 0), axis=-1)
    last = np.flip(np.minimum.accumulate(np.flip(np.where(end, k, n), -1), axis=-1), -1)
    cnt = last - first + 1
    best = np.argmax(cnt, axis=-1)
    rows = np.arange(x2.shape[0])
    pos = last[rows, best]
    ind = order[rows, pos].reshape(lead)
    val = s[rows, pos].reshape(lead)
    if keepdim:
        ind, val = np.expand_dims(ind, d), np.expand_dims(val, d)
    return _rt("mode")(_wrap(val, input), _wrap(ind.astype(np.int64)))


def _mode_traced(input, dim=-1, keepdim=False):
    tp = _tp()
    d = _mode_check(input, dim)
    if input.dim() == 0:
        return _trivial("mode", input)
    if _too_long(int(input.shape[d])):
        return NotImplemented
    x = _to_last(input, d)
    n = int(x.shape[-1])
    xi, xj = x.unsqueeze(-1), x.unsqueeze(-2)
    cnt = (xj == xi).sum(-1)                              # (..., n)
    fl = x.is_floating_point()
    if fl:
        nan = x.isnan()
        cnt = cnt + nan.to(cnt.dtype)                     # a NaN is a run of one
    best = cnt.amax(-1, keepdim=True)
    cand = cnt == best
    kw = {"device": _dev(x)} if _dev(x) is not None and _dev(x).type != "cpu" else {}
    pos = tp.arange(n, **kw)
    xd = x if x.dtype != tp.bool else x.to(tp.uint8)
    if fl:
        real = cand.logical_and(nan.logical_not())
        m = tp.where(real, xd, math.inf).amin(-1, keepdim=True)
        anyreal = real.any(-1, keepdim=True)
        last = tp.where(real.logical_and(xd == m), pos, -1).amax(-1)
        firstnan = tp.where(nan, pos, n).amin(-1)
        idx = tp.where(anyreal.squeeze(-1), last, firstnan)
    else:
        m = tp.where(cand, xd, xd.amax(-1, keepdim=True)).amin(-1, keepdim=True)
        idx = tp.where(cand.logical_and(xd == m), pos, -1).amax(-1)
    return _finish_select("mode", input, x, idx, d, keepdim)


# ================================================================ searchsorted / bucketize

def _ss_check(seq, values, out_int32, right, side, sorter):
    tp = _tp()
    _check_t(seq, "searchsorted", "sorted_sequence", 1)
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but "
                               f"got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to "
                               "opposites, got side of left while right was True")
        right = side == "right"
    scalar = not (isinstance(values, _C.Tensor) or _is_proxy(values))
    if scalar and seq.dim() != 1:
        raise RuntimeError(f"torch.searchsorted(): input value can be a scalar only when "
                           f"boundaries tensor dimension is 1, but we got boundaries tensor "
                           f"dim({seq.dim()}) and input value's dim(0) numel(1)")
    if not scalar and seq.dim() != 1 and (
            seq.dim() != values.dim()
            or tuple(seq.shape[:-1]) != tuple(values.shape[:-1])):
        raise RuntimeError(f"torch.searchsorted(): boundaries tensor should be 1 dimension or "
                           f"the first N-1 dimensions of boundaries tensor and input value "
                           f"tensor must match, but we got boundaries tensor "
                           f"{list(seq.shape)} and input value tensor {list(values.shape)}")
    if sorter is not None:
        if tuple(sorter.shape) != tuple(seq.shape):
            raise RuntimeError(f"torch.searchsorted(): boundary and sorter must have the same "
                               f"size, but got boundary tensor {list(seq.shape)}and got sorter "
                               f"tensor {list(sorter.shape)}")
        if sorter.dtype != tp.int64:
            raise RuntimeError(f"torch.searchsorted(): sorter must be a tensor of long dtype "
                               f"but got {_title(sorter.dtype)}")
    return bool(right), scalar, tp.int32 if out_int32 else tp.int64


def _searchsorted_np(sorted_sequence, self, *, out_int32=False, right=False, side=None,
                     sorter=None):
    right, scalar, odt = _ss_check(sorted_sequence, self, out_int32, right, side, sorter)
    s = _np(sorted_sequence)
    if scalar:
        # torch compares in the result type of the sequence and the scalar
        # (a wrapped number): 0.3 against float32 values is 0.3 in float32
        tp = _tp()
        ct = tp.result_type(sorted_sequence, self)
        if ct != sorted_sequence.dtype:
            s = _np(sorted_sequence.to(ct))
        v = _np(tp.tensor(self, dtype=ct))
    else:
        v = _np(self)
    n = s.shape[-1] if s.ndim else 1
    if sorter is not None:
        so = _np(sorter)
        if so.size and (so.min() < 0 or so.max() >= n):
            raise RuntimeError("torch.searchsorted(): sorter index out of range")
        s = np.take_along_axis(s, so, -1)
    if s.ndim == 1:
        flat_v = v.reshape(1, -1)
        s2 = s.reshape(1, n)
    else:
        flat_v = v.reshape(-1, v.shape[-1])
        s2 = s.reshape(-1, n)
    # a binary search per value with torch's predicates: left moves right
    # while !(s[mid] >= v), right while !(s[mid] > v) (NaN compares false)
    lo = np.zeros(flat_v.shape, np.int64)
    hi = np.full(flat_v.shape, n, np.int64)
    rows = np.arange(s2.shape[0]).reshape(-1, 1) if s2.shape[0] > 1 else 0
    with np.errstate(invalid="ignore"):
        while True:
            act = lo < hi
            if not act.any():
                break
            mid = (lo + hi) >> 1
            mv = s2[rows, np.minimum(mid, n - 1)] if n else np.zeros_like(flat_v)
            go = ~(mv > flat_v) if right else ~(mv >= flat_v)
            lo = np.where(act & go, mid + 1, lo)
            hi = np.where(act & ~go, mid, hi)
    r = lo.reshape(v.shape).astype(np.int32 if odt == _tp().int32 else np.int64)
    return _wrap(r)


def _bisect_steps(n):
    return _b.max(n, 1).bit_length() + 1


def _searchsorted_traced(sorted_sequence, self, *, out_int32=False, right=False, side=None,
                         sorter=None):
    """torch's binary search itself, unrolled (ceil(log2(n + 1)) steps of a
    gather at the midpoints): the same index as eager and torch for any
    input, NaN and unsorted sequences included; O(m log n)."""
    tp = _tp()
    right, scalar, odt = _ss_check(sorted_sequence, self, out_int32, right, side, sorter)
    s = sorted_sequence
    if sorter is not None:
        s = s.gather(-1, sorter)
    n = int(s.shape[-1])
    if scalar:
        if n == 0:
            return tp.zeros_like(s.sum(), dtype=odt)
        # the scalar as a 0-d value made from the sequence (full_like), not
        # a constant: a constant is a host tensor (and every bound and
        # midpoint computed from it folds into more of them), which a CUDA
        # program refuses, so the op went to the host
        dt = (s.dtype if isinstance(self, float) and s.is_floating_point()
              else tp.tensor(self).dtype)
        base = s.narrow(0, 0, 1).reshape(())
        if dt.is_floating_point:
            # rounded as tp.tensor(self, dtype=dt) rounds (-1e9 in float16 is
            # -inf; full_like itself refuses a value past the dtype's range)
            v = tp.full_like(base, self, dtype=tp.float64).to(dt)
        else:
            v = tp.full_like(base, self, dtype=dt)
    else:
        v = self
    # made from the values, not as constants: traced over host stand-ins
    # (the eager CUDA kernel, cuda/_eager.py) a constant is a host tensor,
    # which the CUDA program refuses (the op went to the host)
    lo = tp.zeros_like(v, dtype=tp.int64)
    hi = tp.full_like(v, n, dtype=tp.int64)
    if n == 0:
        return lo.to(odt)
    for _ in range(_bisect_steps(n)):
        act = lo < hi
        mid = (lo + hi) // 2
        at = mid.clamp(max=n - 1)
        if s.dim() == 1:
            mv = s.index_select(0, at.reshape(-1)).reshape(tuple(v.shape))
        else:
            mv = s.gather(-1, at)
        go = ((mv > v) if right else (mv >= v)).logical_not()
        lo = tp.where(act.logical_and(go), mid + 1, lo)
        hi = tp.where(act.logical_and(go.logical_not()), mid, hi)
    return lo.to(odt)


def _bucketize_check(input, boundaries):
    _check_t(boundaries, "bucketize", "boundaries", 2)
    if boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim("
                           f"{boundaries.dim()})")


def _bucketize_np(self, boundaries, *, out_int32=False, right=False):
    _bucketize_check(self, boundaries)
    return _searchsorted_np(boundaries, self, out_int32=out_int32, right=right)


def _bucketize_traced(self, boundaries, *, out_int32=False, right=False):
    _bucketize_check(self, boundaries)
    return _searchsorted_traced(boundaries, self, out_int32=out_int32, right=right)


# ================================================================ Tensor.unfold

def _unfold_check(self, dimension, size, step):
    """(the wrapped dim, its size) for Tensor.unfold, with torch's
    RuntimeErrors for a size above the dim's, size < 0 and step <= 0."""
    nd = self.dim()
    d = _wrap_dim(dimension, nd)
    n = int(self.shape[d]) if nd else 1
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is "
                           f"{size}")
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    return d, n


def unfold(self, dimension, size, step):
    """Tensor.unfold(dimension, size, step) -> a view with dim `dimension`
    of size (n - size) // step + 1 and a new last dim of `size`: the
    windows self[..., i*step : i*step + size, ...]. RuntimeError: size
    above the dim's size, size < 0, step <= 0; IndexError: dim out of
    range."""
    nd = self.dim()
    d, n = _unfold_check(self, dimension, size, step)
    st = list(self.stride()) if nd else []
    sh = [int(s) for s in self.shape]
    if nd == 0:
        return self.as_strided((size,), (1,), self.storage_offset())
    if self.requires_grad and _C.is_grad_enabled() and not self.is_contiguous():
        # as_strided's gradient needs a contiguous input: the windows are
        # gathered instead (the same values; a copy, not a view)
        return _unfold_gather(self, d, n, size, step)
    new_sh = sh[:d] + [(n - size) // step + 1] + sh[d + 1:] + [size]
    new_st = st[:d] + [st[d] * step] + st[d + 1:] + [st[d]]
    return self.as_strided(tuple(new_sh), tuple(new_st), self.storage_offset())


def _unfold_gather(self, d, n, size, step):
    tp = _tp()
    cnt = (n - size) // step + 1
    kw = {"device": _dev(self)} if _dev(self) is not None and _dev(self).type != "cpu" else {}
    idx = (tp.arange(cnt, **kw) * step).reshape(cnt, 1) + tp.arange(size, **kw).reshape(1, size)
    sh = [int(v) for v in self.shape]
    r = self.index_select(d, idx.reshape(-1)).reshape(tuple(sh[:d] + [cnt, size] + sh[d + 1:]))
    nd = r.dim()
    return r.permute([k for k in range(nd) if k != d + 1] + [d + 1])


def _unfold_traced(self, dimension, size, step):
    """Tensor.unfold while tracing: compiled as_strided reads its input's
    elements in C order (not the storage), so the windows are taken from
    the contiguous layout of self's shape."""
    nd = self.dim()
    d, n = _unfold_check(self, dimension, size, step)
    sh = [int(v) for v in self.shape]
    if nd == 0:
        return self.reshape(1)
    st = [1] * nd
    for k in range(nd - 2, -1, -1):
        st[k] = st[k + 1] * sh[k + 1]
    new_sh = sh[:d] + [(n - size) // step + 1] + sh[d + 1:] + [size]
    new_st = st[:d] + [st[d] * step] + st[d + 1:] + [st[d]]
    return self.contiguous().as_strided(tuple(new_sh), tuple(new_st), 0)


# ================================================================ installation

_POINTWISE = {"lgamma": lgamma_ops, "digamma": digamma_ops, "erfinv": erfinv_ops}


def _eager_pointwise(fn):
    def impl(input):
        _check_t(input, fn.__name__.replace("_ops", ""))
        with _NoGrad():
            r = fn(input)
        return _wrap(_np(r).copy(), input)
    return impl


def _eager_polygamma(n, input):
    _check_t(input, "polygamma", "input", 2)
    with _NoGrad():
        r = polygamma_ops(n, input)
    return _wrap(_np(r).copy(), input)


def _eager_int2(fn):
    def impl(input, other):
        with _NoGrad():
            return fn(input, other)
    return impl


def _inplace(fn):
    def call(self, *args, **kwargs):
        return self.copy_(fn(self, *args, **kwargs))
    return call


def _polygamma_method(self, n):
    return _tp().polygamma(n, self)


def _polygamma_inplace(self, n):
    return self.copy_(_tp().polygamma(n, self))


def install():
    from tensorplay import _ops
    tp = _tp()
    rt = tp.return_types
    for name in ("cummax", "cummin", "kthvalue", "mode", "nanmedian"):
        if not hasattr(rt, name):
            setattr(rt, name, collections.namedtuple(name, ["values", "indices"]))

    def impl(name, fn):
        _C._ops_set_impl(name, fn)
        _ops._REG[name] = fn

    for name, fn in _POINTWISE.items():
        impl(name, _eager_pointwise(fn))
    impl("polygamma", _eager_polygamma)
    impl("gcd", _eager_int2(gcd_ops))
    impl("lcm", _eager_int2(lcm_ops))
    impl("logcumsumexp", _logcumsumexp_np)
    impl("cummax", lambda input, dim: _cummaxmin_np("cummax", input, dim))
    impl("cummin", lambda input, dim: _cummaxmin_np("cummin", input, dim))
    impl("kthvalue", _kthvalue_np)
    impl("mode", _mode_np)
    impl("nanmedian", _nanmedian_np)
    impl("searchsorted", _searchsorted_np)
    impl("bucketize", _bucketize_np)
    # in-place twins: out of place, written back
    for name in ("lgamma_", "digamma_", "erfinv_", "gcd_", "lcm_"):
        _ops._inplace_of(name, name[:-1])

    traced = dict(_POINTWISE)
    traced.update({
        "polygamma": polygamma_ops, "gcd": gcd_ops, "lcm": lcm_ops,
        "logcumsumexp": _logcumsumexp_traced,
        "cummax": lambda input, dim: _cummaxmin_traced("cummax", input, dim),
        "cummin": lambda input, dim: _cummaxmin_traced("cummin", input, dim),
        "kthvalue": _kthvalue_traced, "mode": _mode_traced, "nanmedian": _nanmedian_traced,
        "searchsorted": _searchsorted_traced, "bucketize": _bucketize_traced,
        "sort": _sort_traced, "argsort": _argsort_traced, "topk": _topk_traced,
    })
    for name, fn in traced.items():
        f = getattr(tp, name, None)
        if f is not None:
            _C._set_trace_decomposition(f, fn)
        if hasattr(_C.Tensor, name):
            _C._set_trace_decomposition(name, fn)
    for name in ("lgamma", "digamma", "erfinv", "gcd", "lcm"):
        _C._set_trace_decomposition(name + "_", _inplace(traced[name]))
    # methods torch has that are no rows' methods
    for name, fn in (("unfold", unfold), ("polygamma", _polygamma_method),
                     ("polygamma_", _polygamma_inplace)):
        if not hasattr(_C.Tensor, name):
            _C._tensor_install(name, fn)
    _C._set_trace_decomposition("unfold", _unfold_traced)
    _C._set_trace_decomposition("polygamma", lambda self, n: polygamma_ops(n, self))
    _C._set_trace_decomposition("polygamma_",
                                lambda self, n: self.copy_(polygamma_ops(n, self)))
