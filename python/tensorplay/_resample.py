"""F.interpolate (nearest, nearest-exact, linear, bilinear, bicubic,
trilinear, area) and F.instance_norm, written with op-table ops so that
tp.compile traces them natively: resampling is separable, one spatial dim
at a time, as index_select of the source rows (constant int64 indices) and
a weighted sum with constant weights -- torch's own taps and weights,
computed in NumPy at torch's precision (float for float32/float16 input,
double for float64), so the values match torch's up to rounding of the
sums; area is adaptive average pooling."""
import math

import numpy as np

from tensorplay import _C
from tensorplay import _tensor as _tensor_mod

__all__ = ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear",
           "instance_norm"]

_TENSORS = (_C.Tensor, _C.Proxy) if hasattr(_C, "Proxy") else (_C.Tensor,)


def _tp():
    import tensorplay
    return tensorplay


def _F():
    import tensorplay.functional as F
    return F


def _opmath(dtype):
    # torch's opmath type: the index math of a float32/half kernel is float
    return np.float64 if str(dtype).endswith("float64") else np.float32


def _scale_of(in_size, out_size, scale, T):
    """compute_scales_value: 1/scale_factor when one was given, else in/out."""
    if scale is not None and scale > 0:
        return T(1.0 / scale)
    return T(in_size) / T(out_size)


def _area_scale(in_size, out_size, align_corners, scale, T):
    if align_corners:
        return T(in_size - 1) / T(out_size - 1) if out_size > 1 else T(0)
    return _scale_of(in_size, out_size, scale, T)


def _source_index(scale, dst, align_corners, cubic, T):
    """The real source coordinate of each output index (half-pixel centres
    unless align_corners; clamped at 0 except for cubic)."""
    if align_corners:
        return scale * dst
    src = scale * (dst + T(0.5)) - T(0.5)
    return src if cubic else np.maximum(src, T(0))


def _nearest_taps(in_size, out_size, scale, exact):
    T = np.float32
    i = np.arange(out_size, dtype=np.int64)
    if not exact and out_size == in_size:
        return i
    if not exact and out_size == 2 * in_size:
        return i >> 1
    s = _scale_of(in_size, out_size, scale, T)
    src = (i.astype(T) + T(0.5)) * s if exact else i.astype(T) * s
    return np.minimum(np.floor(src).astype(np.int64), in_size - 1)


def _linear_taps(in_size, out_size, scale, align_corners, T):
    """(idx0, idx1, w0, w1): out[i] = w0[i] * x[idx0[i]] + w1[i] * x[idx1[i]]."""
    s = _area_scale(in_size, out_size, align_corners, scale, T)
    real = _source_index(s, np.arange(out_size).astype(T), align_corners, False, T)
    i0 = np.minimum(np.floor(real).astype(np.int64), in_size - 1)
    lam1 = np.clip(real - i0.astype(T), T(0), T(1)).astype(T)
    i1 = i0 + (i0 < in_size - 1)
    return [i0, i1], [(T(1) - lam1).astype(T), lam1]


def _cubic_taps(in_size, out_size, scale, align_corners, T):
    """Four taps (clamped to the input) with Keys' cubic weights, A = -0.75."""
    a = T(-0.75)
    s = _area_scale(in_size, out_size, align_corners, scale, T)
    real = _source_index(s, np.arange(out_size).astype(T), align_corners, True, T)
    i0 = np.floor(real).astype(np.int64)
    t = (real - i0.astype(T)).astype(T)

    def near(x):      # |x| <= 1
        return ((a + T(2)) * x - (a + T(3))) * x * x + T(1)

    def far(x):       # 1 < |x| < 2
        return ((a * x - T(5) * a) * x + T(8) * a) * x - T(4) * a
    w = [far(t + T(1)), near(t), near(T(1) - t), far(T(2) - t)]
    idx = [np.clip(i0 - 1 + j, 0, in_size - 1) for j in range(4)]
    return idx, [x.astype(T) for x in w]


def _along(x, dim, idx, weights):
    """sum_j weights[j] * x.index_select(dim, idx[j]), weights broadcast
    along dim; torch's order: the first tap's product first."""
    tp = _tp()
    shape = [1] * x.dim()
    shape[dim] = len(idx[0])
    out = None
    for ij, wj in zip(idx, weights):
        t = x.index_select(dim, tp.tensor(np.ascontiguousarray(ij)))
        w = tp.tensor(np.ascontiguousarray(wj).reshape(shape)).to(x.dtype)
        out = t * w if out is None else out + t * w
    return out


