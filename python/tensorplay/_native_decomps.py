"""Trace-time decompositions that make ops without a kernel of their own
native under tp.compile (issue 16 item 7): each runs on the tracer's proxies
instead of recording the op, and records op-table ops that lowering takes
(reductions, where, gather/index_select, views, matmul). A decomposition
returns NotImplemented where the call is recorded whole: arguments eager
rejects (the recorded call's sample run raises eager's error at trace time)
and cases it does not cover.

How each op is built (n: the size of the scattered dim, m: the index
length along it):
* scatter / scatter_add / scatter_reduce / index_add / index_copy /
  index_fill (float32/64, int32/64, static sizes): the op itself on the
  int64 index, which Stax lowers to one pass over the index in order on
  the CPU (O(n + m), torch CPU's last-writer order) and to atomic kernels
  on CUDA (O(n + m)); the lowering checks the index's range at run time.
  Otherwise a hit mask ``index == arange(n)`` of (..., n, m) folded over
  m by one reduction (sum, prod, amax, amin, count; for scatter and
  index_copy the last writer, torch CPU's order). O(n*m) per row instead of
  O(m): a fused reduction, nothing of (..., n, m) is stored; index_add of
  float32/float64 is a matmul with the hit matrix (BLAS).
* cumsum of integers/bools: prefix sums as masked sums over blocks of
  ceil(sqrt(n)) (exact in int64; O(n^1.5) work, no sequential scan).
* one_hot(num_classes=-1), masked_select, x[bool mask] (x[bool mask] = t),
  repeat_interleave(Tensor): the output size comes from the data, so it is
  a value gate (``int(x.max())``, ``int(mask.sum())``,
  ``int(repeats.sum())``): the program is native for
  that size and a new size is a new version (torch.compile graph-breaks on
  these unless given capture_dynamic_output_shape_ops). The output is then
  filled by a count kernel: the j-th selected position is the number of
  inclusive prefix counts <= j (O(N*n)).
* multinomial: the same float64 uniform draw as eager (one tp.rand call,
  same Philox words, from generator= when given), then the inverse CDF as
  a count (with replacement) or exponential races (without replacement,
  as eager does): an argmax per sample for up to 16 samples, else each
  key's rank in a stable descending sort as a count (O(n^2) per row).
* nll_loss / cross_entropy: class weights, ignore_index, label_smoothing,
  every reduction, class-probability targets.
* mse_loss / l1_loss / smooth_l1_loss / binary_cross_entropy_with_logits:
  every reduction, beta, weight, pos_weight and the legacy size_average /
  reduce arguments (the op-table composites decompose the defaults only).

Index range errors keep eager's wording: the index goes through an
index_select of arange(n) (the identity for valid indices) whose runtime
range check reruns the call eagerly, which raises eager's error."""
import math

from tensorplay import _C


def _tp():
    import tensorplay
    return tensorplay


def _F():
    import tensorplay.functional as F
    return F


def _is_t(o):
    return isinstance(o, _C.Tensor) or type(o).__name__ == "Proxy"


def _ints(shape):
    return [int(s) for s in shape]


def _to_last(t, d):
    """t with dim d moved last (a permute: movedim's compiled backward
    would be an as_strided view)."""
    nd = t.dim()
    if d == nd - 1:
        return t
    return t.permute([k for k in range(nd) if k != d] + [d])


def _from_last(t, d):
    """The inverse of _to_last."""
    nd = t.dim()
    if d == nd - 1:
        return t
    order = list(range(nd - 1))
    order.insert(d, nd - 1)
    return t.permute(order)


class _BadSample(Exception):
    """An index of the traced sample is out of range: the decomposition
    steps aside (install's wrapper returns NotImplemented) so the call is
    recorded as itself and its sample raises eager's own error."""


def _sample_of(t):
    """t's traced sample values (no gate: only to decide whether to step
    aside), t itself outside a trace."""
    if isinstance(t, _C.Tensor):
        return t
    f = getattr(t, "_sample_data", None)
    v = f() if f is not None else None
    return v if isinstance(v, _C.Tensor) else None


def _checked_index(idx, n):
    """idx unchanged when every entry is in [0, n); otherwise the compiled
    program's index check reruns the call eagerly (eager's error). An
    out-of-range sample at trace time raises _BadSample."""
    tp = _tp()
    v = _sample_of(idx)
    if v is not None and v.numel() > 0 and (int(v.min()) < 0 or int(v.max()) >= n):
        raise _BadSample
    flat = idx.reshape(-1)
    if flat.dtype != tp.int64:
        flat = flat.to(tp.int64)
    return tp.arange(n).index_select(0, flat).reshape(tuple(idx.shape))


def _pick_where(sel, vals, axis):
    """The one value of vals where the bool mask sel holds along axis (0
    where none): a masked sum instead of a gather by a computed index, so
    the compiled backward is a where too (no scatter)."""
    tp = _tp()
    dt = vals.dtype
    return tp.where(sel, vals, tp.zeros((), dtype=dt)).sum(axis).to(dt)


def _pad_to(t, shape, value=0):
    """t (leading dims <= shape's, same last dim) padded at the end of each
    leading dim up to shape with value."""
    pads = []
    for have, want in zip(reversed(_ints(t.shape)), reversed(_ints(shape))):
        pads += [0, want - have]
    if not any(pads):
        return t
    return _F().pad(t, pads, value=value)


def _fill_min(dt):
    tp = _tp()
    if dt.is_floating_point:
        return float("-inf")
    if dt == tp.bool:
        return False
    return tp.iinfo(dt).min


def _fill_max(dt):
    tp = _tp()
    if dt.is_floating_point:
        return float("inf")
    if dt == tp.bool:
        return True
    return tp.iinfo(dt).max


# ------------------------------------------------------------ scatter family

# the op recorded as itself: the Stax back end lowers it to one O(n + m)
# pass in index order (ST_SCATTER, lower_movement.c) on the CPU, and to
# kernels with atomic stores on CUDA, for these dtypes at static sizes,
# with a run-time check of the index's range (eager's error by a rerun);
# other calls take the hit-mask decompositions below
_SEQ_INNER = [False]


