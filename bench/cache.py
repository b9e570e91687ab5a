"""The persistent compile cache, measured: `python3 bench/cache.py [reps]`
(also the `cache` section of `python3 -m bench`).

For each case, new processes side by side in one run: the first call of the
compiled function with an empty cache directory (cold: trace + lower + LLVM
compile) and with the directory a previous process filled (warm: trace +
lower + load the object code), and a third cold process with
TENSORPLAY_LAZY_SAMPLES=0 (every node's sample computed while tracing, as
before deferred samples: the part of the first call that grows with the
data). Reports medians over `reps` process pairs,
the back-end compiles of each process (warm must be 0), the warm first call
as a fraction of the cold one, and the back end's own share (lowering plus
LLVM compile, or lowering plus cache load: the issue's goal is a hit costing
<= 10 % of the cold compile). A second table splits each first call into
the trace and the driver's bookkeeping ("rest"), the back end, and the
program's first run (its kernels, and the page faults of fresh output
buffers: 64 MiB of a 4096^2 float32 result is 16384 first touches), with
the CPU time of the first call (all threads) beside the wall clock. The
load average at the start is printed: 2 cores shared by several processes
stretch every figure. Import time is not part of the first call. Cases:
Example 1.1 at 64x128 and 4096^2, the 8-op pointwise chain at 4096^2, and a 2-layer GPT (d=128, 4 heads, batch
8x64; its matmuls run through NumPy's BLAS, so set OPENBLAS_NUM_THREADS=1 on
a shared machine, where BLAS threads spinning against other processes make
its times meaningless).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_CHILD = r"""
import json, math, sys, time
import tensorplay as tp
import tensorplay.nn as nn
import tensorplay.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.h = h

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        hs = C // self.h
        q, k, v = (t.reshape(B, T, self.h, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(tp.ones(T, T).tril() == 0, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    # 2 layers, d=128, 4 heads, vocab 256, context 64
    def __init__(self, vocab=256, d=128, h=4, n=2, T=64):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(T, d)
        self.blocks = nn.ModuleList([Block(d, h) for _ in range(n)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(tp.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def f(x, w):
    return (tp.relu(x + w) * 2).sum(-1)


# the back end's share of the first call (lowering + compile or cache load)
_sb, _bt = tp._C.stax_backend, [0.0]


def _timed_backend(*a, **k):
    t = time.perf_counter()
    try:
        return _sb(*a, **k)
    finally:
        _bt[0] += time.perf_counter() - t


tp._C.stax_backend = _timed_backend

# the first run of the compiled program (the kernels and the page faults of
# fresh output buffers)
from tensorplay.compiler import _driver
_dr, _rt = _driver.Driver._run, [0.0]


def _timed_run(*a, **k):
    t = time.perf_counter()
    try:
        return _dr(*a, **k)
    finally:
        _rt[0] += time.perf_counter() - t


_driver.Driver._run = _timed_run
tp.manual_seed(0)
def chain(x, w):
    # the 8 pointwise ops of `python -m bench`'s chain8 case
    y = x * w + 1.0
    y = tp.tanh(y) * 0.5 + x
    y = tp.sigmoid(y) - w
    return y * y + x


if sys.argv[1] == "gpt":
    fn, args, strict = GPT(), (tp.randint(0, 256, (8, 64)),), False
elif sys.argv[1] == "chain":
    n = int(sys.argv[2])
    fn, args, strict = chain, (tp.randn(n, n), tp.randn(n, n)), True
else:
    n, m = int(sys.argv[1]), int(sys.argv[2])
    fn, args, strict = f, (tp.randn(n, m), tp.randn(n, m)), True
with tp.no_grad():
    cf = tp.compile(fn, strict_native=strict)
    t0, c0 = time.perf_counter(), time.process_time()
    cf(*args)
    t1, c1 = time.perf_counter(), time.process_time()
s = cf.stats()
print(json.dumps({"first_ms": (t1 - t0) * 1e3, "cpu_ms": (c1 - c0) * 1e3, "backend_ms": _bt[0] * 1e3, "run_ms": _rt[0] * 1e3,
                  "compiles": s["backend_compiles"],
                  "hits": s["cache_hits"]}))
"""

CASES = [("ex1.1 64x128", "64", "128"), ("ex1.1 4096^2", "4096", "4096"),
         ("chain8 4096^2", "chain", "4096"), ("2-layer GPT 8x64", "gpt", "0")]


def _child(n, m, cache_dir, lazy=True):
    env = dict(os.environ, TENSORPLAY_CACHE_DIR=cache_dir, TENSORPLAY_CACHE="1",
               TENSORPLAY_LAZY_SAMPLES="1" if lazy else "0")
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TENSORPLAY_LOGS", None)
    out = subprocess.run([sys.executable, "-c", _CHILD, n, m], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run(reps=7, cases=CASES):
    rows = []
    for name, n, m in cases:
        cold, warm, eager = [], [], []
        for _ in range(reps):
            d = tempfile.mkdtemp(prefix="tp-bench-cache-")
            try:
                cold.append(_child(n, m, d))      # empty directory: compiles
                warm.append(_child(n, m, d))      # the same directory, a new process
            finally:
                shutil.rmtree(d, True)
            d = tempfile.mkdtemp(prefix="tp-bench-cache-")
            try:
                # the cold first call with every sample computed while tracing
                eager.append(_child(n, m, d, lazy=False))
            finally:
                shutil.rmtree(d, True)
        c = statistics.median(r["first_ms"] for r in cold)
        w = statistics.median(r["first_ms"] for r in warm)
        cb = statistics.median(r["backend_ms"] for r in cold)
        wb = statistics.median(r["backend_ms"] for r in warm)
        rows.append({
            "case": name, "reps": reps,
            # cold first call = the rest (trace, guards, passes) + back end
            # (lowering + LLVM) + the program's first run
            "cold_run_ms": statistics.median(r["run_ms"] for r in cold),
            "warm_run_ms": statistics.median(r["run_ms"] for r in warm),
            "cold_rest_ms": statistics.median(r["first_ms"] - r["backend_ms"] - r["run_ms"]
                                              for r in cold),
            "warm_rest_ms": statistics.median(r["first_ms"] - r["backend_ms"] - r["run_ms"]
                                              for r in warm),
            "cold_eager_samples_ms": statistics.median(r["first_ms"] for r in eager),
            "cold_first_call_ms": c, "warm_first_call_ms": w, "warm_over_cold": w / c,
            # CPU time of the first call (every thread of the process): on a
            # shared machine the wall clock also counts the other processes
            "cold_cpu_ms": statistics.median(r["cpu_ms"] for r in cold),
            "warm_cpu_ms": statistics.median(r["cpu_ms"] for r in warm),
            "cold_backend_ms": cb, "warm_backend_ms": wb, "hit_over_compile": wb / cb,
            "cold_backend_compiles": max(r["compiles"] for r in cold),
            "warm_backend_compiles": max(r["compiles"] for r in warm),
            "warm_cache_hits": min(r["hits"] for r in warm),
        })
    return rows


def table(rows):
    lines = ["| case | cold first call, samples computed while tracing | cold first call | "
             "warm-cache first call (new process) | warm / cold | "
             "back end cold / warm (hit / compile) | back-end compiles cold / warm |",
             "|---|---|---|---|---|---|---|"]
    parts = ["", "where a first call goes (medians; 'rest' = trace, guards, passes; "
             "'back end' = lowering + LLVM compile or cache load; 'run' = the program's "
             "first run: kernels and page faults of fresh outputs):", "",
             "| case | cold: rest / back end / run | warm: rest / back end / run | "
             "first call CPU time cold / warm |",
             "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['cold_eager_samples_ms']:.1f} ms "
                     f"| {r['cold_first_call_ms']:.1f} ms | {r['warm_first_call_ms']:.2f} ms "
                     f"| {100 * r['warm_over_cold']:.1f} % | {r['cold_backend_ms']:.1f} / "
                     f"{r['warm_backend_ms']:.2f} ms ({100 * r['hit_over_compile']:.1f} %) | "
                     f"{r['cold_backend_compiles']} / {r['warm_backend_compiles']} |")
        parts.append(f"| {r['case']} | {r['cold_rest_ms']:.1f} / {r['cold_backend_ms']:.1f} / "
                     f"{r['cold_run_ms']:.1f} ms | {r['warm_rest_ms']:.2f} / "
                     f"{r['warm_backend_ms']:.2f} / {r['warm_run_ms']:.2f} ms | "
                     f"{r['cold_cpu_ms']:.1f} / {r['warm_cpu_ms']:.2f} ms |")
    return "\n".join(lines + parts)


def main(argv):
    reps = int(argv[1]) if len(argv) > 1 else 7
    rows = run(reps)
    env = "".join(f"{k}={os.environ[k]} " for k in ("OPENBLAS_NUM_THREADS", "TENSORPLAY_NUM_THREADS")
                  if k in os.environ)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(f"persistent compile cache: medians of {reps} new-process pairs "
          f"(command: {env}python3 bench/cache.py {reps}; {os.cpu_count()} cores, "
          f"load average at the start {load})")
    print(table(rows))
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "cache.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    return rows


if __name__ == "__main__":
    main(sys.argv)
