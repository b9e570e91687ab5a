"""The eager autograd engine: grad_fn graph, backward/grad semantics, hooks,
retain_grad, version-counter checks, in-place rules, grad modes, torch's
messages for bad input, and tp.compile with inputs that require grad."""
import gc
import warnings
import weakref

import numpy as np
import pytest
import torch

import tensorplay as tp


def t(a, rg=True, dtype=None):
    return tp.tensor(np.asarray(a, dtype=np.float64 if dtype is None else dtype),
                     requires_grad=rg)


def test_leaves_grad_fn_and_next_functions():
    x = t([1.0, 2.0, 3.0])
    y = x * 2
    z = y.sum()
    assert x.is_leaf and x.grad_fn is None
    assert not y.is_leaf and y.requires_grad
    assert y.grad_fn.name() == "MulBackward0"
    assert type(z.grad_fn).__name__ == "Node"
    (fn, nr), = z.grad_fn.next_functions
    assert fn is y.grad_fn and nr == 0
    acc, _ = y.grad_fn.next_functions[0]
    assert acc.name() == "AccumulateGrad" and acc.variable is x
    # the same leaf has one AccumulateGrad
    assert (x + 1).grad_fn.next_functions[0][0] is acc
    # a constant operand has no edge
    assert (x * t([1.0, 1, 1], rg=False)).grad_fn.next_functions[1] == (None, 0)
    assert "grad_fn=<SumBackward0>" in repr(z)


def test_backward_accumulates_into_grad():
    x = t([1.0, 2.0, 3.0])
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, 4, 6])
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5, 7, 9])
    assert x.grad.grad_fn is None and not x.grad.requires_grad


def test_diamond_graph_matches_torch():
    a = np.array([[0.5, -1.0], [2.0, 0.25]])
    x = t(a)
    y = x.exp()
    z = (y * x + y.sin()).mean() + (x @ y).sum()
    z.backward()
    tx = torch.tensor(a, requires_grad=True)
    ty = tx.exp()
    ((ty * tx + ty.sin()).mean() + (tx @ ty).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_non_scalar_backward_needs_gradient():
    x = t([1.0, 2.0])
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        (x * 2).backward()
    (x * 2).backward(gradient=t([1.0, -1.0], rg=False))
    np.testing.assert_allclose(x.grad.numpy(), [2, -2])
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).backward(t([1.0, 2.0, 3.0], rg=False))


def test_backward_on_tensor_without_grad():
    x = t([1.0], rg=False)
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad and does "
                                           "not have a grad_fn"):
        x.sum().backward()


def test_second_backward_through_freed_graph():
    x = t([1.0, 2.0])
    z = (x * x).exp().sum()
    z.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        z.backward()
    z2 = (x * x).exp().sum()
    z2.backward(retain_graph=True)
    z2.backward()
    # a node with nothing saved (add) may run again, as in torch
    s = (x + 1).sum()
    s.backward()
    s.backward()


def test_version_counter_of_saved_output_and_input():
    x = t([1.0, 2.0, 3.0])
    y = x * 2
    e = y.exp()
    e.add_(1)
    with pytest.raises(RuntimeError) as ei:
        e.sum().backward()
    msg = str(ei.value)
    assert msg.startswith("one of the variables needed for gradient computation has been "
                          "modified by an inplace operation: [tensorplay.DoubleTensor [3]], "
                          "which is output 0 of Exp, is at version 1; expected version 0 "
                          "instead.")
    a = t([1.0, 2.0, 3.0])
    b = a * 2
    c = b * b
    b.add_(1)
    with pytest.raises(RuntimeError, match=r"\[tensorplay.DoubleTensor \[3\]\], which is "
                                           r"output 0 of Add, is at version 1; expected "
                                           r"version 0 instead"):
        c.sum().backward()
    k = t([1.0, 2.0, 3.0], rg=False)
    c = a * k
    k.mul_(2)
    with pytest.raises(RuntimeError, match=r"\[tensorplay.DoubleTensor \[3\]\] is at version 1; "
                                           r"expected version 0 instead"):
        c.sum().backward()