def _seq_ok(*ts):
    tp = _tp()
    first = ts[0]
    if first.dtype not in (tp.float32, tp.float64, tp.int64, tp.int32):
        return False
    for t in ts:
        if not _is_t(t):
            continue
        if any(type(z) is not int for z in t.shape):
            return False       # symbolic sizes (dynamic): the decomposition
    return True


def _seq_index(idx, n):
    """idx as int64 for the op recorded as itself (its lowering checks the
    range at run time). An out-of-range sample at trace time raises
    _BadSample."""
    tp = _tp()
    v = _sample_of(idx)
    if v is not None and v.numel() > 0 and (int(v.min()) < 0 or int(v.max()) >= n):
        raise _BadSample
    return idx if idx.dtype == tp.int64 else idx.to(tp.int64)


def _record(call, *args):
    _SEQ_INNER[0] = True
    try:
        return call(*args)
    finally:
        _SEQ_INNER[0] = False

def _scatter_shapes_ok(self, d, index, src):
    """The shapes eager accepts (else NotImplemented: eager's error)."""
    tp = _tp()
    if not _is_t(index) or index.dtype not in (tp.int64, tp.int32):
        return False
    if self.dim() == 0 or index.dim() != self.dim():
        return False
    for k in range(index.dim()):
        if k != d and index.shape[k] > self.shape[k]:
            return False
        if _is_t(src) and index.shape[k] > src.shape[k]:
            return False
    if _is_t(src) and (src.dim() != self.dim() or src.dtype != self.dtype):
        return False
    return True


def _wrapdim(dim, nd):
    d = int(dim)
    if d < -nd or d >= nd:
        return None
    return d + nd if d < 0 else d


def _scatter_core(self, dim, index, src, mode, include_self=True, call=None):
    """out = self with the values of src (a tensor or a number) at index
    along dim, combined by mode ('set', 'sum', 'prod', 'amax', 'amin',
    'mean'); NotImplemented when eager would raise. call(index): the op
    itself on a range-checked index (the ST_SCATTER step), when it
    applies."""
    tp = _tp()
    if not _is_t(self):
        return NotImplemented
    d = _wrapdim(dim, max(self.dim(), 1))
    if d is None or not _scatter_shapes_ok(self, d, index, src):
        return NotImplemented
    if not _is_t(src) and not isinstance(src, (int, float, bool)):
        return NotImplemented
    if index.numel() == 0:
        return self.clone()
    n = int(self.shape[d])
    if call is not None and _seq_ok(self, index, src):
        return _record(call, _seq_index(index, n))
    ish = _ints(index.shape)
    idx = _to_last(_checked_index(index, n), d)              # (..i.., m)
    m = ish[d]
    lead = ish[:d] + ish[d + 1:]
    hit = idx.unsqueeze(-2) == tp.arange(n).reshape(n, 1)      # (..i.., n, m)
    if _is_t(src):
        sl = tuple(slice(0, s) for s in ish)
        val = _to_last(src[sl], d).unsqueeze(-2)             # (..i.., 1, m)
    else:
        val = src
    sm = _to_last(self, d)                                   # (..s.., n)
    full = _ints(sm.shape)
    dt = self.dtype

    def back(t):
        return _from_last(t, d)

    def padded(t, value=0):
        return _pad_to(t, full, value)

    if mode == "set":
        pos = tp.where(hit, tp.arange(1, m + 1), 0).amax(-1) - 1       # last writer
        if _is_t(src):
            v = _pick_where(tp.arange(m) == pos.unsqueeze(-1), val, -1)
        else:
            v = tp.full(lead + [n], src, dtype=dt)
        written = padded((pos >= 0).to(tp.int8)) != 0
        return back(tp.where(written, padded(v.to(dt)), sm))
    cnt = hit.sum(-1)                                          # (..i.., n) int64
    touched = padded(cnt.to(tp.int8)) != 0
    if mode in ("sum", "mean"):
        s = tp.where(hit, val, tp.zeros((), dtype=dt)).sum(-1).to(dt)
        if mode == "sum":
            r = padded(s)
            return back(sm + r if include_self else tp.where(touched, r, sm))
        c = padded(cnt)
        tot = padded(s) + (sm if include_self else 0)
        num = (c + 1) if include_self else c.clamp(min=1)
        if dt.is_floating_point:
            q = (tot / num).to(dt)
        else:
            q = tp.div(tot, num, rounding_mode="floor").to(dt)
        return back(q if include_self else tp.where(touched, q, sm))
    if mode == "prod":
        p = tp.where(hit, val, tp.ones((), dtype=dt)).prod(-1).to(dt)
        r = padded(p, 1)
        return back(sm * r if include_self else tp.where(touched, r, sm))
    if mode in ("amax", "amin"):
        fill = _fill_min(dt) if mode == "amax" else _fill_max(dt)
        fn = tp.amax if mode == "amax" else tp.amin
        r = fn(tp.where(hit, val, tp.full((), fill, dtype=dt)), -1)
        r = padded(r, fill)
        if include_self:
            both = tp.maximum(sm, r) if mode == "amax" else tp.minimum(sm, r)
            return back(tp.where(touched, both, sm))
        return back(tp.where(touched, r, sm))
    return NotImplemented


def _scatter(self, dim, index, src=None, *, reduce=None, value=None):
    if src is None:
        src = value
    if src is None:
        return NotImplemented
    def call(i):
        if reduce is None:
            return self.scatter(dim, i, src)
        return self.scatter(dim, i, src, reduce=reduce)
    if reduce is None:
        return _scatter_core(self, dim, index, src, "set", call=call)
    if reduce == "add":
        return _scatter_core(self, dim, index, src, "sum", call=call)
    if reduce == "multiply":
        return _scatter_core(self, dim, index, src, "prod", call=call)
    return NotImplemented


def _scatter_add(self, dim, index, src):
    if not _is_t(src):
        return NotImplemented
    return _scatter_core(self, dim, index, src, "sum",
                         call=lambda i: self.scatter_add(dim, i, src))


_SR_MODES = ("sum", "prod", "mean", "amax", "amin")


def _scatter_reduce(self, dim, index, src, reduce, *, include_self=True):
    reduce = {"max": "amax", "min": "amin"}.get(reduce, reduce)
    if not _is_t(src) or reduce not in _SR_MODES:
        return NotImplemented
    return _scatter_core(self, dim, index, src, reduce, bool(include_self),
                         call=lambda i: self.scatter_reduce(dim, i, src, reduce,
                                                            include_self=bool(include_self)))


