"""Back-end registry (seed section 1.2): backend(gm, example_inputs, **options) -> callable."""
from tensorplay import _C

__all__ = ["register_backend", "list_backends", "lookup_backend"]

_registry = {}


def register_backend(name=None, fn=None):
    """Register a back end; usable as ``@register_backend("name")``,
    ``@register_backend`` (the function's name) or ``register_backend("name", fn)``."""
    if callable(name) and fn is None:
        fn, name = name, name.__name__
    if fn is not None:
        _check(name, fn)
        _registry[name] = fn
        return fn

    def deco(f):
        _check(name or getattr(f, "__name__", None), f)
        _registry[name or f.__name__] = f
        return f
    return deco


def _check(name, fn):
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_backend: the name must be a non-empty str, got {name!r}")
    if not callable(fn):
        raise TypeError(f"register_backend({name!r}): a back end must be callable "
                        f"backend(gm, example_inputs, **options), got {type(fn).__name__}")


def list_backends():
    return sorted(_registry)


def lookup_backend(backend):
    if callable(backend):
        return backend
    try:
        return _registry[backend]
    except KeyError:
        raise ValueError(f"unknown backend {backend!r}; registered: {', '.join(list_backends())}") from None


@register_backend("eager")
def eager(gm, example_inputs, **options):
    """Runs the captured GraphModule as is."""
    return gm


@register_backend("stax")
def stax(gm, example_inputs, **options):
    """The Stax back end: tensorplay._C.stax_backend (lower room), through
    the persistent compile cache (docs/cache.md)."""
    from . import _cache
    _cache.sync()
    return _C.stax_backend(gm, example_inputs, **options)
