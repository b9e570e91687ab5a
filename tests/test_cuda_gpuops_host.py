"""CUDA paths added for ops that went through the host (issue 14), checked
without a GPU: the routing of float16/bfloat16 matmul to cuBLAS GemmEx, the
cuBLAS status names errors carry, and the hand-written kernels and
compositions run on the host (tests/_cuda_emu.py) against CPU eager.

tests/gpu/test_cuda_gpuops.py runs the same on CUDA tensors on a GPU machine.
"""
import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _C
from tensorplay.cuda import _eager, _kernels as K, _native as N

import _cuda_emu as E
from _cuda_emu import emu  # noqa: F401  (the fixture)
from _cuda_data import SPECIAL, cuda_int_rule, data, index_keys, tricky_doubles
from _cuda_data import same_host as same

needs_gxx = pytest.mark.skipif(not E.needs_gxx, reason="g++ runs the kernels on the host")


# ------------------------------------------------------------ cuBLAS GemmEx

def test_cublas_status_names():
    assert _C._cublas_status_name(0) == "CUBLAS_STATUS_SUCCESS"
    assert _C._cublas_status_name(7) == "CUBLAS_STATUS_INVALID_VALUE"
    assert _C._cublas_status_name(13) == "CUBLAS_STATUS_EXECUTION_FAILED"
    assert _C._cublas_status_name(15) == "CUBLAS_STATUS_NOT_SUPPORTED"
    assert _C._cublas_status_name(12345) == "CUBLAS_STATUS_UNKNOWN"


@pytest.mark.parametrize("dtype", [tp.float16, tp.bfloat16, tp.float32, tp.int32])
@pytest.mark.parametrize("have_cublas", [True, False])
def test_half_matmul_goes_to_cublas_when_it_loads(monkeypatch, dtype, have_cublas):
    """float16/bfloat16: GemmEx (_C._cuda_mm) when libcublas loads, else the
    kernel; float32 always cuBLAS; integers always the kernel"""
    calls = []

    class FakeC:
        @staticmethod
        def cublas_available():
            calls.append("probe")
            return have_cublas

        @staticmethod
        def _cuda_mm(a, b):
            calls.append(("cublas", K.dtype_name(a.dtype)))
            return "C"

    monkeypatch.setattr(_eager, "_C", FakeC)
    monkeypatch.setattr(_eager, "_cublas_ok", [])
    monkeypatch.setattr(N, "bmm_kernel", lambda a, b: calls.append("kernel") or b)
    a = tp.ones(1, 2, 3, dtype=dtype)
    _eager._mm2(a, a.transpose(1, 2))
    _eager._mm2(a, a.transpose(1, 2))
    name = K.dtype_name(dtype)
    if name == "int32" or (name in ("float16", "bfloat16") and not have_cublas):
        assert "kernel" in calls and not any(isinstance(c, tuple) for c in calls)
    else:
        assert ("cublas", name) in calls and "kernel" not in calls
    assert calls.count("probe") <= 1          # probed once, then remembered


def test_cuda_mm_leaves_host_tensors_and_other_dtypes_alone():
    a = tp.ones(2, 3, dtype=tp.float16)
    assert _C._cuda_mm(a, a.t()) is NotImplemented
    assert _C._cuda_mm(a.int(), a.int().t()) is NotImplemented


# ------------------------------------------------------------- conversions

@needs_gxx
@pytest.mark.parametrize("src", [tp.float32, tp.float64, tp.float16, tp.bfloat16])
@pytest.mark.parametrize("dst", [tp.int8, tp.uint8, tp.int16, tp.int32, tp.int64])
def test_float_to_integer_follows_torchs_cuda_rule(emu, src, dst):
    x = tp.tensor(SPECIAL, dtype=tp.float64).to(src)
    got = N.device_op("to", x, dst)
    assert got.dtype == dst
    want = [cuda_int_rule(v, K.dtype_name(dst), K.dtype_name(src)) for v in x.double().tolist()]
    assert got.tolist() == want
    # where the value fits, the host's truncation
    fits = tp.tensor([-9.99, -1.5, -0.25, 0.0, 0.75, 3.5, 99.9, 100.0], dtype=src)
    same(N.device_op("to", fits, dst), fits.to(dst))