def _index_args(self, dim, index):
    tp = _tp()
    if not _is_t(self) or not _is_t(index):
        return None
    if index.dtype not in (tp.int64, tp.int32) or index.dim() > 1 or self.dim() == 0:
        return None
    return _wrapdim(dim, self.dim())


def _index_add(self, dim, index, source, *, alpha=1):
    tp = _tp()
    d = _index_args(self, dim, index)
    if d is None or not _is_t(source) or source.dtype != self.dtype:
        return NotImplemented
    m = int(index.numel())
    want = _ints(self.shape)
    want[d] = m
    if _ints(source.shape) != want or isinstance(alpha, bool):
        return NotImplemented
    if m == 0:
        return self.clone()
    n = int(self.shape[d])
    if _seq_ok(self, index, source):
        idx = _seq_index(index.reshape(-1), n)
        return _record(lambda: self.index_add(d, idx, source, alpha=alpha))
    idx = _checked_index(index.reshape(-1), n)
    hit = idx.unsqueeze(0) == tp.arange(n).reshape(n, 1)          # (n, m)
    src = _to_last(source, d)                                  # (..., m)
    dt = self.dtype
    if dt in (tp.float32, tp.float64) and not (source.requires_grad and tp.is_grad_enabled()):
        # the matmul multiplies every source element by the hit matrix's
        # zeros too: 0 * inf = NaN would reach every row. It sums the finite
        # values; counts of the +inf/NaN and -inf/NaN (exact: 0/1 sums) give
        # the infinities, and inf + -inf the NaN. (A source that requires
        # grad takes the masked sum below: where() here would cut its
        # gradient at the non-finite elements.)
        ht = hit.to(dt).transpose(0, 1)
        nan = src.isnan()
        s = tp.where(src.isfinite(), src, 0.0).matmul(ht)      # (..., n)
        for flag, inf in (((src == math.inf).logical_or(nan), math.inf),
                          ((src == -math.inf).logical_or(nan), -math.inf)):
            s = s + tp.where(flag.to(dt).matmul(ht) > 0.5, inf, 0.0).to(dt)
    else:
        s = tp.where(hit, src.unsqueeze(-2), tp.zeros((), dtype=dt)).sum(-1).to(dt)
    if alpha != 1:
        s = (s * alpha).to(dt)
    return _from_last(_to_last(self, d) + s, d)


def _index_copy(self, dim, index, source):
    tp = _tp()
    d = _index_args(self, dim, index)
    if d is None or not _is_t(source) or source.dtype != self.dtype:
        return NotImplemented
    m = int(index.numel())
    want = _ints(self.shape)
    want[d] = m
    if _ints(source.shape) != want:
        return NotImplemented
    if m == 0:
        return self.clone()
    n = int(self.shape[d])
    if _seq_ok(self, index, source):
        idx = _seq_index(index.reshape(-1), n)
        return _record(lambda: self.index_copy(d, idx, source))
    idx = _checked_index(index.reshape(-1), n)
    hit = idx.unsqueeze(0) == tp.arange(n).reshape(n, 1)          # (n, m)
    pos = tp.where(hit, tp.arange(1, m + 1), 0).amax(-1) - 1       # (n,)
    src = _to_last(source, d)
    v = _pick_where(tp.arange(m) == pos.unsqueeze(-1), src.unsqueeze(-2), -1)
    return _from_last(tp.where(pos >= 0, v, _to_last(self, d)), d)


# the finite range of each dtype a fill value must lie in (torch's
# c10::overflows, csrc/tensor/dtype.c stax_dtype_check_scalar)
_FILL_RANGE = {"uint8": (-255, 255), "int8": (-128, 127), "int16": (-32768, 32767),
               "int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1),
               "float16": (-65504.0, 65504.0), "float32": (-3.4028234663852886e38, 3.4028234663852886e38),
               "bfloat16": (-3.3895313892515355e38, 3.3895313892515355e38)}


def _fill_value_bad(value, dt):
    """a 0-d bool proxy: the 0-d tensor value overflows dtype dt as eager's
    check of value.item() says, or None when no value of value's dtype
    can (the same dtype, a narrower one, bool)"""
    tp = _tp()
    vd = value.dtype
    if dt in (tp.bool, tp.float64) or vd == tp.bool or vd == dt:
        return None
    rng = _FILL_RANGE.get(str(dt).rsplit(".", 1)[-1])
    if rng is None:
        return None
    lo, hi = rng
    if vd.is_floating_point:
        if dt == tp.uint8:
            lo = 0                      # a negative float does not wrap
        fits = {tp.float16: (tp.float32, tp.bfloat16), tp.bfloat16: (tp.float32,)}
        if vd in fits and dt in fits[vd]:
            return None
        v = value.to(tp.float64)
        bad = (v < float(lo)) | (v > float(hi))
        if not dt.is_floating_point:
            bad = bad | ~tp.isfinite(v)     # inf and nan fit only a float
        return bad
    vlo, vhi = _FILL_RANGE[str(vd).rsplit(".", 1)[-1]]
    if dt.is_floating_point or (lo <= vlo and vhi <= hi):
        return None                     # every integer of vd fits
    return (value < lo) | (value > hi)


def _masked_fill_value(input, mask, value, _inplace=False):
    """masked_fill with a Python number or a 0-d tensor: eager's overflow
    check of the value against input's dtype (torch's "value cannot be
    converted to type ... without overflow"), which the recorded op would
    not make. A number is checked now; a traced 0-d tensor gets a runtime
    check (an index check that reruns the call eagerly, so eager's error
    is raised) folded into the value the recorded op reads."""
    if not _is_t(input) or getattr(input, "dtype", None) is None:
        return NotImplemented
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _C._check_scalar(value, input.dtype)
        return NotImplemented
    if not _is_t(value) or value.dim() != 0:
        return NotImplemented
    s = _sample_of(value)
    if s is not None:
        if isinstance(value, _C.Tensor) or s.dim() != 0:
            if s.dim() == 0:
                _C._check_scalar(s.item(), input.dtype)
            return NotImplemented
        try:
            _C._check_scalar(s.item(), input.dtype)
        except RuntimeError:
            raise _BadSample from None      # recorded as itself: eager's error
    bad = _fill_value_bad(value, input.dtype)
    if bad is None:
        return NotImplemented
    tp = _tp()
    ok = _checked_index(bad.to(tp.int64).reshape(1), 1)        # [0], or a rerun
    checked = value - ok.reshape(()).to(value.dtype)           # value itself (-0.0 kept)
    if _inplace:
        return _record(lambda: input.masked_fill_(mask, checked))
    return _record(lambda: input.masked_fill(mask, checked))


