"""Tensor, dtypes, Size, device, creation functions, randomness, grad mode.

Owned by the tensor room. The Tensor type, dtypes, promotion, views and the
Philox generator are C (tensorplay._C, csrc/tensor/); this module adds the
PyTorch-style creation functions, printing and the grad-mode context
managers on top of it."""
import functools
import math

import numpy as np

from tensorplay import _C
from tensorplay._C import (Tensor, Size, device, dtype, Generator,  # noqa: F401
                           default_generator, promote_types, result_type,
                           get_default_dtype, set_default_dtype,
                           is_grad_enabled)
from tensorplay._C import (bool, uint8, int8, int16, int32, int64,  # noqa: F401,A004
                           float16, float32, float64, half, float, double,
                           long, int, short, bfloat16)
# tp.manual_seed is tp.random.manual_seed (likewise seed, initial_seed,
# get_rng_state, set_rng_state), as in torch
from tensorplay.random import (manual_seed, seed, initial_seed,  # noqa: F401
                               get_rng_state, set_rng_state)

_bool = __builtins__["bool"] if isinstance(__builtins__, dict) else __builtins__.bool
_int = __builtins__["int"] if isinstance(__builtins__, dict) else __builtins__.int
_float = __builtins__["float"] if isinstance(__builtins__, dict) else __builtins__.float

__all__ = [
    "Tensor", "Size", "device", "dtype", "Generator", "default_generator",
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
    "float64", "half", "float", "double", "long", "int", "short", "bfloat16",
    "promote_types", "result_type", "get_default_dtype", "set_default_dtype",
    "can_cast", "is_tensor", "is_floating_point", "numel", "is_grad_enabled",
    "no_grad", "enable_grad", "set_grad_enabled", "inference_mode",
    "is_inference_mode_enabled",
    "tensor", "as_tensor", "from_numpy", "from_dlpack", "zeros", "ones", "full", "empty",
    "empty_strided", "arange", "linspace", "logspace", "eye",
    "zeros_like", "ones_like", "full_like", "empty_like", "rand_like",
    "randn_like", "randint_like",
    "manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state",
    "rand", "randn", "randint", "randperm", "bernoulli", "normal",
    "set_printoptions",
    # views as functions (the ops room may override them from the op table)
    "reshape", "permute", "transpose", "swapaxes", "swapdims", "t",
    "unsqueeze", "squeeze", "flatten", "unflatten", "narrow", "select",
    "unbind", "split", "chunk", "diagonal", "as_strided", "movedim",
    "moveaxis",
]

_NP = {bool: np.bool_, uint8: np.uint8, int8: np.int8, int16: np.int16,
       int32: np.int32, int64: np.int64, float16: np.float16,
       float32: np.float32, float64: np.float64,
       # NumPy has no bfloat16: creation computes its values in float32 and
       # _from_np rounds them (to nearest even) into a bfloat16 tensor
       bfloat16: np.float32}


def _np_dtype(dt):
    return _NP[_as_dtype(dt)]


def _from_np(arr, dt):
    """A tensor on arr (no copy), or, for bfloat16, arr's values rounded."""
    t = _C.from_numpy(arr)
    return t.to(bfloat16) if dt is bfloat16 else t


def _values(t):
    """A NumPy array of t's values: t.numpy(force=True); bfloat16 as float32."""
    if t.dtype is bfloat16:
        t = t.float()
    return t.numpy(force=True)


def _as_dtype(dt):
    if isinstance(dt, dtype):
        return dt
    return _C.promote_types(dt, dt)   # converts strings/np dtypes or raises


# ---- __tensor_function__ for the functions of this module ----------------

_PLAIN = frozenset([Tensor, _int, _float, _bool, type(None), str, dtype, device, Size])


def _visit(a, depth, found):
    t = type(a)
    if t in _PLAIN:
        return
    if t is list or t is tuple:
        if depth < 2:
            for x in a:
                _visit(x, depth + 1, found)
        return
    if t not in found and hasattr(t, "__tensor_function__"):
        found.append(t)


def _overrides(args, kwargs):
    """Types overriding __tensor_function__ among args/kwargs (lists and tuples are
    scanned two levels deep, like the ops room's C check)."""
    found = []
    for a in args:
        if type(a) not in _PLAIN:
            _visit(a, 0, found)
    if kwargs:
        for a in kwargs.values():
            if type(a) not in _PLAIN:
                _visit(a, 0, found)
    return found


def _dispatch(func, types, args, kwargs):
    for t in types:
        r = t.__tensor_function__(func, tuple(types), args, kwargs)
        if r is not NotImplemented:
            return r
    raise TypeError(f"no implementation found for '{func.__module__}.{func.__name__}' on types "
                    f"that implement __tensor_function__: {types}")


