"""(second part) PReLU/F.prelu, RReLU/F.rrelu, Tensor.index_put(_)
with accumulate=True, tp.cuda.amp / tp.cpu.amp against torch 2.13 CPU.

Each case compares dtype, shape, values (NaN and zero signs) or the
exception type (the first part: test_broad_sweep_like_torch.py)."""

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")


from _torch_outcome import outcome, same  # noqa: E402


cases = {}


def C(n, f):
    cases[n] = f


X=np.random.default_rng(0).standard_normal((2,3,4)).astype(np.float32)
C("prelu 1", lambda m: m.nn.functional.prelu(m.tensor(X), m.tensor([0.25])))
C("prelu C", lambda m: m.nn.functional.prelu(m.tensor(X), m.tensor([0.1,0.2,0.3])))
C("prelu bad", lambda m: m.nn.functional.prelu(m.tensor(X), m.tensor([0.1,0.2])))
C("prelu 1d", lambda m: m.nn.functional.prelu(m.tensor(X[0,0]), m.tensor([0.1,0.2,0.3,0.4])))
C("PReLU", lambda m: m.nn.PReLU(3)(m.tensor(X)))
C("PReLU sd", lambda m: list(m.nn.PReLU(3).state_dict().keys()))
C("rrelu eval", lambda m: m.nn.functional.rrelu(m.tensor(X)))
C("RReLU eval", lambda m: m.nn.RReLU(0.1, 0.3).eval()(m.tensor(X)))
C("index_put acc", lambda m: m.zeros(3).index_put((m.tensor([0, 0, 2]),), m.tensor([1., 2, 3]), accumulate=True))
C("index_put acc 2d", lambda m: m.zeros(3,4).index_put((m.tensor([0, 0, 2]), m.tensor([1,1,-1])), m.tensor(5.), accumulate=True))
C("index_put acc rows", lambda m: m.zeros(3,4).index_put((m.tensor([0, 0]),), m.ones(4), accumulate=True))
C("index_put noacc", lambda m: m.zeros(3,4).index_put((m.tensor([0, 2]), m.tensor([1,3])), m.tensor([7., 8])))
C("index_put_ mask", lambda m: m.zeros(3).index_put_((m.tensor([True, False, True]),), m.tensor(2.), accumulate=True))


@pytest.mark.parametrize("name", sorted(cases))
def test_matches_torch(name):
    want, got = outcome(torch, cases[name]), outcome(tp, cases[name])
    assert same(got, want), (got, want)


def test_prelu_compiled_gradients_and_index_put_compiled():
    m = tp.nn.PReLU(3)
    tm = torch.nn.PReLU(3)
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    xt = tp.tensor(x, requires_grad=True)
    tp.compile(lambda a: m(a).sum(), strict_native=True)(xt).backward()
    xr = torch.tensor(x, requires_grad=True)
    tm(xr).sum().backward()
    np.testing.assert_allclose(np.asarray(m.weight.grad.tolist()), tm.weight.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(xt.grad.tolist()), xr.grad.numpy(), rtol=1e-6)
    g = tp.compile(lambda a: a.index_put((tp.tensor([0, 0, 2]),), tp.tensor([1., 2, 3]),
                                         accumulate=True))
    assert g(tp.zeros(3)).tolist() == [3.0, 0.0, 3.0]


def test_amp_aliases():
    assert tp.cuda.amp.autocast().fast_dtype == tp.float16
    assert tp.cpu.amp.autocast().device == "cpu"
    with tp.cpu.amp.autocast():
        assert (tp.ones(2, 2) @ tp.ones(2, 2)).dtype == tp.bfloat16
    assert tp.cuda.amp.GradScaler is tp.amp.GradScaler
