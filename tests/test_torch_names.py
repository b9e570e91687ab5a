"""torch's aliases and small composites (python/tensorplay/_torch_names.py):
each against torch, eagerly, compiled and compiled with strict_native (the
composites trace into op-table ops, so no fallback kernel), gradients
through them, and torch's errors."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

NAN, INF = float("nan"), float("inf")
RNG = np.random.default_rng(7)
A = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal((3, 4)).astype(np.float32)
V = RNG.standard_normal(4).astype(np.float32)
W = RNG.standard_normal(4).astype(np.float32)
M = RNG.standard_normal((4, 5)).astype(np.float32)
BA = RNG.standard_normal((2, 3, 4)).astype(np.float32)
BB = RNG.standard_normal((2, 4, 5)).astype(np.float32)
NANS = np.array([[1.0, NAN, 3.0, -INF], [2.0, 5.0, INF, 0.0], [NAN, NAN, 1.0, 2.0]], np.float32)
P = RNG.uniform(0.05, 0.95, (3, 4)).astype(np.float32)
X4 = RNG.standard_normal((2, 6, 3, 2)).astype(np.float32)


def L(t):
    return torch if isinstance(t, torch.Tensor) else tp


def FF(t):
    return TF if isinstance(t, torch.Tensor) else F


CASES = [
    ("dot", lambda a, b: L(a).dot(a, b), (V, W)),
    ("vdot", lambda a, b: L(a).vdot(a, b), (V, W)),
    ("Tensor.dot", lambda a, b: a.dot(b), (V, W)),
    ("inner", lambda a, b: L(a).inner(a, b), (A, B)),
    ("outer", lambda a, b: L(a).outer(a, b), (V, W)),
    ("ger", lambda a, b: a.ger(b), (V, W)),
    ("addmm", lambda i, a, m: L(a).addmm(i, a, m, beta=0.5, alpha=2), (V[:1], A, M)),
    ("addmm beta0", lambda i, a, m: L(a).addmm(i * NAN, a, m, beta=0), (A[:, :1], A, M)),
    ("addmv", lambda i, a, v: L(a).addmv(i, a, v), (V[:3], A, W)),
    ("baddbmm", lambda a, b: L(a).baddbmm(a.sum(-1, keepdim=True), a, b), (BA, BB)),
    ("addbmm", lambda a, b: L(a).addbmm(a.sum((0, 2)).unsqueeze(-1), a, b, alpha=0.5), (BA, BB)),
    ("addr", lambda a, b: L(a).addr(a.outer(b), a, b, beta=2), (V, W)),
    ("trace", lambda a: L(a).trace(a), (A,)),
    ("Tensor.trace int", lambda a: (a * 10).long().trace(), (A,)),
    ("diag 2d", lambda a: L(a).diag(a, 1), (A,)),
    ("diag 1d", lambda a: L(a).diag(a), (V,)),
    ("diag 1d k", lambda a: L(a).diag(a, -2), (V,)),
    ("diag 1d k+", lambda a: a.diag(1), (V,)),
    ("addcmul", lambda a, b: L(a).addcmul(a, a, b, value=0.5), (A, B)),
    ("addcdiv", lambda a, b: a.addcdiv(b, a.abs() + 1, value=-2), (A, B)),
    ("logaddexp", lambda a, b: L(a).logaddexp(a * 50, b), (NANS, A)),
    ("logaddexp infs", lambda a: L(a).logaddexp(a, a), (NANS,)),
    ("logaddexp2", lambda a, b: L(a).logaddexp2(a, b * 40), (A, B)),
    ("xlogy", lambda a, b: L(a).xlogy(a.clamp(min=0) * (a > 0.3), b.abs()), (A, B)),
    ("xlogy nan", lambda a: L(a).xlogy(a * 0, a), (NANS,)),
    ("logit", lambda p: L(p).logit(p), (P,)),
    ("logit eps", lambda p: p.logit(eps=0.2), (P,)),
    ("hypot", lambda a, b: L(a).hypot(a * 1e30, b * 1e30), (A, B)),
    ("hypot inf", lambda a: L(a).hypot(a, a * 0), (NANS,)),
    ("deg2rad", lambda a: L(a).deg2rad(a), (A,)),
    ("rad2deg", lambda a: a.rad2deg(), (A,)),
    ("fmax", lambda a, b: L(a).fmax(a, b), (NANS, NANS[::-1].copy())),
    ("fmin", lambda a, b: L(a).fmin(a, b), (NANS, NANS[:, ::-1].copy())),
    ("isposinf", lambda a: L(a).isposinf(a), (NANS,)),
    ("isneginf", lambda a: a.isneginf(), (NANS,)),
    ("signbit", lambda a: L(a).signbit(a * (a > 0)), (A,)),
    ("sinc", lambda a: L(a).sinc(a * (a > 0)), (A,)),
    ("float_power", lambda a: L(a).float_power(a.abs(), 2.5), (A,)),
    ("nansum", lambda a: L(a).nansum(a), (NANS,)),
    ("nansum dim", lambda a: a.nansum(1), (NANS,)),
    ("nansum keepdim", lambda a: a.nansum(0, keepdim=True), (NANS,)),
    ("nanmean", lambda a: L(a).nanmean(a[:, :2], 1), (NANS,)),
    ("nanmean all", lambda a: a.nanmean(), (A,)),
    ("count_nonzero", lambda a: L(a).count_nonzero(a > 0), (A,)),
    ("count_nonzero dim", lambda a: (a > 0).count_nonzero(1), (A,)),
    ("aminmax", lambda a: tuple(L(a).aminmax(a)), (A,)),
    ("aminmax dim", lambda a: tuple(a.aminmax(dim=1, keepdim=True)), (A,)),
    ("msort", lambda a: L(a).msort(a), (A,)),
    ("take_along_dim", lambda a: L(a).take_along_dim(a, a.argsort(1), 1), (A,)),
    ("take_along_dim flat", lambda a: L(a).take_along_dim(a, a.flatten().argsort()[:3]), (A,)),
    ("ravel", lambda a: a.t().ravel(), (A,)),
    ("broadcast_to", lambda a: L(a).broadcast_to(a[:1], (3, 4)) * 2, (A,)),
    ("broadcast_tensors", lambda a: L(a).broadcast_tensors(a[:1], a[:, :1]), (A,)),
    ("tile", lambda a: a.tile((2,)), (A,)),
    ("tile more", lambda a: L(a).tile(a, (2, 1, 2)), (A,)),
    ("atleast_2d", lambda a: L(a).atleast_2d(a[0]), (A,)),
    ("hstack", lambda a: L(a).hstack([a, a]), (A,)),
    ("hstack 1d", lambda a: L(a).hstack([a, a]), (V,)),
    ("vstack", lambda a: L(a).vstack([a, a[0]]), (A,)),
    ("dstack", lambda a: L(a).dstack([a, a]), (A,)),
    ("column_stack", lambda a: L(a).column_stack([a, a[:, 0]]), (A,)),
    ("fliplr", lambda a: L(a).fliplr(a), (A,)),
    ("flipud", lambda a: a.flipud(), (A,)),
    # aliases
    ("divide", lambda a, b: L(a).divide(a, b), (A, B)),
    ("Tensor.divide", lambda a, b: a.divide(b, rounding_mode="floor"), (A, B)),
    ("multiply", lambda a, b: a.multiply(b), (A, B)),
    ("subtract", lambda a, b: L(a).subtract(a, b, alpha=2), (A, B)),
    ("negative", lambda a: a.negative(), (A,)),
    ("absolute", lambda a: L(a).absolute(a), (A,)),
    ("arccos", lambda a: (a / 3).arccos(), (A,)),
    ("arctan2", lambda a, b: L(a).arctan2(a, b), (A, B)),
    ("greater", lambda a, b: a.greater(b), (A, B)),
    ("not_equal", lambda a, b: L(a).not_equal(a, b), (A, B)),
    ("concat", lambda a, b: L(a).concat([a, b], 1), (A, B)),
    ("concatenate", lambda a, b: L(a).concatenate([a, b]), (A, B)),
    ("fix", lambda a: (a * 3).fix(), (A,)),
    # nn.functional
    ("logsigmoid", lambda a: FF(a).logsigmoid(a * 30), (A,)),
    ("softsign", lambda a: FF(a).softsign(a), (A,)),
    ("softmin", lambda a: FF(a).softmin(a, 1), (A,)),
    ("tanhshrink", lambda a: FF(a).tanhshrink(a), (A,)),
    ("softshrink", lambda a: FF(a).softshrink(a, 0.3), (A,)),
    ("hardshrink", lambda a: FF(a).hardshrink(a), (A,)),
    ("glu", lambda a: FF(a).glu(a), (A,)),
    ("glu dim", lambda a: FF(a).glu(a, 1), (X4,)),
    ("bce", lambda p, t: FF(p).binary_cross_entropy(p, t.sigmoid()), (P, A)),
    ("bce weight sum", lambda p, t: FF(p).binary_cross_entropy(p, (t > 0).float(), p, reduction="sum"), (P, A)),
    ("huber", lambda a, b: FF(a).huber_loss(a, b * 2, delta=0.7), (A, B)),
    ("huber none", lambda a, b: FF(a).huber_loss(a, b * 2, reduction="none"), (A, B)),
    ("kl_div", lambda a, p: FF(a).kl_div(a.log_softmax(1), p.softmax(1), reduction="batchmean"), (A, P)),
    ("kl_div log_target", lambda a, p: FF(a).kl_div(a.log_softmax(1), p.log_softmax(1), reduction="sum", log_target=True), (A, P)),
    ("group_norm", lambda x: FF(x).group_norm(x, 3), (X4,)),
    ("group_norm affine", lambda x, v: FF(x).group_norm(x, 2, v.repeat(2)[:6] if False else x[0, :, 0, 0], x[1, :, 0, 1]), (X4, V)),
    ("rms_norm", lambda x: FF(x).rms_norm(x, (3, 2)), (X4,)),
    ("rms_norm weight", lambda a, v: FF(a).rms_norm(a, (4,), v, eps=1e-3), (A, V)),
    ("pairwise_distance", lambda a, b: FF(a).pairwise_distance(a, b), (A, B)),
]


def _close(got, want, name):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w, name)
        return
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], name
    assert tuple(got.shape) == tuple(want.shape), name
    np.testing.assert_allclose(np.asarray(got.detach().numpy(), np.float64),
                               np.asarray(want.detach().numpy(), np.float64),
                               rtol=2e-5, atol=2e-5, equal_nan=True, err_msg=name)


# sort/argsort/flip have no native kernel (a fallback under tp.compile)
NOT_NATIVE = {"msort", "take_along_dim", "take_along_dim flat", "fliplr", "flipud"}


@pytest.mark.parametrize("name,fn,args", CASES, ids=[c[0] for c in CASES])
def test_matches_torch(name, fn, args):
    want = fn(*[torch.tensor(a) for a in args])
    modes = [("eager", fn), ("compile", tp.compile(fn))]
    if name not in NOT_NATIVE:
        modes.append(("strict", tp.compile(fn, strict_native=True)))
    for mode, f in modes:
        _close(f(*[tp.tensor(a) for a in args]), want, f"{name} ({mode})")


GRAD_CASES = [c for c in CASES if c[0] in (
    "dot", "inner", "outer", "addmm", "baddbmm", "trace", "diag 1d k", "addcmul", "addcdiv",
    "logaddexp", "xlogy", "logit", "hypot", "nansum dim", "nanmean", "take_along_dim",
    "tile", "logsigmoid", "softsign", "glu", "bce", "huber", "kl_div", "group_norm",
    "rms_norm weight", "pairwise_distance")]


@pytest.mark.parametrize("name,fn,args", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradients_match_torch(name, fn, args):
    def loss(*ts):
        r = fn(*ts)
        return (r * r.detach().tanh()).sum() if r.dim() else r
    # finite data: gradients at NaN/inf are not what these compare
    args = [A if a is NANS else a for a in args]
    ts = [torch.tensor(a, requires_grad=True) for a in args]
    loss(*ts).backward()
    for mode, f in [("eager", loss), ("compile", tp.compile(loss))]:
        ps = [tp.tensor(a, requires_grad=True) for a in args]
        f(*ps).backward()
        for p, t in zip(ps, ts):
            np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-4,
                                       err_msg=f"{name} ({mode})")


def test_aliases_are_the_same_objects():
    assert tp.divide is tp.div and tp.multiply is tp.mul and tp.concat is tp.cat
    assert tp.arccos is tp.acos and tp.not_equal is tp.ne


ERRORS = [
    ("dot 2d", lambda L: L.dot(L.ones(2, 2), L.ones(2, 2))),
    ("dot sizes", lambda L: L.dot(L.ones(3), L.ones(2))),
    ("dot dtypes", lambda L: L.dot(L.ones(3), L.ones(3, dtype=L.float64))),
    ("outer 2d", lambda L: L.outer(L.ones(2, 2), L.ones(2))),
    ("trace 1d", lambda L: L.trace(L.ones(3))),
    ("addcdiv ints", lambda L: L.addcdiv(L.ones(2), L.ones(2, dtype=L.int64),
                                         L.ones(2, dtype=L.int64))),
    ("nanmean int", lambda L: L.nanmean(L.ones(2, dtype=L.int64))),
    ("glu odd", lambda L: L.nn.functional.glu(L.ones(2, 3))),
    ("group_norm groups", lambda L: L.nn.functional.group_norm(L.ones(2, 6, 3), 4)),
    ("bce range", lambda L: L.nn.functional.binary_cross_entropy(L.ones(2) * 2, L.ones(2))),
    ("broadcast_shapes", lambda L: L.broadcast_shapes((2, 3), (4, 3))),
    ("softshrink", lambda L: L.nn.functional.softshrink(L.ones(2), -1.0)),
]


@pytest.mark.parametrize("name,fn", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_match_torch(name, fn):
    with pytest.raises(Exception) as want:
        fn(torch)
    with pytest.raises(Exception) as got:
        fn(tp)
    assert type(got.value) is type(want.value)
    assert str(got.value) == str(want.value)


def test_broadcast_shapes_value():
    assert tuple(tp.broadcast_shapes((2, 1), (3,), 1)) == tuple(
        torch.broadcast_shapes((2, 1), (3,), 1))


def test_out_argument_of_composites():
    o = tp.empty(3, 5)
    r = tp.addmm(tp.zeros(5), tp.tensor(A), tp.tensor(M), out=o)
    assert r is o
    np.testing.assert_allclose(o.numpy(), A @ M, rtol=1e-5, atol=1e-5)


MODULES = [
    ("LogSigmoid", (), (A,)), ("Softsign", (), (A,)), ("Tanhshrink", (), (A,)),
    ("Softmin", (1,), (A,)), ("Softplus", (2.0, 1.0), (A,)), ("Softshrink", (0.3,), (A,)),
    ("Hardshrink", (0.3,), (A,)), ("GLU", (1,), (X4,)), ("BCELoss", (), (P, P[::-1].copy())),
    ("HuberLoss", ("sum", 0.5), (A, B)), ("SmoothL1Loss", (None, None, "mean", 0.5), (A, B)),
    ("KLDivLoss", (None, None, "batchmean"), (A, P)), ("GroupNorm", (3, 6), (X4,)),
    ("RMSNorm", ((3, 2),), (X4,)), ("PairwiseDistance", (), (A, B)),
]


@pytest.mark.parametrize("name,ctor,args", MODULES, ids=[m[0] for m in MODULES])
def test_modules_match_torch(name, ctor, args):
    mt, mp = getattr(torch.nn, name)(*ctor), getattr(tp.nn, name)(*ctor)
    sd = {k: tp.tensor(v.detach().numpy()) for k, v in mt.state_dict().items()}
    assert sorted(sd) == sorted(mp.state_dict())
    mp.load_state_dict(sd)
    want = mt(*[torch.tensor(a) for a in args])
    for mode, m in [("eager", mp), ("compile", tp.compile(mp))]:
        _close(m(*[tp.tensor(a) for a in args]), want, f"{name} ({mode})")