def _tf(func):
    """Honour __tensor_function__ on the arguments of a public function."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        types = _overrides(args, kwargs) if args or kwargs else None
        if types:
            return _dispatch(wrapper, types, args, kwargs)
        return func(*args, **kwargs)
    wrapper.__module__ = "tensorplay"
    return wrapper


# ---- grad mode ------------------------------------------------------------

class _DecoratorContextManager:
    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self.__class__(*self._ctor_args()):
                return fn(*args, **kwargs)
        return wrapped

    def _ctor_args(self):
        return ()


class no_grad(_DecoratorContextManager):
    """Context manager / decorator disabling grad mode."""

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        if not callable(orig_func):
            raise TypeError(f"no_grad() takes no arguments (got {orig_func!r})")
        return cls()(orig_func)        # @no_grad without parentheses

    def __init__(self, orig_func=None):
        self._prev = None

    def __enter__(self):
        self._prev = _C._set_grad_enabled(False)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False


class enable_grad(_DecoratorContextManager):
    def __enter__(self):
        self._prev = _C._set_grad_enabled(True)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False


class set_grad_enabled(_DecoratorContextManager):
    """set_grad_enabled(mode): sets grad mode now; as a context manager the
    previous mode is restored on exit."""

    def __init__(self, mode):
        self.mode = _bool(mode)
        self._prev = _C._set_grad_enabled(self.mode)

    def _ctor_args(self):
        return (self.mode,)

    def __call__(self, fn):
        _C._set_grad_enabled(self._prev)
        return super().__call__(fn)

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False


class inference_mode(_DecoratorContextManager):
    def __init__(self, mode=True):
        self.mode = _bool(mode)

    def _ctor_args(self):
        return (self.mode,)

    def __enter__(self):
        self._prev_inf = _C._set_inference_mode(self.mode)
        self._prev = _C._set_grad_enabled(not self.mode and is_grad_enabled())
        if not self.mode:
            _C._set_grad_enabled(self._prev)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        _C._set_inference_mode(self._prev_inf)
        return False


def is_inference_mode_enabled():
    return _C.is_inference_mode_enabled()


# ---- small predicates --------------------------------------------------------

def is_tensor(obj):
    # a traced tensor (compiled function) is a tensor to the user's code
    return isinstance(obj, Tensor) or type(obj) is getattr(_C, "Proxy", None)


def is_floating_point(input):
    return input.dtype.is_floating_point


def numel(input):
    return input.numel()


def can_cast(from_, to):
    from_, to = _as_dtype(from_), _as_dtype(to)
    kind = {True: 2}
    def k(d):
        return 2 if d.is_floating_point else (0 if d is bool else 1)
    del kind
    return k(from_) <= k(to)


# ---- creation ---------------------------------------------------------------

def _check_device(dev):
    """None for the host, else the CUDA device object (RuntimeError "CUDA is
    not available: ..." without a GPU)."""
    if dev is None:
        return None
    d = _C._parse_device(dev)
    return None if d.type == "cpu" else d


def _sizes(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    out = []
    for s in size:
        if isinstance(s, _bool) or isinstance(s, _float) or not hasattr(type(s), "__index__"):
            raise TypeError(f"{'size'} must be tuple of ints, but found element of type "
                            f"{type(s).__name__} at pos {len(out)}")
        out.append(s.__index__())
    for s in out:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {out}")
    return tuple(out)


def _finish(t, requires_grad, device=None):
    if device is not None:
        t = _C._to_device(t, device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _infer_dtype(data):
    """PyTorch's scalar-type inference for nested Python data."""
    if isinstance(data, Tensor):
        return data.dtype
    if isinstance(data, np.ndarray) or isinstance(data, np.generic):
        return _C.promote_types(data.dtype, data.dtype)
    if isinstance(data, _bool):
        return bool
    if isinstance(data, _int):
        return int64
    if isinstance(data, _float):
        return get_default_dtype()
    if isinstance(data, complex):
        raise TypeError("complex tensors are not supported by tensorplay")
    if isinstance(data, (list, tuple)):
        best = None
        for x in data:
            d = _infer_dtype(x)
            best = d if best is None else _C.promote_types(best, d)
        return best if best is not None else get_default_dtype()
    if hasattr(type(data), "__index__") and not hasattr(data, "__len__"):
        return int64
    if hasattr(type(data), "__float__") and not hasattr(data, "__len__"):
        return get_default_dtype()
    raise TypeError(f"Could not infer dtype of {type(data).__name__}")


def _ragged_message(data):
    """torch's message for nested lists of unequal lengths: the first
    sequence (depth first) whose length differs from the first one's at
    its depth."""
    shape, cur = [], data
    while isinstance(cur, (list, tuple)):
        shape.append(len(cur))
        if not cur:
            break
        cur = cur[0]

    def walk(x, d):
        if d >= len(shape):
            return None
        if not isinstance(x, (list, tuple)):
            return None     # a scalar among sequences: numpy's message stays
        if len(x) != shape[d]:
            return f"expected sequence of length {shape[d]} at dim {d} (got {len(x)})"
        for y in x:
            m = walk(y, d + 1)
            if m:
                return m
        return None
    return walk(data, 0)


def _first_leaves(data):
    """The first element at each nesting level (enough to spot tensors/arrays inside
    lists, which carry their own dtype)."""
    out = []
    while type(data) is list or type(data) is tuple:
        if not data:
            break
        data = data[0]
        out.append(data)
    return out


def _to_numpy_data(data):
    if isinstance(data, Tensor):
        if data.dtype is bfloat16:
            return _values(data)
        return data.numpy(force=True) if data.requires_grad else data.numpy()
    if isinstance(data, (list, tuple)):
        return [_to_numpy_data(x) for x in data]
    return data


def _tensor(data, dtype=None, device=None, requires_grad=False, pin_memory=False):
    device = _check_device(device)
    if isinstance(data, str) or data is None:
        raise TypeError(f"new(): invalid data type '{type(data).__name__}'")
    if type(data) is list or type(data) is tuple:
        try:
            arr = np.array(data)
        except ValueError as e:
            raise ValueError(_ragged_message(data) or
                             f"expected a rectangular nested sequence: {e}") from None
        except TypeError:       # bfloat16 tensors inside: the path below
            arr = np.array((), dtype=object)
        kind = arr.dtype.kind
        if kind in "biuf" and not any(isinstance(x, (Tensor, np.ndarray, np.generic))
                                      for x in _first_leaves(data)):
            if dtype is not None:
                dt = _as_dtype(dtype)
            else:
                dt = bool if kind == "b" else (int64 if kind in "iu" else get_default_dtype())
            npdt = _NP[dt]
            if arr.dtype != npdt:
                arr = arr.astype(npdt)
            return _finish(_from_np(arr, dt), requires_grad, device)
    dt = _as_dtype(dtype) if dtype is not None else _infer_dtype(data)
    arr = np.array(_to_numpy_data(data), dtype=_NP[dt], copy=True, order="C")
    if arr.dtype.byteorder not in "=|":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return _finish(_from_np(arr, dt), requires_grad, device)


_scalar_tensor = _C._scalar_tensor
_SCALARS = (_float, _int, _bool)


def tensor(data, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A new tensor holding a copy of data (nested lists, scalars, arrays, tensors)."""
    if type(data) in _SCALARS and not requires_grad and device is None:
        return _scalar_tensor(data, dtype)
    types = _overrides((data,), None)
    if types:
        return _dispatch(tensor, types, (data,), dict(dtype=dtype, device=device,
                                                      requires_grad=requires_grad))
    return _tensor(data, dtype, device, requires_grad)


@_tf
def as_tensor(data, dtype=None, device=None):
    device = _check_device(device)
    if isinstance(data, Tensor):
        return data if dtype is None else data.to(dtype)
    if isinstance(data, np.ndarray):
        try:
            t = _C._trace_external(_C._external_memory(_C.from_numpy(data)))
        except (TypeError, ValueError):
            return tensor(data, dtype=dtype)
        return t if dtype is None else t.to(dtype)
    return tensor(data, dtype=dtype)


from_dlpack = _C.from_dlpack


def from_numpy(ndarray):
    """A tensor sharing the array's memory (no copy)."""
    # (the array's memory is the caller's: a compiled function's trace that
    # writes it undoes its write, as for any tensor it did not make)
    # (while tracing: the proxy of that memory held by reference, so what
    # the function computes from it reads the array on every call)
    return _C._trace_external(_C._external_memory(_C.from_numpy(ndarray)))


def _make(fn, size, dtype, device, requires_grad, default=None):
    device = _check_device(device)
    dt = _as_dtype(dtype) if dtype is not None else (default or get_default_dtype())
    return _finish(_from_np(fn(_sizes(size), _NP[dt]), dt), requires_grad, device)


zeros = _C.zeros
ones = _C.ones
empty = _C.empty


def empty_strided(size, stride, *, dtype=None, device=None, requires_grad=False, layout=None,
                  pin_memory=False):
    """An uninitialized tensor with the given sizes and strides (in elements)."""
    device = _check_device(device)
    dt = _as_dtype(dtype) if dtype is not None else get_default_dtype()
    return _finish(_C.empty_strided(tuple(size), tuple(stride), dt), requires_grad, device)


def _scalar_dtype(v):
    if isinstance(v, Tensor):
        return v.dtype
    if isinstance(v, _bool) or isinstance(v, np.bool_):
        return bool
    if isinstance(v, (_int, np.integer)):
        return int64
    return get_default_dtype()


@_tf
def full(size, fill_value, dtype=None, device=None, requires_grad=False, out=None, layout=None):
    device = _check_device(device)
    if isinstance(size, _int):
        size = (size,)
    if not isinstance(fill_value, (Tensor, _int, _float, complex, np.number, np.bool_)):
        raise TypeError(f"full(): argument 'fill_value' (position 2) must be Number, "
                        f"not {type(fill_value).__name__}")
    dt = _as_dtype(dtype) if dtype is not None else _scalar_dtype(fill_value)
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    else:
        _C._check_scalar(fill_value, dt)
    if type(fill_value) is _int and np.dtype(_NP[dt]).kind in "ub":
        # torch wraps a negative int into an unsigned dtype (-1 -> 255);
        # bool takes any int (2**64 - 1 -> True)
        fill_value = (np.asarray(fill_value, np.int64).astype(_NP[dt])
                      if -2**63 <= fill_value < 2**63 else fill_value != 0)
    arr = np.full(_sizes((tuple(size),)), fill_value, dtype=_NP[dt])
    return _finish(_from_np(arr, dt), requires_grad, device)


def _num(v):
    if isinstance(v, Tensor):
        return v.item()
    return v


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False, out=None,
           layout=None):
    device = _check_device(device)
    start, end, step = _num(start), _num(end), _num(step)
    if end is None:
        start, end = 0, start
    if dtype is None:
        dt = int64 if all(isinstance(v, (_int, np.integer)) for v in (start, end, step)) \
            else get_default_dtype()
    else:
        dt = _as_dtype(dtype)
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if not all(math.isfinite(_float(v)) for v in (start, end)):
        raise RuntimeError(f"unsupported range: {start} -> {end}")
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if dt.is_floating_point or not all(isinstance(v, (_int, np.integer))
                                       for v in (start, end, step)):
        n = _int(math.ceil((end - start) / step))
        vals = start + np.arange(n, dtype=np.float64) * step
        arr = vals.astype(_NP[dt])
    else:
        arr = np.arange(start, end, step, dtype=np.int64).astype(_NP[dt])
    return _finish(_from_np(np.ascontiguousarray(arr), dt), requires_grad, device)


def linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False, out=None,
             layout=None):
    device = _check_device(device)
    start, end = _num(start), _num(end)
    if not isinstance(steps, (_int, np.integer)) or isinstance(steps, _bool):
        raise TypeError(f"linspace(): argument 'steps' must be int, not {type(steps).__name__}")
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    dt = _as_dtype(dtype) if dtype is not None else get_default_dtype()
    # PyTorch's kernel: step in the output dtype, each value one fused multiply-add
    ct = _NP[dt] if dt.is_floating_point and dt is not float16 else np.float64
    i = np.arange(steps, dtype=np.float64)
    if steps == 1:
        vals = np.array([start], dtype=np.float64)
    else:
        start_c, end_c = ct(start), ct(end)
        step = np.float64((end_c - start_c) / ct(steps - 1))
        half = steps // 2
        vals = np.where(i < half, np.float64(start_c) + step * i,
                        np.float64(end_c) - step * (steps - 1 - i))
    if not dt.is_floating_point:
        vals = np.trunc(vals)
    return _finish(_from_np(np.ascontiguousarray(vals.astype(_NP[dt])), dt), requires_grad,
                   device)


def logspace(start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False):
    lin = linspace(start, end, steps, dtype=float64)
    dt = _as_dtype(dtype) if dtype is not None else get_default_dtype()
    return _finish(_from_np(np.power(base, lin.numpy()).astype(_NP[dt]), dt), requires_grad)


def eye(n, m=None, *, dtype=None, device=None, requires_grad=False, out=None, layout=None):
    device = _check_device(device)
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m is not None and m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    dt = _as_dtype(dtype) if dtype is not None else get_default_dtype()
    return _finish(_from_np(np.eye(n, m, dtype=_NP[dt]), dt), requires_grad, device)


def _like(input, dtype):
    if not isinstance(input, Tensor):
        raise TypeError(f"expected Tensor as argument 1, but got {type(input).__name__}")
    return input.shape, (input.dtype if dtype is None else _as_dtype(dtype))


def _laid_out(name, input, memory_format, make):
    """torch's *_like layout: make(sizes) builds a contiguous tensor of the
    input's sizes listed outermost first in the memory order of the layout
    memory_format gives (preserve_format: a dense input's own strides, else
    a dense layout in its stride order), whose elements, in storage order,
    become the result's; values drawn at random thus follow the result's
    memory order, as torch's do"""
    st = _C._layout_strides(input, memory_format, name)
    shape = tuple(input.shape)
    order = sorted(range(len(shape)), key=lambda d: -st[d])
    base = make(tuple(shape[d] for d in order))
    if order == sorted(order) and tuple(base.stride()) == st:
        return base
    return _C._restrided(base, shape, st)


def _like_result(t, requires_grad):
    if requires_grad:
        t.requires_grad_(True)
    return t


@_tf
def zeros_like(input, *, dtype=None, device=None, requires_grad=False, memory_format=None,
               layout=None):
    shape, dt = _like(input, dtype)
    device = input.device if device is None else device
    return _like_result(_laid_out("zeros_like", input, memory_format,
                                  lambda s: zeros(s, dtype=dt, device=device)), requires_grad)


@_tf
def ones_like(input, *, dtype=None, device=None, requires_grad=False, memory_format=None,
              layout=None):
    shape, dt = _like(input, dtype)
    device = input.device if device is None else device
    return _like_result(_laid_out("ones_like", input, memory_format,
                                  lambda s: ones(s, dtype=dt, device=device)), requires_grad)


@_tf
def empty_like(input, *, dtype=None, device=None, requires_grad=False, memory_format=None,
               layout=None):
    shape, dt = _like(input, dtype)
    device = input.device if device is None else device
    return _like_result(_laid_out("empty_like", input, memory_format,
                                  lambda s: empty(s, dtype=dt, device=device)), requires_grad)


@_tf
def full_like(input, fill_value, *, dtype=None, device=None, requires_grad=False,
              memory_format=None, layout=None):
    shape, dt = _like(input, dtype)
    device = input.device if device is None else device
    return _like_result(_laid_out("full_like", input, memory_format,
                                  lambda s: full(s, fill_value, dtype=dt, device=device)),
                        requires_grad)


@_tf
def rand_like(input, *, dtype=None, device=None, requires_grad=False, memory_format=None,
              generator=None, layout=None):
    shape, dt = _like(input, dtype)
    device = input.device if device is None else device
    return _like_result(_laid_out("rand_like", input, memory_format,
                                  lambda s: rand(s, dtype=dt, device=device,
                                                 generator=generator)), requires_grad)


@_tf
def randn_like(input, *, dtype=None, device=None, requires_grad=False, memory_format=None,
               generator=None, layout=None):
    shape, dt = _like(input, dtype)
    device = input.device if device is None else device
    return _like_result(_laid_out("randn_like", input, memory_format,
                                  lambda s: randn(s, dtype=dt, device=device,
                                                  generator=generator)), requires_grad)


@_tf
def randint_like(input, low=0, high=None, *, dtype=None, device=None, requires_grad=False,
                 generator=None, memory_format=None, layout=None):
    if high is None:
        low, high = 0, low
    shape, dt = _like(input, dtype)
    device = input.device if device is None else device
    return _laid_out("randint_like", input, memory_format,
                     lambda s: randint(low, high, s, dtype=dt, device=device,
                                       generator=generator))


# ---- randomness (Philox4x32-10 in C; stream in docs/rng.md) ----------------

def _float_dtype(dtype, fn):
    dt = _as_dtype(dtype) if dtype is not None else get_default_dtype()
    if not dt.is_floating_point:
        raise NotImplementedError(f"\"{fn}\" not implemented for '{_TYPE_NAMES[dt]}'")
    return dt


_TYPE_NAMES = {bool: "Bool", uint8: "Byte", int8: "Char", int16: "Short", int32: "Int",
               int64: "Long", float16: "Half", float32: "Float", float64: "Double",
               bfloat16: "BFloat16"}


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False, out=None,
         layout=None, pin_memory=False):
    dt = _float_dtype(dtype, "check_uniform_bounds")
    t = empty(*size, dtype=dt, device=device)
    _C._fill_uniform(t, 0.0, 1.0, generator)
    return _finish(t, requires_grad)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False, out=None,
          layout=None, pin_memory=False):
    dt = _float_dtype(dtype, "normal_kernel_cpu")
    t = empty(*size, dtype=dt, device=device)
    _C._fill_normal(t, 0.0, 1.0, generator)
    return _finish(t, requires_grad)


