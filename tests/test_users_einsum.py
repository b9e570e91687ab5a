"""einsum (users helper, session 6): native under tp.compile (it was a
fallback kernel: MoE routers, attention written as einsum, bilinear layers
all left the compiled program), torch's sublist form, size-1 broadcasting,
torch's error messages eagerly and compiled."""
import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("btd,edh->bteh", [(2, 3, 4), (5, 4, 6)]), ("bteh,ehd->bted", [(2, 3, 5, 6), (5, 6, 4)]),
    ("bted,bte->btd", [(2, 3, 5, 4), (2, 3, 5)]), ("e,e->", [(4,), (4,)]),
    ("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("iij->j", [(3, 3, 2)]), ("ij->ji", [(2, 3)]),
    ("ij->", [(2, 3)]), ("i,j->ij", [(2,), (3,)]),
    ("...ij,...jk->...ik", [(2, 1, 2, 3), (5, 3, 4)]), ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("ij,ij->i", [(3, 4), (1, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]), ("i...->...i", [(2, 3, 4)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]), ("ba,ca->bc", [(3, 4), (5, 4)]),
    ("ij,kj->ik", [(0, 3), (4, 3)]), ("Ab,bC->AC", [(2, 3), (3, 2)]), ("i j , j k -> i k", [(2, 3), (3, 4)]),
]


@pytest.mark.parametrize("eq,shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum_eager_compiled_strict_and_grad(eq, shapes):
    rng = np.random.default_rng(0)
    arrs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    tts = [torch.tensor(a, requires_grad=True) for a in arrs]
    ref = torch.einsum(eq, *tts)
    (ref * ref).sum().backward()
    e = tp.einsum(eq, *[tp.tensor(a) for a in arrs])
    assert tuple(e.shape) == tuple(ref.shape)
    np.testing.assert_allclose(e.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    ts = [tp.tensor(a, requires_grad=True) for a in arrs]
    cf = tp.compile(lambda *xs: tp.einsum(eq, *xs), strict_native=True)
    c = cf(*ts)
    assert tuple(c.shape) == tuple(ref.shape)
    np.testing.assert_allclose(c.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    (c * c).sum().backward()
    for t, q in zip(ts, tts):
        np.testing.assert_allclose(t.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert cf.stats()["fallbacks"] == 0


def test_einsum_list_and_sublist_forms():
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (3, 4)))
    A, B = tp.tensor(a), tp.tensor(b)
    np.testing.assert_allclose(tp.einsum("ij,jk", [A, B]).numpy(), a @ b, rtol=1e-5)
    np.testing.assert_allclose(tp.einsum(A, [0, 1], B, [1, 2], [0, 2]).numpy(), a @ b, rtol=1e-5)
    np.testing.assert_allclose(tp.einsum(A, [0, Ellipsis], B, [Ellipsis, 2]).numpy(),
                               torch.einsum(torch.tensor(a), [0, Ellipsis], torch.tensor(b),
                                            [Ellipsis, 2]).numpy(), rtol=1e-5)
    cf = tp.compile(lambda x, y: tp.einsum(x, [0, 1], y, [1, 2], [0, 2]), strict_native=True)
    np.testing.assert_allclose(cf(A, B).numpy(), a @ b, rtol=1e-5)


def test_einsum_integers_compiled():
    x = tp.tensor([[1, 2], [3, 4]])
    ref = torch.einsum("ij,jk->ik", torch.tensor([[1, 2], [3, 4]]), torch.tensor([[1, 2], [3, 4]]))
    for r in (tp.einsum("ij,jk->ik", x, x), tp.compile(lambda a: tp.einsum("ij,jk->ik", a, a))(x)):
        assert r.dtype == tp.int64
        np.testing.assert_array_equal(r.numpy(), ref.numpy())


ERRORS = [("ij,jk->ik", [(2, 3), (3, 4), (4, 4)]), ("ij,jk->ik", [(2, 3)]), ("i.j", [(2, 3)]),
          ("ij", [(2, 3, 4)]), ("ijk...", [(2, 3)]), ("ij->a", [(2, 3)]), ("ij->ii", [(2, 3)]),
          ("ii", [(2, 3)]), ("i1", [(2, 3)]), ("...ij,...jk", [(2, 2, 3), (3, 3, 4)]),
          ("ij,jk", [(2, 3), (4, 4)])]


@pytest.mark.parametrize("eq,shapes", ERRORS, ids=[f"{e}-{len(s)}" for e, s in ERRORS])
def test_einsum_errors_like_torch(eq, shapes):
    with pytest.raises(RuntimeError) as te:
        torch.einsum(eq, *[torch.ones(*s) for s in shapes])
    with pytest.raises(RuntimeError) as ee:
        tp.einsum(eq, *[tp.ones(*s) for s in shapes])
    assert str(ee.value) == str(te.value)
    with pytest.raises(RuntimeError) as ce:
        tp.compile(lambda *xs: tp.einsum(eq, *xs))(*[tp.ones(*s) for s in shapes])
    assert str(ce.value) == str(te.value)


def test_einsum_mixed_dtypes_raise_like_torch():
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
        tp.einsum("ij,jk", tp.ones(2, 3), tp.ones(3, 4, dtype=tp.float64))
