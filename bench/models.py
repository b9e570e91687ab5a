"""Real-model benchmark (issue 16): `python bench/models.py [--quick]`.

The GPT-2-style decoder of tests/models (2 layers, 4 heads, 128 wide, batch
8 x 64 tokens) and the ResNet-style CNN (batch 16, 3x32x32, width 16),
same weights in both libraries, eval mode, no grad. Columns: tensorplay
eager, tensorplay compiled (strict_native), torch eager, torch.compile;
medians of repeated calls after warm-up, side by side in one run; and the
first call (trace + compile + run) of each compiled version, the persistent
compile cache off for tensorplay. Both libraries get the same thread count
(--threads N, default 1): on this shared 2-core machine torch's OpenMP pool
and NumPy's OpenBLAS pool oversubscribe the cores (a tensorplay ResNet
forward measured 645 ms with both pools at their defaults against 40 ms
with OPENBLAS_NUM_THREADS=1). Writes bench/results/models.json."""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models"))
sys.path.insert(0, HERE)
os.environ.setdefault("TENSORPLAY_CACHE", "0")
THREADS = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 1
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
           "TENSORPLAY_NUM_THREADS"):
    os.environ[_v] = str(THREADS)       # before NumPy and torch load their pools
import numpy as np  # noqa: E402

from _timing import cpu_median, median_time  # noqa: E402
import tensorplay as tp  # noqa: E402
from _models import copy_weights, gpt, resnet  # noqa: E402

try:
    import torch
    torch.set_num_threads(THREADS)
except Exception:  # torch is optional
    torch = None


def first_call(fn, *a):
    t = time.perf_counter()
    fn(*a)
    return time.perf_counter() - t


def case(name, factory, kw, make_input, reps):
    torch.manual_seed(0)
    tm = factory(torch)(**kw).eval()
    m = factory(tp)(**kw).eval()
    copy_weights(m, tm)
    x = make_input()
    px, tx = tp.tensor(x), torch.tensor(x)
    row = {"case": name}
    with tp.no_grad(), torch.no_grad():
        cm = tp.compile(m, strict_native=True)
        c0 = time.process_time()
        row["tp_first_call_s"] = first_call(cm, px)
        row["tp_first_call_cpu_s"] = time.process_time() - c0
        tcm = torch.compile(tm)
        row["torch_compile_first_call_s"] = first_call(tcm, tx)
        np.testing.assert_allclose(cm(px).numpy(), tm(tx).numpy(), rtol=1e-3, atol=1e-4)
        row["tp_eager_ms"] = median_time(lambda: m(px), reps=reps) * 1e3
        row["tp_compiled_ms"] = median_time(lambda: cm(px), reps=reps) * 1e3
        row["torch_eager_ms"] = median_time(lambda: tm(tx), reps=reps) * 1e3
        row["torch_compile_ms"] = median_time(lambda: tcm(tx), reps=reps) * 1e3
        row["tp_compiled_cpu_ms"] = cpu_median(lambda: cm(px), reps) * 1e3
        row["torch_compile_cpu_ms"] = cpu_median(lambda: tcm(tx), reps) * 1e3
        row["fallbacks"] = cm.stats()["fallbacks"]
    row["compiled_vs_torch_compile"] = row["torch_compile_ms"] / row["tp_compiled_ms"]
    row["cpu_ratio"] = row["torch_compile_cpu_ms"] / row["tp_compiled_cpu_ms"]
    return row


def generate_case(reps, new_tokens=20):
    """generate() of new_tokens tokens from a (1, 8) prompt with the module
    compiled in place (m.compile() / tm.compile()): versions and eager calls
    of the compiled forward after a warm-up generate, and the median
    per-token time of later generates (top_k=1: the same tokens in both)."""
    kw = dict(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=128)
    torch.manual_seed(0)
    tm = gpt(torch)(**kw).eval()
    m = gpt(tp)(**kw).eval()
    copy_weights(m, tm)
    idx = np.random.default_rng(1).integers(0, 256, (1, 8))
    pi, ti = tp.tensor(idx), torch.tensor(idx)
    m.compile()       # not strict: past the version limit it runs eagerly (counted)
    tm.compile()
    row = {"case": f"gpt generate {new_tokens} tokens"}
    t = time.perf_counter()
    out = m.generate(pi, new_tokens, top_k=1)
    row["tp_first_generate_s"] = time.perf_counter() - t
    t = time.perf_counter()
    ref = tm.generate(ti, new_tokens, top_k=1)
    row["torch_first_generate_s"] = time.perf_counter() - t
    row["same_tokens"] = bool((out.numpy() == ref.numpy()).all())
    st = m._compiled_call_impl.stats()
    row["tp_versions"], row["tp_eager_calls"] = st["versions"], st["eager_calls"]
    row["tp_ms_per_token"] = median_time(lambda: m.generate(pi, new_tokens, top_k=1),
                                         reps=reps) * 1e3 / new_tokens
    row["torch_compile_ms_per_token"] = median_time(
        lambda: tm.generate(ti, new_tokens, top_k=1), reps=reps) * 1e3 / new_tokens
    # CPU time too: on the shared machine wall time also measures the load
    row["tp_cpu_ms_per_token"] = cpu_median(lambda: m.generate(pi, new_tokens, top_k=1),
                                            reps) * 1e3 / new_tokens
    row["torch_compile_cpu_ms_per_token"] = cpu_median(
        lambda: tm.generate(ti, new_tokens, top_k=1), reps) * 1e3 / new_tokens
    return row


def main():
    if torch is None:
        print("bench/models.py needs torch for the weights and the comparison")
        return
    reps = 5 if "--quick" in sys.argv else 15
    rng = np.random.default_rng(0)
    rows = [
        case("gpt 2x4x128, batch 8x64", gpt,
             dict(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=128),
             lambda: rng.integers(0, 256, (8, 64)), reps),
        case("resnet w16, batch 16x3x32x32", resnet, dict(width=16),
             lambda: rng.standard_normal((16, 3, 32, 32)).astype(np.float32), reps),
    ]
    cols = ["tp_eager_ms", "tp_compiled_ms", "torch_eager_ms", "torch_compile_ms",
            "compiled_vs_torch_compile", "tp_compiled_cpu_ms", "torch_compile_cpu_ms",
            "cpu_ratio", "tp_first_call_s", "torch_compile_first_call_s", "fallbacks"]
    print(f"threads per library: {THREADS}; medians of {reps} calls; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'case':32s} " + " ".join(f"{c:>14s}" for c in cols))
    for r in rows:
        print(f"{r['case']:32s} " + " ".join(
            f"{r[c]:14.3f}" if isinstance(r[c], float) else f"{r[c]:>14}" for c in cols))
    for r in rows:
        print(f"{r['case']}: first call CPU time {r['tp_first_call_cpu_s']:.3f} s")
    g = generate_case(max(3, reps // 3))
    print(f"{g['case']}: tp {g['tp_ms_per_token']:.3f} ms/token, torch.compile "
          f"{g['torch_compile_ms_per_token']:.3f} ms/token (CPU {g['tp_cpu_ms_per_token']:.3f} "
          f"vs {g['torch_compile_cpu_ms_per_token']:.3f}); tp versions {g['tp_versions']}, "
          f"eager calls {g['tp_eager_calls']}, same tokens {g['same_tokens']}; first generate "
          f"tp {g['tp_first_generate_s']:.2f} s, torch {g['torch_first_generate_s']:.2f} s")
    rows.append(g)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "models.json"), "w") as fh:
        json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
