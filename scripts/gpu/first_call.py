"""Where a fresh process's first compiled call goes (on a GPU machine,
after scripts/gpu/build.sh): python3 scripts/gpu/first_call.py CASE [N]
with CASE ex11 | softmax | layer_norm at N x N (default 16384); a third
argument "empty" makes the inputs with tp.empty (no time between CUDA's
start and the compile: the NVRTC warm-up races the first compile). Prints the
first call's wall time and the cProfile entries with the most cumulative
time."""
import cProfile
import pstats
import sys
import time

import tensorplay as tp

F = tp.nn.functional
CASES = {"ex11": (2, lambda x, w: (tp.relu(x + w) * 2).sum(-1)),
         "softmax": (1, lambda x: F.softmax(x, -1)),
         "layer_norm": (1, lambda x: F.layer_norm(x, (x.shape[-1],)))}


def main():
    name = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 16384
    nin, fn = CASES[name]
    tp.compiler.config.cache = False
    make = tp.empty if sys.argv[3:4] == ["empty"] else tp.randn
    xs = [make(n, n, device="cuda") for _ in range(nin)]
    tp.cuda.synchronize()
    f = tp.compile(fn, strict_native=True)
    print("NVRTC warm-up before the call:", tp._C._nvrtc_warmup())
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    f(*xs)
    tp.cuda.synchronize()
    prof.disable()
    print(f"{name} {n}: first call {(time.perf_counter() - t0) * 1e3:.1f} ms")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(14)


if __name__ == "__main__":
    main()
