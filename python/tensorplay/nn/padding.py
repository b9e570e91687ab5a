"""The padding modules of torch.nn (ZeroPad, ConstantPad, ReflectionPad,
ReplicationPad, CircularPad in 1, 2 and 3 dims): each holds its widths as a
tuple (left, right[, top, bottom[, front, back]]) and calls F.pad, so they
refuse and compile exactly as F.pad does."""
import collections.abc

import tensorplay.functional as F
from tensorplay.nn.modules import Module

__all__ = ["ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "ConstantPad1d", "ConstantPad2d",
           "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d",
           "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "CircularPad1d",
           "CircularPad2d", "CircularPad3d"]


def _widths(padding, n):
    # torch's _pair/_quadruple/_ntuple: an iterable is taken as given (no
    # length check), a number is repeated n times
    if isinstance(padding, collections.abc.Iterable):
        return tuple(padding)
    return (padding,) * n


class _PadNd(Module):
    _n = 2          # number of widths: 2 per padded dim
    _mode = "constant"

    def __init__(self, padding):
        super().__init__()
        self.padding = _widths(padding, self._n)

    def forward(self, input):
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self):
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value):
        super().__init__(padding)
        self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self):
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pads the last dim of (C, W) or (N, C, W) with `value`: padding int or
    (left, right)."""
    _n = 2


class ConstantPad2d(_ConstantPadNd):
    """Pads the last 2 dims with `value`: padding int or (left, right, top, bottom)."""
    _n = 4


class ConstantPad3d(_ConstantPadNd):
    """Pads the last 3 dims with `value`: padding int or a 6-tuple."""
    _n = 6


class ZeroPad1d(ConstantPad1d):
    """ConstantPad1d with value 0."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ZeroPad2d(ConstantPad2d):
    """ConstantPad2d with value 0."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ZeroPad3d(ConstantPad3d):
    """ConstantPad3d with value 0."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ReflectionPad1d(_PadNd):
    """Mirror padding of the last dim (F.pad mode 'reflect')."""
    _n, _mode = 2, "reflect"


class ReflectionPad2d(_PadNd):
    """Mirror padding of the last 2 dims (F.pad mode 'reflect')."""
    _n, _mode = 4, "reflect"


class ReflectionPad3d(_PadNd):
    """Mirror padding of the last 3 dims (F.pad mode 'reflect')."""
    _n, _mode = 6, "reflect"


class ReplicationPad1d(_PadNd):
    """Edge-repeating padding of the last dim (F.pad mode 'replicate')."""
    _n, _mode = 2, "replicate"


class ReplicationPad2d(_PadNd):
    """Edge-repeating padding of the last 2 dims (F.pad mode 'replicate')."""
    _n, _mode = 4, "replicate"


class ReplicationPad3d(_PadNd):
    """Edge-repeating padding of the last 3 dims (F.pad mode 'replicate')."""
    _n, _mode = 6, "replicate"


class _CircularPadNd(_PadNd):
    _mode = "circular"

    def forward(self, input):
        # torch's modules check the rank themselves (ValueError), before F.pad
        nd = self._n // 2
        if input.dim() not in (nd + 1, nd + 2):
            raise ValueError(f"expected {nd + 1}D or {nd + 2}D input "
                             f"(got {input.dim()}D input)")
        return F.pad(input, self.padding, "circular")


class CircularPad1d(_CircularPadNd):
    """Wrap-around padding of the last dim: input (C, W) or (N, C, W);
    ValueError for another rank."""
    _n = 2


class CircularPad2d(_CircularPadNd):
    """Wrap-around padding of the last 2 dims: input 3-D or 4-D."""
    _n = 4


class CircularPad3d(_CircularPadNd):
    """Wrap-around padding of the last 3 dims: input 4-D or 5-D."""
    _n = 6
