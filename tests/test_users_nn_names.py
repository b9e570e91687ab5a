"""torch.nn names real model code uses that tensorplay lacked (users helper,
session 6): the remaining losses (functions and modules), PReLU, PixelShuffle
/ PixelUnshuffle, ChannelShuffle, Bilinear, CosineSimilarity, Softmax2d,
F.relu_ & co., asinh / acosh / atanh. Each against torch: value, gradient,
compiled with strict_native (no fallback)."""
import warnings

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

rng = np.random.default_rng(0)
A = rng.standard_normal((4, 5)).astype(np.float32)
B = rng.standard_normal((4, 5)).astype(np.float32)
C = rng.standard_normal((4, 5)).astype(np.float32)
SIGN = np.where(rng.random((4, 5)) > 0.5, 1.0, -1.0).astype(np.float32)
SIGN4 = SIGN[:, 0].copy()
Y01 = (rng.random((4, 5)) > 0.5).astype(np.float32)
POS = (rng.random((4, 5)) + 0.1).astype(np.float32)
CNT = rng.integers(0, 5, (4, 5)).astype(np.float32)
CLS = rng.integers(0, 5, 4)
W5 = (rng.random(5) + 0.5).astype(np.float32)

# name -> (function of (lib, F, x) where x is the differentiated input)
LOSSES = {
    "soft_margin": lambda L, F, x: F.soft_margin_loss(x, L.tensor(SIGN)),
    "margin_ranking": lambda L, F, x: F.margin_ranking_loss(x[:, 0], L.tensor(B[:, 0]),
                                                            L.tensor(SIGN4), margin=0.3),
    "hinge_embedding": lambda L, F, x: F.hinge_embedding_loss(x, L.tensor(SIGN), margin=0.7),
    "cosine_embedding": lambda L, F, x: F.cosine_embedding_loss(x, L.tensor(B), L.tensor(SIGN4),
                                                                margin=0.1),
    "cosine_embedding_1d": lambda L, F, x: F.cosine_embedding_loss(x[0], L.tensor(B[0]),
                                                                   L.tensor(-1.0)),
    "gaussian_nll": lambda L, F, x: F.gaussian_nll_loss(x, L.tensor(B), L.tensor(POS)),
    "gaussian_nll_full_vec": lambda L, F, x: F.gaussian_nll_loss(
        x, L.tensor(B), L.tensor(POS[:, 0]), full=True),
    "gaussian_nll_homo": lambda L, F, x: F.gaussian_nll_loss(x, L.tensor(B),
                                                             L.tensor(POS[:, :1] * 1e-8)),
    "poisson_nll": lambda L, F, x: F.poisson_nll_loss(x, L.tensor(CNT)),
    "poisson_nll_full": lambda L, F, x: F.poisson_nll_loss(x.abs() + 0.1, L.tensor(CNT),
                                                           log_input=False, full=True),
    "multilabel_soft_margin": lambda L, F, x: F.multilabel_soft_margin_loss(x, L.tensor(Y01)),
    "multilabel_soft_margin_w": lambda L, F, x: F.multilabel_soft_margin_loss(
        x, L.tensor(Y01), weight=L.tensor(W5)),
    "triplet": lambda L, F, x: F.triplet_margin_loss(x, L.tensor(B), L.tensor(C)),
    "triplet_swap_p1": lambda L, F, x: F.triplet_margin_loss(x, L.tensor(B), L.tensor(C),
                                                             p=1, swap=True, margin=2.0),
    "multi_margin": lambda L, F, x: F.multi_margin_loss(x, L.tensor(CLS)),
    "multi_margin_p2_w": lambda L, F, x: F.multi_margin_loss(x, L.tensor(CLS), p=2, margin=0.5,
                                                             weight=L.tensor(W5)),
    "multi_margin_1d": lambda L, F, x: F.multi_margin_loss(x[1], L.tensor(CLS[1:2])),
}


