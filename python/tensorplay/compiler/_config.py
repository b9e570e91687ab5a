"""tp.compiler.config: the knobs of the compile driver (docs/config.md)."""
import os

__all__ = ["config"]


def _env_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


class _Config:
    """Plain attributes; read at every miss, so changes apply at once.

    cache_size_limit: specialization versions kept per compiled function;
    accumulated_cache_size_limit: compilations of one code object, over every
    compiled function wrapping it;
    num_threads: threads of the compiled-program runtime (TENSORPLAY_NUM_THREADS;
    0 = the number of cores), read by the lower room;
    warn_on_fallback: warn when a back end fails and a version runs eagerly."""

    def __init__(self):
        self.cache_size_limit = 8
        self.accumulated_cache_size_limit = 256
        self.num_threads = _env_int("TENSORPLAY_NUM_THREADS", 0)
        self.warn_on_fallback = True

    def __repr__(self):
        return "config(" + ", ".join(f"{k}={v!r}" for k, v in vars(self).items()) + ")"


config = _Config()