@needs_gxx
@pytest.mark.parametrize("dst", [tp.float16, tp.bfloat16])
def test_float64_and_int_to_half_round_as_the_host(emu, dst):
    """float64 -> float16 rounds once from the double (no double rounding
    through float32); -> bfloat16 and int -> either as the host"""
    x = tp.tensor(tricky_doubles(), dtype=tp.float64)
    got = N.device_op("to", x, dst)
    assert got.view(tp.int16).tolist() == x.to(dst).view(tp.int16).tolist()    # bits
    ints = [(1 << 40) + (1 << 32) + 1, (1 << 24) + 3, 65519, 65520, -65536, 2 ** 62 + 1, -7, 0,
            (1 << 31) - 1, -(1 << 31)]
    for it in (tp.int64, tp.int32):
        v = tp.tensor([i for i in ints if it == tp.int64 or -2 ** 31 <= i < 2 ** 31], dtype=it)
        same(N.device_op("to", v, dst), v.to(dst))


# ------------------------------------------------------ advanced indexing

@needs_gxx
@pytest.mark.parametrize("dtype", [tp.float32, tp.int64, tp.float16, tp.bool])
def test_general_advanced_getitem_equals_eager(emu, dtype):
    x = data((5, 4, 3), dtype, seed=41)
    for key in index_keys():
        for v in (x, x.transpose(0, 2).contiguous().transpose(0, 2)):
            got = N.device_op("getitem", v, key)
            assert got is not NotImplemented, key
            same(got, x[key])
    # eager's errors come from the host
    for key in ((tp.tensor([0]), tp.tensor([4])), (tp.tensor([0, 1]), tp.tensor([0, 1, 2])),
                tp.tensor([0.0]), (tp.tensor([0]), Ellipsis, Ellipsis), (0, 0, 0, tp.tensor([0])),
                (slice(None), data((3, 3), tp.bool))):
        assert N.device_op("getitem", x, key) is NotImplemented, key
        with pytest.raises(IndexError):
            x[key]


@needs_gxx
@pytest.mark.parametrize("dtype", [tp.float32, tp.int32, tp.float16, tp.bool])
def test_general_advanced_setitem_equals_eager(emu, dtype):
    x = data((5, 4, 3), dtype, seed=42)
    one = True if dtype == tp.bool else 7
    def val(shape, seed):
        return tp.zeros(shape, dtype=dtype) if 0 in shape else data(shape, dtype, seed=seed)

    for key in index_keys():
        shape = tuple(x[key].shape)
        for value in (one, val(shape, 43), val(shape[-1:], 44), tp.tensor(one, dtype=dtype)):
            for layout in ("c", "t"):
                a = x.clone() if layout == "c" else x.transpose(0, 2).contiguous().transpose(0, 2)
                b = x.clone()
                assert N.device_op("setitem", a, key, value) is None, key
                if isinstance(key, tuple) and isinstance(key[0], int):
                    # ints select first, as eager's getitem and torch (the host's
                    # setitem places such a key NumPy's way)
                    b[key[0]][key[1:]] = value
                else:
                    b[key] = value
                same(a, b)
    a, b = x.clone(), x.clone()                     # another dtype: converted
    v = data((2, 3), tp.float64 if dtype != tp.bool else tp.bool, seed=45, special=False)
    N.device_op("setitem", a, (tp.tensor([1, 3]), 2), v)
    b[tp.tensor([1, 3]), 2] = v
    same(a, b)
    # a view's elements only; the rest of its storage untouched
    base, want = x.clone(), x.clone()
    N.device_op("setitem", base[1:, ::2], (tp.tensor([0, 3]), tp.tensor([1, 0])), one)
    want[1:, ::2][tp.tensor([0, 3]), tp.tensor([1, 0])] = one
    same(base, want)
    assert N.device_op("setitem", x.clone(), tp.tensor([5]), one) is NotImplemented
    assert N.device_op("setitem", x.clone(), tp.tensor([1, 2]),
                       data((3, 4, 3), dtype)) is NotImplemented


# ------------------------------------------------- index_add, small dtypes

@needs_gxx
@pytest.mark.parametrize("dtype", [tp.float16, tp.bfloat16, tp.int8, tp.uint8, tp.int16,
                                   tp.bool])
