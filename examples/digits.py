"""The main job on real data: handwritten digits, classified by a small
tensorplay.nn model, its inference compiled with strict_native=True.

Data: scikit-learn's bundled 8x8 digits (1797 images, shipped inside the
package; no download). Model: Linear(64 -> 512) with fixed random weights ->
LayerNorm -> GELU -> Linear(512 -> 10) -> softmax. The hidden layer is a
random-feature map; the readout is fitted in closed form by ridge regression
with NumPy on the training split, so nothing needs autograd.

Prints: test accuracy eager and compiled (identical), the max abs difference
of the probabilities, the number of kernels, the compile time, and
images/second eager vs compiled (and torch.compile on the same model when
torch is installed). Run: `make demo`.
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import tensorplay as tp  # noqa: E402
import tensorplay.nn as nn  # noqa: E402
import tensorplay.nn.functional as F  # noqa: E402

HIDDEN = 512
RIDGE = 1e-2


class DigitNet(nn.Module):
    def __init__(self, d_in, hidden, classes):
        super().__init__()
        self.features = nn.Linear(d_in, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.readout = nn.Linear(hidden, classes)

    def hidden(self, x):
        return F.gelu(self.norm(self.features(x)))

    def forward(self, x):
        return F.softmax(self.readout(self.hidden(x)), dim=-1)


def best_time(fn, reps=15):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main():
    tp.manual_seed(0)
    digits = load_digits()
    X = (digits.data / 16.0).astype(np.float32)
    y = digits.target
    rng = np.random.default_rng(0)
    order = rng.permutation(len(X))
    X, y = X[order], y[order]
    n_train = int(0.75 * len(X))
    Xtr, ytr, Xte, yte = X[:n_train], y[:n_train], X[n_train:], y[n_train:]

    model = DigitNet(64, HIDDEN, 10).eval()
    with tp.no_grad():
        H = model.hidden(tp.from_numpy(Xtr)).numpy().astype(np.float64)
    # ridge regression readout on one-hot targets (bias as an extra column)
    Ha = np.hstack([H, np.ones((len(H), 1))])
    Y = np.eye(10)[ytr]
    A = Ha.T @ Ha + RIDGE * np.eye(Ha.shape[1])
    Wb = np.linalg.solve(A, Ha.T @ Y)
    with tp.no_grad():
        model.readout.weight.copy_(tp.from_numpy(np.ascontiguousarray(Wb[:-1].T.astype(np.float32))))
        model.readout.bias.copy_(tp.from_numpy(Wb[-1].astype(np.float32)))

    xte = tp.from_numpy(np.ascontiguousarray(Xte))
    with tp.no_grad():
        p_eager = model(xte).numpy()
        cmodel = tp.compile(model, strict_native=True)
        t0 = time.perf_counter()
        p_comp = cmodel(xte).numpy()
        compile_s = time.perf_counter() - t0
        acc_e = float((p_eager.argmax(1) == yte).mean())
        acc_c = float((p_comp.argmax(1) == yte).mean())
        diff = float(np.max(np.abs(p_eager - p_comp)))
        nk = len(cmodel.versions[0].kernels)
        te = best_time(lambda: model(xte))
        tc = best_time(lambda: cmodel(xte))
    n = len(Xte)
    print(f"digits: {n_train} train / {n} test images, 8x8, model 64-{HIDDEN}-10 "
          f"(Linear, LayerNorm, GELU, Linear, softmax)")
    print(f"test accuracy: eager {acc_e:.4f}, compiled {acc_c:.4f} "
          f"({'identical' if acc_e == acc_c else 'DIFFERENT'})")
    print(f"max abs difference of probabilities: {diff:.2e}")
    print(f"kernels: {nk}; compile time (trace + compile + first run): {compile_s * 1e3:.1f} ms")
    print(f"images/second: eager {n / te:,.0f}, compiled {n / tc:,.0f} ({te / tc:.2f}x)")
    try:
        import torch
        import torch.nn as tnn
        tm = tnn.Sequential(tnn.Linear(64, HIDDEN), tnn.LayerNorm(HIDDEN), tnn.GELU(), tnn.Linear(HIDDEN, 10),
                            tnn.Softmax(dim=-1)).eval()
        sd = {k: torch.from_numpy(v.numpy().copy()) for k, v in model.state_dict().items()}
        tm.load_state_dict({"0.weight": sd["features.weight"], "0.bias": sd["features.bias"],
                            "1.weight": sd["norm.weight"], "1.bias": sd["norm.bias"],
                            "3.weight": sd["readout.weight"], "3.bias": sd["readout.bias"]})
        ctm = torch.compile(tm)
        xt = torch.from_numpy(np.ascontiguousarray(Xte))
        with torch.no_grad():
            ctm(xt)
            tt = best_time(lambda: ctm(xt))
        print(f"images/second torch.compile: {n / tt:,.0f} (tensorplay compiled is {tt / tc:.2f}x of it)")
    except ImportError:
        print("torch not installed: no torch.compile column")
    if acc_e != acc_c or acc_c < 0.9:
        sys.exit(1)


if __name__ == "__main__":
    main()
