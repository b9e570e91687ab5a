"""nn.Module and the layers, PyTorch-style."""
import collections
import math

import tensorplay as _tp
from tensorplay import _C
import tensorplay.functional as F
from tensorplay._ops import _legacy_reduction

__all__ = ["Parameter", "Module", "RemovableHandle", "Linear", "LayerNorm", "BatchNorm1d",
           "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
           "FeatureAlphaDropout", "Embedding", "ReLU", "ReLU6", "LeakyReLU", "ELU", "CELU",
           "SELU", "Hardtanh", "Threshold", "GELU", "SiLU", "Mish", "Hardswish",
           "Hardsigmoid", "Tanh", "Sigmoid",
           "Softmax", "LogSoftmax", "Identity", "Sequential", "ModuleList",
           "ModuleDict", "MSELoss", "CrossEntropyLoss"]


class _IncompatibleKeys(collections.namedtuple("IncompatibleKeys",
                                               ["missing_keys", "unexpected_keys"])):
    """load_state_dict's result; prints as torch's does when nothing is off."""
    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class RemovableHandle:
    """What register_*_hook returns: remove() takes the hook out (also as a
    context manager: removed on exit)."""
    _next_id = 0

    def __init__(self, hooks_dict, *extra_dicts):
        import weakref
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = RemovableHandle._next_id
        RemovableHandle._next_id += 1
        self.extra_dict_ref = tuple(weakref.ref(e) for e in extra_dicts)

    def remove(self):
        for r in (self.hooks_dict_ref,) + self.extra_dict_ref:
            dct = r()
            if dct is not None and self.id in dct:
                del dct[self.id]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class Parameter(_C.Tensor):
    """A Tensor that a Module registers as a parameter (requires_grad=True)."""

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = _tp.empty(0)
        base = _C.Tensor
        mk = getattr(base, "_make_subclass", None)
        if mk is not None:
            t = mk(cls, data, requires_grad)
        else:
            t = base.__new__(cls, data)
            t.requires_grad = requires_grad
        return t

    def __init__(self, data=None, requires_grad=True):
        pass

    def __repr__(self):
        return "Parameter containing:\n" + _C.Tensor.__repr__(self)

    def __reduce_ex__(self, proto):
        return (Parameter, (self.detach().clone(), self.requires_grad))


# set by the compile driver while it traces: attribute stores of traced
# values are logged there (replayed after every compiled call) and undone
# after the trace (tensorplay/compiler/_stores.py)
_store_log = None


def _holds_traced(v, depth=0):
    P = getattr(_C, "Proxy", None)
    if P is not None and isinstance(v, P):
        return True
    if depth < 4 and isinstance(v, (tuple, list)):
        return any(_holds_traced(x, depth + 1) for x in v)
    if depth < 4 and isinstance(v, dict):
        return any(_holds_traced(x, depth + 1) for x in v.values())
    return False


