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
from ._driver import Version, RecompileLimitError, ConstraintViolationError, reset
from ._cache import cache_info, save_cache_artifacts, load_cache_artifacts


def _dims(t, dim, what):
    if not isinstance(t, _C.Tensor):
        raise TypeError(f"{what}: expected a Tensor, got {type(t).__name__}")
    ds = [dim] if isinstance(dim, int) else list(dim)
    out = set()
    for d in ds:
        if not isinstance(d, int) or isinstance(d, bool):
            raise TypeError(f"{what}: dim must be an int or a list of ints, got {d!r}")
        if not -t.ndim <= d < max(t.ndim, 1):
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-t.ndim}, {t.ndim - 1}], but got {d})")
        out.add(d % t.ndim if t.ndim else 0)
    return out


def mark_dynamic(t, dim):
    """Trace dimension(s) `dim` of tensor `t` symbolically when it is an
    input of a compiled function (torch._dynamo.mark_dynamic): the version
    compiled for it serves every size >= 2 of those dims, size reads of them
    are symbolic and guards on them are relations. Returns None; raises
    TypeError for a non-tensor, IndexError for a dim out of range."""
    ds = _dims(t, dim, "mark_dynamic")
    t._tp_dynamic_dims = frozenset(set(getattr(t, "_tp_dynamic_dims", ()) or ()) | ds)
    st = set(getattr(t, "_tp_static_dims", ()) or ()) - ds
    t._tp_static_dims = frozenset(st)


def mark_static(t, dim):
    """Never trace dimension(s) `dim` of `t` symbolically, under dynamic=True
    and automatic dynamic too (torch._dynamo.mark_static): its size is
    guarded exactly."""
    ds = _dims(t, dim, "mark_static")
    t._tp_static_dims = frozenset(set(getattr(t, "_tp_static_dims", ()) or ()) | ds)
    dy = set(getattr(t, "_tp_dynamic_dims", ()) or ()) - ds
    t._tp_dynamic_dims = frozenset(dy)

NativeCompileError = _C.NativeCompileError

__all__ = ["config", "set_logs", "register_backend", "list_backends", "lookup_backend",
           "NativeCompileError", "RecompileLimitError", "ConstraintViolationError", "Version", "Guard", "reset",
           "cache_info", "save_cache_artifacts", "load_cache_artifacts", "mark_dynamic",
           "mark_static"]
