"""tp.save / tp.load as a PyTorch user checkpoints: a model's state_dict
round trip, an optimizer state_dict resumed, tied weights staying one
object, Parameter/requires_grad/dtype kept, paths and file objects,
weights_only's allow-list, map_location, and a torch zip file refused
with a clear message; load_state_dict's result prints as torch's."""
import io
import pickle

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5, 4)
        self.lin = nn.Linear(4, 5, bias=False)
        self.lin.weight = self.emb.weight          # tied
        self.bn = nn.BatchNorm1d(4)

    def forward(self, i):
        return self.lin(self.bn(self.emb(i)))


def test_state_dict_round_trip_path(tmp_path):
    tp.manual_seed(0)
    m = Net()
    m(tp.tensor([0, 1, 2, 3]))                     # running stats move
    path = tmp_path / "m.pt"
    tp.save(m.state_dict(), path)
    sd = tp.load(path)
    assert list(sd) == list(m.state_dict())
    sd["emb.weight"][0, 0] = 42.0                  # tied: one memory, as torch loads it
    assert sd["lin.weight"][0, 0].item() == 42.0 and sd["emb.weight"] is not sd["lin.weight"]
    sd["emb.weight"][0, 0] = m.emb.weight[0, 0].item()
    assert sd["bn.num_batches_tracked"].dtype == tp.int64
    m2 = Net()
    r = m2.load_state_dict(sd)
    assert repr(r) == "<All keys matched successfully>"
    m.eval()
    m2.eval()
    i = tp.tensor([4, 0, 2])
    np.testing.assert_array_equal(m(i).detach().numpy(), m2(i).detach().numpy())


def test_checkpoint_with_optimizer_file_object():
    m = nn.Linear(3, 2)
    opt = tp.optim.AdamW(m.parameters(), lr=1e-2)
    m(tp.ones(4, 3)).sum().backward()
    opt.step()
    buf = io.BytesIO()
    tp.save({"model": m.state_dict(), "opt": opt.state_dict(), "epoch": 3,
             "loss": 0.25, "name": "run", "shape": tp.Size([2, 3]), "dt": tp.bfloat16}, buf)
    buf.seek(0)
    ck = tp.load(buf, weights_only=True)
    assert ck["epoch"] == 3 and ck["loss"] == 0.25 and ck["name"] == "run"
    assert ck["shape"] == (2, 3) and isinstance(ck["shape"], tp.Size) and ck["dt"] is tp.bfloat16
    m2 = nn.Linear(3, 2)
    m2.load_state_dict(ck["model"])
    opt2 = tp.optim.AdamW(m2.parameters(), lr=1e-2)
    opt2.load_state_dict(ck["opt"])
    st = opt2.state_dict()["state"][0]
    np.testing.assert_array_equal(st["exp_avg"].numpy(), opt.state_dict()["state"][0]["exp_avg"].numpy())


def test_tensor_kinds_kept():
    p = nn.Parameter(tp.ones(2))
    g = tp.ones(2, requires_grad=True)
    b = tp.tensor([1.5, -2.0], dtype=tp.bfloat16)
    i = tp.arange(6, dtype=tp.int32).reshape(2, 3).T      # a non-contiguous view
    buf = io.BytesIO()
    tp.save([p, g, b, i, tp.tensor(True)], buf)
    buf.seek(0)
    p2, g2, b2, i2, t2 = tp.load(buf)
    assert type(p2) is nn.Parameter and p2.requires_grad
    assert type(g2) is tp.Tensor and g2.requires_grad and g2.is_leaf
    assert b2.dtype == tp.bfloat16 and b2.tolist() == [1.5, -2.0]
    assert i2.dtype == tp.int32 and i2.tolist() == i.tolist()
    assert t2.item() is True


class Custom:
    def __init__(self):
        self.v = 1


def test_weights_only_refuses_other_globals():
    buf = io.BytesIO()
    tp.save({"c": Custom()}, buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="Custom.*add_safe_globals"):
        tp.load(buf)
    buf.seek(0)
    assert tp.load(buf, weights_only=False)["c"].v == 1
    buf.seek(0)
    with tp.serialization.safe_globals([Custom]):
        assert tp.load(buf)["c"].v == 1
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError):
        tp.load(buf)


def test_map_location_cpu_forms():
    buf = io.BytesIO()
    tp.save({"w": tp.ones(2)}, buf)
    for ml in ("cpu", tp.device("cpu"), {"cpu": "cpu"}, lambda storage, loc: storage):
        buf.seek(0)
        assert tp.load(buf, map_location=ml)["w"].device == tp.device("cpu")


def test_torch_zip_file_is_refused_clearly(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "t.pt"
    torch.save({"w": torch.ones(2)}, path)
    with pytest.raises(RuntimeError, match="torch.save"):
        tp.load(path)


def test_load_state_dict_result_repr():
    m = nn.Linear(2, 2)
    r = m.load_state_dict({"weight": tp.zeros(2, 2)}, strict=False)
    assert r.missing_keys == ["bias"] and r.unexpected_keys == []
    assert repr(r) == "_IncompatibleKeys(missing_keys=['bias'], unexpected_keys=[])"