def _area(x, out_sizes):
    F = _F()
    nd = len(out_sizes)
    if nd == 1 and min(out_sizes) > 0:
        return F.adaptive_avg_pool1d(x, out_sizes)
    if nd == 2 and min(out_sizes) > 0:
        return F.adaptive_avg_pool2d(x, out_sizes)
    from tensorplay._composites import _avg_matrix
    tp = _tp()
    for i, o in enumerate(out_sizes):
        d = 2 + i
        a = tp.tensor(_avg_matrix(x.shape[d], o).T.copy()).to(x.dtype)
        x = x.transpose(d, -1).matmul(a).transpose(d, -1)
    return x


_MODES = "nearest | linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact"
_RANK_OF = {"linear": 3, "bilinear": 4, "bicubic": 4, "trilinear": 5}
_NAME_OF = {3: "linear", 4: "bilinear", 5: "trilinear"}


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resamples input (N, C, d1[, d2[, d3]]) to `size` or by `scale_factor`
    (torch.nn.functional.interpolate).

    mode: 'nearest' (3-5-D), 'nearest-exact' (3-5-D), 'linear' (3-D),
    'bilinear' (4-D), 'bicubic' (4-D), 'trilinear' (5-D), 'area' (3-5-D).
    align_corners (interpolating modes only; default False) aligns the
    corner pixels' centres; recompute_scale_factor=True computes the output
    size floor(d * scale) and then interpolates by d_in / d_out instead of
    1 / scale. Returns a tensor of input's dtype, (N, C, *out_sizes).
    ValueError/NotImplementedError in torch's words for a bad combination;
    NotImplementedError for antialias=True (not supported here).
    Gradients flow to input (index_select's backward)."""
    if not isinstance(input, _TENSORS):
        raise TypeError(f"interpolate(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating "
                             "modes: linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    dim = input.dim() - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    scale_factors = None
    if size is not None:
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError(
                    "Input and output must have the same number of spatial dimensions, but "
                    f"got input with spatial dimensions of {list(input.shape[2:])} and output "
                    f"size of {size}. Please provide input tensor in (N, C, d1, d2, ...,dK) "
                    "format and output size in (o1, o2, ...,oK) format.")
            output_size = [int(s) for s in size]
        else:
            output_size = [int(size)] * dim
    elif scale_factor is not None:
        output_size = None
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != dim:
                raise ValueError(
                    "Input and scale_factor must have the same number of spatial dimensions, "
                    f"but got input with spatial dimensions of {list(input.shape[2:])} and "
                    f"scale_factor of shape {scale_factor}. Please provide input tensor in "
                    "(N, C, d1, d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) "
                    "format.")
            scale_factors = [float(s) for s in scale_factor]
        else:
            scale_factors = [float(scale_factor)] * dim
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if mode == "area" and output_size is None:
        recompute_scale_factor = True
    if recompute_scale_factor:
        output_size = [math.floor(float(input.shape[i + 2]) * scale_factors[i])
                       for i in range(dim)]
        scale_factors = None
    if antialias:
        if not (mode in ("bilinear", "bicubic", "lanczos") and input.dim() == 4):
            raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and "
                             "lanczos modes and requires a 4-D tensor as input")
        raise NotImplementedError("interpolate: antialias=True is not supported by "
                                  "tensorplay")
    known = mode in ("nearest", "nearest-exact", "area") or mode in _RANK_OF
    if not known or input.dim() not in (3, 4, 5):
        raise NotImplementedError(
            "Input Error: Only 3D, 4D and 5D input Tensors supported"
            f" (got {input.dim()}D) for the modes: {_MODES} (got {mode})")
    if mode in _RANK_OF and _RANK_OF[mode] != input.dim():
        if mode == "bicubic":
            raise NotImplementedError(
                "Input Error: Only 3D, 4D and 5D input Tensors supported"
                f" (got {input.dim()}D) for the modes: {_MODES} (got {mode})")
        raise NotImplementedError(f"Got {input.dim()}D input, but {mode} mode needs "
                                  f"{_RANK_OF[mode]}D input")
    in_sizes = [int(s) for s in input.shape[2:]]
    if output_size is None:
        # the ATen kernels' size: int64(d * scale), truncated
        output_size = [int(s * f) for s, f in zip(in_sizes, scale_factors)]
    if mode == "area":
        # adaptive average pooling: an empty output is allowed
        return _area(input, output_size)
    if min(in_sizes) <= 0 or min(output_size) <= 0:
        names = "DHW"[3 - dim:]
        raise RuntimeError(
            "Input and output sizes should be greater than 0, but got input ("
            + ", ".join(f"{n}: {s}" for n, s in zip(names, in_sizes)) + (") and output (" if dim == 1 else ") output (")
            + ", ".join(f"{n}: {s}" for n, s in zip(names, output_size)) + ")")
    if mode not in ("nearest", "nearest-exact") and not input.is_floating_point():
        raise NotImplementedError(f"\"upsample_{_NAME_OF.get(input.dim(), mode)}"
                                  f"{dim}d_out_frame\" not implemented for "
                                  f"'{str(input.dtype).split('.')[-1].title()}'")
    T = _opmath(input.dtype)
    x = input
    scales = scale_factors or [None] * dim
    # the last spatial dim first: torch's nesting, the outer dim's taps last
    for i in reversed(range(dim)):
        n_in, n_out, sc = in_sizes[i], output_size[i], scales[i]
        if mode in ("nearest", "nearest-exact"):
            ix = _nearest_taps(n_in, n_out, sc, mode == "nearest-exact")
            if n_in == n_out and np.array_equal(ix, np.arange(n_in)):
                continue
            x = x.index_select(2 + i, _tp().tensor(ix))
        elif mode == "bicubic":
            idx, w = _cubic_taps(n_in, n_out, sc, align_corners, T)
            x = _along(x, 2 + i, idx, w)
        else:
            idx, w = _linear_taps(n_in, n_out, sc, align_corners, T)
            x = _along(x, 2 + i, idx, w)
    return x if x is not input else input.clone()


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated torch name of interpolate (same arguments)."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated torch name: interpolate(mode='nearest')."""
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated torch name: interpolate(mode='bilinear', align_corners=True)."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-05):
    """Normalizes each (sample, channel) plane of input (N, C, *) over its
    spatial dims (torch.nn.functional.instance_norm): biased variance, then
    weight/bias (C,) per channel. With use_input_stats and running
    statistics (C,), those are updated in place as torch does: the batch
    mean of the per-instance means and of the unbiased variances, with
    momentum. use_input_stats=False normalizes with the running statistics.
    ValueError when a plane has one element (training)."""
    if not isinstance(input, _TENSORS):
        raise TypeError(f"instance_norm(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    nd = input.dim()
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"batch_norm\" not implemented for "
                                  f"'{_tensor_mod._TYPE_NAMES[input.dtype]}'")
    if nd < 2:
        raise ValueError(f"Expected 2D or more input (got {nd}D input)")
    c = input.shape[1]
    n = 1
    for s in input.shape[2:]:
        n *= s
    shape = [1, c] + [1] * (nd - 2)
    if use_input_stats:
        if n == 1:
            raise ValueError(f"Expected more than 1 spatial element when training, got "
                             f"input size {input.shape}")
        dims = list(range(2, nd))
        var, mean = _tp().var_mean(input, dims, correction=0, keepdim=True)
        y = (input - mean) * (var + eps).rsqrt()
        from tensorplay._composites import _update
        if running_mean is not None:
            _update(running_mean, mean.detach().reshape(-1, c).mean(0) * momentum,
                    1 - momentum)
        if running_var is not None:
            _update(running_var,
                    var.detach().reshape(-1, c).mean(0) * (momentum * n / (n - 1)),
                    1 - momentum)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("Expected running_mean and running_var to be defined when "
                               "use_input_stats is false")
        y = (input - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def _pad_taps(n, lo, hi, mode):
    p = np.arange(-lo, n + hi)
    if mode == "reflect":
        p = np.abs(p)
        return np.where(p > n - 1, 2 * (n - 1) - p, p)
    if mode == "replicate":
        return np.clip(p, 0, n - 1)
    return p % n                     # circular


def _pad_traced(input, pad, mode="constant", value=None):
    """F.pad while tracing, for mode reflect/replicate/circular: one
    index_select per padded dim with constant source indices (native, and
    so is its backward); F.pad's pad lowering is mode 'constant' only.
    Only the cases torch and eager both accept are taken (k padded dims of
    a (k+1)- or (k+2)-d input, widths >= 0, below the size for reflect, up
    to it for circular); anything else is recorded as the op itself, so
    its errors stay eager's."""
    if mode not in ("reflect", "replicate", "circular") or value is not None:
        return NotImplemented
    try:
        pad = [int(p) for p in pad]
    except (TypeError, ValueError):
        return NotImplemented
    k = len(pad) // 2
    if len(pad) % 2 or not 1 <= k <= 3 or input.dim() not in (k + 1, k + 2) \
            or min(pad) < 0 or not input.is_floating_point():
        return NotImplemented
    x = input
    for i in range(k):
        d = x.dim() - 1 - i
        n, lo, hi = int(x.shape[d]), pad[2 * i], pad[2 * i + 1]
        if n < 1 or (mode == "reflect" and max(lo, hi) >= n) \
                or (mode == "circular" and max(lo, hi) > n):
            return NotImplemented
        if lo or hi:
            x = x.index_select(d, _tp().tensor(_pad_taps(n, lo, hi, mode)))
    return x if x is not input else input.clone()


def _install():
    F = _F()
    _C._set_trace_decomposition(F.pad, _pad_traced)


_install()
