"""The scatter family compiled on CUDA (issue 14): scatter / scatter_add /
scatter_reduce (sum, prod, mean, amax, amin; include_self True and False) /
index_add (alpha) / index_copy / index_fill become kernels with atomic
stores (O(n + m): a copy of self, an identity fill for include_self=False,
one thread per visited element), not the O(n * m) hit-mask decomposition;
compared with CPU eager for every mode and dtype on 2-d and 3-d tensors
along every dim, with duplicated indices, unique indices, an empty index,
an index out of range (eager's error), strict_native=True (no fallback).
Tolerances and the "which duplicate wins" rule: tests/_scatter_cases.py.
The CPU-side twin: tests/test_nvrtc_scatter.py.

    python3 -m pytest tests/gpu/test_gpu_compiled_scatter.py     # on a GPU machine
    python3 tests/gpu/test_gpu_compiled_scatter.py                # the 10^6-index timing
"""
import os
import sys
import time

import numpy as np
import pytest

if __name__ == "__main__":        # run as a script: the repository's python/ and tests/
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.join(_here, "..", "..", "python"), os.path.join(_here, "..")]

import tensorplay as tp  # noqa: E402

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

import _scatter_cases as SC  # noqa: E402
from _cuda_data import on_device  # noqa: E402
from _helpers import kernel_names  # noqa: E402


def _run(mode, dt, shape, dim, **kw):
    fn, x, i, s, visited = SC.case(mode, dt, shape, dim, **kw)
    cf = tp.compile(fn, strict_native=True)
    got = cf(x.cuda(), i.cuda(), s.cuda())
    assert got.is_cuda
    want = fn(x, i, s)
    SC.check(mode, got, want, x, i, s, visited)
    assert not cf.stats().get("fallbacks"), cf.stats()
    return cf


@pytest.mark.parametrize("shape,dim", SC.SHAPES, ids=str)
@pytest.mark.parametrize("dt", SC.DTYPES)
@pytest.mark.parametrize("mode", sorted(SC.MODES))
def test_compiled_scatter_on_cuda_equals_cpu_eager(mode, dt, shape, dim):
    cf = _run(mode, dt, shape, dim)
    names = kernel_names(cf)
    assert any("scatter_self" in n for n in names), names       # the new step, not the hit mask


@pytest.mark.parametrize("dt", SC.DTYPES)
@pytest.mark.parametrize("mode", ["scatter", "index_copy", "scatter_reduce_mean_False",
                                  "scatter_reduce_prod_True"])
def test_unique_indices_are_exact(mode, dt):
    fn, x, i, s, _ = SC.case(mode, dt, (6, 9), 1, unique=True)
    cf = tp.compile(fn, strict_native=True)
    got = cf(x.cuda(), i.cuda(), s.cuda()).cpu()
    want = fn(x, i, s)
    assert np.array_equal(got.numpy(), want.numpy(), equal_nan=True)


@pytest.mark.parametrize("mode", ["scatter_add", "scatter_reduce_amax_False", "index_add",
                                  "index_fill"])
def test_empty_index(mode):
    fn, x, i, s, visited = SC.case(mode, "float32", (6, 9), 1, m=0)
    cf = tp.compile(fn, strict_native=True)
    got = cf(x.cuda(), i.cuda(), s.cuda())
    assert got.is_cuda
    assert np.array_equal(got.cpu().numpy(), x.numpy(), equal_nan=True)


@pytest.mark.parametrize("mode", ["scatter_add", "scatter", "scatter_reduce_amin_True",
                                  "index_add", "index_copy"])
def test_index_out_of_range_raises_eagers_error(mode):
    fn, x, i, s, _ = SC.case(mode, "float32", (6, 9), 1)
    cf = tp.compile(fn, strict_native=True)
    cf(x.cuda(), i.cuda(), s.cuda())                  # compiled for these sizes
    bad = i.clone()
    bad.view(-1)[1] = 9                                  # dim 1 has 9 positions
    with pytest.raises((RuntimeError, IndexError)) as host:
        fn(x, bad, s)
    with pytest.raises(type(host.value)) as dev:
        cf(x.cuda(), bad.cuda(), s.cuda())
    assert str(dev.value) == str(host.value)
    # and in range again: the program still serves
    got = cf(x.cuda(), i.cuda(), s.cuda())
    SC.check(mode, got, fn(x, i, s), x, i, s, SC.case(mode, "float32", (6, 9), 1)[4])


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_float_sums_within_order_bound(dt):
    """random normal values (inexact sums): the atomics' order differs from
    the CPU's; within 2 (k + 1) eps (|self| + sum |terms|) per position"""
    rng = np.random.default_rng(7)
    npdt = np.float32 if dt == "float32" else np.float64
    x = tp.from_numpy(rng.standard_normal(1000).astype(npdt))
    i = tp.from_numpy(rng.integers(0, 1000, 100000).astype(np.int64))
    s = tp.from_numpy(rng.standard_normal(100000).astype(npdt))
    for name, fn in (("sum", lambda x, i, s: x.scatter_add(0, i, s)),
                     ("mean", lambda x, i, s: x.scatter_reduce(0, i, s, "mean"))):
        cf = tp.compile(fn, strict_native=True)
        got = cf(x.cuda(), i.cuda(), s.cuda()).cpu().numpy().astype(np.float64)
        want = fn(x, i, s).numpy().astype(np.float64)
        k = np.bincount(i.numpy(), minlength=1000).astype(np.float64)
        mag = np.abs(x.numpy()).astype(np.float64)
        np.add.at(mag, i.numpy(), np.abs(s.numpy()).astype(np.float64))
        eps = np.finfo(npdt).eps
        cnt = k + 1 if name == "mean" else 1
        bound = 2 * (k + 1) * eps * mag / cnt + eps * np.abs(want)
        assert np.all(np.abs(got - want) <= bound), name


