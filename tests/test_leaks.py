"""Leak checks: a compiled function called many times on each dispatch level
keeps resident memory and the number of live Python objects flat after
warm-up; compiling and dropping functions releases their versions.

TENSORPLAY_LEAK_N (default 20 000) calls per level; the issue's full check is
TENSORPLAY_LEAK_N=100000.  Growth is measured over the second half of the
run only (the first half absorbs allocator and cache warm-up), so a leak of
even a few dozen bytes per call shows."""
import gc
import os
import weakref

import numpy as np
import pytest
from _helpers import skip_unless_landed

tp = pytest.importorskip("tensorplay")
if os.environ.get("TENSORPLAY_ASAN"):
    pytest.skip("resident memory is meaningless under ASan (quarantine)", allow_module_level=True)


skip_unless_landed(tp)

N = int(os.environ.get("TENSORPLAY_LEAK_N", "20000"))
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def _measure(call, n):
    """(rss growth in bytes, live-object growth) per n calls after n warm-up
    calls: the smaller of two consecutive windows, so that one-off allocator
    growth (arena, heap fragmentation from earlier tests) is not a leak,
    while a real leak grows in both."""
    for _ in range(n):
        call()
    out = []
    for _ in range(2):
        gc.collect()
        r0, o0 = rss(), len(gc.get_objects())
        for _ in range(n // 2):
            call()
        gc.collect()
        out.append((rss() - r0, len(gc.get_objects()) - o0))
    return min(g for g, _ in out), min(o for _, o in out)


def _assert_flat(what, growth, objs, n):
    budget = 256 * 1024 + 8 * n  # 16 bytes a call (n/2 calls a window) plus allocator slack
    assert growth <= budget, f"{what}: resident memory grew {growth / 1024:.0f} KiB over {n} calls"
    assert objs <= 20, f"{what}: {objs} more live Python objects after {n} calls"


def _stats(cf):
    st = cf.stats() if hasattr(cf, "stats") else {}
    return st


def test_level1_same_objects():
    cf = tp.compile(lambda x, y: (x * 2 + y).relu())
    x, y = tp.randn(16), tp.randn(16)
    ref = cf(x, y).numpy().copy()
    growth, objs = _measure(lambda: cf(x, y), N // 2)
    st = _stats(cf)
    assert np.allclose(cf(x, y).numpy(), ref)
    if "hits_level1" in st:
        assert st["hits_level1"] >= N // 2, st
    _assert_flat("level 1", growth, objs, N // 2)


def test_level2_same_objects_with_kwargs():
    cf = tp.compile(lambda x, y=None: x * 2 + y)
    x, y = tp.randn(16), tp.randn(16)
    growth, objs = _measure(lambda: cf(x, y=y), N // 2)
    st = _stats(cf)
    if "hits_level2" in st:
        assert st["hits_level2"] >= N // 2, st
    _assert_flat("level 2", growth, objs, N // 2)


def test_level3_new_tensors():
    cf = tp.compile(lambda x, y: (x - y).sum(-1))
    xs = [tp.randn(4, 8) for _ in range(4)]
    i = [0]

    def call():
        i[0] += 1
        return cf(xs[i[0] % 4] + 0, xs[(i[0] + 1) % 4])   # a fresh tensor object each call
    growth, objs = _measure(call, N // 2)
    st = _stats(cf)
    assert st.get("compiles", 1) == 1, st
    _assert_flat("level 3", growth, objs, N // 2)


def test_level3_with_data_gate():
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x - 1
    cf = tp.compile(f)
    pos, neg = tp.ones(8), -tp.ones(8)
    i = [0]

    def call():
        i[0] += 1
        return cf((pos if i[0] % 2 else neg) + 0)
    growth, objs = _measure(call, N // 4)
    assert _stats(cf).get("compiles", 2) == 2
    _assert_flat("level 3 + gate", growth, objs, N // 4)


def test_outputs_are_released():
    cf = tp.compile(lambda x: x * 3)
    x = tp.randn(32)
    cf(x)
    out = cf(x)
    try:
        r = weakref.ref(out)
    except TypeError:
        pytest.skip("Tensor has no weakref support")
    del out
    gc.collect()
    assert r() is None, "a compiled output is kept alive by the runtime"


def test_dropped_compiled_functions_release_memory():
    """Compile-and-drop many functions (each compiles one kernel): resident
    memory stays bounded, i.e. versions and their JIT code are freed."""
    def one(k):
        cf = tp.compile(lambda x: (x * (k + 0.5) + 1).tanh())
        cf(tp.randn(8))
        return weakref.ref(cf) if _weakrefable(cf) else None

    for k in range(20):
        one(k)
    gc.collect()
    r0 = rss()
    n = max(50, N // 200)
    refs = [one(k) for k in range(n)]
    gc.collect()
    growth = rss() - r0
    alive = sum(1 for r in refs if r is not None and r() is not None)
    assert alive == 0, f"{alive} of {n} dropped compiled functions still alive"
    assert growth <= 64 * 1024 * n + 1024 * 1024, f"{growth / 1024:.0f} KiB for {n} compile-and-drop cycles"


def test_cache_limit_versions_bounded():
    """Past cache_size_limit the function runs eagerly: memory stays flat while
    new keys keep arriving (versions are not created without bound)."""
    cf = tp.compile(lambda x, k: x * k)
    x = tp.ones(4)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(12):
            cf(x, k)
        gc.collect()
        r0 = rss()
        for k in range(12, 12 + max(200, N // 100)):
            assert float(cf(x, k).numpy()[0]) == k
        gc.collect()
    assert len(cf.versions) <= 8
    assert rss() - r0 <= 2 * 1024 * 1024


def _weakrefable(o):
    try:
        weakref.ref(o)
        return True
    except TypeError:
        return False


def test_threads_share_a_compiled_function():
    """Several threads calling one compiled function (hits, misses, gates) at
    once: every result right, nothing leaked, no crash."""
    import threading

    def f(x, k):
        if x.sum() > 0:
            return (x * k).relu().sum(-1)
        return (x - k).amax(-1)
    cf = tp.compile(f)
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        for i in range(max(50, N // 100)):
            shape = [(4, 8), (8, 4), (16, 16)][i % 3]
            x = tp.from_numpy(rng.standard_normal(shape).astype(np.float32))
            k = float(i % 2 + 1)
            try:
                got, want = cf(x, k).numpy(), f(x, k).numpy()
            except Exception as e:  # noqa: BLE001 - a worker's exception fails the test
                errors.append((seed, i, shape, repr(e)))
                return
            if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
                errors.append((seed, i, shape))
    ts = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:5]
    assert cf.stats()["compiles"] <= 12, cf.stats()
