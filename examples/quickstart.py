"""Example 1.1 of the Stax chapter, compiled end to end.

    f(x, w) = (relu(x + w) * 2).sum(-1)

For 64x128 and 4096x4096 float32 inputs this prints: the max abs error of
the compiled result against eager, the number of kernels in the
specialization version, the first-call time (trace + compile + run) and the
eager/compiled time ratio (medians of repeated calls).
Run: `make demo` (or `python examples/quickstart.py` after `make build`).
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import numpy as np  # noqa: E402

import tensorplay as tp  # noqa: E402


def f(x, w):
    return (tp.relu(x + w) * 2).sum(-1)


def median_time(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main():
    tp.manual_seed(0)
    print(f"Example 1.1: (relu(x + w) * 2).sum(-1), float32, {os.cpu_count()} cores")
    for n, m, reps in ((64, 128, 200), (4096, 4096, 9)):
        x, w = tp.randn(n, m), tp.randn(n, m)
        cf = tp.compile(f, strict_native=True)
        t0 = time.perf_counter()
        y = cf(x, w)
        first = time.perf_counter() - t0
        ref = f(x, w)
        err = float(np.max(np.abs(y.numpy().astype(np.float64) - ref.numpy())))
        version = cf.versions[0]
        te = median_time(lambda: f(x, w), reps)
        tc = median_time(lambda: cf(x, w), reps)
        print(f"  {n}x{m}: max abs error vs eager {err:.2e}; kernels {len(version.kernels)}; "
              f"first call {first * 1e3:.1f} ms; eager {te * 1e6:.1f} us, compiled {tc * 1e6:.1f} us, "
              f"speed-up {te / tc:.2f}x")
    print("\nThe captured graph (Listing 3.1):")
    small = tp.compile(f, strict_native=True)
    small(tp.randn(64, 128), tp.randn(64, 128))
    print(small.versions[0].graph_module.graph)
    print("\nIts guards:")
    for g in small.versions[0].guards:
        print("  ", g)


if __name__ == "__main__":
    main()
