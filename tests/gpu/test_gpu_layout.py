"""Layouts (strides) of fresh CUDA results follow PyTorch's rules, as on the
CPU (tests/test_layout_preserve_format.py), compared with torch CPU:
preserve_format for .cuda()/.cpu()/.to()/clone/casts/*_like, and
TensorIterator's layout for eager elementwise results (CUDA kernels write
row-major; the result is then laid out on the device). Compiled programs
on CUDA: values only (their outputs are row-major, as on the CPU).

Skipped without an NVIDIA GPU and its driver.
"""
import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")


def _base(lib, shape, dt, device=None):
    n = int(np.prod(shape))
    a = (np.arange(n, dtype=np.float64) % 7) - 2.5
    if dt == "bool":
        a = a > 0
    elif dt == "int64":
        a = np.round(a * 2)
    t = lib.tensor(a, dtype=getattr(lib, dt)).reshape(shape)
    return t.cuda() if device == "cuda" else t


# (base shape, the view taken of it), built on the device for tensorplay
VIEWS = {
    "contig": ((3, 4), lambda t: t),
    "t": ((3, 4), lambda t: t.t()),
    "perm3": ((2, 3, 4), lambda t: t.permute(2, 0, 1)),
    "perm4": ((2, 3, 4, 5), lambda t: t.permute(0, 2, 3, 1)),
    "perm4b": ((2, 3, 4, 5), lambda t: t.permute(3, 1, 0, 2)),
    "step": ((4, 6), lambda t: t[:, ::2]),
    "step_t": ((4, 6), lambda t: t.t()[::2]),
    "expand_t": ((1, 3), lambda t: t.expand(4, 3).t()),
    "zero_perm": ((2, 0, 3), lambda t: t.permute(2, 0, 1)),
    "one_perm": ((3, 1, 4), lambda t: t.permute(2, 1, 0)),
    "one_t": ((1, 4), lambda t: t.t()),
}


def _pair(case, dt="float32"):
    shape, view = VIEWS[case]
    return view(_base(tp, shape, dt, "cuda")), view(_base(torch, shape, dt))


def _same(got, want, values=True, tol=None):
    assert got.is_cuda, "result left the device"
    assert tuple(got.shape) == tuple(want.shape)
    assert tuple(got.stride()) == tuple(want.stride()), (got.stride(), want.stride())
    if values:
        g = np.asarray(got.cpu().tolist(), dtype=np.float64)
        w = np.asarray(want.tolist(), dtype=np.float64)
        if tol is None:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True)


# strides of size-1 and empty dims (which address nothing) can differ from
# torch's on CUDA: the H200 run at 96116c5 showed (1, 1) for torch's (1, 4)
# of a (4, 1) result and (2, 1, 1) for (1, 3, 3) of an empty one
_EDGE = pytest.mark.xfail(strict=False, reason="strides of size-1/empty dims on CUDA "
                          "(addressing-equivalent) are not yet torch's")


def _edge(cases):
    return [pytest.param(c, marks=_EDGE) if c in ("one_t", "zero_perm") else c
            for c in cases]


@pytest.mark.parametrize("case", _edge(sorted(VIEWS)))
def test_transfers_keep_layout(case):
    shape, view = VIEWS[case]
    h = view(_base(tp, shape, "float32"))
    y = view(_base(torch, shape, "float32"))
    d = h.cuda()
    assert d.is_cuda
    # torch's preserve_format: a dense tensor keeps its strides, any other
    # is laid out densely in its stride order (empty_like's)
    assert d.stride() == torch.empty_like(y).stride()
    assert np.array_equal(np.asarray(d.cpu().tolist()), np.asarray(y.tolist()))
    x, y = _pair(case)
    back = x.cpu()
    assert not back.is_cuda and back.stride() == y.clone().stride()
    assert np.array_equal(np.asarray(back.tolist()), np.asarray(y.tolist()))
    assert x.to("cpu", dtype=tp.float64).stride() == y.double().stride()


COPIES = {
    "clone": lambda L, x: x.clone(),
    "to_f64": lambda L, x: x.to(L.float64),
    "half": lambda L, x: x.half(),
    "int": lambda L, x: x.int(),
    "bool": lambda L, x: x.bool(),
    "contiguous": lambda L, x: x.contiguous(),
    "clone_contig": lambda L, x: x.clone(memory_format=L.contiguous_format),
}


@pytest.mark.parametrize("case", sorted(VIEWS))
@pytest.mark.parametrize("fn", sorted(COPIES))
def test_copies_on_device_preserve_layout(fn, case):
    x, y = _pair(case)
    _same(COPIES[fn](tp, x), COPIES[fn](torch, y))


@pytest.mark.parametrize("case", _edge(sorted(VIEWS)))
def test_like_factories_on_device(case):
    x, y = _pair(case)
    _same(tp.zeros_like(x), torch.zeros_like(y))
    _same(tp.full_like(x, 2.0), torch.full_like(y, 2.0))
    _same(tp.empty_like(x), torch.empty_like(y), values=False)
    _same(tp.randn_like(x, memory_format=tp.contiguous_format),
          torch.randn_like(y, memory_format=torch.contiguous_format), values=False)


@pytest.mark.xfail(strict=False, reason="rand_like of a CUDA tensor runs the generated "
                   "random kernel, row-major; torch keeps the input's layout (H200 run "
                   "at 96116c5)")
@pytest.mark.parametrize("case", ["t", "perm3", "perm4", "perm4b", "step_t", "one_perm"])
def test_rand_like_on_device_keeps_layout(case):
    x, y = _pair(case)
    _same(tp.rand_like(x), torch.rand_like(y), values=False)


@pytest.mark.parametrize("case", ["t", "perm3", "perm4b", "step_t"])
def test_rand_like_on_device_draws_in_memory_order(case):
    x, _ = _pair(case)
    tp.manual_seed(5)
    r = tp.rand_like(x)
    tp.manual_seed(5)
    flat = tp.rand(r.numel(), device="cuda")
    order = sorted(range(r.dim()), key=lambda d: -r.stride()[d])
    mem = r.permute(*order).contiguous().reshape(-1)
    assert np.array_equal(mem.cpu().numpy(), flat.cpu().numpy())


ELEMENTWISE = {
    "neg": lambda L, x: -x,
    "exp": lambda L, x: L.exp(x),
    "add1": lambda L, x: x + 1,
    "mul_self": lambda L, x: x * x,
    "gt": lambda L, x: x > 0,
    "bcast_row": lambda L, x: x + L.ones(x.shape[-1], device=x.device),
    "gelu": lambda L, x: L.nn.functional.gelu(x),
    "where": lambda L, x: L.where(x > 0, x, L.zeros((), device=x.device)),
    "hardtanh": lambda L, x: L.nn.functional.hardtanh(x),
}


@pytest.mark.parametrize("case", _edge(sorted(VIEWS)))
@pytest.mark.parametrize("fn", sorted(ELEMENTWISE))
def test_eager_elementwise_layout_on_device(fn, case):
    x, y = _pair(case)
    _same(ELEMENTWISE[fn](tp, x), ELEMENTWISE[fn](torch, y), tol=1e-5)


@pytest.mark.parametrize("case", ["t", "perm3", "perm4b", "step_t", "one_perm"])
def test_compiled_values_on_device(case):
    x, y = _pair(case)

    def f(a):
        return (a * 2).sin() + 1

    got = tp.compile(f)(x)
    assert got.is_cuda
    np.testing.assert_allclose(np.asarray(got.cpu().tolist()), np.asarray(f(y).tolist()),
                               rtol=1e-5, atol=1e-6)
