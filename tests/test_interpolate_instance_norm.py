"""F.interpolate / nn.Upsample and F.instance_norm / nn.InstanceNorm* against
torch 2.13: nearest and nearest-exact bit-exact, linear/bilinear/bicubic/
trilinear/area within 1e-5 (float32; 1e-12 float64), gradients within 1e-5,
errors word for word, running statistics, state_dict keys; compiled with
strict_native=True (forward and backward)."""
import warnings

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional
RNG = np.random.default_rng(11)


def r(*s, dtype=np.float32):
    return RNG.standard_normal(s).astype(dtype)


def close(a, b, rtol=1e-5, atol=1e-5):
    a = a.detach().numpy() if hasattr(a, "detach") else a
    b = b.detach().numpy() if hasattr(b, "detach") else b
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


SPECS = [dict(size=5), dict(size=1), dict(scale_factor=2), dict(scale_factor=0.5),
         dict(scale_factor=1.7), dict(scale_factor=2.4, recompute_scale_factor=True),
         dict(scale_factor=0.37)]
MODES = [("nearest", 3), ("nearest", 4), ("nearest", 5), ("nearest-exact", 3),
         ("nearest-exact", 4), ("nearest-exact", 5), ("linear", 3), ("bilinear", 4),
         ("bicubic", 4), ("trilinear", 5), ("area", 3), ("area", 4), ("area", 5)]


@pytest.mark.parametrize("mode,rank", MODES, ids=[f"{m}{k}" for m, k in MODES])
def test_interpolate_values_like_torch(mode, rank):
    corners = [None] if mode in ("nearest", "nearest-exact", "area") else [False, True]
    for n_in in (3, 4, 7):
        for spec in SPECS:
            for ac in corners:
                for dt, tol in ((np.float32, 1e-5), (np.float64, 1e-12)):
                    x = r(2, 2, *(n_in,) * (rank - 2), dtype=dt)
                    ref = TF.interpolate(torch.tensor(x), mode=mode, align_corners=ac, **spec)
                    out = F.interpolate(tp.tensor(x), mode=mode, align_corners=ac, **spec)
                    assert tuple(out.shape) == tuple(ref.shape), (n_in, spec)
                    if mode.startswith("nearest"):
                        np.testing.assert_array_equal(out.numpy(), ref.numpy())
                    else:
                        close(out, ref, tol, tol)


@pytest.mark.parametrize("mode,rank,kw", [("nearest", 4, dict(scale_factor=(2, 3))),
                                          ("nearest-exact", 3, dict(size=11)),
                                          ("linear", 3, dict(size=9, align_corners=True)),
                                          ("bilinear", 4, dict(size=(7, 3))),
                                          ("bicubic", 4, dict(scale_factor=1.5)),
                                          ("trilinear", 5, dict(scale_factor=(2, 1, 1.5))),
                                          ("area", 4, dict(size=(2, 3)))])
def test_interpolate_grads_and_compiled(mode, rank, kw):
    x = r(2, 3, *(5, 4, 3)[:rank - 2])
    X, TX = tp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out = F.interpolate(X, mode=mode, **kw)
    ref = TF.interpolate(TX, mode=mode, **kw)
    close(out, ref)
    g = r(*ref.shape)
    out.backward(tp.tensor(g))
    ref.backward(torch.tensor(g))
    close(X.grad, TX.grad)
    cf = tp.compile(lambda a: F.interpolate(a, mode=mode, **kw), strict_native=True)
    close(cf(tp.tensor(x)), ref)
    X2 = tp.tensor(x, requires_grad=True)
    cl = tp.compile(lambda a: (F.interpolate(a, mode=mode, **kw) * tp.tensor(g)).sum(),
                    strict_native=True)
    cl(X2).backward()
    close(X2.grad, TX.grad)


ERRS = [
    dict(x=(1, 2, 4), kw=dict(size=3, scale_factor=2)),
    dict(x=(1, 2, 4), kw=dict()),
    dict(x=(1, 2, 4, 4), kw=dict(size=(3,))),
    dict(x=(1, 2, 4, 4), kw=dict(scale_factor=(3, 2, 1))),
    dict(x=(1, 2, 4, 4), kw=dict(size=3, mode="nearest", align_corners=True)),
    dict(x=(1, 2, 4, 4), kw=dict(size=3, recompute_scale_factor=True)),
    dict(x=(1, 2, 4), kw=dict(size=3, mode="bilinear")),
    dict(x=(1, 2, 4, 4), kw=dict(size=3, mode="linear")),
    dict(x=(1, 2, 4, 4, 4), kw=dict(size=3, mode="bilinear")),
    dict(x=(1, 2, 4, 4), kw=dict(size=3, mode="trilinear")),
    dict(x=(1, 2, 4, 4), kw=dict(size=3, mode="cubic")),
    dict(x=(2, 4), kw=dict(size=3)),
    dict(x=(1, 2, 4), kw=dict(size=3, mode="linear", antialias=True)),
    dict(x=(1, 2, 1, 1), kw=dict(scale_factor=0.5, mode="bilinear")),
    dict(x=(1, 2, 1), kw=dict(scale_factor=0.5, mode="linear")),
]


@pytest.mark.parametrize("case", ERRS, ids=[str(c["kw"]) for c in ERRS])
def test_interpolate_errors_like_torch(case):
    x = r(*case["x"])
    with pytest.raises(Exception) as et:
        TF.interpolate(torch.tensor(x), **case["kw"])
    with pytest.raises(Exception) as ep:
        F.interpolate(tp.tensor(x), **case["kw"])
    assert type(ep.value) is type(et.value)
    assert str(ep.value) == str(et.value)


