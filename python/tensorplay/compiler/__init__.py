"""tensorplay.compiler: config, set_logs, register_backend, list_backends,
NativeCompileError, reset() (forget every compiled version, like
torch._dynamo.reset()), the persistent compile cache (cache_info,
save_cache_artifacts, load_cache_artifacts; docs/cache.md), and the
inspection types of tp.compile (Version, Guard).

See docs/specialization.md (keys, guards, dispatch levels, lifting) and
docs/config.md (TENSORPLAY_LOGS, TENSORPLAY_NUM_THREADS, config fields)."""
from tensorplay import _C
from ._config import config
from ._logs import set_logs
from ._backends import register_backend, list_backends, lookup_backend
from ._guards import Guard
from ._driver import Version, RecompileLimitError, reset
from ._cache import cache_info, save_cache_artifacts, load_cache_artifacts

NativeCompileError = _C.NativeCompileError

__all__ = ["config", "set_logs", "register_backend", "list_backends", "lookup_backend",
           "NativeCompileError", "RecompileLimitError", "Version", "Guard", "reset",
           "cache_info", "save_cache_artifacts", "load_cache_artifacts"]