def _check(fn, reduction, strict=True):
    kw = {} if reduction is None else {"reduction": reduction}
    tx = torch.tensor(A, requires_grad=True)
    ref = fn(torch, _KW(TF, kw), tx)
    ref.sum().backward()
    x = tp.tensor(A, requires_grad=True)
    out = fn(tp, _KW(F, kw), x)
    assert tuple(out.shape) == tuple(ref.shape)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)
    x2 = tp.tensor(A, requires_grad=True)
    cf = tp.compile(lambda t: fn(tp, _KW(F, kw), t), strict_native=strict)
    c = cf(x2)
    np.testing.assert_allclose(c.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    c.sum().backward()
    np.testing.assert_allclose(x2.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)


class _KW:
    """F with reduction= added to every call."""

    def __init__(self, mod, kw):
        self.mod, self.kw = mod, kw

    def __getattr__(self, name):
        f = getattr(self.mod, name)
        return lambda *a, **k: f(*a, **{**self.kw, **k})


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_losses_like_torch_eager_compiled_grad(name, reduction):
    _check(LOSSES[name], reduction)


@pytest.mark.parametrize("cls,args,kw", [
    ("SoftMarginLoss", ("a", "sign"), {}), ("MarginRankingLoss", ("a0", "b0", "sign4"),
                                           {"margin": 0.2}),
    ("HingeEmbeddingLoss", ("a", "sign"), {"margin": 2.0}),
    ("CosineEmbeddingLoss", ("a", "b", "sign4"), {"margin": 0.2}),
    ("GaussianNLLLoss", ("a", "b", "pos"), {"full": True}), ("PoissonNLLLoss", ("a", "cnt"), {}),
    ("MultiLabelSoftMarginLoss", ("a", "y01"), {}),
    ("TripletMarginLoss", ("a", "b", "c"), {"margin": 0.5}),
    ("MultiMarginLoss", ("a", "cls"), {"p": 2}),
    ("MultiMarginLoss", ("a", "cls"), {"reduction": "sum"}),
])
def test_loss_modules(cls, args, kw):
    data = {"a": A, "b": B, "c": C, "sign": SIGN, "sign4": SIGN4, "pos": POS, "cnt": CNT,
            "y01": Y01, "cls": CLS, "a0": A[:, 0].copy(), "b0": B[:, 0].copy()}
    ref = getattr(torch.nn, cls)(**kw)(*[torch.tensor(data[a]) for a in args])
    m = getattr(tp.nn, cls)(**kw)
    out = m(*[tp.tensor(data[a]) for a in args])
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    cm = tp.compile(m, strict_native=True)
    np.testing.assert_allclose(cm(*[tp.tensor(data[a]) for a in args]).numpy(), ref.numpy(),
                               rtol=1e-5, atol=1e-6)


def test_loss_errors_like_torch():
    with pytest.raises(ValueError, match="var is of incorrect size"):
        F.gaussian_nll_loss(tp.ones(4, 5), tp.ones(4, 5), tp.ones(3))
    with pytest.raises(ValueError, match="var has negative entry"):
        F.gaussian_nll_loss(tp.ones(4, 5), tp.ones(4, 5), -tp.ones(4, 5))
    with pytest.raises(ValueError, match="only p == 1 and p == 2 supported"):
        F.multi_margin_loss(tp.ones(4, 5), tp.zeros(4, dtype=tp.int64), p=3)
    with pytest.raises(RuntimeError, match="All input tensors should have same dimension"):
        F.margin_ranking_loss(tp.ones(4), tp.ones(4, 1), tp.ones(4))
    with pytest.raises(ValueError, match="bogus is not a valid value for reduction"):
        F.soft_margin_loss(tp.ones(4), tp.ones(4), reduction="bogus")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = F.soft_margin_loss(tp.tensor(A), tp.tensor(SIGN), size_average=False)
        tr = TF.soft_margin_loss(torch.tensor(A), torch.tensor(SIGN), size_average=False)
    np.testing.assert_allclose(r.numpy(), tr.numpy(), rtol=1e-5)


X4 = rng.standard_normal((2, 8, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("case", ["prelu1", "prelu8", "pixel_shuffle", "pixel_unshuffle",
                                  "channel_shuffle", "softmax2d", "cosine_sim", "bilinear"])
def test_layers_like_torch(case):
    torch.manual_seed(0)
    if case.startswith("prelu"):
        n = int(case[5:])
        tm = torch.nn.PReLU(n, init=0.1)
        with torch.no_grad():
            tm.weight.copy_(torch.linspace(-0.5, 0.5, n))
        m = tp.nn.PReLU(n)
        x = X4.copy()
        x[0, 0, 0, :2] = 0.0                       # the kink: torch's gradient takes w there
    elif case == "pixel_shuffle":
        tm, m, x = torch.nn.PixelShuffle(2), tp.nn.PixelShuffle(2), X4
    elif case == "pixel_unshuffle":
        tm, m = torch.nn.PixelUnshuffle(2), tp.nn.PixelUnshuffle(2)
        x = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    elif case == "channel_shuffle":
        tm, m, x = torch.nn.ChannelShuffle(4), tp.nn.ChannelShuffle(4), X4
    elif case == "softmax2d":
        tm, m, x = torch.nn.Softmax2d(), tp.nn.Softmax2d(), X4
    elif case == "cosine_sim":
        tm, m, x = torch.nn.CosineSimilarity(dim=1), tp.nn.CosineSimilarity(dim=1), X4
    else:
        tm, m = torch.nn.Bilinear(4, 3, 5), tp.nn.Bilinear(4, 3, 5)
        x = rng.standard_normal((2, 6, 4)).astype(np.float32)
    m.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x2 = rng.standard_normal((2, 6, 3)).astype(np.float32)
    extra = {"cosine_sim": (X4[::-1].copy(),), "bilinear": (x2,)}.get(case, ())
    tx = torch.tensor(x, requires_grad=True)
    ref = tm(tx, *[torch.tensor(e) for e in extra])
    (ref * ref).sum().backward()
    for run in ("eager", "compiled"):
        xx = tp.tensor(x, requires_grad=True)
        f = m if run == "eager" else tp.compile(m, strict_native=True)
        out = f(xx, *[tp.tensor(e) for e in extra])
        assert tuple(out.shape) == tuple(ref.shape)
        np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
        (out * out).sum().backward()
        np.testing.assert_allclose(xx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
        for (n, p), (tn, q) in zip(m.named_parameters(), tm.named_parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5)
            p.grad = None


def test_layer_errors_like_torch():
    for f, args in ((F.pixel_shuffle, (tp.ones(2, 5, 2, 2), 2)),
                    (F.pixel_unshuffle, (tp.ones(2, 5, 3, 2), 2)),
                    (F.channel_shuffle, (tp.ones(2, 5, 2), 2)),
                    (F.prelu, (tp.ones(2, 5), tp.ones(3)))):
        tf = getattr(TF, f.__name__) if f is not F.channel_shuffle else torch.channel_shuffle
        targs = [torch.ones(*a.shape) if isinstance(a, tp.Tensor) else a for a in args]
        with pytest.raises(RuntimeError) as te:
            tf(*targs)
        with pytest.raises(RuntimeError) as ee:
            f(*args)
        assert str(ee.value) == str(te.value)


@pytest.mark.parametrize("name", ["relu_", "leaky_relu_", "elu_", "selu_", "celu_",
                                  "hardtanh_"])
def test_functional_inplace_activations(name):
    x = tp.tensor(A.copy())
    r = getattr(F, name)(x)
    assert r is x
    np.testing.assert_allclose(x.numpy(), getattr(TF, name)(torch.tensor(A.copy())).numpy(),
                               rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["asinh", "acosh", "atanh"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_inverse_hyperbolic(name, dtype):
    v = {"asinh": [0.0, 1e-8, -1e-3, 0.5, -3.0, 1e5, -1e30, float("inf")],
         "acosh": [1.0, 1.0 + 1e-6, 1.5, 10.0, 1e30, 0.5, float("inf")],
         "atanh": [0.0, 1e-8, -0.5, 0.9, 0.999999, 1.0, -1.0, 1.5]}[name]
    td = getattr(torch, dtype)
    ref = getattr(torch, name)(torch.tensor(v, dtype=td))
    x = tp.tensor(v, dtype=getattr(tp, dtype))
    tol = dict(rtol=2e-6 if dtype == "float32" else 1e-13, atol=0)
    for out in (getattr(tp, name)(x), getattr(x, name)(),
                tp.compile(lambda t: getattr(tp, name)(t), strict_native=True)(x)):
        np.testing.assert_allclose(out.numpy(), ref.numpy(), **tol)
    y = x.clone()
    getattr(y, name + "_")()
    np.testing.assert_allclose(y.numpy(), ref.numpy(), **tol)
    ok = [a for a in v if np.isfinite(getattr(np, "arc" + name[1:])(a))
          and abs(a) < 1e20 and (name != "acosh" or a > 1) and (name != "atanh" or abs(a) < 1)]
    tx = torch.tensor(ok, dtype=td, requires_grad=True)
    getattr(torch, name)(tx).sum().backward()
    xx = tp.tensor(ok, dtype=getattr(tp, dtype), requires_grad=True)
    getattr(tp, name)(xx).sum().backward()
    np.testing.assert_allclose(xx.grad.numpy(), tx.grad.numpy(), rtol=1e-5)
    assert tp.asinh(tp.tensor([1, 2])).dtype == tp.float32
