"""Python-int scalars as torch 2.13 takes them (issue 13), eager, compiled
and strict_native:

- a negative bound of an unsigned clamp/where wraps (uint8 clamp(-5, 5) is
  5 everywhere: -5 is 251), where NumPy raised OverflowError;
- an int in [2**63, 2**64) is torch's uint64 Scalar: it wraps into an
  integral tensor's dtype (int64 + 2**63 == int64 - 2**63), keeps its value
  for a float computation, and meeting only bool raises torch's promotion
  error; beyond 64 bits it is OverflowError with torch's message;
- a compiled integer constant beyond 2**53 is exact (it went through a
  double: x + (2**53 + 1) was off by one);
- inf/nan into an integer dtype (fill_, full, masked_fill) raise torch's
  "value cannot be converted" error; where's scalar is checked against the
  result dtype (float16/bfloat16 unchecked, as torch)."""
import warnings

import pytest

import tensorplay as tp

try:
    import torch
except Exception:  # torch is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")


def _outcome(fn):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = fn()
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e).splitlines()[0]
    return "ok", str(r.dtype).split(".")[-1], repr(r.tolist())


CLAMP = [
    (lambda x: x.clamp(-5, 5), [1, 2, 250, 255], "uint8"),
    (lambda x: x.clamp(min=-129), [1, 2, 250], "uint8"),
    (lambda x: x.clamp(max=-5), [0, 1, 250, 255], "uint8"),
    (lambda x: x.clamp(-1, 255), [0, 7], "uint8"),
    (lambda x: x.clamp_min(-5), [0, 1, 250, 255], "uint8"),
    (lambda x: x.clamp(-300, 5), [1], "uint8"),
    (lambda x: x.clamp(-5, 5), [0, -7, 100], "int8"),
    (lambda x: x.clamp(-0.5, 2.5), [0, 1, 250], "uint8"),
]

OVERFLOW = [
    (lambda x: x + 2**63, [1, -1, 5], "int64"),
    (lambda x: 2**63 + x, [1, -1, 5], "int64"),
    (lambda x: x - 2**63, [1, -1, 5], "int64"),
    (lambda x: x * (2**64 - 1), [1, -1, 5], "int64"),
    (lambda x: x // 2**63, [1, -1, 5], "int64"),
    (lambda x: x % 2**63, [1, -1, 5], "int64"),
    (lambda x: x == 2**64 - 1, [1, -1, 5], "int32"),
    (lambda x: x > 2**63, [1, -1, 5], "int64"),
    (lambda x: x / 2**63, [1, -1, 5], "int64"),
    (lambda x: x + 2**63, [1, -1, 5], "float32"),
    (lambda x: x + 2**63, [1, 255, 5], "uint8"),
    (lambda x: x + 2**63, [1, -1, 5], "int8"),
    (lambda x: x + 2**40, [1, -1, 5], "int32"),
    (lambda x: x + 300, [1, 2, 5], "uint8"),
    (lambda x: x + 2**64, [1, 2], "int64"),
    (lambda x: x + (-2**63 - 1), [1, 2], "int64"),
    (lambda x: x * 2**70, [1, 2], "float32"),
    (lambda x: x + 2**63, [True, False], "bool"),
    (lambda x: x * (2**64 - 1), [True, False], "bool"),
    (lambda x: x + (2**53 + 1), [0, 1], "int64"),
    (lambda x: x * 3 + (2**62 + 1), [0, 1, -5], "int64"),
    (lambda x: -(2**62 + 1) + x, [0, 1], "int64"),
]


def _check(fn, data, dtype, modes=("eager", "compiled", "strict")):
    want = _outcome(lambda: fn(torch.tensor(data, dtype=getattr(torch, dtype))))
    for mode in modes:
        f = fn if mode == "eager" else tp.compile(fn, strict_native=mode == "strict")
        got = _outcome(lambda: f(tp.tensor(data, dtype=getattr(tp, dtype))))
        assert got == want, (mode, got, want)


@needs_torch
@pytest.mark.parametrize("case", range(len(CLAMP)))
def test_unsigned_clamp_bounds_wrap_like_torch(case):
    _check(*CLAMP[case])


@needs_torch
@pytest.mark.parametrize("case", range(len(OVERFLOW)))
def test_uint64_scalar_like_torch(case):
    _check(*OVERFLOW[case])


def test_uint8_clamp_negative_bound_values():
    # no torch needed: the values torch 2.13 gives
    x = tp.tensor([1, 2, 250], dtype=tp.uint8)
    assert x.clamp(-5, 5).tolist() == [5, 5, 5]
    assert tp.compile(lambda x: x.clamp(-5, 5), strict_native=True)(x).tolist() == [5, 5, 5]
    assert (tp.tensor([1, -1]) + 2**63).tolist() == [-2**63 + 1, 2**63 - 1]
    with pytest.raises(OverflowError, match="can't convert negative int to unsigned"):
        tp.tensor([1]) + (-2**63 - 1)
    with pytest.raises(OverflowError, match="int too big to convert"):
        tp.full((2,), 2**64, dtype=tp.float64)
    with pytest.raises(RuntimeError, match="attempted to promote Bool and UInt64"):
        tp.tensor([True]) + 2**63


SCALAR_INTO = {
    "fill_": lambda m, dt, v: m.zeros(2, dtype=dt).fill_(v),
    "full": lambda m, dt, v: m.full((2,), v, dtype=dt),
    "masked_fill": lambda m, dt, v: m.zeros(2, dtype=dt).masked_fill(m.ones(2, dtype=m.bool), v),
    "index_fill": lambda m, dt, v: m.zeros(2, dtype=dt).index_fill(0, m.tensor([0]), v),
    "where": lambda m, dt, v: m.where(m.tensor([False, True]), m.zeros(2, dtype=dt), v),
    "clamp": lambda m, dt, v: m.zeros(2, dtype=dt).clamp(max=v),
}


@needs_torch
@pytest.mark.parametrize("op", sorted(SCALAR_INTO))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8", "uint8",
                                   "int64", "bool"])
def test_scalar_into_dtype_like_torch(op, dtype):
    for v in [70000, 1e39, -1e300, 2**63, 2**64 - 1, 2**64, -2**63 - 1, 300, -300, -5,
              float("inf"), float("nan")]:
        got = _outcome(lambda: SCALAR_INTO[op](tp, getattr(tp, dtype), v))
        want = _outcome(lambda: SCALAR_INTO[op](torch, getattr(torch, dtype), v))
        assert got == want, (v, got, want)
