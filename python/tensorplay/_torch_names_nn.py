"""More names PyTorch model code reaches for (users helper, session 6): the
remaining loss functions of torch.nn.functional (soft_margin,
cosine_embedding, margin_ranking, hinge_embedding, gaussian_nll,
poisson_nll, multilabel_soft_margin, triplet_margin, multi_margin), prelu,
pixel_shuffle / pixel_unshuffle, channel_shuffle, bilinear, the in-place
activations relu_ / leaky_relu_ / elu_ / selu_ / celu_ / hardtanh_, and the
inverse hyperbolic functions asinh / acosh / atanh.

As in tensorplay/_torch_names.py every one is a composite of op-table ops:
eagerly it runs on the ops' kernels and differentiates through their
formulas, and under tp.compile the tracer inlines it (native, no fallback).
Checks that read tensor data (gaussian_nll_loss's negative variance) run
eagerly only, as binary_cross_entropy's range check."""
import math

from tensorplay import _C
from tensorplay._torch_names import _check_t, _is_t


def _tp():
    import tensorplay
    return tensorplay


def _F():
    import tensorplay.functional as F
    return F


def _reduction(size_average, reduce, reduction):
    from tensorplay._ops import _legacy_reduction
    r = _legacy_reduction(size_average, reduce, reduction)
    if r not in ("none", "mean", "sum"):
        raise ValueError(f"{r} is not a valid value for reduction")
    return r


def _reduce(r, reduction):
    if reduction == "none":
        return r
    return r.sum() if reduction == "sum" else r.mean()


# ------------------------------------------------------------ losses

def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """log(1 + exp(-y x)) for targets y in {-1, 1}; input and target of one
    shape (broadcast)."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_t(input, "soft_margin_loss", "input", 1)
    return _reduce(_F().softplus(-target * input), reduction)


def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                        reduction="mean"):
    """max(0, -y (x1 - x2) + margin). RuntimeError when the three shapes
    differ in dims (torch's message)."""
    reduction = _reduction(size_average, reduce, reduction)
    if input1.dim() != input2.dim() or input1.dim() != target.dim():
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same "
                           f"dimension but got sizes: input1: {input1.shape}, input2: "
                           f"{input2.shape}, target: {target.shape} ")
    return _reduce((-target * (input1 - input2) + margin).clamp_min(0), reduction)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    """x where y == 1, max(0, margin - x) where y == -1 (each term kept
    where y is not the other label, as torch)."""
    tp = _tp()
    reduction = _reduction(size_average, reduce, reduction)
    zero = tp.zeros((), dtype=input.dtype)
    m = tp.where(target != 1, (margin - input).clamp_min(0), zero)
    s = tp.where(target != -1, input, zero)
    return _reduce(m + s, reduction)


