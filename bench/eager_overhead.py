"""Eager per-op overhead: ns per `x + 1` (and a few neighbours) on a
1-element tensor. Not a test; run `python3 bench/eager_overhead.py`."""
import os
import sys
import timeit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

import tensorplay as tp  # noqa: E402


def ns_per(stmt, env, n=200_000):
    best = min(timeit.repeat(stmt, globals=env, number=n, repeat=5))
    base = min(timeit.repeat("pass", globals=env, number=n, repeat=5))
    return (best - base) / n * 1e9


def main():
    x = tp.ones(1)
    env = {"x": x, "tp": tp}
    rows = [("x + 1", "x + 1"), ("x + x", "x + x"), ("x * 2.5", "x * 2.5"),
            ("x.exp()", "x.exp()"), ("tp.relu(x)", "tp.relu(x)"),
            ("x.add_(1)", "x.add_(1)"), ("x < 0", "x < 0"),
            ("x.sum()", "x.sum()")]
    for label, stmt in rows:
        print(f"{label:12s} {ns_per(stmt, env):8.0f} ns")
    try:
        import torch
        t = torch.ones(1)
        print(f"{'torch x + 1':12s} {ns_per('t + 1', {'t': t}):8.0f} ns")
    except Exception:  # noqa: BLE001
        pass


if __name__ == "__main__":
    main()
