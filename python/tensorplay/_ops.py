"""Public op functions (tp.exp, tp.sum, tp.matmul, tp.cat, tp.where, ...).

Every name is ONE object, created in C from the op table
(csrc/ops/ops.def): ``tp.relu is tp.functional.relu``, its ``__module__``
is ``"tensorplay.functional"``. The C object checks ``__tensor_function__``
and runs the C pointwise path (NumPy ufuncs); what C does not cover runs the
Python implementation registered here with ``_C._ops_set_impl``. The
implementations compute with NumPy on no-copy array views of the tensors.
"""
import builtins as _b
import collections
import math

import numpy as np

from tensorplay import _C

# NumPy's floating-point warnings (x / 0, log(0), ...) are not PyTorch's:
# torch returns inf/nan silently. Set once for the calling context.
np.seterr(all="ignore")

_FUNCS = _C._op_functions()

# ---------------------------------------------------------------- helpers

_TITLE = {"bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short",
          "int32": "Int", "int64": "Long", "float16": "Half",
          "float32": "Float", "float64": "Double", "bfloat16": "BFloat16"}


def _Tensor():
    return _C.Tensor


def _is_t(x):
    return isinstance(x, _C.Tensor)


def _arr(x):
    """NumPy view of a tensor (no copy); scalars pass through."""
    if isinstance(x, _C.Tensor):
        return _C._ops_array(x)
    return x


def _np_dtype(dtype):
    """tp.float32 / 'float32' / np.float32 -> np.dtype; None -> None."""
    if dtype is None:
        return None
    nd = getattr(dtype, "numpy_dtype", None)
    if nd is not None:
        return np.dtype(nd)
    if isinstance(dtype, str):
        return np.dtype(dtype)
    try:
        return np.dtype(dtype)
    except TypeError:
        return np.dtype(str(dtype).split(".")[-1])


def _default_np():
    return _np_dtype(_C.get_default_dtype())


def _title(npdt):
    return _TITLE.get(np.dtype(npdt).name, str(npdt))


def _grad_on():
    return _C.is_grad_enabled()


def _wrap(a, *inputs, dtype=None):
    """Fresh tensor from a NumPy result; requires_grad propagates."""
    a = np.asarray(a)
    if dtype is not None and a.dtype != dtype:
        a = a.astype(dtype)
    t = _C._ops_wrap(a)
    if inputs and a.dtype.kind == "f" and _grad_on():
        for x in inputs:
            if isinstance(x, _C.Tensor) and x.requires_grad:
                t.requires_grad = True
                break
    return t


def _result_np(*xs):
    """PyTorch type promotion over tensors/scalars -> np.dtype."""
    return _np_dtype(_C.result_type(*xs))


def _wrap_dim(dim, ndim, name=None):
    n = _b.max(ndim, 1)
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"dim must be an int, not {type(dim).__name__}")
    if dim < -n or dim >= n:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-n}, {n - 1}], but got {dim})")
    return dim % n if ndim > 0 else 0


def _dims(dim, ndim):
    """None/[]/() -> all axes (tuple) ; int or sequence -> normalized tuple."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (list, tuple)):
        if len(dim) == 0:
            return tuple(range(ndim))
        out = tuple(_wrap_dim(d, ndim) for d in dim)
        if len(set(out)) != len(out):
            raise RuntimeError(f"dim {out[0]} appears multiple times in the "
                               f"list of dims")
        return out if ndim > 0 else ()
    d = _wrap_dim(dim, ndim)
    return (d,) if ndim > 0 else ()


def _check_tensor(x, fname, argname="input", pos=1):
    if not isinstance(x, _C.Tensor):
        raise TypeError(f"{fname}(): argument '{argname}' (position {pos}) "
                        f"must be Tensor, not {type(x).__name__}")


def _float_arr(x):
    """Array for a float op: ints/bool promote to the default float dtype."""
    a = _arr(x)
    if a.dtype.kind not in "f":
        a = a.astype(_default_np())
    return a


def _inplace_into(self, res):
    """Write res into self (in-place twin), bump the version."""
    sa = _C._ops_array(self)
    ra = _arr(res)
    rk, sk = np.dtype(ra.dtype).kind, sa.dtype.kind
    if (rk == "f" and sk != "f") or (rk in "iu" and sk == "b"):
        raise RuntimeError(f"result type {_title(ra.dtype)} can't be cast to "
                           f"the desired output type {_title(sa.dtype)}")
    if tuple(np.shape(ra)) != sa.shape:
        raise RuntimeError(f"output with shape {list(sa.shape)} doesn't match "
                           f"the broadcast shape {list(np.shape(ra))}")
    _C._ops_will_write(self)
    sa[...] = ra
    _C._ops_bump_version(self)
    return self


_REG = {}


def _impl(*names):
    def deco(fn):
        for n in names:
            _C._ops_set_impl(n, fn)
            _REG[n] = fn
        return fn
    return deco


def _inplace_of(name, out_name):
    f = _FUNCS.get(out_name)
    if f is None:
        def f(*a, **k):
            return _C._op_call(out_name, a, k)

    def impl(self, *args, **kwargs):
        return _inplace_into(self, f(self, *args, **kwargs))
    impl.__name__ = name
    _C._ops_set_impl(name, impl)


# ------------------------------------------------------------- bfloat16

def _bf16_up(v):
    """v with each bfloat16 tensor (also inside a list/tuple) as float32."""
    if isinstance(v, _C.Tensor):
        return v.float() if v.dtype is _C.bfloat16 else v
    if isinstance(v, (list, tuple)) and _b.any(isinstance(e, _C.Tensor) for e in v):
        return type(v)(_bf16_up(e) for e in v)
    return v


def _bf16_down(r):
    """float32 tensors of r (also inside tuples) rounded to bfloat16."""
    if isinstance(r, _C.Tensor):
        return r.to(_C.bfloat16) if r.dtype is _C.float32 else r
    if isinstance(r, tuple):
        items = [_bf16_down(e) for e in r]
        return type(r)(*items) if hasattr(r, "_fields") else type(r)(items)
    if isinstance(r, list):
        return [_bf16_down(e) for e in r]
    return r


def _bf16_operands(args, kwargs):
    out = []
    for v in list(args) + [v for k, v in kwargs.items() if k != "dtype"]:
        if isinstance(v, (list, tuple)):
            out.extend(e for e in v if isinstance(e, _C.Tensor))
        elif isinstance(v, (_C.Tensor, float, int)):
            out.append(v)
    return out


_BF16_MAX = (2.0 - 2.0 ** -7) * 2.0 ** 127
_BF16_OPERANDS = frozenset(("add", "sub", "rsub", "fmod", "remainder", "pow"))
_BF16_CHECKED = frozenset(("masked_fill", "clamp", "clip", "clamp_min",
                           "clamp_max", "index_fill"))


def _bf16_round(v):
    """A scalar or tensor operand as bfloat16 (a float or int: its rounded
    value, through float32 as c10 converts)."""
    if isinstance(v, _C.Tensor):
        return v if v.dtype is _C.bfloat16 else v.to(_C.bfloat16)
    if isinstance(v, (float, int)) and not isinstance(v, bool):
        return _C._scalar_tensor(float(v), _C.bfloat16).item()
    return v


def _bf16_native(name, args, kwargs):
    """Copies that keep bfloat16 bits (NaN payloads) and aliases: clone,
    _to_copy and contiguous through the tensor room; NotImplemented for the
    other ops."""
    x = args[0] if args else None
    if name not in ("clone", "_to_copy", "contiguous") or not isinstance(x, _C.Tensor) \
            or x.dtype is not _C.bfloat16 or len(args) > 1 \
            or kwargs.get("dtype") not in (None, _C.bfloat16):
        return NotImplemented
    if name == "contiguous" and x.is_contiguous():
        return x
    return _C.empty(tuple(x.shape), dtype=_C.bfloat16).copy_(x)


_MM_FAMILY = frozenset(("matmul", "mm", "bmm", "linear"))


def _bf16_dispatch(name, func, args, kwargs, mutates):
    """An op with a bfloat16 operand (or dtype=bfloat16), computed as torch's
    CPU kernels compute bfloat16: operands loaded to float32 (bfloat16's
    opmath type, exact), the op run in float32 (reductions accumulate in
    float32), and each floating result that torch gives as bfloat16 rounded
    to nearest even once (NaN stays NaN). A result is bfloat16 when
    dtype=bfloat16 is asked for, or when no dtype is asked for and PyTorch's
    promotion of the operands gives bfloat16. An operand the op writes (add_,
    fill_, relu(inplace=True), ...) is written on its float32 copy, which is
    written back rounded; an operand the op returns comes back as itself.
    Called by the ops room's C dispatcher with grad mode off (autograd
    records the op itself, on the bfloat16 tensors)."""
    if name in _MM_FAMILY:
        ts = [a for a in args[:2] if isinstance(a, _C.Tensor)]
        if len(ts) == 2 and name == "linear":
            _linear_dtype_check(ts[0], ts[1], args[2] if len(args) > 2 else kwargs.get("bias"))
        elif len(ts) == 2:
            _mm_check(ts[0], ts[1], name)
    r = _bf16_native(name, args, kwargs)
    if r is not NotImplemented:
        return r
    if name == "logsumexp":
        return _logsumexp_steps(*args, **kwargs)
    want = kwargs.get("dtype", None)
    if want is _C.bfloat16:
        kwargs = dict(kwargs, dtype=_C.float32)
    elif want is None:
        try:
            want = _C.result_type(*_bf16_operands(args, kwargs))
        except TypeError:
            want = None
    if want is _C.bfloat16 and name.rstrip("_") == "nan_to_num":
        # the infinities become bfloat16's extremes, not float32's
        # (which would round back to inf)
        kwargs = dict(kwargs)
        for i, (k, v) in enumerate((("posinf", _BF16_MAX), ("neginf", -_BF16_MAX))):
            if len(args) <= 2 + i and kwargs.get(k) is None:
                kwargs[k] = v
    if want is _C.bfloat16 and name.rstrip("_") in _BF16_CHECKED:
        # torch checks these ops' Python scalars against bfloat16's range
        # (not the float32 they are computed in)
        for v in list(args[1:]) + list(kwargs.values()):
            if isinstance(v, (float, int)) and not isinstance(v, bool):
                _C._check_scalar(v, _C.bfloat16)
    if want is _C.bfloat16 and name == "where":
        # a scalar lands in the bfloat16 result as its rounded value
        # (1e300 -> inf, unchecked as in torch)
        args = tuple(_bf16_round(a) if i and isinstance(a, float) else a
                     for i, a in _b.enumerate(args))
    if want is _C.bfloat16 and name.rstrip("_") in _BF16_OPERANDS:
        # torch casts the operands of a reduced-precision add/sub/rsub/fmod/
        # remainder/pow (and alpha) to bfloat16 first, a Python scalar
        # included (x + 0.1 adds bfloat16(0.1), x ** 0.3 is x ** 0.30078125),
        # then computes in float32; mul/div keep a scalar at float32
        # (not the self of an in-place op: it is written, not read as an
        # operand of another dtype)
        args = tuple(_bf16_round(a) if (i < 2 or name.rstrip("_") != "pow" and i == 2)
                     and not (i == 0 and mutates) else a
                     for i, a in _b.enumerate(args))
        kwargs = {k: (_bf16_round(v) if k in ("other", "exponent", "alpha", "self", "input") else v)
                  for k, v in kwargs.items()}
    up = tuple(_bf16_up(a) for a in args)
    kw = {k: _bf16_up(v) for k, v in kwargs.items()}
    copies = [(a, u, u._version) for a, u in _b.zip(args, up) if u is not a and _is_t(u)]
    copies += [(kwargs[k], kw[k], kw[k]._version) for k in kw
               if kw[k] is not kwargs[k] and _is_t(kw[k])]
    prev = _C.is_grad_enabled()
    _C._set_grad_enabled(False)
    try:
        r = func(*up, **kw) if func is not None else _C._op_call(name, up, kw)
        for i, (orig, f32, ver) in _b.enumerate(copies):
            if f32._version != ver or (i == 0 and mutates and orig is args[0]):
                orig.copy_(f32)          # the op wrote its float32 copy
            if r is f32:
                return orig
        if want is _C.bfloat16:
            r = _bf16_down(r)
    finally:
        _C._set_grad_enabled(prev)
    return r


# ------------------------------------------------------------ pointwise

def _binary_scalar_args(name, a, b):
    for i, x in enumerate((a, b)):
        if not isinstance(x, (_C.Tensor, int, float, bool)):
            raise TypeError(f"{name}(): argument '{'other' if i else 'input'}'"
                            f" (position {i + 1}) must be Tensor, not "
                            f"{type(x).__name__}")


def _alpha_op(name, input, other, alpha):
    """input +- other * alpha with torch's rules: the result dtype is
    input's and other's (alpha does not promote: bool + bool * 2 is bool)."""
    if alpha == 1 and not isinstance(alpha, bool):
        return _FUNCS[name](input, other)
    _binary_scalar_args(name, input, other)
    rt = _result_np(input, other)
    if isinstance(alpha, bool) and rt != np.bool_:
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if isinstance(alpha, float) and rt.kind in "biu":
        raise RuntimeError("For integral input tensors, argument alpha must not "
                           "be a floating point number.")
    if name == "sub" and rt == np.bool_:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                           "supported. Use the `^` or `logical_xor()` operator instead.")
    if rt == np.bool_:
        o = _arr(other) if _is_t(other) else np.asarray(other)
        i = _arr(input) if _is_t(input) else np.asarray(input)
        return _wrap(np.logical_or(i, np.logical_and(o, bool(alpha))))
    if rt.kind == "f" and _is_t(input):
        # torch's CPU kernel: vec::fmadd(other, alpha, input), rounded once;
        # operands and alpha in the result dtype, float16 computed in float32
        ct = np.float32 if rt == np.float16 else rt
        i = _arr(input).astype(rt, copy=False).astype(ct, copy=False)
        o = (_arr(other) if _is_t(other) else np.asarray(other)).astype(rt).astype(ct, copy=False)
        i, o = np.broadcast_arrays(i, o)
        # (ascontiguousarray makes 0-d arrays 1-d: the broadcast shape back)
        r = _C._ops_fma(np.ascontiguousarray(i), np.ascontiguousarray(o),
                        float(rt.type(-alpha if name == "sub" else alpha))).reshape(i.shape)
        return _wrap(r.astype(rt, copy=False), input, other)
    if _is_t(other) and _arr(other).dtype != rt:
        # torch scales in the result dtype: float64 - float32 * 3 scales in float64
        other = _wrap(_arr(other), other, dtype=rt)
    other = other * alpha if not _is_t(other) else _FUNCS["mul"](other, alpha)
    r = _FUNCS[name](input, other)
    return r if _arr(r).dtype == rt else _wrap(np.asarray(_arr(r), rt), input, other)


@_impl("add")
def _add(input, other, alpha=1):
    return _alpha_op("add", input, other, alpha)


@_impl("sub")
def _sub(input, other, alpha=1):
    return _alpha_op("sub", input, other, alpha)


@_impl("rsub")
def _rsub(input, other, alpha=1):
    if alpha != 1 and not isinstance(alpha, bool) and _is_t(input):
        rt = _result_np(input, other)
        if rt.kind == "f":
            # torch: sub(other, input, alpha), one fma of other - alpha *
            # input; operands and alpha in the result dtype, float16
            # computed in float32
            ct = np.float32 if rt == np.float16 else rt
            i = _arr(input).astype(rt, copy=False).astype(ct, copy=False)
            o = (_arr(other) if _is_t(other) else np.asarray(other)).astype(rt).astype(ct, copy=False)
            i, o = np.broadcast_arrays(i, o)
            r = _C._ops_fma(np.ascontiguousarray(o), np.ascontiguousarray(i),
                            float(rt.type(-alpha))).reshape(i.shape)
            return _wrap(r.astype(rt, copy=False), input, other)
    scaled = input if alpha == 1 else _FUNCS["mul"](input, alpha)
    if _is_t(other):
        return _FUNCS["sub"](other, scaled)
    if isinstance(other, bool) or (_is_t(input) and input.dtype is _C.bool):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or `logical_not()` "
                           "operator instead.")
    # other - input with other as torch's wrapped number (2.5 - uint8 is
    # float32; -input first would wrap in uint8)
    return scaled.__rsub__(other)


@_impl("div")
def _div(input, other, *, rounding_mode=None):
    if rounding_mode is None:
        return _FUNCS["div"](input, other)
    _binary_scalar_args("div", input, other)
    rt = _result_np(input, other)
    a, b = _arr(input), _arr(other)
    if rounding_mode == "floor":
        return _FUNCS["floor_divide"](input, other)
    if rounding_mode != "trunc":
        raise RuntimeError(f"div expected rounding_mode to be one of None, "
                           f"'trunc', or 'floor' but found '{rounding_mode}'")
    if rt.kind == "f":
        r = np.trunc(np.true_divide(np.asarray(a, rt), np.asarray(b, rt)))
    else:
        ai, bi = np.asarray(a).astype(rt), np.asarray(b).astype(rt)
        if np.any(bi == 0):
            raise RuntimeError("ZeroDivisionError")
        q = np.floor_divide(ai, bi)
        q = q + ((np.remainder(ai, bi) != 0) & ((ai < 0) != (bi < 0)))
        r = q
    return _wrap(np.asarray(r, rt), input, other)


def _scalar_only(name):
    def f(*args, **kwargs):
        a = args[0] if args else kwargs.get("input", kwargs.get("self"))
        _check_tensor(a, name)
        raise TypeError(f"{name}() received an invalid combination of "
                        f"arguments")
    return f


for _n in ("neg", "abs", "exp", "exp2", "expm1", "log", "log2",
           "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
           "sinh", "cosh", "asin", "acos", "atan", "sigmoid", "erf", "erfc",
           "floor", "ceil", "trunc", "reciprocal", "square",
           "isnan", "isinf", "isfinite", "logical_not", "bitwise_not"):
    _C._ops_set_impl(_n, _scalar_only(_n))


for _n in ("mul", "true_divide", "floor_divide", "remainder", "fmod",
           "atan2", "maximum", "minimum", "eq", "ne", "lt", "le",
           "gt", "ge", "logical_and", "logical_or", "logical_xor",
           "bitwise_and", "bitwise_or", "bitwise_xor"):
    def _mk(n):
        def f(input, other):
            _binary_scalar_args(n, input, other)
            raise TypeError(f"{n}(): at least one argument must be a Tensor")
        return f
    _C._ops_set_impl(_n, _mk(_n))


@_impl("relu")
def _relu(input, inplace=False):
    if inplace:
        return input.relu_()
    return _FUNCS["relu"](input)


@_impl("round")
def _round(input, *, decimals=0):
    _check_tensor(input, "round")
    if decimals == 0:
        return _FUNCS["round"](input)
    a = _arr(input)
    if a.dtype.kind != "f":
        raise NotImplementedError(f"\"round_cpu\" not implemented for '{_title(a.dtype)}'")
    # torch: x * 10**d rounded half-even, / 10**d (d < 0: / then *), in
    # float32 for float16
    w = a.astype(np.float32) if a.dtype == np.float16 else a
    if decimals >= 0:
        p = np.asarray(10.0 ** decimals, w.dtype)
        r = np.rint(w * p) / p
    else:
        p = np.asarray(10.0 ** -decimals, w.dtype)
        r = np.rint(w / p) * p
    return _wrap(np.asarray(r, a.dtype), input)


@_impl("sign")
def _sign(input):
    _check_tensor(input, "sign")
    a = _arr(input)
    if a.dtype == np.bool_:
        return _clone(input)
    r = np.array(np.sign(a))
    if a.dtype.kind == "f":
        r[np.isnan(a)] = 0
    return _wrap(r, input)


def _int_scalar_as(x, rt):
    """x (a tensor or Python number) as an array of rt; a Python int
    wraps into an integer rt (C's conversion) instead of overflowing."""
    if isinstance(x, int) and not isinstance(x, bool) and rt.kind in "iu":
        return np.asarray(np.uint64(x % 2**64)).astype(rt)
    return np.asarray(_arr(x), rt)


@_impl("pow")
def _pow(input, exponent):
    """Integer ** integer tensor (the C path covers the rest): torch gives
    0 for |base| > 1 and negative exponents instead of raising."""
    _binary_scalar_args("pow", input, exponent)
    if not _is_t(input) and not _is_t(exponent):
        raise TypeError("pow(): at least one argument must be a Tensor")
    rt = _result_np(input, exponent)
    if rt == np.bool_ and _is_t(input) and isinstance(exponent, bool):
        # torch: a bool tensor to a bool power stays bool (x ** True is x)
        a = _arr(input)
        return _wrap(a.copy() if exponent else np.ones(a.shape, np.bool_), input)
    # a Python int base/exponent converts to the integer dtype as C does
    # (300 ** int8 is 44 ** int8, as torch's)
    a, e = _int_scalar_as(input, rt), _int_scalar_as(exponent, rt)
    if rt == np.bool_:
        raise NotImplementedError("\"pow\" not implemented for 'Bool'")
    neg = e < 0
    r = np.power(a, np.where(neg, 0, e))
    if np.any(neg):
        inv = np.where(a == 1, 1, np.where(a == -1, np.where(e % 2 == 0, 1, -1), 0))
        r = np.where(neg, inv, r)
    return _wrap(np.asarray(r, rt), input, exponent)


@_impl("frac")
def _frac(input):
    _check_tensor(input, "frac")
    a = _arr(input)
    if a.dtype.kind != "f":
        raise NotImplementedError(f"\"frac_cpu\" not implemented for '{_title(a.dtype)}'")
    return _wrap(a - np.trunc(a), input)


@_impl("clone", "_to_copy")
def _clone(input, *, memory_format=None, dtype=None, layout=None,
           device=None, pin_memory=None, non_blocking=False):
    """torch's clone/_to_copy: a copy laid out by memory_format (preserve:
    a dense input keeps its strides, any other is laid out densely in its
    stride order)"""
    _check_tensor(input, "clone")
    return _C._copy_as(input, dtype, memory_format)


@_impl("contiguous")
def _contiguous(input, memory_format=None):
    mf = contiguous_format if memory_format is None else memory_format
    if not isinstance(mf, type(preserve_format)):
        raise TypeError(f"contiguous(): argument 'memory_format' must be "
                        f"torch.memory_format, not {type(mf).__name__}")
    if input.is_contiguous(memory_format=mf):
        return input
    if mf is preserve_format:
        raise RuntimeError("preserve memory format is unsupported by the "
                           "contiguous operator")
    return _C._copy_as(input, None, mf)


@_impl("where")
def _where(condition, input=None, other=None):
    if input is None and other is None:
        return tuple(_wrap(i.astype(np.int64)) for i in np.nonzero(_arr(condition)))
    c = _arr(condition)
    if not _is_t(condition) or c.dtype != np.bool_:
        dt = _title(c.dtype) if _is_t(condition) else type(condition).__name__
        raise RuntimeError(f"where expected condition to be a boolean tensor, "
                           f"but got a tensor with dtype {dt}")
    tdt = _C.result_type(input, other)
    rt = _np_dtype(tdt)
    for v in (input, other):
        if not _is_t(v):
            # torch leaves float16/bfloat16 unchecked here (70000 -> inf)
            _C._check_scalar(v, "float64" if tdt in (_C.float16, _C.bfloat16)
                             else tdt)
    _bshape(c, _arr(input), _arr(other))
    r = np.where(c, _as_np(input, rt), _as_np(other, rt))
    return _wrap(np.asarray(r, rt), input, other)


def _bshape(*arrs):
    shapes = [np.shape(a) for a in arrs]
    out = []
    n = _b.max(len(s) for s in shapes)
    for i in range(n):
        sz = 1
        for j, s in enumerate(shapes):
            k = i - (n - len(s))
            d = s[k] if k >= 0 else 1
            if d != 1:
                if sz != 1 and sz != d:
                    raise RuntimeError(
                        f"The size of tensor a ({sz}) must match the size of "
                        f"tensor b ({d}) at non-singleton dimension {i}")
                sz = d
        out.append(sz)
    return tuple(out)


@_impl("lerp")
def _lerp(input, end, weight):
    rt = _result_np(input, end)
    if rt.kind != "f":
        raise NotImplementedError(f"\"lerp_kernel_scalar\" not implemented for "
                           f"'{_title(rt)}'")
    # torch's lerp_vec: in the opmath dtype (float32 for float16), with
    # c = w (|w| < 0.5) or w - 1 and base = self or end, one fused
    # multiply-add c * (end - self) + base: float32's fma is exact in
    # float64 up to the final rounding
    op = np.dtype(np.float32) if rt == np.float16 else rt
    a, b = np.asarray(_arr(input), op), np.asarray(_arr(end), op)
    w = np.asarray(_arr(weight), op)
    _bshape(a, b, w)
    small = np.abs(w) < 0.5
    coeff = np.where(small, w, w - np.asarray(1, op))
    base = np.where(small, a, b)
    d = b - a
    if op == np.float32:
        r = coeff.astype(np.float64) * d.astype(np.float64) + base.astype(np.float64)
    else:
        r = coeff * d + base
    return _wrap(np.asarray(np.asarray(r, op), rt), input, end, weight)


@_impl("masked_fill")
def _masked_fill(input, mask, value):
    _check_tensor(input, "masked_fill")
    m = _arr(mask)
    if m.dtype != np.bool_:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got "
                           f"mask with dtype {np.dtype(m.dtype).name}")
    if _is_t(value):
        if value.dim() != 0:
            raise RuntimeError(f"masked_fill_ only supports a 0-dimensional "
                               f"value tensor, but got tensor with "
                               f"{value.dim()} dimension(s).")
        value = value.item()
    # torch converts a 0-d value tensor to a Scalar too: the same overflow
    # check ("value cannot be converted to type int8_t without overflow")
    _C._check_scalar(value, input.dtype)
    a = _arr(input)
    shape = _bshape(a, m)
    if shape != a.shape:
        raise RuntimeError(f"output with shape {list(a.shape)} doesn't match "
                           f"the broadcast shape {list(shape)}")
    r = np.where(m, np.asarray(value).astype(a.dtype), a)
    return _wrap(np.asarray(r, a.dtype), input)