class Module:
    """Base class of every layer: registers parameters, buffers and
    submodules through attribute assignment."""

    def __init__(self, *args, **kwargs):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_buffers", collections.OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", collections.OrderedDict())
        object.__setattr__(self, "_forward_hooks", collections.OrderedDict())
        object.__setattr__(self, "_forward_hooks_with_kwargs", collections.OrderedDict())
        object.__setattr__(self, "_forward_hooks_always_called", collections.OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", collections.OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks_with_kwargs", collections.OrderedDict())

    # -- registration
    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            if isinstance(value, (Parameter, Module)):
                raise AttributeError("cannot assign parameters/modules before "
                                     "Module.__init__() call")
            object.__setattr__(self, name, value)
            return
        log = _store_log
        traced = log is not None and _holds_traced(value)
        if traced:
            log.record(self, name, value)
        params, bufs, mods = self._parameters, self._buffers, self._modules
        if isinstance(value, Parameter):
            self.__dict__.pop(name, None)
            bufs.pop(name, None)
            mods.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            self.__dict__.pop(name, None)
            params.pop(name, None)
            bufs.pop(name, None)
            mods[name] = value
        elif name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as "
                                f"parameter '{name}' (tensorplay.nn.Parameter "
                                f"or None expected)")
            params[name] = None
        elif name in bufs:
            if value is not None and not isinstance(value, _C.Tensor) and not traced:
                raise TypeError(f"cannot assign '{type(value).__name__}' as "
                                f"buffer '{name}' (Tensor or None expected)")
            bufs[name] = value
        elif name in mods:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as "
                                f"child module '{name}'")
            mods[name] = None
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for k in ("_parameters", "_buffers", "_modules"):
            sub = d.get(k)
            if sub is not None and name in sub:
                return sub[name]
        raise AttributeError(f"'{type(self).__name__}' object has no "
                             f"attribute '{name}'")

    def __delattr__(self, name):
        for k in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(k, {}):
                del self.__dict__[k][name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters)
                      | set(self._buffers) | set(self._modules))

    def register_parameter(self, name, param):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before "
                                 "Module.__init__() call")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to "
                            f"parameter '{name}' (tensorplay.nn.Parameter or "
                            f"None required)")
        self.__dict__.pop(name, None)
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before "
                                 "Module.__init__() call")
        if tensor is not None and not isinstance(tensor, _C.Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object "
                            f"to buffer '{name}' (Tensor or None required)")
        self.__dict__.pop(name, None)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._modules[name] = module

    register_module = add_module

    # -- traversal
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        if memo is None:
            memo = set()
        if self in memo and remove_duplicate:
            return
        memo.add(self)
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            p = prefix + ("." if prefix else "") + name
            yield from m.named_modules(memo, p, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and m not in seen:
                seen.add(m)
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, get, prefix, recurse, remove_duplicate=True):
        seen = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            for k, v in get(m).items():
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                seen.add(id(v))
                yield mp + ("." if mp else "") + k, v

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        yield from self._named_members(lambda m: m._parameters, prefix,
                                       recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        yield from self._named_members(lambda m: m._buffers, prefix, recurse,
                                       remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # -- state
    def state_dict(self, destination=None, prefix="", keep_vars=False):
        if destination is None:
            destination = collections.OrderedDict()
        for k, v in self._parameters.items():
            if v is not None:
                destination[prefix + k] = v if keep_vars else v.detach()
        for k, v in self._buffers.items():
            if v is not None and k not in self._non_persistent:
                destination[prefix + k] = v if keep_vars else v.detach()
        for k, m in self._modules.items():
            if m is not None:
                m.state_dict(destination, prefix + k + ".", keep_vars)
        return destination

    def load_state_dict(self, state_dict, strict=True, assign=False):
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        for k, v in state_dict.items():
            if k not in own:
                continue
            dst = own[k]
            if tuple(dst.shape) != tuple(v.shape):
                errors.append(f"size mismatch for {k}: copying a param with "
                              f"shape {tuple(v.shape)} from checkpoint, the "
                              f"shape in current model is {tuple(dst.shape)}.")
                continue
            with _tp.no_grad():
                dst.copy_(v)
        if strict:
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: "
                              + ", ".join(f'"{k}"' for k in missing) + ".")
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: "
                              + ", ".join(f'"{k}"' for k in unexpected) + ".")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for "
                               f"{type(self).__name__}:\n\t" + "\n\t".join(errors))
        return _IncompatibleKeys(missing, unexpected)

    # -- modes and conversion
    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            p.grad = None

    def _apply(self, fn):
        """fn applied to every parameter, gradient and buffer. Parameters
        keep their identity (``p.data`` is replaced, as torch's default), so
        an optimizer made before ``model.to(...)``/``.half()`` still holds
        the model's parameters."""
        with _tp.no_grad():
            for m in self.modules():
                for k, p in m._parameters.items():
                    if p is None:
                        continue
                    p.data = fn(p.detach())
                    if p.grad is not None:
                        g = fn(p.grad)
                        p.grad = None
                        p.grad = g
                for k, b in m._buffers.items():
                    if b is not None:
                        m._buffers[k] = fn(b)
        return self

    def to(self, *args, **kwargs):
        """Move and/or cast the parameters and buffers in place: ``to(device)``,
        ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)`` (its dtype and
        device), or keywords device=/dtype=. A dtype casts only floating
        tensors (TypeError for a non-floating dtype, as torch). Returns self.
        A CUDA device without CUDA raises RuntimeError (tensor.to's)."""
        dtype, device = kwargs.get("dtype"), kwargs.get("device")
        for a in args:
            if isinstance(a, _tp.dtype):
                dtype = a
            elif isinstance(a, _C.Tensor):
                dtype, device = a.dtype, a.device
            elif isinstance(a, int) and not isinstance(a, bool):
                device = f"cuda:{a}"
            elif a is not None:
                device = a
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError("nn.Module.to only accepts floating point or complex dtypes, but "
                            f"got desired dtype={dtype}")
        if dtype is None and device is None:
            return self

        def conv(t):
            if dtype is not None and t.is_floating_point() and t.dtype != dtype:
                t = t.to(dtype)
            if device is not None and t.device != _tp.device(device):
                t = t.to(device)
            return t
        return self._apply(conv)

    def cuda(self, device=None):
        """to('cuda') (or 'cuda:N' for an int device)."""
        if device is None:
            return self.to("cuda")
        return self.to(f"cuda:{device}" if isinstance(device, int) else device)

    def type(self, dst_type):
        """Cast every parameter and buffer to ``dst_type`` (a dtype), integer
        buffers too (torch's Module.type, unlike .to(dtype)). Returns self."""
        return self._apply(lambda t: t if t.dtype == dst_type else t.to(dst_type))

    def get_submodule(self, target):
        """The submodule at the dotted path ``target`` ('' is self).
        AttributeError naming the missing step, as torch."""
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(type(mod).__name__ + " has no attribute `" + item + "`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
        return mod

    def _owner_of(self, target):
        """(the submodule holding the dotted path ``target``, the last name),
        AttributeError when the submodule lacks that attribute."""
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if not hasattr(mod, name):
            raise AttributeError(type(mod).__name__ + " has no attribute `" + name + "`")
        return mod, name

    def get_parameter(self, target):
        """The Parameter at the dotted path ``target`` (AttributeError otherwise)."""
        mod, name = self._owner_of(target)
        p = getattr(mod, name)
        if not isinstance(p, Parameter):
            raise AttributeError("`" + name + "` is not an nn.Parameter")
        return p

    def get_buffer(self, target):
        """The buffer at the dotted path ``target`` (AttributeError otherwise)."""
        mod, name = self._owner_of(target)
        if name not in mod._buffers:
            raise AttributeError("`" + name + "` is not a buffer")
        return getattr(mod, name)

    def float(self):
        return self.to(_tp.float32)

    def double(self):
        return self.to(_tp.float64)

    def half(self):
        return self.to(_tp.float16)

    def bfloat16(self):
        """Cast the floating parameters and buffers to bfloat16. Returns self."""
        return self.to(_tp.bfloat16)

    def cpu(self):
        return self.to("cpu")

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # -- calling
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing '
                                  f'the required "forward" function')

    def __call__(self, *args, **kwargs):
        d = self.__dict__
        fwd = d.get("_compiled_call_impl") or self.forward
        if not d.get("_forward_hooks") and not d.get("_forward_pre_hooks") \
                and not d.get("_backward_hooks") and not d.get("_backward_pre_hooks"):
            return fwd(*args, **kwargs)
        return self._call_with_hooks(fwd, args, kwargs)

    def _call_with_hooks(self, fwd, args, kwargs):
        """torch's _call_impl: the pre-hooks (which may replace the
        arguments), forward, the forward hooks (which may replace the
        output); hooks registered always_call=True run even when forward
        raises."""
        d = self.__dict__
        pre_kw = d["_forward_pre_hooks_with_kwargs"]
        for hid, hook in list(d["_forward_pre_hooks"].items()):
            if hid in pre_kw:
                res = hook(self, args, kwargs)
                if res is not None:
                    if not (isinstance(res, tuple) and len(res) == 2):
                        raise RuntimeError(
                            "forward pre-hook must return None or a tuple of "
                            f"(new_args, new_kwargs), but got {res}.")
                    args, kwargs = res
            else:
                res = hook(self, args)
                if res is not None:
                    args = res if isinstance(res, tuple) else (res,)
        fw_kw = d["_forward_hooks_with_kwargs"]
        always = d["_forward_hooks_always_called"]
        bw = None
        if (d.get("_backward_hooks") or d.get("_backward_pre_hooks")) and _C.is_grad_enabled():
            from tensorplay.nn._backward_hooks import BackwardHook
            bw = BackwardHook(self, d.get("_backward_hooks") or {},
                              d.get("_backward_pre_hooks") or {})
            args = bw.setup_input_hook(args)
        try:
            result = fwd(*args, **kwargs)
        except BaseException:
            for hid, hook in list(d["_forward_hooks"].items()):
                if hid in always:
                    try:
                        if hid in fw_kw:
                            hook(self, args, kwargs, None)
                        else:
                            hook(self, args, None)
                    except Exception:  # noqa: BLE001 - the first error wins
                        pass
            raise
        for hid, hook in list(d["_forward_hooks"].items()):
            res = hook(self, args, kwargs, result) if hid in fw_kw \
                else hook(self, args, result)
            if res is not None:
                result = res
        if bw is not None:
            result = bw.setup_output_hook(result)
        return result

    def _hook_dicts(self):
        d = self.__dict__
        if "_forward_hooks" not in d:
            raise AttributeError("cannot register hooks before "
                                 "Module.__init__() call")
        return d

    def register_forward_pre_hook(self, hook, *, prepend=False,
                                  with_kwargs=False):
        """hook(module, args) -> None | new args (a tuple, or one value
        that becomes a 1-tuple); with_kwargs=True: hook(module, args,
        kwargs) -> None | (new_args, new_kwargs). Runs before forward on
        every call (also of a compiled module: outside the compiled
        code). Returns a RemovableHandle."""
        d = self._hook_dicts()
        h = RemovableHandle(d["_forward_pre_hooks"],
                            d["_forward_pre_hooks_with_kwargs"])
        d["_forward_pre_hooks"][h.id] = hook
        if with_kwargs:
            d["_forward_pre_hooks_with_kwargs"][h.id] = True
        if prepend:
            d["_forward_pre_hooks"].move_to_end(h.id, last=False)
        return h

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False,
                              always_call=False):
        """hook(module, args, output) -> None | new output; with_kwargs=True:
        hook(module, args, kwargs, output). Runs after forward on every
        call; always_call=True runs it also when forward raised. Returns a
        RemovableHandle."""
        d = self._hook_dicts()
        h = RemovableHandle(d["_forward_hooks"], d["_forward_hooks_with_kwargs"],
                            d["_forward_hooks_always_called"])
        d["_forward_hooks"][h.id] = hook
        if with_kwargs:
            d["_forward_hooks_with_kwargs"][h.id] = True
        if always_call:
            d["_forward_hooks_always_called"][h.id] = True
        if prepend:
            d["_forward_hooks"].move_to_end(h.id, last=False)
        return h

    def register_full_backward_hook(self, hook, prepend=False):
        """hook(module, grad_input, grad_output) -> None | new grad_input,
        called when the gradients w.r.t. the module's positional inputs
        are computed: grad_input has one entry per positional argument
        (None for a non-tensor or one not requiring grad), grad_output one
        per tensor output. Inputs and outputs pass through identity
        autograd Functions (torch's BackwardHook), so a compiled function
        calling the module with grad needed runs eagerly. Returns a
        RemovableHandle."""
        return self._add_backward_hook("_backward_hooks", hook, prepend)

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """hook(module, grad_output) -> None | new grad_output, called
        when the gradients w.r.t. the module's outputs are computed, before
        the module's own backward. Returns a RemovableHandle."""
        return self._add_backward_hook("_backward_pre_hooks", hook, prepend)

    def _add_backward_hook(self, key, hook, prepend):
        d = self._hook_dicts()
        if key not in d:
            d[key] = collections.OrderedDict()
        h = RemovableHandle(d[key])
        d[key][h.id] = hook
        if prepend:
            d[key].move_to_end(h.id, last=False)
        return h

    def compile(self, *args, **kwargs):
        """Compile this module's forward in place with tensorplay.compile
        (same arguments): later calls of the module (and of methods such
        as generate() that call it) run the compiled forward, the hooks
        around it. Returns None, like torch."""
        from tensorplay._compile import _compile_function
        object.__setattr__(self, "_compiled_call_impl",
                           _compile_function(self, *args, **kwargs))

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = []
        for k, m in self._modules.items():
            r = repr(m).replace("\n", "\n  ")
            lines.append(f"({k}): {r}")
        main = type(self).__name__ + "(" + self.extra_repr()
        if lines:
            main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, device=None,
                 dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        kw = {} if dtype is None else {"dtype": dtype}
        self.weight = Parameter(_tp.empty(out_features, in_features, **kw))
        if bias:
            self.bias = Parameter(_tp.empty(out_features, **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        """torch's default: weight kaiming_uniform_(a=sqrt(5)) (bound
        1/sqrt(in_features)), bias U(-1/sqrt(in_features), 1/sqrt(in_features))."""
        from tensorplay.nn import init
        if self.in_features == 0:
            init.zeros_(self.weight)
        else:
            init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1.0 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features="
                f"{self.out_features}, bias={self.bias is not None}")


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-05, elementwise_affine=True,
                 bias=True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        kw = {} if dtype is None else {"dtype": dtype}
        if elementwise_affine:
            self.weight = Parameter(_tp.ones(*self.normalized_shape, **kw))
            if bias:
                self.bias = Parameter(_tp.zeros(*self.normalized_shape, **kw))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self):
        """torch's default: weight ones, bias zeros."""
        from tensorplay.nn import init
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight,
                            self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class BatchNorm1d(Module):
    def __init__(self, num_features, eps=1e-05, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(_tp.ones(num_features))
            self.bias = Parameter(_tp.zeros(num_features))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", _tp.zeros(num_features))
            self.register_buffer("running_var", _tp.ones(num_features))
            self.register_buffer("num_batches_tracked",
                                 _tp.tensor(0, dtype=_tp.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def forward(self, input):
        if input.dim() not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.dim()}D "
                             f"input)")
        return self._bn(input)

    def _bn(self, input):
        use_batch = self.training or self.running_mean is None
        momentum = self.momentum
        if self.training and self.track_running_stats \
                and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked.item())
        return F.batch_norm(input,
                            self.running_mean if not self.training or self.track_running_stats else None,
                            self.running_var if not self.training or self.track_running_stats else None,
                            self.weight, self.bias, use_batch,
                            momentum if momentum is not None else 0.0, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"
                f", affine={self.affine}, track_running_stats="
                f"{self.track_running_stats}")


