"""Helpers of the derivative formulas (STAX_OP_DERIV rows of csrc/ops/ops.def).

The C engine evaluates each formula; a call whose head starts with ``_``
lands here. Helpers compute with tensorplay ops, so under
``create_graph=True`` what they do is recorded too (double backward); the
only NumPy here computes constants (index maps, counts)."""
import math

import numpy as np

from tensorplay import _C

_F = None


def _tp():
    global _F
    if _F is None:
        import tensorplay
        _F = tensorplay
    return _F


def _zeros(shape, dtype):
    return _tp().zeros(tuple(shape), dtype=getattr(_tp(), dtype))


def _ones_like(t):
    return _tp().ones_like(t)


def _sum_to(g, shape):
    """Sum a broadcast gradient back to ``shape``."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = g.dim() - len(shape)
    dims = list(range(lead))
    for i, s in enumerate(shape):
        if s == 1 and g.shape[lead + i] != 1:
            dims.append(lead + i)
    if dims:
        g = g.sum(dims, keepdim=True)
    return g.reshape(shape)


def _scale(g, alpha):
    return g if isinstance(alpha, (int, float)) and alpha == 1 else g * alpha


def _one_minus(w):
    return 1 - w


# a tensor, or (in the joint graph's trace) a proxy of one
_TENSORS = (_C.Tensor, _C.Proxy) if hasattr(_C, "Proxy") else (_C.Tensor,)


def _log(x):
    if isinstance(x, _TENSORS):
        return x.log()
    return math.log(x)


def _pow_self(grad, self, exponent):
    if isinstance(exponent, (int, float)):
        if exponent == 0:
            return grad * 0
        return grad * (exponent * self.pow(exponent - 1))
    tp = _tp()
    return tp.where(exponent == 0, 0.0, grad * (exponent * self.pow(exponent - 1)))


def _between(x, lo, hi):
    m = None
    if lo is not None:
        m = x >= lo
    if hi is not None:
        m2 = x <= hi
        m = m2 if m is None else m.logical_and(m2)
    if m is None:
        return _tp().ones_like(x, dtype=_tp().bool)
    return m


def _gelu_tanh_grad(grad, x):
    kb = math.sqrt(2.0 / math.pi)
    kk = 0.044715
    x2 = x * x
    inner = (x + x2 * x * kk) * kb
    t = inner.tanh()
    left = x * 0.5
    right = t + 1
    dr = (1 - t * t) * ((x2 * (3 * kk) + 1) * kb)
    return grad * (right * 0.5 + left * dr)


def _dims_of(dim, ndim):
    if dim is None:
        return list(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    dim = list(dim)
    if len(dim) == 0:
        return list(range(ndim))
    return sorted(d % ndim if ndim else 0 for d in dim)


def _unreduce(g, shape, dim, keepdim):
    """Broadcast a reduction's gradient back over the reduced dims."""
    shape = tuple(shape)
    if not keepdim and len(shape) > 0:
        ks = list(shape)
        for d in _dims_of(dim, len(shape)):
            ks[d] = 1
        g = g.reshape(ks)
    return g.expand(shape)


def _nreduced(shape, dim):
    n = 1
    for d in _dims_of(dim, len(shape)):
        n *= shape[d] if len(shape) else 1
    return n


def _evenly(grad, self, result, dim, keepdim):
    """amax/amin/max(): the gradient is shared evenly among the ties."""
    shape = tuple(self.shape)
    r = _unreduce(result, shape, dim, keepdim)
    mask = (self == r)
    cnt = _unreduce(mask.sum(_dims_of(dim, len(shape)) or None, keepdim=True).to(grad.dtype)
                    if len(shape) else mask.to(grad.dtype), shape, dim, True)
    return _tp().where(mask, _unreduce(grad, shape, dim, keepdim) / cnt, 0.0)


