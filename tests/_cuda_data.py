"""Test inputs shared by the CUDA kernels' host-run tests (tests/test_cuda_kernels_host.py)
and their GPU twins (tests/gpu/test_cuda_native_ops.py): the same values on both sides."""
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