class Dropout(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, "
                             f"but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    def forward(self, input):
        return F.dropout1d(input, self.p, self.training, self.inplace)


class Dropout2d(Dropout):
    def forward(self, input):
        return F.dropout2d(input, self.p, self.training, self.inplace)


class Dropout3d(Dropout):
    def forward(self, input):
        return F.dropout3d(input, self.p, self.training, self.inplace)


class AlphaDropout(Dropout):
    def forward(self, input):
        return F.alpha_dropout(input, self.p, self.training)


class FeatureAlphaDropout(Dropout):
    def forward(self, input):
        return F.feature_alpha_dropout(input, self.p, self.training)


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None,
                 max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                 sparse=False, _weight=None, _freeze=False, device=None,
                 dtype=None):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        if padding_idx is not None and padding_idx < 0:
            padding_idx += num_embeddings
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        w = _weight if _weight is not None else _tp.randn(num_embeddings,
                                                           embedding_dim)
        if padding_idx is not None and _weight is None:
            w[padding_idx] = 0.0
        self.weight = Parameter(w, requires_grad=not _freeze)

    def reset_parameters(self):
        """torch's default: weight N(0, 1), the padding_idx row zero."""
        from tensorplay.nn import init
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with _tp.no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq:
            s += ", scale_grad_by_freq=True"
        if self.sparse:
            s += ", sparse=True"
        return s


