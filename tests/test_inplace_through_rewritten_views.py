"""A write through a view of an intermediate that a pass rewrote reaches it.

Functionalization (csrc/graph/oplevel.c) tells a view (a write through it
reaches its base) from a copy by whether the two samples share storage. Two
passes used to break that link before it ran, and the write was lost with no
error (issue 13, silent wrong answers; fuzz N=20000 program 9593):

- DecomposePass gave the expansion's result a freshly computed sample, so
  `F.leaky_relu(x, 0.2).transpose(0, 1).zero_()` wrote a copy;
- CSE merged `v = x.exp()` into an earlier `x.exp()` when v's only user was a
  view outside the op table's view rows (`v.diagonal().zero_()`).

Compiled vs eager, default and strict, tolerance 1e-5 (the kernels' exp/erf
are not NumPy's bit for bit)."""
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

PRODUCERS = {
    "leaky_relu": lambda x: F.leaky_relu(x, negative_slope=0.2),
    "hardswish": F.hardswish,
    "silu": F.silu,
    "elu": F.elu,
    "hardtanh": F.hardtanh,
    "mish": F.mish,
    "softplus": F.softplus,
    "add0": lambda x: x + 0,
    "mul1": lambda x: x * 1,
    # a dead twin first: CSE must not merge the written value into it
    "cse_exp": lambda x: (x.exp(), x.exp())[1],
}
VIEWS = {
    "transpose": lambda v: v.transpose(0, 1),
    "t": lambda v: v.t(),
    "permute": lambda v: v.permute(1, 0),
    "diagonal": lambda v: v.diagonal(),
    "movedim": lambda v: v.movedim(0, 1),
    "t_slice": lambda v: v.t()[1:],
}
WRITES = {
    "zero_": lambda w: w.zero_(),
    "add_": lambda w: w.add_(1.5),
    "copy_": lambda w: w.copy_(tp.full(w.shape, 7.0)),
}


def _case(pk, vk, wk):
    def f(x0):
        v1 = PRODUCERS[pk](x0)
        WRITES[wk](VIEWS[vk](v1))
        return v1
    return f


@pytest.mark.parametrize("wk", sorted(WRITES))
@pytest.mark.parametrize("vk", sorted(VIEWS))
@pytest.mark.parametrize("pk", sorted(PRODUCERS))
def test_write_through_a_view_of_a_rewritten_value(pk, vk, wk):
    tp.manual_seed(0)
    x = tp.randn(3, 4)
    f = _case(pk, vk, wk)
    xe, xc = x.clone(), x.clone()
    want = f(xe)
    got = tp.compile(f)(xc)
    assert tp.allclose(got, want, atol=1e-5), (pk, vk, wk, got, want)
    assert tp.equal(xc, x)     # the input is not written


@pytest.mark.parametrize("pk", ["leaky_relu", "mish", "cse_exp"])
def test_strict_compiles_the_write_natively(pk):
    x = tp.randn(3, 4)
    f = _case(pk, "transpose", "zero_")
    got = tp.compile(f, strict_native=True)(x.clone())
    assert tp.allclose(got, f(x.clone()), atol=1e-5)


def test_the_fuzz_find_9593():
    def f(x0):
        v1 = F.leaky_relu(x0, negative_slope=0.2)
        v1.transpose(0, 1).zero_()
        return v1
    cf = tp.compile(f)
    for shape in [(3, 4), (5, 5), (2, 7)]:
        x = tp.randn(*shape)
        assert tp.equal(cf(x), tp.zeros(*shape))