def test_integer_sums_and_products_exact_at_scale():
    rng = np.random.default_rng(8)
    x = tp.from_numpy(rng.integers(-5, 6, 1000).astype(np.int64))
    i = tp.from_numpy(rng.integers(0, 1000, 100000).astype(np.int64))
    s = tp.from_numpy(rng.integers(-3, 4, 100000).astype(np.int64))
    for fn in (lambda x, i, s: x.scatter_add(0, i, s),
               lambda x, i, s: x.scatter_reduce(0, i, s, "prod"),
               lambda x, i, s: x.scatter_reduce(0, i, s, "mean", include_self=False),
               lambda x, i, s: x.int().scatter_reduce(0, i, s.int(), "amax")):
        cf = tp.compile(fn, strict_native=True)
        assert np.array_equal(cf(x.cuda(), i.cuda(), s.cuda()).cpu().numpy(),
                              fn(x, i, s).numpy())


@pytest.mark.parametrize("name,fn", [
    ("scatter", lambda x, i, s: x.scatter(1, i, s)),
    ("scatter_add", lambda x, i, s: x.scatter_add(1, i, s)),
    ("scatter_reduce", lambda x, i, s: x.scatter_reduce(1, i, s, "amax", include_self=False)),
    ("index_copy", lambda x, i, s: x.index_copy(1, i[0, :2], x[:, 2:4] + 100)),
    ("index_fill", lambda x, i, s: x.index_fill(1, i[0], -1)),
])
def test_eager_cuda_scatter_ops_run_as_kernels(name, fn):
    """eager ops build their kernel through the same lowering: no host run
    (an index without duplicates: one answer)"""
    x = tp.arange(24, dtype=tp.int32).reshape(4, 6)
    i = tp.tensor([[0, 5, 2], [1, 4, 3], [4, 0, 2]])
    s = tp.arange(100, 109, dtype=tp.int32).reshape(3, 3)
    with on_device(name):
        got = fn(x.cuda(), i.cuda(), s.cuda())
    assert got.is_cuda
    assert got.cpu().tolist() == fn(x, i, s).tolist()


def _timing(reps=20):
    """compiled CUDA scatter_add of float32 values: the atomic kernels at
    10^5 and 10^6 indices, the hit-mask decomposition (the path before) at
    10^5 indices into 10^4 positions (O(n * m)), and torch's scatter_add
    when torch is installed"""
    from tensorplay import _native_decomps as D
    rng = np.random.default_rng(0)

    def inputs(n_out, n_index):
        x = tp.from_numpy(rng.standard_normal(n_out).astype(np.float32)).cuda()
        i = tp.from_numpy(rng.integers(0, n_out, n_index).astype(np.int64)).cuda()
        s = tp.from_numpy(rng.standard_normal(n_index).astype(np.float32)).cuda()
        return x, i, s

    def bench(fn, r=reps):
        fn()
        tp.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(r):
            fn()
        tp.cuda.synchronize()
        return (time.perf_counter() - t0) / r * 1e3

    try:
        import torch
    except Exception:  # noqa: BLE001
        torch = None
    for n_out, n_index in ((10 ** 4, 10 ** 5), (10 ** 5, 10 ** 6)):
        x, i, s = inputs(n_out, n_index)
        cf = tp.compile(lambda x, i, s: x.scatter_add(0, i, s), strict_native=True)
        ms = bench(lambda: cf(x, i, s))
        print(f"{n_index:>8} indices -> {n_out:>7}: compiled, atomics   {ms:9.3f} ms/call "
              f"kernels {kernel_names(cf)}")
        if n_index <= 10 ** 5:
            old = D._seq_ok
            D._seq_ok = lambda *a: False          # the hit-mask decomposition
            try:
                cf2 = tp.compile(lambda x, i, s: x.scatter_add(0, i, s), strict_native=True)
                ms = bench(lambda: cf2(x, i, s), 3)
            finally:
                D._seq_ok = old
            print(f"{n_index:>8} indices -> {n_out:>7}: compiled, hit mask  {ms:9.3f} ms/call "
                  f"kernels {len(kernel_names(cf2))}")
        if torch is not None:
            try:
                tx, ti, ts = (torch.from_dlpack(t) for t in (x, i, s))
                ms = bench(lambda: tx.scatter_add(0, ti, ts))
                print(f"{n_index:>8} indices -> {n_out:>7}: torch eager         {ms:9.3f} ms/call")
            except Exception as e:  # noqa: BLE001
                print("torch:", type(e).__name__, e)


if __name__ == "__main__":
    _timing()