def _act(name, fn, args=()):
    def __init__(self, *a, **kw):
        Module.__init__(self)
        for i, (k, d) in enumerate(args):
            setattr(self, k, a[i] if i < len(a) else kw.get(k, d))

    def forward(self, input):
        return fn(input, **{k: getattr(self, k) for k, _ in args
                            if k != "inplace" or fn in _INPLACE_OK})

    def extra_repr(self):
        # torch prints inplace only when it is set
        return ", ".join(f"{k}={getattr(self, k)!r}" for k, _ in args
                         if k != "inplace" or getattr(self, k))
    return type(name, (Module,), {"__init__": __init__, "forward": forward,
                                  "extra_repr": extra_repr,
                                  "__module__": __name__})


_INPLACE_OK = set()
# modules with inplace= write their input as torch's do (the F function
# gets inplace= and returns the input itself)
ReLU = _act("ReLU", F.relu, [("inplace", False)])
ReLU6 = _act("ReLU6", F.relu6, [("inplace", False)])
LeakyReLU = _act("LeakyReLU", F.leaky_relu, [("negative_slope", 0.01), ("inplace", False)])
ELU = _act("ELU", F.elu, [("alpha", 1.0), ("inplace", False)])
CELU = _act("CELU", F.celu, [("alpha", 1.0), ("inplace", False)])
SELU = _act("SELU", F.selu, [("inplace", False)])
Hardtanh = _act("Hardtanh", F.hardtanh, [("min_val", -1.0), ("max_val", 1.0), ("inplace", False)])
Threshold = _act("Threshold", F.threshold, [("threshold", None), ("value", None), ("inplace", False)])
GELU = _act("GELU", F.gelu, [("approximate", "none")])
SiLU = _act("SiLU", F.silu, [("inplace", False)])
Mish = _act("Mish", F.mish, [("inplace", False)])
Hardswish = _act("Hardswish", F.hardswish, [("inplace", False)])
Hardsigmoid = _act("Hardsigmoid", F.hardsigmoid, [("inplace", False)])
_INPLACE_OK.update([F.relu, F.relu6, F.leaky_relu, F.elu, F.celu, F.selu, F.hardtanh,
                    F.threshold, F.silu, F.mish, F.hardswish, F.hardsigmoid])
