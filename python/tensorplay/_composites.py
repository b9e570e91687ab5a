"""Convolution, pooling and attention of tensorplay.nn.functional, written
as compositions of op-table ops (torch writes several of these in Python
too): conv = unfold (im2col, one masked index map when compiled) + one
matmul (BLAS); pooling = unfold + a reduction; attention = matmul +
softmax + matmul. Eager runs the same ops (NumPy strided views, BLAS), and
under tp.compile every piece is native, so a compiled CNN or transformer
has no fallback kernel. docs/ops.md says why (measured)."""
import math
import operator

import numpy as np

from tensorplay import _C
from tensorplay import _native_decomps

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "max_pool1d", "max_pool2d", "max_unpool1d", "max_unpool2d", "avg_pool1d", "avg_pool2d",
           "adaptive_avg_pool1d", "adaptive_avg_pool2d", "scaled_dot_product_attention",
           "multi_head_attention_forward"]


_CNAMES = {"float32": "float", "float64": "double", "float16": "c10::Half", "int64": "long int",
           "int32": "int", "int16": "short int", "int8": "signed char", "uint8": "unsigned char",
           "bool": "bool"}


def _cname(dt):
    """A dtype as torch's C++ checks print it (float, long int, ...)."""
    return _CNAMES.get(str(dt).split(".")[-1], str(dt))


def _F():
    import tensorplay.functional as F
    return F


def _tp():
    import tensorplay
    return tensorplay


def _tuple(v, n, name):
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            v = tuple(v) * n
        if len(v) != n:
            raise RuntimeError(f"expected {name} to be a single integer value or a "
                               f"list of {n} values to match the convolution dimensions, "
                               f"but got {name}={list(v)}")
        return tuple(int(x) for x in v)
    return (int(v),) * n


_TENSORS = (_C.Tensor, _C.Proxy) if hasattr(_C, "Proxy") else (_C.Tensor,)


def _check_t(x, fname, argname, pos):
    if not isinstance(x, _TENSORS):
        raise TypeError(f"{fname}(): argument '{argname}' (position {pos}) must be "
                        f"Tensor, not {type(x).__name__}")


def _check_conv_args(input, weight, name, nd):
    """torch's TypeErrors for a non-tensor input/weight and its RuntimeError
    for an input that is neither (C, *sp) nor (N, C, *sp) with nd spatial dims."""
    _check_t(input, name, "input", 1)
    _check_t(weight, name, "weight", 2)
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input "
                           f"to {name}, but got input of size: {list(input.shape)}")


