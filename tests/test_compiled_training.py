"""Compiled training (issue 15 item 5): a compiled loss function's backward
and the optimizers' fused multi-tensor step (fused=True, tp.compile(opt.step));
a compiled function containing backward() runs eagerly with a warning, or
raises under strict_native (docs/autograd.md, 'Compiled training')."""
import warnings

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

OPTS = [
    (tp.optim.AdamW, dict(lr=1e-2)),
    (tp.optim.Adam, dict(lr=1e-2, weight_decay=0.1, amsgrad=True, maximize=True)),
    (tp.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (tp.optim.SGD, dict(lr=0.1, momentum=0.5, dampening=0.1)),
    (tp.optim.SGD, dict(lr=0.1)),
]


def _train(cls, kw, mode, steps=4):
    tp.manual_seed(0)
    m = tp.nn.Sequential(tp.nn.Linear(5, 4), tp.nn.Tanh(), tp.nn.Linear(4, 2))
    opt = cls(m.parameters(), fused=(mode == "fused"), **kw)
    step = tp.compile(opt.step, strict_native=True) if mode == "compiled" else opt.step
    x = tp.randn(3, 5)
    for _ in range(steps):
        opt.zero_grad()
        m(x).pow(2).sum().backward()
        step()
    return [p.detach().numpy().copy() for p in m.parameters()], opt


@pytest.mark.parametrize("cls,kw", OPTS, ids=lambda o: getattr(o, "__name__", None) or str(o))
def test_fused_step_equals_eager_step(cls, kw):
    ref, _ = _train(cls, kw, "eager")
    for mode in ("fused", "compiled"):
        got, opt = _train(cls, kw, mode)
        for a, b in zip(ref, got):
            np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
        # one program for every group's parameters, not one per parameter
        vs = opt._fused.versions
        assert 1 <= len(vs) <= 2 and all(len(v.kernels) >= 1 for v in vs)


def test_fused_step_does_not_recompile_when_lr_changes():
    m = tp.nn.Linear(4, 3)
    opt = tp.optim.AdamW(m.parameters(), lr=1e-2)
    sched = tp.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    step = tp.compile(opt.step)
    x = tp.randn(6, 4)
    for _ in range(5):
        opt.zero_grad()
        m(x).sum().backward()
        step()
        sched.step()
    fns = list(opt._fused._fns.values())
    assert len(fns) == 1 and fns[0].stats()["compiles"] == 1
    assert float(opt.state[m.weight]["step"]) == 5.0


def test_compiled_loss_training_step_matches_eager_and_learns():
    def make():
        tp.manual_seed(1)
        return tp.nn.Sequential(tp.nn.Linear(8, 16), tp.nn.LayerNorm(16), tp.nn.GELU(),
                                tp.nn.Linear(16, 3))
    rs = np.random.default_rng(0)
    x = tp.tensor(rs.standard_normal((32, 8)).astype(np.float32))
    y = tp.tensor(np.eye(3, dtype=np.float32)[rs.integers(0, 3, 32)])
    losses = {}
    params = {}
    for mode in ("eager", "compiled"):
        m = make()
        opt = tp.optim.AdamW(m.parameters(), lr=1e-2)

        def loss_fn(x, y):
            return -(F.log_softmax(m(x), -1) * y).sum(-1).mean()
        lf = tp.compile(loss_fn, strict_native=True) if mode == "compiled" else loss_fn
        step = tp.compile(opt.step, strict_native=True) if mode == "compiled" else opt.step
        ls = []
        for _ in range(15):
            opt.zero_grad()
            loss = lf(x, y)
            loss.backward()
            step()
            ls.append(float(loss))
        losses[mode] = ls
        params[mode] = [p.detach().numpy() for p in m.parameters()]
        if mode == "compiled":
            assert lf.stats()["compiles"] == 1
            assert lf.versions[0].backward_graph is not None
    np.testing.assert_allclose(losses["compiled"], losses["eager"], rtol=1e-4, atol=1e-5)
    for a, b in zip(params["eager"], params["compiled"]):
        np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-4)
    assert losses["compiled"][-1] < 0.8 * losses["compiled"][0]


def _train_step_fn():
    m = tp.nn.Linear(4, 3)
    opt = tp.optim.SGD(m.parameters(), lr=0.1)

    def train_step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        return loss
    return m, train_step


def test_backward_inside_compiled_function_runs_eagerly_with_a_warning():
    m, train_step = _train_step_fn()
    x, y = tp.randn(5, 4), tp.randn(5, 3)
    w0 = m.weight.detach().clone()
    cf = tp.compile(train_step)
    with pytest.warns(RuntimeWarning, match=r"calls .*backward\(\).*Compile the loss function"):
        loss = cf(x, y)
    assert float(loss) > 0 and not np.allclose(m.weight.detach().numpy(), w0.numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cf(x, y)                       # warned once; no retrace
    assert cf.stats()["compiles"] == 0 and cf.stats()["eager_calls"] == 2


def test_backward_inside_compiled_function_raises_under_strict():
    _, train_step = _train_step_fn()
    with pytest.raises(tp.compiler.NativeCompileError, match="a backward cannot be traced"):
        tp.compile(train_step, strict_native=True)(tp.randn(5, 4), tp.randn(5, 3))
