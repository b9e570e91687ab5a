"""GPU time of NVRTC kernels lowered from tp.compile programs at 4096x4096
float32 (CUDA events around the launch, copies excluded; best of 5).

    python3 tests/gpu/bandwidth.py        # on a GPU machine, after the build
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), "python"))

import tensorplay as tp  # noqa: E402
import tensorplay._C as C  # noqa: E402
from _nvrtc import nvrtc_compile  # noqa: E402


def main():
    n = 4096
    x, w = tp.randn(n, n), tp.randn(n, n)
    F = tp.nn.functional
    for label, fn, nbytes in [
            ("Example 1.1 (relu(x + w) * 2).sum(-1)",
             lambda x, w: (tp.relu(x + w) * 2).sum(-1), (2 * n * n + n) * 4),
            ("pointwise relu(x + w) * 2", lambda x, w: tp.relu(x + w) * 2,
             3 * n * n * 4),
            ("softmax(x, -1)", lambda x, w: F.softmax(x, -1), 2 * n * n * 4)]:
        gpu, progs = nvrtc_compile(fn, x, w, run_on_gpu=True)
        if len(progs[0].kernels) != 1:
            print(f"{label}: {len(progs[0].kernels)} kernels, skipped")
            continue
        best = None
        for _ in range(5):
            gpu(x, w)
            ms = C.nvrtc_last_kernel_ms()
            best = ms if best is None or ms < best else best
        print(f"{label}, {n}x{n} float32: {best:.3f} ms, "
              f"{nbytes / best / 1e6:.0f} GB/s (bytes of Prop. 1.1)")


if __name__ == "__main__":
    main()