def _masked_fill_value_(input, mask, value):
    return _masked_fill_value(input, mask, value, _inplace=True)


def _index_fill(self, dim, index, value):
    tp = _tp()
    d = _index_args(self, dim, index)
    if d is None:
        return NotImplemented
    if _is_t(value):
        if value.dim() != 0:
            return NotImplemented
        value = value.to(self.dtype)
    elif not isinstance(value, (int, float, bool)):
        return NotImplemented
    else:
        _C._check_scalar(value, self.dtype)     # eager's overflow error
    n = int(self.shape[d])
    if index.numel() == 0:
        return self.clone()
    # index_fill (unlike index_add/index_copy) takes indices in [-n, n)
    flat = index.reshape(-1)
    if not _is_t(value) and _seq_ok(self, index):
        idx = _seq_index(tp.where(flat < 0, flat + n, flat), n)
        return _record(lambda: self.index_fill(d, idx, value))
    idx = _checked_index(tp.where(flat < 0, flat + n, flat), n)
    mask = (idx.unsqueeze(0) == tp.arange(n).reshape(n, 1)).any(-1)   # (n,)
    r = tp.where(mask, value, _to_last(self, d))
    return _from_last(r.to(self.dtype), d)


# ------------------------------------------------------------ scans, sizes

def _prefix_sum_int(x):
    """Inclusive prefix sums along the last dim of an integer tensor, exact:
    masked sums over blocks of B = ceil(sqrt(n))."""
    tp = _tp()
    n = int(x.shape[-1])
    dt = x.dtype

    def tri_sum(t, k, strict=False):
        # out[..., i] = sum_{j <= i} t[..., j]  (j < i when strict)
        keep = tp.ones(k, k, dtype=tp.bool).tril(-1 if strict else 0)
        return tp.where(keep, t.unsqueeze(-2), tp.zeros((), dtype=dt)).sum(-1).to(dt)

    if n <= 64:
        return tri_sum(x, n)
    B = int(math.isqrt(n - 1)) + 1
    nb = -(-n // B)
    lead = _ints(x.shape[:-1])
    xp = _F().pad(x, [0, nb * B - n]) if nb * B != n else x
    xb = xp.reshape(tuple(lead) + (nb, B))
    within = tri_sum(xb, B)
    offs = tri_sum(within[..., B - 1], nb, strict=True)
    out = (within + offs.unsqueeze(-1)).reshape(tuple(lead) + (nb * B,))
    return out[..., :n] if nb * B != n else out


def cumsum_int(input, dim, dtype=None):
    """cumsum of an integer/bool tensor (or to an integer dtype) while
    tracing; NotImplemented for what it does not cover."""
    tp = _tp()
    if dtype is not None:
        if getattr(dtype, "is_floating_point", True):
            return NotImplemented
        x = input.to(dtype)
    else:
        if input.is_floating_point():
            return NotImplemented
        x = input.to(tp.int64)
    if input.dim() == 0:
        return NotImplemented
    nd = input.dim()
    d = _wrapdim(dim, nd)
    if d is None or x.dtype == tp.bool or int(x.shape[d]) == 0:
        return NotImplemented
    xt = _to_last(x, d)
    return _from_last(_prefix_sum_int(xt), d)


_ONE_HOT_INNER = [False]


def _one_hot(input, num_classes=-1):
    tp = _tp()
    if _ONE_HOT_INNER[0] or not _is_t(input) or input.dtype != tp.int64 or input.numel() == 0:
        return NotImplemented
    if isinstance(num_classes, bool) or not isinstance(num_classes, int):
        return NotImplemented
    if num_classes == -1:
        k = int(input.max()) + 1       # a value gate: the class count
        if k <= 0:
            return NotImplemented      # eager's "Class values must be non-negative."
    elif num_classes > 0:
        k = num_classes
    else:
        return NotImplemented
    # a class outside [0, k) (negative, or >= num_classes on a later call
    # of the version) would be a row of zeros: the index check reruns the
    # call eagerly, which raises eager's error
    idx = _checked_index(input, k)
    _ONE_HOT_INNER[0] = True
    try:
        return _F().one_hot(idx, k)
    finally:
        _ONE_HOT_INNER[0] = False


def _bshape(a, b):
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(out)


def _select_positions(m):
    """The positions of the True entries of the 1-D bool tensor m, as a
    count kernel: position j = #(inclusive prefix count <= j). The count
    n is a value gate."""
    tp = _tp()
    n = int(m.sum())
    if n == 0:
        return None, 0
    csum = _prefix_sum_int(m.to(tp.int64))
    pos = (csum.unsqueeze(0) <= tp.arange(n).reshape(n, 1)).sum(-1)
    return pos, n


def _masked_select(input, mask):
    tp = _tp()
    if not _is_t(input) or not _is_t(mask) or mask.dtype != tp.bool:
        return NotImplemented
    shape = _bshape(_ints(input.shape), _ints(mask.shape))
    if shape is None:
        return NotImplemented
    m = mask.expand(shape).reshape(-1)
    pos, n = _select_positions(m)
    if pos is None:
        return tp.empty(0, dtype=input.dtype)
    flat = input.expand(shape).reshape(-1)
    return _pick_where(pos.unsqueeze(1) == tp.arange(int(flat.shape[0])), flat.unsqueeze(0), 1)


def _is_bool_t(o):
    """o is a bool tensor (or its proxy; a size proxy is not a tensor)"""
    return _is_t(o) and getattr(o, "dtype", None) is _tp().bool


def _is_int_scalar_t(o):
    """o is a 0-d integer tensor (or proxy) that a key reads as an int:
    torch's rule (a 0-d uint8 or bool tensor is a mask instead)"""
    tp = _tp()
    # the dtype first: a size proxy (x.size(0) - 2) is no tensor and has none
    return (_is_t(o) and getattr(o, "dtype", None) in (tp.int8, tp.int16, tp.int32, tp.int64)
            and o.dim() == 0)


def _key_dims(o):
    """how many dims of the indexed tensor a key item (not None/Ellipsis) takes"""
    tp = _tp()
    if _is_t(o) and getattr(o, "dtype", None) in (tp.bool, tp.uint8):
        return o.dim()
    if isinstance(o, (list, tuple)):
        import numpy as np
        a = np.asarray(o)
        return a.ndim if a.dtype == np.bool_ else 1
    return 1


def _getitem_scalar_tensors(input, key):
    """x[key] whose key holds 0-d integer tensors: torch reads each as the
    int it holds, a select applied before the rest of the key (x[i, :, j]
    has the selected dim gone, not broadcast with j). Traced as a one-row
    gather along that dim (the index stays a graph value: any value, no
    recompilation), then the rest of the key. NotImplemented for other
    keys."""
    items = key if isinstance(key, tuple) else (key,)
    if not _is_t(input) or not any(_is_int_scalar_t(o) for o in items):
        return NotImplemented
    first, rest = [], []
    for o in items:
        if _is_int_scalar_t(o) or (isinstance(o, int) and not isinstance(o, bool)):
            first.append(o)
            continue
        rest.append(o)
        if o is Ellipsis:
            first.append(o)
        elif o is not None:
            first += [slice(None)] * _key_dims(o)
    nd = input.dim()
    used = sum(1 for o in first if o is not Ellipsis)
    if used > nd:
        return NotImplemented           # eager's "too many indices"
    picks, d = [], 0
    for o in first:
        if o is Ellipsis:
            d += nd - used
            continue
        if not isinstance(o, slice):
            picks.append((d, o))
        d += 1
    y = input
    for d, o in reversed(picks):         # later dims first: earlier ones keep their place
        # eager's result is a view (a select): a gather of the one row would
        # lose a later in-place write through it, so the index's value is
        # read (a value guard: one version per index value)
        y = y.select(d, o if isinstance(o, int) else int(o))
    return y[tuple(rest)] if rest else y


def _getitem(input, key):
    r = _getitem_scalar_tensors(input, key)
    return _getitem_mask(input, key) if r is NotImplemented else r


def _getitem_mask(input, key):
    """x[mask], mask a bool tensor of x's leading shape: the rows of
    x.reshape(-1, *rest) at the mask's True positions (their count a value
    gate, as masked_select). Any other key is recorded as a getitem."""
    tp = _tp()
    if not _is_t(input) or not _is_bool_t(key):
        return NotImplemented
    k = key.dim()
    shape = _ints(input.shape)
    if k == 0 or k > len(shape) or _ints(key.shape) != shape[:k]:
        return NotImplemented       # eager's error (or a 0-d mask's unsqueeze)
    rest = shape[k:]
    pos, n = _select_positions(key.reshape(-1))
    if pos is None:
        return tp.empty((0, *rest), dtype=input.dtype)
    return input.reshape(-1, *rest).index_select(0, pos)


def _setitem_mask(input, key, value):
    """x[mask] = v, mask a bool tensor of x's leading shape and v a tensor
    (a number is masked_fill, already native): the i-th True position gets
    row i of v broadcast to (count, *rest), the count a value gate; written
    as x.copy_(where(mask, rows, x)), rows picked by the prefix count."""
    tp = _tp()
    if not _is_t(input) or not _is_bool_t(key) or not _is_t(value) \
            or getattr(value, "dtype", None) is None:
        return NotImplemented
    k = key.dim()
    shape = _ints(input.shape)
    if k == 0 or k > len(shape) or _ints(key.shape) != shape[:k] or value.dim() == 0:
        return NotImplemented
    rest = shape[k:]
    m = key.reshape(-1)
    n = int(m.sum())
    if _bshape(_ints(value.shape), [n] + rest) != tuple([n] + rest):
        return NotImplemented       # eager's shape error
    si, sv = _sample_of(input), _sample_of(value)
    if si is not None and sv is not None:
        try:
            _C._check_no_overlap(si, sv, True)
        except RuntimeError:
            return NotImplemented   # recorded as itself: eager's overlap error
    if n == 0:
        return None
    idx = (_prefix_sum_int(m.to(tp.int64)) - 1).clamp(min=0)
    rows = value.expand(n, *rest).index_select(0, idx).reshape(shape)
    input.copy_(tp.where(key.reshape(*key.shape, *([1] * len(rest))), rows, input))
    return None


def _repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    tp = _tp()
    if not _is_t(input):
        return NotImplemented
    if repeats is None:              # repeat_interleave(repeats): indices
        if input.dim() != 1 or input.is_floating_point() or input.dtype == tp.bool:
            return NotImplemented
        return _repeat_index(input, output_size)
    if _is_t(repeats):
        if repeats.dim() > 1 or repeats.is_floating_point() or repeats.dtype == tp.bool:
            return NotImplemented
        if repeats.numel() == 1:
            return NotImplemented if repeats.dim() > 1 else _repeat_tensor_scalar(
                input, repeats, dim, output_size)
        x = input.reshape(-1) if dim is None else input
        d = 0 if dim is None else _wrapdim(dim, max(x.dim(), 1))
        if d is None or x.dim() == 0 or int(repeats.numel()) != int(x.shape[d]):
            return NotImplemented
        idx = _repeat_index(repeats, output_size)
        if idx is NotImplemented:
            return NotImplemented
        xl = _to_last(x, d)                                   # (..., n)
        k = int(x.shape[d])
        sel = idx.unsqueeze(1) == tp.arange(k)                # (total, n)
        return _from_last(_pick_where(sel, xl.unsqueeze(-2), -1), d)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 0:
        return NotImplemented
    x = input.reshape(-1) if dim is None else input
    if x.dim() == 0:
        x = x.reshape(1)
    d = 0 if dim is None else _wrapdim(dim, x.dim())
    if d is None:
        return NotImplemented
    sh = _ints(x.shape)
    if output_size is not None and output_size != sh[d] * repeats:
        return NotImplemented
    e = sh[:d + 1] + [repeats] + sh[d + 1:]
    out = sh[:d] + [sh[d] * repeats] + sh[d + 1:]
    return x.unsqueeze(d + 1).expand(e).reshape(out)


def _repeat_tensor_scalar(input, repeats, dim, output_size):
    # a one-element repeats tensor: its value decides the shape (value gate)
    return _repeat_interleave(input, int(repeats.reshape(())), dim, output_size=output_size)


def _repeat_index(rep, output_size):
    """repeat_interleave(rep) for a 1-D integer tensor: index i repeated
    rep[i] times; the total is a value gate (or output_size)."""
    tp = _tp()
    r = rep.to(tp.int64)
    if bool((r < 0).any()):
        return NotImplemented          # eager's "repeats can not be negative"
    total = int(r.sum()) if output_size is None else int(output_size)
    if total == 0:
        return tp.empty(0, dtype=tp.int64)
    csum = _prefix_sum_int(r)
    return (csum.unsqueeze(0) <= tp.arange(total).reshape(total, 1)).sum(-1)


# ------------------------------------------------------------ multinomial

# without replacement: up to this many samples one argmax each; more (over
# at most _MN_RANK_MAX categories) by rank counting
_MN_ARGMAX_MAX = 16
_MN_RANK_MAX = 4096

def _multinomial(input, num_samples, replacement=False, *, generator=None):
    tp = _tp()
    if not _is_t(input) or input.dim() not in (1, 2):
        return NotImplemented
    if generator is not None and not isinstance(generator, tp.Generator):
        return NotImplemented
    if not input.is_floating_point() or isinstance(num_samples, bool):
        return NotImplemented
    ns = int(num_samples)
    p = input.reshape(-1, int(input.shape[-1])).to(tp.float64)
    rows, n_cat = _ints(p.shape)
    if ns <= 0 or (not replacement and ns > n_cat) or rows == 0 or n_cat == 0:
        return NotImplemented
    tot = p.sum(1)
    bad = (~tp.isfinite(p)).any(1) | (p < 0).any(1) | (tot <= 0)
    # the same draw as eager: one float64 uniform tensor from the generator
    # (rand_like of a proxy is recorded; tp.rand called from the package
    # would be drawn once, at trace time)
    shape_src = p[:, :1].expand(rows, ns) if replacement else p
    if generator is None:
        u = tp.rand_like(shape_src, dtype=tp.float64)
    else:
        # (the same draw from generator: uniform_(0, 1) of float64 is
        # rand's u53 words)
        u = tp.zeros_like(shape_src, dtype=tp.float64).uniform_(0.0, 1.0, generator=generator)
    if replacement:
        cdf = p.cumsum(1) / tot.unsqueeze(1)
        last = tp.arange(n_cat) == n_cat - 1
        cdf = tp.where(last, 1.0, cdf)
        r = (cdf.unsqueeze(1) <= u.unsqueeze(2)).sum(-1)           # searchsorted right
        r = r.clamp(max=n_cat - 1)
    else:
        keys = tp.where(p > 0, p / -tp.log1p(-u), -1.0)
        bad = bad | ((p > 0).sum(1) < ns)
        ar = tp.arange(n_cat)
        if ns <= _MN_ARGMAX_MAX or n_cat > _MN_RANK_MAX:
            # one argmax per sample: O(ns * n) work, ns reductions
            cols = []
            for _ in range(ns):
                j = keys.argmax(1, keepdim=True)           # first maximum: a stable sort's order
                cols.append(j)
                keys = tp.where(ar == j, float("-inf"), keys)
            r = tp.cat(cols, 1) if ns > 1 else cols[0]
        else:
            # the rank of each key in a stable descending sort (the keys
            # before it: larger, or equal and to its left), then the
            # category of rank j for j < ns: two fused counts, O(n^2)
            # work and a graph of fixed size
            ki, kj = keys.unsqueeze(2), keys.unsqueeze(1)                  # (rows, n, 1), (rows, 1, n)
            left = ar.reshape(1, n_cat) < ar.reshape(n_cat, 1)              # [i, j]: j < i
            rank = ((kj > ki) | ((kj == ki) & left)).sum(-1)               # (rows, n)
            hit = rank.unsqueeze(1) == tp.arange(ns).reshape(ns, 1)        # (rows, ns, n)
            r = tp.where(hit, ar, 0).sum(-1)
    # an invalid row indexes out of range: the runtime check reruns the
    # call eagerly, which raises eager's error (at trace time: the call
    # is recorded as itself, whose sample raises it)
    bv = _sample_of(bad)
    if bv is not None and bool(bv.any()):
        raise _BadSample
    r = r + bad.to(tp.int64).unsqueeze(1) * n_cat
    r = tp.arange(n_cat).index_select(0, r.reshape(-1)).reshape(rows, ns)
    return r if input.dim() == 2 else r.reshape(ns)


# ------------------------------------------------------------ losses

_RED = ("mean", "sum", "none")


def _nll_core(logp, target, weight, ignore_index, reduction):
    """nll_loss of log-probabilities (N, C, ...) / (C,) with class-index
    targets, torch's semantics."""
    tp = _tp()
    one = logp.dim() == 1
    if one:
        logp, target = logp.unsqueeze(0), target.reshape(1)
    valid = target != ignore_index
    t = tp.where(valid, target, 0)
    c = int(logp.shape[1])
    t = _checked_index(t, c)           # eager's error for a class out of range
    cls = tp.arange(c).reshape([c] + [1] * (t.dim() - 1))
    sel = t.unsqueeze(1) == cls                               # (N, C, ...)
    picked = _pick_where(sel, logp, 1)
    if weight is not None:
        wb = weight.reshape([c] + [1] * (t.dim() - 1))
        w = tp.where(valid, _pick_where(sel, wb.expand(tuple(logp.shape)), 1),
                     tp.zeros((), dtype=weight.dtype))
    else:
        w = valid.to(logp.dtype)
    loss = -picked * w
    if reduction == "none":
        return loss.reshape(()) if one else loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w.sum()


def _loss_args_ok(input, target, weight, size_average, reduce, reduction, ignore_index):
    tp = _tp()
    if size_average is not None or reduce is not None or reduction not in _RED:
        return False
    if not _is_t(input) or not _is_t(target) or not input.is_floating_point():
        return False
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        return False
    if input.dim() == 0:
        return False
    cd = 0 if input.dim() == 1 else 1
    c = int(input.shape[cd])
    if weight is not None:
        if not _is_t(weight) or weight.dim() != 1 or int(weight.numel()) != c \
                or weight.dtype != input.dtype:
            return False
    if target.is_floating_point():
        return _ints(target.shape) == _ints(input.shape)
    if target.dtype != tp.int64:
        return False
    want = [] if input.dim() == 1 else [int(input.shape[0])] + _ints(input.shape[2:])
    return _ints(target.shape) == want


def _nll_loss(input, target, weight=None, size_average=None, ignore_index=-100,
              reduce=None, reduction="mean"):
    from tensorplay._ops import _legacy_reduction
    reduction = _legacy_reduction(size_average, reduce, reduction)
    size_average = reduce = None
    if not _loss_args_ok(input, target, weight, size_average, reduce, reduction, ignore_index):
        return NotImplemented
    if target.is_floating_point():
        return NotImplemented
    return _nll_core(input, target, weight, ignore_index, reduction)


def _cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                   reduce=None, reduction="mean", label_smoothing=0.0):
    tp = _tp()
    from tensorplay._ops import _legacy_reduction
    reduction = _legacy_reduction(size_average, reduce, reduction)
    size_average = reduce = None
    if not _loss_args_ok(input, target, weight, size_average, reduce, reduction, ignore_index):
        return NotImplemented
    ls = float(label_smoothing)
    if not 0.0 <= ls <= 1.0:
        return NotImplemented
    if input.dtype in (tp.float16, tp.bfloat16):
        # in float32 (torch's CPU kernels accumulate half in float too),
        # the loss rounded back to the input's dtype
        if target.is_floating_point() and target.dtype != input.dtype:
            return NotImplemented
        r = _cross_entropy(input.float(), target.float() if target.is_floating_point() else target,
                           None if weight is None else weight.float(), None, ignore_index,
                           None, reduction, ls)
        return NotImplemented if r is NotImplemented else r.to(input.dtype)
    cd = 0 if input.dim() == 1 else 1
    c = int(input.shape[cd])
    logp = _F().log_softmax(input, cd)
    wb = None
    if weight is not None:
        wb = weight.reshape([c] + [1] * (input.dim() - cd - 1))
    if target.is_floating_point():
        tt = target * (1 - ls) + ls / c if ls else target
        prod = logp * tt if wb is None else logp * tt * wb
        loss = -prod.sum(cd)
        if reduction == "mean":
            return loss.mean() if input.dim() > 1 else loss
        return loss.sum() if reduction == "sum" else loss
    r = _nll_core(logp, target, weight, ignore_index, reduction)
    if not ls:
        return r
    lp = logp if input.dim() > 1 else logp.unsqueeze(0)
    tt = target if input.dim() > 1 else target.reshape(1)
    valid = tt != ignore_index
    wsum = lp if wb is None else lp * wb
    smooth = -wsum.sum(1) * valid
    if reduction == "mean":
        if weight is None:
            s = smooth.sum() / valid.sum()
        else:
            ts = tp.where(valid, tt, 0)
            sel = ts.unsqueeze(1) == tp.arange(c).reshape([c] + [1] * (ts.dim() - 1))
            wt = _pick_where(sel, wb.expand(tuple(lp.shape)), 1)
            s = smooth.sum() / (wt * valid).sum()
    elif reduction == "sum":
        s = smooth.sum()
    else:
        s = smooth if input.dim() > 1 else smooth.reshape(())
    return (1 - ls) * r + ls * s / c


