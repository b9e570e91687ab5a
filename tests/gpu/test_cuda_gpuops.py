"""On CUDA tensors, the paths added for ops that used to go through the host
(issue 14): float16/bfloat16 matmul through cuBLAS GemmEx, and the kernels and
compositions of tensorplay.cuda._native checked without a GPU by
tests/test_cuda_gpuops_host.py. Each equals CPU eager and counts no host
fallback.

    sh scripts/gpu/build.sh .gpu python3 -m pytest tests/gpu   # on a GPU machine
"""
import numpy as np
import pytest

import tensorplay as tp
from tensorplay.cuda import _native

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

from _cuda_data import SPECIAL, cuda_int_rule, data, index_keys, tricky_doubles  # noqa: E402
from _cuda_data import on_device, same_on_cuda as same  # noqa: E402


def _conversions():
    """dtype conversions served on the device: `to`'s own kernel, or the
    tensor room's copy that `to` takes since it keeps layouts (_copy_as)"""
    from tensorplay.cuda import _native as nat
    return nat.on_device.get("to", 0) + nat.on_device.get("copy", 0)


# ------------------------------------------------------------ cuBLAS GemmEx

@pytest.mark.parametrize("dtype", [tp.float16, tp.bfloat16])
def test_half_matmul_runs_on_cublas_with_float32_accumulation(dtype, monkeypatch):
    assert tp._C.cublas_available()

    def no_kernel(a, b):
        raise AssertionError("half matmul took the naive kernel, not GemmEx")

    monkeypatch.setattr(_native, "bmm_kernel", no_kernel)
    rng = np.random.default_rng(0)
    # a long k: float16 accumulation would drift far beyond one rounding
    a64 = rng.standard_normal((64, 4096))
    b64 = rng.standard_normal((4096, 48))
    a = tp.tensor(a64.tolist()).to(dtype)
    b = tp.tensor(b64.tolist()).to(dtype)
    with on_device("matmul", "mm", "bmm", "linear"):
        got = (a.cuda() @ b.cuda())
        assert got.dtype == dtype and got.is_cuda
        exact = a.double().numpy() @ b.double().numpy()
        err = np.abs(got.cpu().double().numpy() - exact).max()
        scale = np.abs(exact).max()
        # one rounding of the float32 sum to the result's dtype, plus float32 noise
        assert err <= scale * (2 ** -10 if dtype == tp.float16 else 2 ** -7), err
        tol = 2e-2 if dtype == tp.bfloat16 else 2e-3
        same(got, a @ b, tol * 4)
        # (4, 16, 4096) @ (4, 4096, 12), the second a strided view
        b3 = b.reshape(4096, 4, 12).permute(1, 0, 2)
        same(tp.bmm(a.reshape(4, 16, 4096).cuda(), b3.cuda()),
             tp.bmm(a.reshape(4, 16, 4096), b3), tol * 4)
        w = data((7, 4096), dtype, seed=3, special=False)
        bias = data((7,), dtype, seed=4, special=False)
        same(tp.nn.functional.linear(a.cuda(), w.cuda(), bias.cuda()),
             tp.nn.functional.linear(a, w, bias), 0.1)
        same(a[:5, :8].cuda().t() @ a[:5, :9].cuda(), a[:5, :8].t() @ a[:5, :9], tol)
        z = tp.zeros(3, 0, dtype=dtype)
        same(z.cuda() @ z.t().cuda(), z @ z.t())


# ------------------------------------------------------------- conversions

@pytest.mark.parametrize("src", [tp.float32, tp.float64, tp.float16, tp.bfloat16])
@pytest.mark.parametrize("dst", [tp.int8, tp.uint8, tp.int16, tp.int32, tp.int64])
def test_float_to_integer_on_cuda_is_torchs(src, dst):
    """a kernel; in range: the host's truncation; NaN and out of range: the
    rule of tests/test_cuda_gpuops_host.py, and torch's CUDA result where
    torch with CUDA is installed"""
    x = tp.tensor(SPECIAL, dtype=tp.float64).to(src)
    served = _conversions()
    got = x.cuda().to(dst)
    assert _conversions() >= served + 1 and got.is_cuda
    want = [cuda_int_rule(v, str(dst).split(".")[-1], str(src).split(".")[-1])
            for v in x.double().tolist()]
    assert got.cpu().tolist() == want
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        tname = str(src).split(".")[-1]
        tx = torch.tensor(x.double().tolist(), dtype=torch.float64).to(getattr(torch, tname))
        tgot = tx.cuda().to(getattr(torch, str(dst).split(".")[-1])).cpu().tolist()
        assert got.cpu().tolist() == tgot, (SPECIAL, got.cpu().tolist(), tgot)
    fits = tp.tensor([-9.99, -1.5, -0.25, 0.0, 0.75, 3.5, 99.9, 100.0], dtype=src)
    same(fits.cuda().to(dst), fits.to(dst))
    same(fits.cuda()[::2].long(), fits[::2].long())