def _as_np(v, rt):
    """A tensor or Python scalar operand as an array of dtype rt; a Python
    int wraps into an integral dtype as torch's Scalar does (uint8 -5 ->
    251, int64 2**63 -> -2**63)."""
    if _is_t(v):
        return np.asarray(_arr(v), rt)
    if isinstance(v, int) and not isinstance(v, bool) and rt.kind in "iu":
        w = np.asarray(v & 0xFFFFFFFFFFFFFFFF, np.uint64).astype(np.int64)
        return w.astype(rt)
    return np.asarray(v, rt)


@_impl("clamp", "clip")
def _clamp(input, min=None, max=None):
    _check_tensor(input, "clamp")
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must "
                           "not be None")
    ops = [input] + [v for v in (min, max) if v is not None]
    tdt = _C.result_type(*ops)
    if tdt is _C.bool and not _is_t(min) and not _is_t(max):
        # torch has no bool kernel for the scalar-bound clamps
        which = "clamp" if min is not None and max is not None else \
            ("clamp_min" if min is not None else "clamp_max")
        raise NotImplementedError(f"\"{which}_scalar_cpu\" not implemented for 'Bool'")
    rt = _np_dtype(tdt)
    for v in (min, max):
        if v is not None and not _is_t(v):
            _C._check_scalar(v, tdt)
    r = np.asarray(_arr(input), rt)
    if min is not None:
        r = np.maximum(r, _as_np(min, rt))
    if max is not None:
        r = np.minimum(r, _as_np(max, rt))
    return _wrap(np.asarray(r, rt), input)


@_impl("clamp_min")
def _clamp_min(input, min):
    return _clamp(input, min=min)


@_impl("clamp_max")
def _clamp_max(input, max):
    return _clamp(input, max=max)


@_impl("nan_to_num")
def _nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    _check_tensor(input, "nan_to_num")
    a = _arr(input)
    if a.dtype.kind != "f":
        return _clone(input)
    return _wrap(np.nan_to_num(a, nan=0.0 if nan is None else nan,
                               posinf=posinf, neginf=neginf), input)


# activations: computed in the input's float dtype (ints error like torch)

def _act_arr(input, name):
    _check_tensor(input, name)
    a = _arr(input)
    if a.dtype.kind != "f":
        raise NotImplementedError(f"\"{name}\" not implemented for '{_title(a.dtype)}'")
    if a.dtype == np.float16:    # torch's opmath: compute in float32, round once
        return a.astype(np.float32)
    return a


def _act_out(input, r, inplace):
    a = _arr(input)
    r = np.asarray(r, a.dtype)
    if inplace:
        _C._ops_will_write(input)
        a[...] = r
        _C._ops_bump_version(input)
        return input
    return _wrap(r, input)


@_impl("relu6")
def _relu6(input, inplace=False):
    _check_tensor(input, "relu6")
    a = _arr(input)
    return _act_out(input, np.minimum(np.maximum(a, 0), 6), inplace)


@_impl("leaky_relu")
def _leaky_relu(input, negative_slope=0.01, inplace=False):
    a = _act_arr(input, "leaky_relu")
    return _act_out(input, np.where(a > 0, a, a * np.asarray(negative_slope, a.dtype)), inplace)


@_impl("elu")
def _elu(input, alpha=1.0, inplace=False):
    a = _act_arr(input, "elu")
    return _act_out(input, np.where(a > 0, a, alpha * np.expm1(a)), inplace)


@_impl("selu")
def _selu(input, inplace=False):
    a = _act_arr(input, "selu")
    r = 1.0507009873554805 * np.where(a > 0, a, 1.6732632423543772 * np.expm1(a))
    return _act_out(input, r, inplace)


@_impl("celu")
def _celu(input, alpha=1.0, inplace=False):
    a = _act_arr(input, "celu")
    return _act_out(input, np.where(a > 0, a, alpha * np.expm1(a / alpha)), inplace)


def _erf_np(a):
    return _arr(_FUNCS["erf"](_C._ops_wrap(np.asarray(a))))


@_impl("gelu")
def _gelu(input, *, approximate="none"):
    # 1 + erf(z) and 1 + tanh(z) cancel for x << 0 (torch's float32 tail
    # is off by up to 2x there): erfc(-z) and 2 * sigmoid(2z) are the same
    # values without the cancellation, in float64, rounded once (the
    # compiled formula computes the same forms)
    a = _act_arr(input, "gelu")
    wide = a.astype(np.float64)
    if a.dtype == np.float64 and approximate in ("none", "tanh"):
        # float64: torch's own form (its tail cancels below ~1e-16 only)
        if approximate == "none":
            r = 0.5 * wide * (1.0 + _erf_np(wide * 0.7071067811865476))
        else:
            r = 0.5 * wide * (1 + np.tanh(0.7978845608028654
                                          * (wide + 0.044715 * wide * wide * wide)))
    elif approximate == "none":
        r = 0.5 * wide * _arr(_FUNCS["erfc"](_C._ops_wrap(wide * -0.7071067811865476)))
    elif approximate == "tanh":
        z = 1.5957691216057308 * (wide + 0.044715 * wide * wide * wide)
        r = wide / (1.0 + np.exp(-z))
    else:
        raise RuntimeError(f"approximate argument must be either none or tanh.")
    return _wrap(np.asarray(r, _arr(input).dtype), input)


@_impl("silu")
def _silu(input, inplace=False):
    a = _act_arr(input, "silu")
    return _act_out(input, a / (1 + np.exp(-a)), inplace)


def _softplus_np(a, beta=1, threshold=20):
    return np.where(a * beta > threshold, a, np.log1p(np.exp(a * beta)) / beta)


@_impl("mish")
def _mish(input, inplace=False):
    a = _act_arr(input, "mish")
    return _act_out(input, a * np.tanh(_softplus_np(a)), inplace)


@_impl("softplus")
def _softplus(input, beta=1, threshold=20):
    a = _act_arr(input, "softplus")
    return _wrap(np.asarray(_softplus_np(a, beta, threshold), _arr(input).dtype), input)


@_impl("hardtanh")
def _hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    _check_tensor(input, "hardtanh")
    a = _arr(input)
    if a.dtype == np.bool_:
        raise RuntimeError("Bool inputs not supported for hardtanh")
    return _act_out(input, np.minimum(np.maximum(a, min_val), max_val), inplace)


@_impl("hardsigmoid")
def _hardsigmoid(input, inplace=False):
    a = _act_arr(input, "hardsigmoid")
    return _act_out(input, np.minimum(np.maximum(a + 3, 0), 6) / 6, inplace)


@_impl("hardswish")
def _hardswish(input, inplace=False):
    a = _act_arr(input, "hardswish")
    return _act_out(input, a * np.minimum(np.maximum(a + 3, 0), 6) / 6, inplace)


# --------------------------------------------------------------- reductions

class return_types:
    """Named tuples returned by max(dim), min(dim), ... (each prints as
    torch's: ``tensorplay.return_types.max(\nvalues=...,\nindices=...)``,
    set for every namedtuple here by _finish_return_types at import)."""
    max = collections.namedtuple("max", ["values", "indices"])
    min = collections.namedtuple("min", ["values", "indices"])
    var_mean = tuple
    std_mean = tuple


def _return_type_repr(self):
    body = ",\n".join(f"{k}={v!r}" for k, v in zip(self._fields, self))
    return f"tensorplay.return_types.{type(self).__name__}(\n{body})"