def randint(*args, size=None, generator=None, dtype=None, device=None, requires_grad=False,
            out=None, layout=None, low=None, high=None):
    args = list(args)
    if size is None and args and isinstance(args[-1], (tuple, list)):
        size = args.pop()
    if low is not None:
        args.insert(0, low)
    if high is not None:
        args.append(high)
    if len(args) == 1:
        lo, hi = 0, args[0]
    elif len(args) == 2:
        lo, hi = args
    else:
        raise TypeError("randint() received an invalid combination of arguments: expected "
                        "(int high, tuple of ints size) or (int low, int high, tuple of ints size)")
    if size is None:
        raise TypeError("randint() missing 1 required positional arguments: \"size\"")
    dt = _as_dtype(dtype) if dtype is not None else int64
    t = empty(size, dtype=dt, device=device)
    _C._fill_randint(t, _int(lo), _int(hi), generator)
    return _finish(t, requires_grad)


def randperm(n, *, generator=None, dtype=None, device=None, requires_grad=False, out=None,
             layout=None):
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    keys = empty(n, dtype=int64)
    _C._fill_keys(keys, generator)
    perm = np.argsort(keys.numpy(), kind="stable")
    dt = _as_dtype(dtype) if dtype is not None else int64
    return _finish(_from_np(perm.astype(_NP[dt]), dt), requires_grad, _check_device(device))


