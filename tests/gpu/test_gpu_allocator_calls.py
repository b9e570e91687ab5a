"""The caching allocator over 10^5 calls: eager ops, compiled calls and the
hand-written kernels of tensorplay.cuda._native (sort's scratch buffers),
with results of several size classes dropped each call. After a warm-up
memory_allocated() is back to its level after every call, no block is
asked of the driver again (cuMemAlloc count flat), and the peak stays
within the few live tensors of one call."""
import gc
import time

import pytest

import tensorplay as tp

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

CALLS = 100_000


def _stats():
    tp.cuda.synchronize()
    return tp._C.cuda_memory_stats()


def _steady(step, calls, warm=200):
    """run step(i) calls times after warm-up ones; (allocated before,
    after, driver allocations during, peak during, seconds)"""
    for i in range(warm):
        step(i)
    gc.collect()
    s0 = _stats()
    tp.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for i in range(calls):
        step(i)
    dt = time.perf_counter() - t0
    gc.collect()
    s1 = _stats()
    return s0["allocated"], s1["allocated"], s1["driver_allocs"] - s0["driver_allocs"], \
        s1["peak"], dt


def test_eager_and_compiled_calls_reuse_blocks_for_10_5_calls():
    xs = [tp.ones(n, device="cuda") for n in (1, 1000, 300_000)]
    cf = tp.compile(lambda a, b: (a * b + 1).sum())

    def step(i):
        x = xs[i % 3]
        y = x + 1                      # eager: a result per call, dropped
        z = cf(x, y)                   # compiled: a 0-d result per call
        del y, z

    a0, a1, drv, peak, dt = _steady(step, CALLS)
    print(f"\n{CALLS} steps (eager + compiled) in {dt:.2f} s")
    assert a1 == a0, f"memory_allocated grew by {a1 - a0} bytes over {CALLS} steps"
    assert drv == 0, f"{drv} driver allocations on the hot path"
    assert peak - a0 <= 4 * 300_000 * 4 + (4 << 20), peak - a0


def test_native_kernel_scratch_is_returned():
    x = tp.arange(4096, device="cuda").float().flip(0)

    def step(i):
        v, ix = tp.sort(x[: 1024 + (i % 3) * 1000])
        del v, ix

    a0, a1, drv, _, _ = _steady(step, 2000, warm=20)
    assert a1 == a0 and drv == 0


def test_empty_cache_returns_blocks_and_the_allocator_stays_usable():
    ys = [tp.ones(1 << 18, device="cuda") for _ in range(8)]
    del ys
    r0 = tp.cuda.memory_reserved()
    tp.cuda.empty_cache()
    assert tp.cuda.memory_reserved() < r0
    z = tp.ones(1 << 18, device="cuda") * 3
    assert z.sum().item() == 3 * (1 << 18)