def _finish_return_types():
    """Give every namedtuple class in return_types torch's repr and module
    (called once the package has added all of them)."""
    for v in vars(return_types).values():
        if isinstance(v, type) and issubclass(v, tuple) and hasattr(v, "_fields"):
            v.__repr__ = _return_type_repr
            v.__module__ = "tensorplay.return_types"


def _red_prep(input, name):
    _check_tensor(input, name)
    return _arr(input)


def _acc_dtype(a, dtype, name):
    """dtype of the accumulation; ints/bools sum to int64 as torch."""
    if dtype is not None:
        return _np_dtype(dtype)
    if a.dtype.kind in "biu":
        return np.dtype(np.int64)
    return a.dtype


@_impl("sum")
def _sum(input, dim=None, keepdim=False, *, dtype=None):
    a = _red_prep(input, "sum")
    axes = _dims(dim, a.ndim)
    out = _acc_dtype(a, dtype, "sum")
    work = np.float32 if out == np.float16 else out
    r = np.sum(a, axis=axes, keepdims=keepdim, dtype=work)
    return _wrap(np.asarray(r, out), input)


@_impl("mean")
def _mean(input, dim=None, keepdim=False, *, dtype=None):
    a = _red_prep(input, "mean")
    out = _np_dtype(dtype) or a.dtype
    if out.kind != "f":
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype "
                           f"must be either a floating point or complex dtype."
                           f" Got: {_title(a.dtype)}")
    axes = _dims(dim, a.ndim)
    work = np.float32 if out == np.float16 else out
    if a.size == 0:      # NaN, silently (NumPy warns "Mean of empty slice")
        r = np.sum(a, axis=axes, keepdims=keepdim, dtype=work) / np.asarray(0, work)
    else:
        r = np.mean(a, axis=axes, keepdims=keepdim, dtype=work)
    return _wrap(np.asarray(r, out), input)


@_impl("prod")
def _prod(input, dim=None, keepdim=False, *, dtype=None):
    a = _red_prep(input, "prod")
    if dim is not None and not isinstance(dim, int):
        raise TypeError(f"prod(): argument 'dim' (position 2) must be int, "
                        f"not {type(dim).__name__}")
    axes = _dims(dim, a.ndim)
    out = _acc_dtype(a, dtype, "prod")
    if a.dtype == np.float16 and np.dtype(out) == np.float16:
        # a float16 product rounds to float16 at every step, as torch's
        # kernel: 65504 * 65504 * 0 is inf * 0 = nan, not 0 (a pairwise
        # tree: log2(n) rounded products)
        r = np.moveaxis(a, axes, tuple(range(len(axes)))) if axes else a[None]
        k = len(axes) if axes else 1
        r = r.reshape((int(np.prod(r.shape[:k], dtype=np.int64)),) + r.shape[k:])
        if r.shape[0] == 0:
            r = np.ones((1,) + r.shape[1:], np.float16)
        while r.shape[0] > 1:
            h = r.shape[0] // 2
            p = (r[:h].astype(np.float32) * r[h:2 * h].astype(np.float32)).astype(np.float16)
            r = np.concatenate([p, r[2 * h:]]) if r.shape[0] % 2 else p
        r = r[0]
        if keepdim:
            r = np.expand_dims(r, axes)
        return _wrap(np.asarray(r, out), input)
    r = np.prod(a, axis=axes, keepdims=keepdim, dtype=out)
    return _wrap(np.asarray(r, out), input)


def _check_nonempty(a, axes, name, all_dims=False):
    if all_dims and a.size == 0:
        raise RuntimeError(f"{name}(): Expected reduction dim to be specified "
                           f"for input.numel() == 0. Specify the reduction dim "
                           f"with the 'dim' argument.")
    for ax in axes:
        if a.shape[ax] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {ax} to have "
                             f"non-zero size.")
    if not axes and a.size == 0:
        raise RuntimeError(f"{name}(): Expected reduction dim to be specified "
                           f"for input.numel() == 0.")


@_impl("amax")
def _amax(input, dim=(), keepdim=False):
    a = _red_prep(input, "amax")
    axes = _dims(dim, a.ndim)
    _check_nonempty(a, axes if a.ndim else (), "amax",
                    dim is None or (isinstance(dim, (list, tuple)) and not dim))
    return _wrap(np.max(a, axis=axes, keepdims=keepdim), input)


@_impl("amin")
def _amin(input, dim=(), keepdim=False):
    a = _red_prep(input, "amin")
    axes = _dims(dim, a.ndim)
    _check_nonempty(a, axes if a.ndim else (), "amin",
                    dim is None or (isinstance(dim, (list, tuple)) and not dim))
    return _wrap(np.min(a, axis=axes, keepdims=keepdim), input)


def _minmax(name, input, dim, keepdim, red, arg, pairwise):
    if _is_t(dim):
        return _FUNCS[pairwise](input, dim)
    a = _red_prep(input, name)
    if dim is None:
        if a.size == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be "
                               f"specified for input.numel() == 0. Specify the "
                               f"reduction dim with the 'dim' argument.")
        return _wrap(red(a), input)
    d = _wrap_dim(dim, a.ndim)
    if a.ndim == 0:
        return getattr(return_types, name)(_wrap(a.copy(), input),
                                           _wrap(np.zeros((), np.int64)))
    if a.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have "
                         f"non-zero size.")
    idx = _argfirst(a, d, arg)
    vals = np.take_along_axis(a, np.expand_dims(idx, d), d)
    if not keepdim:
        vals = np.squeeze(vals, d)
    else:
        idx = np.expand_dims(idx, d)
    return getattr(return_types, name)(_wrap(vals, input), _wrap(idx.astype(np.int64)))


def _argfirst(a, d, arg):
    if a.dtype == np.bool_:
        a = a.astype(np.uint8)
    return arg(a, axis=d)   # NumPy returns the first of ties, NaN wins


@_impl("max")
def _max(input, dim=None, keepdim=False):
    return _minmax("max", input, dim, keepdim, np.max, np.argmax, "maximum")


@_impl("min")
def _min(input, dim=None, keepdim=False):
    return _minmax("min", input, dim, keepdim, np.min, np.argmin, "minimum")


def _argred(name, input, dim, keepdim, arg):
    a = _red_prep(input, name)
    if a.dtype == np.bool_:
        raise RuntimeError(f"\"{name}_cpu\" not implemented for 'Bool'")
    if dim is None:
        if a.size == 0:
            raise IndexError(f"{name}(): Expected reduction dim to be "
                             f"specified for input.numel() == 0.")
        r = np.asarray(arg(a.reshape(-1)), np.int64)
        if keepdim:
            r = r.reshape((1,) * a.ndim)
        return _wrap(r)
    d = _wrap_dim(dim, a.ndim)
    if a.ndim == 0:
        return _wrap(np.zeros((), np.int64))
    if a.shape[d] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {d} to have "
                         f"non-zero size.")
    r = arg(a, axis=d)
    if keepdim:
        r = np.expand_dims(r, d)
    return _wrap(np.asarray(r, np.int64))


@_impl("argmax")
def _argmax(input, dim=None, keepdim=False):
    return _argred("argmax", input, dim, keepdim, np.argmax)


@_impl("argmin")
def _argmin(input, dim=None, keepdim=False):
    return _argred("argmin", input, dim, keepdim, np.argmin)


def _correction(dim, unbiased, correction):
    if isinstance(dim, bool):          # var(x, True): legacy unbiased
        unbiased, dim = dim, None
    if correction is not None:
        return dim, float(correction)
    if unbiased is not None:
        return dim, 1.0 if unbiased else 0.0
    return dim, 1.0


def _var_np(name, input, dim, unbiased, keepdim, correction, sqrt=False):
    """sqrt=True: the standard deviation, its root taken at the accumulate
    precision as torch does (std of float32 1e30s is 1.15e30, not inf, and
    of a denormal spread a denormal, not 0)."""
    a = _red_prep(input, name)
    if a.dtype.kind != "f":
        raise RuntimeError(f"{name}(): input dtype should be either floating "
                           f"point or complex. Got {_title(a.dtype)} instead.")
    dim, c = _correction(dim, unbiased, correction)
    axes = _dims(dim, a.ndim)
    # torch's CPU accumulate type: double for float32, float for the 16-bit types
    work = np.float64 if a.dtype.itemsize >= 4 else np.float32
    n = int(np.prod([a.shape[x] for x in axes])) if a.ndim else 1
    mean = (np.mean(a, axis=axes, keepdims=True, dtype=work) if a.size else
            np.sum(a, axis=axes, keepdims=True, dtype=work) / np.asarray(0, work))
    w = a.astype(work)
    if a.size and a.ndim:
        # Deviations from the first element of each reduced slice, then from their mean:
        # a constant slice has variance exactly 0 (as torch's Welford gives), where
        # sum/n may round away from the value and leave a 1e-32 residue.
        d = w - w[tuple(slice(0, 1) if i in axes else slice(None) for i in range(a.ndim))]
        with np.errstate(invalid="ignore"):
            ss = np.sum(np.square(d - np.mean(d, axis=axes, keepdims=True)), axis=axes, keepdims=keepdim)
    else:
        ss = np.sum(np.square(w - mean), axis=axes, keepdims=keepdim)
    with np.errstate(all="ignore"):
        var = ss / np.asarray(_b.max(n - c, 0), work)
        if sqrt:
            var = np.sqrt(var)
    if not keepdim:
        mean = np.squeeze(mean, axis=axes) if a.ndim else mean.reshape(())
    out = np.float32 if a.dtype.itemsize < 4 else a.dtype
    return a.dtype, np.asarray(var, out), np.asarray(mean, out)


@_impl("var")
def _var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dt, v, _ = _var_np("var", input, dim, unbiased, keepdim, correction)
    return _wrap(v, input, dtype=dt)


@_impl("std")
def _std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dt, v, _ = _var_np("std", input, dim, unbiased, keepdim, correction, sqrt=True)
    return _wrap(v, input, dtype=dt)


@_impl("var_mean")
def _var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dt, v, m = _var_np("var_mean", input, dim, unbiased, keepdim, correction)
    return (_wrap(v, input, dtype=dt), _wrap(m, input, dtype=dt))


@_impl("std_mean")
def _std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dt, v, m = _var_np("std_mean", input, dim, unbiased, keepdim, correction, sqrt=True)
    return (_wrap(v, input, dtype=dt), _wrap(m, input, dtype=dt))


def _logsumexp_steps(input, dim, keepdim=False):
    """bfloat16 logsumexp as torch's CPU computes it: its decomposition
    amax, x - max, exp, sum, log, + max with every step's result rounded
    to bfloat16 (the sum accumulates in float32), so log(1 + e**-2.5) is
    0.0752, not the correctly rounded 0.0791."""
    x = input
    if x.dim() == 0 or x.numel() == 0:
        return _logsumexp(x.float(), dim, keepdim).to(x.dtype)
    axes = _dims(dim, x.dim())
    m = x.amax(dim=axes, keepdim=True)
    m = m.masked_fill(m.abs() == math.inf, 0)
    s = (x - m).exp().sum(dim=axes, keepdim=keepdim)
    if not keepdim:
        m = m.reshape(tuple(s.shape))
    return s.log() + m


@_impl("logsumexp")
def _logsumexp(input, dim, keepdim=False):
    a = _red_prep(input, "logsumexp")
    if a.dtype.kind != "f":
        a = a.astype(_default_np())
    axes = _dims(dim, a.ndim)
    if a.dtype == np.float16 and a.size:
        # torch's float16 logsumexp: its decomposition, each step rounded
        # to float16 (the sum accumulates in float32), as for bfloat16
        m = np.max(a, axis=axes, keepdims=True)
        m = np.where(np.isinf(m), np.float16(0), m)
        d = (a.astype(np.float32) - m).astype(np.float16)
        e = np.exp(d.astype(np.float32)).astype(np.float16)
        sm = np.sum(e, axis=axes, keepdims=True, dtype=np.float32).astype(np.float16)
        r = (np.log(sm.astype(np.float32)).astype(np.float16).astype(np.float32)
             + m).astype(np.float16)
        if not keepdim:
            r = np.squeeze(r, axis=axes) if a.ndim else r.reshape(())
        return _wrap(np.asarray(r, a.dtype), input)
    if a.size == 0:
        r = np.log(np.sum(np.exp(a), axis=axes, keepdims=keepdim))
        return _wrap(np.asarray(r, a.dtype), input)
    m = np.max(a, axis=axes, keepdims=True)
    m = np.where(np.isinf(m), 0, m)
    r = np.log(np.sum(np.exp(a - m), axis=axes, keepdims=True)) + m
    if not keepdim:
        r = np.squeeze(r, axis=axes) if a.ndim else r.reshape(())
    return _wrap(np.asarray(r, a.dtype), input)


@_impl("norm")
def _norm(input, p="fro", dim=None, keepdim=False, *, dtype=None):
    a = _red_prep(input, "norm")
    if a.dtype.kind != "f":
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or "
                           f"complex tensor as input. Got {_title(a.dtype)}")
    if dtype is not None:
        a = a.astype(_np_dtype(dtype))
    axes = _dims(dim, a.ndim)
    work = np.float32 if a.dtype == np.float16 else a.dtype
    x = np.abs(a.astype(work))
    if (isinstance(p, (int, float)) and p < 0 and a.ndim
            and _b.any(a.shape[k] == 0 for k in axes)):
        raise RuntimeError(f"linalg.vector_norm cannot compute the {p} norm on "
                           f"an empty tensor because the operation does not "
                           f"have an identity")
    if p is None or p == "fro" or p == 2:
        r = np.sqrt(np.sum(x * x, axis=axes, keepdims=keepdim))
    elif p == math.inf:
        r = np.max(x, axis=axes, keepdims=keepdim, initial=0)
    elif p == -math.inf:
        r = np.min(x, axis=axes, keepdims=keepdim)
    elif p == 0:
        r = np.sum(x != 0, axis=axes, keepdims=keepdim).astype(work)
    elif p == 1:
        r = np.sum(x, axis=axes, keepdims=keepdim)
    else:
        r = np.sum(x ** p, axis=axes, keepdims=keepdim) ** (1.0 / p)
    return _wrap(np.asarray(r, a.dtype), input)


@_impl("all")
def _all(input, dim=None, keepdim=False):
    a = _red_prep(input, "all")
    # torch: an empty dim list reduces nothing here (sum and mean reduce all)
    axes = () if isinstance(dim, (list, tuple)) and len(dim) == 0 else _dims(dim, a.ndim)
    r = np.all(a, axis=axes, keepdims=keepdim)
    return _wrap(np.asarray(r, np.uint8 if a.dtype == np.uint8 else np.bool_))


@_impl("any")
def _any(input, dim=None, keepdim=False):
    a = _red_prep(input, "any")
    # torch: an empty dim list reduces nothing here (sum and mean reduce all)
    axes = () if isinstance(dim, (list, tuple)) and len(dim) == 0 else _dims(dim, a.ndim)
    r = np.any(a, axis=axes, keepdims=keepdim)
    return _wrap(np.asarray(r, np.uint8 if a.dtype == np.uint8 else np.bool_))


def _cum_acc(fn, a, d, out):
    """fn (np.cumsum / np.cumprod) along d accumulated as torch's CPU kernel
    does (at::acc_type): a float16 result in float32 (a float16 running sum
    stops growing at 2048 when adding ones), a float32 one in float64, each
    running value rounded once to the result dtype."""
    if np.dtype(out) in (np.float16, np.float32):
        acc = np.float32 if np.dtype(out) == np.float16 else np.float64
        r = fn(a, axis=d, dtype=acc)
        if fn is np.cumsum:
            r = r + acc(0.0)    # torch's running sum starts at +0: -0.0 + 0 = 0
        return r.astype(out)
    return fn(a, axis=d, dtype=out)


@_impl("cumsum")
def _cumsum(input, dim, *, dtype=None):
    a = _red_prep(input, "cumsum")
    d = _wrap_dim(dim, a.ndim)
    out = _acc_dtype(a, dtype, "cumsum")
    if a.ndim == 0:
        return _wrap(np.asarray(a, out), input)
    return _wrap(_cum_acc(np.cumsum, a, d, out), input)


# --------------------------------------------------------------- composites

def _softmax_dim(dim, ndim, name="softmax", stacklevel=4):
    """PyTorch's implicit dim (deprecated, with the same UserWarning):
    0 for 0-, 1- and 3-d inputs, else 1."""
    if dim is None:
        import warnings
        warnings.warn(f"Implicit dimension choice for {name} has been "
                      f"deprecated. Change the call to include dim=X as an "
                      f"argument.", UserWarning, stacklevel=stacklevel)
        return 0 if ndim in (0, 1, 3) else 1
    return dim