@_tf
def bernoulli(input, p=None, *, generator=None, out=None):
    if not isinstance(input, Tensor):
        raise TypeError(f"bernoulli(): argument 'input' (position 1) must be Tensor, "
                        f"not {type(input).__name__}")
    t = empty(input.shape, dtype=input.dtype)
    if p is None:
        _C._fill_bernoulli(t, input, generator)
    else:
        _C._fill_bernoulli(t, p, generator)
    return t


@_tf
def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, device=None,
           requires_grad=False, out=None):
    if not isinstance(mean, Tensor) and not isinstance(std, Tensor):
        if size is None:
            raise TypeError("normal() received an invalid combination of arguments: "
                            "needs a size when mean and std are numbers")
        dt = _float_dtype(dtype, "normal_kernel_cpu")
        t = empty(size, dtype=dt, device=device)
        _C._fill_normal(t, _float(mean), _float(std), generator)
        return _finish(t, requires_grad)
    mt = mean if isinstance(mean, Tensor) else None
    st = std if isinstance(std, Tensor) else None
    ref = mt if mt is not None else st
    if not ref.dtype.is_floating_point:
        raise NotImplementedError(f"\"normal_kernel_cpu\" not implemented for "
                                  f"'{_TYPE_NAMES[ref.dtype]}'")
    m = _values(mt) if mt is not None else np.float64(mean)
    s = _values(st) if st is not None else np.float64(std)
    if np.any(s < 0):
        raise RuntimeError("normal expects all elements of std >= 0.0")
    shape = np.broadcast_shapes(np.shape(m), np.shape(s))
    z = empty(shape, dtype=ref.dtype)
    _C._fill_normal(z, 0.0, 1.0, generator)
    res = (_values(z) * s + m).astype(_NP[ref.dtype])
    return _from_np(np.ascontiguousarray(res), ref.dtype)


