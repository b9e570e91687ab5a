"""Prop. 2.1 of the seed through library code: a tensor the traced function
reads through an object (a parameter's .grad, m.parameters(), a user
object's method) is lifted, read again at every call, never a constant of
the trace (issue 13). Each case: replaced by another object of the same
shape, written in place, .grad set to None and back: eager's answer."""
import warnings

import pytest

import tensorplay as tp


def _close(a, b):
    return tp.allclose(a, b, rtol=1e-5, atol=1e-6)


def _model():
    tp.manual_seed(0)
    return tp.nn.Sequential(tp.nn.Linear(3, 2), tp.nn.ReLU(), tp.nn.Linear(2, 1))


def _step(m):
    m(tp.randn(4, 3)).sum().backward()


def test_grad_norms_follow_every_step():
    m = _model()

    def f():
        return tp.stack([p.grad.norm() for p in m.parameters()]).sum()
    g = tp.compile(f)
    for _ in range(4):
        _step(m)                    # accumulates: the same grad objects, written
        assert _close(g(), f())
    m.zero_grad(set_to_none=True)
    _step(m)                        # new grad objects
    assert _close(g(), f())


def test_grad_set_to_none_and_back():
    m = _model()

    def f():
        ps = [p for p in m.parameters() if p.grad is not None]
        return tp.stack([p.grad.abs().sum() for p in ps]).sum() if ps else tp.zeros(())
    g = tp.compile(f)
    _step(m)
    assert _close(g(), f())
    for p in m.parameters():
        p.grad = None
    assert g().item() == f().item() == 0.0
    _step(m)
    assert _close(g(), f())
    for p in m.parameters():
        p.grad = tp.full(p.shape, 2.0)     # replaced by another tensor of the same shape
    assert _close(g(), f())


def test_grad_of_a_global_tensor():
    ns = {"tp": tp}
    exec("w = tp.ones(3, requires_grad=True)\ndef f():\n    return w.grad * 2\n", ns)
    w, f = ns["w"], ns["f"]
    (w * 3).sum().backward()
    g = tp.compile(f)
    assert g().tolist() == [6.0, 6.0, 6.0]
    w.grad.add_(1)
    assert g().tolist() == f().tolist() == [8.0, 8.0, 8.0]
    w.grad = tp.full((3,), 5.0)
    assert g().tolist() == f().tolist() == [10.0, 10.0, 10.0]


def test_parameters_iterated_are_lifted():
    m = _model()

    def f():
        return sum(p.sum() for p in m.parameters())
    g = tp.compile(f)
    assert _close(g(), f())
    with tp.no_grad():
        for p in m.parameters():
            p.add_(1)               # an optimizer step
    assert _close(g(), f())
    m[0].weight = tp.nn.Parameter(tp.randn(2, 3))      # replaced
    assert _close(g(), f())


def test_buffers_iterated_are_lifted():
    bn = tp.nn.BatchNorm1d(3)

    def f():
        return sum(b.float().sum() for _, b in bn.named_buffers())
    g = tp.compile(f)
    assert _close(g(), f())
    bn.running_mean.add_(1)
    assert _close(g(), f())
    bn.running_mean = tp.full((3,), 7.0)
    assert _close(g(), f())


class _Holder:
    def __init__(self, t):
        self.t = t

    def get(self):
        return self.t


@pytest.mark.parametrize("via", ["method", "attribute"])
def test_a_tensor_of_a_plain_object(via):
    h = _Holder(tp.ones(3))

    def by_method(x):
        return x * h.get()

    def by_attribute(x):
        return x * h.t
    f = by_method if via == "method" else by_attribute
    g = tp.compile(f)
    x = tp.ones(3)
    assert g(x).tolist() == [1.0, 1.0, 1.0]
    h.t.add_(1)
    assert g(x).tolist() == f(x).tolist() == [2.0, 2.0, 2.0]
    h.t = tp.full((3,), 9.0)
    assert g(x).tolist() == f(x).tolist() == [9.0, 9.0, 9.0]


def test_a_module_attribute_replaced_or_written():
    m = tp.nn.Linear(3, 3)
    m.w = tp.randn(3)
    g = tp.compile(lambda x: m(x) * m.w)
    x = tp.randn(2, 3)
    assert _close(g(x), m(x) * m.w)
    m.w = tp.randn(3)
    assert _close(g(x), m(x) * m.w)
    m.w.add_(1)
    assert _close(g(x), m(x) * m.w)
    m.weight = tp.nn.Parameter(tp.randn(3, 3))
    assert _close(g(x), m(x) * m.w)


def test_strict_grad_norm_is_native():
    m = _model()
    _step(m)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        g = tp.compile(lambda: tp.stack([p.grad.norm() for p in m.parameters()]).sum(),
                       strict_native=True)
        want = tp.stack([p.grad.norm() for p in m.parameters()]).sum()
        assert _close(g(), want)
        _step(m)
        assert _close(g(), tp.stack([p.grad.norm() for p in m.parameters()]).sum())
