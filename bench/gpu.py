"""`python3 -m bench --device cuda` (bench/gpu.py): tensorplay on CUDA tensors against torch
eager and torch.compile on the same GPU, in one run.

Bandwidth cases are timed with CUDA events around 20 back-to-back calls
(after warm-up; best of 5 such rounds), so launch overhead is amortized as
in a training loop; the per-call rows (`x + 1` on one element) are
wall-clock medians of single synchronized calls. The roof is a measured
device-to-device copy (torch's `dst.copy_(src)` of 1 GiB), counting bytes
read plus written; "of copy" = (bytes the case must move / time) / roof.
Writes bench/results/bench_cuda.json.
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import tensorplay as tp  # noqa: E402
import tensorplay.nn.functional as F  # noqa: E402
from _timing import fmt_cell, print_markdown_table  # noqa: E402

try:
    import torch
    import torch.nn.functional as TF
except Exception:  # torch optional: its columns stay empty
    torch = None


def ex11(m, f, x, w):
    return (m.relu(x + w) * 2).sum(-1)


def softmax(m, f, x):
    return m.softmax(x, -1)


def layer_norm(m, f, x):
    return f.layer_norm(x, (x.shape[-1],))


CASES = [
    ("Example 1.1 4096x4096", ex11, (4096, 4096), 2),
    ("Example 1.1 16384x16384", ex11, (16384, 16384), 2),
    ("Example 1.1 1048576x128", ex11, (1048576, 128), 2),
    ("softmax 16384x16384", softmax, (16384, 16384), 1),
    ("layer_norm 16384x16384", layer_norm, (16384, 16384), 1),
]


def events_ms(fn, sync, event, calls=20, rounds=5):
    """best-of-rounds mean ms per call, CUDA events around `calls` calls"""
    for _ in range(3):
        fn()
    sync()
    best = float("inf")
    for _ in range(rounds):
        a, b = event(enable_timing=True), event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) / calls)
    return best


def wall_us(fn, sync, n=2000, rounds=7):
    fn()
    sync()
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        ts.append((time.perf_counter() - t0) / n)
    return sorted(ts)[len(ts) // 2] * 1e6


def copy_roof():
    """GB/s of a device-to-device copy (read + write)"""
    n = 1 << 28
    if torch is not None:
        src = torch.rand(n, device="cuda")
        dst = torch.empty_like(src)
        ms = events_ms(lambda: dst.copy_(src), torch.cuda.synchronize, torch.cuda.Event)
        return 2 * 4 * n / (ms * 1e-3) / 1e9, "torch copy_"
    src = tp.rand(n, device="cuda")
    dst = tp.empty(n, device="cuda")
    ms = events_ms(lambda: dst.copy_(src), tp.cuda.synchronize, tp.cuda.Event)
    return 2 * 4 * n / (ms * 1e-3) / 1e9, "tensorplay copy_"


def main(argv=()):
    if not tp.cuda.is_available():
        print("bench --device cuda: " + ("CUDA is not available here"))
        return 1
    tp.compiler.config.cache = False
    roof, how = copy_roof()
    print(f"# tensorplay bench --device cuda — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"# {tp.cuda.get_device_name()}, torch {torch.__version__ if torch else '-'}")
    print(f"# roof: device-to-device copy ({how}) {roof:.0f} GB/s (read + write)")
    rows = []
    rng = np.random.default_rng(0)
    for name, fn, shape, nin in CASES:
        try:
            rows.append(run_case(name, fn, shape, nin, rng, roof))
        except Exception as e:  # noqa: BLE001  (one failing case keeps the table)
            print(f"# {name}: {type(e).__name__}: {str(e)[:300]}")
            rows.append({"case": name})
        tp.cuda.empty_cache()
    rows.append(per_call_row())
    print_table(rows)
    print(f"# host fallbacks during the run: {tp.cuda.host_fallbacks()}")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "bench_cuda.json"), "w") as fh:
        json.dump({"roof_gbs": roof, "roof": how, "rows": rows}, fh, indent=1)
    return 0


def run_case(name, fn, shape, nin, rng, roof):
    arrs = [rng.standard_normal(shape, dtype=np.float32) for _ in range(nin)]
    ta = [tp.from_numpy(a).cuda() for a in arrs]
    row = {"case": name}
    ftp = lambda *a, fn=fn: fn(tp, F, *a)  # noqa: E731
    cf = tp.compile(ftp, strict_native=True)
    tp.cuda.synchronize()
    t0 = time.perf_counter()
    out = cf(*ta)
    tp.cuda.synchronize()
    row["tp_first_call_ms"] = (time.perf_counter() - t0) * 1e3
    tp.cuda.finish_compiles()       # steady state: the kernels' final versions
    cf(*ta)
    row["tp_compiled_ms"] = events_ms(lambda: cf(*ta), tp.cuda.synchronize, tp.cuda.Event)
    row["tp_eager_ms"] = events_ms(lambda: ftp(*ta), tp.cuda.synchronize, tp.cuda.Event,
                                   calls=5, rounds=3)
    moved = sum(a.nbytes for a in arrs) + out.numel() * 4
    row["tp_of_copy"] = moved / (row["tp_compiled_ms"] * 1e-3) / 1e9 / roof
    if torch is not None:
        to = [torch.from_numpy(a).cuda() for a in arrs]
        fto = lambda *a, fn=fn: fn(torch, TF, *a)  # noqa: E731
        row["torch_eager_ms"] = events_ms(lambda: fto(*to), torch.cuda.synchronize,
                                          torch.cuda.Event)
        ct = torch.compile(fto)
        t0 = time.perf_counter()
        ref = ct(*to)
        torch.cuda.synchronize()
        row["torch_first_call_ms"] = (time.perf_counter() - t0) * 1e3
        row["torch_compile_ms"] = events_ms(lambda: ct(*to), torch.cuda.synchronize,
                                            torch.cuda.Event)
        row["torch_of_copy"] = moved / (row["torch_compile_ms"] * 1e-3) / 1e9 / roof
        got = out.cpu().numpy().astype(np.float64)
        want = ref.cpu().numpy().astype(np.float64)
        row["max_rel_err"] = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) or 1))
        del to, ref
    return row


def per_call_row():
    one = tp.ones(1, device="cuda")
    c1 = tp.compile(lambda a: a + 1)
    c1(one)
    tp.cuda.finish_compiles()           # the kernel's final version
    row = {"case": "x+1 (1 elem) per call, us",
           "tp_compiled_ms": wall_us(lambda: c1(one), tp.cuda.synchronize, n=1) / 1e3,
           "tp_eager_ms": wall_us(lambda: one + 1, tp.cuda.synchronize, n=1) / 1e3}
    row["tp_compiled_async_us"] = wall_us(lambda: c1(one), tp.cuda.synchronize)
    row["tp_eager_async_us"] = wall_us(lambda: one + 1, tp.cuda.synchronize)
    if torch is not None:
        o = torch.ones(1, device="cuda")
        c2 = torch.compile(lambda a: a + 1)
        c2(o)
        row["torch_compile_ms"] = wall_us(lambda: c2(o), torch.cuda.synchronize, n=1) / 1e3
        row["torch_eager_ms"] = wall_us(lambda: o + 1, torch.cuda.synchronize, n=1) / 1e3
        row["torch_compile_async_us"] = wall_us(lambda: c2(o), torch.cuda.synchronize)
        row["torch_eager_async_us"] = wall_us(lambda: o + 1, torch.cuda.synchronize)
    return row


def print_table(rows):
    cols = ["case", "tp_compiled_ms", "torch_compile_ms", "tp_eager_ms", "torch_eager_ms",
            "tp_of_copy", "torch_of_copy", "tp_first_call_ms", "torch_first_call_ms",
            "max_rel_err"]
    print_markdown_table(rows, cols)
    r = rows[-1]
    print(f"# x+1 per call, back-to-back without a sync (us): tp compiled "
          f"{fmt_cell(r.get('tp_compiled_async_us'))}, tp eager {fmt_cell(r.get('tp_eager_async_us'))}, "
          f"torch.compile {fmt_cell(r.get('torch_compile_async_us'))}, torch eager "
          f"{fmt_cell(r.get('torch_eager_async_us'))}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
