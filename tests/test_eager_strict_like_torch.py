"""Eager calls torch 2.13 refuses are refused the same way (issue 13): index
dtypes of index_add / index_copy / index_fill / index_select / gather /
indexing, out-of-range (negative) indices of index_add / index_copy, and a
Python number that overflows the tensor's dtype where torch converts it
with a check (fill_, full, masked_fill, clamp, index_fill). Messages against
the installed torch (skipped without it)."""
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
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = fn()
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e).splitlines()[0]
    return "ok", r.tolist() if hasattr(r, "tolist") else r, [str(x.message) for x in w
                                                            if "uint8" in str(x.message)]


def _same(build, type_only=False):
    got, want = _outcome(lambda: build(tp)), _outcome(lambda: build(torch))
    if type_only:
        assert got[0] == want[0]
        return
    # nan != nan: compare the lists' text
    assert repr(got) == repr(want)


IDX_DTYPES = ["int64", "int32", "int16", "int8", "uint8", "bool"]
INDEX_OPS = {
    "index_add": lambda m, i: m.zeros(5).index_add(0, i, m.ones(1)),
    "index_copy": lambda m, i: m.zeros(5).index_copy(0, i, m.ones(1)),
    "index_fill": lambda m, i: m.zeros(5).index_fill(0, i, 2.0),
    "index_select": lambda m, i: m.zeros(5).index_select(0, i),
    "gather": lambda m, i: m.zeros(5).gather(0, i),
    "getitem": lambda m, i: m.arange(5.0)[i],
}


@needs_torch
@pytest.mark.parametrize("dtype", IDX_DTYPES)
@pytest.mark.parametrize("op", sorted(INDEX_OPS))
def test_index_dtypes_like_torch(op, dtype):
    # getitem with a 1-element mask of a 5-element tensor: torch's mask shape
    # message differs (NumPy's, translated): the error type is checked
    _same(lambda m: INDEX_OPS[op](m, m.tensor([1], dtype=getattr(m, dtype))),
          type_only=op == "getitem" and dtype in ("uint8", "bool"))


def test_uint8_index_is_a_deprecated_mask():
    x = tp.arange(3.0)
    with pytest.warns(UserWarning, match="indexing with dtype torch.uint8 is now deprecated"):
        r = x[tp.tensor([1, 0, 1], dtype=tp.uint8)]
    assert r.tolist() == [0.0, 2.0]
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool"):
        x[tp.tensor([1], dtype=tp.int8)]


@needs_torch
@pytest.mark.parametrize("index", [-1, -6, 5, 4])
@pytest.mark.parametrize("op", ["index_add", "index_copy", "index_fill", "index_select"])
def test_out_of_range_and_negative_indices_like_torch(op, index):
    _same(lambda m: INDEX_OPS[op](m, m.tensor([index])))


@needs_torch
@pytest.mark.parametrize("op", ["index_add", "index_copy", "index_fill"])
def test_two_dim_index_like_torch(op):
    _same(lambda m: INDEX_OPS[op](m, m.tensor([[1], [2]])))


SCALAR_OPS = {
    "fill_": lambda m, dt, v: m.ones(2, dtype=dt).fill_(v),
    "full": lambda m, dt, v: m.full((2,), v, dtype=dt),
    "masked_fill": lambda m, dt, v: m.ones(2, dtype=dt).masked_fill(m.ones(2, dtype=m.bool), v),
    "clamp_max": lambda m, dt, v: m.ones(2, dtype=dt).clamp(max=v),
    "clamp_min": lambda m, dt, v: m.ones(2, dtype=dt).clamp(min=-v),
    "index_fill": lambda m, dt, v: m.ones(2, dtype=dt).index_fill(0, m.tensor([0]), v),
    "add": lambda m, dt, v: m.ones(2, dtype=dt) + v,       # no check in torch: inf
}
SKIP = set()
SCALARS = {
    "float16": [70000, 65519, 65504, 1e5, float("inf"), float("nan")],
    "bfloat16": [1e39, 3e38],
    "float32": [1e39, 3e38],
    "int8": [300, 127, -128, -129, 127.5],
    "uint8": [-1, -255, -256, 256],
    "int32": [2**31, 2**31 - 1],
    "int64": [2**63, -2**63],
    "float64": [1e308],
}


@needs_torch
@pytest.mark.parametrize("op", sorted(SCALAR_OPS))
@pytest.mark.parametrize("dtype", sorted(SCALARS))
def test_scalar_overflow_like_torch(op, dtype):
    if op in ("clamp_max", "clamp_min") and dtype.startswith(("int", "uint")):
        pytest.skip("integer clamp bounds: torch's own promotion rules, not this check")
    if (dtype, op) in SKIP:
        pytest.skip("not covered (see SKIP)")
    for v in SCALARS[dtype]:
        if op in ("clamp_max", "clamp_min") and v != v:
            continue
        _same(lambda m: SCALAR_OPS[op](m, getattr(m, dtype), v))


def test_float16_fill_overflow_message():
    with pytest.raises(RuntimeError, match="value cannot be converted to type c10::Half without overflow"):
        tp.ones(2, dtype=tp.float16).fill_(70000)
    assert (tp.ones(2, dtype=tp.float16) + 70000).tolist() == [float("inf")] * 2