def _reduced(r, reduction):
    if reduction == "none":
        return r
    return r.sum() if reduction == "sum" else r.mean()


def _pointwise_loss_ok(input, target, reduction, *extra):
    if reduction not in _RED or not _is_t(input) or not _is_t(target):
        return False
    if not input.is_floating_point() or not target.is_floating_point():
        return False      # eager's dtype errors: the op recorded whole
    return all(t is None or (_is_t(t) and t.is_floating_point()) for t in extra)


def _mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    from tensorplay._ops import _legacy_reduction, _warn_target_size
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if not _pointwise_loss_ok(input, target, reduction):
        return NotImplemented
    _warn_target_size(input, target)
    d = input - target
    return _reduced(d * d, reduction)


def _l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    from tensorplay._ops import _legacy_reduction, _warn_target_size
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if not _pointwise_loss_ok(input, target, reduction):
        return NotImplemented
    _warn_target_size(input, target)
    return _reduced((input - target).abs(), reduction)


def _smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean",
                    beta=1.0):
    from tensorplay._ops import _legacy_reduction, _warn_target_size
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if not _pointwise_loss_ok(input, target, reduction) or beta < 0:
        return NotImplemented
    _warn_target_size(input, target)
    d = (input - target).abs()
    if beta == 0:
        return _reduced(d, reduction)
    return _reduced(_tp().where(d < beta, (0.5 / beta) * d * d, d - 0.5 * beta), reduction)


