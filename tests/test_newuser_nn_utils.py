"""tensorplay.nn.utils (gradient clipping, flat parameter vectors) as a
PyTorch user calls them in a training loop: numbers against torch's, the
returned total norm, the non-finite error, and a compiled training step
that clips (the clip reads no Python float, so it traces)."""
import math

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn

torch = pytest.importorskip("torch")

G0 = np.array([3.0, -4.0, 1.0], np.float32)
G1 = np.full((2, 2), 2.0, np.float32)


def _params(lib):
    ps = [lib.nn.Parameter(lib.ones(3)), lib.nn.Parameter(lib.ones(2, 2)),
          lib.nn.Parameter(lib.ones(1))]
    ps[0].grad = lib.tensor(G0)
    ps[1].grad = lib.tensor(G1)
    return ps


@pytest.mark.parametrize("norm_type", [2.0, 1, 3, "inf", math.inf])
def test_clip_grad_norm_matches_torch(norm_type):
    got, want = _params(tp), _params(torch)
    rg = tp.nn.utils.clip_grad_norm_(got, 1.5, norm_type=norm_type)
    rw = torch.nn.utils.clip_grad_norm_(want, 1.5, norm_type=norm_type)
    assert isinstance(rg, tp.Tensor) and rg.dim() == 0
    np.testing.assert_allclose(rg.item(), rw.item(), rtol=1e-6)
    for g, w in zip(got, want):
        if w.grad is None:
            assert g.grad is None
        else:
            np.testing.assert_allclose(g.grad.numpy(), w.grad.numpy(), rtol=1e-6)


def test_clip_grad_norm_below_max_leaves_grads():
    p = nn.Parameter(tp.ones(2))
    p.grad = tp.tensor([0.3, 0.4])
    r = nn.utils.clip_grad_norm_(p, 1.0)
    assert abs(r.item() - 0.5) < 1e-6
    np.testing.assert_allclose(p.grad.numpy(), [0.3, 0.4], rtol=1e-6)


def test_clip_grad_norm_no_grads_and_nonfinite():
    assert nn.utils.clip_grad_norm_([], 1.0).item() == 0.0
    p = nn.Parameter(tp.ones(3))
    p.grad = tp.tensor([float("nan"), 1.0, 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_(p, 1.0, error_if_nonfinite=True)
    assert math.isnan(nn.utils.clip_grad_norm_(p, 1.0).item())


def test_clip_grad_value_and_total_norm():
    p = nn.Parameter(tp.ones(3))
    p.grad = tp.tensor([3.0, -4.0, 0.5])
    assert nn.utils.clip_grad_value_(p, 1.0) is None
    assert p.grad.tolist() == [1.0, -1.0, 0.5]
    assert abs(nn.utils.get_total_norm([tp.tensor([3.0]), tp.tensor([4.0])]).item() - 5) < 1e-6


def test_parameters_vector_round_trip():
    ps = _params(tp)
    v = nn.utils.parameters_to_vector(ps)
    assert v.shape == (8,) and v.requires_grad
    nn.utils.vector_to_parameters(tp.arange(8.0), ps)
    assert ps[1].tolist() == [[3.0, 4.0], [5.0, 6.0]] and ps[1].requires_grad
    with pytest.raises(TypeError):
        nn.utils.vector_to_parameters([1.0], ps)


def test_compiled_model_with_clip_matches_eager():
    """The documented compiled-training split (docs/autograd.md): a compiled
    model, its compiled backward, then the clip between backward and step."""
    def make():
        tp.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = tp.tensor(np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)) * 10
    y = tp.zeros(16, dtype=tp.long)
    res = []
    for compiled in (False, True):
        m = make()
        opt = tp.optim.SGD(m.parameters(), lr=0.1)
        fwd = tp.compile(m) if compiled else m
        out = []
        for _ in range(3):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(fwd(x), y)
            loss.backward()
            out.append((loss.item(), nn.utils.clip_grad_norm_(m.parameters(), 0.5).item()))
            opt.step()
        res.append((out, [p.detach().clone() for p in m.parameters()]))
    for (l0, n0), (l1, n1) in zip(res[0][0], res[1][0]):
        assert abs(l0 - l1) < 1e-5 and abs(n0 - n1) < 1e-4 * max(1, n0)
    assert res[0][0][0][1] > 0.5   # the clip did act
    for a, b in zip(res[0][1], res[1][1]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)


def test_compiled_total_norm_with_grads_as_arguments():
    """docs/troubleshooting.md's recipe: the norm compiled with the grads
    passed as arguments follows new gradients every step."""
    x = tp.tensor(np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)) * 10
    y = tp.zeros(16, dtype=tp.long)
    res = []
    for compiled in (False, True):
        tp.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        opt = tp.optim.SGD(m.parameters(), lr=0.1)
        tn = tp.compile(nn.utils.get_total_norm) if compiled else nn.utils.get_total_norm
        norms = []
        for _ in range(3):
            opt.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
            n = tn([p.grad for p in m.parameters()])
            nn.utils.clip_grads_with_norm_(m.parameters(), 0.5, n)
            norms.append(n.item())
            opt.step()
        res.append(norms)
    assert len(set(res[0])) == 3
    np.testing.assert_allclose(res[0], res[1], rtol=1e-5)