def test_inplace_on_leaf_requiring_grad_is_refused():
    x = t([1.0, 2.0])
    msg = "a leaf Variable that requires grad is being used in an in-place operation."
    for f in (lambda: x.add_(1), lambda: x.mul_(x), lambda: x.copy_(t([3.0, 4.0], rg=False)),
              lambda: x.fill_(1.0), lambda: x.zero_(), lambda: x.__setitem__(0, 5.0),
              lambda: x.exp_(), lambda: tp.nn.functional.relu(x, inplace=True)):
        with pytest.raises(RuntimeError, match=msg):
            f()
    with tp.no_grad():
        x.add_(1)
    np.testing.assert_allclose(x.detach().numpy(), [2, 3])


def test_inplace_on_non_leaf_rebases_history():
    a = np.array([0.5, -1.0, 2.0])
    x = t(a)
    y = x * 2
    y.mul_(x)
    y[1] = 3.0
    assert y.grad_fn.name() == "IndexPutBackward0"
    y.exp_()
    assert y.grad_fn.name() == "ExpBackward0"
    y.sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    ty = tx * 2
    ty.mul_(tx)
    ty[1] = 3.0
    ty.exp_()
    ty.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    # a non-requiring target written from a requiring source
    z = t([0.0, 0.0, 0.0], rg=False)
    z.copy_(x * 3)
    assert z.requires_grad and not z.is_leaf
    x.grad = None
    z.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3, 3, 3])


def test_inplace_op_reading_its_own_target_is_refused_at_backward():
    # y.mul_(y): the second operand is overwritten by the write; torch refuses
    a = t([1.0, 2.0, 3.0])
    y = a * 1
    y.mul_(y)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    # a view of the target as the operand, too
    y = a * 1
    y.add_(y.flip(0) * y)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_inplace_on_a_view_of_a_tensor_requiring_grad_rebases_the_base():
    x = t([[1.0, 2.0], [3.0, 4.0]])
    y = x * 1
    v = y[0]
    v.mul_(2)                                   # torch's CopySlices
    assert y.grad_fn.name() == "CopySlices"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[2.0, 2.0], [1.0, 1.0]])


def test_autograd_grad_and_allow_unused():
    a = t([1.0, 2.0])
    b = t([3.0])
    out = (a * 2).sum()
    with pytest.raises(RuntimeError, match="The differentiated Tensor at index 1 appears to not "
                                           "have been used in the graph. Set allow_unused=True "
                                           "if this is the desired behavior."):
        tp.autograd.grad(out, [a, b], retain_graph=True)
    ga, gb = tp.autograd.grad(out, [a, b], allow_unused=True, retain_graph=True)
    np.testing.assert_allclose(ga.numpy(), [2, 2])
    assert gb is None
    ga, gb = tp.autograd.grad(out, [a, b], materialize_grads=True)
    np.testing.assert_allclose(gb.numpy(), [0])
    assert a.grad is None                     # grad() does not accumulate
    with pytest.raises(RuntimeError, match="One of the differentiated Tensors does not require grad"):
        tp.autograd.grad((a * 2).sum(), [t([1.0], rg=False)])


def test_grad_wrt_intermediate_and_grad_outputs():
    x = t([1.0, 2.0, 3.0])
    y = x * x
    z = y.sin()
    gy, = tp.autograd.grad(z, y, grad_outputs=t([1.0, 2.0, 3.0], rg=False))
    np.testing.assert_allclose(gy.numpy(), np.cos(np.array([1.0, 4, 9])) * [1, 2, 3])


