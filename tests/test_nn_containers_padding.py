"""nn.ParameterList / nn.ParameterDict and the padding modules (ZeroPad,
ConstantPad, ReflectionPad, ReplicationPad, CircularPad in 1-3 dims) against
torch 2.13: state_dict keys, registration, errors, outputs, reprs, and the
compiled module (constant padding natively)."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(3)


def r(*s):
    return RNG.standard_normal(s).astype(np.float32)


class _Holder:
    """The same model in both libraries: a ParameterList and a ParameterDict."""

    @staticmethod
    def make(lib):
        class M(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.pl = lib.nn.ParameterList([lib.ones(2, 3), lib.nn.Parameter(lib.zeros(3))])
                self.pl.append(lib.full((4,), 2.0))
                self.pd = lib.nn.ParameterDict({"b": lib.ones(2), "a": lib.zeros(1, 2)})
                self.pd["c"] = lib.nn.Parameter(lib.ones(5))

            def forward(self, x):
                y = x @ self.pl[0] + self.pl[-2]
                return y.sum() * self.pd["b"].sum() + self.pl[2].sum() + self.pd["a"].sum()
        return M()


def test_parameter_containers_state_dict_like_torch():
    m, t = _Holder.make(tp), _Holder.make(torch)
    sd_t = t.state_dict()
    assert list(m.state_dict()) == list(sd_t)           # same keys, same order
    assert [tuple(v.shape) for v in m.state_dict().values()] == \
        [tuple(v.shape) for v in sd_t.values()]
    for k, v in sd_t.items():
        v.data.copy_(torch.tensor(r(*v.shape)))
    m.load_state_dict({k: tp.tensor(v.numpy()) for k, v in sd_t.items()})
    x = r(4, 2)
    out, ref = m(tp.tensor(x)), t(torch.tensor(x))
    np.testing.assert_allclose(out.item(), ref.item(), rtol=1e-5)
    out.backward()
    ref.backward()
    for (kn, p), (kt, q) in zip(m.named_parameters(), t.named_parameters()):
        assert kn == kt
        assert isinstance(p, nn.Parameter)
        if q.grad is None:
            assert p.grad is None
        else:
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5)


def test_parameter_list_list_behaviour():
    pl = nn.ParameterList([tp.ones(1), tp.ones(2)])
    pl += [tp.ones(3)]
    assert len(pl) == 3 and [tuple(p.shape) for p in pl] == [(1,), (2,), (3,)]
    assert tuple(pl[-1].shape) == (3,)
    sl = pl[1:]
    assert isinstance(sl, nn.ParameterList) and len(sl) == 2 and sl[0] is pl[1]
    pl[0] = tp.zeros(7)
    assert isinstance(pl[0], nn.Parameter) and tuple(pl[0].shape) == (7,)
    pl.append("not a tensor")                  # kept, not registered (as torch)
    assert pl[3] == "not a tensor" and len(list(pl.parameters())) == 3
    with pytest.raises(IndexError, match="index 4 is out of range"):
        pl[4]
    with pytest.raises(TypeError, match="should be called with an iterable, but got Tensor"):
        pl.extend(tp.ones(2))
    with pytest.raises(RuntimeError, match="ParameterList should not be called."):
        pl(1)
    assert "0" not in dir(pl)


def test_parameter_dict_dict_behaviour():
    pd = nn.ParameterDict({"z": tp.ones(1), "y": tp.ones(2)})
    tpd = torch.nn.ParameterDict({"z": torch.ones(1), "y": torch.ones(2)})
    assert list(pd) == list(tpd) == ["y", "z"]        # a plain dict goes in sorted
    pd.update([("x", tp.ones(3))])
    assert list(pd.keys()) == ["y", "z", "x"] and "x" in pd and len(pd) == 3
    assert isinstance(pd["x"], nn.Parameter)
    assert pd.get("w") is None and pd.setdefault("w", tp.ones(4)).shape == (4,)
    p = pd.pop("z")
    assert tuple(p.shape) == (1,) and "z" not in pd and "z" not in dict(pd.named_parameters())
    k, v = pd.popitem()
    assert k == "w" and list(pd) == ["y", "x"]
    both = pd | nn.ParameterDict({"q": tp.ones(1)})
    assert list(both) == ["y", "x", "q"] and list(pd) == ["y", "x"]
    assert list(pd.copy().items())[0][1] is pd["y"]
    with pytest.raises(TypeError, match="not a string"):
        pd[3] = tp.ones(1)
    with pytest.raises(ValueError, match="has length 1; 2 is required"):
        pd.update([("a",)])
    with pytest.raises(RuntimeError, match="ParameterDict should not be called."):
        pd(1)
    pd.clear()
    assert len(pd) == 0 and list(pd.parameters()) == []


def test_parameter_list_in_optimizer_and_compiled():
    pl = nn.ParameterList([tp.ones(3, 3)])

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.ps = pl

        def forward(self, x):
            return x @ self.ps[0]
    m = M()
    x = tp.tensor(r(2, 3))
    cm = tp.compile(m, strict_native=True)
    np.testing.assert_allclose(cm(x).detach().numpy(), m(x).detach().numpy(), rtol=1e-6)
    opt = tp.optim.SGD(m.parameters(), lr=0.5)
    (m(x) ** 2).sum().backward()
    opt.step()
    assert not np.allclose(pl[0].detach().numpy(), 1.0)


PADS = [("ZeroPad1d", (2,), 3), ("ZeroPad1d", ((1, 3),), 2), ("ZeroPad2d", (1,), 4),
        ("ZeroPad2d", ((1, 0, 2, 3),), 3), ("ZeroPad3d", ((1, 0, 2, 1, 0, 1),), 5),
        ("ConstantPad1d", ((2, 1), 3.5), 3), ("ConstantPad2d", (2, -1.0), 4),
        ("ConstantPad3d", (1, 0.25), 4),
        ("ReflectionPad1d", ((2, 1),), 3), ("ReflectionPad2d", ((1, 2, 0, 2),), 4),
        ("ReflectionPad3d", (1,), 5), ("ReplicationPad1d", (3,), 2),
        ("ReplicationPad2d", ((0, 1, 2, 3),), 3), ("ReplicationPad3d", ((1, 2, 0, 1, 2, 0),), 5),
        ("CircularPad1d", ((1, 2),), 3), ("CircularPad2d", (1,), 4),
        ("CircularPad3d", ((1, 0, 2, 1, 1, 1),), 5)]


@pytest.mark.parametrize("name,args,rank", PADS, ids=[f"{p[0]}{p[1]}r{p[2]}" for p in PADS])
def test_padding_module_like_torch(name, args, rank):
    m, t = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
    assert repr(m) == repr(t)
    assert m.padding == t.padding
    x = r(*(2, 3, 4, 5, 4)[:rank])
    X = tp.tensor(x, requires_grad=True)
    TX = torch.tensor(x, requires_grad=True)
    out, ref = m(X), t(TX)
    np.testing.assert_array_equal(out.detach().numpy(), ref.detach().numpy())
    g = r(*ref.shape)
    out.backward(tp.tensor(g))
    ref.backward(torch.tensor(g))
    np.testing.assert_allclose(X.grad.numpy(), TX.grad.numpy(), rtol=1e-6, atol=1e-6)
    # every mode compiles natively: constant is pad's own lowering, reflect
    # / replicate / circular a trace-time index_select per dim
    cm = tp.compile(m, strict_native=True)
    np.testing.assert_array_equal(cm(tp.tensor(x)).numpy(), ref.detach().numpy())
    X2 = tp.tensor(x, requires_grad=True)
    cg = tp.compile(lambda a: (m(a) * tp.tensor(g)).sum(), strict_native=True)
    cg(X2).backward()
    np.testing.assert_allclose(X2.grad.numpy(), TX.grad.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode,pad,shape", [("reflect", (3, 0), (1, 2, 3)),
                                            ("circular", (0, 4), (1, 2, 3)),
                                            ("replicate", (1, 1), (2, 3, 4, 5)),
                                            ("reflect", (-1, 2), (1, 2, 5))])
def test_non_constant_pad_outside_torchs_rules_stays_eagers(mode, pad, shape):
    # cases the trace-time decomposition does not take are recorded as the
    # op itself: the compiled call gives eager's result, or eager's error
    x = tp.tensor(r(*shape))
    f = tp.compile(lambda a: tp.nn.functional.pad(a, pad, mode=mode) * 1.0)
    try:
        ref = tp.nn.functional.pad(x, pad, mode=mode) * 1.0
    except Exception as e:                    # noqa: BLE001 - compared below
        with pytest.raises(type(e)):
            f(x)
        return
    np.testing.assert_array_equal(f(x).numpy(), ref.numpy())


@pytest.mark.parametrize("name,rank", [("CircularPad1d", 4), ("CircularPad2d", 2),
                                       ("CircularPad3d", 3)])
def test_circular_pad_rank_error_like_torch(name, rank):
    x = r(*(2, 3, 4, 5)[:rank])
    with pytest.raises(ValueError) as e_t:
        getattr(torch.nn, name)(1)(torch.tensor(x))
    with pytest.raises(ValueError) as e_p:
        getattr(nn, name)(1)(tp.tensor(x))
    assert str(e_p.value) == str(e_t.value)
