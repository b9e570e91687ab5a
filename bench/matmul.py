"""The matmul path (issue 16 item 6): `python -m bench.matmul [--torch]`.

The 13 matmuls of the 2-layer GPT at batch 8 x 64, width 128, 4 heads
(c_attn, q @ k^T, att @ v, c_proj, fc, proj per layer, and lm_head over a
256-token vocabulary), float32, timed as the compiled program runs them:
NumPy's matmul (what ST_MATMUL calls today), the same OpenBLAS's
cblas_sgemm called directly through ctypes (no NumPy dispatch; one call per
batch item for the attention products) with 1 and 2 BLAS threads, and
torch.matmul for reference. Totals in ms, medians of 7 x 20 calls."""
import ctypes
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402
from _timing import median_time  # noqa: E402

B, T, C, H, V = 8, 64, 128, 4, 256
SHAPES = []
for _ in range(2):
    SHAPES += [((B * T, C), (C, 3 * C)), ((B * H, T, C // H), (B * H, C // H, T)),
               ((B * H, T, T), (B * H, T, C // H)), ((B * T, C), (C, C)),
               ((B * T, C), (C, 4 * C)), ((B * T, 4 * C), (4 * C, C))]
SHAPES.append(((B * T, C), (C, V)))


def _openblas():
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*.so*"))
    if not libs:
        return None
    lib = ctypes.CDLL(libs[0])
    for sym, nt in (("scipy_cblas_sgemm64_", "scipy_openblas_set_num_threads64_"),
                    ("cblas_sgemm", "openblas_set_num_threads")):
        if hasattr(lib, sym):
            return getattr(lib, sym), getattr(lib, nt, None)
    return None


def main():
    rng = np.random.default_rng(0)
    ops = [(rng.standard_normal(a, dtype=np.float32), rng.standard_normal(b, dtype=np.float32))
           for a, b in SHAPES]
    outs = [np.matmul(a, b) for a, b in ops]

    def numpy_mm():
        for (a, b), o in zip(ops, outs):
            np.matmul(a, b, out=o)
    rows = [("numpy.matmul (today)", median_time(numpy_mm, reps=7, inner=20))]
    ob = _openblas()
    if ob is not None:
        sgemm, set_threads = ob
        L = ctypes.c_int64
        sgemm.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, L, L, L, ctypes.c_float,
                          ctypes.c_void_p, L, ctypes.c_void_p, L, ctypes.c_float, ctypes.c_void_p, L]
        calls = []
        for (a, b), o in zip(ops, outs):
            if a.ndim == 2:
                calls.append((a.shape[0], b.shape[1], a.shape[1], a.ctypes.data, b.ctypes.data,
                              o.ctypes.data))
            else:
                for i in range(a.shape[0]):
                    calls.append((a.shape[1], b.shape[2], a.shape[2], a[i].ctypes.data,
                                  b[i].ctypes.data, o[i].ctypes.data))

        def direct():
            for m, n, k, pa, pb, po in calls:
                sgemm(101, 111, 111, m, n, k, 1.0, pa, k, pb, n, 0.0, po, n)
        for nt in (1, 2):
            if set_threads is not None:
                set_threads(nt)
            rows.append((f"cblas_sgemm direct, {nt} thread(s)", median_time(direct, reps=7, inner=20)))
            if set_threads is not None:
                rows.append((f"numpy.matmul, {nt} BLAS thread(s)", median_time(numpy_mm, reps=7, inner=20)))
        if set_threads is not None:
            set_threads(os.cpu_count() or 1)
    if "--torch" in sys.argv:
        import torch
        tops = [(torch.from_numpy(a), torch.from_numpy(b)) for a, b in ops]
        touts = [torch.matmul(a, b) for a, b in tops]

        def tmm():
            for (a, b), o in zip(tops, touts):
                torch.matmul(a, b, out=o)
        rows.append((f"torch.matmul ({torch.get_num_threads()} threads)", median_time(tmm, reps=7, inner=20)))
    flops = sum(2 * np.prod(a.shape) * b.shape[-1] for a, b in ops)
    print(f"13 GPT matmuls (batch {B}x{T}, width {C}, {H} heads), {flops / 1e6:.0f} MFLOP")
    for name, t in rows:
        print(f"{name:40s} {t * 1e3:8.3f} ms  {flops / t / 1e9:7.1f} GFLOP/s")


if __name__ == "__main__":
    main()
