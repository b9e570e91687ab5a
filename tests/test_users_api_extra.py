"""Names typical PyTorch scripts touch first (users helper, session 6):
tp.inf/nan/pi/e, set_float32_matmul_precision, tp.backends flags, meshgrid,
tensordot, kron, cross, isin, tril/triu_indices, tp.special aliases,
nn.utils.rnn.pad_sequence, utils.checkpoint and torch's module paths; each
against torch, the tensor functions also compiled under strict_native."""
import math
import warnings

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")


def test_constants_precision_backends_paths():
    assert (tp.inf, tp.pi, tp.e) == (math.inf, math.pi, math.e) and math.isnan(tp.nan)
    tp.set_float32_matmul_precision("high")
    assert tp.get_float32_matmul_precision() == "high"
    with pytest.warns(UserWarning, match="is not one of 'highest', 'high', or 'medium'"):
        tp.set_float32_matmul_precision("bogus")
    assert tp.get_float32_matmul_precision() == "high"
    tp.set_float32_matmul_precision("highest")
    tp.backends.cuda.matmul.allow_tf32 = True
    tp.backends.cudnn.allow_tf32 = True
    tp.backends.cudnn.benchmark = True
    assert tp.backends.mps.is_available() is False
    from tensorplay.nn.modules.loss import _Loss, MSELoss            # noqa: F401
    from tensorplay.nn.modules.module import Module
    from tensorplay.nn.parameter import Parameter
    assert Module is tp.nn.Module and Parameter is tp.nn.Parameter
    assert issubclass(MSELoss, tp.nn.Module)


def _both(f, *arrays, strict=True, grad=True):
    tts = [torch.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    ref = f(torch, *tts)
    outs = [f(tp, *[tp.tensor(a) for a in arrays])]
    ts = [tp.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    cf = tp.compile(lambda *xs: f(tp, *xs), strict_native=strict)
    outs.append(cf(*ts))
    refs = ref if isinstance(ref, tuple) else (ref,)
    for out in outs:
        out = out if isinstance(out, tuple) else (out,)
        assert len(out) == len(refs)
        for o, r in zip(out, refs):
            assert tuple(o.shape) == tuple(r.shape)
            np.testing.assert_allclose(o.detach().numpy(), r.detach().numpy(), rtol=1e-5,
                                       atol=1e-6)
    if grad and any(t.requires_grad for t in tts):
        sum(((r.float() if not r.is_floating_point() else r) ** 2).sum() for r in refs).backward()
        co = outs[1] if isinstance(outs[1], tuple) else (outs[1],)
        sum(((o.float() if not o.is_floating_point() else o) ** 2).sum() for o in co).backward()
        for t, q in zip(ts, tts):
            if q.grad is not None:
                np.testing.assert_allclose(t.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5)
    return cf


rng = np.random.default_rng(0)
A3 = rng.standard_normal((2, 3, 4)).astype(np.float32)
B3 = rng.standard_normal((4, 3, 5)).astype(np.float32)
V3 = rng.standard_normal((5, 3)).astype(np.float32)
W3 = rng.standard_normal((5, 3)).astype(np.float32)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing):
    x = rng.standard_normal(3).astype(np.float32)
    y = rng.standard_normal(4).astype(np.float32)
    z = rng.standard_normal(2).astype(np.float32)
    _both(lambda L, a, b, c: L.meshgrid(a, b, c, indexing=indexing), x, y, z)
    _both(lambda L, a, b: L.meshgrid([a, b], indexing=indexing), x, y)
    with pytest.warns(UserWarning, match="indexing argument"):
        tp.meshgrid(tp.tensor(x), tp.tensor(y))


@pytest.mark.parametrize("dims", [1, 2, ([0, 1], [1, 0]), ([2], [2])], ids=str)
def test_tensordot(dims):
    a = A3 if dims != 2 else rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = {1: B3, 2: rng.standard_normal((3, 4, 5)).astype(np.float32),
         str(([0, 1], [1, 0])): rng.standard_normal((3, 2, 6)).astype(np.float32),
         str(([2], [2])): rng.standard_normal((2, 3, 4)).astype(np.float32)}[
        dims if isinstance(dims, int) else str(dims)]
    _both(lambda L, x, y: L.tensordot(x, y, dims=dims), a, b)


def test_kron_cross_isin_indices():
    _both(lambda L, x, y: L.kron(x, y), rng.standard_normal((2, 3)).astype(np.float32),
          rng.standard_normal((3, 2)).astype(np.float32))
    _both(lambda L, x, y: L.kron(x, y), rng.standard_normal((2,)).astype(np.float32),
          rng.standard_normal((2, 3, 2)).astype(np.float32))
    _both(lambda L, x, y: L.linalg.cross(x, y), V3, W3)
    _both(lambda L, x, y: L.cross(x.T, y.T, dim=0), V3, W3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _both(lambda L, x, y: L.cross(x, y), V3[:3], W3[:3])
    e = rng.integers(0, 6, (3, 4))
    _both(lambda L, x, y: L.isin(x, y), e, np.array([1, 3, 5]), grad=False)
    _both(lambda L, x, y: L.isin(x, y, invert=True), e, np.array([1, 3, 5]), grad=False)
    for args in ((4, 5), (4, 5, 1), (3, 3, -1), (0, 3)):
        np.testing.assert_array_equal(tp.tril_indices(*args).numpy(),
                                      torch.tril_indices(*args).numpy())
        np.testing.assert_array_equal(tp.triu_indices(*args).numpy(),
                                      torch.triu_indices(*args).numpy())


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_sequence(batch_first, side):
    seqs = [rng.standard_normal((n, 3)).astype(np.float32) for n in (2, 5, 1)]
    ref = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in seqs], batch_first,
                                          -1.0, side)
    from tensorplay.nn.utils.rnn import pad_sequence
    out = pad_sequence([tp.tensor(s) for s in seqs], batch_first, -1.0, side)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())


def test_special_and_checkpoint():
    x = np.array([-2.0, 0.0, 0.5, 3.0], np.float32)
    p = np.array([-1.0, 0.0, 0.25, 1.0], np.float32)
    for name, arr in (("expit", x), ("logit", np.array([0.2, 0.5, 0.9], np.float32)),
                      ("erf", x), ("gammaln", np.abs(x) + 0.5), ("entr", p),
                      ("log1p", np.abs(x))):
        np.testing.assert_allclose(getattr(tp.special, name)(tp.tensor(arr)).numpy(),
                                   getattr(torch.special, name)(torch.tensor(arr)).numpy(),
                                   rtol=1e-6)
    from tensorplay.utils.checkpoint import checkpoint
    lin = tp.nn.Linear(3, 2)
    a = tp.randn(4, 3, requires_grad=True)
    checkpoint(lin, a, use_reentrant=False).sum().backward()
    g = a.grad.clone()
    a.grad = None
    lin(a).sum().backward()
    np.testing.assert_array_equal(g.numpy(), a.grad.numpy())
