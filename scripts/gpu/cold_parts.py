"""Where a fresh process's first CUDA compile spends its time, piece by
piece (on a GPU machine, after scripts/gpu/build.sh):
    STAX_NVRTC_TIMING=1 python3 scripts/gpu/cold_parts.py [CASE] [N]
CASE ex11 | softmax | layer_norm (default ex11) at N x N (default 16384).
Run it first on a fresh machine, or after dropping the page cache, to see
what a first process pays for loading the driver and NVRTC."""
import sys
import time

t0 = time.perf_counter()
import tensorplay as tp  # noqa: E402
from tensorplay import _C  # noqa: E402

F = tp.nn.functional
CASES = {"ex11": (2, lambda x, w: (tp.relu(x + w) * 2).sum(-1)),
         "softmax": (1, lambda x: F.softmax(x, -1)),
         "layer_norm": (1, lambda x: F.layer_norm(x, (x.shape[-1],)))}


def step(name, fn):
    t = time.perf_counter()
    r = fn()
    print(f"{name:44s} {(time.perf_counter() - t) * 1e3:8.1f} ms", flush=True)
    return r


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "ex11"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 16384
    nin, fn = CASES[name]
    print(f"{'import tensorplay':44s} {(time.perf_counter() - t0) * 1e3:8.1f} ms")
    step("cuda init (driver, context)", _C.cuda_init)
    step("tp.ones(4) on cuda", lambda: (tp.ones(4, device="cuda"), tp.cuda.synchronize()))
    xs = step(f"{nin} randn {n}^2 on cuda",
              lambda: [tp.randn(n, n, device="cuda") for _ in range(nin)])
    step("synchronize", tp.cuda.synchronize)
    arch = _C.cuda_arch()
    src = 'extern "C" __global__ void k(float *x) { x[threadIdx.x] += 1.0f; }'
    step("nvrtc_compile trivial", lambda: _C.nvrtc_compile(src, "a.cu", arch))
    src2 = 'extern "C" __global__ void k(float *x) { x[threadIdx.x] = expf(x[threadIdx.x]); }'
    step("nvrtc_compile trivial with expf", lambda: _C.nvrtc_compile(src2, "b.cu", arch))
    tp.compiler.config.cache = False
    f = tp.compile(fn, strict_native=True)
    step(f"{name} first call", lambda: (f(*xs), tp.cuda.synchronize()))
    step(f"{name} second call", lambda: (f(*xs), tp.cuda.synchronize()))


if __name__ == "__main__":
    main()
