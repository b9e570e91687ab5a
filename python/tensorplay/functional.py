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