def _softmax_np(a, d, log):
    m = np.max(a, axis=d, keepdims=True) if a.size else 0
    # a row of -inf has max -inf: shift by 0 so it gives 0/0 = NaN as torch;
    # a row holding +inf keeps its max, so inf - inf makes the row NaN as torch
    m = np.where(m == -np.inf, 0, m) if a.size else 0
    e = np.exp(a - m)
    s = np.sum(e, axis=d, keepdims=True)
    if log:
        return a - m - np.log(s)
    return e / s


def _softmax_common(name, input, dim, dtype, log):
    _check_tensor(input, name)
    a = _arr(input)
    if dtype is not None:
        a = a.astype(_np_dtype(dtype))
    if a.dtype.kind != "f":
        raise NotImplementedError(f"\"{name}_lastdim_kernel_impl\" not implemented "
                           f"for '{_title(a.dtype)}'")
    d = _wrap_dim(_softmax_dim(dim, a.ndim, name), a.ndim)
    if a.ndim == 0:
        return _wrap(np.asarray(0.0 if log else 1.0, a.dtype), input)
    work = np.float32 if a.dtype == np.float16 else a.dtype
    r = _softmax_np(a.astype(work), d, log)
    return _wrap(np.asarray(r, a.dtype), input)


@_impl("softmax")
def _softmax(input, dim=None, _stacklevel=3, dtype=None):
    return _softmax_common("softmax", input, dim, dtype, False)


@_impl("_safe_softmax")
def _safe_softmax(input, dim, dtype=None):
    """softmax along dim, 0 (not NaN) over a slice that is all -inf (torch's
    _safe_softmax, what SDPA's math kernel uses for fully masked rows)."""
    r = _softmax_common("softmax", input, dim, dtype, False)
    a = _arr(input)
    d = _wrap_dim(dim, a.ndim or 1)
    if a.ndim == 0:
        return r if a != -np.inf else _wrap(np.zeros((), _arr(r).dtype), input)
    dead = np.all(a == -np.inf, axis=d, keepdims=True)
    if not dead.any():
        return r
    return _wrap(np.where(dead, np.zeros((), _arr(r).dtype), _arr(r)), input)


@_impl("log_softmax")
def _log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    return _softmax_common("log_softmax", input, dim, dtype, True)


def _ln_np(input, normalized_shape, weight, bias, eps):
    _check_tensor(input, "layer_norm")
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    ns = tuple(int(s) for s in normalized_shape)
    a = _arr(input)
    k = len(ns)
    if k == 0 or a.ndim < k or tuple(a.shape[a.ndim - k:]) != ns:
        raise RuntimeError(f"Given normalized_shape={list(ns)}, expected input "
                           f"with shape [*, {', '.join(map(str, ns))}], but got "
                           f"input of size{list(a.shape)}")
    if a.dtype.kind != "f":
        raise NotImplementedError(f"\"LayerNormKernelImpl\" not implemented for "
                           f"'{_title(a.dtype)}'")
    axes = tuple(range(a.ndim - k, a.ndim))
    work = np.float32 if a.dtype == np.float16 else a.dtype
    x = a.astype(work)
    mean = np.mean(x, axis=axes, keepdims=True)
    var = np.mean(np.square(x - mean), axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(var + np.asarray(eps, work))
    y = (x - mean) * rstd
    for p, f in ((weight, np.multiply), (bias, np.add)):
        if p is not None:
            pa = _arr(p)
            if tuple(pa.shape) != ns:
                raise RuntimeError(f"Expected weight/bias to be of same shape as"
                                   f" normalized_shape, but got shape "
                                   f"{list(pa.shape)} and normalized_shape = "
                                   f"{list(ns)}")
            y = f(y, pa.astype(work))
    return a.dtype, y, mean, rstd


@_impl("layer_norm")
def _layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05):
    dt, y, _, _ = _ln_np(input, normalized_shape, weight, bias, eps)
    return _wrap(y, input, weight, bias, dtype=dt)


@_impl("native_layer_norm")
def _native_layer_norm(input, normalized_shape, weight, bias, eps):
    dt, y, mean, rstd = _ln_np(input, normalized_shape, weight, bias, eps)
    return (_wrap(y, input, weight, bias, dtype=dt), _wrap(mean, input),
            _wrap(rstd, input))


@_impl("batch_norm")
def _batch_norm(input, running_mean, running_var, weight=None, bias=None,
                training=False, momentum=0.1, eps=1e-05):
    _check_tensor(input, "batch_norm")
    a = _arr(input)
    if a.dtype.kind != "f":
        raise NotImplementedError(f"\"batch_norm\" not implemented for '{_title(a.dtype)}'")
    if a.ndim < 2:
        raise ValueError(f"Expected 2D or 3D input (got {a.ndim}D input)")
    c = a.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if _is_t(t) and t.numel() != c:
            raise RuntimeError(f"{name} should contain {c} elements not {t.numel()}")
    axes = (0,) + tuple(range(2, a.ndim))
    shape = [1] * a.ndim
    shape[1] = c
    work = np.float32 if a.dtype == np.float16 else a.dtype
    x = a.astype(work)
    n = a.size // _b.max(c, 1)
    if training:
        if n <= 1:
            raise ValueError(f"Expected more than 1 value per channel when "
                             f"training, got input size {list(a.shape)}")
        mean = np.mean(x, axis=axes)
        var = np.mean(np.square(x - mean.reshape(shape)), axis=axes)
        if running_mean is not None:
            rm = _arr(running_mean)
            _C._ops_will_write(running_mean)
            rm[...] = (1 - momentum) * rm + momentum * mean
            _C._ops_bump_version(running_mean)
        if running_var is not None:
            rv = _arr(running_var)
            _C._ops_will_write(running_var)
            rv[...] = (1 - momentum) * rv + momentum * var * (n / (n - 1))
            _C._ops_bump_version(running_var)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("running_mean and running_var must be defined "
                               "in evaluation mode")
        mean = _arr(running_mean).astype(work)
        var = _arr(running_var).astype(work)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    if weight is not None:
        y = y * _arr(weight).astype(work).reshape(shape)
    if bias is not None:
        y = y + _arr(bias).astype(work).reshape(shape)
    return _wrap(y, input, weight, bias, dtype=a.dtype)


def _rand_like(x, dtype=None):
    f = getattr(_C, "rand", None)
    shape = tuple(x.shape)
    import tensorplay
    return tensorplay.rand(*shape, dtype=dtype or x.dtype) if f is None \
        else tensorplay.rand(*shape, dtype=dtype or x.dtype)


@_impl("dropout")
def _dropout(input, p=0.5, training=True, inplace=False):
    """keep = rand_like(x) >= p (the global Philox stream); x * keep / (1 - p)."""
    _check_tensor(input, "dropout")
    if p < 0 or p > 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but "
                         f"got {p}")
    if not training or p == 0:
        return input
    a = _arr(input)
    if p == 1:
        r = np.zeros_like(a)
    else:
        u = _arr(_rand_like(input))
        r = np.where(u >= p, a / np.asarray(1 - p, a.dtype), 0).astype(a.dtype)
    return _act_out(input, r, inplace)


@_impl("embedding")
def _embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
               scale_grad_by_freq=False, sparse=False):
    idx = _arr(input)
    w = _arr(weight)
    if w.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    if idx.dtype.kind not in "iu":
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have "
                           f"one of the following scalar types: Long, Int; but "
                           f"got {_title(idx.dtype)} instead")
    if idx.size and (idx.min() < 0 or idx.max() >= w.shape[0]):
        raise IndexError("index out of range in self")
    if max_norm is not None:
        # torch renormalizes the indexed rows of weight in place first
        from tensorplay._native_decomps import embedding_renorm_
        embedding_renorm_(weight, input, max_norm, norm_type)
        w = _arr(weight)
    return _wrap(np.take(w, idx, axis=0), weight)


def _legacy_reduction(size_average, reduce, reduction):
    """torch's pre-0.4 loss arguments: size_average / reduce given (either
    one) decide the reduction and override ``reduction``, with torch's
    deprecation warning ("please use reduction='sum' instead")."""
    if size_average is None and reduce is None:
        return reduction
    if reduce is None or reduce:
        r = "mean" if (size_average is None or size_average) else "sum"
    else:
        r = "none"
    import warnings
    warnings.warn(f"size_average and reduce args will be deprecated, please use "
                  f"reduction='{r}' instead.", UserWarning, stacklevel=3)
    return r


def _reduce_loss(r, reduction, *inputs):
    if reduction == "none":
        return _wrap(r, *inputs)
    if reduction == "mean":
        return _wrap(np.mean(r), *inputs)
    if reduction == "sum":
        return _wrap(np.sum(r), *inputs)
    raise ValueError(f"{reduction} is not a valid value for reduction")


_SIZE_WARNED_LOSSES = frozenset(("mse_loss", "l1_loss", "smooth_l1_loss"))


def _warn_target_size(input, target):
    """torch's warning for a pointwise loss whose target broadcasts against
    the input (the (N, 1) output vs (N,) target mistake)."""
    if input.shape != target.shape:
        import os
        import sys
        import warnings
        # point at the user's line: the first frame outside this package
        pkg = os.path.dirname(os.path.abspath(__file__))
        f, level = sys._getframe(1), 2
        while f is not None and f.f_code.co_filename.startswith(pkg):
            f, level = f.f_back, level + 1
        warnings.warn(f"Using a target size ({target.shape}) that is different to the input "
                      f"size ({input.shape}). This will likely lead to incorrect results due "
                      "to broadcasting. Please ensure they have the same size.",
                      UserWarning, stacklevel=level)


def _loss_pair(input, target, name):
    _check_tensor(input, name)
    _check_tensor(target, name, "target", 2)
    if name in _SIZE_WARNED_LOSSES:
        _warn_target_size(input, target)
    rt = _result_np(input, target)
    a, b = np.asarray(_arr(input), rt), np.asarray(_arr(target), rt)
    _bshape(a, b)
    return a, b, rt


@_impl("mse_loss")
def _mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    a, b, rt = _loss_pair(input, target, "mse_loss")
    d = a - b
    return _reduce_loss(np.asarray(d * d, rt), reduction, input, target)


@_impl("l1_loss")
def _l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    a, b, rt = _loss_pair(input, target, "l1_loss")
    return _reduce_loss(np.abs(a - b), reduction, input, target)


@_impl("smooth_l1_loss")
def _smooth_l1_loss(input, target, size_average=None, reduce=None,
                    reduction="mean", beta=1.0):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    a, b, rt = _loss_pair(input, target, "smooth_l1_loss")
    d = np.abs(a - b)
    if beta == 0:
        r = d
    else:
        r = np.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
    return _reduce_loss(np.asarray(r, rt), reduction, input, target)


def _nll_np(logp, tgt, weight, ignore_index, reduction):
    # logp: (N, C, ...) or (C,); tgt: (N, ...) or ()
    if logp.ndim == 1:
        if np.ndim(tgt) > 1:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        if np.size(tgt) != 1:
            raise ValueError(f"For 1D input, 1D target must have size 1, but got target "
                             f"size: {np.size(tgt)}")
        logp = logp[None]
        tgt = np.asarray(tgt).reshape(1)
        squeeze = True
    else:
        squeeze = False
    c = logp.shape[1]
    if tgt.dtype not in (np.int64, np.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got "
                           f"{_title(tgt.dtype)}")
    if not squeeze and tgt.ndim >= 1 and tgt.shape[0] != logp.shape[0]:
        raise ValueError(f"Expected input batch_size ({logp.shape[0]}) to match target "
                         f"batch_size ({tgt.shape[0]}).")
    if logp.ndim == 2 and tgt.ndim > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if tgt.shape != (logp.shape[0],) + logp.shape[2:]:
        raise RuntimeError(f"Expected target size {[logp.shape[0]] + list(logp.shape[2:])}"
                           f", got {list(tgt.shape)}")
    valid = tgt != ignore_index
    t = np.where(valid, tgt, 0)
    if t.size and (t.min() < 0 or t.max() >= c):
        raise IndexError(f"Target {int(t.max() if t.max() >= c else t.min())}"
                         f" is out of bounds.")
    picked = np.take_along_axis(logp, np.expand_dims(t, 1), 1).squeeze(1)
    w = np.ones(c, logp.dtype) if weight is None else _arr(weight).astype(logp.dtype)
    wt = w[t] * valid
    loss = -picked * wt
    if reduction == "none":
        return loss[0] if squeeze else loss
    if reduction == "sum":
        return np.sum(loss)
    if reduction == "mean":
        return np.sum(loss) / np.sum(wt)
    raise ValueError(f"{reduction} is not a valid value for reduction")


@_impl("nll_loss")
def _nll_loss(input, target, weight=None, size_average=None, ignore_index=-100,
              reduce=None, reduction="mean"):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_tensor(input, "nll_loss")
    r = _nll_np(_arr(input), _arr(target), weight, ignore_index, reduction)
    return _wrap(np.asarray(r, _arr(input).dtype), input)


@_impl("cross_entropy")
def _cross_entropy(input, target, weight=None, size_average=None,
                   ignore_index=-100, reduce=None, reduction="mean",
                   label_smoothing=0.0):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_tensor(input, "cross_entropy")
    a = _arr(input)
    if a.dtype.kind != "f":
        raise NotImplementedError(f"\"log_softmax_lastdim_kernel_impl\" not "
                           f"implemented for '{_title(a.dtype)}'")
    d = 0 if a.ndim == 1 else 1
    work = np.float32 if a.dtype == np.float16 else a.dtype
    logp = _softmax_np(a.astype(work), d, True)
    t = _arr(target)
    c = a.shape[d]
    if t.shape == a.shape:        # class probabilities (torch: same shape)
        if t.dtype.kind != "f":
            raise RuntimeError(f"Expected floating point type for target with class "
                               f"probabilities, got {_title(t.dtype)}")
        tt = t.astype(work)
        if label_smoothing:
            tt = tt * (1 - label_smoothing) + label_smoothing / c
        w = 1 if weight is None else _arr(weight).astype(work).reshape(
            [c] + [1] * (a.ndim - d - 1))
        loss = -np.sum(logp * tt * w, axis=d)
        if reduction == "mean":
            r = np.sum(loss) / (loss.size // 1 if a.ndim > 1 else 1) if a.ndim > 1 else loss
            r = np.mean(loss) if a.ndim > 1 else loss
        elif reduction == "sum":
            r = np.sum(loss)
        else:
            r = loss
        return _wrap(np.asarray(r, a.dtype), input)
    r = _nll_np(logp, t, weight, ignore_index, reduction)
    if label_smoothing:
        lp = logp if logp.ndim > 1 else logp[None]
        tt = t if logp.ndim > 1 else t.reshape(1)
        valid = tt != ignore_index
        w = np.ones(c, work) if weight is None else _arr(weight).astype(work)
        smooth = -np.sum(lp * w.reshape([c] + [1] * (lp.ndim - 2)), axis=1) * valid
        if reduction == "mean":
            if weight is None:
                s = np.sum(smooth) / _b.max(np.sum(valid), 1)
            else:
                s = np.sum(smooth) / np.sum(w[np.where(valid, tt, 0)] * valid)
        elif reduction == "sum":
            s = np.sum(smooth)
        else:
            s = smooth if logp.ndim > 1 else smooth[0]
        r = (1 - label_smoothing) * r + label_smoothing * s / c
    return _wrap(np.asarray(r, a.dtype), input)


@_impl("binary_cross_entropy_with_logits")
def _bce_logits(input, target, weight=None, size_average=None, reduce=None,
                reduction="mean", pos_weight=None):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    a, b, rt = _loss_pair(input, target, "binary_cross_entropy_with_logits")
    if a.shape != b.shape:
        raise ValueError(f"Target size ({target.shape}) must be the same as "
                         f"input size ({input.shape})")
    sp = np.log1p(np.exp(-np.abs(a))) + np.maximum(-a, 0)
    if pos_weight is not None:
        lw = 1 + (np.asarray(_arr(pos_weight), rt) - 1) * b
        r = (1 - b) * a + lw * sp
    else:
        r = (1 - b) * a + sp
    if weight is not None:
        r = r * np.asarray(_arr(weight), rt)
    return _reduce_loss(np.asarray(r, rt), reduction, input, target)


@_impl("pad")
def _pad(input, pad, mode="constant", value=None):
    """torch.nn.functional.pad with torch 2.13's acceptance rules: constant
    pads any trailing dims (a negative pad narrows); reflect/replicate/
    circular pad the last 1, 2 or 3 dims of a (batched) 2-D/3-D, 3-D/4-D or
    4-D/5-D input only, each with its kernel's checks and messages."""
    _check_tensor(input, "pad")
    a = _arr(input)
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    for i, p in _b.enumerate(pad):
        if not isinstance(p, (int, np.integer)) or isinstance(p, bool):
            raise TypeError(f"pad(): argument 'pad' (position 2) must be tuple of ints, "
                            f"but found element of type {type(p).__name__} at pos {i}")
    pad = [int(p) for p in pad]
    nd = a.ndim
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) > 2 * nd:
        raise RuntimeError(f"Padding length should be less than or equal to two times "
                           f"the input dimension but got padding length {len(pad)} and "
                           f"input of dimension {nd}")
    if mode == "constant":
        return _wrap(_pad_constant(a, pad, 0 if value is None else value), input)
    if value is not None and value != 0:
        raise RuntimeError(f"Padding mode \"{mode}\" doesn't take in value argument")
    k = len(pad) // 2
    if k not in (1, 2, 3) or nd not in (k + 1, k + 2):
        raise NotImplementedError(
            f"Padding size {len(pad)} is not supported for {nd}D input tensor.\n"
            "Supported combinations for non-constant padding:\n"
            "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
            "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
            "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")
    if mode == "circular":
        return _wrap(_pad_circular(a, pad), input)
    # the reflection/replication kernels: non-empty dims but a batch's
    sizes = list(a.shape)
    if 0 in (sizes[1:] if nd == k + 2 else sizes):
        raise RuntimeError(f"Expected {k + 1}D or {k + 2}D (batch mode) tensor with possibly 0 "
                           f"batch size and other non-zero dimensions for input, but got: "
                           f"{sizes}")
    dims = [nd - 1 - i for i in range(k)]           # W, H, D
    pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(k)]
    if mode == "reflect":
        for i, (d, (lo, hi)) in _b.enumerate(_b.zip(dims, pairs)):
            if not (lo < sizes[d] and hi < sizes[d]):
                raise RuntimeError(f"Argument #{4 + 2 * i}: Padding size should be less "
                                   f"than the corresponding input dimension, but got: "
                                   f"padding ({lo}, {hi}) at dimension {d} of input {sizes}")
    outs = [sizes[d] + lo + hi for d, (lo, hi) in _b.zip(dims, pairs)]
    if not _b.any(o >= 1 for o in outs):
        names = "WHD"[:k][::-1]
        ins = [sizes[dims[names[::-1].index(n)]] for n in names]
        os_ = [outs[names[::-1].index(n)] for n in names]
        if k == 1:
            msg = f"input (W: {ins[0]}) is too small. Calculated output W: {os_[0]}"
        elif k == 2:
            gap = " " if mode == "replicate" else ""
            msg = (f"input (H: {ins[0]}, W: {ins[1]}{gap}) is too small. Calculated output "
                   f"H: {os_[0]} W: {os_[1]}")
        else:
            msg = (f"input (D: {ins[0]} H: {ins[1]}, W: {ins[2]}) is too small. Calculated "
                   f"output D: {os_[0]} H: {os_[1]} W: {os_[2]}")
        raise RuntimeError(msg)
    full = list(sizes)
    for d, o in _b.zip(dims, outs):
        full[d] = o
    for o in full:
        if o < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {o}: {full}")
    r = a
    for d, (lo, hi), o in _b.zip(dims, pairs, outs):
        r = np.take(r, _pad_source_index(sizes[d], lo, hi, o, mode), axis=d)
    return _wrap(np.ascontiguousarray(r), input)


