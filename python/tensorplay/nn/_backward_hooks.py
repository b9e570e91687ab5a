"""Module.register_full_backward_hook / register_full_backward_pre_hook:
torch's BackwardHook. The module's tensor inputs and outputs pass through
identity autograd Functions; the outputs' node sees grad_output (and runs
the pre-hooks, which may replace it), the inputs' node sees grad_input and
runs the hooks (which may replace it)."""
from tensorplay import _C
from tensorplay.autograd.function import Function


def _is_t(x):
    return isinstance(x, _C.Tensor) or (hasattr(_C, "Proxy") and isinstance(x, _C.Proxy))


class _Identity(Function):
    @staticmethod
    def forward(ctx, on_grads, *tensors):
        ctx.on_grads = on_grads
        return tensors

    @staticmethod
    def backward(ctx, *grads):
        return (None,) + tuple(ctx.on_grads(grads))


class BackwardHook:
    def __init__(self, module, hooks, pre_hooks):
        self.module = module
        self.hooks = list(hooks.values())
        self.pre_hooks = list(pre_hooks.values())
        self.n_args = 0
        self.in_pos = None          # positions of the inputs wired to the node
        self.grad_output = None

    def _check(self, res, old, what):
        res = tuple(res) if isinstance(res, (tuple, list)) else (res,)
        if len(res) != len(old):
            raise RuntimeError(f"Backward hook returned an invalid number of grad_{what} "
                               f"(expected {len(old)}, got {len(res)})")
        return res

    def setup_input_hook(self, args):
        self.n_args = len(args)
        pos = [i for i, a in enumerate(args) if _is_t(a) and a.requires_grad]
        if not pos:
            return args
        self.in_pos = pos

        def on_grads(grads):
            gin = [None] * self.n_args
            for i, g in zip(pos, grads):
                gin[i] = g
            gin = tuple(gin)
            for h in self.hooks:
                res = h(self.module, gin, self.grad_output)
                if res is not None:
                    gin = self._check(res, gin, "input")
            self.grad_output = None
            return [gin[i] for i in pos]
        outs = _Identity.apply(on_grads, *[args[i] for i in pos])
        new = list(args)
        for i, o in zip(pos, outs):
            new[i] = o
        return tuple(new)

    def setup_output_hook(self, result):
        single = _is_t(result)
        if not single and not isinstance(result, (tuple, list)):
            return result
        items = [result] if single else list(result)
        pos = [i for i, o in enumerate(items) if _is_t(o) and o.requires_grad]
        if not pos:
            return result

        def on_grads(grads):
            gout = tuple(grads)
            for h in self.pre_hooks:
                res = h(self.module, gout)
                if res is not None:
                    gout = self._check(res, gout, "output")
            self.grad_output = gout
            if self.in_pos is None:
                # no input requires grad: the hooks see grad_input of Nones now
                for h in self.hooks:
                    h(self.module, (None,) * self.n_args, gout)
            return gout
        outs = _Identity.apply(on_grads, *[items[i] for i in pos])
        for i, o in zip(pos, outs):
            items[i] = o
        if single:
            return items[0]
        return type(result)(items) if isinstance(result, tuple) and not hasattr(result, "_fields") \
            else (type(result)(*items) if hasattr(result, "_fields") else items)
