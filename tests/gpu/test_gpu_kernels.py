"""The NVRTC back end's kernels run on a GPU, against the CPU (LLVM) back end.

    sh scripts/gpu_build.sh && python3 -m pytest tests/gpu    # on a GPU machine

Each program is lowered exactly as tp.compile lowers it (tests/_nvrtc.py);
the CPU runs the kernels LLVM compiles, the GPU the CUDA C the NVRTC back
end renders from the same loop IR (buffers copied in and out per launch).
Skipped without an NVIDIA GPU, its driver (libcuda) and libnvrtc.
"""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay._C as C
from _nvrtc import (OP_DTYPES, nvrtc_compile, pointwise_batch_case,
                    pointwise_rows, program_cases)

pytestmark = pytest.mark.skipif(
    not (C.nvrtc_available() and C.cuda_available()),
    reason="needs an NVIDIA GPU, its driver (libcuda) and libnvrtc")

# GPU against CPU, per dtype of the result: CUDA's float math functions are
# within a few ulp of the host libm's, reductions add in another order
RTOL = {"float16": 2e-3, "float32": 2e-5, "float64": 1e-12}


def _flat(v):
    if isinstance(v, (tuple, list)):
        return [t for x in v for t in _flat(x)]
    return [v]


def _compare(got, want, tol, what):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g.numpy()), np.asarray(w.numpy())
        assert g.shape == w.shape and g.dtype == w.dtype, (what, i)
        if tol in (0, "bits") or g.dtype.kind in "biu":
            assert np.array_equal(g, w, equal_nan=g.dtype.kind == "f"), (
                what, i, np.argwhere(g != w)[:5])
            continue
        rt = max(tol, RTOL[g.dtype.name]) if tol else RTOL[g.dtype.name]
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                   rtol=rt, atol=rt, equal_nan=True,
                                   err_msg=f"{what}: output {i}")


def _cpu(fn):
    cfg = tp.compiler.config
    old = cfg.accumulated_cache_size_limit
    cfg.accumulated_cache_size_limit = 1 << 30
    try:
        return tp.compile(fn, strict_native=True)
    finally:
        cfg.accumulated_cache_size_limit = old


@pytest.mark.parametrize("case", program_cases(), ids=lambda c: c[0])
def test_program_on_gpu_matches_cpu(case):
    label, fn, args, tol = case
    cpu = _cpu(fn)
    gpu, progs = nvrtc_compile(fn, *args, run_on_gpu=True)
    cpu(*args)
    assert progs and all(p.backend == "nvrtc" for p in progs)
    if tol == "bits" or "randn" in label:
        # random ops: the same Philox words on both, from the same seed
        tp.manual_seed(7)
        want = fn(*args)
        tp.manual_seed(7)
        _compare(gpu(*args), want, tol, label + " (GPU vs eager)")
        tp.manual_seed(7)
        got = gpu(*args)
        tp.manual_seed(7)
        _compare(got, cpu(*args), tol, label)
        return
    _compare(gpu(*args), cpu(*args), tol, label)


@pytest.mark.parametrize("dt", OP_DTYPES)
@pytest.mark.parametrize("first", range(0, len(pointwise_rows()), 12))
def test_every_pointwise_op_on_gpu_matches_cpu(dt, first):
    rows = pointwise_rows()[first:first + 12]
    fn, args, names = pointwise_batch_case(rows, dt)
    if not names:
        pytest.skip(f"no op of this slice takes {dt}")
    gpu, progs = nvrtc_compile(fn, *args, run_on_gpu=True)
    got, want = _flat(gpu(*args)), _flat(_cpu(fn)(*args))
    for i, n in enumerate(names):
        _compare(got[2 * i:2 * i + 2], want[2 * i:2 * i + 2], None,
                 f"{n} at {dt}")


def test_dynamic_program_runs_at_other_sizes():
    """dynamic=True: extents and strides are size arguments; the program
    (and its size variants) runs at sizes it was not traced at"""
    def f(x, w):
        return (tp.relu(x + w) * 2).sum(-1)
    _, progs = nvrtc_compile(f, tp.randn(64, 128), tp.randn(64, 128),
                             dynamic=True)
    prog = progs[0]
    for shape in ((33, 70), (100, 257), (64, 128)):
        a, b = tp.randn(*shape), tp.randn(*shape)
        _compare(prog(a, b), f(a, b), 2e-5, f"Example 1.1 at {shape}")


def test_large_reduction_example_1_1():
    x, w = tp.randn(4096, 4096), tp.randn(4096, 4096)

    def f(x, w):
        return (tp.relu(x + w) * 2).sum(-1)
    gpu, progs = nvrtc_compile(f, x, w, run_on_gpu=True)
    assert len(progs[0].kernels) == 1
    _compare(gpu(x, w), _cpu(f)(x, w), 2e-5, "Example 1.1 at 4096x4096")
    assert C.nvrtc_last_kernel_ms() > 0