def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                          reduction="mean"):
    """1 - cos(x1, x2) where y == 1, max(0, cos - margin) where y == -1;
    inputs (N, D) with target (N,), or (D,) with a 0-d target."""
    tp = _tp()
    reduction = _reduction(size_average, reduce, reduction)
    if input1.dim() != input2.dim():
        raise RuntimeError(f"cosine_embedding_loss(): input1 and input2 should have the same "
                           f"number of dimensions, but got {input1.dim()} and {input2.dim()}")
    if input1.dim() not in (1, 2):
        raise RuntimeError(f"cosine_embedding_loss(): 1D target tensor expects 2D input tensors,"
                           f" but found inputs with sizes {list(input1.shape)} and "
                           f"{list(input2.shape)}.")
    d = input1.dim() - 1
    eps = 1e-12
    prod = (input1 * input2).sum(d)
    m1 = (input1 * input1).sum(d) + eps
    m2 = (input2 * input2).sum(d) + eps
    cos = prod / (m1 * m2).sqrt()
    zero = tp.zeros((), dtype=cos.dtype)
    pos = tp.where(target == 1, 1 - cos, zero)
    neg = tp.where(target == -1, (cos - margin).clamp_min(0), zero)
    return _reduce(pos + neg, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-06, reduction="mean"):
    """0.5 (log max(var, eps) + (input - target)^2 / max(var, eps)) (+ 0.5
    log 2 pi when full). var: input's shape, or one dim less (one variance
    per sample), or a last dim of 1 (homoscedastic). The clamp does not
    stop the gradient (torch clamps under no_grad)."""
    tp = _tp()
    if not _is_t(var):
        var = tp.full((), float(var), dtype=input.dtype)
    vs, ins = tuple(var.shape), tuple(input.shape)
    if vs != ins:
        if ins[:-1] == vs:
            var = var.unsqueeze(-1)
        elif not (ins[:-1] == vs[:-1] and vs[-1:] == (1,)) and var.dim() != 0:
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    if isinstance(var, _C.Tensor) and var.numel() and bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    v = var + (var.clamp(min=eps) - var).detach()
    loss = 0.5 * (v.log() + (input - target) ** 2 / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-08,
                     reduce=None, reduction="mean"):
    """exp(x) - y x (log_input) or x - y log(x + eps); full adds the
    Stirling term y log y - y + 0.5 log(2 pi y) where y > 1."""
    tp = _tp()
    reduction = _reduction(size_average, reduce, reduction)
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        t = tp.where(target > 1, target, tp.ones((), dtype=target.dtype))
        st = t * t.log() - t + 0.5 * (2 * math.pi * t).log()
        loss = loss + tp.where(target > 1, st, tp.zeros((), dtype=st.dtype))
    return _reduce(loss, reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction="mean"):
    """-(y log sigmoid(x) + (1 - y) log sigmoid(-x)), averaged over the
    classes (the last dim), then reduced over the samples."""
    F = _F()
    reduction = _reduction(size_average, reduce, reduction)
    loss = -(target * F.logsigmoid(input) + (1 - target) * F.logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    d = input.dim() - 1
    loss = loss.sum(d) / int(input.shape[d])
    return _reduce(loss, reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-06, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """max(0, margin + d(a, p) - d(a, n)), d the p-norm pairwise distance
    (swap: d(a, n) replaced by min(d(a, n), d(p, n)))."""
    F = _F()
    reduction = _reduction(size_average, reduce, reduction)
    a, pp, n = anchor.dim(), positive.dim(), negative.dim()
    if not (a == pp == n):
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have "
                           f"the same number of dimensions, but got: anchor {a}D, positive "
                           f"{pp}D, and negative {n}D inputs")
    dp = F.pairwise_distance(anchor, positive, p, eps)
    dn = F.pairwise_distance(anchor, negative, p, eps)
    if swap:
        dn = _tp().minimum(dn, F.pairwise_distance(positive, negative, p, eps))
    return _reduce((margin + dp - dn).clamp_min(0), reduction)


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,
                      reduce=None, reduction="mean"):
    """sum over i != y of max(0, margin - x[y] + x[i])^p / C (times
    weight[y]); input (N, C) with target (N,), or (C,) with a 0-d/1-elem
    target."""
    tp = _tp()
    reduction = _reduction(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    one = input.dim() <= 1
    x = input.reshape(1, -1) if one else input
    t = target.reshape(-1)
    c = int(x.shape[1])
    if weight is not None and (weight.dim() != 1 or int(weight.numel()) != c):
        raise ValueError("weight must be one-dimensional")
    sel = t.unsqueeze(1) == tp.arange(c).reshape(1, c)                  # (N, C)
    zero = tp.zeros((), dtype=x.dtype)
    xy = tp.where(sel, x, zero).sum(1, keepdim=True)
    z = (margin - xy + x).clamp_min(0)
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * tp.where(sel, weight.reshape(1, c), zero).sum(1, keepdim=True)
    loss = tp.where(sel, zero, z).sum(1) / c
    if one:
        loss = loss.reshape(tuple(target.shape))      # torch: the target's shape
    return _reduce(loss, reduction)


# ------------------------------------------------------------ layers

def prelu(input, weight):
    """max(0, x) + weight * min(0, x); weight of 1 element, or one per
    channel (dim 1; a 0-D or 1-D input has one channel, as torch 2.13, so
    a weight of more elements raises RuntimeError there)."""
    _check_t(input, "prelu", "input", 1)
    _check_t(weight, "prelu", "weight", 2)
    n = int(weight.numel())
    if n != 1:
        if input.dim() == 0:
            raise RuntimeError("Not allow zero-dim input tensor.")
        cd = 1
        c = int(input.shape[1]) if input.dim() >= 2 else 1
        if n != c:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found "
                               f"parameter numbers = {n} and channel size = {c}.")
        shape = [1] * input.dim()
        shape[cd] = c
        w = weight.reshape(shape)
    else:
        w = weight.reshape(())
    return _tp().where(input > 0, input, w * input)


