"""nn.init, tp.optim (SGD, Adam, AdamW) and lr_scheduler against torch 2.13,
step for step; and a small MLP trained on scikit-learn's digits with AdamW."""
import math

import numpy as np
import pytest
import torch

import tensorplay as tp


def _pair(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    arrs = [rng.normal(size=s).astype(dtype) for s in shapes]
    return ([tp.nn.Parameter(tp.tensor(a)) for a in arrs],
            [torch.nn.Parameter(torch.tensor(a)) for a in arrs])


def _loss(m, ps, data):
    x = m.tensor(data)
    h = (ps[0] @ x).tanh()
    return (h * ps[1]).sum() + (ps[0] ** 2).mean() * 3 + ps[1].pow(3).sum() * 0.1


def _trajectory(make_tp, make_torch, dtype, steps=6, rtol=None):
    data = np.random.default_rng(1).normal(size=(4, 3)).astype(dtype)
    tps, tos = _pair([(5, 4), (5, 3)], dtype)
    o1, o2 = make_tp(tps), make_torch(tos)
    for _ in range(steps):
        o1.zero_grad()
        o2.zero_grad()
        _loss(tp, tps, data).backward()
        _loss(torch, tos, data).backward()
        o1.step()
        o2.step()
        for a, b in zip(tps, tos):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(),
                                       rtol=rtol or (1e-5 if dtype == np.float32 else 1e-12),
                                       atol=1e-6 if dtype == np.float32 else 1e-13)
    return o1, o2


SGD_CASES = [dict(lr=0.1), dict(lr=0.05, momentum=0.9), dict(lr=0.05, momentum=0.9, dampening=0.3),
             dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01),
             dict(lr=0.02, weight_decay=0.1, maximize=True),
             dict(lr=0.05, momentum=0.5, maximize=True)]
ADAM_CASES = [dict(), dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6), dict(lr=0.01, weight_decay=0.1),
              dict(lr=0.01, amsgrad=True), dict(lr=0.02, maximize=True, amsgrad=True)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kw", SGD_CASES, ids=[str(k) for k in SGD_CASES])
def test_sgd_matches_torch(kw, dtype):
    _trajectory(lambda p: tp.optim.SGD(p, **kw), lambda p: torch.optim.SGD(p, **kw), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kw", ADAM_CASES, ids=[str(k) for k in ADAM_CASES])
@pytest.mark.parametrize("cls", ["Adam", "AdamW"])
def test_adam_adamw_match_torch(cls, kw, dtype):
    _trajectory(lambda p: getattr(tp.optim, cls)(p, **kw),
                lambda p: getattr(torch.optim, cls)(p, **kw), dtype)


def test_param_groups_state_dict_and_zero_grad():
    data = np.random.default_rng(1).normal(size=(4, 3))
    tps, tos = _pair([(5, 4), (5, 3)], np.float64)
    o1 = tp.optim.AdamW([{"params": [tps[0]], "lr": 0.01}, {"params": [tps[1]]}], lr=0.1,
                        amsgrad=True)
    o2 = torch.optim.AdamW([{"params": [tos[0]], "lr": 0.01}, {"params": [tos[1]]}], lr=0.1,
                           amsgrad=True)
    for _ in range(3):
        for o, m, ps in ((o1, tp, tps), (o2, torch, tos)):
            o.zero_grad()
            _loss(m, ps, data).backward()
            o.step()
    sd1, sd2 = o1.state_dict(), o2.state_dict()
    assert [g["params"] for g in sd1["param_groups"]] == [g["params"] for g in sd2["param_groups"]]
    assert sd1["param_groups"][0]["lr"] == sd2["param_groups"][0]["lr"] == 0.01
    assert set(sd1["state"][0]) == set(sd2["state"][0])
    np.testing.assert_allclose(sd1["state"][1]["exp_avg_sq"].numpy(),
                               sd2["state"][1]["exp_avg_sq"].numpy(), rtol=1e-12)
    assert float(sd1["state"][0]["step"]) == float(sd2["state"][0]["step"]) == 3.0
    # a fresh optimizer loaded from the state continues identically
    o3 = tp.optim.AdamW([{"params": [tps[0]], "lr": 0.5}, {"params": [tps[1]]}], lr=0.1,
                        amsgrad=True)
    o3.load_state_dict(sd1)
    assert o3.param_groups[0]["lr"] == 0.01
    for o, m, ps in ((o3, tp, tps), (o2, torch, tos)):
        o.zero_grad()
        _loss(m, ps, data).backward()
        o.step()
    for a, b in zip(tps, tos):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12)
    # zero_grad: None by default, zeros with set_to_none=False
    _loss(tp, tps, data).backward()
    o3.zero_grad(set_to_none=False)
    assert tps[0].grad is not None and float(tps[0].grad.abs().sum()) == 0.0
    o3.zero_grad()
    assert tps[0].grad is None
    with pytest.raises(ValueError, match="load"):
        o3.load_state_dict({"state": {}, "param_groups": sd1["param_groups"][:1]})


def test_optimizer_bad_input():
    p = tp.nn.Parameter(tp.zeros(2))
    with pytest.raises(ValueError, match="Invalid learning rate"):
        tp.optim.SGD([p], lr=-1)
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and zero dampening"):
        tp.optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1"):
        tp.optim.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="empty parameter list"):
        tp.optim.Adam([])
    with pytest.raises(TypeError, match="iterable of Tensors"):
        tp.optim.Adam(p)
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        tp.optim.SGD([p * 2], lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        tp.optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)


