"""In-place writes whose input shares memory with the written tensor, as
torch 2.13 (issue 13: x += x.t() computed a value): TensorIterator's
assert_no_partial_overlap for in-place pointwise ops, copy_ and basic
setitem (dense tensors over the same bytes in another layout, or
overlapping ranges, raise; the same tensor or layout passes; non-dense
layouts are too hard to tell and pass), and assert_no_overlap for the index
ops and advanced setitem (the same memory raises too). Eager, compiled and
strict_native."""
import warnings

import pytest

import tensorplay as tp

try:
    import torch
except Exception:  # torch is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")
MSG = "some elements of the input tensor and the written-to tensor refer to a single memory location"


def _set(x, i, v):
    x[i] = v
    return x


CASES = {
    "x += x.t()": lambda m, x, b: x.__iadd__(x.t()),
    "x += x": lambda m, x, b: x.__iadd__(x),
    "same layout view": lambda m, x, b: x.add_(x.view(9).view(3, 3)),
    "overlapping rows": lambda m, x, b: x[0:2].add_(x[1:3]),
    "strided columns": lambda m, x, b: x[:, 0].add_(x[:, 1]),
    "disjoint rows": lambda m, x, b: x[0].add_(x[1]),
    "broadcast row": lambda m, x, b: x.mul_(x[0]),
    "0-d element": lambda m, x, b: x[0].add_(x[0, 0]),
    "copy_ transpose": lambda m, x, b: x.copy_(x.t()),
    "t().copy_": lambda m, x, b: x.t().copy_(x),
    "copy_ self": lambda m, x, b: x.copy_(x),
    "clamp_ tensor": lambda m, x, b: x.clamp_(x.t()),
    "lerp_": lambda m, x, b: x.lerp_(x.t(), 0.5),
    "shifted sub_": lambda m, x, b: x.view(-1)[1:].sub_(x.view(-1)[:-1]),
    "alpha": lambda m, x, b: x.add_(x.t(), alpha=2),
    "pow_": lambda m, x, b: x.pow_(x.t()),
    "relu_ of a view": lambda m, x, b: x.t().relu_(),
    "intermediate": lambda m, x, b: (lambda y: y.add_(y.t()))(x * 2),
    "setitem shift": lambda m, x, b: _set(b, slice(1, None), b[:3]),
    "setitem ellipsis": lambda m, x, b: _set(x, Ellipsis, x.t()),
    "setitem same": lambda m, x, b: _set(x, slice(None), x),
    "setitem column": lambda m, x, b: _set(x, 0, x[:, 0]),
    "setitem index": lambda m, x, b: _set(b, m.tensor([0, 1]), b[1:3]),
    "setitem all": lambda m, x, b: _set(b, m.tensor([0, 1, 2, 3]), b),
    "setitem mask": lambda m, x, b: _set(b, b > 1, b[:2]),
    "index_add_": lambda m, x, b: b.index_add_(0, m.tensor([0, 1]), b[1:3]),
    "index_add_ self": lambda m, x, b: b.index_add_(0, m.arange(4), b),
    "index_copy_": lambda m, x, b: b.index_copy_(0, m.tensor([0, 1]), b[1:3]),
    "scatter_": lambda m, x, b: b.scatter_(0, m.tensor([0, 1]), b[1:3]),
    "scatter_add_": lambda m, x, b: b.scatter_add_(0, m.tensor([0, 1]), b[1:3]),
}


def _outcome(m, f):
    x, b = m.arange(9.0).reshape(3, 3), m.arange(4.0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = f(m, x, b)
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e)
    return "ok", r.tolist()


def test_transpose_add_raises():
    x = tp.ones(3, 3)
    with pytest.raises(RuntimeError, match=MSG):
        x += x.t()
    x += x
    assert x.tolist() == [[2.0] * 3] * 3
    with pytest.raises(RuntimeError, match=MSG):
        tp.compile(lambda x: x.add_(x.t()))(tp.ones(3, 3))
    with pytest.raises(RuntimeError, match=MSG):
        tp.compile(lambda x: x.add_(x.t()), strict_native=True)(tp.ones(3, 3))


@needs_torch
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("mode", ["eager", "compiled", "strict"])
def test_overlap_like_torch(name, mode):
    f = CASES[name]
    want = _outcome(torch, f)
    if mode == "eager":
        got = _outcome(tp, f)
    else:
        g = tp.compile(lambda x, b: f(tp, x, b), strict_native=mode == "strict")
        got = _outcome(tp, lambda m, x, b: g(x, b))
    assert got == want