def test_index_add_of_small_dtypes_equals_eager(emu, dtype):
    """one rounding (or wrap) per addition in index order, as eager"""
    x = data((6, 5, 3), dtype, seed=50, special=False, lo=-100, hi=100)
    for dim, idx in [(0, [0, 5, 5, 2, 5, 0]), (1, [3, 0, 3, 4]), (2, [2, 2, 2, 1, 0]),
                     (-1, [1]), (0, [])]:
        i = tp.tensor(idx, dtype=tp.int64)
        shape = list(x.shape)
        shape[dim] = len(idx)
        src = data(tuple(shape), dtype, seed=51 + dim, special=False, lo=-100, hi=100) \
            if idx else tp.zeros(tuple(shape), dtype=dtype)
        alphas = [True, False] if dtype == tp.bool else \
            [1, 3] if dtype == tp.uint8 else \
            [1, 3, -2] if not dtype.is_floating_point else [1, 1.7, -0.3]
        for alpha in alphas:
            same(N.index_add(x, dim, i, src, alpha=alpha), x.index_add(dim, i, src, alpha=alpha))
            same(N.index_add(x, dim, i.int(), src, alpha=alpha),
                 x.index_add(dim, i.int(), src, alpha=alpha))
    # odd sizes: elements in every byte position of their 32-bit words
    for n in (1, 3, 7):
        y = data((n,), dtype, seed=52, special=False)
        i = tp.tensor([n - 1, 0, n - 1, n // 2])
        s = data((4,), dtype, seed=53, special=False)
        same(N.index_add(y, 0, i, s), y.index_add(0, i, s))
        same(N.index_add(y[1:], 0, (i % max(n - 1, 1)) if n > 1 else i[:0],
                         s if n > 1 else s[:0]),
             y[1:].index_add(0, (i % max(n - 1, 1)) if n > 1 else i[:0], s if n > 1 else s[:0]))
    if not dtype.is_floating_point:          # a float alpha: the host judges it
        assert N.run("index_add", (x, 0, tp.tensor([0]), x[:1]), {"alpha": 2.5}) is NotImplemented


# ------------------------------------------- copies into overlapping views

@needs_gxx
@pytest.mark.parametrize("dtype", [tp.float32, tp.int64, tp.float16, tp.bool])
def test_copy_into_overlapping_view_last_write_wins_as_eager(emu, dtype):
    base = data((40,), dtype, seed=54)
    for size, stride, off in [((3, 3), (1, 1), 0), ((4, 5), (2, 3), 1), ((2, 3, 4), (1, 2, 2), 3),
                              ((6,), (1,), 2), ((2, 2, 3), (3, 1, 2), 0), ((3, 4), (1, 3), 2)]:
        for src in (data(size, dtype, seed=55), data(size, tp.float64, seed=56, special=False),
                    data(size[-1:], dtype, seed=57)):
            a, h = base.clone(), base.clone()
            assert N.device_op("copy", a.as_strided(size, stride, off), src) is None
            h.as_strided(size, stride, off).copy_(src)
            same(a, h)
        # the source overlapping the destination: read before written
        a, h = base.clone(), base.clone()
        N.device_op("copy", a.as_strided(size, stride, off), a.as_strided(size, stride, 0))
        h.as_strided(size, stride, off).copy_(h.as_strided(size, stride, 0).clone())
        same(a, h)
    # an expanded destination: eager's error (from the host)
    assert N.device_op("copy", base.clone()[:3].expand(2, 3), base[:6].reshape(2, 3)) \
        is NotImplemented
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        base.clone()[:3].expand(2, 3).copy_(base[:6].reshape(2, 3))


# ---------------------- unique(dim), repeat_interleave, as_strided_scatter

def _same_unique(x, dim, **kw):
    got, want = N.unique(x, dim=dim, **kw), tp.unique(x, dim=dim, **kw)
    if isinstance(want, tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
    else:
        same(got, want)


@needs_gxx
@pytest.mark.parametrize("dtype", [tp.float32, tp.float64, tp.float16, tp.bfloat16, tp.int64,
                                   tp.uint8, tp.bool])
def test_unique_along_a_dim_equals_eager(emu, dtype):
    x = data((6, 4, 3), dtype, seed=60, lo=0, hi=2, special=False)
    x = tp.cat([x, x[:2], x[1:3].flip(0)], 0)            # repeated rows
    if dtype.is_floating_point:
        x[3, 2, 1] = float("inf")
        x[4, 1, 1] = -0.0                               # meets 0.0
        # slices holding NaN: torch orders them by its std::sort, whose
        # comparator skips NaN elements (eager emulates it); the kernel
        # runs the same algorithm; rows with NaN never merge
        xn = x.clone()
        xn[1, 0, 0] = float("nan")
        xn[6, 0, 0] = float("nan")
        for dim in (0, 1, 2, -1):
            _same_unique(xn, dim, return_inverse=True, return_counts=True)
        _same_unique(xn[:, 0, 0], 0, return_inverse=True, return_counts=True)   # 1-D
    for dim in (0, 1, 2, -1):
        for kw in ({}, dict(return_inverse=True), dict(return_counts=True),
                   dict(return_inverse=True, return_counts=True, sorted=False)):
            _same_unique(x, dim, **kw)
    same(N.unique(x[:, 0, 0], dim=0), tp.unique(x[:, 0, 0], dim=0))
    for e in (tp.empty(0, 3, dtype=dtype), tp.ones((), dtype=dtype)):
        assert N.run("unique", (e,), {"dim": 0}) is NotImplemented


@needs_gxx
@pytest.mark.parametrize("dtype", [tp.float32, tp.float16, tp.bfloat16, tp.int32])
@pytest.mark.parametrize("shape", [(9, 1100), (3, 2, 700), (40, 1025)])
def test_unique_dim_of_long_rows_equals_eager(emu, dtype, shape):
    """rows of more than 1024 elements: one bitonic network comparing
    whole rows (ties by index: the stable order), NaN or not"""
    rng = np.random.default_rng(62)
    a = rng.integers(0, 2, size=shape).astype(np.float64)
    a[2] = a[0]
    a[-1] = a[1]
    a[..., :-3] = 1.0                  # rows alike until their last elements
    x = tp.tensor(a.tolist()).to(dtype)
    launched = len(E.launched)
    _same_unique(x, 0, return_inverse=True, return_counts=True)
    assert any(name.startswith("rowsort_step") for name, _ in E.launched[launched:])
    if dtype.is_floating_point:
        x[1].view(-1)[5] = float("nan")
        _same_unique(x, 0, return_inverse=True, return_counts=True)


@needs_gxx
@pytest.mark.parametrize("dtype", [tp.float32, tp.float64, tp.float16, tp.bfloat16])
@pytest.mark.parametrize("n,c", [(17, 1), (40, 3), (300, 2), (2000, 1)])
def test_unique_dim_with_nan_is_eagers_std_sort(emu, dtype, n, c):
    """input holding NaN: the one-thread std::sort kernel leaves eager's
    order (libstdc++'s introsort, quicksort and insertion sort) for rows of
    few values, NaN scattered in them"""
    rng = np.random.default_rng(n + c)
    a = rng.integers(0, 4, size=(n, c)).astype(np.float64)
    a[rng.random((n, c)) < 0.2] = np.nan
    a[0, 0] = np.nan
    x = tp.tensor(a.tolist()).to(dtype)
    _same_unique(x, 0, return_inverse=True, return_counts=True)
    if c > 1:
        _same_unique(x, 1, return_inverse=True, return_counts=True)


def _introsort_killer(n):
    """n values on which libstdc++'s median-of-three quicksort degenerates
    (McIlroy's adversary run against eager's emulation of std::sort), so
    introsort falls back to heapsort"""
    from tensorplay import _ops
    gas = n
    val = [gas] * n
    state = {"solid": 0, "cand": 0}

    def cmp(x, y):
        if val[x] == gas and val[y] == gas:
            z = x if x == state["cand"] else y
            val[z] = state["solid"]
            state["solid"] += 1
        if val[x] == gas:
            state["cand"] = x
        elif val[y] == gas:
            state["cand"] = y
        return val[x] - val[y]

    class V:
        def __init__(self, i):
            self.i = i

        def __lt__(self, o):
            return cmp(self.i, o.i) < 0

        def __gt__(self, o):
            return cmp(self.i, o.i) > 0

    class Rows:
        def tolist(self):
            return [[V(i)] for i in range(n)]

    _ops._std_sort_order(Rows())
    return val


@needs_gxx
def test_unique_dim_with_nan_takes_eagers_heapsort_too(emu):
    """the adversary's input drives introsort past its depth limit: the
    kernel's heapsort (libstdc++'s __adjust_heap) gives eager's order"""
    v = _introsort_killer(300)
    a = np.stack([np.asarray(v, np.float64), np.full(300, np.nan)], 1)
    x = tp.tensor(a.tolist())
    _same_unique(x, 0, return_inverse=True, return_counts=True)
    _same_unique(x.double(), 0, return_inverse=True, return_counts=True)


@needs_gxx
@pytest.mark.parametrize("dtype", [tp.float32, tp.int64, tp.bool])
def test_repeat_interleave_with_tensor_repeats_equals_eager(emu, dtype):
    x = data((4, 3), dtype, seed=61)
    r4 = tp.tensor([2, 0, 3, 1])
    r3 = tp.tensor([1, 4, 0], dtype=tp.int32)
    same(N.repeat_interleave(x, r4, 0), x.repeat_interleave(r4, dim=0))
    same(N.repeat_interleave(x, r3, dim=1), x.repeat_interleave(r3, dim=1))
    same(N.repeat_interleave(x, r3, dim=-1), x.repeat_interleave(r3, dim=-1))
    same(N.repeat_interleave(x, tp.tensor([2]), 0), x.repeat_interleave(tp.tensor([2]), dim=0))
    same(N.repeat_interleave(x, tp.tensor(3)), x.repeat_interleave(tp.tensor(3)))
    flat = tp.arange(12) % 4
    same(N.repeat_interleave(x, flat), x.repeat_interleave(flat))
    same(N.repeat_interleave(x, r4, 0, output_size=6),
         x.repeat_interleave(r4, dim=0, output_size=6))
    same(N.repeat_interleave(r4), tp.repeat_interleave(r4))
    same(N.repeat_interleave(tp.tensor([0, 0])), tp.repeat_interleave(tp.tensor([0, 0])))
    same(N.repeat_interleave(x[:0], tp.tensor([], dtype=tp.int64), 0),
         x[:0].repeat_interleave(tp.tensor([], dtype=tp.int64), dim=0))
    same(N.repeat_interleave(x.t(), r4, 1), x.t().repeat_interleave(r4, dim=1))
    for args, kw in [((x, tp.tensor([1, -1, 0, 0]), 0), {}), ((x, r3, 0), {}),
                     ((x, r4, 0), {"output_size": 5}), ((x, 2, 0), {}),
                     ((x, tp.tensor([1.0, 2.0, 0.0, 1.0]), 0), {})]:
        assert N.run("repeat_interleave", args, kw) is NotImplemented, (args, kw)


@needs_gxx
@pytest.mark.parametrize("dtype", [tp.float32, tp.int32, tp.float16])
def test_as_strided_scatter_equals_eager(emu, dtype):
    x = data((4, 5), dtype, seed=62)
    for size, stride, off, src in [((2, 2), (1, 1), None, data((2, 2), dtype, seed=63)),
                                   ((2, 3), (5, 1), 6, data((2, 3), dtype, seed=64)),
                                   ((3,), (4,), 1, data((3,), tp.float64, seed=65, special=False)),
                                   ((2, 3), (1, 2), 2, data((3,), dtype, seed=66)),
                                   ((0, 3), (1, 1), None, tp.zeros(0, 3, dtype=dtype))]:
        for inp in (x, x.t()):
            same(N.as_strided_scatter(inp, src, size, stride, off),
                 tp.as_strided_scatter(inp, src, size, stride, off))
    assert N.run("as_strided_scatter", (x, x, (5, 5), (5, 1)), {}) is NotImplemented


@pytest.mark.parametrize("eq,shapes", [
    ("ij,ij->ij", [(3, 1), (3, 4)]), ("ij,jk->ik", [(3, 1), (4, 5)]),
    ("bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]), ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    ("i,i->", [(1,), (4,)]), ("ij,j->i", [(3, 4), (1,)]),
])
@pytest.mark.parametrize("dtype", [tp.float64, tp.int64])
def test_einsum_with_broadcast_size_one_dims_equals_eager(eq, shapes, dtype):
    ops = [data(s, dtype, seed=i, special=False) for i, s in enumerate(shapes)]
    want = tp.einsum(eq, *ops)
    got = N.run("einsum", (eq, *ops), {})
    assert got is not NotImplemented
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    assert got.dtype == want.dtype and got.shape == want.shape
