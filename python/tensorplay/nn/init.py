"""tensorplay.nn.init: in-place initializations, PyTorch's names and numbers.

Every function fills ``tensor`` in place under no_grad and returns it. Draws
come from tensorplay's Philox generator (``tensorplay.manual_seed``), so the
distributions match torch's but not its exact random streams."""
import math
import warnings

import numpy as np

import tensorplay as _tp

__all__ = ["calculate_gain", "uniform_", "normal_", "trunc_normal_", "constant_", "ones_",
           "zeros_", "eye_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
           "kaiming_normal_", "orthogonal_"]


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity (torch.nn.init.calculate_gain).
    Raises ValueError for an unknown nonlinearity or a bad slope."""
    linear_fns = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                  "conv_transpose2d", "conv_transpose3d"]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _fans(tensor):
    d = tensor.dim()
    if d < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer "
                         "than 2 dimensions")
    num_in = tensor.shape[1]
    num_out = tensor.shape[0]
    rf = 1
    for s in tensor.shape[2:]:
        rf *= s
    return num_in * rf, num_out * rf


def _calculate_fan_in_and_fan_out(tensor):
    return _fans(tensor)


def _fan(tensor, mode):
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fi, fo = _fans(tensor)
    return fi if mode == "fan_in" else fo


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fill with U(a, b)."""
    with _tp.no_grad():
        return tensor.uniform_(a, b)


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fill with N(mean, std**2)."""
    with _tp.no_grad():
        return tensor.normal_(mean, std)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Fill with N(mean, std**2) truncated to [a, b] (inverse-CDF sampling of
    a uniform draw, as torch does)."""
    from scipy.special import erfinv

    def cdf(x):
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0
    if (mean < a - 2 * std) or (mean > b + 2 * std):
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
                      "The distribution of values may be incorrect.", stacklevel=2)
    with _tp.no_grad():
        lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
        u = _tp.empty(tensor.shape, dtype=_tp.float64).uniform_(2 * lo - 1, 2 * hi - 1)
        v = erfinv(u.numpy()) * (std * math.sqrt(2.0)) + mean
        tensor.copy_(_tp.tensor(np.clip(v, a, b)))
    return tensor


def constant_(tensor, val):
    with _tp.no_grad():
        return tensor.fill_(val)


def ones_(tensor):
    return constant_(tensor, 1.0)


def zeros_(tensor):
    with _tp.no_grad():
        return tensor.zero_()


def eye_(tensor):
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    with _tp.no_grad():
        tensor.copy_(_tp.eye(*tensor.shape, dtype=tensor.dtype))
    return tensor


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    fi, fo = _fans(tensor)
    a = gain * math.sqrt(6.0 / float(fi + fo))
    return uniform_(tensor, -a, a)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """N(0, std**2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fi, fo = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fi + fo)))


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """U(-bound, bound), bound = gain(nonlinearity, a) * sqrt(3 / fan)."""
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    fan = _fan(tensor, mode)
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """N(0, std**2), std = gain(nonlinearity, a) / sqrt(fan)."""
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    fan = _fan(tensor, mode)
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan))


def orthogonal_(tensor, gain=1, generator=None):
    """Fill a tensor of >= 2 dims with a (semi-)orthogonal matrix (torch's
    algorithm: QR of a standard normal (rows, numel // rows) matrix, the
    transposed one when rows < cols, Q's columns signed by diag(R)), times
    gain. Zero elements: no-op. Raises ValueError for fewer than 2 dims.
    The QR runs in float64 (NumPy) and is rounded to tensor's dtype."""
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    with _tp.no_grad():
        flat = _tp.empty(rows, cols, dtype=_tp.float32)
        if generator is not None:
            flat.normal_(0.0, 1.0, generator=generator)
        else:
            flat.normal_(0.0, 1.0)
        a = np.asarray(flat.tolist(), dtype=np.float64)
        if rows < cols:
            a = a.T
        q, r = np.linalg.qr(a)
        q = q * np.sign(np.diag(r))
        if rows < cols:
            q = q.T
        q = q * float(gain)
        tensor.copy_(_tp.tensor(q.reshape(tuple(tensor.shape)).tolist(), dtype=tensor.dtype))
    return tensor
