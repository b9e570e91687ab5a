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
    warn_on_fallback: warn when a back end fails and a version runs eagerly;
    cache: the persistent compile cache is on (TENSORPLAY_CACHE, default on;
    ``TENSORPLAY_CACHE=0`` turns it off); cache_dir: its directory
    (TENSORPLAY_CACHE_DIR, default ``~/.cache/tensorplay``), made absolute
    (``~`` expanded, a relative path resolved against the working directory)
    when it is read -- at import for the variable, at assignment for the
    field -- so a later chdir does not move the cache; cache_size_mb: the
    size cap of that directory, least-recently-used entries evicted beyond
    it (TENSORPLAY_CACHE_SIZE_MB, default 1024). See docs/cache.md."""

    def __init__(self):
        self.cache_size_limit = 8
        self.accumulated_cache_size_limit = 256
        self.num_threads = _env_int("TENSORPLAY_NUM_THREADS", 0)
        self.warn_on_fallback = True
        self.cache = os.environ.get("TENSORPLAY_CACHE", "1").strip().lower() not in ("0", "false", "off", "no")
        self.cache_dir = os.environ.get("TENSORPLAY_CACHE_DIR") or os.path.join("~", ".cache", "tensorplay")
        self.cache_size_mb = _env_int("TENSORPLAY_CACHE_SIZE_MB", 1024)

    @property
    def cache_dir(self):
        return self._cache_dir

    @cache_dir.setter
    def cache_dir(self, value):
        if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
            raise TypeError(f"config.cache_dir: a non-empty path, got {value!r}")
        value = os.fspath(value)
        self._cache_dir = os.path.abspath(os.path.expanduser(value))
        self._cache_dir_given = value

    def __repr__(self):
        items = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        items["cache_dir"] = self.cache_dir
        return "config(" + ", ".join(f"{k}={v!r}" for k, v in items.items()) + ")"


config = _Config()
