"""nn.InstanceNorm1d/2d/3d: F.instance_norm with torch's parameters
(weight = 1 of (C,) when affine, and bias = 0 unless bias=False) and buffers (running_mean = 0,
running_var = 1, num_batches_tracked = 0 when track_running_stats)."""
import warnings

import tensorplay as _tp
import tensorplay.functional as F
from tensorplay.nn.modules import Module, Parameter

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]


class _InstanceNorm(Module):
    _spatial = 1          # spatial dims; an unbatched input has _spatial + 1 dims

    def __init__(self, num_features, eps=1e-05, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None, *, bias=True):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        kw = {} if dtype is None else {"dtype": dtype}
        if affine:
            self.weight = Parameter(_tp.ones(num_features, **kw))
            if bias:
                self.bias = Parameter(_tp.zeros(num_features, **kw))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", _tp.zeros(num_features, **kw))
            self.register_buffer("running_var", _tp.ones(num_features, **kw))
            self.register_buffer("num_batches_tracked", _tp.tensor(0, dtype=_tp.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self):
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            with _tp.no_grad():
                self.weight.fill_(1.0)
                if self.bias is not None:
                    self.bias.zero_()

    def _norm(self, input):
        return F.instance_norm(input, self.running_mean, self.running_var, self.weight,
                               self.bias, self.training or not self.track_running_stats,
                               self.momentum if self.momentum is not None else 0.0, self.eps)

    def forward(self, input):
        """input (N, C, *spatial) or unbatched (C, *spatial). ValueError for
        another rank, or (affine) a channel count other than num_features;
        without affine a mismatch only warns, as torch."""
        sp = self._spatial
        if input.dim() not in (sp + 1, sp + 2):
            raise ValueError(f"expected {sp + 1}D or {sp + 2}D input "
                             f"(got {input.dim()}D input)")
        fdim = input.dim() - (sp + 1)
        if input.shape[fdim] != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={fdim} to match "
                                 f"num_features ({self.num_features}), but got: "
                                 f"{input.shape[fdim]}.")
            warnings.warn(f"input's size at dim={fdim} does not match num_features. "
                          "You can silence this warning by not passing in num_features, "
                          "which is not used because affine=False")
        if input.dim() == sp + 1:
            return self._norm(input.unsqueeze(0)).squeeze(0)
        return self._norm(input)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    """torch.nn.InstanceNorm1d: (N, C, L) or (C, L)."""
    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    """torch.nn.InstanceNorm2d: (N, C, H, W) or (C, H, W)."""
    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    """torch.nn.InstanceNorm3d: (N, C, D, H, W) or (C, D, H, W)."""
    _spatial = 3