def _bce_with_logits(input, target, weight=None, size_average=None, reduce=None,
                     reduction="mean", pos_weight=None):
    """(1 - t) x + lw softplus(-x), lw = 1 + (pos_weight - 1) t: torch's
    value, and its gradient is sigmoid(x) - t (times the weights)
    everywhere, as torch's fused backward."""
    from tensorplay._ops import _legacy_reduction
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if not _pointwise_loss_ok(input, target, reduction, weight, pos_weight):
        return NotImplemented
    if _ints(input.shape) != _ints(target.shape):
        raise ValueError(f"Target size ({target.shape}) must be the same as "
                         f"input size ({input.shape})")
    sp = _F().softplus(-input)
    if pos_weight is not None:
        sp = (1 + (pos_weight - 1) * target) * sp
    r = (1 - target) * input + sp
    if weight is not None:
        r = r * weight
    return _reduced(r, reduction)


def embedding_renorm_(weight, input, max_norm, norm_type=2.0):
    """torch.embedding_renorm_: each row of ``weight`` that ``input``
    indexes and whose norm_type-norm exceeds max_norm is scaled in place to
    max_norm / (norm + 1e-7) of itself (under no_grad). Rows indexed twice
    get the same value written twice. Tensor ops only, so eager and traced
    runs share it; returns weight."""
    tp = _tp()
    with tp.no_grad():
        idx = input.reshape(-1).long()
        rows = weight.index_select(0, idx)
        norms = rows.norm(p=norm_type, dim=1, keepdim=True)
        scale = tp.where(norms > max_norm, max_norm / (norms + 1e-7), tp.ones_like(norms))
        weight.index_copy_(0, idx, rows * scale)
    return weight


