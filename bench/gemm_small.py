"""A linear with few rows (a decode step): `python -m bench.gemm_small`.

Compiled F.linear(x, W) for x of m rows and the GPT's weight shapes, CPU
time per call (medians), once with the in-place dot-product kernel for
m <= STAX_SGEMM_DOT_ROWS (csrc/lower/gemm.c's sgemm_dot) and once with it
off (W's panels packed, the outer-product tiles): where the dot kernel
stops winning is where STAX_SGEMM_DOT_ROWS' default belongs. Each setting
runs in its own process (the variable is read once)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = [1, 4, 8, 17, 32, 48, 64, 96, 128]
SHAPES = [(128, 384), (128, 512), (512, 128), (128, 256)]     # (k, n): W is n x k


def child():
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    sys.path.insert(0, HERE)
    import numpy as np
    import tensorplay as tp
    import tensorplay.nn.functional as F
    from _timing import cpu_median
    rng = np.random.default_rng(0)
    f = tp.compile(lambda x, w: F.linear(x, w), strict_native=True)
    for m in ROWS:
        tot = 0.0
        for k, n in SHAPES:
            x = tp.tensor(rng.standard_normal((m, k)).astype(np.float32))
            w = tp.tensor(rng.standard_normal((n, k)).astype(np.float32))

            def run(x=x, w=w):
                for _ in range(50):
                    f(x, w)
            tot += cpu_median(run, reps=5) / 50
        print(m, tot * 1e6)


def main():
    if "--child" in sys.argv:
        child()
        return
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", TENSORPLAY_NUM_THREADS="1",
               TENSORPLAY_CACHE="0")
    cols = {}
    for name, rows in (("dot", "1000000"), ("packed", "0")):
        out = subprocess.run([sys.executable, __file__, "--child"], capture_output=True,
                             text=True, check=True,
                             env=dict(env, STAX_SGEMM_DOT_ROWS=rows)).stdout
        cols[name] = dict(line.split() for line in out.strip().splitlines())
    print(f"load average {os.getloadavg()[0]:.1f}; us of CPU per call, the sum over "
          f"W of shapes {SHAPES} (k, n)")
    print(f"{'rows':>5s} {'dot':>9s} {'packed':>9s}")
    for m in ROWS:
        print(f"{m:5d} {float(cols['dot'][str(m)]):9.1f} {float(cols['packed'][str(m)]):9.1f}")


if __name__ == "__main__":
    main()