def _pad_constant(a, pad, value):
    """constant_pad_nd: each negative pad narrows (left first, torch's
    narrow error when nothing is left), then value fills the positive ones."""
    nd = a.ndim
    crop = [slice(None)] * nd
    widths = [(0, 0)] * nd
    for i in range(len(pad) // 2):
        d = nd - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        n = a.shape[d]
        start = 0
        if lo < 0:
            if n + lo < 0:
                raise RuntimeError("narrow(): length must be non-negative.")
            start, n = -lo, n + lo
        if hi < 0:
            if n + hi < 0:
                raise RuntimeError("narrow(): length must be non-negative.")
            n += hi
        crop[d] = slice(start, start + n)
        widths[d] = (_b.max(lo, 0), _b.max(hi, 0))
    a = a[tuple(crop)]
    if nd == 0:
        return a.copy()
    return np.asarray(np.pad(a, widths, mode="constant", constant_values=value), a.dtype)


def _pad_source_index(n, lo, hi, out, mode):
    """For each output position along a padded dim, the input position the
    reflection/replication kernels read (their index formula, valid for
    negative pads too)."""
    j = np.arange(out)
    if mode == "reflect":
        src = np.where(j < lo, 2 * lo - j, np.where(j < n + lo, j, 2 * (n + lo - 1) - j))
    else:
        src = np.where(j < lo, lo, np.where(j < n + lo, j, n + lo - 1))
    src = src - _b.max(lo, 0) + _b.max(-lo, 0)
    return np.clip(src, 0, n - 1)


def _pad_circular(a, pad):
    """torch's _pad_circular: the input (narrowed by negative pads) copied
    into the middle, then each positive pad copied from the other end of the
    output itself, dim by dim; torch's checks, and its overlap error where a
    wrap copy would read what it writes."""
    nd, k = a.ndim, len(pad) // 2
    lead = nd - k
    out_shape = list(a.shape)
    for i in range(k):
        lo, hi = pad[2 * (k - i - 1)], pad[2 * (k - i - 1) + 1]
        size = a.shape[lead + i]
        out_shape[lead + i] = size + lo + hi
        if not (lo <= size and hi <= size):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if out_shape[lead + i] < 0:
            raise RuntimeError("Negative padding value is resulting in an empty dimension")
    out = np.zeros(out_shape, a.dtype)
    osl, isl = [slice(None)] * nd, [slice(None)] * nd
    for i in range(k):
        d = k - i + lead - 1
        lo, hi = pad[2 * i], pad[2 * i + 1]
        osl[d] = slice(_b.max(lo, 0), out_shape[d] - _b.max(hi, 0))
        isl[d] = slice(_b.max(-lo, 0), a.shape[d] - _b.max(-hi, 0))
    _copy_into(out[tuple(osl)], a[tuple(isl)])
    for i in range(k):
        d = k - i + lead - 1
        lo, hi = pad[2 * i], pad[2 * i + 1]
        n = out_shape[d]
        copies = []
        if lo > 0:
            copies.append(((0, lo), (n - lo - _b.max(hi, 0), n - _b.max(hi, 0))))
        if hi > 0:
            copies.append(((n - hi, n), (_b.max(lo, 0), _b.max(lo, 0) + hi)))
        for (w0, w1), (r0, r1) in copies:
            ws, rs = range(*slice(w0, w1).indices(n)), range(*slice(r0, r1).indices(n))
            wsl, rsl = [slice(None)] * nd, [slice(None)] * nd
            wsl[d], rsl[d] = slice(w0, w1), slice(r0, r1)
            if not (len(ws) and len(rs) and ws != rs and set(ws) & set(rs)):
                _copy_into(out[tuple(wsl)], out[tuple(rsl)])
                continue
            # a wrap that reads what it writes (pads beyond what negative
            # pads left): torch's copy_ refuses it between dense slices,
            # else copies forward element by element
            dense = _b.all(e == 1 for e in out_shape[:d])
            if dense or (len(ws) == n and len(rs) == n):
                raise RuntimeError("unsupported operation: some elements of the input tensor "
                                   "and the written-to tensor refer to a single memory "
                                   "location. Please clone() the tensor before performing "
                                   "the operation.")
            _copy_into(out[tuple(wsl)], out[tuple(rsl)])   # shapes: torch's error
            for w, r in _b.zip(ws, rs):
                wsl[d], rsl[d] = w, r
                out[tuple(wsl)] = out[tuple(rsl)]
    return out


def _copy_into(dst, src):
    """dst.copy_(src) of same-rank arrays: src broadcasts, else torch's
    size-mismatch error."""
    for i, (p, q) in _b.enumerate(_b.zip(dst.shape, src.shape)):
        if p != q and q != 1:
            raise RuntimeError(f"The size of tensor a ({p}) must match the size of tensor b "
                               f"({q}) at non-singleton dimension {i}")
    dst[...] = src


# ------------------------------------------------------------------ extern

# torch names a dtype in its matmul messages by the C type (float, double,
# c10::Half, long int, ...) or by the ScalarType name (Float, Double, ...)
_C_TYPE = {"float32": "float", "float64": "double", "float16": "c10::Half",
           "bfloat16": "c10::BFloat16", "int64": "long int", "int32": "int",
           "int16": "short int", "int8": "signed char", "uint8": "unsigned char", "bool": "bool"}
_SCALAR_TYPE = {"float32": "Float", "float64": "Double", "float16": "Half",
                "bfloat16": "BFloat16", "int64": "Long", "int32": "Int", "int16": "Short",
                "int8": "Char", "uint8": "Byte", "bool": "Bool"}


def _dt_name(dt):
    return str(dt).split(".")[-1] if not isinstance(dt, np.dtype) else dt.name


def _mm_check(a, b, name):
    if a.dtype != b.dtype and name == "bmm":
        raise RuntimeError(f"expected scalar type {_SCALAR_TYPE.get(_dt_name(a.dtype))} but "
                           f"found {_SCALAR_TYPE.get(_dt_name(b.dtype))}")
    if a.dtype != b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but "
                           f"got: {_C_TYPE.get(_dt_name(a.dtype))} != "
                           f"{_C_TYPE.get(_dt_name(b.dtype))}")


def _linear_dtype_check(input, weight, bias):
    """torch's linear: with a bias it is addmm (its messages), without one
    a matmul."""
    if bias is None:
        _mm_check(input, weight, "linear")
        return
    _mm_bias_check(bias, weight)
    if input.dtype != weight.dtype:
        raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got "
                           f"{_SCALAR_TYPE.get(_dt_name(input.dtype))} and "
                           f"{_SCALAR_TYPE.get(_dt_name(weight.dtype))}")


def _mm_bias_check(bias, mat):
    """addmm / linear: the added tensor's dtype must be the product's."""
    if bias is not None and bias.dtype != mat.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got "
                           f"{_SCALAR_TYPE.get(_dt_name(bias.dtype))} and "
                           f"{_SCALAR_TYPE.get(_dt_name(mat.dtype))}")


@_impl("matmul")
def _matmul(input, other):
    _check_tensor(input, "matmul")
    _check_tensor(other, "matmul", "other", 2)
    a, b = _arr(input), _arr(other)
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, "
                           f"but they are {a.ndim}D and {b.ndim}D")
    _mm_check(a, b, "matmul")
    ka = a.shape[-1]
    kb = b.shape[-2] if b.ndim > 1 else b.shape[0]
    if ka != kb:
        if a.ndim == 1 and b.ndim == 1:
            raise RuntimeError(f"inconsistent tensor size, expected tensor "
                               f"[{a.shape[0]}] and src [{b.shape[0]}] to have"
                               f" the same number of elements, but got "
                               f"{a.shape[0]} and {b.shape[0]} elements "
                               f"respectively")
        sa = "x".join(map(str, (int(np.prod(a.shape[:-1])), ka))) if a.ndim > 1 else f"1x{ka}"
        sb = f"{kb}x{b.shape[-1]}" if b.ndim > 1 else f"{kb}x1"
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied "
                           f"({sa} and {sb})")
    return _wrap(np.matmul(a, b), input, other)


@_impl("mm")
def _mm(input, mat2):
    _check_tensor(input, "mm")
    _check_tensor(mat2, "mm", "mat2", 2)
    a, b = _arr(input), _arr(mat2)
    if a.ndim != 2:
        raise RuntimeError("self must be a matrix")
    if b.ndim != 2:
        raise RuntimeError("mat2 must be a matrix")
    return _matmul(input, mat2)


@_impl("bmm")
def _bmm(input, mat2):
    _check_tensor(input, "bmm")
    a, b = _arr(input), _arr(mat2)
    if a.ndim != 3:
        raise RuntimeError(f"batch1 must be a 3D tensor")
    if b.ndim != 3:
        raise RuntimeError(f"batch2 must be a 3D tensor")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 "
                           f"tensor to be: [{a.shape[0]}, {a.shape[2]}] but "
                           f"got: [{b.shape[0]}, {b.shape[1]}].")
    _mm_check(a, b, "bmm")
    return _wrap(np.matmul(a, b), input, mat2)


@_impl("linear")
def _linear(input, weight, bias=None):
    _check_tensor(input, "linear")
    _check_tensor(weight, "linear", "weight", 2)
    a, w = _arr(input), _arr(weight)
    _linear_dtype_check(input, weight, bias)
    if a.shape[-1] != w.shape[-1]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied "
                           f"({int(np.prod(a.shape[:-1]))}x{a.shape[-1]} and "
                           f"{w.shape[-1]}x{w.shape[0] if w.ndim > 1 else 1})")
    r = np.matmul(a, w.T)
    if bias is not None:
        b = _arr(bias)
        _expand_check(b.shape, r.shape)
        r = r + b
    return _wrap(np.asarray(r, a.dtype), input, weight, bias)


def _expand_check(have, want):
    """torch's errors for expanding a tensor of shape have to want (a bias
    is expanded to the output, never broadcast past it)."""
    have, want = list(have), list(want)
    if len(have) > len(want):
        raise RuntimeError(f"expand(torch.FloatTensor{{{have}}}, size={want}): the number of "
                           f"sizes provided ({len(want)}) must be greater or equal to the "
                           f"number of dimensions in the tensor ({len(have)})")
    for i in range(1, len(have) + 1):
        if have[-i] != want[-i] and have[-i] != 1:
            d = len(want) - i
            raise RuntimeError(f"The expanded size of the tensor ({want[-i]}) must match the "
                               f"existing size ({have[-i]}) at non-singleton dimension {d}.  "
                               f"Target sizes: {want}.  Tensor sizes: {have}")


# ------------------------------------------------------------------- other

def _tensor_list(tensors, name):
    if _is_t(tensors) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{name}(): argument 'tensors' (position 1) must be "
                        f"tuple of Tensors, not {type(tensors).__name__}")
    for i, t in enumerate(tensors):
        if not _is_t(t):
            raise TypeError(f"expected Tensor as element {i} in argument 0, "
                            f"but got {type(t).__name__}")
    if len(tensors) == 0:
        if name == "cat":
            raise ValueError("cat(): expected a non-empty list of Tensors")
        raise RuntimeError(f"{name} expects a non-empty TensorList")


@_impl("cat")
def _cat(tensors, dim=0):
    _tensor_list(tensors, "cat")
    arrs = [_arr(t) for t in tensors]
    rt = _result_np(*tensors) if len(tensors) > 1 else arrs[0].dtype
    live = [(i, a) for i, a in enumerate(arrs) if not (a.ndim == 1 and a.shape[0] == 0)]
    if not live:
        return _wrap(np.zeros((0,), rt), *tensors)
    ref_i, ref = live[0]
    if ref.ndim == 0:
        raise RuntimeError(f"zero-dimensional tensor (at position {ref_i}) "
                           f"cannot be concatenated")
    d = _wrap_dim(dim, ref.ndim)
    for i, a in live[1:]:
        if a.ndim != ref.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: "
                               f"got {ref.ndim} and {a.ndim}")
        for k in range(ref.ndim):
            if k != d and a.shape[k] != ref.shape[k]:
                raise RuntimeError(f"Sizes of tensors must match except in "
                                   f"dimension {d}. Expected size "
                                   f"{ref.shape[k]} but got size {a.shape[k]} "
                                   f"for tensor number {i} in the list.")
    return _wrap(np.concatenate([a.astype(rt, copy=False) for _, a in live], axis=d), *tensors)


@_impl("stack")
def _stack(tensors, dim=0):
    _tensor_list(tensors, "stack")
    arrs = [_arr(t) for t in tensors]
    for i, a in enumerate(arrs[1:], 1):
        if a.shape != arrs[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, "
                               f"but got {list(arrs[0].shape)} at entry 0 and "
                               f"{list(a.shape)} at entry {i}")
    d = _wrap_dim(dim, arrs[0].ndim + 1)
    rt = _result_np(*tensors) if len(tensors) > 1 else arrs[0].dtype
    return _wrap(np.stack([a.astype(rt, copy=False) for a in arrs], axis=d), *tensors)


def _index_arr(index, name):
    i = _arr(index)
    # torch: int32 or int64 only (int8/int16/uint8 and bool are refused)
    if not _is_t(index) or i.dtype not in (np.int64, np.int32):
        raise RuntimeError(f"{name}(): Expected dtype int32 or int64 for index"
                           if name == "index_select" else
                           f"{name}(): Expected dtype int32/int64 for index")
    return i.astype(np.int64)


@_impl("index_select")
def _index_select(input, dim, index):
    _check_tensor(input, "index_select")
    a = _arr(input)
    i = _index_arr(index, "index_select")
    if i.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    d = _wrap_dim(dim, a.ndim)
    if a.ndim == 0:
        return _wrap(a.copy(), input)
    n = a.shape[d]
    # torch's CPU kernel does not wrap negative indices
    if i.size and (i.min() < 0 or i.max() >= n):
        raise IndexError("index out of range in self")
    return _wrap(np.take(a, i.reshape(-1), axis=d), input)