# ---- Tensor methods written in Python ---------------------------------------

def _normal_(self, mean=0.0, std=1.0, *, generator=None):
    return _C._fill_normal(self, _float(mean), _float(std), generator)


def _uniform_(self, a=0.0, b=1.0, *, generator=None, **kw):
    a = kw.pop("from", a)
    b = kw.pop("to", b)
    return _C._fill_uniform(self, _float(a), _float(b), generator)


def _bernoulli_(self, p=0.5, *, generator=None):
    return _C._fill_bernoulli(self, p, generator)


def _random_(self, from_=None, to=None, *, generator=None, **kw):
    from_ = kw.pop("from", from_)
    if to is None:
        if from_ is None:
            lo, hi = 0, (2 ** 24 + 1 if self.dtype is float32 else
                         2 ** 53 + 1 if self.dtype is float64 else
                         2 ** 11 + 1 if self.dtype is float16 else
                         2 ** 8 + 1 if self.dtype is bfloat16 else
                         2 if self.dtype is bool else
                         # int64: [0, 2**63 - 2], the widest the C fill's signed bounds hold
                         min(_int(np.iinfo(_NP[self.dtype]).max) + 1, 2 ** 63 - 1))
        else:
            lo, hi = 0, from_
    else:
        lo, hi = from_, to
    return _C._fill_randint(self, _int(lo), _int(hi), generator)