def test_upsample_modules_like_torch():
    x = r(2, 3, 4, 5)
    for args, kw in [((), dict(scale_factor=2)), ((), dict(size=(3, 7), mode="bilinear")),
                     ((), dict(scale_factor=(1.5, 2.0), mode="bicubic", align_corners=True)),
                     ((), dict(scale_factor=1.3, mode="nearest",
                               recompute_scale_factor=True))]:
        m, t = nn.Upsample(*args, **kw), torch.nn.Upsample(*args, **kw)
        assert repr(m) == repr(t)
        close(m(tp.tensor(x)), t(torch.tensor(x)))
        close(tp.compile(m, strict_native=True)(tp.tensor(x)), t(torch.tensor(x)))
    for name in ("UpsamplingNearest2d", "UpsamplingBilinear2d"):
        m, t = getattr(nn, name)(scale_factor=2), getattr(torch.nn, name)(scale_factor=2)
        assert repr(m) == repr(t)
        close(m(tp.tensor(x)), t(torch.tensor(x)))


@pytest.mark.parametrize("kw", [dict(), dict(use_input_stats=True, momentum=0.3),
                                dict(use_input_stats=False), dict(eps=1e-3)])
def test_instance_norm_functional_like_torch(kw):
    x = r(3, 4, 5, 6)
    w, b = r(4), r(4)
    rm, rv = r(4), np.abs(r(4)) + 0.5
    X, TX = tp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    W, TW = tp.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    RM, RV = tp.tensor(rm), tp.tensor(rv)
    TRM, TRV = torch.tensor(rm), torch.tensor(rv)
    out = F.instance_norm(X, RM, RV, W, tp.tensor(b), **kw)
    ref = TF.instance_norm(TX, TRM, TRV, TW, torch.tensor(b), **kw)
    close(out, ref)
    close(RM, TRM)
    close(RV, TRV)
    g = r(*ref.shape)
    out.backward(tp.tensor(g))
    ref.backward(torch.tensor(g))
    close(X.grad, TX.grad, 1e-4, 1e-4)
    close(W.grad, TW.grad, 1e-4, 1e-4)


def test_instance_norm_compiled_native_with_running_stats():
    x = r(2, 3, 8)
    m = nn.InstanceNorm1d(3, affine=True, track_running_stats=True)
    t = torch.nn.InstanceNorm1d(3, affine=True, track_running_stats=True)
    cm = tp.compile(m, strict_native=True)
    X, TX = tp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref = cm(X), t(TX)
    close(out, ref)
    close(m.running_mean, t.running_mean)
    close(m.running_var, t.running_var)
    (out ** 2).sum().backward()
    (ref ** 2).sum().backward()
    close(X.grad, TX.grad, 1e-4, 1e-4)
    close(m.weight.grad, t.weight.grad, 1e-4, 1e-4)
    m.eval()
    t.eval()
    close(m(tp.tensor(x)), t(torch.tensor(x)))


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_instance_norm_modules_like_torch(nd):
    for kw in (dict(), dict(affine=True), dict(track_running_stats=True, momentum=None),
               dict(affine=True, bias=False),
               dict(affine=True, track_running_stats=True)):
        m = getattr(nn, f"InstanceNorm{nd}d")(4, **kw)
        t = getattr(torch.nn, f"InstanceNorm{nd}d")(4, **kw)
        assert repr(m) == repr(t)
        sd = t.state_dict()
        assert list(m.state_dict()) == list(sd)
        assert [tuple(v.shape) for v in m.state_dict().values()] == \
            [tuple(v.shape) for v in sd.values()]
        for k, v in sd.items():
            if v.is_floating_point():
                v.copy_(torch.tensor(r(*v.shape)).abs() + 0.1)
        m.load_state_dict({k: tp.tensor(v.numpy()) for k, v in sd.items()})
        x = r(2, 4, *(3, 4, 5)[:nd])
        close(m(tp.tensor(x)), t(torch.tensor(x)))
        close(m(tp.tensor(x[0])), t(torch.tensor(x[0])))          # unbatched
        for a, b in zip(m.buffers(), t.buffers()):
            close(a, b)
        m.eval()
        t.eval()
        close(m(tp.tensor(x)), t(torch.tensor(x)))
    bad = r(2, 4, *(3, 4, 5)[:nd])[:, :3]
    with pytest.raises(ValueError) as et:
        getattr(torch.nn, f"InstanceNorm{nd}d")(4, affine=True)(torch.tensor(bad))
    with pytest.raises(ValueError) as ep:
        getattr(nn, f"InstanceNorm{nd}d")(4, affine=True)(tp.tensor(bad))
    assert str(ep.value) == str(et.value)
    with pytest.raises(ValueError) as et:
        getattr(torch.nn, f"InstanceNorm{nd}d")(4)(torch.tensor(r(*(1,) * (nd + 3))))
    with pytest.raises(ValueError) as ep:
        getattr(nn, f"InstanceNorm{nd}d")(4)(tp.tensor(r(*(1,) * (nd + 3))))
    assert str(ep.value) == str(et.value)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        getattr(nn, f"InstanceNorm{nd}d")(4)(tp.tensor(bad))
    assert any("does not match num_features" in str(x.message) for x in w)


def test_instance_norm_single_element_error_like_torch():
    x = r(2, 3, 1)
    with pytest.raises(ValueError) as et:
        TF.instance_norm(torch.tensor(x))
    with pytest.raises(ValueError) as ep:
        F.instance_norm(tp.tensor(x))
    assert str(ep.value) == str(et.value).replace("torch.Size", "tensorplay.Size")
