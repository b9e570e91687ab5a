"""tensorplay.autograd.function: user-defined differentiable functions,
PyTorch's ``torch.autograd.Function``.

    class Exp(tp.autograd.Function):
        @staticmethod
        def forward(ctx, x):              # or forward(x) + setup_context(ctx, inputs, output)
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, gy):            # one gradient per forward output
            (y,) = ctx.saved_tensors
            return gy * y                 # one gradient (or None) per forward input

    y = Exp.apply(x)

forward runs with grad mode off; outputs get a grad_fn named
``<ClassName>Backward`` when grad mode is on and a tensor input requires
grad. Gradients of outputs the graph does not reach arrive as zeros
(``ctx.set_materialize_grads(False)``: None). Saved tensors are version
checked like the built-in ops' (modifying one in place before backward
raises torch's error) and freed after backward unless retain_graph.

Errors follow torch: backward returning too few gradients ("function
XBackward returned an incorrect number of gradients (expected 2, got 1)"),
a gradient for a non-tensor input, a gradient of the wrong shape,
``saved_tensors`` read after they were freed.

Inside ``tp.compile``: when a gradient is needed (grad mode on and a tensor
input requiring grad) the function cannot be traced into the compiled
program (the compiled backward would differentiate forward's ops instead
of calling the user's backward), so the compiled function runs eagerly
(a RuntimeWarning; strict_native raises NativeCompileError). Without a
gradient, forward is traced like any other code."""
import threading

from tensorplay import _C

__all__ = ["Function", "FunctionCtx", "once_differentiable"]

# while tp.compile traces: the custom Functions whose backward the trace
# would need (the driver makes the compiled function run eagerly)
_trace_log = threading.local()


def _is_tensor(x):
    return isinstance(x, _C.Tensor) or (hasattr(_C, "Proxy") and isinstance(x, _C.Proxy))


class FunctionCtx:
    """The ``ctx`` of forward/setup_context/backward: save_for_backward,
    saved_tensors, needs_input_grad, mark_non_differentiable, mark_dirty,
    set_materialize_grads; any other attribute is the user's."""

    def __init__(self):
        self._to_save = ()
        self._saved = None
        self._saved_freed = False
        self._non_diff = set()
        self._dirty = set()
        self.materialize_grads = True
        self.needs_input_grad = ()

    def save_for_backward(self, *tensors):
        """Keep tensors (or None) for backward; read them as ctx.saved_tensors."""
        for t in tensors:
            if t is not None and not _is_tensor(t):
                raise TypeError("save_for_backward can only save variables, but argument "
                                f"{tensors.index(t)} is of type {type(t).__name__}")
        self._to_save = tensors

    @property
    def saved_tensors(self):
        if self._saved_freed:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Saved intermediate values of the "
                "graph are freed when you call .backward() or autograd.grad(). Specify "
                "retain_graph=True if you need to backward through the graph a second time or "
                "if you need to access saved tensors after calling backward.")
        if self._saved is None:
            return tuple(self._to_save)
        return self._saved

    saved_variables = saved_tensors

    def mark_non_differentiable(self, *tensors):
        """These outputs get no grad_fn; backward receives zeros for them."""
        self._non_diff.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors):
        """These inputs were modified in place by forward (returned as outputs)."""
        self._dirty.update(id(t) for t in tensors)

    def set_materialize_grads(self, value):
        """False: backward receives None (not zeros) for outputs without a gradient."""
        self.materialize_grads = bool(value)


class _FunctionMeta(type):
    def __init__(cls, name, bases, attrs):
        super().__init__(name, bases, attrs)
        cls._backward_name = name + "Backward"


