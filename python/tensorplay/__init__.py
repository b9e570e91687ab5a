"""TensorPlay: a PyTorch-style tensor library on NumPy, with Stax, a JIT
compiler (LLVM ORC JIT on CPU, NVRTC on GPU), behind ``tensorplay.compile``.

Each submodule below belongs to one room (see docs/architecture.md); this
file only gathers their public names."""
from tensorplay import _C  # noqa: F401
from tensorplay._tensor import *  # noqa: F401,F403
from tensorplay._ops import *  # noqa: F401,F403
from tensorplay import random, functional, ops, nn, graph, compiler  # noqa: F401
from tensorplay._compile import *  # noqa: F401,F403

__version__ = "0.1.0"