def test_double_backward():
    a = np.array([0.3, -1.2, 2.0])
    x = t(a)
    g, = tp.autograd.grad((x ** 3).sum() + x.exp().sum() + (x.tanh() * x).sum(), x,
                          create_graph=True)
    assert g.requires_grad and g.grad_fn is not None
    h, = tp.autograd.grad(g.sum(), x)
    tx = torch.tensor(a, requires_grad=True)
    tg, = torch.autograd.grad((tx ** 3).sum() + tx.exp().sum() + (tx.tanh() * tx).sum(), tx,
                              create_graph=True)
    th, = torch.autograd.grad(tg.sum(), tx)
    np.testing.assert_allclose(h.numpy(), th.numpy(), rtol=1e-12)
    # double backward through a view, a reduction and layer_norm
    w = t(np.random.default_rng(0).normal(size=(2, 3)))
    g, = tp.autograd.grad(tp.nn.functional.layer_norm(w.t() * w.t(), (2,)).pow(2).sum(), w,
                          create_graph=True)
    tw = torch.tensor(w.detach().numpy(), requires_grad=True)
    tg, = torch.autograd.grad(torch.nn.functional.layer_norm(tw.t() * tw.t(), (2,)).pow(2).sum(),
                              tw, create_graph=True)
    np.testing.assert_allclose(tp.autograd.grad(g.sum(), w)[0].numpy(),
                               torch.autograd.grad(tg.sum(), tw)[0].numpy(), rtol=1e-9, atol=1e-12)


def test_retain_grad_and_nonleaf_grad_warning():
    x = t([1.0, 2.0])
    y = x * 3
    z = y * y
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert y.grad is None
    assert "is not a leaf Tensor is being accessed" in str(w[0].message)
    y.retain_grad()
    assert y.retains_grad
    z.sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [6, 12])
    with pytest.raises(RuntimeError, match="can't retain_grad on Tensor that has requires_grad=False"):
        t([1.0], rg=False).retain_grad()


def test_tensor_hooks():
    x = t([1.0, 2.0])
    seen = []
    h = x.register_hook(lambda g: seen.append(g.numpy().copy()))
    y = x * 2
    y.register_hook(lambda g: g * 10)          # replaces the gradient
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [20, 20])
    np.testing.assert_allclose(seen[0], [20, 20])
    h.remove()
    x.grad = None
    (x * 1).sum().backward()
    assert len(seen) == 1
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't require gradient"):
        t([1.0], rg=False).register_hook(lambda g: g)
    # a Node post-hook sees (grad_inputs, grad_outputs)
    calls = []
    z = x * 5
    z.grad_fn.register_hook(lambda gi, go: calls.append((len(gi), len(go))))
    z.sum().backward()
    assert calls == [(1, 1)]              # x * 5: one tensor input, as torch


def test_grad_modes():
    x = t([1.0, 2.0])
    with tp.no_grad():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None
    with tp.no_grad():
        with tp.enable_grad():
            assert (x * 2).grad_fn is not None
    with tp.set_grad_enabled(False):
        assert (x * 2).grad_fn is None
    with tp.inference_mode():
        assert (x * 2).grad_fn is None
    d = x.detach()
    assert not d.requires_grad and d.grad_fn is None
    assert d.data_ptr() == x.data_ptr()
    y = x * 2
    y.detach_()
    assert y.grad_fn is None and not y.requires_grad
    z = t([1.0], rg=False).requires_grad_()
    assert z.requires_grad and z.is_leaf


def test_integer_and_bool_outputs_have_no_grad():
    x = t([1.0, -2.0, 3.0])
    assert not (x > 0).requires_grad and (x > 0).grad_fn is None
    assert not x.argmax().requires_grad
    v, i = x.max(0)
    assert v.requires_grad and not i.requires_grad
    assert not tp.zeros_like(x).requires_grad and not tp.rand_like(x).requires_grad