@pytest.mark.parametrize("dst", [tp.float16, tp.bfloat16])
def test_float64_and_int_to_half_on_cuda_round_as_the_host(dst):
    x = tp.tensor(tricky_doubles(), dtype=tp.float64)
    served = _conversions()
    got = x.cuda().to(dst)
    assert got.cpu().view(tp.int16).tolist() == x.to(dst).view(tp.int16).tolist()
    v = tp.tensor([(1 << 40) + (1 << 32) + 1, (1 << 24) + 3, 65519, 65520, -7], dtype=tp.int64)
    same(v.cuda().to(dst), v.to(dst))
    same(v.int().cuda().to(dst), v.int().to(dst))
    assert _conversions() >= served + 3


# ------------------------------------------------------ advanced indexing

@pytest.mark.parametrize("dtype", [tp.float32, tp.int64, tp.float16, tp.bool])
def test_general_advanced_indexing_on_cuda(dtype):
    def dev(key):
        if isinstance(key, tuple):
            return tuple(dev(k) for k in key)
        return key.cuda() if isinstance(key, tp.Tensor) else key

    x = data((5, 4, 3), dtype, seed=41)
    one = True if dtype == tp.bool else 7
    got_before = _native.on_device.get("getitem", 0)
    set_before = _native.on_device.get("setitem", 0)
    for key in index_keys():
        same(x.cuda()[dev(key)], x[key])
        same(x.cuda()[key], x[key])                  # host index tensors, as torch allows
        # the value read through the same key from a tensor of x's shape: a
        # key that repeats an element (tp.tensor([0, 1, 1])) writes it twice
        # with one value, since which write wins on the device is undefined
        # (torch's CUDA index_put_ too; the host's last write wins)
        value = data(tuple(x.shape), dtype, seed=43)[key]
        for v in (one, value):
            c, h = x.cuda(), x.clone()
            c[dev(key)] = v.cuda() if isinstance(v, tp.Tensor) else v
            if isinstance(key, tuple) and isinstance(key[0], int):
                h[key[0]][key[1:]] = v
            else:
                h[key] = v
            same(c, h)
    n = len(index_keys())
    assert _native.on_device.get("getitem", 0) == got_before + 2 * n
    assert _native.on_device.get("setitem", 0) == set_before + 2 * n
    with pytest.raises(IndexError):
        x.cuda()[tp.tensor([0]).cuda(), tp.tensor([4]).cuda()]


# ---------------------------------------- index_add, overlapping copies

@pytest.mark.parametrize("dtype", [tp.float16, tp.bfloat16, tp.int8, tp.uint8, tp.int16,
                                   tp.bool])
def test_index_add_of_small_dtypes_on_cuda(dtype):
    x = data((6, 5, 3), dtype, seed=50, special=False, lo=-100, hi=100)
    tol = {tp.float16: 1e-2, tp.bfloat16: 5e-2}.get(dtype)   # atomics: any order of additions
    with on_device("index_add", "index_add_"):
        for dim, idx in [(0, [0, 5, 5, 2, 5, 0]), (1, [3, 0, 3, 4]), (2, [2, 2, 2, 1, 0])]:
            i = tp.tensor(idx)
            shape = list(x.shape)
            shape[dim] = len(idx)
            src = data(tuple(shape), dtype, seed=51 + dim, special=False, lo=-100, hi=100)
            alpha = True if dtype == tp.bool else 3 if not dtype.is_floating_point else 1.7
            same(x.cuda().index_add(dim, i.cuda(), src.cuda(), alpha=alpha),
                 x.index_add(dim, i, src, alpha=alpha), tol)
            c = x.cuda()
            c.index_add_(dim, i.int().cuda(), src.cuda())
            same(c, x.clone().index_add_(dim, i.int(), src), tol)
        # many additions to few elements: the compare-and-swap loop under contention
        big = tp.zeros(7, dtype=dtype)
        ii = tp.arange(70000) % 7
        ones = tp.ones(70000, dtype=dtype)
        if dtype in (tp.int8, tp.uint8, tp.int16, tp.bool):
            same(big.cuda().index_add(0, ii.cuda(), ones.cuda()), big.index_add(0, ii, ones))


