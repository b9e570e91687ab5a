"""tensorplay.compile: the entry point (function, bound method or nn.Module; decorator).

    cf = tp.compile(f)                       # or @tp.compile / @tp.compile(dynamic=True)
    cf(x, w)                                 # dispatch levels 1-3, compile on a miss
    cf.versions[0].guards, cf.stats()

Owned by the guards room; see docs/specialization.md."""
import functools
import inspect

from tensorplay import _C
from tensorplay.compiler._driver import Driver

__all__ = ["compile"]


def compile(fn=None, *, backend="stax", dynamic=False, strict_native=False, fullgraph=True,
            options=None, name=None):
    """Compile `fn` (a function, a bound method or an nn.Module) with Stax.

    backend: a registered back end name ('stax' default, 'eager') or a
    callable backend(gm, example_inputs, **options) -> callable;
    dynamic: key tensors by rank and stride expressions instead of sizes;
    strict_native: raise tp.compiler.NativeCompileError instead of falling
    back to eager, and RecompileLimitError past the cache limits;
    fullgraph: accepted for PyTorch compatibility (tracing always captures
    the whole function); options: passed to the back end; name: the name
    used in logs (default: fn.__name__)."""
    if fn is None:
        return functools.partial(compile, backend=backend, dynamic=dynamic,
                                 strict_native=strict_native, fullgraph=fullgraph,
                                 options=options, name=name)
    if not callable(fn):
        raise TypeError(f"tensorplay.compile expects a callable, got {type(fn).__name__}")
    if inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"tensorplay.compile: {getattr(fn, '__name__', fn)!r} is a generator or coroutine "
                        "function; tracing needs a function that returns its tensors")
    driver = Driver(fn, backend, dynamic, strict_native, options, name)
    cf = _C.CompiledFunction(driver)
    driver.bind(cf)
    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        try:
            setattr(cf, attr, getattr(fn, attr))
        except (AttributeError, TypeError):
            pass
    cf.__wrapped__ = fn
    return cf