def _on(t):
    """device= for a helper's new tensor when the gradient lives off the CPU
    (a sort's backward on CUDA built its index map on the host and mixed devices);
    nothing on the CPU, so traced backwards keep their factory calls as they were."""
    d = getattr(t, "device", None)
    return {"device": d} if d is not None and getattr(d, "type", "cpu") != "cpu" else {}


def _take_dim(grad, shape, dim, indices, keepdim):
    """Values taken along dim at indices (max.dim, sort, topk, median.dim)."""
    tp = _tp()
    shape = tuple(shape)
    nd = len(shape)
    if nd == 0:
        return grad.reshape(())
    dim = dim % nd
    if not keepdim:
        grad = grad.unsqueeze(dim)
        indices = indices.unsqueeze(dim)
    pos = tp.arange(math.prod(shape), dtype=tp.int64, **_on(indices)).reshape(shape).gather(dim, indices)
    flat = tp.zeros(math.prod(shape), dtype=grad.dtype, **_on(grad))
    flat = flat.index_add(0, pos.reshape(-1), grad.reshape(-1))
    return flat.reshape(shape)


def _pick_median(grad, self, result):
    tp = _tp()
    a = self.detach().reshape(-1)
    idx = int(np.flatnonzero(a.numpy() == result.item())[0]) if a.numel() else 0
    flat = tp.zeros(a.numel(), dtype=grad.dtype, **_on(grad))
    flat = flat.index_add(0, tp.tensor([idx], **_on(grad)), grad.reshape(1))
    return flat.reshape(self.shape)


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    if unbiased is None:
        return 1
    return 1 if unbiased else 0


def _var_grad(grad, self, dim, unbiased, keepdim, correction):
    shape = tuple(self.shape)
    n = _nreduced(shape, dim)
    c = _correction(unbiased, correction)
    dims = _dims_of(dim, len(shape)) or None
    mu = self.mean(dims, keepdim=True) if len(shape) else self
    g = _unreduce(grad, shape, dim, keepdim)
    return g * (self - mu) * (2.0 / max(n - c, 0) if n - c > 0 else float("inf"))


def _prod_grad(grad, self, result, dim, keepdim):
    """prod's gradient, zeros included (torch's): a slice without zeros
    gives grad * result / x; in a slice with exactly one zero, the zero's
    position gets grad * (the product of the others) and the rest 0; two or
    more zeros give 0 everywhere. No division by a zero, no data branch, and
    differentiable again (double backward matches torch's up to two zeros a
    slice)."""
    tp = _tp()
    shape = tuple(self.shape)
    if len(shape) == 0:
        return grad
    g = _unreduce(grad, shape, dim, keepdim)
    r = _unreduce(result, shape, dim, keepdim)
    zero = self == 0
    safe = tp.where(zero, 1.0, self)
    zval = tp.where(zero, self, 0.0)
    if dim is None:
        nz = zero.sum()
        others = safe.prod()
        zval = zval.sum()
    else:
        nz = zero.sum(dim, keepdim=True)
        others = safe.prod(dim, keepdim=True)
        zval = zval.sum(dim, keepdim=True)
    # zval is the sum of the slice's zeros: 0, but it carries the derivative
    # with respect to each zero, which double backward needs (one zero: at
    # the other positions; two zeros: at each zero, through the other one)
    one = tp.where(zero, g * others, g * (others / safe) * zval)
    two = tp.where(zero, g * others * (zval - self), 0.0)
    return tp.where(nz == 0, g * r / safe,
                    tp.where(nz == 1, one, tp.where(nz == 2, two, 0.0)))


def _std_grad(grad, self, result, dim, unbiased, keepdim, correction):
    """std's gradient: var's divided by 2 * std, and 0 where std is 0 (a
    constant slice; torch masks it rather than giving 0/0 = NaN)."""
    tp = _tp()
    shape = tuple(self.shape)
    r = _unreduce(result, shape, dim, keepdim)
    vg = _var_grad(grad, self, dim, unbiased, keepdim, correction)
    return tp.where(r == 0, 0.0, vg / (r * 2))