@pytest.mark.parametrize("dtype", [tp.float32, tp.int64, tp.float16, tp.bool])
def test_copy_into_overlapping_view_on_cuda(dtype):
    base = data((40,), dtype, seed=54)
    served = _native.on_device.get("copy", 0)
    k = 0
    for size, stride, off in [((3, 3), (1, 1), 0), ((4, 5), (2, 3), 1), ((2, 3, 4), (1, 2, 2), 3),
                              ((2, 2, 3), (3, 1, 2), 0)]:
        src = data(size, dtype, seed=55)
        c, h = base.cuda(), base.clone()
        c.as_strided(size, stride, off).copy_(src.cuda())
        h.as_strided(size, stride, off).copy_(src)
        same(c, h)
        k += 1
    assert _native.on_device.get("copy", 0) >= served + k
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        base.cuda()[:3].expand(2, 3).copy_(base[:6].reshape(2, 3).cuda())


# ---------------- unique(dim), repeat_interleave, as_strided_scatter, einsum

@pytest.mark.parametrize("dtype", [tp.float32, tp.float16, tp.bfloat16, tp.int64, tp.bool])
def test_unique_dim_repeat_interleave_as_strided_scatter_on_cuda(dtype):
    x = data((6, 4, 3), dtype, seed=60, lo=0, hi=2, special=False)
    x = tp.cat([x, x[:2], x[1:3].flip(0)], 0)
    if dtype.is_floating_point:
        # slices holding NaN: eager's order is torch's std::sort, whose
        # comparator skips NaN elements; one thread runs the same algorithm
        # on the device (cuda/_native.py, _unique_dim); NaN rows never merge
        xn = x.clone()
        xn[1, 0, 0] = float("nan")
        xn[6, 0, 0] = float("nan")
        with on_device("unique"):
            for dim in (0, 1, -1):
                same(tp.unique(xn.cuda(), dim=dim, return_inverse=True, return_counts=True),
                     tp.unique(xn, dim=dim, return_inverse=True, return_counts=True))
            same(tp.unique(xn[:, 0, 0].cuda(), dim=0, return_inverse=True, return_counts=True),
                 tp.unique(xn[:, 0, 0], dim=0, return_inverse=True, return_counts=True))
    with on_device("unique", "repeat_interleave", "as_strided_scatter"):
        for dim in (0, 1, -1):
            same(tp.unique(x.cuda(), dim=dim, return_inverse=True, return_counts=True),
                 tp.unique(x, dim=dim, return_inverse=True, return_counts=True))
        r = tp.tensor([2, 0, 3, 1, 0, 1, 1, 2, 0, 5])
        same(x.cuda().repeat_interleave(r.cuda(), dim=0), x.repeat_interleave(r, dim=0))
        same(tp.repeat_interleave(r.cuda()), tp.repeat_interleave(r))
        src = data((2, 3), dtype, seed=64)
        y = x[0]
        same(tp.as_strided_scatter(y.cuda(), src.cuda(), (2, 3), (1, 2), 1),
             tp.as_strided_scatter(y, src, (2, 3), (1, 2), 1))


@pytest.mark.parametrize("dtype", [tp.float32, tp.float16, tp.bfloat16, tp.int32])
def test_unique_dim_of_long_rows_and_nan_on_cuda(dtype):
    """rows over 1024 elements (one bitonic network comparing whole rows)
    and input holding NaN (eager's std::sort order, one thread), on the
    device, equal to eager"""
    rng = np.random.default_rng(62)
    a = rng.integers(0, 2, size=(40, 1100)).astype(np.float64)
    a[2] = a[0]
    a[-1] = a[1]
    a[:, :-3] = 1.0
    x = tp.tensor(a.tolist()).to(dtype)
    with on_device("unique"):
        same(tp.unique(x.cuda(), dim=0, return_inverse=True, return_counts=True),
             tp.unique(x, dim=0, return_inverse=True, return_counts=True))
        if dtype.is_floating_point:
            b = rng.integers(0, 4, size=(2000, 2)).astype(np.float64)
            b[rng.random((2000, 2)) < 0.2] = np.nan
            y = tp.tensor(b.tolist()).to(dtype)
            for dim in (0, 1):
                same(tp.unique(y.cuda(), dim=dim, return_inverse=True, return_counts=True),
                     tp.unique(y, dim=dim, return_inverse=True, return_counts=True))


@pytest.mark.parametrize("eq,shapes", [
    ("ij,ij->ij", [(3, 1), (3, 4)]), ("bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
])
def test_einsum_broadcasting_size_one_dims_on_cuda(eq, shapes):
    ops = [data(s, tp.float64, seed=i, special=False) for i, s in enumerate(shapes)]
    with on_device("einsum"):
        same(tp.einsum(eq, *[o.cuda() for o in ops]), tp.einsum(eq, *ops), 1e-12)
