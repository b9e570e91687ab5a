"""Module.register_full_backward_hook / register_full_backward_pre_hook
against torch 2.13 CPU (issue 13): the gradients the hooks see, the
replacement of grad_input / grad_output, removal, and compiled callers."""
import warnings

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=np.float32)
W = np.array([[1.0, -2.0, 0.5], [0.3, 0.7, -1.1]], dtype=np.float32)


def _np(t):
    return None if t is None else np.asarray(t.detach().tolist() if hasattr(t, "detach") else t.tolist())


def _run(m, scale_in=None, scale_out=None, x_grad=True, remove=False):
    lin = m.nn.Linear(3, 2)
    with m.no_grad():
        lin.weight.copy_(m.tensor(W))
        lin.bias.zero_()
    seen = []

    def hook(mod, gin, gout):
        seen.append(("hook", mod is lin, [_np(g) for g in gin], [_np(g) for g in gout]))
        if scale_in is not None:
            return tuple(None if g is None else g * scale_in for g in gin)

    def pre(mod, gout):
        seen.append(("pre", mod is lin, [_np(g) for g in gout]))
        if scale_out is not None:
            return tuple(g * scale_out for g in gout)
    h1 = lin.register_full_backward_hook(hook)
    h2 = lin.register_full_backward_pre_hook(pre)
    if remove:
        h1.remove()
        h2.remove()
    x = m.tensor(X, requires_grad=x_grad)
    y = lin(x)
    (y * m.tensor([1.0, 3.0])).sum().backward()
    return seen, _np(x.grad), _np(lin.weight.grad)


def _same(a, b):
    if isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), (a, b)
        for p, q in zip(a, b):
            _same(p, q)
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert a is not None and b is not None, (a, b)
        np.testing.assert_allclose(a, b, rtol=1e-6)
    else:
        assert a == b


@pytest.mark.parametrize("kw", [{}, {"scale_in": 2.0}, {"scale_out": 0.5},
                                {"scale_in": 3.0, "scale_out": 2.0}, {"x_grad": False},
                                {"remove": True}])
def test_full_backward_hooks_match_torch(kw):
    _same(_run(tp, **kw), _run(torch, **kw))


def test_compiled_caller_runs_the_hooks():
    want = _run(torch, scale_in=2.0)
    lin = tp.nn.Linear(3, 2)
    with tp.no_grad():
        lin.weight.copy_(tp.tensor(W))
        lin.bias.zero_()
    seen = []
    lin.register_full_backward_hook(
        lambda mod, gin, gout: seen.append(1) or tuple(g * 2.0 for g in gin))
    f = tp.compile(lambda x: (lin(x) * tp.tensor([1.0, 3.0])).sum())
    x = tp.tensor(X, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f(x).backward()
    assert seen == [1]
    np.testing.assert_allclose(_np(x.grad), want[1], rtol=1e-6)
