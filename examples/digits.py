"""The main job: train a real model on real data with autograd, eager and
compiled.

Data: scikit-learn's bundled 8x8 handwritten digits (1797 images, shipped
inside the package; no download), 1400 for training, 397 for test.
Models: an MLP, Linear(64 -> 128) -> LayerNorm -> GELU -> Linear(128 -> 10),
and a small CNN, Conv2d(1, 16, 3) -> GELU -> MaxPool2d -> Conv2d(16, 32, 3) ->
GELU -> MaxPool2d -> Linear(128 -> 10); each trained with AdamW (cosine
learning rate) on the log-softmax loss, batch 64, twice from the same seed:

* eager: model(x) -> loss -> backward() -> opt.step();
* compiled: the loss function under tp.compile(strict_native=True) (its
  backward is the compiled min-cut backward, docs/autograd.md) and the
  optimizer's fused step tp.compile(opt.step). The CNN's loss is compiled
  without strict_native: max pooling's gradient (an index_add) has no native
  kernel yet and runs as a fallback kernel inside the compiled backward.

Prints the test accuracy of both (goal >= 0.97), the training images/second
of eager, compiled and torch.compile's training step on the same model
(torch columns skipped without torch), and the bytes the min-cut partition
saves for the backward versus saving every intermediate; writes the loss
curves to examples/digits_loss.png (matplotlib, Agg). Run: `make demo`.
Exit status 1 if an accuracy is below 0.97.
"""
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import tensorplay as tp  # noqa: E402
import tensorplay.nn as nn  # noqa: E402
import tensorplay.nn.functional as F  # noqa: E402

HIDDEN, CLASSES, BATCH, EPOCHS, LR = 128, 10, 64, 8, 3e-3
CNN_EPOCHS = 12
PNG = os.path.join(HERE, "digits_loss.png")


def make_model(seed=0):
    tp.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, HIDDEN), nn.LayerNorm(HIDDEN), nn.GELU(),
                         nn.Linear(HIDDEN, CLASSES))


def make_cnn(seed=0):
    tp.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.GELU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.GELU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 2 * 2, CLASSES))


def load():
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    perm = np.random.default_rng(0).permutation(len(X))
    tr, te = perm[:1400], perm[1400:]
    return X[tr], y[tr], X[te], y[te]


def batches(n, epoch):
    order = np.random.default_rng(100 + epoch).permutation(n)
    return [order[i:i + BATCH] for i in range(0, n - BATCH + 1, BATCH)]   # full batches only


def train(Xtr, ytr, compiled, cnn=False):
    """Returns (model, loss per step, compiled loss function or None)."""
    model = make_cnn() if cnn else make_model()
    epochs = CNN_EPOCHS if cnn else EPOCHS
    opt = tp.optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-2)
    sched = tp.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)

    def loss_fn(x, y):
        return -(F.log_softmax(model(x), -1) * y).sum(-1).mean()
    lf = tp.compile(loss_fn, strict_native=not cnn) if compiled else loss_fn
    step = tp.compile(opt.step, strict_native=True) if compiled else opt.step
    X, Y = tp.tensor(Xtr), tp.tensor(np.eye(CLASSES, dtype=np.float32)[ytr])
    if cnn:
        X = X.reshape(-1, 1, 8, 8)
    losses = []
    for epoch in range(epochs):
        for idx in batches(len(Xtr), epoch):
            ix = tp.tensor(idx)
            opt.zero_grad()
            loss = lf(X[ix], Y[ix])
            loss.backward()
            step()
            losses.append(loss.item())
        sched.step()
    return model, losses, (lf if compiled else None)


def accuracy(model, Xte, yte, cnn=False):
    x = tp.tensor(Xte)
    with tp.no_grad():
        return float((model(x.reshape(-1, 1, 8, 8) if cnn else x).argmax(1).numpy() == yte).mean())


def images_per_second(step, reps=3, inner=10):
    step()
    step()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(inner):
            step()
        ts.append((time.perf_counter() - t) / inner)
    return BATCH / statistics.median(ts)


