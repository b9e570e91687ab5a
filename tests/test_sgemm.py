"""The compiled matmul step's own float32 GEMM (csrc/lower/gemm.c, AVX-512
CPUs): tiles of 8 x 32 with row and column remainders, K blocked by 256, B
read in place or packed when its rows are strided (linear's weight),
NumPy's batch broadcasting. Compiled results against float64 products."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

RNG = np.random.default_rng(11)


def r(*s):
    return RNG.standard_normal(s).astype(np.float32)


def ref(a, b):
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def close(got, want, k):
    np.testing.assert_allclose(np.asarray(got.numpy(), np.float64), want,
                               rtol=1e-5, atol=1e-5 * max(1.0, np.sqrt(k)))


MNK = [(1, 1, 1), (8, 32, 16), (7, 33, 5), (16, 1024, 27), (13, 17, 300), (3, 47, 513),
       (32, 64, 288), (9, 16, 0), (0, 5, 3), (1, 100, 64), (65, 31, 1), (17, 96, 520),
       (23, 64, 9)]


@pytest.mark.parametrize("m,n,k", MNK, ids=[str(s) for s in MNK])
def test_2d(m, n, k):
    a, b = r(m, k), r(k, n)
    f = tp.compile(lambda x, y: x @ y, strict_native=True)
    close(f(tp.tensor(a), tp.tensor(b)), ref(a, b), k)


@pytest.mark.parametrize("sa,sb", [((16, 144), (5, 144, 64)), ((3, 1, 7, 9), (4, 9, 40)),
                                    ((2, 6, 300), (300, 19)), ((2, 1, 5, 3), (1, 4, 3, 33))])
def test_batch_broadcast(sa, sb):
    a, b = r(*sa), r(*sb)
    f = tp.compile(lambda x, y: x.matmul(y), strict_native=True)
    close(f(tp.tensor(a), tp.tensor(b)), ref(a, b), sa[-1])


@pytest.mark.parametrize("n,k,o", [(37, 300, 45), (64, 128, 384), (5, 3, 1), (17, 128, 384),
                                   (3, 17, 20), (1, 513, 33), (9, 255, 16), (2, 16, 17),
                                   (8, 31, 64), (1, 1, 40), (6, 70, 46), (7, 16, 47),
                                   (65, 33, 18), (100, 300, 45), (64, 129, 35)])
def test_linear_weight_packed(n, k, o):
    x, w, bias = r(n, k), r(o, k), r(o)
    f = tp.compile(lambda x, w, b: F.linear(x, w, b), strict_native=True)
    close(f(tp.tensor(x), tp.tensor(w), tp.tensor(bias)), ref(x, w.T) + bias, k)


def test_strided_views():
    a, b = r(20, 40), r(50, 30)
    f = tp.compile(lambda x, y: x[::2, 1:31].t() @ y[3:13, ::3].t().t()[:, 2:], strict_native=True)
    want = ref(a[::2, 1:31].T, b[3:13, ::3][:, 2:])
    close(f(tp.tensor(a), tp.tensor(b)), want, 10)


def test_nonfinite_propagate_as_blas():
    a, b = r(9, 4), r(4, 33)
    a[2, 1] = np.inf
    b[3, 5] = np.nan
    f = tp.compile(lambda x, y: x @ y, strict_native=True)
    got = f(tp.tensor(a), tp.tensor(b)).numpy()
    with np.errstate(invalid="ignore", over="ignore"):
        want = ref(a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


@pytest.mark.parametrize("shape", [(8, 64, 128), (3, 1, 5, 40), (2, 7, 33)])
def test_batched_rows_against_one_weight(shape):
    """x @ W and linear over batched rows run as one product of all the rows"""
    x = r(*shape)
    w, w2 = r(50, shape[-1]), r(shape[-1], 37)
    f = tp.compile(lambda x, w, w2: (F.linear(x, w), x @ w2), strict_native=True)
    got = f(tp.tensor(x), tp.tensor(w), tp.tensor(w2))
    close(got[0], ref(x, w.T), shape[-1])
    close(got[1], ref(x, w2), shape[-1])
    # a non-contiguous batch (every other row block) cannot merge
    g = tp.compile(lambda x, w2: x[::2] @ w2, strict_native=True)
    close(g(tp.tensor(x), tp.tensor(w2)), ref(x[::2], w2), shape[-1])


# Products of 2^30 flops or more get the kernel threads: one product is split by row
# chunks of 64 over the pool (rows not a multiple of 64, linear's strided weight, and the
# x @ W of a batch merged into one product); a batch of separate products keeps OpenBLAS.
BIG = [((2050, 1024), (1024, 520)), ((4, 513, 1024), (1024, 520)), ((1, 2049, 1030), (1030, 513))]


@pytest.mark.parametrize("sa,sb", BIG, ids=[str(s) for s in BIG])
def test_threaded_single_product(sa, sb):
    a, b = r(*sa), r(*sb)
    assert 2 * np.prod(sa) * sb[-1] >= 2 ** 30
    f = tp.compile(lambda x, y: x @ y, strict_native=True)
    close(f(tp.tensor(a), tp.tensor(b)), ref(a, b), sa[-1])


def test_threaded_linear_weight_and_batches():
    x, w = r(2, 1040, 1024), r(520, 1024)
    f = tp.compile(lambda x, w: F.linear(x, w), strict_native=True)
    close(f(tp.tensor(x), tp.tensor(w)), ref(x, w.T), 1024)
    a, b = r(2, 1030, 1024), r(2, 1024, 520)         # separate products: OpenBLAS
    g = tp.compile(lambda x, y: x @ y, strict_native=True)
    close(g(tp.tensor(a), tp.tensor(b)), ref(a, b), 1024)
