"""Stax CPU back end goals (issue 7), measured side by side in one run:
`python -m bench.kernels [--torch]`.

Rows: Example 1.1 at 4096x4096 compiled vs eager (goal >= 4x); its bytes per
second over a streaming copy (goal >= 0.85); first call trace + compile +
run of Example 1.1 (goal <= 50 ms); `x + 1` on one element compiled vs eager
(goal <= 1.5x); softmax and layer_norm 4096x4096; with --torch the same
against torch.compile."""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402

import tensorplay as tp  # noqa: E402
from _timing import median_time, stream_gbs  # noqa: E402
import tensorplay.nn.functional as F  # noqa: E402




def main():
    rows = []

    def ex11(x, w):
        return (tp.relu(x + w) * 2).sum(-1)

    def ex11b(x, w):
        return (tp.relu(x + w) * 2).sum(-1)
    xs, ws = tp.randn(64, 128), tp.randn(64, 128)
    t = time.perf_counter()
    tp.compile(ex11b, strict_native=True)(xs, ws)
    first = time.perf_counter() - t
    n = 4096
    x, w = tp.randn(n, n), tp.randn(n, n)
    cf = tp.compile(ex11, strict_native=True)
    cf(x, w)
    tc = median_time(lambda: cf(x, w), reps=9)
    te = median_time(lambda: ex11(x, w), reps=5)
    gbs = 2 * n * n * 4 / tc / 1e9
    copy = stream_gbs()
    k = cf.versions[0].kernels
    rows.append(f"ex1.1 4096^2: compiled {tc*1e3:.2f} ms, eager {te*1e3:.2f} ms: {te/tc:.2f}x (goal >= 4)")
    rows.append(f"ex1.1 bandwidth: {gbs:.1f} GB/s = {gbs/copy:.2f} of a streaming copy {copy:.1f} GB/s (goal >= 0.85)")
    rows.append(f"ex1.1 kernels: {len(k)}, bytes {k[0].bytes_read + k[0].bytes_written} "
                f"vs Prop 1.1 bound {cf.versions[0].artifact.lower_bound_bytes}")
    rows.append(f"first call (trace + compile + run) 64x128: {first*1e3:.1f} ms (goal <= 50)")
    one = tp.ones(1)
    c1 = tp.compile(lambda a: a + 1)
    c1(one)
    d1 = median_time(lambda: c1(one), reps=9, inner=2000)
    d0 = median_time(lambda: one + 1, reps=9, inner=2000)
    rows.append(f"x+1 one element: compiled {d1*1e6:.2f} us vs eager {d0*1e6:.2f} us: {d1/d0:.2f}x (goal <= 1.5)")
    g, b = tp.randn(n), tp.randn(n)
    cases = {
        "softmax": (lambda m, FF, a: FF.softmax(a, -1), (x,)),
        "layer_norm": (lambda m, FF, a, gg, bb: FF.layer_norm(a, (n,), gg, bb), (x, g, b)),
    }
    torch = None
    if "--torch" in sys.argv:
        try:
            import torch
            import torch.nn.functional as TF
            torch.set_num_threads(os.cpu_count())
        except Exception:  # noqa: BLE001
            torch = None
    for name, (fn, args) in cases.items():
        c = tp.compile(lambda *a, fn=fn: fn(tp, F, *a), strict_native=True)
        c(*args)
        tcc = median_time(lambda: c(*args), reps=7)
        tee = median_time(lambda: fn(tp, F, *args), reps=3)
        row = (f"{name} 4096^2: compiled {tcc*1e3:.2f} ms ({len(c.versions[0].kernels)} kernel), "
               f"eager {tee*1e3:.2f} ms: {tee/tcc:.2f}x")
        if torch is not None:
            ta = [torch.from_numpy(np.asarray(a.numpy())) for a in args]
            tcm = torch.compile(lambda *a, fn=fn: fn(torch, TF, *a))
            tcm(*ta)
            tt = median_time(lambda: tcm(*ta), reps=7)
            row += f"; torch.compile {tt*1e3:.2f} ms: {tt/tcc:.2f}x (goal >= 1.0)"
        rows.append(row)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
