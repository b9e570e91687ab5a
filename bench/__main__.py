"""One benchmark entry point: `python -m bench` (or `make bench`).

Cases: Example 1.1 (64x128 and 4096x4096), softmax, layer_norm, a GELU-MLP
block, a chain of 8 pointwise ops, `x + 1` on one element (dispatch cost) and
the first call (trace + compile + run; the persistent compile cache off),
the cache section (bench/cache.py: first calls of new processes with
an empty and a warm cache directory) and the training section
(bench/training.py: a compiled training step of the digits MLP vs
torch.compile's, and the min-cut saved bytes). Columns: tensorplay eager,
tensorplay compiled, NumPy, torch eager and torch.compile when torch is
installed. Times are medians of repeated calls after warm-up, measured side
by side in one run. For each compiled case: bytes the kernels move, the
Prop. 1.1 lower bound, and GB/s against a streaming copy measured in the same
run. Writes bench/results/bench.{json,csv,png}.

`python -m bench --device cuda` runs bench/gpu.py instead: the same kind of
table for CUDA tensors against torch eager and torch.compile on the GPU.
"""
import csv
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402

from _timing import cpu_model, median_time, print_markdown_table, stream_gbs  # noqa: E402
import tensorplay as tp  # noqa: E402
import tensorplay.nn.functional as F  # noqa: E402

try:
    import torch
    import torch.nn.functional as TF
    torch.set_num_threads(os.cpu_count())
except Exception:  # torch is optional
    torch = None

RESULTS = os.path.join(HERE, "results")





def chain(m, x, w):
    y = x * w + 1.0
    y = m.tanh(y) * 0.5 + x
    y = m.sigmoid(y) - w
    return y * y + x


def np_gelu(v):
    from math import sqrt
    try:
        from scipy.special import erf
    except Exception:
        erf = np.vectorize(__import__("math").erf)
    return 0.5 * v * (1 + erf(v / sqrt(2)))


def cases(rng):
    def arr(*s):
        return rng.standard_normal(s, dtype=np.float32)
    A, B = arr(4096, 4096), arr(4096, 4096)
    a, b = arr(64, 128), arr(64, 128)
    g, be = arr(4096), arr(4096)
    X1, W1 = arr(2048, 1024), arr(1024, 1024) / 32
    return [
        ("ex1.1 64x128", lambda m, Fm, x, w: (m.relu(x + w) * 2).sum(-1), (a, b),
         lambda x, w: (np.maximum(x + w, 0) * 2).sum(-1)),
        ("ex1.1 4096^2", lambda m, Fm, x, w: (m.relu(x + w) * 2).sum(-1), (A, B),
         lambda x, w: (np.maximum(x + w, 0) * 2).sum(-1)),
        ("softmax 4096^2", lambda m, Fm, x: Fm.softmax(x, -1), (A,),
         lambda x: (lambda e: e / e.sum(-1, keepdims=True))(np.exp(x - x.max(-1, keepdims=True)))),
        ("layer_norm 4096^2", lambda m, Fm, x, g, b: Fm.layer_norm(x, (4096,), g, b), (A, g, be),
         lambda x, g, b: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b),
        ("gelu-mlp 2048x1024", lambda m, Fm, x, w: Fm.gelu(x @ w) + x, (X1, W1),
         lambda x, w: np_gelu(x @ w) + x),
        ("chain8 4096^2", lambda m, Fm, x, w: chain(m, x, w), (A, B),
         lambda x, w: (lambda y: (lambda y2: (lambda y3: y3 * y3 + x)(1 / (1 + np.exp(-y2)) - w))(np.tanh(y) * 0.5 + x))(x * w + 1.0)),
    ]


def kernel_bytes(cf):
    try:
        ks = list(cf.versions[-1].kernels)
        moved = sum(int(getattr(k, "bytes_read", 0)) + int(getattr(k, "bytes_written", 0)) for k in ks)
        return len(ks), moved
    except Exception:
        return None, None