def _exponential_(self, lambd=1.0, *, generator=None):
    u = empty(self.shape, dtype=float64)
    _C._fill_uniform(u, 0.0, 1.0, generator)
    self.copy_(_C.from_numpy(-np.log1p(-u.numpy()) / lambd))
    return self


def _new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    return tensor(data, dtype=self.dtype if dtype is None else dtype,
                  device=self.device if device is None else device,
                  requires_grad=requires_grad)


def _new_factory(fn):
    def method(self, *size, dtype=None, device=None, requires_grad=False, **kw):
        return fn(*size, dtype=self.dtype if dtype is None else dtype,
                  device=self.device if device is None else device,
                  requires_grad=requires_grad)
    method.__name__ = "new_" + fn.__name__
    return method


def _new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
    return full(size, fill_value, dtype=self.dtype if dtype is None else dtype,
                device=self.device if device is None else device,
                requires_grad=requires_grad)


def _type_as(self, other):
    return self.to(other.dtype)


def _contains(self, element):
    if isinstance(element, (Tensor, _int, _float, _bool)):
        v = _values(element) if isinstance(element, Tensor) else element
        return _bool((_values(self) == v).any())
    raise RuntimeError("Tensor.__contains__ only supports Tensor or scalar, but you passed in a "
                       f"{type(element)}.")


def _H(self):
    if self.dim() != 2:
        raise RuntimeError("tensor.H is only supported on matrices (2-D tensors). Got "
                           f"{self.dim()}-D tensor."
                           + (" For batches of matrices, consider using tensor.mH"
                              if self.dim() > 2 else ""))
    return self.transpose(0, 1)


def _mH(self):
    """The conjugate transpose of the last two dims: mT (no complex dtypes here)."""
    if self.dim() < 2:
        raise RuntimeError("tensor.mH is only supported on matrices or batches of matrices. "
                           f"Got {self.dim()}-D tensor.")
    return self.transpose(-2, -1)


def _reversed(self):
    if self.dim() == 0:
        return self
    return _from_np(np.ascontiguousarray(_values(self)[::-1]), self.dtype)


def _dim_order(self):
    st = self.stride()
    return tuple(sorted(range(self.dim()), key=lambda d: -st[d]))


def _array_wrap(self, array, context=None, return_scalar=False):
    """NumPy ufuncs applied to tensors give tensors back (as in PyTorch)."""
    try:
        a = np.asarray(array)
        return _C.from_numpy(a if a.flags.c_contiguous else a.copy())
    except (TypeError, ValueError):
        return array


def _tensor_dir_methods():
    return {
        "__array_wrap__": _array_wrap,
        "type_as": _type_as, "__contains__": _contains,
        "H": property(_H), "mH": property(_mH), "adjoint": _mH,
        "__reversed__": _reversed, "dim_order": _dim_order,
        "is_complex": lambda self: False, "is_signed": lambda self: self.dtype.is_signed,
        "share_memory_": lambda self: self, "is_shared": lambda self: False,
        "pin_memory": lambda self: self, "is_pinned": lambda self: False,
        "is_inference": lambda self: False,
        "normal_": _normal_, "uniform_": _uniform_, "bernoulli_": _bernoulli_,
        "random_": _random_, "exponential_": _exponential_,
        "new_tensor": _new_tensor, "new_zeros": _new_factory(zeros),
        "new_ones": _new_factory(ones), "new_empty": _new_factory(empty),
        "new_full": _new_full,
    }


