"""tensorplay.nn: Module registration, state, modes, layers vs torch."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn
import tensorplay.nn.functional as F

try:
    import torch
except Exception:  # noqa: BLE001
    torch = None


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.GELU(approximate="tanh")
        self.norm = nn.LayerNorm(8)
        self.blocks = nn.ModuleList([nn.Linear(8, 8), nn.ReLU()])
        self.heads = nn.ModuleDict({"a": nn.Linear(8, 2)})
        self.register_buffer("scale", tp.ones(1))

    def forward(self, x):
        x = self.norm(self.act(self.fc1(x)))
        for b in self.blocks:
            x = b(x)
        return self.heads["a"](x) * self.scale


def test_registration_and_state_dict():
    m = MLP()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["fc1.weight", "fc1.bias", "norm.weight", "norm.bias",
                     "blocks.0.weight", "blocks.0.bias", "heads.a.weight", "heads.a.bias"]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in m.parameters())
    assert [n for n, _ in m.named_buffers()] == ["scale"]
    sd = m.state_dict()
    assert list(sd)[-1] == "heads.a.bias" or "scale" in sd
    m2 = MLP()
    m2.load_state_dict(sd)
    x = tp.randn(3, 4)
    np.testing.assert_allclose(m(x).detach().numpy(), m2(x).detach().numpy(), rtol=1e-6)
    with pytest.raises(RuntimeError, match="Missing key"):
        m2.load_state_dict({})
    assert len(list(m.children())) == 5
    assert [n for n, _ in m.named_modules()][:3] == ["", "fc1", "act"]


def test_linear_init_bounds_and_shapes():
    lin = nn.Linear(100, 7)
    w = lin.weight.detach().numpy()
    assert w.shape == (7, 100) and np.abs(w).max() <= 0.1 + 1e-6
    assert lin(tp.randn(5, 100)).shape == (5, 7)
    assert nn.Linear(3, 2, bias=False).bias is None


def test_train_eval_dropout_batchnorm():
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    m.eval()
    assert not m[1].training
    x = tp.randn(4, 3)
    np.testing.assert_allclose(m(x).detach().numpy(), m(x).detach().numpy())
    m.train()
    assert m[1].training
    bn = nn.BatchNorm1d(3)
    xb = tp.randn(8, 3)
    bn(xb)
    a = xb.numpy()
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * a.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * a.var(0, ddof=1), rtol=1e-5)
    bn.eval()
    y = bn(xb).detach().numpy()
    ref = (a - bn.running_mean.numpy()) / np.sqrt(bn.running_var.numpy() + 1e-5)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_dropout_statistics():
    x = tp.ones(10000)
    y = F.dropout(x, 0.3, training=True).detach().numpy()
    kept = y != 0
    assert 0.65 < kept.mean() < 0.75
    np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-6)
    assert F.dropout(x, 0.3, training=False) is x


def test_to_dtype_and_embedding():
    m = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Sigmoid(), nn.SiLU(), nn.Identity(),
                      nn.Softmax(dim=-1))
    m.to(tp.float64)
    assert str(m[0].weight.dtype).endswith("float64")
    assert m(tp.randn(3, 2, dtype=tp.float64)).shape == (3, 2)
    e = nn.Embedding(10, 4, padding_idx=0)
    out = e(tp.tensor([[0, 3], [9, 1]]))
    assert out.shape == (2, 2, 4)
    assert np.all(out.detach().numpy()[0, 0] == 0)


@pytest.mark.skipif(torch is None, reason="torch not installed")
def test_layers_match_torch():
    tl = torch.nn.Linear(4, 3)
    pl = nn.Linear(4, 3)
    pl.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in tl.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(pl(tp.tensor(x)).detach().numpy(),
                               tl(torch.from_numpy(x)).detach().detach().numpy(), rtol=1e-5, atol=1e-6)
    tln, pln = torch.nn.LayerNorm(4), nn.LayerNorm(4)
    np.testing.assert_allclose(pln(tp.tensor(x)).detach().numpy(),
                               tln(torch.from_numpy(x)).detach().detach().numpy(), rtol=1e-5, atol=1e-5)
    assert set(pl.state_dict()) == set(tl.state_dict())
