"""Fill values are checked against the tensor's dtype as torch checks them,
in compiled code too: masked_fill and index_fill with a Python number that
overflows the dtype raise torch's "value cannot be converted to type ...
without overflow" (compiled code wrote inf into float16, or left a uint8
element unfilled), and a negative float does not fit uint8 (torch wraps
negative ints only: fill_(-1) is 255, fill_(-1.0) raises)."""
import warnings

import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

CASES = [
    ("index_fill", "uint8", -1.5), ("index_fill", "uint8", 70000), ("index_fill", "int8", float("nan")),
    ("index_fill", "float16", 7.0), ("masked_fill", "float16", 70000), ("masked_fill", "float16", 70000.0),
    ("masked_fill", "uint8", -0.5), ("masked_fill", "uint8", -1), ("masked_fill", "uint8", 3),
    ("fill_", "uint8", -1.0), ("fill_", "uint8", -1), ("full_like", "uint8", -2.5),
    ("full_like", "uint8", 255.5), ("fill_", "int8", -128.5), ("fill_", "int8", -128.0),
]


def _op(kind, m, x, v):
    if kind == "index_fill":
        return x.index_fill(0, m.tensor([0]), v)
    if kind == "masked_fill":
        return x.masked_fill(x > 1, v)
    if kind == "fill_":
        return x.clone().fill_(v)
    return m.full_like(x, v)


def _result(fn, x):
    try:
        return fn(x).float().tolist()
    except RuntimeError as e:
        assert "without overflow" in str(e), e
        return "overflow"


@pytest.mark.parametrize("kind,dt,v", CASES)
def test_fill_values_as_torch_eager_and_compiled(kind, dt, v):
    want = _result(lambda x: _op(kind, torch, x, v), torch.tensor([1, 2]).to(getattr(torch, dt)))
    x = tp.tensor([1, 2]).to(getattr(tp, dt))
    assert _result(lambda x: _op(kind, tp, x, v), x) == want
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _result(tp.compile(lambda x: _op(kind, tp, x, v)), x) == want
