"""tp.autograd.Function against torch.autograd.Function (torch 2.13 CPU),
eager and inside tp.compile (issue 13: a model file's custom Function runs
unmodified; a compiled one never gives a wrong gradient)."""
import warnings

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")


def _defs(m):
    class Scaled(m.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, k):
            ctx.save_for_backward(x, w)
            ctx.k = k
            return x * w * k

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            # a deliberately "custom" gradient (not forward's derivative):
            # a compiled backward derived from forward's ops would differ
            return g * w * ctx.k * 2, (g * x * ctx.k).sum(0), None

    class TwoOut(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            idx = x.argmax(-1)
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(x)
            return x.exp(), idx

        @staticmethod
        def backward(ctx, gy, gidx):
            (x,) = ctx.saved_tensors
            assert gidx is None or float(gidx.abs().sum()) == 0.0
            return gy * x.exp()

    class NewStyle(m.autograd.Function):
        @staticmethod
        def forward(x, p):
            return x ** p

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, p = inputs
            ctx.p = p
            ctx.save_for_backward(x)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * ctx.p * x ** (ctx.p - 1), None

    return Scaled, TwoOut, NewStyle


X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=np.float32)
W = np.array([1.0, -2.0, 0.5], dtype=np.float32)


def _run(m, which):
    Scaled, TwoOut, NewStyle = _defs(m)
    x = m.tensor(X, requires_grad=True)
    w = m.tensor(W, requires_grad=True)
    if which == "scaled":
        y = Scaled.apply(x, w, 3.0)
        y.backward(m.ones_like(y))
        return [y, x.grad, w.grad], y.grad_fn.name()
    if which == "twoout":
        y, idx = TwoOut.apply(x)
        (y * 2).sum().backward()
        return [y, idx, x.grad], (idx.requires_grad, idx.grad_fn is None)
    y = NewStyle.apply(x, 3)
    y.sum().backward()
    return [y, x.grad], y.grad_fn.name()


@pytest.mark.parametrize("which", ["scaled", "twoout", "newstyle"])
def test_function_matches_torch(which):
    got, gmeta = _run(tp, which)
    want, wmeta = _run(torch, which)
    assert gmeta == wmeta
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g.tolist()), w.detach().numpy(), rtol=1e-6)


def test_needs_input_grad_and_no_grad_mode():
    seen = {}
    for m in (tp, torch):
        class F(m.autograd.Function):
            @staticmethod
            def forward(ctx, a, b, c):
                seen.setdefault(m.__name__, []).append(ctx.needs_input_grad)
                return a + b

            @staticmethod
            def backward(ctx, g):
                return g, g, None
        a = m.ones(2, requires_grad=True)
        y = F.apply(a, m.ones(2), 5)
        assert y.requires_grad
        with m.no_grad():
            z = F.apply(a, m.ones(2), 5)
        assert not z.requires_grad and z.grad_fn is None
    assert seen["tensorplay"] == seen["torch"] == [(True, False, False)] * 2


def test_errors_like_torch():
    for m in (tp, torch):
        class Few(m.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                return a * b

            @staticmethod
            def backward(ctx, g):
                return g

        class Shape(m.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a * 2

            @staticmethod
            def backward(ctx, g):
                return g[:1]
        a = m.ones(3, requires_grad=True)
        with pytest.raises(RuntimeError, match="returned an incorrect number of gradients "
                                               r"\(expected 2, got 1\)"):
            Few.apply(a, m.ones(3)).sum().backward()
        with pytest.raises(RuntimeError, match="returned an invalid gradient at index 0"):
            Shape.apply(a).sum().backward()


def test_saved_tensor_version_check_and_second_backward():
    Scaled, _, _ = _defs(tp)
    x = tp.tensor(X, requires_grad=True)
    w = tp.tensor(W, requires_grad=True)
    y = Scaled.apply(x * 1, w, 1.0)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.sum().backward()


def test_broadcast_gradient_is_summed_like_torch():
    outs = []
    for m in (tp, torch):
        class B(m.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a.clone()

            @staticmethod
            def backward(ctx, g):
                return g.expand(2, 3)        # expandable to a's (1, 3): torch sums it
        a = m.ones(1, 3, requires_grad=True)
        B.apply(a).sum().backward()
        outs.append(np.asarray(a.grad.tolist()))
    np.testing.assert_array_equal(outs[0], outs[1])


def test_compiled_never_gives_forwards_derivative():
    Scaled, _, _ = _defs(tp)
    want, _ = _run(torch, "scaled")

    def f(x, w):
        return Scaled.apply(x, w, 3.0)
    cf = tp.compile(f)
    x = tp.tensor(X, requires_grad=True)
    w = tp.tensor(W, requires_grad=True)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        y = cf(x, w)
        y.backward(tp.ones_like(y))
    assert any("autograd.Function" in str(r.message) for r in rec)
    for g, t in zip([y, x.grad, w.grad], want):
        np.testing.assert_allclose(np.asarray(g.tolist()), t.detach().numpy(), rtol=1e-6)
    # a second call, gradients again right
    x.grad = w.grad = None
    cf(x, w).backward(tp.ones_like(y))
    np.testing.assert_allclose(np.asarray(x.grad.tolist()), want[1].numpy(), rtol=1e-6)


def test_compiled_strict_refuses_custom_backward():
    Scaled, _, _ = _defs(tp)
    cf = tp.compile(lambda x, w: Scaled.apply(x, w, 3.0), strict_native=True)
    with pytest.raises(tp.compiler.NativeCompileError, match="autograd.Function"):
        cf(tp.tensor(X, requires_grad=True), tp.tensor(W))


def test_compiled_without_grad_traces_forward():
    Scaled, _, _ = _defs(tp)
    cf = tp.compile(lambda x, w: Scaled.apply(x, w, 3.0), strict_native=True)
    y = cf(tp.tensor(X), tp.tensor(W))
    np.testing.assert_allclose(np.asarray(y.tolist()), X * W * 3.0, rtol=1e-6)


def test_once_differentiable_and_legacy_call():
    class F(tp.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        @tp.autograd.function.once_differentiable
        def backward(ctx, g):
            return g * 2
    a = tp.ones(2, requires_grad=True)
    F.apply(a).sum().backward()
    assert a.grad.tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError, match="non-static forward"):
        F()(a)
