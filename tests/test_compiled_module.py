"""tp.compile(module) is a module (torch's OptimizedModule) and
module.compile() compiles in place; forward hooks and pre-hooks with
torch's semantics (issue 16 item 2)."""
import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")


class Net(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = tp.nn.Linear(4, 3)
        self.drop = tp.nn.Dropout(0.5)
        self.scale = 2.0

    def forward(self, x):
        return self.drop(self.fc(x)) * self.scale

    def generate(self, x, n):
        for _ in range(n):
            x = tp.cat([self(x), x[:, :1]], 1)
        return x


class TNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.drop = torch.nn.Dropout(0.5)
        self.scale = 2.0

    def forward(self, x):
        return self.drop(self.fc(x)) * self.scale


def test_compiled_module_is_module_like_torch():
    m, tm = Net(), TNet()
    cm, tcm = tp.compile(m), torch.compile(tm)
    assert isinstance(cm, tp.nn.Module) and isinstance(tcm, torch.nn.Module)
    assert cm._orig_mod is m and tcm._orig_mod is tm
    assert type(cm).__name__ == type(tcm).__name__ == "OptimizedModule"
    # state_dict keys, parameters, attributes: as torch's
    assert list(cm.state_dict()) == list(tcm.state_dict())
    assert [p is q for p, q in zip(cm.parameters(), m.parameters())] == [True, True]
    assert cm.fc is m.fc and cm.scale == 2.0
    assert cm.fc.weight is m.fc.weight
    # train()/eval() switch the original, training reads through
    assert cm.training and m.training
    assert cm.eval() is cm
    assert not m.training and not m.drop.training and not cm.training
    tcm.eval()
    assert not tm.training and not tcm.training
    cm.train()
    assert m.drop.training
    # attribute writes go to the original (torch's __setattr__)
    cm.scale = 3.0
    assert m.scale == 3.0 and "scale" not in cm.__dict__
    tcm.scale = 3.0
    assert tm.scale == 3.0
    # methods of the original are reachable
    assert cm.generate.__func__ is Net.generate
    with pytest.raises(AttributeError):
        cm.no_such_thing
    # load_state_dict through the wrapper (the _orig_mod. keys)
    sd = {k: v * 0 for k, v in cm.state_dict().items()}
    cm.load_state_dict(sd)
    assert float(m.fc.weight.abs().sum()) == 0.0


def test_compiled_module_forward_matches_and_is_compiled():
    m = Net().eval()
    cm = tp.compile(m)
    x = tp.randn(5, 4)
    with tp.no_grad():
        np.testing.assert_allclose(cm(x).numpy(), m.forward(x).numpy(), rtol=1e-5, atol=1e-6)  # float32: compiled GEMM sums in another order
        assert len(cm.versions) == 1
        assert cm.stats()["fallbacks"] == 0
        m.scale = 1.0        # a guarded attribute of the original: a new version
        np.testing.assert_allclose(cm(x).numpy(), m.forward(x).numpy(), rtol=1e-5, atol=1e-6)  # float32: compiled GEMM sums in another order
        assert len(cm.versions) == 2


def test_forward_hooks_match_torch():
    calls, tcalls = [], []
    m, tm = tp.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    handles = []
    with tp.no_grad():
        m.weight.copy_(tp.tensor(tm.weight.detach().numpy()))
        m.bias.copy_(tp.tensor(tm.bias.detach().numpy()))
    for mod, log in ((m, calls), (tm, tcalls)):
        mod.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
        mod.register_forward_pre_hook(lambda mod, args, log=log: log.append("pre"))
        handles.append(mod.register_forward_hook(lambda mod, args, out: out + 1))
        mod.register_forward_hook(lambda mod, args, out, log=log: log.append("post0"), prepend=True)
        mod.register_forward_hook(lambda mod, args, kwargs, out, log=log: log.append(("kw", kwargs)),
                                  with_kwargs=True)
    x = np.random.rand(4, 3).astype(np.float32)
    with tp.no_grad(), torch.no_grad():
        np.testing.assert_allclose(m(tp.tensor(x)).numpy(), tm(torch.tensor(x)).numpy(),
                                   rtol=1e-5)
        assert calls == tcalls == ["pre", "post0", ("kw", {})]
        cm = tp.compile(m)
        del calls[:]
        np.testing.assert_allclose(cm(tp.tensor(x)).numpy(), tm(torch.tensor(x)).numpy(),
                                   rtol=1e-5)
        assert cm.stats()["fallbacks"] == 0
        assert calls == ["pre", "post0", ("kw", {})]
    handles[0].remove()
    with tp.no_grad(), torch.no_grad():
        r = m(tp.tensor(x)).numpy()
    np.testing.assert_allclose(r, (m.forward(tp.tensor(x) * 2)).detach().numpy(), rtol=1e-5, atol=1e-6)  # float32: compiled GEMM sums in another order


def test_pre_hook_with_kwargs_and_errors():
    m = tp.nn.Linear(3, 2)
    m.register_forward_pre_hook(lambda mod, a, k: 5, with_kwargs=True)
    tm = torch.nn.Linear(3, 2)
    tm.register_forward_pre_hook(lambda mod, a, k: 5, with_kwargs=True)
    with pytest.raises(RuntimeError) as e:
        m(tp.randn(1, 3))
    with pytest.raises(RuntimeError) as te:
        tm(torch.randn(1, 3))
    assert str(e.value) == str(te.value)


def test_always_call_hook_runs_when_forward_raises():
    seen = []
    m = tp.nn.Linear(3, 2)
    with m.register_forward_hook(lambda mod, a, o: seen.append(o), always_call=True):
        with pytest.raises(RuntimeError):
            m(tp.randn(2, 5))
    assert seen == [None]
    assert not m._forward_hooks       # the with-block removed it


def test_module_compile_in_place():
    m = Net().eval()
    assert m.compile() is None
    x = tp.randn(2, 4)
    with tp.no_grad():
        y = m.generate(x, 3)          # calls self(...): the compiled forward
        ref = x
        for _ in range(3):
            ref = tp.cat([m.forward(ref), ref[:, :1]], 1)
        np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)  # float32: compiled GEMM sums in another order
    cf = m._compiled_call_impl
    assert cf.stats()["eager_calls"] == 0 and len(cf.versions) >= 1
    assert list(m.state_dict()) == ["fc.weight", "fc.bias"]


def test_compiled_module_gradients():
    m = tp.nn.Linear(3, 1)
    cm = tp.compile(m)
    x = tp.randn(4, 3)
    cm(x).sum().backward()
    g = m.weight.grad.numpy().copy()
    m.zero_grad()
    m(x).sum().backward()
    np.testing.assert_allclose(g, m.weight.grad.numpy(), rtol=1e-5, atol=1e-6)  # float32: compiled GEMM sums in another order
