"""Per-call cost of a compiled `x + 1` on a 1-element tensor at each dispatch level.

    python bench/dispatch.py [--backend stax|eager]

Level 1: the same tensor object every call (C fast path, straight to the
artifact). Level 2: the same objects and versions but a keyword argument
(the fingerprint reuses the last key). Level 3: a fresh tensor of the same
shape every call (signature + specialization cache). Baselines: the eager op,
the artifact called directly (so level 1's own overhead is the difference),
and torch.compile's per-call cost when torch is installed. Medians; not a test."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensorplay as tp  # noqa: E402
from _timing import median_time  # noqa: E402



def main():
    backend = "stax"
    if "--backend" in sys.argv:
        backend = sys.argv[sys.argv.index("--backend") + 1]
    x = tp.ones(1)
    cf = tp.compile(lambda a: a + 1, backend=backend)
    cf(x)
    art = cf.versions[0].artifact
    fresh = [tp.ones(1) for _ in range(64)]
    it = iter(range(1 << 60))

    def level3():
        return cf(fresh[next(it) & 63])

    ck = tp.compile(lambda a, k=1: a + k, backend=backend)
    ck(x, k=1)
    rows = [
        ("eager x + 1", median_time(lambda: x + 1)),
        ("artifact called directly", median_time(lambda: art(x))),
        ("compiled, level 1 (same object)", median_time(lambda: cf(x))),
        ("compiled, level 2 (kwargs, same fingerprint)", median_time(lambda: ck(x, k=1), inner=500)),
        ("compiled, level 3 (fresh tensor each call)", median_time(level3, inner=500)),
    ]
    try:
        import torch
        tx = torch.ones(1)
        tc = torch.compile(lambda a: a + 1)
        tc(tx)
        rows.append(("torch eager x + 1", median_time(lambda: tx + 1)))
        rows.append(("torch.compile x + 1", median_time(lambda: tc(tx), inner=500)))
    except Exception as e:  # noqa: BLE001 - torch optional
        rows.append((f"torch.compile: not available ({type(e).__name__})", float("nan")))
    for name, t in rows:
        print(f"{name:48s} {t * 1e6:8.3f} us")
    base = rows[1][1]
    print(f"level 1 overhead over the artifact call: {(rows[2][1] - base) * 1e9:.0f} ns")
    print("stats:", cf.stats())


if __name__ == "__main__":
    main()
