"""What a PyTorch user sees printed: return_types namedtuples (topk, sort,
max(dim), ...) print as torch's ``torch.return_types.topk(\\nvalues=...``,
and module reprs match torch's (activations show inplace only when set,
Embedding's padding_idx, LayerNorm's bias, pools, Unflatten)."""
import pytest

import tensorplay as tp
import tensorplay.nn as nn

torch = pytest.importorskip("torch")


def same(a, b):
    assert repr(a).replace("tensorplay", "torch") == repr(b)


@pytest.mark.parametrize("call", [
    lambda L, x: x.topk(2), lambda L, x: x.sort(), lambda L, x: x.max(dim=1),
    lambda L, x: x.min(1), lambda L, x: L.sort(x, dim=0, descending=True),
    lambda L, x: L.topk(x, 1, dim=0), lambda L, x: x.median(dim=1),
    lambda L, x: L.aminmax(x),
])
def test_return_types_repr(call):
    a = [[3.0, 1.0, 2.0], [0.5, 5.0, -1.0]]
    same(call(tp, tp.tensor(a)), call(torch, torch.tensor(a)))


def test_return_types_still_tuples():
    r = tp.tensor([3.0, 1.0, 2.0]).sort()
    v, i = r
    assert r.values is v and r.indices is i and isinstance(r, tuple)
    assert type(r).__module__ == "tensorplay.return_types"


MODULES = [
    lambda n: n.ReLU(), lambda n: n.ReLU(inplace=True), lambda n: n.ReLU6(),
    lambda n: n.LeakyReLU(), lambda n: n.LeakyReLU(0.2, True), lambda n: n.ELU(),
    lambda n: n.CELU(), lambda n: n.SELU(), lambda n: n.Hardtanh(),
    lambda n: n.Threshold(0.1, 20.0), lambda n: n.GELU(), lambda n: n.GELU("tanh"),
    lambda n: n.SiLU(), lambda n: n.Mish(), lambda n: n.Hardswish(), lambda n: n.Hardsigmoid(),
    lambda n: n.Embedding(3, 4), lambda n: n.Embedding(3, 4, padding_idx=0),
    lambda n: n.LayerNorm(4), lambda n: n.LayerNorm((2, 4), elementwise_affine=False),
    lambda n: n.LayerNorm(4, bias=False), lambda n: n.RMSNorm(4),
    lambda n: n.AvgPool2d(2), lambda n: n.AvgPool2d((2, 3), 1), lambda n: n.AvgPool1d(3, 1, 1),
    lambda n: n.MaxUnpool2d(2), lambda n: n.MaxUnpool1d(2), lambda n: n.Unflatten(1, (2, 2)),
    lambda n: n.Sequential(n.Linear(2, 3), n.ReLU(), n.Dropout(0.1)),
]


@pytest.mark.parametrize("make", MODULES)
def test_module_repr(make):
    same(make(nn), make(torch.nn))
