"""Where the time of a first call and of an eager call goes on a GPU
(python3 scripts/gpu/profile_calls.py, after scripts/gpu/build.sh).

Prints, for Example 1.1 at 16384x16384 on CUDA tensors: the first call's
wall time, the NVRTC compile time of its fused kernel's source (to CUBIN
and to PTX), and a cProfile of the first call (cumulative, top 25); then a
cProfile of 20000 eager `x + 1` calls on one element (tottime, top 20).
"""
import cProfile
import os
import pstats
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import numpy as np  # noqa: E402

import tensorplay as tp  # noqa: E402
from tensorplay import _C  # noqa: E402


def ex11(x, w):
    return (tp.relu(x + w) * 2).sum(-1)


def main():
    tp.compiler.config.cache = False
    rng = np.random.default_rng(0)
    n = int(os.environ.get("PROFILE_N", "16384"))
    x = tp.from_numpy(rng.standard_normal((n, n), dtype=np.float32)).cuda()
    w = tp.from_numpy(rng.standard_normal((n, n), dtype=np.float32)).cuda()
    tp.cuda.synchronize()
    cf = tp.compile(ex11, strict_native=True)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    out = cf(x, w)
    tp.cuda.synchronize()
    prof.disable()
    print(f"# first call Ex1.1 {n}x{n}: {(time.perf_counter() - t0) * 1e3:.1f} ms")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    for i in range(2):
        cf2 = tp.compile(lambda a, b: (tp.relu(a + b) * 2).sum(-1), strict_native=True)
        t0 = time.perf_counter()
        cf2(x, w)
        tp.cuda.synchronize()
        print(f"# first call again (new function, warm process) #{i}: "
              f"{(time.perf_counter() - t0) * 1e3:.1f} ms")
    xs = tp.from_numpy(rng.standard_normal((64, 256), dtype=np.float32))
    sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
    from _nvrtc import nvrtc_kernels
    k = nvrtc_kernels(ex11, xs, xs)[0]
    src, name = k.source, k.name
    for arch in ("sm_90", "compute_90", "sm_90", "compute_90"):
        t0 = time.perf_counter()
        _C.nvrtc_compile(src, name, arch)
        print(f"# NVRTC {arch} of the fused kernel ({len(src)} chars): "
              f"{(time.perf_counter() - t0) * 1e3:.1f} ms")
    del out
    one = tp.ones(1, device="cuda")
    for _ in range(100):
        one + 1
    tp.cuda.synchronize()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(20000):
        one + 1
    tp.cuda.synchronize()
    prof.disable()
    print(f"# eager x+1 under cProfile: {(time.perf_counter() - t0) / 20000 * 1e6:.2f} us/call")
    t0 = time.perf_counter()
    for _ in range(20000):
        one + 1
    tp.cuda.synchronize()
    print(f"# eager x+1 plain: {(time.perf_counter() - t0) / 20000 * 1e6:.2f} us/call")
    pstats.Stats(prof).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