# ---- printing (PyTorch's _tensor_str, over NumPy) ----------------------------

class _PrintOpts:
    precision = 4
    threshold = 1000
    edgeitems = 3
    linewidth = 80
    sci_mode = None


PRINT_OPTS = _PrintOpts()


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None):
    if profile == "default":
        PRINT_OPTS.precision, PRINT_OPTS.threshold = 4, 1000
        PRINT_OPTS.edgeitems, PRINT_OPTS.linewidth = 3, 80
    elif profile == "short":
        PRINT_OPTS.precision, PRINT_OPTS.threshold = 2, 1000
        PRINT_OPTS.edgeitems, PRINT_OPTS.linewidth = 2, 80
    elif profile == "full":
        PRINT_OPTS.precision, PRINT_OPTS.threshold = 4, math.inf
        PRINT_OPTS.edgeitems, PRINT_OPTS.linewidth = 3, 80
    if precision is not None:
        PRINT_OPTS.precision = precision
    if threshold is not None:
        PRINT_OPTS.threshold = threshold
    if edgeitems is not None:
        PRINT_OPTS.edgeitems = edgeitems
    if linewidth is not None:
        PRINT_OPTS.linewidth = linewidth
    PRINT_OPTS.sci_mode = sci_mode


class _Formatter:
    def __init__(self, arr, floating):
        self.floating_dtype = floating
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        p = PRINT_OPTS.precision
        flat = arr.reshape(-1)
        if not floating:
            for value in flat.tolist():
                self.max_width = max(self.max_width, len(f"{value}"))
        else:
            vals = flat.astype(np.float64)
            nz = vals[np.isfinite(vals) & (vals != 0)]
            if nz.size == 0:
                return
            ab = np.abs(nz)
            mn, mx = ab.min(), ab.max()
            self.int_mode = _bool(np.all(nz == np.ceil(nz)))
            nzl = nz.tolist()
            if self.int_mode:
                if mx / mn > 1000.0 or mx > 1.0e8:
                    self.sci_mode = True
                    self.max_width = max([self.max_width] + [len(f"{v:.{p}e}") for v in nzl])
                else:
                    self.max_width = max([self.max_width] + [len(f"{v:.0f}") + 1 for v in nzl])
            else:
                if mx / mn > 1000.0 or mx > 1.0e8 or mn < 1.0e-4:
                    self.sci_mode = True
                    self.max_width = max([self.max_width] + [len(f"{v:.{p}e}") for v in nzl])
                else:
                    self.max_width = max([self.max_width] + [len(f"{v:.{p}f}") for v in nzl])
        if PRINT_OPTS.sci_mode is not None:
            self.sci_mode = PRINT_OPTS.sci_mode

    def width(self):
        return self.max_width

    def format(self, value):
        p = PRINT_OPTS.precision
        if self.floating_dtype:
            if self.sci_mode:
                ret = f"{value:{self.max_width}.{p}e}"
            elif self.int_mode:
                ret = f"{value:.0f}"
                if not (math.isinf(value) or math.isnan(value)):
                    ret += "."
            else:
                ret = f"{value:.{p}f}"
        else:
            ret = f"{value}"
        return (self.max_width - len(ret)) * " " + ret


def _summarized(a):
    e = PRINT_OPTS.edgeitems
    if a.ndim == 0:
        return a
    if a.ndim == 1:
        return np.concatenate((a[:e], a[-e:])) if a.shape[0] > 2 * e else a
    if a.shape[0] > 2 * e:
        rows = list(range(e)) + list(range(a.shape[0] - e, a.shape[0]))
    else:
        rows = range(a.shape[0])
    return np.stack([_summarized(a[i]) for i in rows])


def _vector_str(a, indent, summarize, fmt):
    element_length = fmt.width() + 2
    per_line = max(1, _int(math.floor((PRINT_OPTS.linewidth - indent) / element_length)))
    e = PRINT_OPTS.edgeitems
    if summarize and a.shape[0] > 2 * e:
        data = ([fmt.format(v) for v in a[:e].tolist()] + [" ..."]
                + [fmt.format(v) for v in a[-e:].tolist()])
    else:
        data = [fmt.format(v) for v in a.tolist()]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"


def _str_fmt(a, indent, summarize, fmt):
    if a.ndim == 0:
        return fmt.format(a.item())
    if a.ndim == 1:
        return _vector_str(a, indent, summarize, fmt)
    e = PRINT_OPTS.edgeitems
    if summarize and a.shape[0] > 2 * e:
        slices = ([_str_fmt(a[i], indent + 1, summarize, fmt) for i in range(e)] + ["..."]
                  + [_str_fmt(a[i], indent + 1, summarize, fmt)
                     for i in range(a.shape[0] - e, a.shape[0])])
    else:
        slices = [_str_fmt(a[i], indent + 1, summarize, fmt) for i in range(a.shape[0])]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def _tensor_str(a, indent, floating):
    summarize = a.size > PRINT_OPTS.threshold
    if a.dtype == np.float16:
        a = a.astype(np.float32)
    fmt = _Formatter(_summarized(a) if summarize else a, floating)
    return _str_fmt(a, indent, summarize, fmt)