def throughput(Xtr, ytr):
    xb, yb = Xtr[:BATCH], np.eye(CLASSES, dtype=np.float32)[ytr[:BATCH]]
    x, y = tp.tensor(xb), tp.tensor(yb)
    out = {}
    for name, compiled in (("eager", False), ("compiled", True)):
        model = make_model()
        opt = tp.optim.AdamW(model.parameters(), lr=LR)

        def loss_fn(x, y):
            return -(F.log_softmax(model(x), -1) * y).sum(-1).mean()
        lf = tp.compile(loss_fn, strict_native=True) if compiled else loss_fn
        st = tp.compile(opt.step, strict_native=True) if compiled else opt.step

        def one(lf=lf, opt=opt, st=st):
            opt.zero_grad()
            lf(x, y).backward()
            st()
        out[name] = images_per_second(one)
    try:
        import torch
    except ImportError:
        return out
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.LayerNorm(HIDDEN), torch.nn.GELU(),
                             torch.nn.Linear(HIDDEN, CLASSES))
    topt = torch.optim.AdamW(tm.parameters(), lr=LR)
    tx, ty = torch.from_numpy(xb), torch.from_numpy(yb)

    def tloss(x, y):
        return -(torch.log_softmax(tm(x), -1) * y).sum(-1).mean()
    ctl = torch.compile(tloss)

    def tone():
        topt.zero_grad()
        ctl(tx, ty).backward()
        topt.step()
    out["torch.compile"] = images_per_second(tone)
    return out


def plot(curves):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no loss curve)")
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, ls in curves.items():
        ax.plot(ls, label=name, lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_yscale("log")
    ax.set_title("digits: MLP (LayerNorm, GELU) and CNN, AdamW")
    ax.legend()
    fig.tight_layout()
    fig.savefig(PNG, dpi=100)
    print(f"loss curve: {PNG}")


def main():
    t_start = time.perf_counter()
    Xtr, ytr, Xte, yte = load()
    m_e, loss_e, _ = train(Xtr, ytr, compiled=False)
    m_c, loss_c, lf = train(Xtr, ytr, compiled=True)
    acc_e, acc_c = accuracy(m_e, Xte, yte), accuracy(m_c, Xte, yte)
    ag = lf.versions[0].autograd
    print(f"digits: {len(Xtr)} train / {len(Xte)} test images, model 64-{HIDDEN}-{CLASSES} "
          f"(Linear, LayerNorm, GELU, Linear), AdamW, {EPOCHS} epochs of batch {BATCH}")
    print(f"test accuracy: eager {acc_e:.4f}, compiled {acc_c:.4f}")
    print(f"final training loss: eager {loss_e[-1]:.4f}, compiled {loss_c[-1]:.4f} "
          f"(max step difference {max(abs(a - b) for a, b in zip(loss_e, loss_c)):.1e})")
    print(f"min-cut partition: the forward saves {ag.saved_bytes} bytes for the backward vs "
          f"{ag.save_all_bytes} saving every intermediate ({ag.saved_bytes / ag.save_all_bytes:.2f}x); "
          f"recomputed in the backward: {', '.join(ag.recomputed) or 'none'}")
    ips = throughput(Xtr, ytr)
    line = ", ".join(f"{k} {v:,.0f}" for k, v in ips.items())
    print(f"training images/second (batch {BATCH}): {line}")
    if "torch.compile" in ips:
        print(f"compiled tensorplay vs torch.compile: {ips['compiled'] / ips['torch.compile']:.2f}x")
    else:
        print("torch not installed: no torch.compile column")
    t = time.perf_counter()
    c_e, closs_e, _ = train(Xtr, ytr, compiled=False, cnn=True)
    t_e, t = time.perf_counter() - t, time.perf_counter()
    c_c, closs_c, clf = train(Xtr, ytr, compiled=True, cnn=True)
    t_c = time.perf_counter() - t
    cacc_e, cacc_c = accuracy(c_e, Xte, yte, True), accuracy(c_c, Xte, yte, True)
    print(f"CNN (Conv2d 1-16-32, GELU, MaxPool2d, Linear), AdamW, {CNN_EPOCHS} epochs: test accuracy "
          f"eager {cacc_e:.4f}, compiled {cacc_c:.4f}; training time eager {t_e:.1f} s, "
          f"compiled {t_c:.1f} s (compile included; {clf.stats()['fallbacks']} fallback kernel(s) "
          f"in the compiled backward: max pooling's index_add)")
    plot({"MLP eager": loss_e, "MLP compiled": loss_c, "CNN eager": closs_e, "CNN compiled": closs_c})
    print(f"total time {time.perf_counter() - t_start:.1f} s")
    if min(acc_e, acc_c, cacc_e, cacc_c) < 0.97:
        sys.exit(1)


if __name__ == "__main__":
    main()