class Function(metaclass=_FunctionMeta):
    """Base class of user-defined differentiable functions: subclass with
    static ``forward`` and ``backward`` and call ``apply`` (see the module
    docstring). Instances are not used: ``Function()`` then ``f(x)`` raises
    as in torch."""

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            "Legacy autograd function with non-static forward method is deprecated. Please use "
            "new-style autograd function with static forward method. (Example: "
            "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward "
                                  "mode AD.")

    vjp = backward

    @classmethod
    def _uses_setup_context(cls):
        return cls.setup_context is not Function.setup_context

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run forward on args (grad mode off) and attach cls.backward as
        the outputs' grad_fn. Returns forward's result (a tensor, or a
        tuple with tensors and other values)."""
        from tensorplay._tensor import no_grad, is_grad_enabled
        ctx = FunctionCtx()
        grad_on = is_grad_enabled()
        # torch reads requires_grad only (grad mode decides the grad_fn)
        ctx.needs_input_grad = tuple(bool(_is_tensor(a) and a.requires_grad) for a in args)
        tracing = _C.is_tracing() and any(
            hasattr(_C, "Proxy") and isinstance(a, _C.Proxy) for a in args)
        if tracing and grad_on and any(ctx.needs_input_grad):
            log = getattr(_trace_log, "log", None)
            if log is not None:
                log.append(cls.__name__)
        with no_grad():
            if cls._uses_setup_context():
                out = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, out)
            else:
                out = cls.forward(ctx, *args, **kwargs)
        if not grad_on or not any(ctx.needs_input_grad) or tracing:
            return out
        single = not isinstance(out, tuple)
        outs = list((out,) if single else out)
        ins = [a for a, n in zip(args, ctx.needs_input_grad) if n]
        in_pos = [i for i, n in enumerate(ctx.needs_input_grad) if n]
        arg_ids = {id(a): i for i, a in enumerate(args) if _is_tensor(a)}
        for k, o in enumerate(outs):
            if isinstance(o, _C.Tensor) and id(o) in arg_ids and id(o) not in ctx._dirty:
                # an input returned as is: torch gives a new tensor (a view)
                with no_grad():
                    outs[k] = o.view_as(o)
        # integer/bool outputs and the ones marked non-differentiable get no grad_fn
        diff = [k for k, o in enumerate(outs)
                if isinstance(o, _C.Tensor) and id(o) not in ctx._non_diff
                and o.is_floating_point()]
        if not diff:
            return out if single else tuple(outs)
        meta = [(o.shape, o.dtype) if isinstance(o, _C.Tensor) else None for o in outs]
        in_meta = [(a.shape, a.dtype) for a in ins]
        name = cls._backward_name
        saved = tuple(ctx._to_save)
        save_mask = tuple(t is not None for t in saved)
        ctx._to_save = ()
        nargs = len(args)

        def backward(saved_now, *grads):
            import tensorplay
            full = []
            got = dict(zip(diff, grads))
            for k, m in enumerate(meta):
                g = got.get(k)
                if g is None and m is not None and ctx.materialize_grads:
                    g = tensorplay.zeros(tuple(m[0]), dtype=m[1])
                full.append(g)
            it = iter(saved_now)
            ctx._saved = tuple(next(it) if keep else None for keep in save_mask)
            try:
                r = cls.backward(ctx, *full)
            finally:
                ctx._saved = None
            r = r if isinstance(r, tuple) else (r,)
            if len(r) < nargs or any(x is not None for x in r[nargs:]):
                raise RuntimeError(f"function {name} returned an incorrect number of gradients "
                                   f"(expected {nargs}, got {len(r)})")
            res = []
            for i, g in enumerate(r[:nargs]):
                if g is not None and not _is_tensor(args[i]):
                    raise RuntimeError(
                        f"function {name} returned a gradient different than None at position "
                        f"{i + 1}, but the corresponding forward input was not a Variable")
            for j, i in enumerate(in_pos):
                g = r[i]
                if g is None:
                    res.append(None)
                    continue
                if not _is_tensor(g):
                    raise TypeError(f"function {name} returned a gradient of type "
                                    f"{type(g).__name__} at position {i + 1}, expected a "
                                    "Tensor or None")
                shape, dt = in_meta[j]
                if tuple(g.shape) != tuple(shape):
                    try:
                        g = _sum_to_shape(g, tuple(shape))
                    except RuntimeError:
                        raise RuntimeError(
                            f"Function {name} returned an invalid gradient at index {i} - got "
                            f"{list(g.shape)} but expected shape compatible with "
                            f"{list(shape)}") from None
                if g.dtype != dt:
                    g = g.to(dt)
                res.append(g)
            return tuple(res)

        _C._autograd_attach([outs[k] for k in diff], ins, backward, name,
                            tuple(t for t in saved if t is not None))
        return outs[0] if single else tuple(outs)


def _sum_to_shape(g, shape):
    """g summed over broadcast dims down to shape (torch's validate_outputs
    accepts a gradient expandable to the input's shape)."""
    gs = tuple(g.shape)
    if len(gs) < len(shape):
        raise RuntimeError("not expandable")
    lead = len(gs) - len(shape)
    for a, b in zip(gs[lead:], shape):
        if a != b and b != 1:
            raise RuntimeError("not expandable")
    if lead:
        g = g.sum(dim=tuple(range(lead)))
    dims = tuple(d for d, (a, b) in enumerate(zip(g.shape, shape)) if a != b)
    if dims:
        g = g.sum(dim=dims, keepdim=True)
    return g


def once_differentiable(fn):
    """Decorator for backward: its computation is not differentiated again
    (run with grad mode off; a double backward through it sees constants)."""
    import functools

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        from tensorplay._tensor import no_grad
        with no_grad():
            return fn(ctx, *args)
    return wrapper
