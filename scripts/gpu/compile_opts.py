"""What NVRTC options do to a rendered kernel's compile time (on a GPU
machine, after scripts/gpu/build.sh; the driver's JIT cache off so every
compile is cold): python3 scripts/gpu/compile_opts.py 'OPT OPT' ... ('' is
the default options). Renders the bench's kernels (Example 1.1 at rows of
16384 and 128, softmax, layer_norm at rows of 16384) as tp.compile lowers
them, compiles each to CUBIN for the device's arch REPS times (default 5)
per option set and prints the median and best ms. Kernel speed under an
option set: scripts/gpu/variants.py TENSORPLAY_NVRTC_OPTIONS=OPT."""
import os
import sys
import time

os.environ["CUDA_CACHE_DISABLE"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))

import numpy as np  # noqa: E402

import tensorplay as tp  # noqa: E402
import tensorplay._C as C  # noqa: E402
from _nvrtc import nvrtc_kernels  # noqa: E402

F = tp.nn.functional


def sources():
    def x(n):
        return tp.from_numpy(np.ones((64, n), np.float32))
    cases = [("ex11 16384", lambda a, b: (tp.relu(a + b) * 2).sum(-1), (x(16384), x(16384))),
             ("ex11 128", lambda a, b: (tp.relu(a + b) * 2).sum(-1), (x(128), x(128))),
             ("softmax 16384", lambda a: F.softmax(a, -1), (x(16384),)),
             ("layer_norm 16384", lambda a: F.layer_norm(a, (16384,)), (x(16384),))]
    for name, fn, args in cases:
        (k,) = nvrtc_kernels(fn, *args, compile=False)
        yield name, k.name, k.source


def main(argv):
    reps = int(os.environ.get("REPS", "5"))
    arch = "sm_%d%d" % tp.cuda.get_device_capability() if tp.cuda.is_available() else "sm_90"
    C.nvrtc_compile(C._nvrtc_warmup_source(), arch=arch)
    for name, kname, src in sources():
        for spec in argv or [""]:
            opts = spec.split() or None
            ms = []
            for _ in range(reps):
                t0 = time.perf_counter()
                C.nvrtc_compile(src, name=kname + ".cu", arch=arch, options=opts)
                ms.append((time.perf_counter() - t0) * 1e3)
            ms.sort()
            print(f"{name:18s} [{spec or 'default'}] median {ms[len(ms) // 2]:.1f} ms, "
                  f"best {ms[0]:.1f} ms", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
