"""Training-step benchmark: the digits MLP (Linear 64->128, LayerNorm, GELU,
Linear 128->10, log-softmax loss on one-hot targets, AdamW) trained one
step at a time, side by side in one run:

* tensorplay eager: model(x) -> loss -> backward -> opt.step;
* tensorplay compiled: the loss function tp.compile'd (its backward is the
  compiled min-cut backward) and the optimizer's fused step
  (tp.compile(opt.step));
* torch eager and torch.compile (the same loss function compiled, backward
  through AOTAutograd/Inductor, AdamW foreach), when torch is installed.

Prints median microseconds per step and images/s, the compiled step's
speed-up over torch.compile, and the min-cut saved bytes vs save-all for
the digits MLP and for a GELU-MLP block. Run: `python3 bench/training.py`
(also a section of `python3 -m bench`). Options: --batch N --reps N."""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402

from _timing import median_time  # noqa: E402
import tensorplay as tp  # noqa: E402
import tensorplay.nn as nn  # noqa: E402
import tensorplay.nn.functional as F  # noqa: E402

try:
    import torch
except Exception:  # torch is optional
    torch = None

D_IN, HIDDEN, CLASSES = 64, 128, 10


def make_tp_model(seed=0):
    tp.manual_seed(seed)
    return nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.LayerNorm(HIDDEN), nn.GELU(),
                         nn.Linear(HIDDEN, CLASSES))


def tp_loss_fn(model):
    def loss(x, y):
        return -(F.log_softmax(model(x), -1) * y).sum(-1).mean()
    return loss


def torch_model_like(m):
    tm = torch.nn.Sequential(torch.nn.Linear(D_IN, HIDDEN), torch.nn.LayerNorm(HIDDEN),
                             torch.nn.GELU(), torch.nn.Linear(HIDDEN, CLASSES))
    with torch.no_grad():
        for tpp, tq in zip(m.parameters(), tm.parameters()):
            tq.copy_(torch.from_numpy(tpp.detach().numpy().copy()))
    return tm


def data(batch, seed=0):
    rs = np.random.default_rng(seed)
    x = rs.standard_normal((batch, D_IN)).astype(np.float32)
    y = np.eye(CLASSES, dtype=np.float32)[rs.integers(0, CLASSES, batch)]
    return x, y


def tp_step(loss_fn, opt, step, x, y):
    opt.zero_grad()
    loss = loss_fn(x, y)
    loss.backward()
    step()
    return loss


def saved_ratio(cf):
    ag = cf.versions[-1].autograd
    return ag.saved_bytes, ag.save_all_bytes


def gelu_mlp_partition():
    x = tp.randn(64, 128)
    ws = [tp.randn(256, 128, requires_grad=True), tp.randn(256, requires_grad=True),
          tp.randn(128, 256, requires_grad=True), tp.randn(128, requires_grad=True)]
    cf = tp.compile(lambda x, w1, b1, w2, b2: F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2).sum())
    cf(x, *ws).backward()
    return saved_ratio(cf)


def run(batch=128, reps=15):
    xn, yn = data(batch)
    x, y = tp.from_numpy(xn), tp.from_numpy(yn)
    rows = {}
    # tensorplay eager
    m = make_tp_model()
    opt = tp.optim.AdamW(m.parameters(), lr=1e-3)
    lf = tp_loss_fn(m)
    rows["tensorplay eager"] = median_time(lambda: tp_step(lf, opt, opt.step, x, y), reps, 5)
    # tensorplay compiled: compiled loss (forward + min-cut backward), fused AdamW step
    m = make_tp_model()
    opt = tp.optim.AdamW(m.parameters(), lr=1e-3)
    cf = tp.compile(tp_loss_fn(m), strict_native=True)
    cstep = tp.compile(opt.step, strict_native=True)
    rows["tensorplay compiled"] = median_time(lambda: tp_step(cf, opt, cstep, x, y), reps, 5)
    digits_saved = saved_ratio(cf)
    if torch is not None:
        torch.manual_seed(0)
        tx, ty = torch.from_numpy(xn), torch.from_numpy(yn)
        tm = torch_model_like(make_tp_model())
        topt = torch.optim.AdamW(tm.parameters(), lr=1e-3)

        def tloss(x, y):
            return -(torch.log_softmax(tm(x), -1) * y).sum(-1).mean()

        def tstep(lossf):
            topt.zero_grad()
            loss = lossf(tx, ty)
            loss.backward()
            topt.step()
        rows["torch eager"] = median_time(lambda: tstep(tloss), reps, 5)
        tm = torch_model_like(make_tp_model())
        topt = torch.optim.AdamW(tm.parameters(), lr=1e-3)
        ctl = torch.compile(tloss)
        rows["torch.compile"] = median_time(lambda: tstep(ctl), reps, 5, warm=3)
    return rows, digits_saved, gelu_mlp_partition()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--reps", type=int, default=15)
    a = ap.parse_args(argv)
    tp.compiler.config.cache = True
    rows, dsv, gsv = run(a.batch, a.reps)
    print(f"## training step: digits MLP (64-{HIDDEN}-LayerNorm-GELU-{CLASSES}), batch {a.batch}, "
          f"AdamW; medians of {a.reps}x5 steps, {os.cpu_count()} cores")
    print("| path | us/step | images/s |")
    print("|---|---|---|")
    for k, t in rows.items():
        print(f"| {k} | {t * 1e6:.0f} | {a.batch / t:.0f} |")
    if "torch.compile" in rows:
        print(f"compiled tensorplay vs torch.compile: {rows['torch.compile'] / rows['tensorplay compiled']:.2f}x")
    else:
        print("(torch not installed: torch columns skipped)")
    print(f"compiled vs eager tensorplay: {rows['tensorplay eager'] / rows['tensorplay compiled']:.2f}x")
    print(f"min-cut saved bytes: digits MLP {dsv[0]} vs save-all {dsv[1]} ({dsv[0] / dsv[1]:.2f}x); "
          f"GELU-MLP 64x128->256->128: {gsv[0]} vs {gsv[1]} ({gsv[0] / gsv[1]:.2f}x)")
    return rows


if __name__ == "__main__":
    main()
