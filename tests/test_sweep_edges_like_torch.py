"""Edge values found by the randomized eager-vs-torch sweep of issue 13
(python3 /tmp sweep over float16/bfloat16/int8/uint8/int32/int64/bool with
NaN, +-inf, -0.0, INT_MIN, empty and 0-d operands), each as torch 2.13:

- a float16 result reads a tensor operand of another dtype as float16 first
  (int32 -2**31 becomes -inf: times -0.0 is NaN, not 0), but a 0-d second
  operand (TensorIterator's CPU scalar) at float32;
- integer floor_divide/remainder/fmod of an empty tensor by zero is empty,
  not a ZeroDivisionError;
- cumsum's running sum starts at +0 (a leading -0.0 sums to 0.0);
- a float16 prod rounds to float16 at every step (65504 * 65504 * 0 is NaN);
- abs/ceil/floor/round/trunc/relu of a bool tensor raise torch's errors.
Eager and compiled."""
import warnings

import numpy as np
import pytest

import tensorplay as tp

try:
    import torch
except Exception:  # torch is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")

CASES = {
    "int32 * half": lambda m: m.tensor([-2147483648, 2147483647, 1], dtype=m.int32)
    * m.tensor([-0.0, 0.0, 0.5], dtype=m.float16),
    "half / int64": lambda m: m.tensor([0.0, 1.0, float("inf")], dtype=m.float16)
    / m.tensor([2**62, 3, 5]),
    "int64 / half": lambda m: m.tensor([-(2**63) + 1, 0, 7]) / m.tensor([1.0, 0.0, 2.0], dtype=m.float16),
    "half * 0-d int32": lambda m: m.tensor([0.0, float("inf"), 1.0], dtype=m.float16)
    * m.tensor(-2147483648, dtype=m.int32),
    "0-d half / 0-d int32": lambda m: m.tensor(float("inf"), dtype=m.float16)
    / m.tensor(-2147483648, dtype=m.int32),
    "half // 0-d float": lambda m: m.tensor([0.0, -1.0], dtype=m.float16) // m.tensor(1e-40),
    "atan2 int32 half": lambda m: m.atan2(m.tensor([2147483647], dtype=m.int32),
                                          m.tensor([1.0], dtype=m.float16)),
    "empty uint8 % 0": lambda m: m.zeros(4, 0, dtype=m.uint8) % 0,
    "empty int64 // empty": lambda m: m.zeros(0, dtype=m.int64) // m.zeros(0, dtype=m.int64),
    "empty fmod 0": lambda m: m.fmod(m.zeros(0, dtype=m.int32), 0),
    "cumsum -0.0 half": lambda m: m.tensor([[-0.0, 0.5], [-2.5, -0.0]], dtype=m.float16).cumsum(0),
    "cumsum -0.0 float": lambda m: m.tensor([-0.0, -0.0, 1.0]).cumsum(0),
    "prod half overflow": lambda m: m.tensor([[65504.0, 65504.0, 0.0], [0.0, 3.0, 0.0]],
                                             dtype=m.float16).prod(-1),
    "prod half empty dim": lambda m: m.ones(4, 0, dtype=m.float16).prod(0),
    "prod half empty all": lambda m: m.ones(0, 3, dtype=m.float16).prod(),
    "prod half 0-d": lambda m: m.tensor(3.0, dtype=m.float16).prod(0),
    "prod half keepdim": lambda m: m.tensor([[2.0, 3.0], [4.0, 5.0]], dtype=m.float16).prod(1, keepdim=True),
    "prod half all": lambda m: m.tensor([65504.0, 65504.0, 0.0], dtype=m.float16).prod(),
    "abs bool": lambda m: m.abs(m.tensor([True, False])),
    "ceil bool": lambda m: m.ceil(m.tensor([True, False])),
    "floor bool": lambda m: m.floor(m.tensor([True, False])),
    "round bool": lambda m: m.round(m.tensor([True, False])),
    "trunc bool": lambda m: m.trunc(m.tensor([True, False])),
    "relu bool": lambda m: m.relu(m.tensor([True, False])),
}


def _outcome(f, m):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = f(m)
    except Exception as e:  # noqa: BLE001
        return type(e).__name__
    return str(r.dtype).split(".")[-1], tuple(r.shape), repr(np.asarray(r.tolist()).tolist()), \
        repr(np.signbit(np.asarray(r.tolist(), dtype=np.float64)).tolist())


def test_int_min_times_negative_zero_in_half_is_nan():
    r = tp.tensor([-2147483648], dtype=tp.int32) * tp.tensor([-0.0], dtype=tp.float16)
    assert np.isnan(r.tolist()[0])
    assert (tp.zeros(0, dtype=tp.uint8) % 0).shape == (0,)
    assert repr(tp.tensor([-0.0, 1.0]).cumsum(0).tolist()) == "[0.0, 1.0]"
    assert np.isnan(tp.tensor([65504.0, 65504.0, 0.0], dtype=tp.float16).prod().item())


@needs_torch
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("compiled", [False, True])
def test_sweep_edge_like_torch(name, compiled):
    f = CASES[name]
    want = _outcome(f, torch)
    got = _outcome((lambda m: tp.compile(lambda: f(tp))()) if compiled else f, tp)
    assert got == want