@_impl("gather")
def _gather(input, dim, index, *, sparse_grad=False):
    _check_tensor(input, "gather")
    a = _arr(input)
    i = _index_arr(index, "gather")
    d = _wrap_dim(dim, a.ndim)
    if i.ndim != a.ndim and not (a.ndim == 0 or i.ndim == 0):
        raise RuntimeError("Index tensor must have the same number of "
                           "dimensions as input tensor")
    if a.ndim == 0:
        return _wrap(a.copy(), input)
    for k in range(a.ndim):
        if k != d and i.shape[k] > a.shape[k]:
            raise RuntimeError(f"Size does not match at dimension {k} expected "
                               f"index {list(i.shape)} to be smaller than self "
                               f"{list(a.shape)} apart from dimension {d}")
    n = a.shape[d]
    bad = (i < 0) | (i >= n)     # torch: no negative indices for gather
    if bad.any():
        raise RuntimeError(f"index {int(i[bad].flat[0])} is out of bounds for "
                           f"dimension {d} with size {n}")
    sl = tuple(slice(0, i.shape[k]) if k != d else slice(None) for k in range(a.ndim))
    return _wrap(np.take_along_axis(a[sl], i, axis=d), input)


@_impl("slice")
def _slice(input, dim=0, start=None, end=None, step=1):
    d = _wrap_dim(dim, input.dim())
    idx = (slice(None),) * d + (slice(start, end, step),)
    return input[idx]


@_impl("alias")
def _alias(input):
    return input.view(tuple(input.shape))


@_impl("positive")
def _positive(input):
    # PyTorch: +x is x itself; bool has no unary plus
    _check_tensor(input, "positive")
    if _arr(input).dtype == np.bool_:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input


@_impl("getitem")
def _getitem(input, index):
    return input[index]


@_impl("setitem")
def _setitem(input, index, value):
    input[index] = value
    return input


_OVERLAP_MSG = ("unsupported operation: more than one element of the written-to tensor "
                "refers to a single memory location. Please clone() the tensor before "
                "performing the operation.")


@_impl("copy_")
def _copy_(self, src, non_blocking=False):
    if _b.any(st == 0 and sz > 1 for st, sz in _b.zip(self.stride(), self.shape)):
        raise RuntimeError(_OVERLAP_MSG)
    sa = _arr(self)
    _C._ops_will_write(self)
    sa[...] = np.broadcast_to(_arr(src), sa.shape)
    _C._ops_bump_version(self)
    return self


@_impl("select_scatter")
def _select_scatter(input, src, dim, index):
    a = np.array(_arr(input), copy=True)
    d = _wrap_dim(dim, a.ndim)
    idx = [slice(None)] * a.ndim
    idx[d] = index
    a[tuple(idx)] = _arr(src)
    return _wrap(a, input, src)


@_impl("slice_scatter")
def _slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    a = np.array(_arr(input), copy=True)
    d = _wrap_dim(dim, a.ndim)
    idx = [slice(None)] * a.ndim
    idx[d] = slice(start, end, step)
    a[tuple(idx)] = _arr(src)
    return _wrap(a, input, src)