Tanh = _act("Tanh", F.tanh)
Sigmoid = _act("Sigmoid", F.sigmoid)


class Softmax(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, input):
        return F.log_softmax(input, self.dim)


class MSELoss(Module):
    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        self.reduction = _legacy_reduction(size_average, reduce, reduction)

    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class CrossEntropyLoss(Module):
    def __init__(self, weight=None, size_average=None, ignore_index=-100,
                 reduce=None, reduction="mean", label_smoothing=0.0):
        super().__init__()
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index
        self.reduction = _legacy_reduction(size_average, reduce, reduction)
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, weight=self.weight,
                               ignore_index=self.ignore_index,
                               reduction=self.reduction,
                               label_smoothing=self.label_smoothing)


class Sequential(Module):
    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], collections.OrderedDict):
            for k, m in args[0].items():
                self.add_module(k, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return Sequential(collections.OrderedDict(
                list(self._modules.items())[idx]))
        mods = list(self._modules.values())
        return mods[idx]

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input


class ModuleList(Module):
    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return ModuleList(mods[idx])
        return mods[idx]

    def __setitem__(self, idx, module):
        key = list(self._modules.keys())[idx]
        self.add_module(key, module)

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(mods):
            self.add_module(str(i), m)


class ModuleDict(Module):
    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def update(self, modules):
        items = modules.items() if hasattr(modules, "items") else modules
        for k, m in items:
            self.add_module(k, m)


class Flatten(Module):
    """input.flatten(start_dim, end_dim) (torch.nn.Flatten)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        self.reduction = _legacy_reduction(size_average, reduce, reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        return F.l1_loss(input, target, reduction=self.reduction)


class NLLLoss(_Loss):
    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, weight=self.weight,
                          ignore_index=self.ignore_index, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean",
                 pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  pos_weight=self.pos_weight,
                                                  reduction=self.reduction)


class _ConvNd(Module):
    _nd = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__()
        nd = self._nd
        _check_conv_groups(in_channels, out_channels, groups)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 f"{{'valid', 'same'}}")
            if padding == "same" and any(s != 1 for s in _ntuple(stride, nd)):
                raise ValueError("padding='same' is not supported for strided convolutions")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"padding_mode must be one of ['zeros', 'reflect', "
                             f"'replicate', 'circular'], but got padding_mode="
                             f"'{padding_mode}'")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _ntuple(kernel_size, nd)
        self.stride = _ntuple(stride, nd)
        self.padding = padding if isinstance(padding, str) else _ntuple(padding, nd)
        self.dilation = _ntuple(dilation, nd)
        self.groups = groups
        self.padding_mode = padding_mode
        self._make_parameters((out_channels, in_channels // groups), bias, dtype)

    def _make_parameters(self, weight_channels, bias, dtype):
        """weight (*weight_channels, *kernel_size), bias (out_channels,) or
        None, then torch's initialization."""
        kw = {} if dtype is None else {"dtype": dtype}
        self.weight = Parameter(_tp.empty(*weight_channels, *self.kernel_size, **kw))
        if bias:
            self.bias = Parameter(_tp.empty(self.out_channels, **kw))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        """torch's default: weight kaiming_uniform_(a=sqrt(5)), bias
        U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with the weight's fan_in =
        weight.shape[1] * prod(kernel): in/groups * prod(kernel) for a
        convolution, out/groups * prod(kernel) for a transposed one."""
        from tensorplay.nn import init
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = int(self.weight.shape[1]) * math.prod(self.kernel_size)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def _conv(self, input, fn):
        if self.padding_mode != "zeros" and not isinstance(self.padding, str):
            widths = []
            for p in reversed(self.padding):
                widths += [p, p]
            return fn(F.pad(input, widths, mode=self.padding_mode), self.weight, self.bias,
                      self.stride, 0, self.dilation, self.groups)
        return fn(input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                  self.groups)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * self._nd:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if getattr(self, "output_padding", (0,) * self._nd) != (0,) * self._nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


def _check_conv_groups(in_channels, out_channels, groups):
    """torch's _ConvNd checks of groups against the channel counts."""
    if groups <= 0:
        raise ValueError("groups must be a positive integer")
    if in_channels % groups != 0:
        raise ValueError("in_channels must be divisible by groups")
    if out_channels % groups != 0:
        raise ValueError("out_channels must be divisible by groups")


def _ntuple(v, n):
    if isinstance(v, (list, tuple)):
        return tuple(v) if len(v) == n else tuple(v) * n
    return (v,) * n


class Conv1d(_ConvNd):
    """torch.nn.Conv1d: (N, C_in, L) -> (N, C_out, L_out)."""
    _nd = 1

    def forward(self, input):
        return self._conv(input, F.conv1d)


class Conv2d(_ConvNd):
    """torch.nn.Conv2d: (N, C_in, H, W) -> (N, C_out, H_out, W_out)."""
    _nd = 2

    def forward(self, input):
        return self._conv(input, F.conv2d)


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding,
                            self.dilation, self.ceil_mode, self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding="
                f"{self.padding}, dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(MaxPool2d):
    def forward(self, input):
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding,
                            self.dilation, self.ceil_mode, self.return_indices)