def _convnd(input, weight, bias, stride, padding, dilation, groups, nd):
    """conv1d (nd=1, as a conv2d of height 1), conv2d and conv3d."""
    name = f"conv{nd}d"
    F = _F()
    _check_conv_args(input, weight, name, nd)
    if weight.dim() != nd + 2:
        raise RuntimeError(f"weight should have at least three dimensions" if nd == 1 else
                           f"Expected {nd + 2}-dimensional weight for "
                           f"{nd + 2}-dimensional input {list(input.shape)}, but got "
                           f"{weight.dim()}-dimensional weight of size {list(weight.shape)} "
                           f"instead")
    unbatched = input.dim() == nd + 1
    if unbatched:
        input = input.unsqueeze(0)
    if input.dtype != weight.dtype:
        raise RuntimeError(f"Input type ({input.dtype}) and weight type ({weight.dtype}) "
                           f"should be the same")
    groups = int(groups)
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    stride = _tuple(stride, nd, "stride")
    dilation = _tuple(dilation, nd, "dilation")
    if min(stride) <= 0:
        raise RuntimeError("non-positive stride is not supported")
    if min(dilation) <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")
    cout = weight.shape[0]
    cin_g = weight.shape[1]
    ks = tuple(weight.shape[2:])
    if cout % groups != 0:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by "
                           f"{groups} at dimension 0, but got weight of size "
                           f"[{list(weight.shape)}] instead")
    if input.shape[1] != cin_g * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, "
                           f"expected input{list(input.shape)} to have {cin_g * groups} "
                           f"channels, but got {input.shape[1]} channels instead")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != cout):
        raise RuntimeError(f"Given weight of size {list(weight.shape)}, expected bias to be "
                           f"1-dimensional with {cout} elements, but got bias of size "
                           f"{list(bias.shape)} instead")
    if isinstance(padding, str):
        if padding == "valid":
            pad = (0,) * nd
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            pad, extra = [], []
            for d, k in zip(dilation, ks):
                total = d * (k - 1)
                pad.append(total // 2)
                extra.append(total - 2 * (total // 2))
            if any(extra):
                # torch pads the odd element on the right
                widths = []
                for e in reversed(extra):
                    widths += [0, e]
                input = F.pad(input, widths)
            pad = tuple(pad)
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    else:
        pad = _tuple(padding, nd, "padding")
        if min(pad) < 0:
            raise RuntimeError("negative padding is not supported")
    sp = tuple(input.shape[2:])
    outs = []
    for i in range(nd):
        eff = dilation[i] * (ks[i] - 1) + 1
        if sp[i] + 2 * pad[i] < eff:
            raise RuntimeError(f"Calculated padded input size per channel: "
                               f"({' x '.join(str(s + 2 * p) for s, p in zip(sp, pad))}). "
                               f"Kernel size: ({' x '.join(str(k) for k in ks)}). Kernel "
                               f"size can't be greater than actual input size")
        outs.append((sp[i] + 2 * pad[i] - eff) // stride[i] + 1)
    n = input.shape[0]
    if nd == 3:
        cols = _im2col_slices(input, ks, dilation, pad, stride, outs)
    else:
        if nd == 1:
            x4 = input.unsqueeze(2)
            k2, d2, p2, s2 = (1, ks[0]), (1, dilation[0]), (0, pad[0]), (1, stride[0])
        else:
            x4, k2, d2, p2, s2 = input, ks, dilation, pad, stride
        cols = F.unfold(x4, k2, d2, p2, s2)           # (N, C*kk, L)
    kk = cin_g * math.prod(ks)
    if groups == 1:
        out = weight.reshape(cout, kk).matmul(cols)    # (N, Cout, L)
    else:
        cols = cols.reshape(n, groups, kk, -1)
        out = weight.reshape(groups, cout // groups, kk).matmul(cols)
        out = out.reshape(n, cout, -1)
    out = out.reshape((n, cout) + tuple(outs))
    if bias is not None:
        out = out + bias.reshape((1, cout) + (1,) * nd)
    return out.squeeze(0) if unbatched else out


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (torch.nn.functional.conv2d).

    input (N, C_in, H, W) or (C_in, H, W); weight (C_out, C_in/groups, kH, kW);
    bias (C_out,) or None; stride, dilation: int or pair; padding: int, pair,
    'valid' or 'same' (stride 1 only). Returns (N, C_out, H_out, W_out).
    Raises RuntimeError (torch's words) for channel/group mismatches, a
    kernel larger than the padded input, non-positive stride/dilation."""
    return _convnd(input, weight, bias, stride, padding, dilation, groups, 2)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution (torch.nn.functional.conv1d): input (N, C_in, L) or
    (C_in, L); weight (C_out, C_in/groups, k). See conv2d."""
    return _convnd(input, weight, bias, stride, padding, dilation, groups, 1)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D convolution (torch.nn.functional.conv3d): input (N, C_in, D, H, W)
    or (C_in, D, H, W); weight (C_out, C_in/groups, kD, kH, kW); bias (C_out,)
    or None; stride, dilation: int or triple; padding: int, triple, 'valid' or
    'same'. Returns (N, C_out, D_out, H_out, W_out). The columns are one
    strided slice of the padded input per kernel offset, stacked (all
    native under tp.compile), then one matmul. Errors as conv2d's."""
    return _convnd(input, weight, bias, stride, padding, dilation, groups, 3)


def _im2col_slices(x, ks, dilation, pad, stride, outs):
    """(N, C, *sp) -> (N, C * prod(ks), prod(outs)): the columns of an N-d
    convolution, C outer and the kernel offsets (row-major) inner, as the
    weight's reshape to (C_out, C * prod(ks)) orders them."""
    import itertools
    F = _F()
    nd = len(ks)
    if any(pad):
        widths = []
        for p in reversed(pad):
            widths += [p, p]
        x = F.pad(x, widths)
    n, c = x.shape[0], x.shape[1]
    taps = []
    for offs in itertools.product(*(range(k) for k in ks)):
        idx = [slice(None), slice(None)]
        for o, d, s, m in zip(offs, dilation, stride, outs):
            idx.append(slice(o * d, o * d + (m - 1) * s + 1, s))
        taps.append(x[tuple(idx)])
    cols = _tp().stack(taps, 2) if len(taps) > 1 else taps[0].unsqueeze(2)
    return cols.reshape(n, c * len(taps), math.prod(outs))


def _dilate_zeros(x, dim, s):
    """Puts s - 1 zeros between neighbours along dim (size L -> (L-1)*s + 1):
    unsqueeze, constant pad of the new dim, reshape, slice (all native)."""
    F = _F()
    if s == 1:
        return x
    rest = x.dim() - dim - 1
    y = x.unsqueeze(dim + 1)
    y = F.pad(y, [0, 0] * rest + [0, s - 1])
    shape = tuple(x.shape)
    y = y.reshape(shape[:dim] + (shape[dim] * s,) + shape[dim + 1:])
    idx = (slice(None),) * dim + (slice(0, (shape[dim] - 1) * s + 1),)
    return y[idx]


def _reverse(x, dim):
    """x flipped along dim, as an index_select (flip has no native kernel)."""
    n = x.shape[dim]
    if n == 1:
        return x
    return x.index_select(dim, _tp().arange(n - 1, -1, -1))


_OP_AXES = {1: ("height", "width"), 2: ("height", "width"), 3: ("depth", "height", "width")}


def _conv_transposend(input, weight, bias, stride, padding, output_padding, groups,
                      dilation, nd):
    """conv_transpose{1,2,3}d as the gradient of conv with respect to its
    input: zeros inserted between the input's elements (stride), padded by
    dilation * (k - 1) - padding (+ output_padding on the right, cropped
    where negative), then a stride-1 convolution with the kernel flipped
    and its in/out channels swapped per group."""
    name = f"conv_transpose{nd}d"
    F = _F()
    _check_conv_args(input, weight, name, nd)
    if weight.dim() != nd + 2:
        raise RuntimeError(f"Expected {nd + 2}-dimensional weight for {name}, but got "
                           f"{weight.dim()}-dimensional weight of size "
                           f"{list(weight.shape)} instead")
    unbatched = input.dim() == nd + 1
    if unbatched:
        input = input.unsqueeze(0)
    if input.dtype != weight.dtype:
        raise RuntimeError(f"Input type ({input.dtype}) and weight type ({weight.dtype}) "
                           f"should be the same")
    if isinstance(padding, str):
        raise TypeError(f"{name}(): argument 'padding' must be tuple of ints, not str")
    groups = int(groups)
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    stride = _tuple(stride, nd, "stride")
    pad = _tuple(padding, nd, "padding")
    opad = _tuple(output_padding, nd, "output_padding")
    dilation = _tuple(dilation, nd, "dilation")
    if min(stride) <= 0:
        raise RuntimeError("non-positive stride is not supported")
    if min(pad) < 0:
        raise RuntimeError("negative padding is not supported")
    if min(opad) < 0:
        raise RuntimeError("negative output_padding is not supported")
    if min(dilation) <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")
    if any(o >= s and o >= d for o, s, d in zip(opad, stride, dilation)):
        # torch runs 1-d as 2-d of height 1 and words it so
        lift = (lambda t, one: (one,) + t) if nd == 1 else (lambda t, one: t)
        axes = _OP_AXES[nd]
        parts = []
        for what, vals in (("output_padding", lift(opad, 0)), ("stride", lift(stride, 1)),
                           ("dilation", lift(dilation, 1))):
            parts += [f"{what}_{a}: {v}" for a, v in zip(axes, vals)]
        raise RuntimeError("output padding must be smaller than either stride or dilation, "
                           "but got " + " ".join(parts))
    cin, cout_g = weight.shape[0], weight.shape[1]
    ks = tuple(weight.shape[2:])
    if cin % groups != 0:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by "
                           f"{groups} at dimension 0, but got weight of size "
                           f"[{list(weight.shape)}] instead")
    if input.shape[1] != cin:
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, "
                           f"expected input{list(input.shape)} to have {cin} channels, but "
                           f"got {input.shape[1]} channels instead")
    cout = cout_g * groups
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != cout):
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, "
                           f"expected bias to be 1-dimensional with {cout} elements, but "
                           f"got bias of size {list(bias.shape)} instead")
    sp = tuple(input.shape[2:])
    outs = [(i - 1) * s - 2 * p + d * (k - 1) + o + 1
            for i, s, p, d, k, o in zip(sp, stride, pad, dilation, ks, opad)]
    if min(outs) < 1:
        raise RuntimeError(f"Given input size per channel: ({' x '.join(map(str, sp))}). "
                           f"Calculated output size per channel: "
                           f"({' x '.join(map(str, outs))}). Output size is too small")
    x = input
    for i, s in enumerate(stride):
        x = _dilate_zeros(x, 2 + i, s)
    widths, crop = [], []
    for i in reversed(range(nd)):
        lo = dilation[i] * (ks[i] - 1) - pad[i]
        hi = lo + opad[i]
        widths += [max(lo, 0), max(hi, 0)]
    if any(widths):
        x = F.pad(x, widths)
    for i in range(nd):
        lo = dilation[i] * (ks[i] - 1) - pad[i]
        hi = lo + opad[i]
        if lo < 0 or hi < 0:
            size = x.shape[2 + i]
            idx = (slice(None),) * (2 + i) + (slice(max(-lo, 0), size - max(-hi, 0)),)
            x = x[idx]
    # (C_in, C_out/g, k..) -> (C_out, C_in/g, k..), each group's block
    # transposed, the kernel reversed in every spatial dim
    w = weight.reshape((groups, cin // groups, cout_g) + ks).transpose(1, 2)
    w = w.reshape((cout, cin // groups) + ks)
    for i in range(nd):
        w = _reverse(w, 2 + i)
    out = _convnd(x, w, bias, 1, 0, dilation, groups, nd)
    return out.squeeze(0) if unbatched else out


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """1-D transposed convolution (torch.nn.functional.conv_transpose1d):
    input (N, C_in, L) or (C_in, L); weight (C_in, C_out/groups, k); returns
    (N, C_out, (L-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1).
    RuntimeError (torch's words) for a channel mismatch, output_padding not
    smaller than stride or dilation, an output size below 1."""
    return _conv_transposend(input, weight, bias, stride, padding, output_padding, groups,
                             dilation, 1)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """2-D transposed convolution (torch.nn.functional.conv_transpose2d):
    input (N, C_in, H, W) or (C_in, H, W); weight (C_in, C_out/groups, kH,
    kW). See conv_transpose1d."""
    return _conv_transposend(input, weight, bias, stride, padding, output_padding, groups,
                             dilation, 2)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """3-D transposed convolution (torch.nn.functional.conv_transpose3d):
    input (N, C_in, D, H, W) or (C_in, D, H, W); weight (C_in, C_out/groups,
    kD, kH, kW). See conv_transpose1d."""
    return _conv_transposend(input, weight, bias, stride, padding, output_padding, groups,
                             dilation, 3)


def _pool_geometry(name, shape, kernel_size, stride, padding, dilation, ceil_mode, nd):
    ks = _tuple(kernel_size, nd, "kernel_size")
    st = ks if stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0) \
        else _tuple(stride, nd, "stride")
    pd = _tuple(padding, nd, "padding")
    dl = _tuple(dilation, nd, "dilation")
    if min(ks) <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got "
                           f"{' '.join(f'k{c}: {k}' for c, k in zip('HW' if nd == 2 else 'W', ks))}")
    if min(st) <= 0:
        # torch's three wordings: max_pool1d's own check, then the 2-d
        # kernels' (1-d average pooling is 2-d of height 1)
        if name == "max_pool1d":
            raise RuntimeError(f"max_pool1d() stride must be greater than zero, but got {st[0]}")
        if 0 in st:
            raise RuntimeError("stride should not be zero")
        hw = st if nd == 2 else (1,) + tuple(st)
        raise RuntimeError(f"stride should be greater than zero, but got dH: {hw[0]} dW: {hw[1]}")
    for p, k, d in zip(pd, ks, dl):
        if p > (d * (k - 1) + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but "
                               f"got pad={p}, kernel_size={k} and dilation={d}")
    sp = shape[-nd:]
    outs, extra = [], []
    for s, k, st_, p, d in zip(sp, ks, st, pd, dl):
        eff = d * (k - 1) + 1
        num = s + 2 * p - eff
        o = (-(-num // st_) if ceil_mode else num // st_) + 1
        if ceil_mode and (o - 1) * st_ >= s + p:
            o -= 1       # the last window must start inside the input or left pad
        outs.append(o)
        extra.append(max((o - 1) * st_ + eff - (s + 2 * p), 0))
    if min(outs) < 1:
        # every dim's size in the message, as torch prints it
        raise RuntimeError(f"Given input size: ({'x'.join(str(x) for x in shape[-nd - 1:])}). "
                           f"Calculated output size: ({'x'.join(str(x) for x in shape[-nd - 1:-nd])}"
                           f"x{'x'.join(str(max(x, 0)) for x in outs)}). Output size is too small")
    return ks, st, pd, dl, outs, extra


def _pool(name, input, kernel_size, stride, padding, dilation, ceil_mode, nd, kind,
          count_include_pad=True, divisor_override=None, return_indices=False):
    F = _F()
    _check_t(input, name, "input", 1)
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"{name}: Expected {nd + 1}D or {nd + 2}D input, but got "
                           f"{input.dim()}D input of size {list(input.shape)}"
                           if nd == 1 else
                           f"non-empty 3D or 4D (batch mode) tensor expected for input")
    ks, st, pd, dl, outs, extra = _pool_geometry(name, tuple(input.shape), kernel_size,
                                                 stride, padding, dilation, ceil_mode, nd)
    lead = tuple(input.shape[:-nd])
    x = input.reshape((-1, 1) + tuple(input.shape[-nd:]))
    if nd == 1:
        x = x.unsqueeze(2)
        ks, st, pd, dl, extra = (1,) + ks, (1,) + st, (0,) + pd, (1,) + dl, [0] + extra
    fill = float("-inf") if kind == "max" else 0.0
    if any(pd) or any(extra):
        widths = []
        for p, e in zip(reversed(pd), reversed(extra)):
            widths += [p, p + e]
        x = F.pad(x, widths, value=fill)
    cols = F.unfold(x, ks, dl, 0, st)                 # (B, kk, L)
    if kind == "max" and return_indices:
        # torch's indices: the flat position in the input's (H*W) plane of
        # each window's first maximum; the window's positions are the same
        # unfold of a plane of position numbers (-1 in the padding)
        tp = _tp()
        h0, w0 = (1,) + tuple(input.shape[-1:]) if nd == 1 else tuple(input.shape[-2:])
        plane = tp.arange(h0 * w0, dtype=tp.float64).reshape(1, 1, h0, w0)
        if any(pd) or any(extra):
            plane = F.pad(plane, widths, value=-1.0)
        pos = F.unfold(plane, ks, dl, 0, st)          # (1, kk, L)
        at = cols.argmax(1, keepdim=True)             # (B, 1, L)
        sel = at == tp.arange(int(pos.shape[1])).reshape(1, -1, 1)
        idx = tp.where(sel, pos, 0.0).sum(1).to(tp.int64)
        out = cols.amax(1)
        return out.reshape(lead + tuple(outs)), idx.reshape(lead + tuple(outs))
    if kind == "max":
        out = cols.amax(1)
    else:
        kk = ks[0] * ks[1]
        if divisor_override:
            out = cols.sum(1) / float(divisor_override)
        elif count_include_pad and not any(extra):
            out = cols.mean(1)
        else:
            # the divisor counts the elements inside input (+ padding when
            # count_include_pad): a constant of the shapes
            h, w = x.shape[-2], x.shape[-1]
            ones = np.zeros((1, 1, h, w), np.float64)
            if count_include_pad:
                ones[..., :h - extra[0], :w - extra[1]] = 1
            else:
                ones[..., pd[0]:h - pd[0] - extra[0], pd[1]:w - pd[1] - extra[1]] = 1
            tp = _tp()
            cnt = F.unfold(tp.tensor(ones), ks, dl, 0, st).sum(1)
            out = cols.sum(1) / tp.tensor(np.asarray(cnt.numpy(), np.float64)).to(cols.dtype)
    return out.reshape(lead + tuple(outs))


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """2-D max pooling (torch.nn.functional.max_pool2d): input (N, C, H, W) or
    (C, H, W); padding counts as -inf. return_indices=True also returns the
    int64 flat index (h * W + w) of each maximum in its input plane, torch's
    (what max_unpool2d takes)."""
    return _pool("max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode, 2,
                 "max", return_indices=return_indices)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """1-D max pooling: input (N, C, L) or (C, L); return_indices=True also
    returns the int64 position of each maximum along L."""
    return _pool("max_pool1d", input, kernel_size, stride, padding, dilation, ceil_mode, 1,
                 "max", return_indices=return_indices)


def _max_unpool(name, input, indices, kernel_size, stride, padding, output_size, nd):
    tp = _tp()
    _check_t(input, name, "input", 1)
    ks = _tuple(kernel_size, nd, "kernel_size")
    st = ks if stride is None else _tuple(stride, nd, "stride")
    pd = _tuple(padding, nd, "padding")
    if indices.dtype != tp.int64:
        from tensorplay._ops import _title
        raise RuntimeError(f"elements in indices should be type int64 but got: "
                           f"{_title(str(indices.dtype).split('.')[-1])}")
    if tuple(indices.shape) != tuple(input.shape):
        raise RuntimeError(f"Expected shape of indices to be same as that of the input "
                           f"tensor ({list(input.shape)}) but got indices tensor with shape: "
                           f"{list(indices.shape)}")
    sp = tuple(input.shape[-nd:])
    default = [(i - 1) * s - 2 * p + k for i, s, p, k in zip(sp, st, pd, ks)]
    if output_size is None:
        out_sp = default
    else:
        out_sp = [int(o) for o in output_size][-nd:]
        if len(out_sp) != nd:
            raise ValueError(f"output_size should be a sequence containing {nd} or "
                             f"{nd + 2} elements, but it has a length of "
                             f"'{len(list(output_size))}'")
        for o, d, s in zip(out_sp, default, st):
            if not d - s < o < d + s:
                raise ValueError(f"invalid output_size \"{list(out_sp)}\" (dim {len(out_sp)}"
                                 f" must be between {[a - b for a, b in zip(default, st)]} and "
                                 f"{[a + b for a, b in zip(default, st)]})")
    lead = tuple(input.shape[:-nd])
    n = 1
    for o in out_sp:
        n *= o
    flat_in = input.reshape(lead + (-1,))
    flat_ix = indices.reshape(lead + (-1,))
    out = tp.zeros(lead + (n,), dtype=input.dtype).scatter(-1, flat_ix, flat_in)
    return out.reshape(lead + tuple(out_sp))


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The partial inverse of max_pool2d (torch.nn.functional.max_unpool2d):
    input and indices (N, C, H, W) from max_pool2d(return_indices=True); the
    output (N, C, H_out, W_out) is zero except input's values at indices
    (H_out = (H - 1) * stride - 2 * padding + kernel_size unless
    output_size says otherwise)."""
    return _max_unpool("max_unpool2d", input, indices, kernel_size, stride, padding,
                       output_size, 2)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """1-D max_unpool: input and indices (N, C, L) from max_pool1d."""
    return _max_unpool("max_unpool1d", input, indices, kernel_size, stride, padding,
                       output_size, 1)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """2-D average pooling (torch.nn.functional.avg_pool2d)."""
    return _pool("avg_pool2d", input, kernel_size, stride, padding, 1, ceil_mode, 2, "avg",
                 count_include_pad, divisor_override)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """1-D average pooling (torch.nn.functional.avg_pool1d)."""
    return _pool("avg_pool1d", input, kernel_size, stride, padding, 1, ceil_mode, 1, "avg",
                 count_include_pad)


def _avg_matrix(n_in, n_out):
    """(n_out, n_in): row i averages input [floor(i*n/o), ceil((i+1)*n/o))."""
    m = np.zeros((n_out, n_in), np.float64)
    for i in range(n_out):
        a = (i * n_in) // n_out
        b = -(-((i + 1) * n_in) // n_out)
        m[i, a:b] = 1.0 / (b - a)
    return m


def adaptive_avg_pool2d(input, output_size):
    """torch.nn.functional.adaptive_avg_pool2d: input (N, C, H, W) or (C, H, W);
    output_size int or pair (None keeps that size). Windows [floor(i*H/oh),
    ceil((i+1)*H/oh)); computed as A_h @ x @ A_w^T (constant averaging
    matrices: two small matmuls, native when compiled)."""
    _check_t(input, "adaptive_avg_pool2d", "input", 1)
    if input.dim() not in (3, 4):
        raise ValueError(f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got "
                         f"{list(input.shape)}")
    h, w = input.shape[-2], input.shape[-1]
    if isinstance(output_size, (list, tuple)):
        oh, ow = output_size
    else:
        oh = ow = output_size
    oh = h if oh is None else int(oh)
    ow = w if ow is None else int(ow)
    if oh == 1 and ow == 1:
        return input.mean((-2, -1), keepdim=True)
    if h % oh == 0 and w % ow == 0:
        return avg_pool2d(input, (h // oh, w // ow))
    tp = _tp()
    ah = tp.tensor(_avg_matrix(h, oh)).to(input.dtype)
    aw = tp.tensor(_avg_matrix(w, ow).T.copy()).to(input.dtype)
    return ah.matmul(input).matmul(aw)


def adaptive_avg_pool1d(input, output_size):
    """torch.nn.functional.adaptive_avg_pool1d: input (N, C, L) or (C, L)."""
    o = output_size[0] if isinstance(output_size, (list, tuple)) else output_size
    return adaptive_avg_pool2d(input.unsqueeze(-2), (1, o)).squeeze(-2)


def _bshape(a, b):
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    return tuple(y if x == 1 else x for x, y in zip(a, b))


def _bcast_or_raise(a, b):
    """torch's error for batch dims that do not broadcast."""
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and x != 1 and y != 1:
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b "
                               f"({y}) at non-singleton dimension {i}")


def _flash_eligible(q, k, v, dropout_p):
    """The inputs torch 2.13's CPU flash-attention kernel takes (where an
    attn_mask and is_causal combine instead of raising)."""
    return (q.dim() == k.dim() == v.dim() == 4 and dropout_p == 0.0
            and q.shape[-1] == k.shape[-1] == v.shape[-1]
            and tuple(q.shape[:2]) == tuple(k.shape[:2]) == tuple(v.shape[:2]))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(q @ k^T * scale + mask) @ v (torch.nn.functional.
    scaled_dot_product_attention).

    query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev);
    attn_mask: bool (True = take part) or float (added), broadcastable to
    (..., L, S); is_causal: the lower-triangular mask (with attn_mask too:
    both apply where torch 2.13's CPU flash kernel would run -- 4-D, one
    head dim, same batch and heads, no dropout -- else torch's error);
    scale: default 1/sqrt(E). Raises RuntimeError for mismatched head dims,
    batch dims, or a mask of the wrong shape or dtype. Compiled: one
    tiled online-softmax attention kernel (the L x S scores never in
    memory; is_causal skips the key tiles past the diagonal) when nothing
    else reads the scores or probabilities; with dropout_p > 0 in training
    or under autograd (the probabilities are saved) it stays matmul, the
    fused softmax kernel and matmul. A row whose keys are all masked is 0,
    with a zero gradient, eager and compiled (torch 2.13's SDPA through
    _safe_softmax; the explicit softmax formula stays NaN there, as in
    torch)."""
    for i, (t, n) in enumerate(((query, "query"), (key, "key"), (value, "value"))):
        _check_t(t, "scaled_dot_product_attention", n, i + 1)
    if query.dim() < 2 or key.dim() < 2 or value.dim() < 2:
        raise RuntimeError(f"scaled_dot_product_attention: expected query, key and value "
                           f"to have at least 2 dimensions, got {query.dim()}, {key.dim()} "
                           f"and {value.dim()}")
    if not (query.dtype == key.dtype == value.dtype):
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got "
                           f"query.dtype: {_cname(query.dtype)} key.dtype: {_cname(key.dtype)} "
                           f"and value.dtype: {_cname(value.dtype)} instead.")
    if query.shape[-1] != key.shape[-1]:
        raise RuntimeError(f"Expected query and key to have the same size in the last "
                           f"dimension (the head dim), but got query {list(query.shape)} "
                           f"and key {list(key.shape)}")
    if key.shape[-2] != value.shape[-2]:
        raise RuntimeError(f"Expected key and value to have the same sequence length, but "
                           f"got key {list(key.shape)} and value {list(value.shape)}")
    if not enable_gqa:
        # batch dims broadcast as the matmuls do: torch's broadcasting error
        _bcast_or_raise(query.shape[:-2], key.shape[:-2])
        _bcast_or_raise(_bshape(query.shape[:-2], key.shape[:-2]), value.shape[:-2])
    if enable_gqa and query.dim() >= 3 and query.shape[-3] != key.shape[-3]:
        rep = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(rep, -3)
        value = value.repeat_interleave(rep, -3)
    L, S = query.shape[-2], key.shape[-2]
    F = _F()
    tp = _tp()
    sc = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scores = query.matmul(key.transpose(-2, -1)) * sc
    if is_causal:
        if attn_mask is not None and not _flash_eligible(query, key, value, dropout_p):
            # torch's math kernel refuses both; its CPU flash kernel (4-D,
            # one head dim, same batch and heads, no dropout) applies both
            raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should "
                               "not be set when is_causal=True")
        # derived from the scores (an index map when compiled), not a
        # constant: L and S stay symbolic sizes under dynamic shapes, so a
        # generate() loop does not recompile per length
        causal = tp.ones_like(scores, dtype=tp.bool).tril()
        scores = scores.masked_fill(causal.logical_not(), float("-inf"))
    if attn_mask is not None:
        _check_t(attn_mask, "scaled_dot_product_attention", "attn_mask", 4)
        ms = tuple(attn_mask.shape)
        want = tuple(scores.shape)
        ok = len(ms) <= len(want) and all(
            m == 1 or m == w for m, w in zip(reversed(ms), reversed(want)))
        if not ok:
            raise RuntimeError(f"scaled_dot_product_attention: attn_mask of shape "
                               f"{list(ms)} is not broadcastable to the attention "
                               f"scores' shape {list(want)} (query {list(query.shape)}, "
                               f"key {list(key.shape)})")
        if attn_mask.dtype == tp.bool:
            scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))
        elif attn_mask.is_floating_point():
            if attn_mask.dtype != query.dtype:
                raise RuntimeError(f"Expected attn_mask dtype to be bool or float or to "
                                   f"match query dtype, but got attn_mask.dtype: "
                                   f"{_cname(attn_mask.dtype)} and  query.dtype: "
                                   f"{_cname(query.dtype)} instead.")
            scores = scores + attn_mask
        else:
            raise RuntimeError(f"Expected attn_mask dtype to be bool or float or to match "
                               f"query dtype, but got attn_mask.dtype: "
                               f"{_cname(attn_mask.dtype)} and  query.dtype: "
                               f"{_cname(query.dtype)} instead.")
    # torch's math kernel: _safe_softmax, a row whose keys are all masked
    # is 0 (and gets no gradient), not NaN
    attn = tp._safe_softmax(scores, -1)
    if dropout_p > 0.0:
        attn = F.dropout(attn, dropout_p, True)
    return attn.matmul(value)


def multi_head_attention_forward(query, key, value, num_heads, in_proj_weight, in_proj_bias,
                                 out_proj_weight, out_proj_bias, key_padding_mask=None,
                                 need_weights=True, attn_mask=None, average_attn_weights=True,
                                 is_causal=False, dropout_p=0.0, training=True, bias_k=None,
                                 bias_v=None, add_zero_attn=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None):
    """nn.MultiheadAttention's computation; sequence-first (L, N, E) or
    unbatched (L, E); key (S, N, kdim), value (S, N, vdim). in_proj_weight
    (3E, E), or None and the separate q_proj_weight (E, E), k_proj_weight
    (E, kdim), v_proj_weight (E, vdim); bias_k/bias_v (1, 1, E) append one
    key/value (add_bias_kv), add_zero_attn one zero key/value after the
    projection (masks get a zero column for each, as torch). Returns (output
    (L, N, E), weights (N, L, S') averaged over heads or (N, H, L, S'), or
    None)."""
    F = _F()
    tp = _tp()
    unbatched = query.dim() == 2
    if unbatched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    L, N, E = query.shape
    S = key.shape[0]
    if E % num_heads:
        raise AssertionError(f"embed_dim {E} not divisible by num_heads {num_heads}")
    hd = E // num_heads
    if in_proj_weight is not None:
        if key.shape[-1] != E or value.shape[-1] != E:
            raise AssertionError(f"was expecting embedding dimension of {E}, but got "
                                 f"{key.shape[-1] if key.shape[-1] != E else value.shape[-1]}")
        if key.shape[:-1] != value.shape[:-1]:
            raise AssertionError(f"key shape {tuple(key.shape)} does not match value shape "
                                 f"{tuple(value.shape)}")
        w_q, w_k, w_v = in_proj_weight.chunk(3)
    else:
        if tuple(key.shape[:2]) != tuple(value.shape[:2]):
            raise AssertionError(f"key's sequence and batch dims {tuple(key.shape[:2])} do "
                                 f"not match value's {tuple(value.shape[:2])}")
        w_q, w_k, w_v = q_proj_weight, k_proj_weight, v_proj_weight
        for w, t, what in ((w_q, query, "query"), (w_k, key, "key"), (w_v, value, "value")):
            if tuple(w.shape) != (E, t.shape[-1]):
                raise AssertionError(f"expecting {what} weights shape of "
                                     f"{(E, t.shape[-1])}, but got {tuple(w.shape)}")
    b_q = b_k = b_v = None
    if in_proj_bias is not None:
        b_q, b_k, b_v = in_proj_bias.chunk(3)
    q = F.linear(query, w_q, b_q)
    k = F.linear(key, w_k, b_k)
    v = F.linear(value, w_v, b_v)
    # the masks as additive float masks, checked against the source length S
    mask = None
    if attn_mask is not None:
        if attn_mask.dim() == 2:
            if tuple(attn_mask.shape) != (L, S):
                raise RuntimeError(f"The shape of the 2D attn_mask is "
                                   f"{attn_mask.shape}, but should be {(L, S)}.")
            mask = attn_mask.reshape(1, 1, L, S)
        elif attn_mask.dim() == 3:
            if tuple(attn_mask.shape) != (N * num_heads, L, S):
                raise RuntimeError(f"The shape of the 3D attn_mask is "
                                   f"{attn_mask.shape}, but should be "
                                   f"{(N * num_heads, L, S)}.")
            mask = attn_mask.reshape(N, num_heads, L, S)
        else:
            raise RuntimeError(f"attn_mask's dimension {attn_mask.dim()} is not supported")
        if mask.dtype == tp.bool:
            mask = tp.zeros(mask.shape, dtype=q.dtype).masked_fill(mask, float("-inf"))
        elif not mask.is_floating_point():
            raise AssertionError("only bool and floating types of attn_mask are supported")
    elif is_causal:
        mask = tp.full((L, S), float("-inf"), dtype=q.dtype).triu(1).reshape(1, 1, L, S)
    kpm = None
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (N, S):
            raise AssertionError(f"expecting key_padding_mask shape of {(N, S)}, but got "
                                 f"{tuple(key_padding_mask.shape)}")
        kpm = key_padding_mask.reshape(N, 1, 1, S)
        if kpm.dtype == tp.bool:
            kpm = tp.zeros(kpm.shape, dtype=q.dtype).masked_fill(kpm, float("-inf"))
        elif not kpm.is_floating_point():
            raise AssertionError("only bool and floating types of key_padding_mask are "
                                 "supported")
    extra = 0
    if bias_k is not None or bias_v is not None:
        if bias_k is None or bias_v is None:
            raise AssertionError("bias_k and bias_v must both be given")
        k = tp.cat([k, bias_k.reshape(1, 1, E).expand(1, N, E)])
        v = tp.cat([v, bias_v.reshape(1, 1, E).expand(1, N, E)])
        extra += 1
    # (L, N, E) -> (N, H, L, hd)
    Sk = S + extra
    q = q.reshape(L, N * num_heads, hd).transpose(0, 1).reshape(N, num_heads, L, hd)
    k = k.reshape(Sk, N * num_heads, hd).transpose(0, 1).reshape(N, num_heads, Sk, hd)
    v = v.reshape(Sk, N * num_heads, hd).transpose(0, 1).reshape(N, num_heads, Sk, hd)
    if add_zero_attn:
        z = tp.zeros((N, num_heads, 1, hd), dtype=k.dtype)
        k = tp.cat([k, z], 2)
        v = tp.cat([v, z], 2)
        extra += 1
    if extra:
        # the appended keys are attended to: a zero column per key
        if mask is not None:
            mask = F.pad(mask, [0, extra])
        if kpm is not None:
            kpm = F.pad(kpm, [0, extra])
    if kpm is not None:
        mask = kpm if mask is None else mask + kpm
    p = dropout_p if training else 0.0
    scores = q.matmul(k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    if mask is not None:
        scores = scores + mask
    # need_weights=False is torch's scaled_dot_product_attention, whose
    # _safe_softmax makes a row with every key masked (a causal mask over
    # left padding) 0; the weights' explicit softmax leaves it NaN
    attn = scores.softmax(-1) if need_weights else tp._safe_softmax(scores, -1)
    if p > 0.0:
        attn = F.dropout(attn, p, True)
    out = attn.matmul(v)                                # (N, H, L, hd)
    out = out.permute(2, 0, 1, 3).reshape(L, N, E)
    out = F.linear(out, out_proj_weight, out_proj_bias)
    w = None
    if need_weights:
        w = attn.mean(1) if average_attn_weights else attn
    if unbatched:
        out = out.squeeze(1)
        if w is not None:
            w = w.squeeze(0)
    return out, w


def _batch_norm_training(input, running_mean=None, running_var=None, weight=None, bias=None,
                         training=False, momentum=0.1, eps=1e-05):
    """batch_norm(training=True) while tracing: the batch mean and (biased)
    variance (a Welford reduction), the normalization, and the running
    statistics' in-place updates (unbiased variance, torch's) - every piece
    native. training=False is recorded whole (a fused kernel)."""
    if not training:
        return NotImplemented
    if not input.dtype.is_floating_point:
        return NotImplemented       # eager raises torch's NotImplementedError
    nd = input.dim()
    if nd < 2:
        return NotImplemented
    c = input.shape[1]
    n = 1
    for i, s in enumerate(input.shape):
        if i != 1:
            n *= s
    if n <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got "
                         f"input size {list(input.shape)}")
    dims = [0] + list(range(2, nd))
    var, mean = _tp().var_mean(input, dims, correction=0)
    shape = [1, c] + [1] * (nd - 2)
    y = (input - mean.reshape(shape)) * (var.reshape(shape) + eps).rsqrt()
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    if running_mean is not None:
        _update(running_mean, mean.detach() * momentum, 1 - momentum)
    if running_var is not None:
        _update(running_var, var.detach() * (momentum * n / (n - 1)), 1 - momentum)
    return y


def _update(buf, step, keep):
    """buf = buf * keep + step, in place. A lifted buffer is a proxy (its
    in-place methods are recorded); a real tensor (not lifted: held in a
    dict, a list) must not be written now, so the new value is computed
    from the proxy side -- buf enters the graph as a constant held by
    reference -- and copied into buf by a recorded copy_."""
    if isinstance(buf, _C.Tensor) and not isinstance(step, _C.Tensor):
        buf.copy_(step.add(buf, alpha=keep))
    else:
        buf.mul_(keep).add_(step)


def _install():
    F = _F()
    _C._set_trace_decomposition(F.batch_norm, _batch_norm_training)
    _C._set_trace_decomposition(F.cumsum, _cumsum_traced)
    _C._set_trace_decomposition("cumsum", _cumsum_traced)
    _native_decomps.install()


def _cumsum_traced(input, dim, *, dtype=None):
    """cumsum of a floating tensor while tracing, as matmuls with constant
    triangular matrices (native; BLAS): n <= 256 along dim: x @ U (U[i, j] =
    1 for i <= j); longer: blocks of B = ceil(sqrt(n)) (x padded to nb*B),
    the in-block prefix sums x_b @ U_B, plus the exclusive prefix of the
    block totals (totals @ strict U_nb): O(n^1.5) work instead of a
    sequential scan. NaN/inf are summed apart (a matmul would spread them
    through the triangle's zeros). Integer/bool inputs and dtype=
    conversions to an integer type: _native_decomps.cumsum_int (exact
    masked block sums)."""
    tp = _tp()
    if dtype is not None:
        if not getattr(dtype, "is_floating_point", False):
            return _native_decomps.cumsum_int(input, dim, dtype)
        input = input.to(dtype)
    if not input.is_floating_point():
        return _native_decomps.cumsum_int(input, dim, dtype)
    nd = input.dim()
    try:
        d = operator.index(dim)
    except TypeError:
        return NotImplemented      # the eager error, from the recorded call
    d = d + nd if d < 0 else d
    if nd == 0 or d < 0 or d >= nd:
        return NotImplemented
    if input.dtype == tp.float16 or str(input.dtype).endswith("bfloat16"):
        # accumulated in float32 and rounded once, as eager and PyTorch do
        # (a float16 running sum of ones stops at 2048)
        return _cumsum_traced(input.float(), dim).to(input.dtype)
    if input.dtype == tp.float32:
        # torch's CPU cumsum accumulates a float32 tensor in double
        # (at::acc_type): summed in float64, rounded once
        return _cumsum_traced(input.double(), dim).to(input.dtype)
    x = input.transpose(d, -1) if d != nd - 1 else input
    n = int(x.shape[-1])
    if n == 0:
        # nothing to sum (and the first-inf search below would reduce an
        # empty dim): torch's result is an empty tensor of the input's shape
        return input.clone()
    if input.requires_grad and tp.is_grad_enabled():
        # masked sums: NaN/inf stay in place and the joint graph's gradient
        # reaches every element (the matmul path's where() below cuts it at
        # the non-finite ones)
        out = _native_decomps._prefix_sum_int(x)
        return out.transpose(d, -1) if d != nd - 1 else out
    npd = _NP_OF.get(str(x.dtype).split(".")[-1], np.float32)
    # a matmul multiplies every element by the triangle's zeros too, and
    # 0 * inf = NaN would spread a NaN/inf to the sums before it: the matmul
    # sums the finite values only; a prefix holds +inf (-inf) from the first
    # +inf or NaN (-inf or NaN) on, found by an O(n) min-reduction, and
    # inf + -inf gives the NaN
    finite = x.isfinite()
    out = _prefix_mm(tp.where(finite, x, 0.0), n, npd)
    nan = x.isnan()
    at = tp.arange(n)
    for flag, inf in (((x == math.inf).logical_or(nan), math.inf),
                      ((x == -math.inf).logical_or(nan), -math.inf)):
        first = tp.where(flag, at, n).amin(-1, keepdim=True)
        out = out + tp.where(at >= first, inf, 0.0).to(out.dtype)
    return out.transpose(d, -1) if d != nd - 1 else out


def _prefix_mm(x, n, npd):
    """Inclusive prefix sums along the last dim (size n) of a floating x as
    matmuls with constant triangles of NumPy dtype npd: n <= 256: x @ U;
    longer: blocks of B = ceil(sqrt(n)) (x padded to nb*B), the in-block
    prefix sums x_b @ U_B plus the exclusive prefix of the block totals
    (totals @ strict U_nb)."""
    tp = _tp()
    if n <= 256:
        return x.matmul(tp.tensor(np.triu(np.ones((n, n), npd))))
    B = int(math.isqrt(n - 1)) + 1
    nb = -(-n // B)
    xp = _F().pad(x, [0, nb * B - n]) if nb * B != n else x
    xb = xp.reshape(tuple(x.shape[:-1]) + (nb, B))
    within = xb.matmul(tp.tensor(np.triu(np.ones((B, B), npd))))
    totals = within[..., B - 1]
    offs = totals.matmul(tp.tensor(np.triu(np.ones((nb, nb), npd), 1)))
    out = (within + offs.unsqueeze(-1)).reshape(tuple(x.shape[:-1]) + (nb * B,))
    return out[..., :n] if nb * B != n else out


_NP_OF = {"float32": np.float32, "float64": np.float64, "float16": np.float16}
