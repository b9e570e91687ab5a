"""The scatter family (issue 16): `python -m bench.scatter [n ...]`.
scatter_add / scatter_reduce('amax') / index_add of m = n float32 values
into n, random indices: compiled (one ST_SCATTER step, O(n + m), in index
order), eager, and torch eager when installed. (The lowering before it,
an O(n * m) hit mask, took 23 ms at n = m = 4000 and minutes at 10^6.)
Medians in ms, side by side in one run."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import tensorplay as tp  # noqa: E402
from _timing import median_time  # noqa: E402

CASES = [
    ("scatter_add", lambda x, i, s: x.scatter_add(0, i, s)),
    ("scatter_reduce amax", lambda x, i, s: x.scatter_reduce(0, i, s, "amax")),
    ("index_add", lambda x, i, s: x.index_add(0, i, s)),
]


def main():
    sizes = [int(a) for a in sys.argv[1:] if a.isdigit()] or [4000, 100_000, 1_000_000]
    try:
        import torch
    except ImportError:
        torch = None
    print("case | n = m | compiled ms | eager ms" + (" | torch eager ms" if torch else ""))
    for n in sizes:
        rng = np.random.default_rng(0)
        xa = rng.standard_normal(n).astype(np.float32)
        ia = rng.integers(0, n, n)
        sa = rng.standard_normal(n).astype(np.float32)
        x, i, s = tp.tensor(xa), tp.tensor(ia), tp.tensor(sa)
        for name, f in CASES:
            cf = tp.compile(f, strict_native=True, dynamic=False)
            cf(x, i, s)
            assert "scatter" in cf.versions[0].artifact.steps
            row = [name, str(n), f"{median_time(lambda: cf(x, i, s), reps=7) * 1e3:.2f}",
                   f"{median_time(lambda: f(x, i, s), reps=5) * 1e3:.2f}"]
            if torch is not None:
                tx, ti, ts = torch.tensor(xa), torch.tensor(ia), torch.tensor(sa)
                row.append(f"{median_time(lambda: f(tx, ti, ts), reps=7) * 1e3:.2f}")
            print(" | ".join(row))


if __name__ == "__main__":
    main()
