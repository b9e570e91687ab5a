"""nn.Embedding / F.embedding options that were accepted and ignored:
max_norm (the indexed rows of weight are renormalized in place, as torch
does, eagerly and compiled with strict_native) and scale_grad_by_freq
(each row's gradient divided by its count in the batch); their reprs."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")

W = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32) * 2
IDX = [[1, 2, 1], [5, 0, 1]]


@pytest.mark.parametrize("kw", [{"max_norm": 1.0}, {"max_norm": 2.0, "norm_type": 1.0},
                                {"max_norm": 1.0, "padding_idx": 0}])
def test_max_norm_like_torch(kw):
    w, tw = tp.tensor(W.copy()), torch.tensor(W.copy())
    out = F.embedding(tp.tensor(IDX), w, **kw)
    tout = torch.nn.functional.embedding(torch.tensor(IDX), tw, **kw)
    np.testing.assert_allclose(out.numpy(), tout.numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), tw.numpy(), rtol=1e-6)


def test_max_norm_compiled_matches_eager():
    res = []
    for comp in (False, True):
        w = tp.tensor(W.copy())

        def f(i):
            return F.embedding(i, w, max_norm=1.0) * 2
        g = tp.compile(f, strict_native=True) if comp else f
        res.append([g(tp.tensor([1, 2])).numpy(), g(tp.tensor([3, 1])).numpy(), w.numpy().copy()])
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert np.all(np.linalg.norm(res[0][2][1:4], axis=1) <= 1.0 + 1e-5)


@pytest.mark.parametrize("compiled", [False, True])
def test_module_max_norm_and_scale_grad_by_freq(compiled):
    for kw in ({"max_norm": 1.0}, {"scale_grad_by_freq": True},
               {"scale_grad_by_freq": True, "padding_idx": 5}):
        e = tp.nn.Embedding(6, 3, _weight=tp.tensor(W.copy()), **kw)
        te = torch.nn.Embedding(6, 3, _weight=torch.tensor(W.copy()), **kw)
        f = tp.compile(e) if compiled else e
        (f(tp.tensor(IDX)) * tp.arange(3.0)).sum().backward()
        (te(torch.tensor(IDX)) * torch.arange(3.0)).sum().backward()
        np.testing.assert_allclose(e.weight.grad.numpy(), te.weight.grad.numpy(), rtol=1e-6)
        np.testing.assert_allclose(e.weight.detach().numpy(), te.weight.detach().numpy(), rtol=1e-6)


def test_embedding_repr_options():
    for kw in ({"max_norm": 1.0}, {"max_norm": 1.0, "norm_type": 1.0, "scale_grad_by_freq": True,
                                   "sparse": True}):
        assert repr(tp.nn.Embedding(3, 4, **kw)) == repr(torch.nn.Embedding(3, 4, **kw))