def _norm_grad(grad, self, result, p, dim, keepdim):
    shape = tuple(self.shape)
    if p is None or p == "fro":
        p = 2
    g = _unreduce(grad, shape, dim, keepdim)
    r = _unreduce(result, shape, dim, keepdim)
    tp = _tp()
    if p == 2:
        return tp.where(r == 0, 0.0, g * self / r)
    if p == 1:
        return g * self.sign()
    if p == float("inf") or p == float("-inf"):
        mask = (self.abs() == r)
        cnt = _unreduce(mask.sum(_dims_of(dim, len(shape)), keepdim=True).to(g.dtype),
                        shape, dim, True)
        return tp.where(mask, g * self.sign() / cnt, 0.0)
    return g * self * self.abs().pow(p - 2) / r.pow(p - 1)


def _sdim(dim, shape):
    if dim is None:
        nd = len(shape)
        return 0 if nd in (0, 1, 3) else 1
    return dim


def _ln_dims(shape, normalized_shape):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    k = len(normalized_shape)
    return list(range(len(shape) - k, len(shape)))


def _dropout_active(p, training):
    return bool(training) and p > 0


def _embedding_grad(grad, input, weight_shape, padding_idx, scale_grad_by_freq=False):
    tp = _tp()
    n, d = weight_shape
    idx = input.reshape(-1)
    g = grad.reshape(-1, d)
    if padding_idx is not None:
        keep = (idx != (padding_idx % n)).unsqueeze(1)
        g = tp.where(keep, g, 0.0)
    if scale_grad_by_freq:
        # each row's gradient divided by how often the batch indexes it (torch)
        counts = tp.zeros(n, dtype=grad.dtype, **_on(grad)).index_add(
            0, idx, tp.ones(idx.shape, dtype=grad.dtype, **_on(grad)))
        g = g / counts.index_select(0, idx).unsqueeze(1)
    return tp.zeros((n, d), dtype=grad.dtype, **_on(grad)).index_add(0, idx, g)


def _lossg(grad, reduction, input, target):
    if reduction == "mean":
        n = max(_tp().broadcast_shapes(input.shape, target.shape).numel()
                if hasattr(_tp(), "broadcast_shapes") else input.numel(), 1)
        return grad / n
    return grad


def _cdim(input):
    return 1 if input.dim() >= 2 else 0


_TINY = {"float32": 1.1754943508222875e-38, "float64": 2.2250738585072014e-308,
         "float16": 6.103515625e-05, "bfloat16": 1.1754943508222875e-38}


