"""numpy() and np.asarray() of a tensor that requires grad raise torch's
error in eager, compiled and strict_native code (issue 13: the compiled
x.requires_grad_().mul(2).numpy() returned an array); numpy(force=True),
detach().numpy() and values computed under no_grad convert. Inside a
compiled function, a value computed from a tensor that requires grad
reports requires_grad=True, as eager does."""
import warnings

import numpy as np
import pytest

import tensorplay as tp

MSG = "Can't call numpy\\(\\) on Tensor that requires grad"


def _modes(f):
    yield f
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield tp.compile(f)
        yield tp.compile(f, strict_native=True)


def _call(f, *a):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f(*a)


@pytest.mark.parametrize("body", [
    lambda x: x.requires_grad_().mul(2).numpy(),
    lambda x: np.asarray(x.requires_grad_().mul(2)),
    lambda x: x.requires_grad_().numpy(),
])
def test_numpy_of_grad_tensor_raises(body):
    for f in _modes(body):
        with pytest.raises(RuntimeError, match=MSG):
            _call(f, tp.ones(2))


def test_numpy_of_grad_input_raises():
    w = tp.ones(2, requires_grad=True)
    for f in _modes(lambda w: (w * 2).numpy()):
        with pytest.raises(RuntimeError, match=MSG):
            _call(f, w)
    with pytest.raises(RuntimeError, match=MSG):
        np.asarray(w)


def test_numpy_conversions_that_pass():
    w = tp.ones(2, requires_grad=True)
    for f in _modes(lambda w: (w * 2).detach().numpy()):
        assert _call(f, w).tolist() == [2.0, 2.0]
    for f in (lambda w: (w * 2).numpy(force=True), lambda w: (w * 2).tolist()):
        assert list(_call(tp.compile(f), w)) == [2.0, 2.0]

    def under_no_grad(w):
        with tp.no_grad():
            return (w * 2).numpy()
    for f in _modes(under_no_grad):
        assert _call(f, w).tolist() == [2.0, 2.0]


def test_traced_requires_grad_flag_like_eager():
    seen = []

    def f(x):
        y = x.requires_grad_().mul(2)
        seen.append(bool(y.requires_grad))
        return y.detach()
    _call(tp.compile(f), tp.ones(2))
    assert seen == [True]
