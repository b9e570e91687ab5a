"""Concatenation (issue 16 item 6): `python -m bench.cat` (from the repo root;
`--torch` adds torch eager). cat / stack of n inputs compiled vs eager,
and cat followed by a pointwise op (the compiled program writes each input
into its slice of the output, one kernel per input, then the consumer
reads the output once)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

import tensorplay as tp  # noqa: E402
from _timing import median_time  # noqa: E402


def rows(with_torch):
    out = []
    cases = [
        ("cat dim1, 16 x (256, 256)", 16, (256, 256), lambda xs: tp.cat(xs, 1)),
        ("cat dim0, 16 x (256, 256)", 16, (256, 256), lambda xs: tp.cat(xs, 0)),
        ("stack dim0, 16 x (256, 256)", 16, (256, 256), lambda xs: tp.stack(xs, 0)),
        ("cat dim1 then *2+1, 16 x (256, 256)", 16, (256, 256), lambda xs: tp.cat(xs, 1) * 2 + 1),
        ("cat dim1 of x*2, 4 x (1024, 256)", 4, (1024, 256), lambda xs: tp.cat([x * 2 for x in xs], 1)),
        ("cat dim1, 2 x (2048, 512)", 2, (2048, 512), lambda xs: tp.cat(xs, 1)),
    ]
    for name, n, shape, f in cases:
        xs = [tp.randn(*shape) for _ in range(n)]

        def g(*a, f=f):
            return f(list(a))
        cf = tp.compile(g, strict_native=True, dynamic=False)
        cf(*xs)
        tc = median_time(lambda: cf(*xs), reps=7, inner=3)
        te = median_time(lambda: g(*xs), reps=7, inner=3)
        r = [name, tc * 1e3, te * 1e3]
        if with_torch:
            import torch
            txs = [torch.from_numpy(x.numpy()) for x in xs]
            tf = {"cat": torch.cat, "stack": torch.stack}

            def tg(xs=txs, name=name):
                op = tf["stack" if name.startswith("stack") else "cat"]
                dim = 0 if "dim0" in name else 1
                if "x*2" in name:
                    return op([x * 2 for x in xs], dim)
                y = op(xs, dim)
                return y * 2 + 1 if "*2+1" in name else y
            r.append(median_time(tg, reps=7, inner=3) * 1e3)
        out.append(r)
    return out


def main():
    with_torch = "--torch" in sys.argv
    print(f"{'case':40s} {'compiled ms':>12s} {'eager ms':>10s}" + (f" {'torch ms':>9s}" if with_torch else ""))
    for r in rows(with_torch):
        print(f"{r[0]:40s} {r[1]:12.3f} {r[2]:10.3f}" + (f" {r[3]:9.3f}" if with_torch else ""))


if __name__ == "__main__":
    main()