def _embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
               scale_grad_by_freq=False, sparse=False):
    """F.embedding with max_norm while tracing: the renorm of the indexed rows
    (a write to weight) then the lookup."""
    if max_norm is None:
        return NotImplemented
    embedding_renorm_(weight, input, max_norm, norm_type)
    return _F().embedding(input, weight, padding_idx, None, norm_type, scale_grad_by_freq,
                          sparse)


# ------------------------------------------------------------ flip / roll / repeat / where(cond)

def _int_seq(args, kw, name):
    """dims / shifts / sizes given as varargs ints, one list/tuple, or the
    keyword `name`; None where the form is not plain ints."""
    if name in kw:
        if args:
            return None
        v = kw.pop(name)
        args = (v,)
    if kw:
        return None
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = tuple(args[0])
    if any(type(a) is not int for a in args):
        return None
    return tuple(args)


def _arange_on(n, x, *a):
    tp = _tp()
    dev = getattr(x, "device", None)
    kw = {"device": dev} if dev is not None and dev.type != "cpu" else {}
    return tp.arange(*a, **kw) if a else tp.arange(n, **kw)


def _flip(input, *dims, **kw):
    """index_select with a reversed arange per flipped dim (native,
    differentiable)."""
    if not _is_t(input):
        return NotImplemented
    d = _int_seq(dims, dict(kw), "dims")
    nd = input.dim()
    if d is None or any(not -max(nd, 1) <= k < max(nd, 1) for k in d):
        return NotImplemented
    d = [k % max(nd, 1) for k in d]
    if len(set(d)) != len(d):
        return NotImplemented                  # eager's "dim appears multiple times"
    x = input
    for k in d:
        n = int(x.shape[k]) if nd else 1
        if nd and n > 1:
            x = x.index_select(k, _arange_on(n, x, n - 1, -1, -1))
    return x.clone() if x is input else x


