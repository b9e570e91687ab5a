"""tensorplay.compiler: config, set_logs, register_backend, list_backends,
NativeCompileError, reset() (forget every compiled version, like
torch._dynamo.reset()), and the inspection types of tp.compile (Version, Guard).

See docs/specialization.md (keys, guards, dispatch levels, lifting) and
docs/config.md (TENSORPLAY_LOGS, TENSORPLAY_NUM_THREADS, config fields)."""
from tensorplay import _C
from ._config import config
from ._logs import set_logs
from ._backends import register_backend, list_backends, lookup_backend
from ._guards import Guard
from ._driver import Version, RecompileLimitError, reset

NativeCompileError = _C.NativeCompileError

__all__ = ["config", "set_logs", "register_backend", "list_backends", "lookup_backend",
           "NativeCompileError", "RecompileLimitError", "Version", "Guard", "reset"]
