"""tensorplay.compile: the entry point (function, bound method or nn.Module; decorator).

    cf = tp.compile(f)                       # or @tp.compile / @tp.compile(dynamic=True)
    cf(x, w)                                 # dispatch levels 1-3, compile on a miss
    cf.versions[0].guards, cf.stats()

Owned by the guards room; see docs/specialization.md."""
import functools
import inspect

from tensorplay import _C
from tensorplay.compiler._driver import Driver

__all__ = ["compile", "OptimizedModule"]


_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")


def compile(fn=None, *, backend="stax", dynamic=None, strict_native=False, fullgraph=True,
            options=None, name=None, mode=None, disable=False):
    """Compile `fn` (a function, a bound method or an nn.Module) with Stax.

    backend: a registered back end name ('stax' default, 'eager') or a
    callable backend(gm, example_inputs, **options) -> callable;
    dynamic: None (default) -- static sizes until the first recompile caused
    only by sizes, which makes those dimensions symbolic (automatic dynamic,
    config.automatic_dynamic_shapes); True -- every input dimension of size
    >= 2 symbolic from the first call (tensors keyed by rank and stride
    expressions, size reads symbolic, shape guards as relations); False --
    always static (one version per size);
    strict_native: raise tp.compiler.NativeCompileError instead of falling
    back to eager, and RecompileLimitError past the cache limits;
    fullgraph: accepted for PyTorch compatibility (tracing always captures
    the whole function); options: passed to the back end; name: the name
    used in logs (default: fn.__name__).

    torch.compile's other arguments, so its calls run unchanged:
    backend='inductor' (torch's default) is the native back end 'stax';
    mode: one of torch's mode names ('default', 'reduce-overhead',
    'max-autotune', ...; RuntimeError for another name, or with options).
    Stax has one code generator; the modes choose CUDA graphs for the
    compiled CUDA programs, as torch's do: 'reduce-overhead' and
    'max-autotune' replay every program whose steps are all kernels as one
    graph from its second call, 'max-autotune-no-cudagraphs' never does,
    and 'default' / 'lite' / None follow tp.compiler.config.cuda_graphs
    ("auto": a graph where timing shows it is faster);
    disable=True: return fn itself, uncompiled."""
    if mode is not None:
        if mode not in _MODES:
            raise RuntimeError(f"Unrecognized mode={mode}, should be one of: "
                               + ", ".join(_MODES))
        if options is not None:
            raise RuntimeError("Either mode or options can be specified, but both can't be "
                               "specified at the same time.")
    if backend == "inductor":
        backend = "stax"
    if fn is None:
        if disable:
            return lambda f: f
        return functools.partial(compile, backend=backend, dynamic=dynamic,
                                 strict_native=strict_native, fullgraph=fullgraph,
                                 options=options, name=name, mode=mode)
    if disable:
        return fn
    if not callable(fn):
        raise TypeError(f"tensorplay.compile expects a callable, got {type(fn).__name__}")
    if inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"tensorplay.compile: {getattr(fn, '__name__', fn)!r} is a generator or coroutine "
                        "function; tracing needs a function that returns its tensors")
    opt = getattr(fn, "__self__", None)
    if getattr(fn, "__name__", None) == "step" and backend == "stax" and not dynamic:
        from tensorplay.optim.optimizer import Optimizer
        if isinstance(opt, Optimizer) and type(opt)._fused_step is not Optimizer._fused_step:
            # tp.compile(opt.step): the optimizer's fused multi-tensor step
            # (tracing step() itself would read the step counts in Python:
            # a new version every step); docs/autograd.md
            return opt._fused_runner(strict_native)
    if _is_module(fn):
        return OptimizedModule(fn, _compile_function(
            fn, backend=backend, dynamic=dynamic, strict_native=strict_native,
            options=options, name=name, mode=mode))
    return _compile_function(fn, backend=backend, dynamic=dynamic,
                             strict_native=strict_native, options=options, name=name,
                             mode=mode)


def _is_module(fn):
    from tensorplay.nn.modules import Module
    return isinstance(fn, Module)


# torch's modes that use CUDA graphs, and the one that turns them off
_MODE_CUDA_GRAPHS = {"reduce-overhead": True, "max-autotune": True,
                     "max-autotune-no-cudagraphs": False}