def main():
    if "--device" in sys.argv[1:]:
        dev = sys.argv[sys.argv.index("--device") + 1:][:1]
        if dev == ["cuda"]:
            import gpu as gpu_bench      # bench/gpu.py: CUDA tensors, torch side by side
            sys.exit(gpu_bench.main(sys.argv))
        if dev != ["cpu"]:
            sys.exit(f"bench: unknown --device {dev[0] if dev else ''!r} (cpu or cuda)")
    os.makedirs(RESULTS, exist_ok=True)
    # first_call_ms is a cold compile: the persistent compile cache is off
    # here (its warm-cache first calls are the `cache` section below)
    tp.compiler.config.cache = False
    rng = np.random.default_rng(0)
    copy = stream_gbs()
    print(f"# tensorplay bench — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"# {os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()}, NumPy {np.__version__}"
          + (f", torch {torch.__version__}" if torch else ", torch not installed"))
    print(f"# streaming copy: {copy:.1f} GB/s (read + write)")
    rows = []
    for name, fn, arrs, npfn in cases(rng):
        row = {"case": name}
        ta = [tp.from_numpy(x) for x in arrs]
        ftp = lambda *a, fn=fn: fn(tp, F, *a)  # noqa: E731
        reps = 50 if "64x128" in name else 7
        row["tp_eager_us"] = median_time(lambda: ftp(*ta), reps) * 1e6
        cf = tp.compile(ftp, strict_native=True)
        t0 = time.perf_counter()
        out = cf(*ta)
        row["first_call_ms"] = (time.perf_counter() - t0) * 1e3
        ref = npfn(*arrs)
        row["max_abs_err"] = float(np.max(np.abs(out.numpy().astype(np.float64) - ref)))
        row["tp_compiled_us"] = median_time(lambda: cf(*ta), reps) * 1e6
        row["numpy_us"] = median_time(lambda: npfn(*arrs), reps) * 1e6
        nk, moved = kernel_bytes(cf)
        lower = sum(x.nbytes for x in arrs) + np.asarray(ref).nbytes
        row.update(kernels=nk, bytes_moved=moved, lower_bound_bytes=lower,
                   gbs=(lower / (row["tp_compiled_us"] * 1e-6) / 1e9))
        row["of_copy"] = row["gbs"] / copy
        if torch is not None:
            to = [torch.from_numpy(x) for x in arrs]
            fto = lambda *a, fn=fn: fn(torch, TF, *a)  # noqa: E731
            row["torch_eager_us"] = median_time(lambda: fto(*to), reps) * 1e6
            ct = torch.compile(fto)
            t0 = time.perf_counter()
            ct(*to)
            row["torch_first_call_ms"] = (time.perf_counter() - t0) * 1e3
            row["torch_compile_us"] = median_time(lambda: ct(*to), reps) * 1e6
        rows.append(row)
    one = tp.ones(1)
    c1 = tp.compile(lambda a: a + 1)
    c1(one)
    row = {"case": "x+1 (1 elem)", "tp_eager_us": median_time(lambda: one + 1, 9, 2000) * 1e6,
           "tp_compiled_us": median_time(lambda: c1(one), 9, 2000) * 1e6}
    on = np.ones(1, np.float32)
    row["numpy_us"] = median_time(lambda: on + 1, 9, 2000) * 1e6
    if torch is not None:
        o = torch.ones(1)
        c2 = torch.compile(lambda a: a + 1)
        c2(o)
        row["torch_eager_us"] = median_time(lambda: o + 1, 9, 2000) * 1e6
        row["torch_compile_us"] = median_time(lambda: c2(o), 9, 2000) * 1e6
    rows.append(row)
    cols = ["case", "tp_eager_us", "tp_compiled_us", "numpy_us", "torch_eager_us", "torch_compile_us",
            "first_call_ms", "torch_first_call_ms", "kernels", "bytes_moved", "lower_bound_bytes", "gbs",
            "of_copy", "max_abs_err"]
    print_markdown_table(rows, cols)
    print("\nspeed-ups (compiled vs eager, vs torch.compile):")
    for r in rows:
        s = f"  {r['case']}: {r['tp_eager_us'] / r['tp_compiled_us']:.2f}x eager"
        if r.get("torch_compile_us"):
            s += f", {r['torch_compile_us'] / r['tp_compiled_us']:.2f}x torch.compile"
        print(s)
    meta = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "cores": os.cpu_count(), "cpu": cpu_model(),
            "stream_copy_gbs": copy, "rows": rows}
    with open(os.path.join(RESULTS, "bench.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
    with open(os.path.join(RESULTS, "bench.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(10, 4.5))
        series = [c for c in ("tp_eager_us", "tp_compiled_us", "numpy_us", "torch_eager_us", "torch_compile_us")
                  if any(r.get(c) for r in rows)]
        width = 0.8 / len(series)
        for i, c in enumerate(series):
            ax.bar([j + i * width for j in range(len(rows))], [r.get(c) or 0 for r in rows], width, label=c)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))])
        ax.set_xticklabels([r["case"] for r in rows], rotation=20, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("median time per call (us, log)")
        ax.set_title(f"tensorplay bench, {os.cpu_count()} cores {cpu_model()}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(RESULTS, "bench.png"), dpi=110)
    except Exception as e:  # matplotlib optional for the table
        print(f"(no chart: {e})")
    print(f"\nwrote {RESULTS}/bench.json, bench.csv, bench.png")
    import cache as cache_bench
    print()
    cache_bench.main(["cache.py", "5"])
    # the training step (compiled autograd + fused optimizer) vs torch.compile
    import training as training_bench
    print()
    training_bench.main([])


if __name__ == "__main__":
    main()
