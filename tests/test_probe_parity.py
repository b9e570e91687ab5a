"""Divergences from PyTorch found by probing tensorplay as a torch user
would (eager, tp.compile, tp.compile(strict_native=True)); each test is the
minimal repro of one finding, compared with torch where it is installed."""
import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")


def _modes(fn):
    """fn eagerly, compiled, and compiled with strict_native."""
    return [("eager", fn), ("compile", tp.compile(fn)),
            ("strict", tp.compile(fn, strict_native=True))]


# ---------------------------------------------------------------- autograd

PROD_CASES = [
    ("one zero", lambda t: t.prod(), [2.0, 0.0, 3.0]),
    ("two zeros", lambda t: t.prod(), [0.0, 0.0, 3.0]),
    ("dim", lambda t: (t.prod(1) * 2 + t.prod(1)[0]).sum(),
     [[2.0, 0.0, 3.0], [0.0, 0.0, 1.0], [1.0, 2.0, 3.0]]),
    ("keepdim", lambda t: t.prod(0, keepdim=True).sum(),
     [[2.0, 0.0, 3.0], [0.0, 0.0, 1.0], [1.0, 2.0, 3.0]]),
]


@pytest.mark.parametrize("name,fn,x", PROD_CASES, ids=[c[0] for c in PROD_CASES])
def test_prod_backward_with_zeros_is_finite_like_torch(name, fn, x):
    # was grad * prod / x: 0/0 = NaN at a zero
    x = np.array(x, np.float32)
    t = torch.tensor(x, requires_grad=True)
    fn(t).backward()
    for mode, f in _modes(fn):
        p = tp.tensor(x, requires_grad=True)
        f(p).backward()
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-6, err_msg=mode)


@pytest.mark.parametrize("x", [[2.0, 0.0, 3.0], [0.0, 0.0, 3.0], [2.0, 5.0, 3.0]])
def test_prod_double_backward_with_zeros(x):
    w = [1.0, 2.0, 3.0]
    t = torch.tensor(x, requires_grad=True)
    g, = torch.autograd.grad(t.prod(), t, create_graph=True)
    want, = torch.autograd.grad((g * torch.tensor(w)).sum(), t)
    for mode, f in _modes(lambda a: a.prod())[:2]:
        p = tp.tensor(x, requires_grad=True)
        g, = tp.autograd.grad(f(p), p, create_graph=True)
        got, = tp.autograd.grad((g * tp.tensor(w)).sum(), p)
        np.testing.assert_allclose(got.numpy(), want.numpy(), err_msg=mode)


STD_CASES = [
    ("all", lambda t: t.std(), [1.0, 1.0, 1.0]),
    ("dim", lambda t: t.std(1).sum(), [[1.0, 1.0], [1.0, 2.0]]),
]


@pytest.mark.parametrize("name,fn,x", STD_CASES, ids=[c[0] for c in STD_CASES])
def test_std_backward_of_constant_slice_is_zero_like_torch(name, fn, x):
    # was var's gradient / (2 * std) = 0/0 = NaN where std is 0
    x = np.array(x, np.float32)
    t = torch.tensor(x, requires_grad=True)
    fn(t).backward()
    for mode, f in _modes(fn):
        p = tp.tensor(x, requires_grad=True)
        f(p).backward()
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), atol=1e-6, err_msg=mode)


def test_std_mean_backward_of_constant_slice():
    x = np.array([[1.0, 1.0], [1.0, 2.0]], np.float32)
    t = torch.tensor(x, requires_grad=True)
    s, m = torch.std_mean(t, 1)
    (s.sum() + m.sum()).backward()
    p = tp.tensor(x, requires_grad=True)
    s, m = tp.std_mean(p, 1)
    (s.sum() + m.sum()).backward()
    np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), atol=1e-6)


# ---------------------------------------------------------------- cumsum

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("shape,dim", [((3, 4), 1), ((3, 4), 0), ((2, 300), 1),
                                       ((700, 2), 0), ((5,), 0), ((2, 3, 5), -2)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_compiled_cumsum_keeps_nan_and_inf_in_place(shape, dim, dtype):
    # the compiled cumsum was a matmul with a triangle of ones: 0 * inf gave
    # NaN at every position before a NaN/inf and in the other rows' sums
    rng = np.random.default_rng(len(shape) * 1000 + dim)
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    pos = rng.choice(flat.size, min(3, flat.size), replace=False)
    for p, v in zip(pos, [NAN, INF, -INF]):
        flat[p] = v
    want = torch.tensor(x).to(getattr(torch, dtype)).cumsum(dim).float().numpy()
    for mode, f in _modes(lambda t: t.to(getattr(tp, dtype)).cumsum(dim)):
        got = f(tp.tensor(x)).float().numpy()
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3, equal_nan=True, err_msg=mode)


def test_compiled_cumsum_of_opposite_infinities_is_nan():
    x = np.array([1.0, INF, 2.0, -INF, 3.0, INF], np.float32)
    want = torch.tensor(x).cumsum(0).numpy()
    for mode, f in _modes(lambda t: t.cumsum(0)):
        np.testing.assert_array_equal(f(tp.tensor(x)).numpy(), want, err_msg=mode)


def test_compiled_cumsum_gradient_reaches_non_finite_elements():
    x = np.array([1.0, INF, 2.0, NAN, 3.0], np.float32)
    t = torch.tensor(x, requires_grad=True)
    (t.cumsum(0) * torch.arange(5.0)).sum().backward()
    for mode, f in _modes(lambda a: (a.cumsum(0) * tp.arange(5.0)).sum()):
        p = tp.tensor(x, requires_grad=True)
        f(p).backward()
        np.testing.assert_array_equal(p.grad.numpy(), t.grad.numpy(), err_msg=mode)