def _compile_function(fn, *, backend="stax", dynamic=None, strict_native=False,
                      fullgraph=True, options=None, name=None, mode=None):
    """The CompiledFunction of fn (for a module: of its forward; the module's
    hooks are run around it by Module.__call__)."""
    driver = Driver(fn, backend, dynamic, strict_native, options, name)
    driver.cuda_graphs = _MODE_CUDA_GRAPHS.get(mode)
    cf = _C.CompiledFunction(driver)
    driver.bind(cf)
    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        try:
            setattr(cf, attr, getattr(fn, attr))
        except (AttributeError, TypeError):
            pass
    cf.__wrapped__ = fn
    return cf


def _optimized_module_type():
    from tensorplay.nn.modules import Module

    class OptimizedModule(Module):
        """What tp.compile(module) returns (torch's OptimizedModule): a
        Module holding the original as ``_orig_mod`` (so state_dict keys
        read ``_orig_mod.<name>``, as torch's do), whose forward is the
        compiled forward of the original. Attribute reads, writes and
        deletes it does not own go to the original (``cm.weight``,
        ``cm.generate(...)``, ``cm.training``); train()/eval() switch the
        original; the original's forward hooks and pre-hooks run around
        the compiled forward. The compiled function's own attributes
        (``versions``, ``stats()``, ``graph_module`` ...) are read through
        when the original has no such attribute."""

        _opt_mod_attributes = frozenset({"_orig_mod", "_compiled", "forward",
                                         "_super_module_initialized"})

        def __init__(self, mod, compiled):
            object.__setattr__(self, "_orig_mod", mod)
            object.__setattr__(self, "_super_module_initialized", False)
            Module.__init__(self)
            object.__setattr__(self, "_super_module_initialized", True)
            self.__dict__.pop("_orig_mod", None)
            self._modules["_orig_mod"] = mod
            object.__setattr__(self, "_compiled", compiled)

        @property
        def training(self):
            return self._orig_mod.training

        @training.setter
        def training(self, value):
            # Module.__init__'s default is not the original's mode
            if self.__dict__.get("_super_module_initialized"):
                self._orig_mod.training = value

        def forward(self, *args, **kwargs):
            return self._compiled(*args, **kwargs)

        def __call__(self, *args, **kwargs):
            d = self.__dict__
            mod = d["_modules"]["_orig_mod"]
            md = mod.__dict__
            if (d.get("_forward_hooks") or d.get("_forward_pre_hooks")
                    or md.get("_forward_hooks") or md.get("_forward_pre_hooks")):
                # the wrapper's hooks outside, the original's inside (torch)
                inner = functools.partial(mod._call_with_hooks, d["_compiled"])
                return self._call_with_hooks(lambda *a, **k: inner(a, k), args, kwargs)
            return d["_compiled"](*args, **kwargs)

        def __getattr__(self, name):
            d = self.__dict__
            if name == "_orig_mod":
                return d["_modules"]["_orig_mod"]
            mods = d.get("_modules")
            if mods is None or "_orig_mod" not in mods:
                raise AttributeError(name)
            try:
                return getattr(mods["_orig_mod"], name)
            except AttributeError:
                cf = d.get("_compiled")
                if cf is not None and not name.startswith("__"):
                    try:
                        return getattr(cf, name)
                    except AttributeError:
                        pass
                raise

        def __setattr__(self, name, value):
            if hasattr(type(self), name) or name in self._opt_mod_attributes:
                return Module.__setattr__(self, name, value)
            setattr(self._orig_mod, name, value)

        def __delattr__(self, name):
            if hasattr(type(self), name) or name in self._opt_mod_attributes:
                return Module.__delattr__(self, name)
            delattr(self._orig_mod, name)

        def __len__(self):
            mod = self._orig_mod
            if hasattr(type(mod), "__len__"):
                return len(mod)
            raise TypeError(f"{type(mod).__name__} does not support len()")

        def __dir__(self):
            own = self._orig_mod.__dir__()
            return own + [a for a in Module.__dir__(self) if a not in own]

        def __repr__(self):
            return "OptimizedModule(\n  (_orig_mod): " + \
                repr(self._orig_mod).replace("\n", "\n  ") + "\n)"

        def compile(self, *args, **kwargs):
            object.__setattr__(self, "_compiled",
                               _compile_function(self._orig_mod, *args, **kwargs))

    OptimizedModule.__module__ = "tensorplay._compile"
    OptimizedModule.__qualname__ = "OptimizedModule"
    return OptimizedModule


OptimizedModule = _optimized_module_type()