def test_views_share_history():
    a = np.arange(12.0).reshape(3, 4)
    x = t(a)
    y = (x.t()[1:, ::2].reshape(-1) * tp.arange(6.0)).sum() + x.T[0].sum() + x[:, None].mT.sum()
    y.backward()
    tx = torch.tensor(a, requires_grad=True)
    (tx.t()[1:, ::2].reshape(-1) * torch.arange(6.0)).sum().backward()
    (tx.T[0].sum() + tx[:, None].mT.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_missing_formula_raises_at_backward():
    x = t([1.0, 2.0, 3.0])
    y = tp.nn.functional.alpha_dropout(x, 0.5, training=True)
    assert y.requires_grad
    with pytest.raises(NotImplementedError, match="the derivative for 'alpha_dropout' is not "
                                                  "implemented"):
        y.sum().backward()


def test_graph_is_freed():
    x = t(np.ones(1000))
    y = (x * 2).exp()
    r = weakref.ref(y.grad_fn)
    y.sum().backward()
    del y
    gc.collect()
    assert r() is None


def test_parameters_and_module_backward():
    lin = tp.nn.Linear(4, 3)
    assert lin.weight.requires_grad and lin.weight.is_leaf
    out = lin(tp.randn(5, 4)).pow(2).mean()
    out.backward()
    assert lin.weight.grad.shape == (3, 4) and lin.bias.grad.shape == (3,)


def test_compile_with_requires_grad_recomputes_in_backward():
    def f(x, w):
        return (x * w).sin().sum(), x * 2

    cf = tp.compile(f)
    x = tp.randn(4, 3)
    w = tp.randn(3, requires_grad=True)
    out, other = cf(x, w)
    assert out.requires_grad and out.grad_fn.name() == "CompiledFunctionBackward"
    assert not other.requires_grad and other.grad_fn is None      # today's flags
    assert cf.stats()["compiles"] == 1
    out.backward()
    tw = torch.tensor(w.detach().numpy(), requires_grad=True)
    (torch.tensor(x.numpy()) * tw).sin().sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5)
    out2, _ = cf(x, w)                      # the same version, a fresh node
    assert cf.stats()["compiles"] == 1 and out2.grad_fn is not out.grad_fn
    with tp.no_grad():
        r, _ = cf(x, w)
    assert not r.requires_grad
    # the recomputation replays the same random numbers (dropout)
    d = tp.compile(lambda x, w: tp.nn.functional.dropout(x * w, 0.5).sum())
    tp.manual_seed(3)
    w.grad = None
    d(x, w).backward()
    tp.manual_seed(3)
    w2 = w.detach().requires_grad_()
    tp.nn.functional.dropout(x * w2, 0.5).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), w2.grad.numpy(), rtol=1e-6)
    # strict_native: forward and backward both compile (compiled autograd)
    strict = tp.compile(f, strict_native=True)
    o, _ = strict(x, w)
    w.grad = None
    o.backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5)
    # ... a double backward would run the backward eagerly: refused
    o, _ = strict(x, w)
    with pytest.raises(tp.compiler.NativeCompileError, match="create_graph=True"):
        tp.autograd.grad(o, w, create_graph=True)
    # an input the backward reads, modified in place after the call
    x2 = tp.randn(3, requires_grad=True)
    y = x2 * 1
    o = tp.compile(lambda a: (a * a).sum())(y)
    with tp.no_grad():
        y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        o.backward()
    # a module's lifted parameters count too
    lin = tp.nn.Linear(3, 2)
    cm = tp.compile(lin)
    cm(x).sum().backward()
    tl = torch.nn.Linear(3, 2)
    with torch.no_grad():
        tl.weight.copy_(torch.tensor(lin.weight.detach().numpy()))
        tl.bias.copy_(torch.tensor(lin.bias.detach().numpy()))
    tl(torch.tensor(x.numpy())).sum().backward()
    np.testing.assert_allclose(lin.weight.grad.numpy(), tl.weight.grad.numpy(), rtol=1e-5)
    # a function writing its input runs eagerly (recomputation would write twice)
    def g(a, b):
        a.add_(1)
        return (a * b).sum()
    cg = tp.compile(g)
    a = tp.zeros(3)
    cg(a, w).backward()
    np.testing.assert_allclose(a.numpy(), [1, 1, 1])
    assert cg.stats()["eager_calls"] == 1


def test_backward_with_inputs_accumulates_only_there():
    a, b = t([1.0, 2.0]), t([3.0, 4.0])
    y = a * 2
    (y * b).sum().backward(inputs=[a, y])
    np.testing.assert_allclose(a.grad.numpy(), [6, 8])
    np.testing.assert_allclose(y.grad.numpy(), [3, 4])
    assert b.grad is None
    (a * a).sum().backward(inputs=a)
    np.testing.assert_allclose(a.grad.numpy(), [8, 12])