@_impl("as_strided_scatter")
def _as_strided_scatter(input, src, size, stride, storage_offset=None):
    """torch's: a copy of input whose elements at input.as_strided(size,
    stride, storage_offset) are src's; the offset counts from the storage's
    start (None: input's own). Out-of-storage views and negative strides
    raise as as_strided does (NumPy's as_strided checks nothing)."""
    input.as_strided(size, stride, storage_offset)
    a = np.array(_arr(input), copy=True, order="C")
    base = input.storage_offset()
    so = base if storage_offset is None else int(storage_offset)
    size = tuple(int(n) for n in size)
    it = a.itemsize
    if input.is_contiguous():
        # the write lands in the storage; the result is input's part of it
        full = np.zeros(input.untyped_storage().nbytes() // it, a.dtype)
        full[base:base + a.size] = a.reshape(-1)
        view = np.lib.stride_tricks.as_strided(full[so:], shape=size,
                                               strides=tuple(int(s) * it for s in stride))
        view[...] = _arr(src)
        a = full[base:base + a.size].reshape(a.shape)
    else:
        # a non-contiguous input's copy is C-ordered: the offset counts from its first element
        off = so - base
        last = off + _b.sum((n - 1) * int(s) for n, s in zip(size, stride)) if 0 not in size else off
        if off < 0 or last >= _b.max(a.size, 1):
            raise RuntimeError(
                f"as_strided_scatter: sizes {list(size)}, strides {list(stride)} and storage offset "
                f"{so} reach outside the non-contiguous input of {a.size} elements at offset {base}")
        flat = a.reshape(-1)
        view = np.lib.stride_tricks.as_strided(flat[off:], shape=size,
                                               strides=tuple(int(s) * it for s in stride))
        view[...] = _arr(src)
    return _wrap(a, input, src)


def _like(name):
    def impl(input, *args, dtype=None, **kw):
        import tensorplay
        f = getattr(tensorplay._tensor, name, None)
        if f is not None and f is not _FUNCS.get(name):
            return f(input, *args, dtype=dtype, **kw)
        a = _arr(input)
        nd = _np_dtype(dtype) or a.dtype
        if name == "zeros_like":
            return _wrap(np.zeros(a.shape, nd))
        if name == "ones_like":
            return _wrap(np.ones(a.shape, nd))
        if name == "full_like":
            return _wrap(np.full(a.shape, args[0] if args else kw["fill_value"], nd))
        import tensorplay as tp
        fn = tp.rand if name == "rand_like" else tp.randn
        return fn(*a.shape, dtype=dtype or input.dtype)
    return impl


for _n in ("zeros_like", "ones_like", "full_like", "rand_like", "randn_like"):
    _C._ops_set_impl(_n, _like(_n))


@_impl("bernoulli")
def _bernoulli(input, p=None, *, generator=None):
    import tensorplay
    f = getattr(tensorplay._tensor, "bernoulli", None)
    if f is not None and f is not _FUNCS.get("bernoulli"):
        return f(input, p, generator=generator) if p is not None else f(input, generator=generator)
    out = _clone(input) if p is None else _FUNCS["zeros_like"](input)
    if hasattr(out, "bernoulli_"):
        return out.bernoulli_(input if p is None else p, generator=generator)
    u = _arr(tensorplay.rand(*input.shape, generator=generator))
    pa = _arr(input) if p is None else p
    return _wrap((u < pa).astype(_arr(input).dtype))


# ------------------------------------------ sorting, selection, shuffles
# (no formula: eager NumPy kernels; fallback kernels under tp.compile)

return_types.sort = collections.namedtuple("sort", ["values", "indices"])
return_types.topk = collections.namedtuple("topk", ["values", "indices"])
return_types.median = collections.namedtuple("median", ["values", "indices"])


def _int_list(args, name, argname):
    """f(x, 1, 2) / f(x, (1, 2)) / f(x, [1, 2]) -> [1, 2]."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = tuple(args[0])
    out = []
    for v in args:
        if hasattr(v, "__index__") and not isinstance(v, float):
            out.append(int(v.__index__()))
        else:
            raise TypeError(f"{name}(): argument '{argname}' must be tuple of "
                            f"ints, but found element of type "
                            f"{type(v).__name__}")
    return out


@_impl("isclose")
def _isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    _check_tensor(input, "isclose")
    _check_tensor(other, "isclose", "other", 2)
    a, b = _arr(input), _arr(other)
    if rtol < 0:
        raise RuntimeError(f"rtol must be greater than or equal to zero, but "
                           f"got {rtol}")
    if atol < 0:
        raise RuntimeError(f"atol must be greater than or equal to zero, but "
                           f"got {atol}")
    if a.dtype.kind == "b" or b.dtype.kind == "b":
        r = np.equal(a, b)
    else:
        r = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=bool(equal_nan))
    return _wrap(np.asarray(r, dtype=np.bool_))


@_impl("allclose")
def _allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    _check_tensor(input, "allclose")
    _check_tensor(other, "allclose", "other", 2)
    return bool(np.all(_arr(_isclose(input, other, rtol, atol, equal_nan))))


@_impl("flip")
def _flip(input, *dims, **kw):
    _check_tensor(input, "flip")
    if "dims" in kw:
        dims = (kw.pop("dims"),)
    if kw:
        raise TypeError(f"flip() got an unexpected keyword argument "
                        f"'{next(iter(kw))}'")
    a = _arr(input)
    d = _int_list(dims, "flip", "dims") if dims else []
    # dims=() / [] flips nothing (torch); np.flip's axis=() would flip all
    axes = _dims(d, a.ndim) if len(d) else ()
    return _wrap(np.flip(a, axes).copy() if len(axes) else a.copy(), input)


@_impl("roll")
def _roll(input, shifts, dims=None):
    _check_tensor(input, "roll")
    a = _arr(input)
    sh = _int_list((shifts,), "roll", "shifts")
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        if len(sh) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: "
                               f"{len(sh)}, dims:0")
        return _wrap(np.roll(a, sh[0]), input)
    dl = _int_list((dims,), "roll", "dims")
    if len(sh) != len(dl):
        raise RuntimeError(f"shifts and dimensions must align. shifts: "
                           f"{len(sh)}, dims:{len(dl)}")
    axes = tuple(_wrap_dim(d, a.ndim) for d in dl)
    return _wrap(np.roll(a, tuple(sh), axis=axes) if a.ndim else a.copy(),
                 input)


def _tri(name, input, diagonal):
    _check_tensor(input, name)
    a = _arr(input)
    if a.ndim < 2:
        raise RuntimeError(f"{name}: input tensor must have at least 2 "
                           f"dimensions")
    f = np.tril if name == "tril" else np.triu
    return _wrap(f(a, int(diagonal)), input)


@_impl("tril")
def _tril(input, diagonal=0):
    return _tri("tril", input, diagonal)


@_impl("triu")
def _triu(input, diagonal=0):
    return _tri("triu", input, diagonal)


@_impl("repeat")
def _repeat(input, *sizes, **kw):
    _check_tensor(input, "repeat")
    if "repeats" in kw:
        sizes = (kw.pop("repeats"),)
    reps = _int_list(sizes, "repeat", "repeats")
    a = _arr(input)
    if len(reps) < a.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be "
                           "smaller than number of dimensions of tensor")
    if _b.any(r < 0 for r in reps):
        raise RuntimeError(f"Trying to create tensor with negative dimension "
                           f"{_b.min(reps)}: {reps}")
    return _wrap(np.tile(a, reps) if reps else a.copy(), input)


def _sort_idx(a, d, descending):
    """Stable sort indices along d; NaN is the largest value (as torch)."""
    if not descending:
        return np.argsort(a, axis=d, kind="stable")
    n = a.shape[d]
    r = np.argsort(np.flip(a, d), axis=d, kind="stable")
    return np.flip(n - 1 - r, d)


@_impl("sort")
def _sort(input, dim=-1, descending=False, *, stable=False):
    _check_tensor(input, "sort")
    a = _arr(input)
    if a.ndim == 0:
        return return_types.sort(_wrap(a.copy(), input),
                                 _wrap(np.zeros((), np.int64)))
    d = _wrap_dim(dim, a.ndim)
    idx = _sort_idx(a, d, descending)
    return return_types.sort(_wrap(np.take_along_axis(a, idx, d), input),
                             _wrap(idx.astype(np.int64)))


@_impl("argsort")
def _argsort(input, dim=-1, descending=False, *, stable=False):
    return _sort(input, dim, descending, stable=stable).indices


@_impl("topk")
def _topk(input, k, dim=-1, largest=True, sorted=True):
    if type(k) is int and type(dim) is int and type(largest) is bool:
        # small k along the last dim in C (same order); None: decide here
        r = _C._ops_topk_last(input, k, dim, largest)
        if r is not None:
            return return_types.topk(*r)
    _check_tensor(input, "topk")
    a = _arr(input)
    d = _wrap_dim(dim, a.ndim)
    n = a.shape[d] if a.ndim else 1
    k = int(k)
    if k < 0 or k > n:
        raise RuntimeError("selected index k out of range")
    if a.ndim == 0:
        return return_types.topk(_wrap(a.copy(), input),
                                 _wrap(np.zeros((), np.int64)))
    idx = np.take(_sort_idx(a, d, largest), np.arange(k), axis=d)
    return return_types.topk(_wrap(np.take_along_axis(a, idx, d), input),
                             _wrap(idx.astype(np.int64)))


@_impl("median")
def _median(input, dim=None, keepdim=False):
    """The lower of the two middle values (as torch); NaN if any."""
    _check_tensor(input, "median")
    a = _arr(input)
    if a.dtype == np.bool_:
        raise NotImplementedError(f"\"{'median_cpu' if dim is None else 'median_out'}\" not "
                                  "implemented for 'Bool'")
    if dim is None:
        f = a.reshape(-1)
        if f.size == 0:
            # torch's NaN converted to the integer type as x86 does: the
            # 32/64-bit "integer indefinite" (INT_MIN), whose low bits (0)
            # are what the narrower types keep
            return _wrap(np.asarray(np.nan, a.dtype) if a.dtype.kind == "f"
                         else np.asarray(np.iinfo(a.dtype).min if a.dtype in (np.int32, np.int64)
                                         else 0, a.dtype), input)
        idx = _sort_idx(f, 0, False)
        nnan = int(np.sum(np.isnan(f))) if f.dtype.kind == "f" else 0
        k = f.size - nnan if nnan else (f.size - 1) // 2
        return _wrap(np.asarray(f[idx[k]]), input)
    d = _wrap_dim(dim, a.ndim)
    if a.ndim == 0:
        return return_types.median(_wrap(a.copy(), input),
                                   _wrap(np.zeros((), np.int64)))
    n = a.shape[d]
    if n == 0:
        raise IndexError(f"median(): Expected reduction dim {d} to have "
                         f"non-zero size.")
    idx = _sort_idx(a, d, False)
    if a.dtype.kind == "f":
        nnan = np.sum(np.isnan(a), axis=d, keepdims=True)
    else:
        nnan = np.zeros(a.shape[:d] + (1,) + a.shape[d + 1:], np.int64)
    k = np.where(nnan > 0, n - nnan, (n - 1) // 2)
    ind = np.take_along_axis(idx, k, d)
    val = np.take_along_axis(a, ind, d)
    if not keepdim:
        ind, val = np.squeeze(ind, d), np.squeeze(val, d)
    return return_types.median(_wrap(val, input), _wrap(ind.astype(np.int64)))


@_impl("nonzero")
def _nonzero(input, *, as_tuple=False):
    _check_tensor(input, "nonzero")
    a = _arr(input)
    if as_tuple:
        if a.ndim == 0:
            return (_wrap(np.arange(1 if a else 0, dtype=np.int64)),)
        return tuple(_wrap(np.asarray(i, np.int64)) for i in np.nonzero(a))
    if a.ndim == 0:
        return _wrap(np.zeros((1 if a else 0, 0), np.int64))
    return _wrap(np.argwhere(a).astype(np.int64))


@_impl("unique")
def _unique(input, sorted=True, return_inverse=False, return_counts=False,
            dim=None):
    _check_tensor(input, "unique")
    a = _arr(input)
    if dim is None:
        u, inv, cnt = _unique_sorted(a.reshape(-1))
        inv = inv.reshape(a.shape)
    else:
        d = _wrap_dim(dim, a.ndim)
        u, inv, cnt = _unique_sorted(np.moveaxis(a, d, 0), dim_mode=True)
        u = np.moveaxis(u, 0, d)
    out = [_wrap(u, input)]
    if return_inverse:
        out.append(_wrap(inv.astype(np.int64)))
    if return_counts:
        out.append(_wrap(cnt.astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


def _unique_sorted(a, dim_mode=False):
    """Unique slices of a along axis 0, as torch's CPU unique: sorted (a
    stable sort, NaN last; with dim=, torch's std::sort of the slices, whose
    comparison skips NaN elements), then a slice starts a new group unless
    it equals the previous one elementwise, so every NaN stays its own entry
    (NumPy merges them) and -0.0 meets 0.0. -> (unique, inverse, counts)."""
    n = a.shape[0]
    if n == 0:
        return a, np.zeros(0, np.int64), np.zeros(0, np.int64)
    if dim_mode and a.dtype.kind == "f" and np.isnan(a).any():
        order = _std_sort_order(a.reshape(n, -1))
    elif a.ndim == 1:
        order = np.argsort(a, kind="stable")
    else:
        rows = a.reshape(n, -1)
        # lexicographic: the last key of lexsort is the primary one
        order = np.lexsort(rows.T[::-1]) if rows.shape[1] else np.arange(n)
    sv = a[order]
    new = np.ones(n, bool)
    if n > 1:
        eq = sv[1:] == sv[:-1]
        new[1:] = ~eq.reshape(n - 1, -1).all(axis=1) if a.ndim > 1 else ~eq
    starts = np.flatnonzero(new)
    inv = np.empty(n, np.int64)
    inv[order] = np.cumsum(new) - 1
    cnt = np.diff(np.append(starts, n)).astype(np.int64)
    return sv[starts], inv, cnt


def _std_sort_order(rows):
    """The permutation libstdc++'s std::sort (introsort: median-of-three
    quicksort down to runs of 16, heapsort past 2*log2(n) levels, a final
    insertion sort) leaves for torch's unique(dim=) comparator: row a < row
    b at the first element where a < b or a > b holds; NaN elements compare
    neither way, so the order is not a sort's and only this algorithm gives
    torch's result."""
    vals = rows.tolist()

    def less(i, j):
        for x, y in zip(vals[i], vals[j]):
            if x < y:
                return True
            if x > y:
                return False
        return False

    idx = list(range(len(vals)))

    def insertion(lo, hi, guarded=True):
        for i in range(lo + 1 if guarded else lo, hi):
            v = idx[i]
            if guarded and less(v, idx[lo]):
                idx[lo + 1:i + 1] = idx[lo:i]
                idx[lo] = v
                continue
            j = i
            while j > 0 and less(v, idx[j - 1]):
                idx[j] = idx[j - 1]
                j -= 1
            idx[j] = v

    def sift(base, hole, n, v):
        top = hole
        child = hole
        while child < (n - 1) // 2:
            child = 2 * (child + 1)
            if less(idx[base + child], idx[base + child - 1]):
                child -= 1
            idx[base + hole] = idx[base + child]
            hole = child
        if n % 2 == 0 and child == (n - 2) // 2:
            child = 2 * (child + 1)
            idx[base + hole] = idx[base + child - 1]
            hole = child - 1
        parent = (hole - 1) // 2
        while hole > top and less(idx[base + parent], v):
            idx[base + hole] = idx[base + parent]
            hole = parent
            parent = (hole - 1) // 2
        idx[base + hole] = v

    def heapsort(lo, hi):
        n = hi - lo
        for p in range((n - 2) // 2, -1, -1):
            sift(lo, p, n, idx[lo + p])
        for end in range(n - 1, 0, -1):
            v = idx[lo + end]
            idx[lo + end] = idx[lo]
            sift(lo, 0, end, v)

    def median_to_first(r, a, b, c):
        if less(idx[a], idx[b]):
            if less(idx[b], idx[c]):
                m = b
            elif less(idx[a], idx[c]):
                m = c
            else:
                m = a
        elif less(idx[a], idx[c]):
            m = a
        elif less(idx[b], idx[c]):
            m = c
        else:
            m = b
        idx[r], idx[m] = idx[m], idx[r]

    def introsort(lo, hi, depth):
        while hi - lo > 16:
            if depth == 0:
                heapsort(lo, hi)
                return
            depth -= 1
            median_to_first(lo, lo + 1, lo + (hi - lo) // 2, hi - 1)
            first, last, piv = lo + 1, hi, idx[lo]
            while True:
                while less(idx[first], piv):
                    first += 1
                last -= 1
                while less(piv, idx[last]):
                    last -= 1
                if first >= last:
                    break
                idx[first], idx[last] = idx[last], idx[first]
                first += 1
            introsort(first, hi, depth)
            hi = first

    n = len(idx)
    if n > 1:
        introsort(0, n, 2 * (n.bit_length() - 1))
        if n > 16:
            insertion(0, 16)
            insertion(16, n, guarded=False)
        else:
            insertion(0, n)
    return np.asarray(idx, np.int64)


@_impl("cumprod")
def _cumprod(input, dim, *, dtype=None):
    a = _red_prep(input, "cumprod")
    d = _wrap_dim(dim, a.ndim)
    out = _acc_dtype(a, dtype, "cumprod")
    if a.ndim == 0:
        return _wrap(np.asarray(a, out), input)
    return _wrap(_cum_acc(np.cumprod, a, d, out), input)


@_impl("diff")
def _diff(input, n=1, dim=-1, prepend=None, append=None):
    _check_tensor(input, "diff")
    a = _arr(input)
    if a.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    d = _wrap_dim(dim, a.ndim)
    parts = [x for x in (prepend, a, append) if x is not None]
    parts = [_arr(x) if _is_t(x) else np.asarray(x) for x in parts]
    if len(parts) > 1:
        a = np.concatenate(parts, axis=d)
    if a.dtype.kind == "b":
        r = a
        for _ in range(int(n)):
            r = np.not_equal(np.take(r, np.arange(1, r.shape[d]), d),
                             np.take(r, np.arange(0, r.shape[d] - 1), d))
        return _wrap(r, input)
    return _wrap(np.diff(a, int(n), axis=d), input)


@_impl("index_add")
def _index_add(input, dim, index, source, *, alpha=1):
    _check_tensor(input, "index_add")
    a = _arr(input)
    d = _wrap_dim(dim, a.ndim)
    idx = _arr(index)
    if idx.dtype not in (np.int64, np.int32):
        raise RuntimeError(f"index_add_(): Expected dtype int32/int64 for index but got: "
                           f"{_title(idx.dtype)}")
    if idx.ndim > 1:
        raise IndexError(f"index_add_(): Index is supposed to be a vector, but got dim: "
                         f"{idx.ndim} with type: {_title(idx.dtype)} and size: "
                         f"{list(idx.shape)}")
    n = a.shape[d] if a.ndim else 1
    # torch's CPU kernel does not wrap negative indices
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise IndexError("index out of range in self")
    out = np.array(a, copy=True)
    src = np.asarray(_arr(source))
    if alpha != 1:
        src = src * alpha
    if out.ndim == 0:
        out = out + src.reshape(()) * idx.size
        return _wrap(out.astype(a.dtype), input, source)
    om = np.moveaxis(out, d, 0)
    sm = np.moveaxis(src.reshape(src.shape if src.ndim else (1,)), d, 0)
    np.add.at(om, idx.reshape(-1).astype(np.int64), sm.astype(a.dtype))
    return _wrap(out, input, source)


@_impl("einsum")
def _einsum(equation, *operands):
    """torch.einsum: the equation (or torch's sublist form) checked with
    torch's rules and messages (tensorplay/_einsum.py), size-1 dims
    broadcast, then NumPy's einsum."""
    from tensorplay import _einsum as es
    equation, operands = es.normalize_args(equation, operands)
    for i, t in enumerate(operands):
        _check_tensor(t, "einsum", "operands", i + 2)
    labels, out, sizes = es.plan(equation, [t.shape for t in operands])
    es.check_dtypes(operands)
    arrs = []
    for t, lab in zip(operands, labels):
        a = _arr(t)
        want = tuple(sizes[l] for l in lab)
        if a.shape != want:
            a = np.broadcast_to(a, want)
        arrs.append(a)
    # NumPy's equation on the resolved labels (ellipsis dims named too)
    pool = iter(c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                if c not in sizes)
    names = {l: (l if isinstance(l, str) else next(pool)) for l in sizes}
    eq = ",".join("".join(names[l] for l in lab) for lab in labels)
    eq += "->" + "".join(names[l] for l in out)
    r = np.einsum(eq, *arrs, optimize=len(arrs) > 2)
    return _wrap(np.asarray(r, arrs[0].dtype if arrs else None), *operands)


# --------------------------------------------------- dropout variants

def _check_p(p):
    if p < 0 or p > 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but "
                         f"got {p}")


def _mask_dropout(input, p, inplace, mask_shape, alpha):
    """keep ~ Bernoulli(1 - p) of mask_shape (broadcast over the rest)."""
    import tensorplay
    a = _arr(input)
    if p == 1 and not alpha:
        return _act_out(input, np.zeros_like(a), inplace)
    keep = _arr(tensorplay.rand(*mask_shape, dtype=input.dtype)) >= p
    keep = keep.astype(a.dtype)
    if alpha:
        al = 1.7580993408473766
        sc = 1.0 / math.sqrt((al * al * p + 1) * (1 - p)) if p < 1 else 0.0
        r = a * keep * sc + (keep - 1) * al * sc + al * sc * p
    else:
        r = a * keep / np.asarray(1 - p, a.dtype)
    return _act_out(input, np.asarray(r, a.dtype), inplace)


@_impl("alpha_dropout")
def _alpha_dropout(input, p=0.5, training=False, inplace=False):
    _check_tensor(input, "alpha_dropout")
    _check_p(p)
    if not training or p == 0:
        return input
    return _mask_dropout(input, p, inplace, tuple(input.shape), True)


@_impl("feature_alpha_dropout")
def _feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    _check_tensor(input, "feature_alpha_dropout")
    _check_p(p)
    if not training or p == 0:
        return input
    sh = tuple(input.shape)
    ms = sh[:2] + (1,) * (len(sh) - 2) if len(sh) >= 2 else sh
    return _mask_dropout(input, p, inplace, ms, True)


def _feature_dropout(k):
    name = f"dropout{k}d"

    def impl(input, p=0.5, training=True, inplace=False):
        _check_tensor(input, name)
        _check_p(p)
        sh = tuple(input.shape)
        if len(sh) not in (k + 1, k + 2):
            raise RuntimeError(f"{name}: Expected {k + 1}D or {k + 2}D input, "
                               f"but received a {len(sh)}D input")
        if not training or p == 0:
            return input
        nb = len(sh) - k            # batch and channel dims (1 or 2)
        ms = sh[:nb] + (1,) * k
        return _mask_dropout(input, p, inplace, ms, False)
    impl.__name__ = name
    _C._ops_set_impl(name, impl)
    _REG[name] = impl


for _k in (1, 2, 3):
    _feature_dropout(_k)


# ------------------------------------------------- scatters, selection, shifts

def _index_check(idx, name):
    if idx.dtype not in (np.int64, np.int32):
        # torch words it as scatter() for the whole family
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")


def _scatter_coords(a, d, idx, name):
    if idx.ndim != a.ndim and not (idx.ndim <= 1 and a.ndim <= 1):
        raise RuntimeError("Index tensor must have the same number of "
                           "dimensions as self tensor")
    if idx.size:
        n = a.shape[d] if a.ndim else 1
        bad = (idx < 0) | (idx >= n)
        if bad.any():
            # torch's kernel names the first bad index in row-major order
            first = int(idx.reshape(-1)[int(np.argmax(bad.reshape(-1)))])
            raise RuntimeError(f"index {first} is out of bounds for dimension "
                               f"{d} with size {n}")
    for k in range(idx.ndim):
        if k != d and idx.shape[k] > a.shape[k]:
            raise RuntimeError(f"Size does not match at dimension {k} expected "
                               f"index {list(idx.shape)} to be no larger than "
                               f"self {list(a.shape)} apart from dimension {d}")
    grid = list(np.indices(idx.shape, sparse=True))
    if not grid:
        return ()
    grid[d] = idx
    return tuple(grid)


def _scatter_np(name, input, dim, index, src, reduce):
    _check_tensor(input, name)
    a = _arr(input)
    d = _wrap_dim(dim, a.ndim)
    idx = _arr(index)
    _index_check(idx, name)
    out = np.array(a, copy=True)
    if out.ndim == 0:
        out = out.reshape(1)
        idx = idx.reshape(-1)
    idx = idx.astype(np.int64)
    coords = _scatter_coords(out, d, idx, name)
    if _is_t(src):
        s = _arr(src)
        if s.dtype != a.dtype:
            raise RuntimeError(f"{name}(): Expected self.dtype to be equal to "
                               f"src.dtype")
        s = s.reshape(s.shape if s.ndim else (1,))
        for k in range(idx.ndim):
            if idx.shape[k] > s.shape[k]:
                raise RuntimeError(f"Size does not match at dimension {k} "
                                   f"expected index {list(idx.shape)} to be no "
                                   f"larger than src {list(s.shape)}")
        vals = s[tuple(slice(0, n) for n in idx.shape)]
    else:
        vals = np.asarray(src, out.dtype)
    if not coords:
        return _wrap(np.asarray(out).reshape(a.shape), input, src)
    if reduce is None:
        out[coords] = vals
    elif reduce == "add":
        np.add.at(out, coords, np.broadcast_to(vals, idx.shape))
    elif reduce == "multiply":
        np.multiply.at(out, coords, np.broadcast_to(vals, idx.shape))
    else:
        raise RuntimeError(f"reduce argument must be either add or multiply, "
                           f"got {reduce}")
    return _wrap(out.reshape(a.shape), input, src)


@_impl("scatter")
def _scatter(input, dim, index, src=None, *, reduce=None, value=None):
    if src is None:
        src = value
    return _scatter_np("scatter", input, dim, index, src, reduce)


@_impl("scatter_add")
def _scatter_add(input, dim, index, src):
    _check_tensor(src, "scatter_add", "src", 4)
    return _scatter_np("scatter_add", input, dim, index, src, "add")


_SR_REDUCES = ("sum", "prod", "mean", "amax", "amin")


@_impl("scatter_reduce")
def _scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """torch.scatter_reduce: out = input with src's values combined into it
    at index along dim by reduce (sum, prod, mean, amax, amin); with
    include_self=False a written position forgets input's value. Integer
    mean divides with floor rounding, as torch."""
    _check_tensor(input, "scatter_reduce")
    _check_tensor(src, "scatter_reduce", "src", 4)
    reduce = {"max": "amax", "min": "amin"}.get(reduce, reduce)   # torch's aliases
    if reduce not in _SR_REDUCES:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or "
                           f"amin, got {reduce}")
    a = _arr(input)
    d = _wrap_dim(dim, a.ndim)
    idx = _arr(index)
    _index_check(idx, "scatter_reduce")
    s = _arr(src)
    if s.dtype != a.dtype:
        raise RuntimeError("scatter_reduce(): Expected self.dtype to be equal to "
                           "src.dtype")
    out = np.array(a, copy=True).reshape(a.shape if a.ndim else (1,))
    idx = idx.reshape(idx.shape if idx.ndim or a.ndim else (-1,)).astype(np.int64)
    s = s.reshape(s.shape if s.ndim else (1,))
    coords = _scatter_coords(out, d, idx, "scatter_reduce")
    for k in range(idx.ndim):
        if idx.shape[k] > s.shape[k]:
            raise RuntimeError(f"Size does not match at dimension {k} expected index "
                               f"{list(idx.shape)} to be no larger than src "
                               f"{list(s.shape)}")
    if not coords:
        return _wrap(out.reshape(a.shape), input, src)
    vals = s[tuple(slice(0, n) for n in idx.shape)]
    cnt = np.zeros(out.shape, np.int64)
    np.add.at(cnt, coords, 1)
    touched = cnt > 0
    if reduce in ("sum", "mean"):
        acc = np.zeros_like(out)
        np.add.at(acc, coords, vals)
    elif reduce == "prod":
        acc = np.ones_like(out)
        np.multiply.at(acc, coords, vals)
    else:
        if out.dtype.kind == "f":
            fill = -np.inf if reduce == "amax" else np.inf
        elif out.dtype == np.bool_:
            fill = reduce == "amin"
        else:
            info = np.iinfo(out.dtype)
            fill = info.min if reduce == "amax" else info.max
        acc = np.full_like(out, fill)
        (np.maximum if reduce == "amax" else np.minimum).at(acc, coords, vals)
    with np.errstate(all="ignore"):
        if reduce == "sum":
            r = out + acc if include_self else np.where(touched, acc, out)
        elif reduce == "prod":
            r = out * acc if include_self else np.where(touched, acc, out)
        elif reduce == "mean":
            tot = acc + out if include_self else acc
            num = cnt + 1 if include_self else np.maximum(cnt, 1)
            if out.dtype.kind == "f":
                q = tot / num.astype(out.dtype)
            else:
                q = np.floor_divide(tot, num)
            r = q if include_self else np.where(touched, q, out)
        else:
            fn = np.maximum if reduce == "amax" else np.minimum
            r = np.where(touched, fn(out, acc) if include_self else acc, out)
    return _wrap(np.asarray(r, a.dtype).reshape(a.shape), input, src)


def _index_dim_args(input, dim, index, name):
    a = _arr(input)
    d = _wrap_dim(dim, a.ndim)
    idx = _arr(index)
    # torch 2.13: both take int64 indices only; index_copy_ refuses a
    # negative one, index_fill_ wraps it
    if idx.dtype != np.int64:
        if name == "index_fill_":
            raise IndexError("index_fill_(): Expected dtype int64 for index.")
        raise RuntimeError(f"{name}(): Expected a long tensor for index, but got "
                           f"{_title(idx.dtype)}")
    if idx.ndim > 1:
        if name == "index_fill_":
            raise RuntimeError("Index has to be a vector/scalar")
        raise IndexError(f"{name}(): Index should have dimension 1 or 0 (got {idx.ndim})")
    idx = idx.reshape(-1).astype(np.int64)
    n = a.shape[d] if a.ndim else 1
    lo = -n if name == "index_fill_" else 0
    for i in idx.tolist():
        if i < lo or i >= n:
            pre = "" if name == "index_fill_" else f"{name}(): "
            raise IndexError(f"{pre}index {i} is out of bounds for dimension {d} with "
                             f"size {n}")
    return a, d, np.where(idx < 0, idx + n, idx)


