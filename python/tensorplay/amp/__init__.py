"""tensorplay.amp: automatic mixed precision, PyTorch's ``torch.autocast``.

    with tp.autocast(device_type="cpu", dtype=tp.bfloat16):
        y = model(x)            # matmul/linear/conv in bfloat16, losses in float32

Inside an enabled region, ops on tensors of the region's device run with
their floating operands cast as torch's autocast op lists say:

* lower precision (``dtype``): matmul, mm, bmm, linear, addmm, baddbmm,
  addbmm, conv1d/2d/3d, conv_transpose1d/2d/3d, scaled_dot_product_attention,
  prelu, einsum (CUDA also addmv, addr, mv);
* float32: the losses (nll_loss, cross_entropy, mse_loss, l1_loss,
  smooth_l1_loss, huber_loss, kl_div, binary_cross_entropy(_with_logits)),
  prod, trace; on CUDA also exp, log, pow, softplus, layer_norm,
  group_norm, logsumexp, cosine_similarity, ... and softmax/log_softmax/
  sum/cumsum/cumprod/prod/norm run with ``dtype=float32``;
* widest dtype of the operands: cat, stack, index_copy (CUDA also
  addcdiv, addcmul, atan2, scatter_add, dot, cross, tensordot).

Only float32 (and float16/bfloat16) operands are cast: float64 and integer
tensors are left alone, as in torch. The casts are recorded by autograd,
so gradients reach float32 parameters in float32. ``device_type`` is
'cpu' or 'cuda' (default dtypes bfloat16 and float16); a CPU dtype other
than bfloat16/float16 warns and disables the region, as torch.

Compiled functions (tp.compile) called inside an enabled region run
eagerly (a RuntimeWarning once per function; strict_native raises
NativeCompileError): their programs were compiled without the casts."""
import functools
import threading
import warnings

from tensorplay import _C

__all__ = ["autocast", "is_autocast_available", "GradScaler"]

_state = threading.local()
_active_regions = [0]           # enabled regions, all threads: the C hook is on while > 0
_lock = threading.Lock()

LOWER_CPU = frozenset((
    "matmul", "mm", "bmm", "linear", "addmm", "baddbmm", "addbmm", "conv1d", "conv2d", "conv3d",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "scaled_dot_product_attention",
    "prelu", "einsum"))
LOWER_CUDA = LOWER_CPU | frozenset(("addmv", "addr", "mv", "chain_matmul"))
FP32_CPU = frozenset((
    "nll_loss", "cross_entropy", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "prod", "trace",
    "cosine_embedding_loss", "hinge_embedding_loss", "poisson_nll_loss", "margin_ranking_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "multilabel_margin_loss",
    "cdist", "quantile", "nanquantile"))
FP32_CUDA = FP32_CPU | frozenset((
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm",
    "group_norm", "cosine_similarity", "logsumexp", "dist", "pdist", "renorm"))
FP32_OPT_DTYPE_CUDA = frozenset(("softmax", "log_softmax", "cumsum", "cumprod", "sum", "prod",
                                 "norm"))
PROMOTE_CPU = frozenset(("cat", "stack", "index_copy"))
PROMOTE_CUDA = PROMOTE_CPU | frozenset(("addcdiv", "addcmul", "atan2", "scatter_add", "dot",
                                        "cross", "tensordot", "bilinear"))


def _regions():
    r = getattr(_state, "regions", None)
    if r is None:
        r = _state.regions = []
    return r


def _current(device):
    """The innermost region of this thread for device: (enabled, dtype) or None."""
    for dev, enabled, dtype in reversed(_regions()):
        if dev == device:
            return dtype if enabled else None
    return None


def is_autocast_available(device_type):
    return device_type in ("cpu", "cuda")


def _device_of(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, _C.Tensor):
            return "cuda" if a.is_cuda else "cpu"
        if isinstance(a, (list, tuple)):
            for e in a:
                if isinstance(e, _C.Tensor):
                    return "cuda" if e.is_cuda else "cpu"
    return None


def _eligible(t):
    return isinstance(t, _C.Tensor) and t.dtype in (_C.float32, _C.float16, _C.bfloat16)


def _cast(x, dtype):
    if _eligible(x) and x.dtype is not dtype:
        return x.to(dtype)
    if isinstance(x, (list, tuple)) and any(_eligible(e) for e in x):
        return type(x)(_cast(e, dtype) for e in x)
    return x


def _widest(args, kwargs):
    """torch's promote rule among the floating operands autocast may cast:
    float32 when any is float32 or float16 meets bfloat16, else theirs."""
    seen = set()
    for a in list(args) + list(kwargs.values()):
        for e in (a if isinstance(a, (list, tuple)) else (a,)):
            if _eligible(e):
                seen.add(e.dtype)
    if not seen:
        return None
    return seen.pop() if len(seen) == 1 else _C.float32


def _plan(name, args, kwargs):
    """(how, dtype) for an op call inside a region, or None."""
    dev = _device_of(args, kwargs)
    if dev is None:
        return None
    low = _current(dev)
    if low is None:
        return None
    cuda = dev == "cuda"
    if name in (LOWER_CUDA if cuda else LOWER_CPU):
        return "cast", low
    if name in (FP32_CUDA if cuda else FP32_CPU):
        return "cast", _C.float32
    if cuda and name in FP32_OPT_DTYPE_CUDA:
        return "dtype", _C.float32
    if name in (PROMOTE_CUDA if cuda else PROMOTE_CPU):
        w = _widest(args, kwargs)
        return ("cast", w) if w is not None else None
    return None


