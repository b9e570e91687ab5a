"""The APIs real models needed (issue 16 item 7): one_hot, scatter family,
multinomial, typed constructors, masked_select, repeat_interleave, << >>,
finfo/iinfo, axis=/keepdims=, out=, loss modules, Flatten, normalize,
cosine_similarity, with torch's semantics and errors; compiled natively
where the op has a lowering."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def both(fn_tp, fn_t, *arrays, rtol=1e-5, atol=1e-6):
    r = fn_tp(*[tp.tensor(a) for a in arrays])
    t = fn_t(*[torch.tensor(a) for a in arrays])
    np.testing.assert_allclose(np.asarray(r.numpy(), np.float64),
                               np.asarray(t.numpy(), np.float64), rtol=rtol, atol=atol)
    assert str(r.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    return r


def same_error(fn_tp, fn_t, exc=RuntimeError):
    with pytest.raises(exc) as e1:
        fn_tp()
    with pytest.raises(exc) as e2:
        fn_t()
    assert str(e1.value) == str(e2.value)


def strict(fn):
    return tp.compile(fn, strict_native=True)


IDX = np.array([[0, 2, 1], [3, 0, 0]], np.int64)


def test_one_hot():
    both(lambda x: F.one_hot(x), lambda x: TF.one_hot(x), IDX)
    both(lambda x: F.one_hot(x, 5), lambda x: TF.one_hot(x, 5), IDX)
    cf = strict(lambda x: F.one_hot(x, 6) * 2)
    np.testing.assert_array_equal(cf(tp.tensor(IDX)).numpy(), TF.one_hot(torch.tensor(IDX), 6).numpy() * 2)
    same_error(lambda: F.one_hot(tp.tensor(IDX), 3), lambda: TF.one_hot(torch.tensor(IDX), 3))
    same_error(lambda: F.one_hot(tp.tensor([-1])), lambda: TF.one_hot(torch.tensor([-1])))
    same_error(lambda: F.one_hot(tp.tensor([1.0])), lambda: TF.one_hot(torch.tensor([1.0])))


def test_scatter_family():
    x = np.random.rand(3, 5).astype(np.float32)
    src = np.random.rand(2, 4).astype(np.float32)
    idx = np.array([[0, 1, 2, 0], [2, 0, 1, 1]], np.int64)
    both(lambda a, i, s: a.scatter(0, i, s), lambda a, i, s: a.scatter(0, i, s), x, idx, src)
    both(lambda a, i: a.scatter(1, i, 7.0), lambda a, i: a.scatter(1, i, 7.0), x, idx)
    both(lambda a, i, s: a.scatter_add(0, i, s), lambda a, i, s: a.scatter_add(0, i, s), x, idx, src)
    both(lambda a, i, s: tp.scatter(a, 0, i, s, reduce="multiply"),
         lambda a, i, s: torch.scatter(a, 0, i, s, reduce="multiply"), x, idx, src)
    a, ta = tp.tensor(x), torch.tensor(x)
    a.scatter_add_(0, tp.tensor(idx), tp.tensor(src))
    ta.scatter_add_(0, torch.tensor(idx), torch.tensor(src))
    np.testing.assert_allclose(a.numpy(), ta.numpy(), rtol=1e-6)
    both(lambda a, i, s: a.index_add(1, i, s), lambda a, i, s: a.index_add(1, i, s),
         x, np.array([0, 4, 0], np.int64), np.random.rand(3, 3).astype(np.float32))
    same_error(lambda: tp.tensor(x).scatter(0, tp.tensor(idx).float(), 1.0),
               lambda: torch.tensor(x).scatter(0, torch.tensor(idx).float(), 1.0))
    both(lambda a, i: a.scatter_add(0, i.int(), a), lambda a, i: a.scatter_add(0, i.int(), a), x, idx[:, :3] % 3)
    # gradients: scatter_add's src gets gather(grad)
    s = tp.tensor(src, requires_grad=True)
    ts = torch.tensor(src, requires_grad=True)
    (tp.tensor(x).scatter_add(0, tp.tensor(idx), s) ** 2).sum().backward()
    (torch.tensor(x).scatter_add(0, torch.tensor(idx), ts) ** 2).sum().backward()
    np.testing.assert_allclose(s.grad.numpy(), ts.grad.numpy(), rtol=1e-5)


def test_masked_select_repeat_interleave():
    x = np.random.rand(3, 4).astype(np.float32)
    m = x > 0.5
    both(lambda a, b: a.masked_select(b), lambda a, b: a.masked_select(b), x, m)
    both(lambda a, b: tp.masked_select(a, b), lambda a, b: torch.masked_select(a, b), x, m[0])
    same_error(lambda: tp.tensor(x).masked_select(tp.tensor(m).int()),
               lambda: torch.tensor(x).masked_select(torch.tensor(m).int()))
    both(lambda a: a.repeat_interleave(2), lambda a: a.repeat_interleave(2), x)
    both(lambda a: a.repeat_interleave(3, dim=1), lambda a: a.repeat_interleave(3, dim=1), x)
    both(lambda a: a.repeat_interleave(tp.tensor([1, 0, 2]), dim=0),
         lambda a: a.repeat_interleave(torch.tensor([1, 0, 2]), dim=0), x)
    both(lambda r: tp.repeat_interleave(r), lambda r: torch.repeat_interleave(r),
         np.array([2, 0, 3], np.int64))
    g = tp.tensor(x, requires_grad=True)
    tg = torch.tensor(x, requires_grad=True)
    (g.repeat_interleave(2, dim=1) * tp.arange(8.0)).sum().backward()
    (tg.repeat_interleave(2, dim=1) * torch.arange(8.0)).sum().backward()
    np.testing.assert_allclose(g.grad.numpy(), tg.grad.numpy())


def test_shifts():
    a = np.array([1, -8, 5, 1024], np.int64)
    both(lambda x: x << 2, lambda x: x << 2, a)
    both(lambda x: x >> 1, lambda x: x >> 1, a)
    both(lambda x: x >> tp.tensor([0, 1, 2, 3]), lambda x: x >> torch.tensor([0, 1, 2, 3]), a)
    both(lambda x: tp.bitwise_left_shift(x, 3), lambda x: torch.bitwise_left_shift(x, 3), a.astype(np.int32))
    x = tp.tensor(a)
    x <<= 1
    np.testing.assert_array_equal(x.numpy(), a << 1)
    cf = strict(lambda x: (x << 3) + (x >> 2))
    np.testing.assert_array_equal(cf(tp.tensor(a)).numpy(), (a << 3) + (a >> 2))


def test_finfo_iinfo():
    for dt in ("float32", "float64", "float16"):
        f, t = tp.finfo(getattr(tp, dt)), torch.finfo(getattr(torch, dt))
        for k in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution"):
            assert getattr(f, k) == getattr(t, k), (dt, k)
        assert f.dtype == t.dtype
    for dt in ("int64", "int32", "uint8", "int8"):
        i, t = tp.iinfo(getattr(tp, dt)), torch.iinfo(getattr(torch, dt))
        assert (i.bits, i.max, i.min, i.dtype) == (t.bits, t.max, t.min, t.dtype)
    assert tp.finfo().eps == torch.finfo().eps
    with pytest.raises(TypeError):
        tp.finfo(tp.int64)
    with pytest.raises(TypeError):
        tp.iinfo(tp.float32)


def test_typed_constructors():
    x = tp.LongTensor([1, 2, 3])
    assert x.dtype == tp.int64 and x.tolist() == [1, 2, 3]
    assert tp.FloatTensor([1, 2]).dtype == tp.float32
    assert tuple(tp.FloatTensor(2, 3).shape) == (2, 3)
    assert tuple(tp.DoubleTensor().shape) == (0,)
    assert isinstance(x, tp.LongTensor) and not isinstance(x, tp.FloatTensor)
    assert tp.BoolTensor([True]).dtype == tp.bool


def test_axis_keepdims_aliases():
    a = np.random.rand(3, 4).astype(np.float32)
    both(lambda x: x.sum(axis=0), lambda x: x.sum(axis=0), a)
    both(lambda x: tp.mean(x, axis=1, keepdims=True), lambda x: torch.mean(x, axis=1, keepdims=True), a)
    both(lambda x: x.amax(axis=1), lambda x: x.amax(axis=1), a)
    cf = strict(lambda x: x.sum(axis=1, keepdims=True) + x.mean(axis=0))
    np.testing.assert_allclose(cf(tp.tensor(a)).numpy(), a.sum(1, keepdims=True) + a.mean(0), rtol=1e-6)


def test_out_argument():
    a = np.random.rand(3).astype(np.float32)
    o = tp.empty(3)
    r = tp.add(tp.tensor(a), 1, out=o)
    assert r is o
    np.testing.assert_allclose(o.numpy(), a + 1)
    o2 = tp.empty(())
    tp.sum(tp.tensor(a), 0, out=o2)
    np.testing.assert_allclose(o2.numpy(), a.sum(), rtol=1e-6)
    same_error(lambda: tp.add(tp.tensor(a), 1, out=tp.empty(3, dtype=tp.int64)),
               lambda: torch.add(torch.tensor(a), 1, out=torch.empty(3, dtype=torch.int64)))
    with pytest.raises(RuntimeError, match="out="):
        tp.exp(tp.tensor(a, requires_grad=True), out=tp.empty(3))

    def f(x, buf):
        tp.mul(x, 2, out=buf)
        return buf + 1
    cf = tp.compile(f)
    b = tp.empty(3)
    np.testing.assert_allclose(cf(tp.tensor(a), b).numpy(), 2 * a + 1, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), 2 * a, rtol=1e-6)


def test_normalize_cosine_similarity():
    a = np.random.randn(4, 5).astype(np.float32)
    b = np.random.randn(4, 5).astype(np.float32)
    both(lambda x: F.normalize(x), lambda x: TF.normalize(x), a)
    both(lambda x: F.normalize(x, p=1.0, dim=0), lambda x: TF.normalize(x, p=1.0, dim=0), a)
    both(lambda x, y: F.cosine_similarity(x, y), lambda x, y: TF.cosine_similarity(x, y), a, b)
    both(lambda x, y: F.cosine_similarity(x, y, dim=0), lambda x, y: TF.cosine_similarity(x, y, dim=0), a, b)
    cf = strict(lambda x, y: F.cosine_similarity(F.normalize(x), y))
    np.testing.assert_allclose(cf(tp.tensor(a), tp.tensor(b)).numpy(),
                               TF.cosine_similarity(TF.normalize(torch.tensor(a)), torch.tensor(b)).numpy(),
                               rtol=1e-5, atol=1e-6)
    x, tx = tp.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    y, ty = tp.tensor(b, requires_grad=True), torch.tensor(b, requires_grad=True)
    (F.cosine_similarity(x, y) * tp.arange(4.0)).sum().backward()
    (TF.cosine_similarity(tx, ty) * torch.arange(4.0)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-4, atol=1e-6)
    z, tz = tp.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    (F.normalize(z) ** 3).sum().backward()
    (TF.normalize(tz) ** 3).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), tz.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_multinomial():
    tp.manual_seed(0)
    p = tp.tensor([[0.1, 0.0, 0.6, 0.3], [0.25, 0.25, 0.25, 0.25]])
    s = tp.multinomial(p, 4000, replacement=True)
    assert s.dtype == tp.int64 and tuple(s.shape) == (2, 4000)
    freq = np.stack([np.bincount(r, minlength=4) / 4000 for r in s.numpy()])
    np.testing.assert_allclose(freq, p.numpy(), atol=0.04)
    assert (s.numpy()[0] != 1).all()             # zero probability: never drawn
    w = p.multinomial(3)
    for row in w.numpy():
        assert len(set(row.tolist())) == 3       # without replacement: distinct
    assert 1 not in w.numpy()[0].tolist()
    tp.manual_seed(3)
    a = tp.multinomial(p[1], 2)
    tp.manual_seed(3)
    assert tp.multinomial(p[1], 2).tolist() == a.tolist()
    tq = torch.tensor(p.numpy())
    same_error(lambda: tp.multinomial(p, 5), lambda: torch.multinomial(tq, 5))
    same_error(lambda: tp.multinomial(tp.tensor([-1.0, 2.0]), 1),
               lambda: torch.multinomial(torch.tensor([-1.0, 2.0]), 1))
    same_error(lambda: tp.multinomial(tp.zeros(2, 2, 2), 1),
               lambda: torch.multinomial(torch.zeros(2, 2, 2), 1))


def test_loss_modules_and_flatten():
    a = np.random.randn(4, 3).astype(np.float32)
    b = np.random.randn(4, 3).astype(np.float32)
    t = np.array([0, 2, 1, 2], np.int64)
    both(lambda x, y: tp.nn.L1Loss()(x, y), lambda x, y: torch.nn.L1Loss()(x, y), a, b)
    both(lambda x, y: tp.nn.L1Loss(reduction="sum")(x, y),
         lambda x, y: torch.nn.L1Loss(reduction="sum")(x, y), a, b)
    both(lambda x, y: tp.nn.NLLLoss(ignore_index=1)(F.log_softmax(x, 1), y),
         lambda x, y: torch.nn.NLLLoss(ignore_index=1)(TF.log_softmax(x, 1), y), a, t)
    both(lambda x, y: tp.nn.BCEWithLogitsLoss()(x, y),
         lambda x, y: torch.nn.BCEWithLogitsLoss()(x, y), a, (b > 0).astype(np.float32))
    pw = np.array([1.0, 2.0, 0.5], np.float32)
    both(lambda x, y, w: tp.nn.BCEWithLogitsLoss(pos_weight=w)(x, y),
         lambda x, y, w: torch.nn.BCEWithLogitsLoss(pos_weight=w)(x, y),
         a, (b > 0).astype(np.float32), pw)
    assert isinstance(tp.nn.LeakyReLU(0.2), tp.nn.Module)
    both(lambda x: tp.nn.LeakyReLU(0.2)(x), lambda x: torch.nn.LeakyReLU(0.2)(x), a)
    x4 = np.random.rand(2, 3, 4, 5).astype(np.float32)
    both(lambda x: tp.nn.Flatten()(x), lambda x: torch.nn.Flatten()(x), x4)
    both(lambda x: tp.nn.Flatten(0, 2)(x), lambda x: torch.nn.Flatten(0, 2)(x), x4)
    both(lambda x: tp.nn.Unflatten(1, (3, 20))(tp.nn.Flatten()(x)),
         lambda x: torch.nn.Unflatten(1, (3, 20))(torch.nn.Flatten()(x)), x4)


def test_cross_entropy_ignore_index_compiled():
    a = np.random.randn(6, 4).astype(np.float32)
    t = np.array([0, 3, -100, 1, 3, -100], np.int64)
    cf = tp.compile(lambda x, y: F.cross_entropy(x, y))
    np.testing.assert_allclose(cf(tp.tensor(a), tp.tensor(t)).numpy(),
                               TF.cross_entropy(torch.tensor(a), torch.tensor(t)).numpy(), rtol=1e-5)


@pytest.mark.parametrize("n", [1, 7, 256, 300, 1000])
def test_cumsum_compiled_natively(n):
    x = np.random.default_rng(n).standard_normal((3, n)).astype(np.float32)
    cf = strict(lambda a: a.cumsum(1) * 2 + tp.cumsum(a, -1))
    np.testing.assert_allclose(cf(tp.tensor(x)).numpy(), torch.tensor(x).cumsum(1).numpy() * 3,
                               rtol=1e-4, atol=1e-4 * np.sqrt(n))
    y = x.T.copy()
    cf = strict(lambda a: tp.cumsum(a, dim=0, dtype=tp.float64))
    r = cf(tp.tensor(y))
    assert r.dtype == tp.float64
    np.testing.assert_allclose(r.numpy(), np.cumsum(y.astype(np.float64), 0), rtol=1e-9, atol=1e-9)


def test_cumsum_of_integers_still_exact():
    cf = tp.compile(lambda a: a.cumsum(0))
    np.testing.assert_array_equal(cf(tp.tensor([1, 2, 3])).numpy(), [1, 3, 6])
