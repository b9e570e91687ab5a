"""Gather-like ops with data-dependent indices, shared by
tests/test_compiled_index_bounds.py (compiled CPU, NVRTC lowering) and
tests/gpu/test_gpu_index_bounds.py (compiled CUDA): each case is
(fn, data shape, index of in-range values, the indexed dim's size,
wraps: negative indices count from the end)."""
import numpy as np

import tensorplay as tp
import tensorplay.nn.functional as F

CASES = {
    "index_select": (lambda x, i: x.index_select(0, i) * 2, (5, 3), [0, 4, 2, 2], 5, False),
    "index_select_dim1": (lambda x, i: x.index_select(1, i) + 1, (5, 3), [2, 0], 3, False),
    "gather": (lambda x, i: tp.gather(x, 1, i) + 1, (5, 3),
               [[0, 2], [1, 1], [2, 0], [0, 0], [1, 2]], 3, False),
    "embedding": (lambda w, i: F.embedding(i, w) * 2, (6, 4), [[0, 5], [3, 1]], 6, False),
    "getitem": (lambda x, i: x[i] + 1, (5, 3), [0, 4, 1], 5, True),
    "getitem_dim1": (lambda x, i: x[:, i] * 3, (5, 3), [2, 0, 1, 1], 3, True),
    "take": (lambda x, i: tp.take(x, i) * 2, (5, 3), [0, 14, 7], 15, True),
    "take_along_dim": (lambda x, i: tp.take_along_dim(x, i, dim=1) + 1, (5, 3),
                       [[0, 2], [1, 1], [2, 0], [0, 0], [1, 2]], 3, False),
    # one index tensor read by two gathers: one check serves both
    "two_uses": (lambda x, i: x.index_select(0, i) + (x * 2).index_select(0, i), (5, 3),
                 [1, 3], 5, False),
}


def index_values(case):
    """name -> index values: in range, and ones torch rejects (the last
    element replaced)"""
    _, _, good, n, wraps = CASES[case]
    vals = {"in_range": good}

    def with_last(v):
        a = np.array(good)
        a.reshape(-1)[-1] = v
        return a.tolist()

    if wraps:
        vals["negative_in_range"] = with_last(-n)
        vals["below_minus_n"] = with_last(-n - 1)
    else:
        vals["minus_one"] = with_last(-1)
    vals["one_past_the_end"] = with_last(n)
    vals["very_negative"] = with_last(-(2 ** 31) + 5)
    vals["very_large"] = with_last(2 ** 31 - 5)
    return vals


def data(case, device="cpu"):
    shape = CASES[case][1]
    x = tp.arange(int(np.prod(shape)), dtype=tp.float32).reshape(shape) * 0.5 - 1
    return x.to(device) if device != "cpu" else x


def outcome(fn, *args):
    """("ok", result as NumPy) or (exception type, message)"""
    try:
        r = fn(*args)
    except Exception as e:          # noqa: BLE001 - the error is the result
        return type(e), str(e)
    return "ok", r.cpu().numpy() if hasattr(r, "cpu") else np.asarray(r)


def same(got, want):
    assert got[0] == want[0], (got, want)
    if want[0] == "ok":
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=0)
    else:
        assert got[1] == want[1], (got, want)
