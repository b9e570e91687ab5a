"""Outcomes of one call under tensorplay and torch, compared: the shared
core of the *_like_torch sweep tests (a result, or the exception's type)."""
import warnings

import numpy as np


def outcome(m, f):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = f(m)
    except Exception as e:  # noqa: BLE001
        return ("exc", type(e).__name__)
    if isinstance(r, (tuple, list)):
        return tuple(outcome(m, lambda m, x=x: x) for x in r)
    if isinstance(r, (bool, int, float, str)):
        return ("py", r)
    dt = str(r.dtype).split(".")[-1]
    v = r.float() if dt == "bfloat16" else r
    return ("t", dt, tuple(r.shape), np.asarray(v.tolist(), dtype=np.float64 if dt != "int64" else np.int64))


def same(a, b):
    if a and isinstance(a[0], tuple):
        return bool(b) and isinstance(b[0], tuple) and len(a) == len(b) and all(
            same(p, q) for p, q in zip(a, b))
    if a[0] != b[0]:
        return False
    if a[0] in ("exc", "py"):
        return a == b
    if a[1:3] != b[1:3]:
        return False
    x, y = a[3], b[3]
    if x.dtype.kind == "i" or y.dtype.kind == "i":
        return np.array_equal(x, y)
    with np.errstate(all="ignore"):
        return bool(np.all((np.isnan(x) & np.isnan(y)) | (x == y)
                           | (np.abs(x - y) <= 1e-5 * np.abs(y) + 1e-6)))
