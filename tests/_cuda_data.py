"""Test inputs and checks shared by the CUDA kernels' host-run tests
(tests/test_cuda_kernels_host.py, tests/test_cuda_gpuops_host.py) and their GPU
twins (tests/gpu/test_cuda_native_ops.py, tests/gpu/test_cuda_gpuops.py): the
same values and rules on both sides."""
import numpy as np

import tensorplay as tp


def data(shape, dtype=tp.float32, seed=0, special=True, lo=-5, hi=5):
    """A tensor of `shape` and `dtype` with ties (values rounded to 0.1) and, for floats
    with 6+ elements and special=True, NaN at 0 and -1, inf at 3, -inf at 5."""
    rng = np.random.default_rng(seed)
    name = str(dtype).split(".")[-1]
    if name == "bool":
        a = rng.integers(0, 2, size=shape).astype(bool)
    elif not dtype.is_floating_point:
        a = rng.integers(0 if name == "uint8" else lo, hi, size=shape)
    else:
        a = np.round(rng.standard_normal(shape) * 3, 1)        # ties on purpose
        if special and a.size >= 6:
            a.flat[[0, 3, 5]] = [np.nan, np.inf, -np.inf]
            a.flat[-1] = np.nan
    if name == "bfloat16":
        return tp.tensor(a.tolist(), dtype=tp.float32).bfloat16()
    return tp.tensor(a.tolist(), dtype=dtype)


def cuda_int_rule(v, dst, src="float32"):
    """torch's CUDA float -> integer, as read off torch 2.11 on an H200:
    truncation toward zero; int64 and int32 saturate; int16 and int8 keep
    the low bits of the saturated int32, uint8 the low byte of the
    saturated int64. NaN: int64's minimum through int64; through int32 0
    from a float computed in float (float32/float16/bfloat16) and int32's
    minimum from a float64."""
    via = "int64" if dst in ("int64", "uint8") else "int32"
    lo, hi = (-2 ** 63, 2 ** 63 - 1) if via == "int64" else (-2 ** 31, 2 ** 31 - 1)
    if v != v:
        i = lo if via == "int64" or src == "float64" else 0
    else:
        i = lo if v <= lo else hi if v >= hi else int(v)
    bits = {"int64": 64, "int32": 32, "int16": 16, "int8": 8, "uint8": 8}[dst]
    i &= (1 << bits) - 1
    if dst != "uint8" and i >= 1 << (bits - 1):
        i -= 1 << bits
    return i


SPECIAL = [float("nan"), float("inf"), -float("inf"), 2.9, -2.9, -0.5, 0.5, 127.9, 128.5, -129.0,
           255.5, 256.0, -1.0, 32767.5, -32769.0, 70000.0, 2 ** 31 - 0.5, -2.0 ** 31, 3e9, -3e9,
           2.0 ** 62, 2.0 ** 63, -2.0 ** 63, 1e30, -1e30]


def tricky_doubles():
    rng = np.random.default_rng(5)
    out = []
    for e in list(range(-30, 17)) + list(range(-133, 130, 7)):
        for k in range(-3, 4):
            for eps in (0.0, 2.0 ** -40, -2.0 ** -40, 2.0 ** -30):
                # at, just above and just below the halfway points of both formats
                out.append((1 + k * 2.0 ** -11 + eps) * 2.0 ** e)
                out.append(-(1 + (2 * k + 1) * 2.0 ** -9 + eps) * 2.0 ** e)
    out += list(rng.standard_normal(200) * 1e4) + [65504.0, 65519.99, 65520.0, 6.1e-5,
                                                     2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -25,
                                                     2.0 ** -26, 3e-8, 5e-324, -0.0, 1e300]
    return out + [float("nan"), float("inf"), -float("inf")]


def index_keys():
    """advanced keys of every kind eager serves, for a tensor of shape (5, 4, 3)"""
    i2 = tp.tensor([[1, -1], [0, 2]])
    m43 = data((4, 3), tp.bool, seed=40)
    return [
        (tp.tensor([0, 4, 2]), tp.tensor([3, 0, -1])),                 # two index tensors
        (tp.tensor([0, 4]), slice(None), tp.tensor([2, 0])),           # not adjacent: lead
        (slice(1, 4), tp.tensor([3, 0, 1]), tp.tensor([2, 2, 0])),     # adjacent, after a slice
        (slice(None), i2),                                             # 2-D index in the middle
        (Ellipsis, tp.tensor([2, 0])),
        (0, slice(None), tp.tensor([1, 2])),                           # an int selects first
        (tp.tensor([1, 3]), 2),
        (None, tp.tensor([1]), 0),
        tp.tensor([0, 1, 1], dtype=tp.int32),
        (tp.tensor([4, 0], dtype=tp.int32), tp.tensor([1], dtype=tp.int32)),   # broadcast
        (slice(None), m43),                                            # a mask after a slice
        (tp.tensor([2, 3]), slice(None), m43[0]),                      # a mask with an index
        [0, 2, 4],
        ([1, 1], [0, 3]),
        (slice(None, None, 2), tp.tensor([], dtype=tp.int64)),
        (tp.tensor([[0], [4]]), tp.tensor([1, 2, 3]), tp.tensor([0])),
    ]


def same_host(got, want):
    """got equals want exactly (shape, dtype, values, NaN where NaN)"""
    assert tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    g, w = got, want
    if str(got.dtype).endswith("bfloat16"):
        g, w = got.float(), want.float()
    assert np.array_equal(g.numpy(), w.numpy(), equal_nan=True), (g, w)


def same_on_cuda(got, want, tol=None):
    """got (CUDA) equals want (CPU): exactly, or within tol for floats;
    tuples and lists element by element"""
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same_on_cuda(g, w, tol)
        return
    assert got.is_cuda, "result left the device"
    assert tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    g, w = got.cpu(), want
    if str(w.dtype).endswith("bfloat16"):
        g, w = g.float(), w.float()
    g, w = g.numpy(), w.numpy()
    if tol is None or g.dtype.kind in "biu":
        assert np.array_equal(g, w, equal_nan=True), (g, w)
    else:
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                   rtol=tol, atol=tol, equal_nan=True)


class on_device:
    """asserts the ops named ran without a host fallback (tp.cuda.host_fallbacks()
    counts them) inside the block"""

    def __init__(self, *names):
        self.names = names

    def __enter__(self):
        self.before = dict(tp.cuda.host_fallbacks())
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            tp.cuda.synchronize()
            after = tp.cuda.host_fallbacks()
            for n in self.names:
                assert after.get(n, 0) == self.before.get(n, 0), f"{n} ran on the host"
