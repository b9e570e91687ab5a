"""Loss functions as real training code calls them (users helper, session 6):
the legacy size_average/reduce arguments decide the reduction (they were
ignored: a silent 'mean'), and every reduction / weight / pos_weight / beta
of mse, l1, smooth_l1 and binary_cross_entropy_with_logits is native under
strict_native (only the defaults were)."""
import warnings

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

rng = np.random.default_rng(0)
X = rng.standard_normal((3, 4)).astype(np.float32)
X[0, 0] = 0.0                                  # the kink of |x| / max(x, 0)
P = (rng.random((3, 4)) * 0.9 + 0.05).astype(np.float32)
Y01 = (rng.random((3, 4)) > 0.5).astype(np.float32)
W4 = (rng.random(4) + 0.5).astype(np.float32)


def _np(t):
    return t.detach().numpy()


LEGACY = [dict(size_average=False), dict(reduce=False), dict(size_average=True, reduce=True),
          dict(size_average=False, reduce=True), dict(size_average=True, reduce=False)]
NAMES = ["mse_loss", "l1_loss", "smooth_l1_loss", "binary_cross_entropy_with_logits",
         "binary_cross_entropy", "kl_div"]


def _args(name, lib):
    a = P if name in ("binary_cross_entropy", "kl_div") else X
    b = Y01 if "binary" in name else P
    return lib.tensor(a), lib.tensor(b)


@pytest.mark.parametrize("kw", LEGACY, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
@pytest.mark.parametrize("name", NAMES)
def test_legacy_size_average_reduce_eager(name, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = getattr(TF, name)(*_args(name, torch), **kw)
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        out = getattr(F, name)(*_args(name, tp), **kw)
    assert tuple(out.shape) == tuple(ref.shape)
    np.testing.assert_allclose(_np(out), ref.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw", LEGACY[:2], ids=["size_average=False", "reduce=False"])
@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "smooth_l1_loss",
                                  "binary_cross_entropy_with_logits"])
def test_legacy_args_compiled_strict(name, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = getattr(TF, name)(*_args(name, torch), **kw)
        cf = tp.compile(lambda a, b: getattr(F, name)(a, b, **kw), strict_native=True)
        out = cf(*_args(name, tp))
    np.testing.assert_allclose(_np(out), ref.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls,kw", [("MSELoss", dict(size_average=False)),
                                    ("L1Loss", dict(reduce=False)),
                                    ("CrossEntropyLoss", dict(size_average=False)),
                                    ("NLLLoss", dict(reduce=False)),
                                    ("BCEWithLogitsLoss", dict(size_average=False))])
def test_legacy_args_modules(cls, kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tm, m = getattr(torch.nn, cls)(**kw), getattr(tp.nn, cls)(**kw)
    assert m.reduction == tm.reduction
    if "Entropy" in cls or "NLL" in cls:
        t = rng.integers(0, 4, 3)
        ref = tm(torch.tensor(X), torch.tensor(t))
        out = m(tp.tensor(X), tp.tensor(t))
    else:
        b = Y01 if "BCE" in cls else P
        ref = tm(torch.tensor(X), torch.tensor(b))
        out = m(tp.tensor(X), tp.tensor(b))
    np.testing.assert_allclose(_np(out), ref.numpy(), rtol=1e-5, atol=1e-6)


def _loss_cases():
    w = lambda lib: lib.tensor(W4)                                   # noqa: E731
    for red in ("mean", "sum", "none"):
        yield f"mse-{red}", lambda L, lib, a, b, red=red: L.mse_loss(a, b, reduction=red), P
        yield f"l1-{red}", lambda L, lib, a, b, red=red: L.l1_loss(a, b, reduction=red), P
        yield (f"smooth_l1-{red}",
               lambda L, lib, a, b, red=red: L.smooth_l1_loss(a, b, reduction=red, beta=0.5), P)
        yield (f"smooth_l1-beta0-{red}",
               lambda L, lib, a, b, red=red: L.smooth_l1_loss(a, b, reduction=red, beta=0.0), P)
        yield (f"bcel-{red}", lambda L, lib, a, b, red=red:
               L.binary_cross_entropy_with_logits(a, b, reduction=red), Y01)
        yield (f"bcel-weight-{red}", lambda L, lib, a, b, red=red:
               L.binary_cross_entropy_with_logits(a, b, weight=w(lib), reduction=red), Y01)
        yield (f"bcel-pos_weight-{red}", lambda L, lib, a, b, red=red:
               L.binary_cross_entropy_with_logits(a, b, pos_weight=w(lib), reduction=red), Y01)


@pytest.mark.parametrize("fn,target", [c[1:] for c in _loss_cases()],
                         ids=[c[0] for c in _loss_cases()])
def test_pointwise_losses_native_with_grad(fn, target):
    ta = torch.tensor(X, requires_grad=True)
    ref = fn(TF, torch, ta, torch.tensor(target))
    ref.sum().backward()
    a = tp.tensor(X, requires_grad=True)
    cf = tp.compile(lambda a, b: fn(F, tp, a, b), strict_native=True)
    out = cf(a, tp.tensor(target))
    out.sum().backward()
    np.testing.assert_allclose(_np(out), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert cf.stats()["fallbacks"] == 0


def test_bce_with_logits_shape_mismatch_compiled():
    cf = tp.compile(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="sum"))
    with pytest.raises(ValueError, match="must be the same as input size"):
        cf(tp.randn(3, 4), tp.rand(3, 1))


def test_logsigmoid_gradient_at_zero():
    """min(x, 0) - log1p(exp(-|x|)) has torch's values but the gradient 1 at
    x = 0 (torch: sigmoid(-0) = 0.5)."""
    v = [0.0, -30.0, 30.0, 1.5, -1.5]
    x = tp.tensor(v, requires_grad=True)
    F.logsigmoid(x).sum().backward()
    tx = torch.tensor(v, requires_grad=True)
    TF.logsigmoid(tx).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(_np(F.logsigmoid(x)), TF.logsigmoid(tx).detach().numpy(),
                               rtol=1e-6)
