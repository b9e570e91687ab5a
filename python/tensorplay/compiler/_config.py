"""tp.compiler.config: the knobs of the compile driver (docs/config.md)."""
import difflib
import os
import warnings

__all__ = ["config"]


def _env_int(name, default):
    """An integer >= 0 from the environment; anything else warns once (naming
    the variable) and gives the default."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        v = None
    if v is None or v < 0:
        warnings.warn(f"{name}={raw!r} is not an integer >= 0; using the default {default}",
                      RuntimeWarning, stacklevel=3)
        return default
    return v


def _int_at_least_0(name, v):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"tp.compiler.config.{name} must be an int, got {type(v).__name__} ({v!r})")
    if v < 0:
        raise ValueError(f"tp.compiler.config.{name} must be >= 0, got {v}")
    return v


def _number_at_least_0(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"tp.compiler.config.{name} must be a number, got {type(v).__name__} ({v!r})")
    if not v >= 0:
        raise ValueError(f"tp.compiler.config.{name} must be >= 0, got {v}")
    return v


def _cuda_graphs(name, v):
    """True / False / "auto" (anything else raises naming the setting); the
    compiled-program runtime reads it on every call of a CUDA program."""
    if not (isinstance(v, bool) or v == "auto"):
        kind = ValueError if isinstance(v, str) else TypeError
        raise kind(f'tp.compiler.config.{name} must be True, False or "auto", '
                   f"got {type(v).__name__} ({v!r})")
    from tensorplay import _C
    _C._cuda_graphs_mode(v)
    return v


_CUDA_GRAPHS_ENV = {"auto": "auto", "1": True, "true": True, "on": True, "yes": True,
                    "0": False, "false": False, "off": False, "no": False}


def _env_cuda_graphs():
    """TENSORPLAY_CUDA_GRAPHS: auto (default), 1/true/on/yes or 0/false/off/no;
    anything else warns once, naming the variable, and gives "auto"."""
    raw = os.environ.get("TENSORPLAY_CUDA_GRAPHS")
    if raw is None or raw.strip() == "":
        return "auto"
    v = _CUDA_GRAPHS_ENV.get(raw.strip().lower())
    if v is None:
        warnings.warn(f"TENSORPLAY_CUDA_GRAPHS={raw!r} is not one of auto, 1/true/on, 0/false/off; "
                      "using the default 'auto'", RuntimeWarning, stacklevel=3)
        return "auto"
    return v


def _bool(name, v):
    if not isinstance(v, bool):
        raise TypeError(f"tp.compiler.config.{name} must be a bool, got {type(v).__name__} ({v!r})")
    return v


# field -> validator (the only settable names: a typo raises)
_FIELDS = {
    "cache_size_limit": _int_at_least_0,
    "accumulated_cache_size_limit": _int_at_least_0,
    "num_threads": _int_at_least_0,
    "warn_on_fallback": _bool,
    "automatic_dynamic_shapes": _bool,
    "cache": _bool,
    "cache_size_mb": _number_at_least_0,
    "cache_dir": None,          # a property: its setter checks the value
    "lazy_samples": _bool,
    "cuda_graphs": _cuda_graphs,
}


class _Config:
    """Plain attributes; read at every miss, so changes apply at once.
    Setting an unknown name (a typo: cache_size_limt) raises AttributeError;
    a value of the wrong type raises TypeError, a negative count ValueError.

    cache_size_limit: specialization versions kept per compiled function;
    accumulated_cache_size_limit: compilations of one code object, over every
    compiled function wrapping it;
    num_threads: threads of the compiled-program runtime (TENSORPLAY_NUM_THREADS;
    0 = the number of cores), read by the lower room;
    warn_on_fallback: warn when a back end fails and a version runs eagerly;
    automatic_dynamic_shapes: with ``tp.compile(f)`` (dynamic=None, the
    default), the first recompile caused only by sizes makes those input
    dimensions symbolic (torch's default; docs/specialization.md);
    cache: the persistent compile cache is on (TENSORPLAY_CACHE, default on;
    ``TENSORPLAY_CACHE=0`` turns it off); cache_dir: its directory
    (TENSORPLAY_CACHE_DIR, default ``~/.cache/tensorplay``), made absolute
    (``~`` expanded, a relative path resolved against the working directory)
    when it is read -- at import for the variable, at assignment for the
    field -- so a later chdir does not move the cache; cache_size_mb: the
    size cap of that directory, least-recently-used entries evicted beyond
    it (TENSORPLAY_CACHE_SIZE_MB, default 1024). See docs/cache.md.
    lazy_samples: tracing computes a node's sample value only where the
    traced code asks for it (a data gate, printing, a write, an op that
    reads values); the rest gets eager's metadata alone, so a first call
    costs compile time, not data time (TENSORPLAY_LAZY_SAMPLES, default on;
    the back ends "stax" and "eager" only: a user back end is handed every
    sample).
    cuda_graphs: compiled CUDA programs replay their kernel launches as one
    CUDA graph (torch's "reduce-overhead"): True -- from the second call of
    every program whose steps are all kernels; False -- never; "auto" (the
    default) -- such a program times a few calls each way and keeps the
    faster (TENSORPLAY_CUDA_GRAPHS: auto, 1/true/on,
    0/false/off). Read on every call, so a change applies at once; a
    program's own ``cuda_graphs`` attribute (None: this setting) overrides
    it; ``program.cuda_graph`` says what happened (docs/gpu.md)."""

    def __init__(self):
        self.cache_size_limit = 8
        self.accumulated_cache_size_limit = 256
        self.num_threads = _env_int("TENSORPLAY_NUM_THREADS", 0)
        self.warn_on_fallback = True
        self.automatic_dynamic_shapes = True
        self.cache = os.environ.get("TENSORPLAY_CACHE", "1").strip().lower() not in ("0", "false", "off", "no")
        self.cache_dir = os.environ.get("TENSORPLAY_CACHE_DIR") or os.path.join("~", ".cache", "tensorplay")
        self.cache_size_mb = _env_int("TENSORPLAY_CACHE_SIZE_MB", 1024)
        self.lazy_samples = os.environ.get("TENSORPLAY_LAZY_SAMPLES", "1").strip().lower() not in (
            "0", "false", "off", "no")
        self.cuda_graphs = _env_cuda_graphs()

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

    def __setattr__(self, name, value):
        if name.startswith("_") or (name in _FIELDS and _FIELDS[name] is None):
            object.__setattr__(self, name, value)
            return
        check = _FIELDS.get(name)
        if check is None:
            near = difflib.get_close_matches(name, _FIELDS, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise AttributeError(f"tp.compiler.config has no setting {name!r}{hint} "
                                 f"(settings: {', '.join(_FIELDS)})")
        object.__setattr__(self, name, check(name, value))

    def __delattr__(self, name):
        raise AttributeError(f"tp.compiler.config settings cannot be deleted ({name!r})")

    def __repr__(self):
        items = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        items["cache_dir"] = self.cache_dir
        return "config(" + ", ".join(f"{k}={v!r}" for k, v in items.items()) + ")"


config = _Config()