def _apply(name, func, args, kwargs):
    plan = _plan(name, args, kwargs)
    if plan is None:
        return NotImplemented
    how, dt = plan
    if how == "dtype":
        if kwargs.get("dtype") is None and any(_eligible(a) for a in args[:1]):
            kwargs = dict(kwargs, dtype=dt)
        return func(*args, **kwargs)
    args = tuple(_cast(a, dt) for a in args)
    kwargs = {k: _cast(v, dt) for k, v in kwargs.items()}
    return func(*args, **kwargs)


def _hook(name, func, args, kwargs):
    """The ops room's autocast hook (csrc/ops/ops_func.c): every op call
    while some region is enabled."""
    if not _regions():
        return NotImplemented
    return _apply(name, func, args, kwargs)


def _wrap_composite(name, fn):
    """A Python composite of the lists (conv2d, addmm, ...): cast at its
    entry, so its result has the autocast dtype as torch's op has."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _active_regions[0] and _regions() and not getattr(_state, "inside", False):
            plan = _plan(name, args, kwargs)
            if plan is not None:
                _state.inside = True
                try:
                    return _apply(name, fn, args, kwargs)
                finally:
                    _state.inside = False
        return fn(*args, **kwargs)
    wrapper._tp_autocast_wrapped = fn
    return wrapper


def _install_aliases():
    """torch.cuda.amp / torch.cpu.amp (the older spellings): autocast with
    the device fixed, and GradScaler."""
    import sys
    import types
    import tensorplay
    from tensorplay import cuda

    def make(device, default):
        class _Autocast(autocast):
            def __init__(self, enabled=True, dtype=default, cache_enabled=True):
                super().__init__(device, dtype=dtype, enabled=enabled,
                                 cache_enabled=cache_enabled)

            def __call__(self, fn):
                return autocast.__call__(self, fn)
        _Autocast.__name__ = _Autocast.__qualname__ = "autocast"
        mod = types.ModuleType(f"tensorplay.{device}.amp")
        mod.autocast = _Autocast
        mod.GradScaler = GradScaler
        return mod
    cuda.amp = make("cuda", _C.float16)
    sys.modules["tensorplay.cuda.amp"] = cuda.amp
    if not hasattr(tensorplay, "cpu"):
        cpu = types.ModuleType("tensorplay.cpu")
        tensorplay.cpu = cpu
        sys.modules["tensorplay.cpu"] = cpu
    tensorplay.cpu.amp = make("cpu", _C.bfloat16)
    sys.modules["tensorplay.cpu.amp"] = tensorplay.cpu.amp


def _install_composites():
    import tensorplay
    from tensorplay import _composites, _torch_names, functional
    from tensorplay.nn import functional as nnf
    names = (LOWER_CUDA | FP32_CUDA | PROMOTE_CUDA) - {r["name"] for r in _C._op_table()}
    for name in names:
        for home in (_composites, _torch_names):
            fn = getattr(home, name, None)
            if fn is None or not callable(fn) or getattr(fn, "_tp_autocast_wrapped", None):
                continue
            w = _wrap_composite(name, fn)
            for mod in (home, tensorplay, functional, nnf):
                if getattr(mod, name, None) is fn:
                    setattr(mod, name, w)


def _enter_region():
    with _lock:
        _active_regions[0] += 1
        _C._set_autocast_hook(_hook)


def _exit_region():
    with _lock:
        _active_regions[0] -= 1
        if _active_regions[0] <= 0:
            _active_regions[0] = 0
            _C._set_autocast_hook(None)


class autocast:
    """Context manager / decorator: ops inside run in mixed precision (see
    the module docstring). autocast(device_type, dtype=None, enabled=True,
    cache_enabled=None). Raises RuntimeError for an unknown device_type
    (torch's message); a CPU dtype other than bfloat16/float16 warns and
    disables the region (torch's warning)."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        if device_type not in ("cpu", "cuda"):
            raise RuntimeError(f"User specified an unsupported autocast device_type "
                               f"'{device_type}'")
        self.device = device_type
        self.fast_dtype = dtype if dtype is not None else (
            _C.bfloat16 if device_type == "cpu" else _C.float16)
        self._enabled = bool(enabled)
        if self._enabled and self.fast_dtype not in (_C.bfloat16, _C.float16):
            if device_type == "cpu":
                warnings.warn("In CPU autocast, but the target dtype is not supported. "
                              "Disabling autocast.\nCPU Autocast only supports dtypes of "
                              "torch.bfloat16, torch.float16 currently.", stacklevel=2)
            else:
                warnings.warn("In CUDA autocast, but the target dtype is not supported. "
                              "Disabling autocast.\nCUDA Autocast only supports dtypes of "
                              "torch.float16 and torch.bfloat16 currently.", stacklevel=2)
            self._enabled = False
        self._entered = []

    def __enter__(self):
        _regions().append((self.device, self._enabled, self.fast_dtype))
        if self._enabled:
            _enter_region()
        self._entered.append(self._enabled)
        return self

    def __exit__(self, *exc):
        r = _regions()
        if r:
            r.pop()
        if self._entered.pop():
            _exit_region()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def decorated(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled):
                return fn(*args, **kwargs)
        return decorated


def is_autocast_enabled(device_type=None):
    """True inside an enabled region for device_type (default 'cuda', as
    torch's no-argument form)."""
    return _current(device_type or "cuda") is not None


def get_autocast_dtype(device_type):
    """The region's dtype for device_type (the default when outside one)."""
    for dev, _, dtype in reversed(_regions()):
        if dev == device_type:
            return dtype
    return _C.bfloat16 if device_type == "cpu" else _C.float16


def autocast_active():
    """True when some region of this thread is enabled (compiled functions
    run eagerly then)."""
    return any(e for _, e, _ in _regions())


from tensorplay.amp.grad_scaler import GradScaler  # noqa: E402