class MaxUnpool2d(Module):
    """torch.nn.MaxUnpool2d: forward(input, indices, output_size=None)."""

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding

    def forward(self, input, indices, output_size=None):
        return F.max_unpool2d(input, indices, self.kernel_size, self.stride, self.padding,
                              output_size)

    def extra_repr(self):
        n = 1 if isinstance(self, MaxUnpool1d) else 2
        return (f"kernel_size={_ntuple(self.kernel_size, n)}, "
                f"stride={_ntuple(self.stride, n)}, padding={_ntuple(self.padding, n)}")


class MaxUnpool1d(MaxUnpool2d):
    def forward(self, input, indices, output_size=None):
        return F.max_unpool1d(input, indices, self.kernel_size, self.stride, self.padding,
                              output_size)


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding,
                            self.ceil_mode, self.count_include_pad, self.divisor_override)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(AvgPool2d):
    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding,
                            self.ceil_mode, self.count_include_pad)

    def extra_repr(self):
        return (f"kernel_size={_ntuple(self.kernel_size, 1)}, stride={_ntuple(self.stride, 1)}, "
                f"padding={_ntuple(self.padding, 1)}")


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(AdaptiveAvgPool2d):
    def forward(self, input):
        return F.adaptive_avg_pool1d(input, self.output_size)


