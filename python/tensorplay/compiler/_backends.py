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
        _registry[name] = fn
        return fn

    def deco(f):
        _registry[name or f.__name__] = f
        return f
    return deco


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
    """The Stax back end: tensorplay._C.stax_backend (lower room)."""
    return _C.stax_backend(gm, example_inputs, **options)
