"""The differential fuzzer (tests/fuzz) with device="cuda": each random
program runs eagerly on CPU tensors and compiled (tp.compile) on CUDA
tensors of the same values and layouts (storages built on the device, then
the same views); outputs, input mutations, version counters and compile
counts must agree as in the CPU fuzz. Modules are built again for the
compiled side (the same manual_seed) with their parameters moved to CUDA.

    TENSORPLAY_GPU_FUZZ_N=500 python3 -m pytest tests/gpu/test_gpu_fuzz.py   # more programs
"""
import os
import time

import pytest

import tensorplay as tp

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

N = int(os.environ.get("TENSORPLAY_GPU_FUZZ_N", "30"))
BUDGET_S = float(os.environ.get("TENSORPLAY_GPU_FUZZ_BUDGET_S", "60"))


def _cuda_api():
    from fuzz.harness import API

    class CudaAPI(API):
        c_device = "cuda"

        def prepare_compiled(self, prog, ns):
            if not prog.modules:
                return
            exec(prog.setup_source(), ns)          # fresh modules, the same seed
            for name, _ in prog.modules:
                ns[name]._apply(lambda t: t.cuda())

    return CudaAPI("tensorplay")


def test_fuzz_cpu_eager_vs_compiled_cuda():
    from fuzz.__main__ import run_one
    from fuzz.harness import FuzzFailure
    api = _cuda_api()
    before = dict(tp.cuda.host_fallbacks())
    t0 = time.perf_counter()
    results, failures = {}, []
    ran = 0
    for seed in range(N):
        if ran >= 5 and time.perf_counter() - t0 > BUDGET_S:
            break
        try:
            _, res = run_one(api, seed)
            results[res] = results.get(res, 0) + 1
        except FuzzFailure as e:
            failures.append(f"seed {seed}: {str(e)[:3000]}")
        ran += 1
    after = tp.cuda.host_fallbacks()
    grew = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    print(f"\n{ran} programs in {time.perf_counter() - t0:.1f} s: {results}; "
          f"host fallbacks during the run: {grew}")
    assert not failures, f"{len(failures)} of {ran} programs differ:\n\n" + "\n\n".join(failures[:3])
    assert results.get("ok", 0) >= 1


def test_a_program_making_a_cpu_tensor_raises_as_cuda_eager():
    """seed 1 makes `tp.full((5, 3), 2.0)` inside the function (on the CPU)
    and subtracts it from a CUDA input: eager CUDA raises torch's device
    error, so the compiled CUDA call must raise the same, not be compared
    with the CPU eager call that succeeds"""
    from fuzz.__main__ import run_one
    from fuzz.program import RandomDrawer, generate
    src = generate(RandomDrawer(1)).fn_source()
    assert "tp.full(" in src or "tp.ones(" in src or "tp.zeros(" in src, src
    _, res = run_one(_cuda_api(), 1)
    assert res == "device-raises", res
