"""tp.finfo / tp.iinfo and the legacy typed constructors (tp.FloatTensor,
tp.LongTensor, ...), with torch's attributes and behaviour."""
import numpy as np

from tensorplay import _C

__all__ = ["finfo", "iinfo", "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor",
           "LongTensor",
           "IntTensor", "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor"]


def _tp():
    import tensorplay
    return tensorplay


def _np(dtype):
    return np.dtype(getattr(dtype, "numpy_dtype", None) or str(dtype).split(".")[-1])


class finfo:
    """Machine limits of a floating dtype (torch.finfo): bits, eps, max, min,
    tiny (= smallest_normal), resolution, dtype. finfo() is the default dtype's."""

    def __init__(self, type=None):
        tp = _tp()
        type = tp.get_default_dtype() if type is None else type
        if not isinstance(type, tp.dtype) or not type.is_floating_point:
            raise TypeError("torch.finfo() requires a floating point input type. Use "
                            "torch.iinfo to handle 'torch.finfo'")
        if type == tp.bfloat16:
            # NumPy has no bfloat16: float32's exponent with 8 significand bits
            self.bits, self.eps = 16, 2.0 ** -7
            self.max = (2.0 - 2.0 ** -7) * 2.0 ** 127
            self.min = -self.max
            self.tiny = self.smallest_normal = 2.0 ** -126
            self.resolution = 0.01
            self.dtype = "bfloat16"
            return
        f = np.finfo(_np(type))
        self.bits = int(f.bits)
        self.eps = float(f.eps)
        self.max = float(f.max)
        self.min = float(f.min)
        self.tiny = self.smallest_normal = float(f.tiny)
        self.resolution = 10.0 ** -int(f.precision)
        self.dtype = str(type).split(".")[-1]

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, "
                f"tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """Limits of an integer dtype (torch.iinfo): bits, max, min, dtype."""

    def __init__(self, type):
        tp = _tp()
        if not isinstance(type, tp.dtype) or type.is_floating_point or type == tp.bool:
            raise TypeError("torch.iinfo() requires an integer input type. Use "
                            "torch.finfo to handle 'torch.iinfo'")
        f = np.iinfo(_np(type))
        self.bits = int(f.bits)
        self.max = int(f.max)
        self.min = int(f.min)
        self.dtype = str(type).split(".")[-1]

    def __repr__(self):
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


class _TypedMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _C.Tensor) and obj.dtype == getattr(_tp(), cls._dtype_name)


def _typed(name, dtype_name):
    def __new__(cls, *args, **kwargs):
        """tp.<T>Tensor(data) like tp.tensor(data, dtype); tp.<T>Tensor(*sizes)
        an uninitialized tensor of that shape; tp.<T>Tensor() empty."""
        tp = _tp()
        dt = getattr(tp, dtype_name)
        if kwargs.get("device") not in (None, "cpu"):
            raise RuntimeError(f"legacy constructor expects device type: cpu but device "
                               f"type: {kwargs['device']} was passed")
        if not args:
            return tp.empty(0, dtype=dt)
        if len(args) == 1 and isinstance(args[0], _C.Tensor):
            if args[0].dtype != dt:
                raise TypeError(f"expected {dtype_name} (got {str(args[0].dtype).split('.')[-1]})")
            return args[0]
        if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            return tp.empty(*args, dtype=dt)
        if len(args) == 1 and isinstance(args[0], tp.Size):
            return tp.empty(*args[0], dtype=dt)
        if len(args) == 1:
            return tp.tensor(args[0], dtype=dt)
        raise TypeError(f"new(): invalid data type '{type(args[0]).__name__}'")
    return _TypedMeta(name, (), {"__new__": __new__, "_dtype_name": dtype_name,
                                 "__module__": "tensorplay"})


FloatTensor = _typed("FloatTensor", "float32")
DoubleTensor = _typed("DoubleTensor", "float64")
HalfTensor = _typed("HalfTensor", "float16")
BFloat16Tensor = _typed("BFloat16Tensor", "bfloat16")
LongTensor = _typed("LongTensor", "int64")
IntTensor = _typed("IntTensor", "int32")
ShortTensor = _typed("ShortTensor", "int16")
CharTensor = _typed("CharTensor", "int8")
ByteTensor = _typed("ByteTensor", "uint8")
BoolTensor = _typed("BoolTensor", "bool")