def _roll(input, shifts, dims=None):
    """one cat of two narrows per rolled dim (the flattened tensor when dims
    is None)."""
    tp = _tp()
    if not _is_t(input):
        return NotImplemented
    sh = (shifts,) if type(shifts) is int else shifts
    if not isinstance(sh, (list, tuple)) or any(type(v) is not int for v in sh):
        return NotImplemented
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        if len(sh) != 1:
            return NotImplemented
        if input.dim() == 0:
            return input.clone()
        return _roll(input.reshape(-1), sh[0], 0).reshape(tuple(input.shape))
    dl = (dims,) if type(dims) is int else dims
    if not isinstance(dl, (list, tuple)) or any(type(v) is not int for v in dl) \
            or len(dl) != len(sh):
        return NotImplemented
    nd = input.dim()
    if nd == 0 or any(not -nd <= k < nd for k in dl):
        return NotImplemented
    x = input
    for s, k in zip(sh, dl):
        k %= nd
        n = int(x.shape[k])
        if n == 0 or s % n == 0:
            continue
        s %= n
        x = tp.cat([x.narrow(k, n - s, s), x.narrow(k, 0, n - s)], k)
    return x.clone() if x is input else x


def _repeat(input, *sizes, **kw):
    """torch's Tensor.repeat as tile's view + expand + reshape (native)."""
    if not _is_t(input):
        return NotImplemented
    reps = _int_seq(sizes, dict(kw), "repeats")
    if reps is None or len(reps) < input.dim() or any(r < 0 for r in reps):
        return NotImplemented
    if not reps:
        return input.clone()
    out = _tp().tile(input, reps)
    # all ones: tile's reshape is a view of input, eager's repeat a new
    # tensor (outputs alias as eager's, issue 13)
    return out.clone() if all(r == 1 for r in reps) else out


def _where_cond(condition, input=None, other=None, **kw):
    """where(condition) alone is nonzero(condition, as_tuple=True) (torch's
    definition): recorded as that op, so strict_native names it."""
    if input is not None or other is not None or kw or not _is_t(condition):
        return NotImplemented
    return _tp().nonzero(condition, as_tuple=True)


def _stepping_aside(fn):
    def decomp(*args, **kwargs):
        if _SEQ_INNER[0]:
            return NotImplemented      # _record: the op itself
        try:
            return fn(*args, **kwargs)
        except _BadSample:
            return NotImplemented
    decomp.__name__ = decomp.__qualname__ = fn.__name__
    decomp.__doc__ = fn.__doc__
    return decomp


def install():
    F = _F()
    tp = _tp()

    def reg(key, fn):
        _C._set_trace_decomposition(key, _stepping_aside(fn))
    for key, fn in (("scatter", _scatter), ("scatter_add", _scatter_add),
                    ("scatter_reduce", _scatter_reduce), ("index_add", _index_add),
                    ("index_copy", _index_copy), ("index_fill", _index_fill),
                    ("masked_select", _masked_select),
                    ("repeat_interleave", _repeat_interleave),
                    ("multinomial", _multinomial),
                    ("flip", _flip), ("roll", _roll), ("repeat", _repeat)):
        reg(key, fn)
        f = getattr(F, key, None)
        if f is not None:
            reg(f, fn)
        f = getattr(tp, key, None)
        if f is not None:
            reg(f, fn)
    reg("masked_fill", _masked_fill_value)
    reg(tp.masked_fill, _masked_fill_value)
    reg("masked_fill_", _masked_fill_value_)
    reg("__getitem__", _getitem)
    reg("__setitem__", _setitem_mask)
    reg(F.one_hot, _one_hot)
    reg(F.embedding, _embedding)
    reg(F.nll_loss, _nll_loss)
    reg(F.cross_entropy, _cross_entropy)
    from tensorplay import _einsum
    reg(tp.einsum, _einsum.traced)
    reg(tp.where, _where_cond)
    for fn, decomp in ((F.mse_loss, _mse_loss), (F.l1_loss, _l1_loss),
                       (F.smooth_l1_loss, _smooth_l1_loss),
                       (F.binary_cross_entropy_with_logits, _bce_with_logits)):
        reg(fn, decomp)
