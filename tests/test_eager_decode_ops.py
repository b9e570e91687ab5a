"""The eager ops of a generate() loop (topk, multinomial) take C paths for
contiguous CPU inputs; their results, random draws and errors are those of
the NumPy reference below (the Python implementation's algorithm)."""
import numpy as np
import pytest

import tensorplay as tp


def _races_ref(p, ns, seed, generator=None):
    """multinomial without replacement as the Python path computes it: one
    float64 uniform of (rows, n), keys p / -log1p(-u), stable descending."""
    p2 = np.asarray(p, np.float64).reshape(-1, p.shape[-1])
    if generator is None:
        tp.manual_seed(seed)
    else:
        generator.manual_seed(seed)
    u = tp.rand(*p2.shape, dtype=tp.float64, generator=generator).numpy()
    keys = np.where(p2 > 0, p2 / -np.log1p(-u), -1.0)
    r = np.argsort(-keys, axis=1, kind="stable")[:, :ns]
    return r if p.ndim == 2 else r[0]


@pytest.mark.parametrize("shape,ns,dtype", [((1, 256), 1, np.float32), ((3, 50), 5, np.float32),
                                            ((2, 40), 20, np.float64), ((30,), 3, np.float64),
                                            ((4, 17), 15, np.float32), ((1, 1), 1, np.float32)])
def test_multinomial_without_replacement_matches_the_reference(shape, ns, dtype):
    rng = np.random.default_rng(5)
    p = rng.random(shape).astype(dtype)
    p[..., ::7] = 0            # zero categories are never drawn
    p.reshape(-1, shape[-1])[:, 0] = 0.5
    for seed in range(4):
        want = _races_ref(p, ns, seed)
        tp.manual_seed(seed)
        got = tp.multinomial(tp.tensor(p), ns)
        assert got.dtype == tp.int64 and tuple(got.shape) == want.shape
        np.testing.assert_array_equal(got.numpy(), want)


def test_multinomial_draws_the_same_words_as_rand():
    """the generator advances as rand(rows, n, dtype=float64) does"""
    p = tp.tensor(np.full((2, 9), 0.25, np.float32))
    tp.manual_seed(3)
    tp.multinomial(p, 2)
    after = tp.rand(4).numpy()
    tp.manual_seed(3)
    tp.rand(2, 9, dtype=tp.float64)
    np.testing.assert_array_equal(after, tp.rand(4).numpy())


def test_multinomial_with_a_generator_and_views():
    rng = np.random.default_rng(2)
    p = rng.random((6, 12)).astype(np.float32)
    g = tp.Generator()
    want = _races_ref(p, 3, 11, g)
    g.manual_seed(11)
    np.testing.assert_array_equal(tp.multinomial(tp.tensor(p), 3, generator=g).numpy(), want)
    # a non-contiguous view takes the Python path: the same answer
    pt = tp.tensor(np.ascontiguousarray(p.T)).t()
    g.manual_seed(11)
    np.testing.assert_array_equal(tp.multinomial(pt, 3, generator=g).numpy(), want)


@pytest.mark.parametrize("vals,ns,msg", [
    ([0.5, -0.1, 0.2], 1, "probability tensor contains either"),
    ([0.5, float("nan"), 0.2], 1, "probability tensor contains either"),
    ([0.0, 0.0, 0.0], 1, "sum of probabilities <= 0"),
    ([0.5, 0.0, 0.0], 2, "not enough non-negative category"),
    ([0.5, 0.2], 3, "cannot sample n_sample > prob_dist.size"),
])
def test_multinomial_errors_unchanged(vals, ns, msg):
    with pytest.raises(RuntimeError, match=msg):
        tp.multinomial(tp.tensor(vals), ns)


def _topk_ref(a, k, largest):
    """the Python path's order: a stable sort, NaN the largest value"""
    if largest:
        n = a.shape[-1]
        r = np.argsort(np.flip(a, -1), axis=-1, kind="stable")
        idx = np.flip(n - 1 - r, -1)
    else:
        idx = np.argsort(a, axis=-1, kind="stable")
    idx = idx[..., :k]
    return np.take_along_axis(a, idx, -1), idx


@pytest.mark.parametrize("shape", [(1, 256), (3, 7), (12,), (2, 3, 5), (4, 16)])
@pytest.mark.parametrize("k", [0, 1, 3, 5])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_topk_last_dim_matches_the_stable_sort(shape, k, largest, dtype):
    rng = np.random.default_rng(sum(shape) + k)
    a = rng.integers(-3, 4, shape).astype(dtype)        # many ties
    flat = a.reshape(-1)
    flat[::5] = np.nan
    flat[1::7] = -0.0
    flat[2::11] = np.inf
    k = min(k, shape[-1])
    v, i = tp.topk(tp.tensor(a), k, largest=largest)
    wv, wi = _topk_ref(a, k, largest)
    assert v.dtype == tp.tensor(a).dtype and i.dtype == tp.int64
    np.testing.assert_array_equal(i.numpy(), wi)
    np.testing.assert_array_equal(v.numpy(), wv)
    # another dim, a view and a grad-recording call take the Python path: same answers
    v2, i2 = tp.topk(tp.tensor(np.ascontiguousarray(np.swapaxes(a, 0, -1))).transpose(0, -1),
                     k, largest=largest)
    np.testing.assert_array_equal(i2.numpy(), wi)


def test_topk_returns_the_named_tuple_and_keeps_autograd():
    x = tp.tensor([[1.0, 5.0, 3.0, 5.0]], requires_grad=True)
    r = tp.topk(x, 2)
    assert r.values.requires_grad and r._fields == ("values", "indices")
    np.testing.assert_array_equal(r.indices.numpy(), [[1, 3]])
    r.values.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0, 1]])
    with tp.no_grad():
        v, i = tp.topk(x, 2, dim=1)
    assert not v.requires_grad
    np.testing.assert_array_equal(i.numpy(), [[1, 3]])


def test_topk_errors_unchanged():
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        tp.topk(tp.tensor([1.0, 2.0]), 3)
    with pytest.raises(IndexError, match="Dimension out of range"):
        tp.topk(tp.tensor([1.0, 2.0]), 1, dim=2)