class BatchNorm2d(BatchNorm1d):
    """torch.nn.BatchNorm2d: (N, C, H, W); training mode normalizes with the
    batch statistics and updates running_mean / running_var (unbiased)."""
    _expect = 4

    def forward(self, input):
        if input.dim() != 4:
            raise ValueError(f"expected 4D input (got {input.dim()}D input)")
        return self._bn(input)


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention, same parameters and state_dict keys:
    in_proj_weight (3E, E) -- or q_proj_weight (E, E), k_proj_weight (E,
    kdim), v_proj_weight (E, vdim) when kdim/vdim differ from embed_dim --
    in_proj_bias (3E), out_proj (Linear E -> E), bias_k/bias_v (1, 1, E)
    with add_bias_kv; add_zero_attn; batch_first both ways; attn_mask (L, S)
    or (N*H, L, S), bool or float; key_padding_mask (N, S); need_weights
    (averaged over heads unless average_attn_weights=False); is_causal."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads} instead")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        kw = {} if dtype is None else {"dtype": dtype}
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(_tp.empty(embed_dim, embed_dim, **kw))
            self.k_proj_weight = Parameter(_tp.empty(embed_dim, self.kdim, **kw))
            self.v_proj_weight = Parameter(_tp.empty(embed_dim, self.vdim, **kw))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(_tp.empty(3 * embed_dim, embed_dim, **kw))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(_tp.zeros(3 * embed_dim, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if add_bias_kv:
            self.bias_k = Parameter(_tp.empty(1, 1, embed_dim, **kw))
            self.bias_v = Parameter(_tp.empty(1, 1, embed_dim, **kw))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        from tensorplay.nn import init
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        """query (L, N, E) (or (N, L, E) with batch_first, or unbatched (L,
        E)), key (S, N, kdim), value (S, N, vdim); returns (output like
        query, weights (N, L, S') or (N, H, L, S') or None)."""
        batched = query.dim() == 3
        if query.shape[-1] != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, "
                                 f"but got {query.shape[-1]}")
        if self.batch_first and batched:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        out, w = F.multi_head_attention_forward(
            query, key, value, self.num_heads, self.in_proj_weight, self.in_proj_bias,
            self.out_proj.weight, self.out_proj.bias, key_padding_mask=key_padding_mask,
            need_weights=need_weights, attn_mask=attn_mask,
            average_attn_weights=average_attn_weights,
            is_causal=is_causal and attn_mask is None, dropout_p=self.dropout,
            training=self.training, bias_k=self.bias_k, bias_v=self.bias_v,
            add_zero_attn=self.add_zero_attn, q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight, v_proj_weight=self.v_proj_weight)
        if self.batch_first and batched:
            out = out.transpose(0, 1)
        return out, w


__all__ += ["Flatten", "Unflatten", "L1Loss", "NLLLoss", "BCEWithLogitsLoss", "Conv1d",
            "Conv2d", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d",
            "AdaptiveAvgPool2d", "BatchNorm2d", "MultiheadAttention", "MaxUnpool1d",
            "MaxUnpool2d"]


# ---- the activations, losses and norms of python/tensorplay/_torch_names.py

class _Pointwise(Module):
    _fn = None

    def forward(self, input):
        return getattr(F, self._fn)(input)


class LogSigmoid(_Pointwise):
    _fn = "logsigmoid"


class Softsign(_Pointwise):
    _fn = "softsign"


class Tanhshrink(_Pointwise):
    _fn = "tanhshrink"


class Softmin(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmin(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softplus(Module):
    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class Softshrink(Module):
    def __init__(self, lambd=0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return F.softshrink(input, self.lambd)

    def extra_repr(self):
        return str(self.lambd)


class Hardshrink(Softshrink):
    def forward(self, input):
        return F.hardshrink(input, self.lambd)


class GLU(Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.glu(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class BCELoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, weight=self.weight,
                                      reduction=self.reduction)


class HuberLoss(_Loss):
    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class SmoothL1Loss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction="mean", beta=1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class KLDivLoss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class GroupNorm(Module):
    def __init__(self, num_groups, num_channels, eps=1e-05, affine=True, device=None,
                 dtype=None):
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels = num_groups, num_channels
        self.eps, self.affine = eps, affine
        kw = {} if dtype is None else {"dtype": dtype}
        if affine:
            self.weight = Parameter(_tp.ones(num_channels, **kw))
            self.bias = Parameter(_tp.zeros(num_channels, **kw))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        kw = {} if dtype is None else {"dtype": dtype}
        if elementwise_affine:
            self.weight = Parameter(_tp.ones(*self.normalized_shape, **kw))
        else:
            self.register_parameter("weight", None)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class PairwiseDistance(Module):
    def __init__(self, p=2.0, eps=1e-06, keepdim=False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


__all__ += ["LogSigmoid", "Softsign", "Tanhshrink", "Softmin", "Softplus", "Softshrink",
            "Hardshrink", "GLU", "BCELoss", "HuberLoss", "SmoothL1Loss", "KLDivLoss",
            "GroupNorm", "RMSNorm", "PairwiseDistance"]


# ------------------------------------------------------------ session 6 (users helper)

class SoftMarginLoss(_Loss):
    def forward(self, input, target):
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class MarginRankingLoss(_Loss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.margin_ranking_loss(input1, input2, target, margin=self.margin,
                                     reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    def __init__(self, margin=1.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input, target):
        return F.hinge_embedding_loss(input, target, margin=self.margin,
                                      reduction=self.reduction)


class CosineEmbeddingLoss(_Loss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.cosine_embedding_loss(input1, input2, target, margin=self.margin,
                                       reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    def __init__(self, *, full=False, eps=1e-06, reduction="mean"):
        super().__init__(None, None, reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps,
                                   reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    def __init__(self, log_input=True, full=False, size_average=None, eps=1e-08, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return F.poisson_nll_loss(log_input, target, log_input=self.log_input, full=self.full,
                                  eps=self.eps, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.multilabel_soft_margin_loss(input, target, weight=self.weight,
                                             reduction=self.reduction)


class TripletMarginLoss(_Loss):
    def __init__(self, margin=1.0, p=2.0, eps=1e-06, swap=False, size_average=None,
                 reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_loss(anchor, positive, negative, margin=self.margin, p=self.p,
                                     eps=self.eps, swap=self.swap, reduction=self.reduction)


class MultiMarginLoss(_Loss):
    def __init__(self, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError("only p == 1 and p == 2 supported")
        self.p, self.margin = p, margin
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.multi_margin_loss(input, target, p=self.p, margin=self.margin,
                                   weight=self.weight, reduction=self.reduction)


class PReLU(Module):
    """max(0, x) + a * min(0, x), a learnable: one (num_parameters=1) or
    one per channel (dim 1), initialised to ``init``."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.init = init
        self.weight = Parameter(_tp.full((num_parameters,), float(init), dtype=dtype,
                                         device=device))

    def reset_parameters(self):
        with _tp.no_grad():
            self.weight.fill_(self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class PixelShuffle(Module):
    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self):
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self):
        return f"downscale_factor={self.downscale_factor}"


class ChannelShuffle(Module):
    def __init__(self, groups):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self):
        return f"groups={self.groups}"


class Bilinear(Module):
    """y = x1^T A x2 + b: weight (out_features, in1_features, in2_features),
    bias (out_features,), both U(-1/sqrt(in1), 1/sqrt(in1)) as torch."""

    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None,
                 dtype=None):
        super().__init__()
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        self.weight = Parameter(_tp.empty((out_features, in1_features, in2_features),
                                          dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(_tp.empty(out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1 / math.sqrt(self.weight.shape[1])
        from tensorplay.nn import init
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class CosineSimilarity(Module):
    def __init__(self, dim=1, eps=1e-08):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class Softmax2d(Module):
    """softmax over the channels of (N, C, H, W) or (C, H, W)."""

    def forward(self, input):
        if input.dim() not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.dim()}D "
                             f"instead")
        return F.softmax(input, -3)


__all__ += ["SoftMarginLoss", "MarginRankingLoss", "HingeEmbeddingLoss", "CosineEmbeddingLoss",
            "GaussianNLLLoss", "PoissonNLLLoss", "MultiLabelSoftMarginLoss",
            "TripletMarginLoss", "MultiMarginLoss", "PReLU", "PixelShuffle", "PixelUnshuffle",
            "ChannelShuffle", "Bilinear", "CosineSimilarity", "Softmax2d"]


class RReLU(Module):
    """Randomized leaky ReLU (F.rrelu): slopes from U(lower, upper) when
    training, their mean in eval."""

    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self):
        return f"lower={self.lower}, upper={self.upper}{', inplace=True' if self.inplace else ''}"


__all__ += ["RReLU"]
