"""tensorplay.functional (also tensorplay.nn.functional): relu, gelu, softmax,
layer_norm, ... and every other op function of the op table.

The objects are created in C from csrc/ops/ops.def; ``tp.relu is
tensorplay.functional.relu`` and ``relu.__module__ == "tensorplay.functional"``
(graphs print ``tensorplay.functional.relu``)."""
from tensorplay import _C
from tensorplay import _ops  # noqa: F401  (registers the eager implementations)

_F = _C._op_functions()
globals().update(_F)
__all__ = sorted(_F)
del _F


def threshold(input, threshold, value, inplace=False):
    """y = value where input <= threshold, else input (torch.nn.functional.threshold:
    a NaN input stays NaN).

    input: a tensor of any shape and dtype; threshold, value: Python numbers.
    Returns a tensor of input's shape and dtype; with inplace=True the result
    is written into input, which is returned."""
    out = _F_where(input <= threshold, value, input)
    if out.dtype != input.dtype:
        out = out.to(input.dtype)
    if inplace:
        return input.copy_(out)
    return out


def threshold_(input, threshold, value):
    """In-place threshold: threshold(input, threshold, value, inplace=True)."""
    return globals()["threshold"](input, threshold, value, inplace=True)


_F_where = where  # noqa: F821  (installed from the op table above)
__all__ = sorted(__all__ + ["threshold", "threshold_"])


from tensorplay._composites import *  # noqa: E402,F401,F403
from tensorplay._composites import __all__ as _comp_all  # noqa: E402
from tensorplay._composites import _install as _install_trace_decompositions  # noqa: E402

_install_trace_decompositions()

from tensorplay._resample import *  # noqa: E402,F401,F403
from tensorplay._resample import __all__ as _resample_all  # noqa: E402

__all__ = sorted(__all__ + list(_comp_all) + list(_resample_all))