def _nll_grad(grad, input, target, weight, ignore_index, reduction, label_smoothing):
    """d(loss)/d(log-probabilities) of nll_loss / cross_entropy's log_softmax
    output: a coefficient array times the incoming grad. Written in tensor
    ops only (no values read into Python), so the compiled joint graph
    traces it like any formula."""
    tp = _tp()
    nd = input.dim()
    cd = 1 if nd >= 2 else 0
    C = input.shape[cd]
    dt = input.dtype
    shp = [1] * nd
    shp[cd] = C
    w = weight.to(dt) if weight is not None else None
    if target.is_floating_point():               # class probabilities
        coef = -target.to(dt)
        if label_smoothing:
            coef = -(target.to(dt) * (1 - label_smoothing) + label_smoothing / C)
        if w is not None:
            coef = coef * w.reshape(shp)
        if reduction == "mean":
            coef = coef / max(input.numel() // C, 1)
    else:
        valid = target != ignore_index
        safe = tp.where(valid, target, 0)
        classes = tp.arange(C, dtype=safe.dtype, **_on(safe)).reshape(shp)
        onehot = ((safe.unsqueeze(cd) if nd >= 2 else safe.unsqueeze(0)) == classes).to(dt) \
            if nd >= 2 else (safe == classes).to(dt)
        if w is not None:
            wt = w.index_select(0, safe.reshape(-1)).reshape(tuple(safe.shape))
        else:
            wt = tp.ones(tuple(safe.shape), dtype=dt, **_on(safe))
        wt = tp.where(valid, wt, 0.0)
        wex = wt.unsqueeze(cd) if nd >= 2 else wt
        coef = -onehot * wex
        if label_smoothing:
            wc = w if w is not None else tp.ones(C, dtype=dt, **_on(safe))
            validx = (valid.unsqueeze(cd) if nd >= 2 else valid).to(dt)
            smooth = -(wc.reshape(shp) if nd >= 2 else wc) * validx / C
            coef = coef * (1 - label_smoothing) + smooth * label_smoothing
        if reduction == "mean":
            if w is not None or not label_smoothing:
                coef = coef / wt.sum().clamp_min(_TINY.get(str(dt).split(".")[-1], 1e-38))
            else:
                coef = coef / valid.sum().clamp_min(1).to(dt)
    if reduction == "none" and nd >= 2:
        grad = grad.unsqueeze(cd)
    return coef * grad


def _ce_target_grad(grad, logp, target, weight, reduction, label_smoothing):
    """cross_entropy with class probabilities: d loss / d target."""
    cd = 1 if logp.dim() >= 2 else 0
    C = logp.shape[cd]
    g = -logp
    if weight is not None:
        shp = [1] * logp.dim()
        shp[cd] = C
        g = g * weight.reshape(shp)
    if label_smoothing:
        g = g * (1 - label_smoothing)
    if reduction == "mean":
        return g * (grad / max(logp.numel() // C, 1))
    if reduction == "none" and logp.dim() >= 2:
        grad = grad.unsqueeze(cd)
    return g * grad


def _pick(node, grads, self):
    """Gradient of an op whose every output element is an element of its
    first argument (views, indexing, gather, flip, repeat, pad...): replay
    the op on 1 + the element index and add each output's gradient at the
    index it names (0: a padding element, no input). When no input element
    appears twice among the outputs (views, flip, roll, slicing, indexing
    by constants) the gradient is a gather instead of a scatter-add: the
    inverse index map is computed here, once, and index_select reads each
    input's gradient from the outputs' (what the compiled backward lowers
    natively)."""
    tp = _tp()
    # self: the input, or only its shape (views read nothing else of their
    # input: an in-place write to the base must not invalidate them)
    shape = tuple(self.shape) if hasattr(self, "shape") else tuple(self)
    if node.name() == "AsStridedBackward0" and hasattr(self, "is_contiguous") \
            and not self.is_contiguous():
        raise NotImplementedError(
            "tensorplay: the gradient of as_strided() of a non-contiguous tensor is not "
            "implemented (as_strided addresses the storage, beyond the tensor's elements); "
            "call .contiguous() first")
    n = math.prod(shape)
    # float64 indices (exact to 2**53): a replay can then write any constant,
    # pad's value=-inf of max pooling included
    ix = tp.arange(1, n + 1, dtype=tp.float64).reshape(shape)
    pos = node._replay(ix)
    # a constant the op writes (pad's value) is the same in a replay on
    # ix + n; an element of the input moves by n
    pos2 = node._replay(ix + n)
    if isinstance(pos, _TENSORS):
        pos, pos2 = (pos,), (pos2,)
    g0 = next(g for g in grads if g is not None)
    if all(isinstance(p, _C.Tensor) for p in pos):
        maps = [np.where(p2.numpy() - p.numpy() == n, p.numpy(), 0).reshape(-1).astype(np.int64)
                for p, p2 in zip(pos, pos2)]
        hit = np.concatenate(maps) if maps else np.zeros(0, np.int64)
        nz = hit[hit > 0]
        if len(np.unique(nz)) == len(nz):
            out = None
            for m, g in zip(maps, grads):
                if g is None or not (m > 0).any():
                    continue
                # per input element: its position in this output, or -1
                at = np.full(n + 1, -1, dtype=np.int64)
                at[m[m > 0]] = np.nonzero(m > 0)[0]
                at = at[1:]
                picked = g.reshape(-1).index_select(0, tp.tensor(np.maximum(at, 0), **_on(g)))
                if (at < 0).any():
                    picked = tp.where(tp.tensor(at >= 0, **_on(g)), picked, 0.0)
                out = picked if out is None else out + picked
            if out is None:
                return tp.zeros(shape, dtype=g0.dtype, **_on(g0))
            return out.reshape(shape)
    flat = tp.zeros(n + 1, dtype=g0.dtype, **_on(g0))
    for p, p2, g in zip(pos, pos2, grads):
        if g is None:
            continue
        p = tp.where(p2 - p == n, p, 0).to(tp.int64)
        flat = flat.index_add(0, p.reshape(-1), g.reshape(-1))
    return flat[1:].reshape(shape)


def _index_grad(node, grads, self, dim, index, scatter):
    """Gradient of index_select (scatter=False) / gather (scatter=True):
    _pick when the index is a tensor (eager, or a constant of the traced
    graph: the replay finds the inverse map once), else (the index is an
    input of the compiled function, its values unknown at trace time) the
    gradient added at the index: index_add / scatter_add into zeros, which
    the compiled backward lowers natively."""
    if isinstance(index, _C.Tensor):
        return _pick(node, grads, self)
    tp = _tp()
    g = grads[0]
    shape = tuple(self.shape) if hasattr(self, "shape") else tuple(self)
    z = tp.zeros(shape, dtype=g.dtype, **_on(g))
    if scatter:
        return z.scatter_add(dim, index, g)
    return z.index_add(dim, index, g)


def _mm_a(grad, a, b):
    if a.dim() == 1 and b.dim() == 1:
        return grad * b
    if a.dim() == 1:
        return (grad.unsqueeze(-2) @ b.mT).squeeze(-2)
    if b.dim() == 1:
        return grad.unsqueeze(-1) @ b.unsqueeze(-2)
    return grad @ b.mT


def _mm_b(grad, a, b):
    if a.dim() == 1 and b.dim() == 1:
        return grad * a
    if a.dim() == 1:
        return a.unsqueeze(-1) @ grad.unsqueeze(-2)
    if b.dim() == 1:
        return (a.mT @ grad.unsqueeze(-1)).squeeze(-1)
    return a.mT @ grad


def _rows(x):
    if x.dim() == 1:
        return x.reshape(1, -1)
    return x.reshape(-1, x.shape[-1])


def _cat_grad(grad, tensors, dim):
    out = []
    nd = grad.dim()
    d = dim % nd
    start = 0
    for t in tensors:
        if t.dim() == 1 and t.shape[0] == 0 and nd > 1:
            out.append(None)
            continue
        k = t.shape[d]
        out.append(grad.narrow(d, start, k))
        start += k
    return out


def _stack_grad(grad, tensors, dim):
    # one select per input, as a list: a traced unbind is one value for the
    # whole tuple, which the compiled backward cannot hand out per input
    return [grad.select(dim, i) for i in range(len(tensors))]


def _setitem_zero(grad, index):
    g = grad.clone()
    g[index] = 0
    return g


def _bn_grad(grad, input, running_mean, running_var, weight, training, eps, which):
    """batch_norm: the gradient of input (0), weight (1) or bias (2); the
    statistics are over every dim but the channel dim 1."""
    nd = input.dim()
    dims = [0] + list(range(2, nd))
    shp = [1] * nd
    shp[1] = input.shape[1]
    if which == 2:
        return grad.sum(dims)
    if training:
        mu = input.mean(dims, keepdim=True)
        rstd = (input.var(dims, False, True) + eps).rsqrt()
    else:
        mu = running_mean.reshape(shp)
        rstd = (running_var.reshape(shp) + eps).rsqrt()
    xhat = (input - mu) * rstd
    if which == 1:
        return (grad * xhat).sum(dims)
    gw = grad if weight is None else grad * weight.reshape(shp)
    if not training:
        return gw * rstd
    return rstd * (gw - gw.mean(dims, keepdim=True)
                   - xhat * (gw * xhat).mean(dims, keepdim=True))


def _diff_grad(grad, n, dim):
    """diff's gradient w.r.t. the concatenation cat(prepend, self, append):
    the adjoint of x[1:] - x[:-1], n times."""
    tp = _tp()
    d = dim % grad.dim()
    for _ in range(int(n)):
        z = tp.zeros_like(grad.narrow(d, 0, 1))
        grad = tp.cat([z, grad], d) - tp.cat([grad, z], d)
    return grad


def _diff_part(g, dim, prepend, self, append, which):
    """The slice of the concatenation's gradient that belongs to prepend
    (0), self (1) or append (2)."""
    d = dim % g.dim()
    lp = prepend.shape[d] if prepend is not None else 0
    ls = self.shape[d]
    start, length = [(0, lp), (lp, ls), (lp + ls, g.shape[d] - lp - ls)][which]
    return g.narrow(d, start, length)


def _einsum_grad(grad, equation, tensors):
    """einsum: operand k's gradient is the einsum of the output gradient
    with the other operands, onto k's subscripts; a subscript only k has
    (summed out) is broadcast back. Explicit subscripts without ellipsis or
    a subscript repeated within one operand only; '...' is spelled out
    as letters first."""
    tp = _tp()
    eq = equation.replace(" ", "")
    tensors = list(tensors)
    if "..." in eq:
        eq, tensors = _einsum_no_ellipsis(eq, tensors)
    lhs, _, out = eq.partition("->")
    subs = lhs.split(",")
    if not _:
        letters = sorted(c for c in set(lhs.replace(",", "")) if lhs.count(c) == 1)
        out = "".join(letters)
    if any(len(set(s)) != len(s) for s in subs):
        raise NotImplementedError("tensorplay: the derivative of einsum with a subscript "
                                  "repeated within one operand is not implemented")
    grads = []
    for k, t in enumerate(tensors):
        others = [(s, x) for j, (s, x) in enumerate(zip(subs, tensors)) if j != k]
        have = set(out).union(*[set(s) for s, _ in others])
        target = "".join(c for c in subs[k] if c in have)
        spec = ",".join([out] + [s for s, _ in others]) + "->" + target
        g = tp.einsum(spec, [grad] + [x for _, x in others])
        if target != subs[k]:
            g = g.reshape([t.shape[i] if c in target else 1 for i, c in enumerate(subs[k])])
            g = g.expand(tuple(t.shape))
        grads.append(g)
    return grads


def _einsum_no_ellipsis(eq, tensors):
    """The equation with '...' spelled out as letters it does not use (the
    broadcast dims right-aligned, as einsum aligns them), and the operands
    expanded to the broadcast sizes of those dims (the engine sums each
    gradient back to its operand's shape)."""
    lhs, arrow, out = eq.partition("->")
    subs = lhs.split(",")
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in eq]
    counts = [t.dim() - (len(sb) - 3) if "..." in sb else 0 for sb, t in zip(subs, tensors)]
    m = max(counts) if counts else 0
    ell = free[:m]
    sizes = [1] * m
    for sb, t, c in zip(subs, tensors, counts):
        if c:
            start = sb.index("...")
            for i in range(c):
                sizes[m - c + i] = max(sizes[m - c + i], t.shape[start + i])
    new_subs, new_ts = [], []
    for sb, t, c in zip(subs, tensors, counts):
        if "..." in sb:
            start = sb.index("...")
            letters = "".join(ell[m - c:])
            want = list(t.shape)
            want[start:start + c] = sizes[m - c:]
            if tuple(want) != tuple(t.shape):
                t = t.expand(tuple(want))
            sb = sb.replace("...", letters)
        new_subs.append(sb)
        new_ts.append(t)
    if arrow:
        out = out.replace("...", "".join(ell))
    else:
        rest = lhs.replace("...", "").replace(",", "")
        out = "".join(ell) + "".join(sorted(c for c in set(rest) if rest.count(c) == 1))
    return ",".join(new_subs) + "->" + out, new_ts


def _copy_slices(base, view):
    """The backward of an in-place write into `view`, a view of `base`
    (torch's CopySlices): base's new value is its old value outside the
    view's elements and the written op's output inside. Returns
    backward(grad of base) -> [grad of the old base, grad of the view's new
    value]: the gradient with the view's elements zeroed, and those
    elements."""
    tp = _tp()
    if not base.is_contiguous():
        raise NotImplementedError(
            "tensorplay: an in-place operation on a view of a non-contiguous tensor that "
            "requires grad is not supported; write into a view of a contiguous tensor")
    size, stride = tuple(view.shape), tuple(view.stride())
    off = view.storage_offset() - base.storage_offset()
    mask = tp.ones(tuple(base.shape), dtype=base.dtype, **_on(base))
    mask.as_strided(size, stride, off).zero_()

    def backward(g):
        g = g.contiguous()
        region = g.as_strided(size, stride, g.storage_offset() + off)
        return [g * mask, region.contiguous()]
    return backward


def _cumprod_grad(grad, self, result, dim):
    """cumprod's gradient, zeros included (no division by a zero): before
    a slice's first zero, sum_{j>=k} g_j y_j / x_k; at the first zero z,
    sum_{j>=z} g_j prod_{i<=j, i!=z} x_i (the cumulative product with x_z
    taken as 1); after it, 0 (every product holds x_z). Tensor ops only."""
    tp = _tp()
    if self.dim() == 0:
        return grad
    d = dim % self.dim()

    def rcumsum(t):
        return t.flip([d]).cumsum(d).flip([d])
    zero = self == 0
    nz = zero.to(tp.int64).cumsum(d)
    first = zero.logical_and(nz == 1)
    before = nz == 0
    safe = tp.where(zero, 1.0, self)
    g_before = rcumsum(grad * result) / safe
    g_first = rcumsum(grad * tp.where(first, 1.0, self).cumprod(d))
    return tp.where(before, g_before, tp.where(first, g_first, 0.0))


def helpers():
    return {k: v for k, v in globals().items() if k.startswith("_") and callable(v)
            and not k.startswith("__")}


def _scatter_self_grad(grad, dim, index, src):
    """scatter's self: the gradient where scatter did not write."""
    return grad.scatter(dim, index, 0.0)


def _scatter_src_grad(grad, dim, index, src):
    """scatter's src: the gradient read back at the written positions."""
    tp = _tp()
    if not isinstance(src, tp.Tensor):
        return None
    return grad.gather(dim, index)


def _scatter_reduce_grad(grad, self, dim, index, src, reduce, include_self, result, which):
    """scatter_reduce's gradients (torch's formulas): which=0 self, 1 src.
    sum: grad (self: where no include_self, only unwritten positions);
    mean: grad / count; amax/amin: grad split evenly among the values equal
    to the result; prod: grad * result / value (zeros: the product of the
    others)."""
    tp = _tp()
    reduce = {"max": "amax", "min": "amin"}.get(reduce, reduce)
    g = _scatter_reduce_grad_of(grad, self, dim, index, src, reduce, include_self, result, which)
    if which == 1 and tuple(g.shape) != tuple(src.shape):
        full = tp.zeros_like(src)
        full[tuple(slice(0, n) for n in index.shape)] = g
        g = full
    return g


def _scatter_reduce_grad_of(grad, self, dim, index, src, reduce, include_self, result, which):
    tp = _tp()
    ones = tp.ones_like(src)
    cnt = tp.zeros_like(grad).scatter_add(dim, index, ones)
    if include_self:
        cnt = cnt + 1
    touched = tp.zeros_like(grad).scatter_add(dim, index, ones) > 0
    if reduce == "sum":
        if which == 0:
            return grad if include_self else grad.masked_fill(touched, 0)
        return grad.gather(dim, index)
    if reduce == "mean":
        g = grad / cnt.clamp(min=1)
        if which == 0:
            return g if include_self else grad.masked_fill(touched, 0)
        return g.gather(dim, index)
    if reduce in ("amax", "amin"):
        res_s = result.gather(dim, index)
        src_hit = (src[tuple(slice(0, n) for n in index.shape)] == res_s).to(grad.dtype)
        # torch counts self's ties even with include_self=False
        self_hit = (self == result).to(grad.dtype)
        n = self_hit.scatter_add(dim, index, src_hit)
        g = grad / n.clamp(min=1)
        if which == 0:
            r = g * self_hit
            return r if include_self else grad.masked_fill(touched, 0)
        return g.gather(dim, index) * src_hit
    # prod
    if which == 0:
        if not include_self:
            return grad.masked_fill(touched, 0)
        others = tp.ones_like(self).scatter_reduce(dim, index, src, "prod")
        return grad * others
    srcv = src[tuple(slice(0, n) for n in index.shape)]
    base = self if include_self else tp.ones_like(self)
    g_res = (grad * result).gather(dim, index)
    zero = srcv == 0
    out = g_res / tp.where(zero, tp.ones_like(srcv), srcv)
    # a zero value: grad times the product of the others written there
    for pos in zero.nonzero().tolist():
        pos = tuple(pos)
        rest = srcv.clone()
        rest[pos] = 1
        prod = base.scatter_reduce(dim, index, rest, "prod", include_self=True)
        out[pos] = (grad * prod).gather(dim, index)[pos]
    return out


def _composite_grad(name, grad, inputs, args, which):
    """The gradient of a composite op (normalize, cosine_similarity) as the
    gradient of its decomposition: re-run the op-table composition on
    detached copies with grad mode on and differentiate that; under
    create_graph the recorded composition is differentiable again."""
    tp = _tp()
    from tensorplay import _ops
    fn = {"normalize": _ops._normalize_ops, "cosine_similarity": _ops._cosine_ops}[name]
    create = tp.is_grad_enabled()
    xs = [x if create else x.detach() for x in inputs]
    with tp.enable_grad():
        leaves = [x.detach().requires_grad_() if not create else x for x in xs]
        if create:
            leaves = [x.detach().requires_grad_() if not x.requires_grad else x for x in xs]
        out = fn(*leaves, *args)
        g, = tp.autograd.grad([out], [leaves[which]], [grad], allow_unused=True,
                              create_graph=create)
    return g


def _polygamma_grad(grad, n, self):
    """polygamma(n, x)' = polygamma(n + 1, x) (lgamma's and digamma's rows
    say digamma / polygamma(1, .) directly)."""
    return grad * _tp().polygamma(int(n) + 1, self)


def _logcumsumexp_grad(grad, self, result, dim):
    """torch's logcumsumexp backward, in log space: the positive and the
    negative parts of grad each through a reversed logcumsumexp."""
    tp = _tp()
    if self.dim() == 0 or self.numel() == 0:
        return grad
    d = dim % self.dim()
    lowest = tp.finfo(grad.dtype).min

    def rlcse(t):
        return tp.logcumsumexp(t.flip([d]), d).flip([d])
    pos = tp.where(grad > 0, grad.clamp(min=0).log(), lowest)
    neg = tp.where(grad < 0, (-grad).clamp(min=0).log(), lowest)
    return (rlcse(pos - result) + self).exp() - (rlcse(neg - result) + self).exp()


def _cummaxmin_grad(grad, self, dim, indices):
    """cummax/cummin: each gradient added at the index its value came from."""
    if self.dim() == 0:
        return grad
    return _tp().zeros_like(grad).scatter_add(dim % self.dim(), indices, grad)


def _evenly_distribute(grad, self, result):
    """torch's evenly_distribute_backward (median()/nanmedian() without
    dim): grad shared by the elements equal to the result (the NaNs when
    the result is NaN)."""
    tp = _tp()
    mask = (self == result).logical_or(self.isnan().logical_and(result.isnan()))
    return tp.where(mask, grad / mask.sum(), tp.zeros((), dtype=grad.dtype, **_on(grad)))