def _add_suffixes(tensor_str, suffixes, indent):
    strs = [tensor_str]
    last_line_len = len(tensor_str) - tensor_str.rfind("\n") + 1
    for suffix in suffixes:
        if last_line_len + len(suffix) + 2 > PRINT_OPTS.linewidth:
            strs.append(",\n" + " " * indent + suffix)
            last_line_len = indent + len(suffix)
        else:
            strs.append(", " + suffix)
            last_line_len += len(suffix) + 2
    strs.append(")")
    return "".join(strs)


def _tensor_repr(self, prefix="tensor("):
    indent = len(prefix)
    suffixes = []
    dt = self.dtype
    has_default = dt in (get_default_dtype(), int64, bool)
    if self.is_cuda:
        # printing reads the values: a host copy (waits for the stream)
        suffixes.append("device='" + str(self.device) + "'")
        a = _values(_C._to_device(self, "cpu"))
    else:
        a = _values(self)
    if a.size == 0:
        if self.dim() != 1:
            suffixes.append("size=" + str(tuple(self.shape)))
        # torch: an empty tensor omits only the default float dtype (an
        # empty int64/bool tensor still says its dtype)
        if dt != get_default_dtype():
            suffixes.append("dtype=" + str(dt))
        body = "[]"
    else:
        if not has_default:
            suffixes.append("dtype=" + str(dt))
        body = _tensor_str(a, indent, dt.is_floating_point)
    if self.grad_fn is not None:
        suffixes.append(f"grad_fn=<{self.grad_fn.name()}>")
    elif self.requires_grad:
        suffixes.append("requires_grad=True")
    return _add_suffixes(prefix + body, suffixes, indent)


def _rebuild_tensor(arr, cls, requires_grad, dtype=None):
    t = _C.from_numpy(arr)
    if dtype is not None:   # bfloat16 is pickled as its float32 values
        t = t.to(dtype)
    if cls is not Tensor:
        t = Tensor._make_subclass(cls, t, requires_grad)
    elif requires_grad:
        t.requires_grad_(True)
    return t


def _format(self, spec):
    if self.dim() == 0:
        return self.item().__format__(spec)
    return object.__format__(self, spec)


_C._set_repr_hook(_tensor_repr)
for _name, _fn in _tensor_dir_methods().items():
    _C._tensor_install(_name, _fn)
_C._tensor_install("__format__", _format)


def _deepcopy(self, memo):
    if id(self) in memo:
        return memo[id(self)]
    import copy
    with no_grad():
        new = self.clone()
    if type(self) is not Tensor:
        new = Tensor._make_subclass(type(self), new, self.requires_grad)
    elif self.requires_grad:
        new.requires_grad_(True)
    memo[id(self)] = new
    d = getattr(self, "__dict__", None)
    if d:
        new.__dict__.update(copy.deepcopy(d, memo))
    return new


_C._tensor_install("__deepcopy__", _deepcopy)
del _name, _fn


# ---- views as functions ------------------------------------------------------

@_tf
def reshape(input, shape):
    return input.reshape(shape)


@_tf
def permute(input, dims):
    return input.permute(dims)


@_tf
def transpose(input, dim0, dim1):
    return input.transpose(dim0, dim1)


swapaxes = swapdims = transpose


@_tf
def t(input):
    return input.t()


@_tf
def unsqueeze(input, dim):
    return input.unsqueeze(dim)


@_tf
def squeeze(input, dim=None):
    return input.squeeze(dim)


@_tf
def flatten(input, start_dim=0, end_dim=-1):
    return input.flatten(start_dim, end_dim)


@_tf
def unflatten(input, dim, sizes):
    return input.unflatten(dim, sizes)


@_tf
def narrow(input, dim, start, length):
    return input.narrow(dim, start, length)


@_tf
def select(input, dim, index):
    return input.select(dim, index)


@_tf
def unbind(input, dim=0):
    return input.unbind(dim)


@_tf
def split(tensor, split_size_or_sections, dim=0):
    return tensor.split(split_size_or_sections, dim)


@_tf
def chunk(input, chunks, dim=0):
    return input.chunk(chunks, dim)


@_tf
def diagonal(input, offset=0, dim1=0, dim2=1):
    return input.diagonal(offset, dim1, dim2)


@_tf
def as_strided(input, size, stride, storage_offset=None):
    return input.as_strided(size, stride, storage_offset)


@_tf
def movedim(input, source, destination):
    return input.movedim(source, destination)


moveaxis = movedim


def _public_module():
    """Public functions defined here print as tensorplay.<name> (graphs, errors)."""
    import types
    g = globals()
    for n in __all__:
        o = g.get(n)
        if isinstance(o, types.FunctionType) and o.__module__ == __name__:
            o.__module__ = "tensorplay"


_public_module()
