"""tensorplay.autograd: reverse-mode differentiation, PyTorch's semantics.

The engine is C (csrc/autograd/): every op run with grad mode on and an
operand that requires grad records a ``grad_fn`` Node whose derivative
formula is the op table's derivative column (csrc/ops/ops.def, STAX_OP_DERIV).

``backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False)``
accumulates into the leaves' ``.grad``; ``grad(outputs, inputs, ...)``
returns the gradients instead. Errors follow torch: a non-scalar output
without a gradient ("grad can be implicitly created only for scalar
outputs"), a second backward through freed saved tensors ("Trying to
backward through the graph a second time ..."), a saved tensor modified in
place (the version-counter message), an unused input without
``allow_unused=True``."""
import weakref

from tensorplay import _C
from tensorplay.autograd import _helpers
from tensorplay.autograd import graph  # noqa: F401
from tensorplay.autograd import function  # noqa: F401
from tensorplay.autograd.function import Function, FunctionCtx, once_differentiable  # noqa: F401
from tensorplay._tensor import no_grad, enable_grad, set_grad_enabled, inference_mode  # noqa: F401

__all__ = ["backward", "grad", "graph", "function", "Function", "FunctionCtx", "no_grad", "enable_grad", "set_grad_enabled",
           "inference_mode"]

_C._autograd_set_helpers(_helpers.helpers())


def _seq(x):
    if isinstance(x, _C.Tensor):
        return (x,)
    return tuple(x)


def _grads(tensors, grad_tensors):
    if grad_tensors is None:
        return (None,) * len(tensors)
    g = _seq(grad_tensors) if not isinstance(grad_tensors, _C.Tensor) else (grad_tensors,)
    if len(g) != len(tensors):
        raise RuntimeError(f"grad_tensors has {len(g)} elements, expected {len(tensors)}")
    return g


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
             grad_variables=None, inputs=None):
    """Accumulate d(tensors)/d(leaf) * grad_tensors into every leaf's .grad.

    tensors: Tensor or sequence; grad_tensors: matching gradients (None for a
    one-element tensor: ones). retain_graph defaults to create_graph.
    Raises RuntimeError as torch does (see the module docstring)."""
    tensors = _seq(tensors)
    if grad_tensors is None:
        grad_tensors = grad_variables
    if retain_graph is None:
        retain_graph = create_graph
    if inputs is not None:
        # accumulate into the given tensors' .grad only (leaves or not)
        inputs = _seq(inputs)
        if len(inputs) == 0:
            raise RuntimeError("'inputs' argument to backward() cannot be empty.")
        gs = _C._autograd_grad(tensors, inputs, _grads(tensors, grad_tensors),
                               bool(retain_graph), bool(create_graph), True)
        for x, g in zip(inputs, gs):
            if g is None:
                continue
            if not create_graph:
                g = g.detach()
            if x.grad is None:
                x.grad = g if create_graph else g.clone()
            else:
                x.grad = x.grad + g
        return
    _C._autograd_backward(tensors, _grads(tensors, grad_tensors), bool(retain_graph),
                          bool(create_graph))


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False,
         materialize_grads=False):
    """Gradients of outputs w.r.t. inputs: a tuple, one per input (None for an
    unused input when allow_unused=True; zeros with materialize_grads)."""
    if is_grads_batched:
        raise NotImplementedError("tensorplay: is_grads_batched is not supported")
    outputs = _seq(outputs)
    single = isinstance(inputs, _C.Tensor)
    inputs = _seq(inputs)
    if allow_unused is None:
        allow_unused = materialize_grads
    if retain_graph is None:
        retain_graph = create_graph
    res = _C._autograd_grad(outputs, inputs, _grads(outputs, grad_outputs),
                            bool(retain_graph), bool(create_graph), bool(allow_unused))
    if materialize_grads:
        import tensorplay
        res = tuple(tensorplay.zeros_like(x) if g is None else g for g, x in zip(res, inputs))
    return res


class RemovableHandle:
    """Returned by register_hook: ``remove()`` unregisters the hook."""

    def __init__(self, lst, entry):
        self._lst = weakref.ref(lst) if not isinstance(lst, list) else lst
        self._entry = entry

    def remove(self):
        lst = self._lst
        for i, e in enumerate(lst):
            if e is self._entry:
                del lst[i]
                break

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.remove()


def _tensor_backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Compute the gradient of this tensor w.r.t. the graph leaves (see
    tensorplay.autograd.backward). gradient: required unless the tensor
    has one element."""
    backward(self, gradient, retain_graph, create_graph, inputs=inputs)


def _register_hook(self, hook):
    """Register hook(grad) -> Tensor or None, called with this tensor's
    gradient every time it is computed; returns a handle with remove()."""
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if self.grad_fn is None:
        lst = _C._autograd_tensor_hooks(self)
        entry = hook
    else:
        lst = self.grad_fn._pre_hooks
        entry = (self._output_nr, hook, False)
    lst.append(entry)
    return RemovableHandle(lst, entry)


def _retain_grad(self):
    """Populate .grad of this non-leaf tensor during backward."""
    if not self.requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    if self.grad_fn is None or _C._autograd_retains_grad(self):
        return
    self.grad_fn._pre_hooks.append((self._output_nr, weakref.ref(self), True))
    _C._autograd_set_retains_grad(self)


_C._autograd_install_tensor_methods({
    "backward": _tensor_backward,
    "register_hook": _register_hook,
    "retain_grad": _retain_grad,
    "retains_grad": property(lambda self: _C._autograd_retains_grad(self),
                             doc="True when retain_grad() was called on this non-leaf"),
})