@pytest.mark.parametrize("name,kw", [
    ("StepLR", dict(step_size=3, gamma=0.5)),
    ("CosineAnnealingLR", dict(T_max=5, eta_min=0.01)),
    ("CosineAnnealingLR", dict(T_max=3)),
    ("LambdaLR", dict(lr_lambda=lambda e: 0.9 ** e + 0.1 * e)),
])
def test_lr_schedulers_match_torch(name, kw):
    p1 = tp.nn.Parameter(tp.zeros(1))
    p2 = torch.nn.Parameter(torch.zeros(1))
    o1, o2 = tp.optim.SGD([p1], lr=0.3), torch.optim.SGD([p2], lr=0.3)
    s1 = getattr(tp.optim.lr_scheduler, name)(o1, **kw)
    s2 = getattr(torch.optim.lr_scheduler, name)(o2, **kw)
    for _ in range(13):
        assert s1.get_last_lr() == pytest.approx(s2.get_last_lr(), rel=1e-14, abs=1e-15)
        assert o1.param_groups[0]["lr"] == pytest.approx(o2.param_groups[0]["lr"], rel=1e-14,
                                                         abs=1e-15)
        o1.step()
        o2.step()
        s1.step()
        s2.step()


def test_init_functions():
    init = tp.nn.init
    tp.manual_seed(0)
    w = tp.nn.Parameter(tp.empty(400, 300))
    assert init.calculate_gain("relu") == torch.nn.init.calculate_gain("relu")
    assert init.calculate_gain("leaky_relu", 0.2) == torch.nn.init.calculate_gain("leaky_relu", 0.2)
    assert init.calculate_gain("tanh") == torch.nn.init.calculate_gain("tanh")
    with pytest.raises(ValueError, match="Unsupported nonlinearity"):
        init.calculate_gain("nope")

    def stats(f, *a, **k):
        r = f(w, *a, **k)
        assert r is w and w.requires_grad and w.is_leaf
        x = w.detach().numpy()
        return x.mean(), x.std(), x.min(), x.max()

    m, s, lo, hi = stats(init.uniform_, -2.0, 3.0)
    assert lo >= -2 and hi <= 3 and abs(m - 0.5) < 0.02
    m, s, lo, hi = stats(init.normal_, 1.0, 0.5)
    assert abs(m - 1) < 0.01 and abs(s - 0.5) < 0.01
    m, s, lo, hi = stats(init.trunc_normal_, 0.0, 1.0, -1.5, 2.0)
    assert lo >= -1.5 and hi <= 2.0
    ref = torch.nn.init.trunc_normal_(torch.empty(400, 300), 0.0, 1.0, -1.5, 2.0).numpy()
    assert abs(s - ref.std()) < 0.01 and abs(m - ref.mean()) < 0.01
    assert stats(init.constant_, 0.25)[2:] == (0.25, 0.25)
    assert stats(init.ones_)[2:] == (1, 1) and stats(init.zeros_)[2:] == (0, 0)
    a = math.sqrt(6 / 700)
    m, s, lo, hi = stats(init.xavier_uniform_, 2.0)
    assert -2 * a <= lo and hi <= 2 * a and abs(s - 2 * a / math.sqrt(3)) < 0.01 * a
    m, s, lo, hi = stats(init.xavier_normal_)
    assert abs(s - math.sqrt(2 / 700)) < 0.01 * math.sqrt(2 / 700)
    b = math.sqrt(2) * math.sqrt(3 / 300)
    m, s, lo, hi = stats(init.kaiming_uniform_, 0, "fan_in", "relu")
    assert -b <= lo and hi <= b and abs(s - b / math.sqrt(3)) < 0.01 * b
    m, s, lo, hi = stats(init.kaiming_normal_, mode="fan_out", nonlinearity="relu")
    assert abs(s - math.sqrt(2 / 400)) < 0.01 * math.sqrt(2 / 400)
    with pytest.raises(ValueError, match="Fan in and fan out can not be computed"):
        init.xavier_uniform_(tp.nn.Parameter(tp.empty(3)))
    with pytest.raises(ValueError, match="Mode fan_x not supported"):
        init.kaiming_uniform_(w, mode="fan_x")


def test_default_module_initializations():
    tp.manual_seed(0)
    lin = tp.nn.Linear(300, 200)
    bound = 1 / math.sqrt(300)
    w, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    assert w.min() >= -bound and w.max() <= bound and abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound
    assert b.min() >= -bound and b.max() <= bound
    emb = tp.nn.Embedding(500, 40, padding_idx=3)
    e = emb.weight.detach().numpy()
    assert abs(e.std() - 1) < 0.02 and (e[3] == 0).all()
    ln = tp.nn.LayerNorm(7)
    assert (ln.weight.detach().numpy() == 1).all() and (ln.bias.detach().numpy() == 0).all()
    for p in list(lin.parameters()) + list(emb.parameters()) + list(ln.parameters()):
        assert isinstance(p, tp.nn.Parameter) and p.requires_grad and p.is_leaf


def test_mlp_trains_on_digits_with_adamw():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(X))
    tr, te = perm[:1400], perm[1400:]
    tp.manual_seed(0)
    model = tp.nn.Sequential(tp.nn.Linear(64, 128), tp.nn.LayerNorm(128), tp.nn.GELU(),
                             tp.nn.Linear(128, 10))
    opt = tp.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)
    sched = tp.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=8)
    Xtr, ytr = tp.tensor(X[tr]), tp.tensor(y[tr])
    losses = []
    for epoch in range(8):
        order = rng.permutation(len(tr))
        for i in range(0, len(tr), 64):
            idx = tp.tensor(order[i:i + 64])
            loss = tp.nn.functional.cross_entropy(model(Xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        sched.step()
    with tp.no_grad():
        pred = model(tp.tensor(X[te])).argmax(1).numpy()
    acc = (pred == y[te]).mean()
    assert losses[-1] < losses[0] / 5
    assert acc >= 0.95, acc
