"""sort / argsort / topk under tp.compile (users helper, session 6): native
(they were fallback kernels, an error under strict_native: an MoE router's
top-k left every compiled MoE model), the same values and indices as eager
(stable order, NaN the largest, ties by index), gradients through the
values; rows longer than the quadratic cap stay the eager kernel."""
import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _special_ops

nan = float("nan")
rng = np.random.default_rng(0)
DATA = {
    "float": rng.standard_normal((3, 7)).astype(np.float32),
    "ties_nan": np.array([[1., 3., 3., 2., 3., 0.], [nan, 1., nan, 5., 2., 2.]], np.float32),
    "int": rng.integers(0, 4, (2, 6)),
    "bool": rng.integers(0, 2, (2, 5)).astype(bool),
    "f64": rng.standard_normal((4, 1, 3)),
}


def _same(a, b):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("name", sorted(DATA))
@pytest.mark.parametrize("dim", [-1, 0])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_argsort_native_like_eager(name, dim, descending):
    x = tp.tensor(DATA[name])
    e = tp.sort(x, dim=dim, descending=descending)
    cf = tp.compile(lambda t: tp.sort(t, dim=dim, descending=descending), strict_native=True)
    v, i = cf(x)
    _same(v, e.values)
    _same(i, e.indices)
    ca = tp.compile(lambda t: t.argsort(dim, descending=descending), strict_native=True)
    _same(ca(x), e.indices)
    assert cf.stats()["fallbacks"] == 0 and ca.stats()["fallbacks"] == 0


@pytest.mark.parametrize("name", sorted(DATA))
@pytest.mark.parametrize("dim", [-1, 0])
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_native_like_eager(name, dim, k, largest):
    x = tp.tensor(DATA[name])
    if k > x.shape[dim]:
        k = 1
    e = tp.topk(x, k, dim=dim, largest=largest)
    cf = tp.compile(lambda t: t.topk(k, dim=dim, largest=largest), strict_native=True)
    v, i = cf(x)
    _same(v, e.values)
    _same(i, e.indices)
    assert cf.stats()["fallbacks"] == 0


def test_topk_gradient_and_router():
    """An MoE router: softmax, top-k, renormalised gates; values' gradient
    reaches the chosen logits only."""
    a = rng.standard_normal((5, 4)).astype(np.float32)

    def router(logits):
        w, idx = tp.topk(logits.softmax(-1), 2, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        return (w * w).sum() + idx.float().sum() * 0

    x = tp.tensor(a, requires_grad=True)
    cf = tp.compile(router, strict_native=True)
    cf(x).backward()
    g = x.grad.clone()
    x.grad = None
    router(x).backward()
    np.testing.assert_allclose(g.numpy(), x.grad.numpy(), rtol=1e-5, atol=1e-7)
    torch = pytest.importorskip("torch")
    t = torch.tensor(a, requires_grad=True)
    w, _ = torch.topk(t.softmax(-1), 2, dim=-1)
    w = w / w.sum(-1, keepdim=True)
    (w * w).sum().backward()
    np.testing.assert_allclose(g.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_topk_errors_and_long_rows():
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        tp.compile(lambda t: t.topk(9))(tp.randn(3, 7))
    n = _special_ops.QUADRATIC_DIM_CAP + 1
    x = tp.randn(n)
    cf = tp.compile(lambda t: t.topk(3))
    _same(cf(x)[1], x.topk(3).indices)
    assert cf.stats()["fallbacks"] == 1            # the eager kernel, not an n^2 count
