"""Attention (issue 16 item 3, seed Key Point 10): `python -m bench.attention`.
F.scaled_dot_product_attention (causal and not) and the hand-written
softmax(q @ kT / sqrt(d)) @ v at batch 1 x 4 heads, d = 64, N = 512..2048,
float32: compiled (the tiled online-softmax kernel), compiled with the
kernel turned off (STAX_NO_FUSED_ATTENTION=1: BLAS matmul, the fused
softmax kernel over the materialized N x N scores, BLAS matmul), eager,
and torch.compile / torch eager when torch is installed; then a training
step (forward + backward of (attention * g).sum() into q, k, v):
compiled (the compiled backward: today the decomposition, the N x N
probabilities saved; the tiled backward is not written yet), eager, and
torch eager (whose SDPA backward is its fused CPU kernel).
Medians in ms, side by side in one run. `--cpu`: CPU time per call
(time.process_time) instead of wall time, which a machine shared with
other jobs inflates unevenly; run it with TENSORPLAY_NUM_THREADS=1 (and
torch at one thread) for a per-core comparison."""
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import tensorplay as tp  # noqa: E402
import tensorplay.nn.functional as F  # noqa: E402
from _timing import cpu_median, median_time  # noqa: E402


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def handwritten(q, k, v):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1) @ v


def train_times(f, qa, ka, va, timer, torch, tf):
    """ms per forward + backward of (f(q, k, v) * g).sum(): compiled,
    eager, torch eager (torch.compile's backward takes minutes to build)."""
    g = tp.tensor(np.random.default_rng(1).standard_normal(
        qa.shape[:-1] + (va.shape[-1],)).astype(np.float32))

    def loss(q, k, v):
        return (f(q, k, v) * g).sum()
    cl = tp.compile(loss, strict_native=True)
    xs = [tp.tensor(a, requires_grad=True) for a in (qa, ka, va)]

    def step(fn):
        for x in xs:
            x.grad = None
        fn(*xs).backward()
    out = [timer(lambda: step(cl)) * 1e3, timer(lambda: step(loss), reps=3) * 1e3]
    if torch is not None:
        tg = torch.tensor(g.numpy())
        txs = [torch.tensor(a, requires_grad=True) for a in (qa, ka, va)]

        def tstep():
            for x in txs:
                x.grad = None
            (tf(*txs) * tg).sum().backward()
        out.append(timer(tstep) * 1e3)
    return out


def main():
    cpu = "--cpu" in sys.argv
    timer = ((lambda fn, reps=5: cpu_median(fn, reps, warm=1)) if cpu
             else (lambda fn, reps=5: median_time(fn, reps=reps)))
    try:
        import torch
    except ImportError:
        torch = None
    sizes = [int(a) for a in sys.argv[1:] if a.isdigit()] or [512, 1024, 2048]
    if cpu and torch is not None:
        torch.set_num_threads(int(os.environ.get("TENSORPLAY_NUM_THREADS", "1")))
    H, d = 4, 64
    print(f"attention, batch 1 x {H} heads, d = {d}, float32, "
          f"{'CPU' if cpu else 'wall'} ms (medians); "
          f"threads = {tp._C.num_threads() if hasattr(tp._C, 'num_threads') else '?'}")
    cols = ["case", "N", "compiled", "decomposed", "eager", "torch.compile", "torch eager",
            "fwd+bwd compiled", "fwd+bwd eager", "fwd+bwd torch eager"]
    print(" | ".join(cols))
    for n in sizes:
        rng = np.random.default_rng(0)
        qa, ka, va = (rng.standard_normal((1, H, n, d)).astype(np.float32) for _ in range(3))
        q, k, v = tp.tensor(qa), tp.tensor(ka), tp.tensor(va)
        for name, f in (("sdpa", sdpa), ("sdpa causal", sdpa_causal),
                        ("hand-written", handwritten)):
            cf = tp.compile(f, strict_native=True)
            cf(q, k, v)
            assert any("attention" in x.name for x in cf.versions[0].artifact.kernels)

            # the decomposition (matmul, fused softmax kernel, matmul) as
            # before this kernel: the same graph compiled with it turned off
            os.environ["STAX_NO_FUSED_ATTENTION"] = "1"
            try:
                cfd = tp.compile(f, strict_native=True)
                cfd(q, k, v)
            finally:
                del os.environ["STAX_NO_FUSED_ATTENTION"]
            assert not any("attention" in x.name for x in cfd.versions[0].artifact.kernels)
            row = [name, n]
            row.append(timer(lambda: cf(q, k, v)) * 1e3)
            row.append(timer(lambda: cfd(q, k, v)) * 1e3)
            row.append(timer(lambda: f(q, k, v), reps=3) * 1e3)
            if torch is not None:
                tq, tk, tv = (torch.tensor(a) for a in (qa, ka, va))
                tf = {"sdpa": lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
                      "sdpa causal": lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
                          q, k, v, is_causal=True),
                      "hand-written": lambda q, k, v: (q @ k.transpose(-2, -1) / math.sqrt(d)).softmax(-1) @ v}[name]
                tcf = torch.compile(tf)
                with torch.no_grad():
                    tcf(tq, tk, tv)
                    row.append(timer(lambda: tcf(tq, tk, tv)) * 1e3)
                    row.append(timer(lambda: tf(tq, tk, tv)) * 1e3)
            row += train_times(f, qa, ka, va, timer, torch,
                               tf if torch is not None else None)
            print(" | ".join(f"{c:.2f}" if isinstance(c, float) else str(c) for c in row))


if __name__ == "__main__":
    main()
