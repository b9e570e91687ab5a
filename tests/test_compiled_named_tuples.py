"""A compiled function returning what eager returns as a named tuple
(tp.return_types.topk with .values/.indices, as torch.return_types) gives
the same named tuple type: the graph's output flattens it to a plain tuple,
the driver makes it again on every path (the C fast path, the Python path,
compiled autograd, dynamic shapes), nested in lists, tuples and dicts."""
import warnings

import pytest

import tensorplay as tp

CASES = {
    "topk": lambda a: a.topk(2),
    "topk_fn": lambda a: tp.topk(a, 2, dim=0, largest=False),
    "max_dim": lambda a: a.max(1),
    "max_kw": lambda a: tp.max(a, dim=1, keepdim=True),
    "min_dim": lambda a: tp.min(a, 1),
    "sort": lambda a: a.sort(1, descending=True),
    "kthvalue": lambda a: tp.kthvalue(a, 2, 1),
    "mode": lambda a: a.mode(1),
    "median_dim": lambda a: a.median(1),
    "nanmedian_dim": lambda a: tp.nanmedian(a, 0),
    "aminmax": lambda a: tp.aminmax(a, dim=1),
    "cummax": lambda a: a.cummax(1),
    "cummin": lambda a: tp.cummin(a, 0),
    "var_mean": lambda a: tp.var_mean(a, 1),          # a plain tuple in torch too
    "std_mean": lambda a: tp.std_mean(a, 1),
    "nested": lambda a: {"m": [a.max(0), a * 2], "t": (a.sort(0), 3)},
    "values_only": lambda a: a.topk(2).values * 2,
    "mixed": lambda a: (a.max(1), a.topk(1).indices),
}


def _same(got, want):
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            _same(got[k], want[k])
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        if hasattr(want, "_fields"):
            assert got._fields == want._fields
        for g, w in zip(got, want):
            _same(g, w)
    elif isinstance(want, tp.Tensor):
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
    else:
        assert got == want


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("mode", ["default", "strict", "dynamic"])
def test_compiled_returns_eagers_named_tuple(name, mode):
    fn = CASES[name]
    kw = {"strict_native": True} if mode == "strict" else (
        {"dynamic": True} if mode == "dynamic" else {})
    c = tp.compile(fn, **kw)
    gen = tp.Generator().manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for shape in ((4, 5), (4, 5), (4, 5), (6, 5)):
            x = tp.randn(*shape, generator=gen)
            want = fn(x)
            try:
                got = c(x)
            except tp._C.NativeCompileError:
                if mode == "strict":
                    return       # an op without a native kernel: strict's refusal
                raise
            _same(got, want)


def test_eager_named_tuple_types_are_torchs():
    x = tp.randn(3, 4)
    for name, fn in CASES.items():
        if name in ("nested", "values_only", "mixed"):
            continue
        r = fn(x)
        if name in ("var_mean", "std_mean"):
            assert type(r) is tuple
        else:
            assert type(r).__module__ == "tensorplay.return_types", name
            assert r._fields == ("values", "indices") or r._fields == ("min", "max"), name


def test_named_tuple_with_grad_through_compiled_autograd():
    w = tp.randn(4, 5, requires_grad=True)
    c = tp.compile(lambda a: (a * 2).topk(2))
    for _ in range(2):
        r = c(w)
        assert type(r).__name__ == "topk"
        r.values.sum().backward()
    ref = tp.zeros(4, 5)
    idx = (w * 2).topk(2).indices
    ref.scatter_(1, idx, 2.0)
    assert w.grad.tolist() == (ref * 2).tolist()
