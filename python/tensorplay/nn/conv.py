"""nn.Conv3d and nn.ConvTranspose1d/2d/3d, with torch's parameters
(weight (C_out, C_in/groups, k...) for Conv3d, (C_in, C_out/groups, k...)
for the transposed ones; bias (C_out,)), init and state_dict keys."""
import tensorplay as _tp
import tensorplay.functional as F
from tensorplay.nn.modules import _ConvNd, _check_conv_groups, _ntuple

__all__ = ["Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]


class Conv3d(_ConvNd):
    """torch.nn.Conv3d: (N, C_in, D, H, W) -> (N, C_out, D_out, H_out, W_out)."""
    _nd = 3

    def forward(self, input):
        return self._conv(input, F.conv3d)


class _ConvTransposeNd(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for '
                             f'{type(self).__name__}')
        nd = self._nd
        _check_conv_groups(in_channels, out_channels, groups)
        # _ConvNd builds (out, in/g, k...); the transposed weight is
        # (in, out/g, k...): build it here and skip the base's parameters
        _tp.nn.Module.__init__(self)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _ntuple(kernel_size, nd)
        self.stride = _ntuple(stride, nd)
        self.padding = _ntuple(padding, nd)
        self.dilation = _ntuple(dilation, nd)
        self.output_padding = _ntuple(output_padding, nd)
        self.groups = groups
        self.padding_mode = padding_mode
        self.transposed = True
        self._make_parameters((in_channels, out_channels // groups), bias, dtype)

    def _output_padding(self, input, output_size):
        nd = self._nd
        if output_size is None:
            return self.output_padding
        lead = 2 if input.dim() == nd + 2 else 1
        output_size = list(output_size)
        if len(output_size) == lead + nd:
            output_size = output_size[lead:]
        if len(output_size) != nd:
            raise ValueError(f"ConvTranspose{nd}D: for {input.dim()}D input, output_size "
                             f"must have {nd} or {lead + nd} elements (got "
                             f"{len(output_size)})")
        lo, hi = [], []
        for d in range(nd):
            m = ((input.shape[d + lead] - 1) * self.stride[d] - 2 * self.padding[d]
                 + self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            lo.append(m)
            hi.append(m + self.stride[d] - 1)
        for size, a, b in zip(output_size, lo, hi):
            if size < a or size > b:
                raise ValueError(f"requested an output size of {output_size}, but valid "
                                 f"sizes range from {lo} to {hi} (for an input of "
                                 f"{_tp.Size(input.shape[lead:])})")
        return tuple(o - a for o, a in zip(output_size, lo))

    def forward(self, input, output_size=None):
        """input (N, C_in, *sp) or (C_in, *sp); output_size (optional) picks
        the output's spatial size among the ones the stride allows
        (ValueError outside them)."""
        op = self._output_padding(input, output_size)
        fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[self._nd - 1]
        return fn(input, self.weight, self.bias, self.stride, self.padding, op, self.groups,
                  self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """torch.nn.ConvTranspose1d: (N, C_in, L) -> (N, C_out, L_out)."""
    _nd = 1


class ConvTranspose2d(_ConvTransposeNd):
    """torch.nn.ConvTranspose2d: (N, C_in, H, W) -> (N, C_out, H_out, W_out)."""
    _nd = 2


class ConvTranspose3d(_ConvTransposeNd):
    """torch.nn.ConvTranspose3d: (N, C_in, D, H, W) -> (N, C_out, D', H', W')."""
    _nd = 3
