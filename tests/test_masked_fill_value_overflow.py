"""masked_fill / masked_fill_ with a 0-d tensor value that overflows the
input's dtype raises torch's "value cannot be converted to type ...
without overflow", as with a Python number (torch converts the 0-d value
to a Scalar): eager, and compiled on every call (a runtime check in the
program: one version serves every value; a bad one reruns the call
eagerly, which raises), strict_native too. Eager wrapped 1000 to -24."""
import pytest

import tensorplay as tp

MASK = [True, False, True]

CASES = [  # (dtype, value, overflows)
    ("int8", 1000, True), ("int8", 127, False), ("int8", -128, False), ("int8", -129, True),
    ("int8", 1000.0, True), ("int8", 2.5, False), ("uint8", -1, False), ("uint8", -256, True),
    ("uint8", -1.0, True), ("int32", 2 ** 40, True), ("int32", float("nan"), True),
    ("int64", 1e30, True), ("int64", float("inf"), True), ("float16", 1e6, True),
    ("float16", float("inf"), False), ("float16", -0.0, False), ("bool", 5, False),
    ("float32", 1e300, True), ("bfloat16", 1e39, True),
]
MSG = "value cannot be converted to type .* without overflow"


def _v(val):
    """the value as a 0-d tensor: float64 for a float (float32 would round
    1e300 to inf first), int64 for an int"""
    return tp.tensor(val, dtype=tp.float64) if isinstance(val, float) else tp.tensor(val)


def _eager(x, v, inplace):
    return x.masked_fill_(tp.tensor(MASK), v) if inplace else x.masked_fill(tp.tensor(MASK), v)


@pytest.mark.parametrize("dt, val, over", CASES)
@pytest.mark.parametrize("inplace", [False, True])
def test_eager_zero_dim_value_is_checked_as_a_number(dt, val, over, inplace):
    x = tp.zeros(3, dtype=getattr(tp, dt))
    if over:
        with pytest.raises(RuntimeError, match=MSG):
            _eager(x, _v(val), inplace)
        with pytest.raises(RuntimeError, match=MSG):
            _eager(x, val, inplace)
    else:
        assert _eager(x, _v(val), inplace).tolist() == _eager(
            tp.zeros(3, dtype=getattr(tp, dt)), val, inplace).tolist()


def test_eager_matches_torch():
    torch = pytest.importorskip("torch")
    for dt, val, over in CASES:
        if dt == "bfloat16":
            continue
        xt = torch.zeros(3, dtype=getattr(torch, dt))
        try:
            xt.masked_fill(torch.tensor(MASK), torch.tensor(val, dtype=torch.float64) if isinstance(val, float) else torch.tensor(val))
            raised = False
        except RuntimeError:
            raised = True
        assert raised == over, (dt, val)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("inplace", [False, True])
def test_compiled_checks_the_value_on_every_call(strict, inplace):
    if inplace:
        fn = lambda x, m, v: x.masked_fill_(m, v) * 1      # noqa: E731
    else:
        fn = lambda x, m, v: x.masked_fill(m, v)            # noqa: E731
    c = tp.compile(fn, strict_native=strict)
    m = tp.tensor(MASK)
    for val in (5, 1000, -7, 300, 127, -129, 0):
        x = tp.zeros(3, dtype=tp.int8)
        if -128 <= val <= 127:
            assert c(x, m, tp.tensor(val)).tolist() == [val, 0, val]
            assert x.tolist() == ([val, 0, val] if inplace else [0, 0, 0])
        else:
            with pytest.raises(RuntimeError, match=MSG):
                c(x, m, tp.tensor(val))
            assert x.tolist() == [0, 0, 0]          # nothing written, as eager
    assert c.compiles == 1


@pytest.mark.parametrize("dt, val, over", [c for c in CASES if c[0] != "bool"])
def test_compiled_first_call_matches_eager(dt, val, over):
    c = tp.compile(lambda x, m, v: x.masked_fill(m, v))
    ok = tp.tensor(1 if dt != "uint8" else 3)
    x = tp.zeros(3, dtype=getattr(tp, dt))
    c(x, tp.tensor(MASK), ok)                       # a version for this dtype pair
    v = _v(val)
    if over:
        with pytest.raises(RuntimeError, match=MSG):
            c(x, tp.tensor(MASK), v)
    else:
        got = c(x, tp.tensor(MASK), v)
        want = x.masked_fill(tp.tensor(MASK), v)
        assert str(got.tolist()) == str(want.tolist())
