"""F.pad accepts and refuses what torch 2.13 does (issue 13: a 4-D input
with a length-2 replicate pad was accepted). Every mode over 0-D..5-D
inputs and pad lengths 0..8, with negative pads: the same shape and values,
or the same exception type and message; eager, compiled and strict_native
(the error cases raise torch's error in every mode)."""
import warnings

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

try:
    import torch
    import torch.nn.functional as TF
except Exception:  # torch is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")
MODES = ["constant", "reflect", "replicate", "circular"]


def _outcome(fn, x):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = fn(x)
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e)
    return "ok", tuple(r.shape), repr(r.reshape(-1).tolist())


def test_replicate_pad_on_4d_with_two_values_is_refused():
    with pytest.raises(NotImplementedError, match="Padding size 2 is not supported for 4D input"):
        F.pad(tp.ones(1, 1, 3, 3), (1, 2), mode="replicate")
    with pytest.raises(NotImplementedError, match="Padding size 2 is not supported for 4D input"):
        tp.compile(lambda x: F.pad(x, (1, 2), mode="replicate"))(tp.ones(1, 1, 3, 3))
    with pytest.raises(RuntimeError, match="Argument #4: Padding size should be less than"):
        F.pad(tp.ones(2, 3), (3, 3), mode="reflect")
    with pytest.raises(RuntimeError, match="Padding value causes wrapping around more than once"):
        F.pad(tp.ones(2, 3), (4, 4), mode="circular")
    with pytest.raises(RuntimeError, match="narrow\\(\\): length must be non-negative"):
        F.pad(tp.ones(2, 3), (-2, -2))


@needs_torch
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nd", range(6))
def test_pad_grid_like_torch(mode, nd):
    shape = [2, 3, 3, 4, 3][:nd]
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    for plen in range(9):
        for pv in ([1], [2], [-1], [3], [4], [-2], [1, 2, 0, -1, 2, 1, 1, 0]):
            pad = tuple((pv * plen)[:plen])
            kw = {"value": 1.5} if mode == "constant" else {}
            want = _outcome(lambda x: TF.pad(x, pad, mode=mode, **kw), torch.tensor(a))
            got = _outcome(lambda x: F.pad(x, pad, mode=mode, **kw), tp.tensor(a))
            assert got == want, (shape, pad)


@needs_torch
def test_pad_random_like_torch():
    rng = np.random.default_rng(0)
    for trial in range(600):
        nd = int(rng.integers(0, 6))
        shape = [int(rng.integers(0 if rng.random() < 0.1 else 1, 5)) for _ in range(nd)]
        a = rng.standard_normal(shape).astype(np.float32)
        pad = tuple(int(v) for v in rng.integers(-5, 6, 2 * int(rng.integers(0, 4))))
        mode = MODES[trial % 4]
        if mode == "circular" and any(p < 0 for p in pad):
            continue   # torch's circular pad can read uninitialised memory there
        want = _outcome(lambda x: TF.pad(x, pad, mode=mode), torch.tensor(a))
        got = _outcome(lambda x: F.pad(x, pad, mode=mode), tp.tensor(a))
        if want[0] == "RuntimeError" and "numel: integer multiplication overflow" in want[1]:
            continue   # torch's own overflow on a negative size
        assert got == want, (shape, pad, mode)


@needs_torch
@pytest.mark.parametrize("strict", [False, True])
def test_pad_errors_compiled_like_torch(strict):
    cases = [((1, 1, 3, 3), (1, 2), "replicate"), ((2, 3), (3, 3), "reflect"),
             ((2, 3), (4, 4), "circular"), ((2, 3), (-2, -2), "constant"),
             ((3,), (1, 1), "reflect"), ((2, 3), (1, 1, 1), "constant"),
             ((2, 3), (-1, 2), "constant"), ((1, 1, 3, 3), (1, 2, 1, 1), "replicate")]
    for shape, pad, mode in cases:
        a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        want = _outcome(lambda x: TF.pad(x, pad, mode=mode), torch.tensor(a))
        f = tp.compile(lambda x: F.pad(x, pad, mode=mode), strict_native=strict)
        got = _outcome(f, tp.tensor(a))
        assert got == want, (shape, pad, mode, strict)
    with pytest.raises(RuntimeError, match="doesn't take in value argument"):
        F.pad(tp.ones(2, 3), (1, 1), mode="reflect", value=2.0)
