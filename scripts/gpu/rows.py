"""Softmax and layer_norm rows on a GPU at fixed block sizes (after
scripts/gpu/build.sh): python3 scripts/gpu/rows.py [N]

The launch-configuration search is off (TENSORPLAY_NVRTC_TUNE=0, read once
per process) and TENSORPLAY_NVRTC_THREADS, read at every launch, sets the
block size, so one compiled function is timed at 256, 512 and 1024 threads
a row (rows of 16384 float32: 512 and 1024 take the register row path of
nvrtc_render.c, 256 the loops with the shared-memory row cache), with and
without TENSORPLAY_NVRTC_ONEPASS. Prints ms (CUDA events, best of 5 rounds
of 20 calls), the fraction of a device copy's bandwidth and the largest
difference from torch on the same GPU, relative to torch's largest value.
"""
import os
import sys

os.environ["TENSORPLAY_NVRTC_TUNE"] = "0"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tensorplay as tp  # noqa: E402
from gpu import copy_roof, events_ms  # noqa: E402

F = tp.nn.functional
TF = torch.nn.functional
CASES = {"softmax": (lambda x: F.softmax(x, -1), lambda x: torch.softmax(x, -1)),
         "layer_norm": (lambda x: F.layer_norm(x, (x.shape[-1],)),
                        lambda x: TF.layer_norm(x, (x.shape[-1],)))}


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    tp.compiler.config.cache = False
    tp.compiler.config.accumulated_cache_size_limit = 1 << 20
    roof = copy_roof()[0]
    h = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    x, tx = tp.from_numpy(h).cuda(), torch.from_numpy(h).cuda()
    print(f"# rows of {n} float32, copy roof {roof:.0f} GB/s")
    print("| case | onepass | threads | ms | of copy | err vs torch |")
    print("|---|---|---|---|---|---|")
    for name, (fn, tfn) in CASES.items():
        ref = tfn(tx).cpu().numpy().astype(np.float64)
        scale = float(np.abs(ref).max())
        for onepass in (("0", "1") if name == "softmax" else ("0",)):
            os.environ["TENSORPLAY_NVRTC_ONEPASS"] = onepass
            cf = tp.compile(lambda a, fn=fn: fn(a), strict_native=True)
            for threads in ("256", "512", "1024"):
                os.environ["TENSORPLAY_NVRTC_THREADS"] = threads
                out = cf(x)
                tp.cuda.synchronize()
                err = float(np.abs(out.cpu().numpy().astype(np.float64) - ref).max()) / scale
                ms = events_ms(lambda: cf(x), tp.cuda.synchronize, tp.cuda.Event)
                frac = 8 * n * n / (ms * 1e-3) / 1e9 / roof
                print(f"| {name} | {onepass} | {threads} | {ms:.4f} | {frac:.3f} | {err:.1e} |",
                      flush=True)
                del out
    os.environ.pop("TENSORPLAY_NVRTC_THREADS", None)
    os.environ.pop("TENSORPLAY_NVRTC_ONEPASS", None)


if __name__ == "__main__":
    main()
