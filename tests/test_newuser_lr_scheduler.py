"""The lr schedulers a PyTorch training script picks (MultiStepLR,
ExponentialLR, ConstantLR, LinearLR, PolynomialLR, MultiplicativeLR,
CosineAnnealingWarmRestarts, OneCycleLR with momentum/beta1 cycling,
SequentialLR warm-up, ChainedScheduler, ReduceLROnPlateau): each group's
lr (and momentum) step for step against torch's, and torch's errors."""
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")


def mk(L, cls="SGD", **kw):
    p, q = L.nn.Parameter(L.ones(2)), L.nn.Parameter(L.ones(2))
    return getattr(L.optim, cls)([{"params": [p]}, {"params": [q], "lr": 0.5}], lr=0.1, **kw)


CASES = {
    "multistep": lambda S, o: S.MultiStepLR(o, [2, 5, 5, 8], gamma=0.5),
    "exp": lambda S, o: S.ExponentialLR(o, 0.9),
    "const": lambda S, o: S.ConstantLR(o, factor=0.5, total_iters=3),
    "linear": lambda S, o: S.LinearLR(o, start_factor=0.1, total_iters=4),
    "linear_down": lambda S, o: S.LinearLR(o, start_factor=1.0, end_factor=0.0, total_iters=6),
    "poly": lambda S, o: S.PolynomialLR(o, total_iters=6, power=2.0),
    "mult": lambda S, o: S.MultiplicativeLR(o, lambda e: 0.95),
    "warm_restarts": lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=1e-3),
    "warm_restarts1": lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=4),
    "onecycle": lambda S, o: S.OneCycleLR(o, max_lr=1.0, total_steps=12),
    "onecycle3": lambda S, o: S.OneCycleLR(o, max_lr=[1.0, 2.0], epochs=3, steps_per_epoch=4,
                                           three_phase=True, anneal_strategy="linear"),
    "seq": lambda S, o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=3),
                                           S.CosineAnnealingLR(o, T_max=8)], milestones=[3]),
    "seq3": lambda S, o: S.SequentialLR(o, [S.ConstantLR(o, factor=0.2, total_iters=2),
                                            S.ExponentialLR(o, 0.8), S.StepLR(o, 2)],
                                        milestones=[2, 6]),
    "chain": lambda S, o: S.ChainedScheduler([S.ConstantLR(o, factor=0.1, total_iters=2),
                                              S.ExponentialLR(o, gamma=0.9)]),
}


def run(L, name):
    o = mk(L, momentum=0.9)
    s = CASES[name](L.optim.lr_scheduler, o)
    out = []
    for _ in range(11):
        o.step()
        s.step()
        out.append([g["lr"] for g in o.param_groups] + [o.param_groups[0]["momentum"]])
    return out, s.get_last_lr()


@pytest.mark.parametrize("name", sorted(CASES))
def test_schedule_like_torch(name):
    got, want = run(tp, name), run(torch, name)
    for a, b in zip(got[0], want[0]):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15)
    assert got[1] == pytest.approx(want[1], rel=1e-12, abs=1e-15)


def test_onecycle_cycles_adam_beta1_and_stops():
    def go(L):
        o = mk(L, "Adam")
        s = L.optim.lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=5)
        r = []
        for _ in range(5):
            o.step()
            s.step()
            r.append((o.param_groups[0]["lr"], o.param_groups[0]["betas"][0]))
        with pytest.raises(ValueError, match="Tried to step 6 times"):
            s.step()
        return r
    for a, b in zip(go(tp), go(torch)):
        assert a == pytest.approx(b)


def test_reduce_on_plateau_like_torch():
    vals = [1.0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]

    def go(L, **kw):
        o = mk(L)
        s = L.optim.lr_scheduler.ReduceLROnPlateau(o, **kw)
        r = []
        for v in vals:
            s.step(L.tensor(v))
            r.append((s.get_last_lr(), s.num_bad_epochs))
        return r
    for kw in ({"patience": 2, "factor": 0.5, "cooldown": 1, "min_lr": [0.01, 0.2]},
               {"mode": "max", "threshold_mode": "abs", "threshold": 0.1, "patience": 0}):
        assert go(tp, **kw) == go(torch, **kw)


@pytest.mark.parametrize("bad", [
    lambda S, o: S.LinearLR(o, start_factor=0),
    lambda S, o: S.LinearLR(o, end_factor=2),
    lambda S, o: S.ConstantLR(o, factor=2),
    lambda S, o: S.ReduceLROnPlateau(o, factor=1.0),
    lambda S, o: S.ReduceLROnPlateau(o, mode="mid"),
    lambda S, o: S.OneCycleLR(o, 1.0),
    lambda S, o: S.OneCycleLR(o, 1.0, total_steps=5, pct_start=1),
    lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=0),
    lambda S, o: S.SequentialLR(o, [S.ExponentialLR(o, 0.9)], milestones=[2]),
])
def test_errors_like_torch(bad):
    def err(L):
        with pytest.raises(Exception) as ei:
            bad(L.optim.lr_scheduler, mk(L, momentum=0.9))
        return type(ei.value).__name__, str(ei.value)
    assert err(tp) == err(torch)


def test_plateau_drives_training_loop():
    m = tp.nn.Linear(2, 1)
    opt = tp.optim.SGD(m.parameters(), lr=0.1)
    s = tp.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
    for _ in range(3):
        s.step(1.0)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.001)
