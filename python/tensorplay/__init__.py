"""TensorPlay: a PyTorch-style tensor library on NumPy, with Stax, a JIT
compiler (LLVM ORC JIT on CPU, NVRTC on GPU), behind ``tensorplay.compile``.

This file only gathers the public names of the submodules (see
docs/architecture.md for how the package and the C extension are laid out)."""
from tensorplay import _C  # noqa: F401
from tensorplay._tensor import *  # noqa: F401,F403
from tensorplay._ops import *  # noqa: F401,F403
from tensorplay._ops import _out_copy  # noqa: F401  (out= of the op functions)
from tensorplay import random, functional, ops, nn, graph, compiler, autograd, optim, cuda  # noqa: F401
from tensorplay._compile import *  # noqa: F401,F403
from tensorplay._types import *  # noqa: F401,F403
from tensorplay import serialization, testing, utils  # noqa: F401,E402
from tensorplay.serialization import save, load  # noqa: F401,E402
import sys as _sys
from tensorplay import _tensor as _tensor_mod
from tensorplay import _ops as _ops_mod

# what the C core calls back into, handed over once (C never imports us)
_C._register("tensorplay", _sys.modules[__name__])
_C._register("tensorplay.functional", functional)
_C._register("tensorplay.ops", ops)
_C._register("tensorplay._tensor._rebuild_tensor", _tensor_mod._rebuild_tensor)
_C._register("tensorplay.serialization._rebuild_on_device", serialization._rebuild_on_device)
_C._register("tensorplay.cuda._dispatch", cuda._dispatch)
_C._register("tensorplay.cuda._device_op", cuda._device_op)
_C._register("tensorplay._ops._bf16_dispatch", _ops_mod._bf16_dispatch)
# torch's aliases and small composites (tp.dot, tp.divide, F.logsigmoid, ...)
from tensorplay import _torch_names as _torch_names_mod  # noqa: E402
_torch_names_mod.install(_sys.modules[__name__], functional)
# the remaining losses, prelu, pixel/channel shuffle, bilinear, asinh/acosh/atanh
from tensorplay import _torch_names_nn as _torch_names_nn_mod  # noqa: E402
_torch_names_nn_mod.install(_sys.modules[__name__], functional)
# torch's special functions, scans, order statistics, searches, Tensor.unfold
from tensorplay import _special_ops as _special_ops_mod  # noqa: E402
_special_ops_mod.install()
_ops_mod._finish_return_types()
# tp.inf/pi, set_float32_matmul_precision, tp.backends, meshgrid, tensordot, kron, cross,
# isin, tp.special, nn.utils.rnn.pad_sequence, utils.checkpoint, torch.nn's module paths
from tensorplay import _torch_api_extra as _api_extra_mod  # noqa: E402
_api_extra_mod.install(_sys.modules[__name__])   # torch's repr for every return_types namedtuple
# mixed precision: tp.autocast, tp.amp.GradScaler (composites wrapped last)
from tensorplay import amp  # noqa: E402
from tensorplay.amp import autocast, is_autocast_enabled, get_autocast_dtype  # noqa: E402,F401
amp._install_composites()
amp._install_aliases()
del _sys, _tensor_mod, _ops_mod, _torch_names_mod, _torch_names_nn_mod, _special_ops_mod, _api_extra_mod

__version__ = "0.1.0"