def pixel_shuffle(input, upscale_factor):
    """(*, C r^2, H, W) -> (*, C, H r, W r)."""
    _check_t(input, "pixel_shuffle", "input", 1)
    r = int(upscale_factor)
    nd = input.dim()
    if nd < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but "
                           f"got input with {nd} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    *b, c, h, w = (int(s) for s in input.shape)
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)="
                           f"{c} is not divisible by {r * r}")
    oc = c // (r * r)
    k = len(b)
    x = input.reshape(*b, oc, r, r, h, w)
    x = x.permute(*range(k), k, k + 3, k + 1, k + 4, k + 2)
    return x.reshape(*b, oc, h * r, w * r)


def pixel_unshuffle(input, downscale_factor):
    """(*, C, H r, W r) -> (*, C r^2, H, W)."""
    _check_t(input, "pixel_unshuffle", "input", 1)
    r = int(downscale_factor)
    nd = input.dim()
    if nd < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but "
                           f"got input with {nd} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *b, c, h, w = (int(s) for s in input.shape)
    if h % r:
        raise RuntimeError(f"pixel_unshuffle expects height to be divisible by "
                           f"downscale_factor, but input.size(-2)={h} is not divisible by {r}")
    if w % r:
        raise RuntimeError(f"pixel_unshuffle expects width to be divisible by "
                           f"downscale_factor, but input.size(-1)={w} is not divisible by {r}")
    k = len(b)
    x = input.reshape(*b, c, h // r, r, w // r, r)
    x = x.permute(*range(k), k, k + 2, k + 4, k + 1, k + 3)
    return x.reshape(*b, c * r * r, h // r, w // r)


def channel_shuffle(input, groups):
    """(N, C, *) with the channels regrouped: (g, C/g) transposed."""
    _check_t(input, "channel_shuffle", "input", 1)
    g = int(groups)
    if input.dim() <= 2:
        raise RuntimeError(f"channel_shuffle expects input to have at least 3 dimensions, but "
                           f"got input with {input.dim()} dimension(s)")
    if g <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value "
                           f"of groups:{g}")
    n, c, *rest = (int(s) for s in input.shape)
    if c % g:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels "
                           f"and {g} groups.")
    return input.reshape(n, g, c // g, *rest).transpose(1, 2).reshape(n, c, *rest)


def bilinear(input1, input2, weight, bias=None):
    """y[..., o] = x1[..., i] W[o, i, j] x2[..., j] + b[o]."""
    y = _tp().einsum("...i,oij,...j->...o", input1, weight, input2)
    return y + bias if bias is not None else y


def _inplace_act(name, **fixed):
    def fn(input, *args, **kwargs):
        kwargs.update(fixed)
        return getattr(_F(), name)(input, *args, inplace=True, **kwargs)
    fn.__name__ = fn.__qualname__ = name + "_"
    fn.__doc__ = f"F.{name}(input, ..., inplace=True): input modified and returned."
    return fn


relu_ = _inplace_act("relu")
leaky_relu_ = _inplace_act("leaky_relu")
elu_ = _inplace_act("elu")
selu_ = _inplace_act("selu")
celu_ = _inplace_act("celu")
hardtanh_ = _inplace_act("hardtanh")


# ------------------------------------------------------------ inverse hyperbolic

def _unary_float(x, name):
    _check_t(x, name, "input", 1)
    tp = _tp()
    if x.dtype in (tp.float32, tp.float64):
        return x, None
    if x.is_floating_point():                      # half types: in float32, rounded back
        return x.float(), x.dtype
    return x.to(tp.get_default_dtype()), None


def asinh(input):
    """sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2))): no cancellation near
    0; |x| > 2^28: log|x| + log 2 (x^2 would overflow float32); below
    2^-12 (float32) / 2^-26 (float64) x itself (x^3/6 is under half an ulp),
    which also keeps the gradient 1 at 0. Each branch reads a safe operand
    where it is not taken, so no inf reaches a gradient."""
    tp = _tp()
    x, back = _unary_float(input, "asinh")
    one = tp.ones((), dtype=x.dtype)
    a = x.abs()
    big = a > 2.0 ** 28
    tiny = a < (2.0 ** -12 if x.dtype == tp.float32 else 2.0 ** -26)
    sa = tp.where(big.logical_or(tiny), one, a)
    mid = (sa + sa * sa / (1 + (1 + sa * sa).sqrt())).log1p()
    r = tp.where(big, tp.where(big, a, one).log() + math.log(2.0), mid)
    r = tp.where(x < 0, -r, r)
    r = tp.where(tiny, x, r)
    return r.to(back) if back is not None else r


def acosh(input):
    """log1p(t + sqrt(t (t + 2))), t = x - 1 (accurate near 1); NaN below 1;
    x > 2^28: log x + log 2."""
    tp = _tp()
    x, back = _unary_float(input, "acosh")
    big = x > 2.0 ** 28
    sx = tp.where(big, tp.ones((), dtype=x.dtype), x)
    t = sx - 1
    r = tp.where(big, tp.where(big, x, tp.ones((), dtype=x.dtype)).log() + math.log(2.0),
                 (t + (t * (t + 2)).sqrt()).log1p())
    return r.to(back) if back is not None else r


def atanh(input):
    """0.5 log1p(2x / (1 - x)): +-inf at +-1, NaN beyond."""
    x, back = _unary_float(input, "atanh")
    r = 0.5 * (2 * x / (1 - x)).log1p()
    return r.to(back) if back is not None else r


def _inplace_math(fn):
    def call(self):
        return self.copy_(fn(self))
    call.__name__ = fn.__name__ + "_"
    return call


# ------------------------------------------------------------ installation

FUNCTIONAL = ["soft_margin_loss", "margin_ranking_loss", "hinge_embedding_loss",
              "cosine_embedding_loss", "gaussian_nll_loss", "poisson_nll_loss",
              "multilabel_soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
              "prelu", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "bilinear",
              "relu_", "leaky_relu_", "elu_", "selu_", "celu_", "hardtanh_"]
FUNCTIONS = ["asinh", "acosh", "atanh", "arcsinh", "arccosh", "arctanh", "prelu",
             "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "bilinear"]
METHODS = ["asinh", "acosh", "atanh", "arcsinh", "arccosh", "arctanh", "prelu"]
INPLACE_METHODS = {"asinh_": asinh, "acosh_": acosh, "atanh_": atanh,
                   "arcsinh_": asinh, "arccosh_": acosh, "arctanh_": atanh}

arcsinh, arccosh, arctanh = asinh, acosh, atanh


def install(tp_module, functional_module):
    """Puts the names on tensorplay, tensorplay.functional and Tensor (never
    replacing one that exists) and registers the methods' trace-time
    decompositions."""
    g = globals()
    for name in FUNCTIONAL:
        if not hasattr(functional_module, name):
            setattr(functional_module, name, g[name])
            functional_module.__all__.append(name)
    for name in FUNCTIONS:
        if not hasattr(tp_module, name):
            setattr(tp_module, name, g[name])
    for name in METHODS:
        if not hasattr(_C.Tensor, name):
            _C._tensor_install(name, g[name])
            _C._set_trace_decomposition(name, g[name])
    for name, fn in INPLACE_METHODS.items():
        if not hasattr(_C.Tensor, name):
            _C._tensor_install(name, _inplace_math(fn))
            _C._set_trace_decomposition(name, _inplace_math(fn))


__all__ = []