@_impl("index_copy")
def _index_copy(input, dim, index, source):
    """torch.index_copy: out = input with out.select(dim, index[i]) =
    source.select(dim, i); a repeated index keeps the last copy."""
    _check_tensor(input, "index_copy")
    _check_tensor(source, "index_copy", "source", 4)
    a, d, idx = _index_dim_args(input, dim, index, "index_copy_")
    s = _arr(source)
    if s.dtype != a.dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same "
                           f"dtype, but got (self) {_title(a.dtype)} and (source) "
                           f"{_title(s.dtype)}")
    out = np.array(a, copy=True)
    if out.ndim == 0:
        if idx.size != 1 or s.size != 1:
            raise RuntimeError("index_copy_(): When source and destination are "
                               "scalars, index should also be a scalar")
        return _wrap(s.reshape(()).copy(), input, source)
    dst_sl = list(a.shape[:d] + a.shape[d + 1:])
    src_sl = list(s.shape[:d] + s.shape[d + 1:]) if s.ndim == a.ndim else None
    if src_sl != dst_sl:
        src_sl = list(s.shape[:d] + s.shape[d + 1:]) if s.ndim > d else list(s.shape)
        raise RuntimeError(f"index_copy_(): Source/destination tensor must have same "
                           f"slice shapes. Destination slice shape: "
                           f"{' '.join(map(str, dst_sl))} at dimension {d} and source "
                           f"slice shape: {' '.join(map(str, src_sl))} at dimension 0.")
    if s.shape[d] != idx.size:
        raise RuntimeError(f"index_copy_(): Number of indices ({idx.size}) should be "
                           f"equal to source.size(dim) ({s.shape[d]})")
    om = np.moveaxis(out, d, 0)
    sm = np.moveaxis(s, d, 0)
    for i, j in enumerate(idx.tolist()):
        om[j] = sm[i]
    return _wrap(out, input, source)


@_impl("index_fill")
def _index_fill(input, dim, index, value):
    """torch.index_fill: out = input with every slice index[i] along dim set
    to value (a number or a 0-d tensor)."""
    _check_tensor(input, "index_fill")
    a, d, idx = _index_dim_args(input, dim, index, "index_fill_")
    if _is_t(value):
        v = _arr(value)
        if v.ndim != 0:
            raise IndexError(f"index_fill_ only supports a 0-dimensional value tensor, "
                             f"but got tensor with {v.ndim} dimension(s).")
        v = v.reshape(())
    else:
        _C._check_scalar(value, input.dtype)
        v = value
    out = np.array(a, copy=True)
    if out.ndim == 0:
        out = np.asarray(v, a.dtype).reshape(()) if idx.size else out
        return _wrap(np.asarray(out, a.dtype), input)
    om = np.moveaxis(out, d, 0)
    if idx.size:
        om[idx] = np.asarray(v).astype(a.dtype)
    return _wrap(out, input)


@_impl("masked_select")
def _masked_select(input, mask):
    _check_tensor(input, "masked_select")
    _check_tensor(mask, "masked_select", "mask", 2)
    m = _arr(mask)
    if m.dtype != np.bool_:
        raise RuntimeError(f"masked_select: expected BoolTensor for mask")
    a = _arr(input)
    sh = _bshape(a, m)
    r = np.broadcast_to(a, sh).reshape(-1)[np.broadcast_to(m, sh).reshape(-1)]
    return _wrap(np.ascontiguousarray(r), input)


@_impl("repeat_interleave")
def _repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    if repeats is None:          # repeat_interleave(repeats): indices
        r = _arr(input)
        if r.ndim != 1:
            raise RuntimeError("repeats must be 0-dim or 1-dim tensor")
        if r.dtype.kind not in "iu":
            raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
        if r.size and r.min() < 0:
            raise RuntimeError("repeats can not be negative")
        return _wrap(np.repeat(np.arange(r.size, dtype=np.int64), r))
    _check_tensor(input, "repeat_interleave")
    a = _arr(input)
    if _is_t(repeats):
        rep = _arr(repeats)
        if rep.ndim > 1:
            raise RuntimeError("repeats must be 0-dim or 1-dim tensor")
        rep = rep.reshape(-1)
    else:
        rep = np.asarray([int(repeats)])
    if rep.size and rep.min() < 0:
        raise RuntimeError("repeats can not be negative")
    if dim is None:
        a = a.reshape(-1)
        d = 0
    else:
        d = _wrap_dim(dim, a.ndim)
        if a.ndim == 0:
            a = a.reshape(1)
    n = a.shape[d]
    if rep.size not in (1, n):
        raise RuntimeError(f"repeats must have the same size as input along dim, "
                           f"but got repeats.size(0) = {rep.size} and "
                           f"input.size({d}) = {n}")
    r = np.repeat(a, rep if rep.size != 1 else int(rep[0]), axis=d)
    if output_size is not None and r.shape[d] != output_size:
        raise RuntimeError(f"allocated size does not match required size")
    return _wrap(r, input)


def _shift(input, other, left):
    name = "bitwise_left_shift" if left else "bitwise_right_shift"
    _binary_scalar_args(name, input, other)
    rt = _result_np(input, other)
    a = np.asarray(_arr(input), rt)
    if isinstance(other, int) and not isinstance(other, bool) and rt.kind in "iu":
        # torch converts a Python shift to the tensor's dtype as C does
        # (2**31 on int8 is 0: no shift; -1 on uint8 is 255: all out)
        b = np.asarray(np.uint64(other % 2**64)).astype(rt)
    else:
        b = np.asarray(_arr(other), rt)
    if rt.kind == "f" or rt == np.bool_:
        raise NotImplementedError(f"\"{'lshift' if left else 'rshift'}_cpu\" not "
                                  f"implemented for '{_title(rt)}'")
    bits = rt.itemsize * 8
    big = (b < 0) | (b >= bits)
    bs = np.where(big, 0, b)
    if left:
        r = np.where(big, 0, np.left_shift(a, bs))
    else:
        r = np.where(big, np.where(a < 0, -1, 0) if rt.kind == "i" else 0,
                     np.right_shift(a, bs))
    return _wrap(np.asarray(r, rt), input, other)


@_impl("bitwise_left_shift")
def _lshift(input, other):
    return _shift(input, other, True)


@_impl("bitwise_right_shift")
def _rshift(input, other):
    return _shift(input, other, False)


@_impl("one_hot")
def _one_hot(input, num_classes=-1):
    _check_tensor(input, "one_hot")
    a = _arr(input)
    if a.dtype != np.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type "
                           "LongTensor.")
    if num_classes == -1:
        if a.size == 0:
            raise RuntimeError("Can not infer total number of classes from "
                               "empty tensor.")
        num_classes = int(a.max()) + 1
    if a.size:
        if a.min() < 0:
            raise RuntimeError("Class values must be non-negative.")
        if a.max() >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    r = (a[..., None] == np.arange(num_classes, dtype=np.int64)).astype(np.int64)
    return _wrap(r)


def _pair(v, name, n=2):
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            return tuple(int(v[0]) for _ in range(n))
        if len(v) != n:
            raise RuntimeError(f"{name} must be an int or a tuple of {n} ints")
        return tuple(int(x) for x in v)
    return (int(v),) * n


def _unfold_geometry(shape, kernel_size, dilation, padding, stride):
    """(kh, kw), (dh, dw), (ph, pw), (sh, sw), (oh, ow) with torch's checks."""
    k = _pair(kernel_size, "kernel_size")
    dl = _pair(dilation, "dilation")
    p = _pair(padding, "padding")
    s = _pair(stride, "stride")
    if _b.min(k) <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got "
                           f"kH: {k[0]} kW: {k[1]}")
    if _b.min(s) <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got dH: "
                           f"{s[0]} dW: {s[1]}")
    if _b.min(dl) <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got "
                           f"dilationH: {dl[0]} dilationW: {dl[1]}")
    if _b.min(p) < 0:
        raise RuntimeError("negative padding is not supported")
    h, w = shape[-2], shape[-1]
    oh = (h + 2 * p[0] - dl[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - dl[1] * (k[1] - 1) - 1) // s[1] + 1
    if oh < 1 or ow < 1:
        raise RuntimeError(f"Given input with spatial size ({h}, {w}), "
                           f"kernel_size=({k[0]}, {k[1]}), dilation=({dl[0]}, "
                           f"{dl[1]}), padding=({p[0]}, {p[1]}), calculated "
                           f"shape of the array of sliding blocks as ({oh}, "
                           f"{ow}), but its components must be at least one.")
    return k, dl, p, s, (oh, ow)


def _unfold_np(a, k, dl, p, s, o):
    """(N, C, H, W) -> (N, C*kh*kw, oh*ow) by strided views (no Python loop
    over elements)."""
    n, c = a.shape[0], a.shape[1]
    if p[0] or p[1]:
        a = np.pad(a, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    st = a.strides
    v = np.lib.stride_tricks.as_strided(
        a, (n, c, k[0], k[1], o[0], o[1]),
        (st[0], st[1], st[2] * dl[0], st[3] * dl[1], st[2] * s[0], st[3] * s[1]),
        writeable=False)
    return np.ascontiguousarray(v).reshape(n, c * k[0] * k[1], o[0] * o[1])


@_impl("unfold")
def _unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    _check_tensor(input, "unfold")
    a = _arr(input)
    if a.ndim not in (3, 4):
        raise NotImplementedError(f"Input Error: Only 3D or 4D input Tensors are "
                                  f"supported (got {a.ndim}D)")
    if a.ndim == 3:
        if a.shape[0] == 0 or a.shape[1] == 0:
            raise RuntimeError(f"Expected 3D or 4D (batch mode) tensor with "
                               f"optional 0 dim batch size for input, but got: "
                               f"{list(a.shape)}")
    k, dl, p, s, o = _unfold_geometry(a.shape, kernel_size, dilation, padding, stride)
    r = _unfold_np(a if a.ndim == 4 else a[None], k, dl, p, s, o)
    return _wrap(r if a.ndim == 4 else r[0], input)


def _normalize_ops(input, p=2.0, dim=1, eps=1e-12):
    """torch.nn.functional.normalize's composition (its decomposition row)."""
    return input / input.norm(p, dim, True).clamp_min(eps)


def _cosine_ops(x1, x2, dim=1, eps=1e-08):
    # the norms are taken after broadcasting (torch's semantics)
    x1, x2 = x1 + _FUNCS["zeros_like"](x2), x2 + _FUNCS["zeros_like"](x1)
    n1 = x1.norm(2, dim, True).clamp_min(eps)
    n2 = x2.norm(2, dim, True).clamp_min(eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


@_impl("normalize")
def _normalize(input, p=2.0, dim=1, eps=1e-12):
    _check_tensor(input, "normalize")
    with _NoGrad():
        r = _normalize_ops(input, p, dim, eps)
    return _wrap(_arr(r), input)


@_impl("cosine_similarity")
def _cosine_similarity(x1, x2, dim=1, eps=1e-08):
    _check_tensor(x1, "cosine_similarity")
    _check_tensor(x2, "cosine_similarity", "x2", 2)
    with _NoGrad():
        r = _cosine_ops(x1, x2, dim, eps)
    return _wrap(_arr(r), x1, x2)


class _NoGrad:
    def __enter__(self):
        self.prev = _C._set_grad_enabled(False)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self.prev)


def _uniform_np(shape, generator=None):
    import tensorplay
    return _arr(tensorplay.rand(*shape, dtype=tensorplay.float64, generator=generator))


@_impl("multinomial")
def _multinomial(input, num_samples, replacement=False, *, generator=None):
    _check_tensor(input, "multinomial")
    if not replacement and type(num_samples) is int:
        # the common case in C (same draw, same result); None: decide here
        r = _C._multinomial_races(input, num_samples, generator)
        if r is not None:
            return r
    a = _arr(input)
    if a.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if a.dtype.kind != "f":
        raise RuntimeError(f"multinomial only supports floating-point dtypes for "
                           f"input, got: {_title(a.dtype)}")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    p = a.reshape(-1, a.shape[-1]).astype(np.float64)
    n_cat = p.shape[1]
    if not replacement and num_samples > n_cat:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples "
                           "without replacement")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or "
                           "element < 0")
    tot = p.sum(1)
    if np.any(tot <= 0):
        raise RuntimeError("invalid multinomial distribution (sum of "
                           "probabilities <= 0)")
    u = _uniform_np((p.shape[0], num_samples if replacement else n_cat), generator)
    if replacement:
        cdf = np.cumsum(p, 1) / tot[:, None]
        cdf[:, -1] = 1.0
        r = np.stack([np.searchsorted(cdf[i], u[i], side="right")
                      for i in range(p.shape[0])])
        # a zero-probability category is never drawn (u lands right of it)
        r = np.minimum(r, n_cat - 1)
    else:
        # Gumbel-top-k (exponential races): p_i / E_i, E_i ~ Exp(1)
        keys = np.where(p > 0, p / -np.log1p(-u), -1.0)
        if np.any((p > 0).sum(1) < num_samples):
            raise RuntimeError("invalid multinomial distribution (with "
                               "replacement=False, not enough non-negative "
                               "category to sample)")
        r = np.argsort(-keys, axis=1, kind="stable")[:, :num_samples]
    r = r.astype(np.int64)
    return _wrap(r if a.ndim == 2 else r[0])


class memory_format:
    """tp.preserve_format / tp.contiguous_format / tp.channels_last /
    tp.channels_last_3d (torch.memory_format): the layout a copy gets.
    preserve_format (the default of clone, to, the *_like factories) keeps a
    non-overlapping and dense tensor's strides and lays out any other
    densely in its stride order; contiguous_format is row-major;
    channels_last (4-d, NHWC) and channels_last_3d (5-d, NDHWC) put the
    channels innermost (RuntimeError on a tensor of another rank)."""
    __slots__ = ("_name", "_code")

    def __init__(self, name, code):
        self._name = name
        self._code = code    # stax_memory_format in csrc/tensor/tensor.h

    def __repr__(self):
        return f"tensorplay.{self._name}"

    def __reduce__(self):
        return self._name


preserve_format = memory_format("preserve_format", 0)
contiguous_format = memory_format("contiguous_format", 1)
channels_last = memory_format("channels_last", 2)
channels_last_3d = memory_format("channels_last_3d", 3)


# in-place twins computed out of place then written back (C covers the
# plain pointwise ones itself)
for _row in _C._op_table():
    if _row["inplace"] and _row["name"].endswith("_") and _row["inplace"] in _REG:
        _inplace_of(_row["name"], _row["inplace"])


# ------------------------------------------------------------------ exports

def _public():
    import tensorplay._tensor as _t
    names = []
    for name, f in _FUNCS.items():
        names.append(name)
    return names


for _k, _v in _FUNCS.items():
    globals()[_k] = _v

__all__ = sorted(set(_public()) | {"return_types", "contiguous_format",
                                    "memory_format",
                                    "preserve_format", "channels_last",
                                    "channels_last_3d"})


# ------------------------------------------------------------------ out=

def _out_copy(out, res, name):
    """out= of every op function (ops_func.c strips it, runs the op out of
    place and calls this): torch's checks, then out.copy_(res). Unlike
    torch, an out of another shape is an error (tensors do not resize)."""
    if not isinstance(out, _C.Tensor) and type(out).__name__ != "Proxy":
        raise TypeError(f"{name}(): argument 'out' must be Tensor, not "
                        f"{type(out).__name__}")
    if isinstance(res, (tuple, list)):
        raise RuntimeError(f"{name}(): out= is supported for single-output "
                           f"ops only here")
    rd, od = _np_dtype(res.dtype), _np_dtype(out.dtype)
    if (rd.kind == "f" and od.kind != "f") or (rd.kind in "iu" and od.kind == "b"):
        raise RuntimeError(f"result type {_title(rd)} can't be cast to the "
                           f"desired output type {_title(od)}")
    if _grad_on() and getattr(res, "requires_grad", False):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't "
                           f"support automatic differentiation, but one of "
                           f"the arguments requires grad.")
    if tuple(out.shape) != tuple(res.shape):
        raise RuntimeError(f"{name}(): out= has shape {list(out.shape)} but "
                           f"the result has shape {list(res.shape)} "
                           f"(tensorplay does not resize out= tensors)")
    out.copy_(res)
    return out
