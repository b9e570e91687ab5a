"""Statistics in one pass (issue 16 item 5): `python -m bench.norms`.
var(1), var_mean(1), std(0) and layer_norm over 2048 x 4096 float32,
compiled vs eager, medians of 7 x 3 calls in ms."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

import tensorplay as tp  # noqa: E402
import tensorplay.nn.functional as F  # noqa: E402
from _timing import median_time  # noqa: E402


def main():
    x = tp.randn(2048, 4096) + 1e3
    cases = [("var(1)", lambda a: a.var(1)), ("var_mean(1)", lambda a: tp.var_mean(a, 1)),
             ("std(0)", lambda a: a.std(0)), ("layer_norm(4096)", lambda a: F.layer_norm(a, (4096,)))]
    print(f"{'op (2048 x 4096)':20s} {'compiled ms':>12s} {'eager ms':>10s}")
    for name, f in cases:
        cf = tp.compile(f, strict_native=True, dynamic=False)
        cf(x)
        tc = median_time(lambda: cf(x), reps=7, inner=3)
        te = median_time(lambda: f(x), reps=7, inner=3)
        print(f"{name:20s} {tc * 1e3:12.3f} {te * 1e3:10.3f}")


if __name__ == "__main__":
    main()
