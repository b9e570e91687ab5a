"""tensorplay.autograd.graph: the Node type of grad_fn objects."""
from tensorplay import _C

Node = _C._AutogradNode


def _register_hook(self, fn):
    """Register fn(grad_inputs, grad_outputs) -> None or new grad_inputs,
    called after this node computed its inputs' gradients."""
    from tensorplay.autograd import RemovableHandle
    lst = self._post_hooks
    lst.append(fn)
    return RemovableHandle(lst, fn)


__all__ = ["Node"]

Node.register_hook = _register_hook
