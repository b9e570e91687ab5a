"""Issue 16's remaining API gaps: the scatter family (scatter_reduce,
index_copy, index_fill new), masked_select, repeat_interleave, multinomial,
one_hot(-1), integer cumsum and the loss variants compiled natively
(strict_native=True) through trace-time decompositions
(tensorplay/_native_decomps.py); eager against torch, compiled against
eager, gradients against torch."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def close(r, t, rtol=1e-5, atol=1e-6):
    r = r.detach().numpy() if hasattr(r, "numpy") else np.asarray(r)
    t = t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)
    assert r.shape == t.shape, (r.shape, t.shape)
    np.testing.assert_allclose(np.asarray(r, np.float64), np.asarray(t, np.float64),
                               rtol=rtol, atol=atol)


def same_error(fn_tp, fn_t, exc=RuntimeError):
    with pytest.raises(exc) as e1:
        fn_tp()
    with pytest.raises(exc) as e2:
        fn_t()
    assert str(e1.value) == str(e2.value)


def strict(fn):
    return tp.compile(fn, strict_native=True)


def check_compiled(fn, *args, rtol=1e-5, atol=1e-6):
    """fn compiled with strict_native=True against fn eager."""
    e = fn(*args)
    c = strict(fn)(*args)
    assert c.dtype == e.dtype
    close(c, e, rtol, atol)
    return c


RNG = np.random.default_rng(16)
X = RNG.standard_normal((4, 6)).astype(np.float32)
SRC = RNG.standard_normal((3, 5)).astype(np.float32)
IDX0 = np.array([[0, 1, 3, 0, 2], [3, 0, 1, 1, 2], [2, 2, 2, 0, 1]], np.int64)   # dim 0, < 4
IDX1 = np.array([[5, 0, 5, 1], [2, 2, 3, 0], [4, 1, 0, 0]], np.int64)            # dim 1, < 6


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim,idx", [(0, IDX0), (1, IDX1)])
def test_scatter_reduce_eager_compiled(reduce, include_self, dim, idx):
    def f(mod):
        def g(x, i, s):
            return x.scatter_reduce(dim, i, s, reduce, include_self=include_self)
        return g
    r = f(tp)(tp.tensor(X), tp.tensor(idx), tp.tensor(SRC))
    t = f(torch)(torch.tensor(X), torch.tensor(idx), torch.tensor(SRC))
    close(r, t)
    check_compiled(f(tp), tp.tensor(X), tp.tensor(idx), tp.tensor(SRC))
    xi, si = (X * 10).astype(np.int64), (SRC * 10).astype(np.int64)
    r = tp.scatter_reduce(tp.tensor(xi), dim, tp.tensor(idx), tp.tensor(si), reduce,
                          include_self=include_self)
    t = torch.scatter_reduce(torch.tensor(xi), dim, torch.tensor(idx), torch.tensor(si),
                             reduce, include_self=include_self)
    assert r.dtype == tp.int64
    close(r, t, 0, 0)
    check_compiled(f(tp), tp.tensor(xi), tp.tensor(idx), tp.tensor(si), rtol=0, atol=0)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_gradients(reduce, include_self):
    x = X.copy()
    s = SRC.copy()
    s[0, 1] = 0.0                       # a zero for prod's gradient
    s[1, 0] = x[3, 0] = 5.0             # a tie for amax's split
    a, b = tp.tensor(x, requires_grad=True), tp.tensor(s, requires_grad=True)
    ta, tb = torch.tensor(x, requires_grad=True), torch.tensor(s, requires_grad=True)
    w = RNG.standard_normal(x.shape).astype(np.float32)
    (a.scatter_reduce(0, tp.tensor(IDX0), b, reduce, include_self=include_self)
     * tp.tensor(w)).sum().backward()
    (ta.scatter_reduce(0, torch.tensor(IDX0), tb, reduce, include_self=include_self)
     * torch.tensor(w)).sum().backward()
    close(a.grad, ta.grad, 1e-5, 1e-5)
    close(b.grad, tb.grad, 1e-5, 1e-5)


def test_scatter_reduce_errors():
    x, i, s = tp.tensor(X), tp.tensor(IDX0), tp.tensor(SRC)
    tx, ti, ts = torch.tensor(X), torch.tensor(IDX0), torch.tensor(SRC)
    same_error(lambda: x.scatter_reduce(0, i, s, "add"), lambda: tx.scatter_reduce(0, ti, ts, "add"))
    close(x.scatter_reduce(0, i, s, "max"), tx.scatter_reduce(0, ti, ts, "max"))   # torch's alias
    close(strict(lambda a, j, b: a.scatter_reduce(0, j, b, "min"))(x, i, s),
          tx.scatter_reduce(0, ti, ts, "min"))
    same_error(lambda: x.scatter_reduce(0, i + 4, s, "sum"),
               lambda: tx.scatter_reduce(0, ti + 4, ts, "sum"))
    y = x.clone()
    y.scatter_reduce_(0, i, s, "amax")
    tx.scatter_reduce_(0, ti, ts, "amax")
    close(y, tx)


def test_scatter_scatter_add_compiled():
    x, i, s = tp.tensor(X), tp.tensor(IDX0), tp.tensor(SRC)
    check_compiled(lambda a, j, b: a.scatter(0, j, b), x, i, s)
    check_compiled(lambda a, j, b: a.scatter(1, j[:, :4].clamp(max=5), 2.5), x, i, s)
    check_compiled(lambda a, j, b: a.scatter_add(0, j, b) * 2, x, i, s)
    check_compiled(lambda a, j, b: tp.scatter(a, 0, j, b, reduce="multiply"), x, i, s)
    check_compiled(lambda a, j, b: tp.scatter(a, 0, j, b, reduce="add"), x, i, s)
    check_compiled(lambda a, j, b: a.scatter_add(0, j.int(), b), x, i, s)
    # scatter's duplicates: the last writer wins, as torch's CPU kernel
    r = strict(lambda a, j, b: a.scatter(0, j, b))(x, i, s)
    close(r, torch.tensor(X).scatter(0, torch.tensor(IDX0), torch.tensor(SRC)))


def test_scatter_add_compiled_gradient():
    s = tp.tensor(SRC, requires_grad=True)
    x = tp.tensor(X, requires_grad=True)
    ts, tx = torch.tensor(SRC, requires_grad=True), torch.tensor(X, requires_grad=True)
    cf = strict(lambda a, j, b: (a.scatter_add(0, j, b) ** 2).sum())
    cf(x, tp.tensor(IDX0), s).backward()
    (tx.scatter_add(0, torch.tensor(IDX0), ts) ** 2).sum().backward()
    close(s.grad, ts.grad, 1e-5, 1e-5)
    close(x.grad, tx.grad, 1e-5, 1e-5)


def test_compiled_index_out_of_range_is_eagers_error():
    cf = tp.compile(lambda a, j, b: a.scatter_add(0, j, b))
    x, s = tp.tensor(X), tp.tensor(SRC)
    cf(x, tp.tensor(IDX0), s)
    with pytest.raises(RuntimeError, match="out of bounds"):
        cf(x, tp.tensor(IDX0 + 3), s)
    ci = tp.compile(lambda a, j, b: a.index_add(0, j, b))
    ci(x, tp.tensor([0, 1, 3]), tp.tensor(SRC[:, :]).repeat(1, 2)[:, :6])
    with pytest.raises(IndexError):
        ci(x, tp.tensor([0, 9, 3]), tp.tensor(SRC).repeat(1, 2)[:, :6])


def test_index_add_copy_fill():
    src = RNG.standard_normal((4, 3)).astype(np.float32)
    j = np.array([5, 0, 5], np.int64)
    for name, args in (("index_add", (1, j, src)), ("index_copy", (1, np.array([5, 0, 2]), src)),
                       ("index_fill", (1, j, -2.0))):
        ta = [torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        pa = [tp.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        close(getattr(tp.tensor(X), name)(*pa), getattr(torch.tensor(X), name)(*ta))
        close(getattr(tp, name)(tp.tensor(X), *pa), getattr(torch, name)(torch.tensor(X), *ta))
        y, ty = tp.tensor(X), torch.tensor(X)
        getattr(y, name + "_")(*pa)
        getattr(ty, name + "_")(*ta)
        close(y, ty)
    xs = tp.tensor(X)
    check_compiled(lambda a, k, b: a.index_add(1, k, b, alpha=2.0), xs, tp.tensor(j), tp.tensor(src))
    check_compiled(lambda a, k, b: a.index_add(0, k, b),
                   tp.tensor((X * 9).astype(np.int32)), tp.tensor([3, 3, 1]),
                   tp.tensor((SRC[:, :6 - 0] * 9).astype(np.int32).repeat(2, 1)[:, :6]),
                   rtol=0, atol=0)
    check_compiled(lambda a, k, b: a.index_copy(1, k, b), xs, tp.tensor([5, 0, 2]), tp.tensor(src))
    check_compiled(lambda a, k: a.index_fill(1, k, -2.0), xs, tp.tensor(j))
    check_compiled(lambda a, k: a.index_fill(0, k, tp.tensor(7.0)), xs, tp.tensor([1]))
    tx = torch.tensor(X)
    same_error(lambda: xs.index_fill(1, tp.tensor([6]), 1.0), lambda: tx.index_fill(1, torch.tensor([6]), 1.0),
               IndexError)
    same_error(lambda: xs.index_copy(0, tp.tensor([1]), tp.tensor(src)),
               lambda: tx.index_copy(0, torch.tensor([1]), torch.tensor(src)))


def test_index_copy_fill_gradients():
    src = RNG.standard_normal((4, 3)).astype(np.float32)
    a, b = tp.tensor(X, requires_grad=True), tp.tensor(src, requires_grad=True)
    ta, tb = torch.tensor(X, requires_grad=True), torch.tensor(src, requires_grad=True)
    w = RNG.standard_normal(X.shape).astype(np.float32)
    ((a.index_copy(1, tp.tensor([5, 0, 2]), b) * tp.tensor(w)).sum()
     + (a.index_fill(1, tp.tensor([1]), 3.0) ** 2).sum()).backward()
    ((ta.index_copy(1, torch.tensor([5, 0, 2]), tb) * torch.tensor(w)).sum()
     + (ta.index_fill(1, torch.tensor([1]), 3.0) ** 2).sum()).backward()
    close(a.grad, ta.grad)
    close(b.grad, tb.grad)


def test_masked_select_compiled():
    m = X > 0.2
    r = check_compiled(lambda a, k: a.masked_select(k) * 2, tp.tensor(X), tp.tensor(m))
    close(r, torch.tensor(X).masked_select(torch.tensor(m)) * 2)
    check_compiled(lambda a, k: tp.masked_select(a, k), tp.tensor(X), tp.tensor(m[0]))
    cf = strict(lambda a, k: a.masked_select(k))
    close(cf(tp.tensor(X), tp.tensor(X > 5.0)), np.zeros(0, np.float32))
    # a new count is a new version (a value gate), not a fallback
    for thr in (0.0, 0.5, 1.0):
        close(cf(tp.tensor(X), tp.tensor(X > thr)), X[X > thr])
    big = RNG.standard_normal(3000).astype(np.float32)
    close(cf(tp.tensor(big), tp.tensor(big > 0)), big[big > 0])


def test_repeat_interleave_compiled():
    x = tp.tensor(X)
    check_compiled(lambda a: a.repeat_interleave(3, dim=1), x)
    check_compiled(lambda a: a.repeat_interleave(2), x)
    check_compiled(lambda a: a.repeat_interleave(2, dim=-2) + 1, x)
    r = check_compiled(lambda a, k: a.repeat_interleave(k, dim=0), x, tp.tensor([1, 0, 3, 2]))
    close(r, torch.tensor(X).repeat_interleave(torch.tensor([1, 0, 3, 2]), dim=0))
    check_compiled(lambda a, k: a.repeat_interleave(k), tp.tensor(X[0]), tp.tensor([1, 0, 3, 2, 1, 1]))
    check_compiled(lambda k: tp.repeat_interleave(k), tp.tensor([2, 0, 3]))
    check_compiled(lambda a, k: a.repeat_interleave(k, dim=1, output_size=9),
                   x, tp.tensor([2, 0, 3, 1, 1, 2]))
    g = tp.tensor(X, requires_grad=True)
    tg = torch.tensor(X, requires_grad=True)
    (strict(lambda a: a.repeat_interleave(2, dim=1))(g) * tp.arange(12.0)).sum().backward()
    (tg.repeat_interleave(2, dim=1) * torch.arange(12.0)).sum().backward()
    close(g.grad, tg.grad)


def test_multinomial_compiled_equals_eager():
    p = tp.tensor(np.abs(RNG.standard_normal((3, 9))).astype(np.float32))
    p[0, 2] = 0.0
    for repl, ns in ((True, 1), (True, 50), (False, 1), (False, 4)):
        def f(q):
            return tp.multinomial(q, ns, replacement=repl)
        tp.manual_seed(7)
        e1, e2 = f(p), f(p[1])
        cf = strict(f)
        tp.manual_seed(7)
        c1, c2 = cf(p), cf(p[1])
        assert c1.dtype == tp.int64 and tuple(c1.shape) == (3, ns)
        assert c1.tolist() == e1.tolist() and c2.tolist() == e2.tolist()
        assert 2 not in c1.tolist()[0]
        if not repl:
            assert all(len(set(row)) == ns for row in c1.tolist())
    cf = tp.compile(lambda q: q.multinomial(2))
    cf(p)
    with pytest.raises(RuntimeError, match="probability tensor contains"):
        cf(p * -1.0)


def test_one_hot_inferred_classes_compiled():
    idx = np.array([[0, 2, 1], [3, 0, 0]], np.int64)
    cf = strict(lambda a: F.one_hot(a) * 2)
    close(cf(tp.tensor(idx)), TF.one_hot(torch.tensor(idx)) * 2, 0, 0)
    close(cf(tp.tensor(idx + 2)), TF.one_hot(torch.tensor(idx + 2)) * 2, 0, 0)


@pytest.mark.parametrize("n", [1, 5, 64, 65, 300])
@pytest.mark.parametrize("dt", ["int64", "int32", "bool", "uint8"])
def test_integer_cumsum_compiled(n, dt):
    a = RNG.integers(-50, 50, (3, n))
    a = (a > 0) if dt == "bool" else a.astype(dt)
    x = tp.tensor(a)
    r = check_compiled(lambda v: v.cumsum(1), x, rtol=0, atol=0)
    close(r, torch.tensor(a).cumsum(1), 0, 0)
    assert str(r.dtype) == str(torch.tensor(a).cumsum(1).dtype).replace("torch", "tensorplay")
    check_compiled(lambda v: tp.cumsum(v.t(), 0, dtype=tp.int32), x, rtol=0, atol=0)


LOSS_CASES = [
    dict(),
    dict(reduction="sum"),
    dict(reduction="none"),
    dict(ignore_index=2),
    dict(ignore_index=2, reduction="sum"),
    dict(weight=True),
    dict(weight=True, reduction="none"),
    dict(weight=True, ignore_index=1),
]


@pytest.mark.parametrize("kw", LOSS_CASES)
@pytest.mark.parametrize("ls", [0.0, 0.2])
def test_cross_entropy_nll_variants_compiled(kw, ls):
    x = RNG.standard_normal((6, 4)).astype(np.float32)
    t = np.array([0, 3, 2, 1, 2, 1], np.int64)
    w = np.array([0.5, 2.0, 1.0, 3.0], np.float32)
    kw = dict(kw)
    if kw.pop("weight", False):
        kw_tp, kw_t = dict(kw, weight=tp.tensor(w)), dict(kw, weight=torch.tensor(w))
    else:
        kw_tp, kw_t = dict(kw), dict(kw)
    a, ta = tp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    cf = strict(lambda v, y: F.cross_entropy(v, y, label_smoothing=ls, **kw_tp))
    r = cf(a, tp.tensor(t))
    rt = TF.cross_entropy(ta, torch.tensor(t), label_smoothing=ls, **kw_t)
    close(r, rt, 1e-5, 1e-6)
    (r * 1.5).sum().backward()
    (rt * 1.5).sum().backward()
    close(a.grad, ta.grad, 1e-5, 1e-6)
    if not ls:
        cn = strict(lambda v, y: F.nll_loss(F.log_softmax(v, 1), y, **kw_tp))
        close(cn(tp.tensor(x), tp.tensor(t)),
              TF.nll_loss(TF.log_softmax(torch.tensor(x), 1), torch.tensor(t), **kw_t))


def test_cross_entropy_spatial_and_probabilities_compiled():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    t = RNG.integers(0, 3, (2, 4))
    cf = strict(lambda v, y: F.cross_entropy(v, y, reduction="none", label_smoothing=0.1))
    close(cf(tp.tensor(x), tp.tensor(t)),
          TF.cross_entropy(torch.tensor(x), torch.tensor(t), reduction="none", label_smoothing=0.1))
    pr = np.abs(RNG.standard_normal((2, 3, 4))).astype(np.float32)
    cf = strict(lambda v, y: F.cross_entropy(v, y, label_smoothing=0.3))
    close(cf(tp.tensor(x), tp.tensor(pr)),
          TF.cross_entropy(torch.tensor(x), torch.tensor(pr), label_smoothing=0.3))
    cf = strict(lambda v, y: F.cross_entropy(v, y))
    close(cf(tp.tensor(x[0, :, 0]), tp.tensor(np.int64(2))),
          TF.cross_entropy(torch.tensor(x[0, :, 0]), torch.tensor(2)))


class _TinyLM(tp.nn.Module):
    """A generate()-style model whose forward reads the length with len() or
    numel() (issue 16 item 1: those must stay symbolic under dynamic shapes)."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode
        self.emb = tp.nn.Embedding(11, 8)
        self.pos = tp.nn.Embedding(64, 8)
        self.head = tp.nn.Linear(8, 11)

    def forward(self, idx):
        t = len(idx) if self.mode == "len" else idx.numel()
        pos = tp.arange(t)
        h = self.emb(idx) + self.pos(pos)
        h = h * (tp.arange(t) + 1.0).unsqueeze(1) / t
        return self.head(h)[-1]


@pytest.mark.parametrize("mode", ["len", "numel"])
def test_generate_loop_with_len_or_numel_two_versions(mode):
    tp.manual_seed(0)
    m = _TinyLM(mode)
    cm = tp.compile(m)
    idx = tp.tensor([1, 2])
    for _ in range(12):
        logits = cm(idx)
        close(logits, m(idx), 1e-5, 1e-6)
        nxt = tp.multinomial(F.softmax(logits, -1), 1)
        idx = tp.cat([idx, nxt])
    assert len(cm.versions) <= 2


@pytest.mark.parametrize("mode", ["len", "numel", "size"])
def test_len_numel_symbolic_under_dynamic(mode):
    def f(x):
        n = len(x) if mode == "len" else (x.numel() // 2 if mode == "numel" else x.size(0))
        return (x * 2)[: n - 1] + n
    cf = tp.compile(f, dynamic=True)
    for n in range(3, 10):
        x = tp.ones(n, 2)
        close(cf(x), f(x))
    assert len(cf.versions) == 1
    assert len([1, 2, 3]) == 3 and len("ab") == 2     # the builtin is back after tracing


# ------------------------------------------------ max pooling with indices

@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=2, stride=1, dilation=2),
                                dict(kernel_size=3, stride=2, ceil_mode=True)])
def test_max_pool2d_return_indices(kw):
    x = RNG.standard_normal((2, 3, 7, 6)).astype(np.float32)
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = 9.0               # a tie: the first maximum
    r, i = F.max_pool2d(tp.tensor(x), return_indices=True, **kw)
    tr, ti = TF.max_pool2d(torch.tensor(x), return_indices=True, **kw)
    close(r, tr)
    assert i.dtype == tp.int64
    close(i, ti, 0, 0)
    m = tp.nn.MaxPool2d(return_indices=True, **kw)
    tm = torch.nn.MaxPool2d(return_indices=True, **kw)
    close(m(tp.tensor(x))[1], tm(torch.tensor(x))[1], 0, 0)
    cf = strict(lambda a: F.max_pool2d(a, return_indices=True, **kw))
    cr, ci = cf(tp.tensor(x))
    close(cr, tr)
    close(ci, ti, 0, 0)
    if "dilation" in kw:
        return                          # max_unpool2d has no dilation
    # unpool: the inverse, eager and compiled
    u = F.max_unpool2d(r, i, kw["kernel_size"], kw.get("stride"), kw.get("padding", 0),
                       output_size=x.shape[-2:])
    tu = TF.max_unpool2d(tr, ti, kw["kernel_size"], kw.get("stride"), kw.get("padding", 0),
                         output_size=x.shape[-2:])
    close(u, tu)
    cu = strict(lambda a, j: F.max_unpool2d(a, j, kw["kernel_size"], kw.get("stride"),
                                            kw.get("padding", 0), output_size=x.shape[-2:]))
    close(cu(r, i), tu)


def test_max_pool1d_return_indices_and_unpool_module():
    x = RNG.standard_normal((2, 3, 9)).astype(np.float32)
    r, i = F.max_pool1d(tp.tensor(x), 3, 2, 1, return_indices=True)
    tr, ti = TF.max_pool1d(torch.tensor(x), 3, 2, 1, return_indices=True)
    close(r, tr)
    close(i, ti, 0, 0)
    close(tp.nn.MaxUnpool1d(3, 2, 1)(r, i), torch.nn.MaxUnpool1d(3, 2, 1)(tr, ti))
    y = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    r2, i2 = tp.nn.MaxPool2d(2, return_indices=True)(tp.tensor(y))
    tr2, ti2 = torch.nn.MaxPool2d(2, return_indices=True)(torch.tensor(y))
    close(tp.nn.MaxUnpool2d(2)(r2, i2), torch.nn.MaxUnpool2d(2)(tr2, ti2))
    g = tp.tensor(x, requires_grad=True)
    tg = torch.tensor(x, requires_grad=True)
    (F.max_pool1d(g, 3, 2, 1, return_indices=True)[0] ** 2).sum().backward()
    (TF.max_pool1d(tg, 3, 2, 1, return_indices=True)[0] ** 2).sum().backward()
    close(g.grad, tg.grad)
    same_error(lambda: F.max_unpool2d(r2, i2.int(), 2), lambda: TF.max_unpool2d(tr2, ti2.int(), 2))


# ------------------------------------------------ nn.MultiheadAttention options

def _mha_pair(**kw):
    tp.manual_seed(0)
    torch.manual_seed(0)
    m = tp.nn.MultiheadAttention(8, 2, **kw)
    t = torch.nn.MultiheadAttention(8, 2, **kw)
    assert list(m.state_dict()) == list(t.state_dict())
    m.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    return m, t


@pytest.mark.parametrize("kw", [dict(), dict(kdim=5, vdim=3), dict(add_bias_kv=True),
                                dict(add_zero_attn=True), dict(batch_first=True),
                                dict(kdim=5, vdim=3, add_bias_kv=True, add_zero_attn=True,
                                     batch_first=True)])
@pytest.mark.parametrize("avg", [True, False])
def test_multihead_attention_options(kw, avg):
    m, t = _mha_pair(**kw)
    bf = kw.get("batch_first", False)
    L, S, N = 4, 6, 3
    shp = (lambda a, b: (N, a, b)) if bf else (lambda a, b: (a, N, b))
    q = RNG.standard_normal(shp(L, 8)).astype(np.float32)
    k = RNG.standard_normal(shp(S, kw.get("kdim", 8))).astype(np.float32)
    v = RNG.standard_normal(shp(S, kw.get("vdim", 8))).astype(np.float32)
    kpm = np.zeros((N, S), bool)
    kpm[1, -2:] = True
    am = np.triu(np.ones((L, S), bool), 3)
    args = dict(key_padding_mask=kpm, attn_mask=am, average_attn_weights=avg)
    r, w = m(tp.tensor(q), tp.tensor(k), tp.tensor(v),
             **{a: (tp.tensor(b) if isinstance(b, np.ndarray) else b) for a, b in args.items()})
    tr, tw = t(torch.tensor(q), torch.tensor(k), torch.tensor(v),
               **{a: (torch.tensor(b) if isinstance(b, np.ndarray) else b) for a, b in args.items()})
    close(r, tr, 1e-5, 1e-5)
    close(w, tw, 1e-5, 1e-5)
    r2, w2 = m(tp.tensor(q), tp.tensor(k), tp.tensor(v), need_weights=False)
    assert w2 is None
    close(r2, t(torch.tensor(q), torch.tensor(k), torch.tensor(v), need_weights=False)[0], 1e-5, 1e-5)
    cm = tp.compile(lambda a, b, c, d: m(a, b, c, key_padding_mask=d, average_attn_weights=avg),
                    strict_native=True)
    cr, cw = cm(tp.tensor(q), tp.tensor(k), tp.tensor(v), tp.tensor(kpm))
    er, ew = m(tp.tensor(q), tp.tensor(k), tp.tensor(v), key_padding_mask=tp.tensor(kpm),
               average_attn_weights=avg)
    close(cr, er, 1e-5, 1e-6)
    close(cw, ew, 1e-5, 1e-6)


def test_multihead_attention_gradients_with_bias_kv():
    m, t = _mha_pair(kdim=5, vdim=3, add_bias_kv=True, add_zero_attn=True)
    q = RNG.standard_normal((4, 2, 8)).astype(np.float32)
    k = RNG.standard_normal((6, 2, 5)).astype(np.float32)
    v = RNG.standard_normal((6, 2, 3)).astype(np.float32)
    (m(tp.tensor(q), tp.tensor(k), tp.tensor(v))[0] ** 2).sum().backward()
    (t(torch.tensor(q), torch.tensor(k), torch.tensor(v))[0] ** 2).sum().backward()
    for name, p in t.named_parameters():
        close(dict(m.named_parameters())[name].grad, p.grad, 1e-4, 1e-5)


# ------------------------------------------------ bad input: torch's errors

def _ones(m, *s, dt="float32"):
    return m.tensor(np.ones(s, dtype=dt))


BAD = {
    "sdpa_batch_dims": lambda m, f: f.scaled_dot_product_attention(
        _ones(m, 2, 3, 4, 8), _ones(m, 3, 3, 5, 8), _ones(m, 3, 3, 5, 8)),
    "sdpa_value_batch": lambda m, f: f.scaled_dot_product_attention(
        _ones(m, 2, 3, 4, 8), _ones(m, 2, 3, 5, 8), _ones(m, 2, 4, 5, 8)),
    "sdpa_mask_dtype": lambda m, f: f.scaled_dot_product_attention(
        _ones(m, 2, 3, 4, 8), _ones(m, 2, 3, 5, 8), _ones(m, 2, 3, 5, 8),
        attn_mask=_ones(m, 4, 5, dt="int64")),
    "sdpa_dtypes": lambda m, f: f.scaled_dot_product_attention(
        _ones(m, 2, 3, 4, 8), _ones(m, 2, 3, 5, 8, dt="float64"), _ones(m, 2, 3, 5, 8)),
    "conv_negative_padding": lambda m, f: f.conv2d(_ones(m, 1, 3, 5, 5), _ones(m, 4, 3, 3, 3),
                                                   padding=-1),
    "conv_zero_stride": lambda m, f: f.conv2d(_ones(m, 1, 3, 5, 5), _ones(m, 4, 3, 3, 3), stride=0),
    "conv_zero_dilation": lambda m, f: f.conv2d(_ones(m, 1, 3, 5, 5), _ones(m, 4, 3, 3, 3),
                                                dilation=(1, 0)),
    "conv_kernel_too_big": lambda m, f: f.conv2d(_ones(m, 1, 3, 2, 2), _ones(m, 4, 3, 3, 3)),
    "conv_channels": lambda m, f: f.conv2d(_ones(m, 1, 2, 5, 5), _ones(m, 4, 3, 3, 3)),
    "conv_groups": lambda m, f: f.conv2d(_ones(m, 1, 4, 5, 5), _ones(m, 4, 2, 3, 3), groups=3),
    "conv_same_strided": lambda m, f: f.conv2d(_ones(m, 1, 3, 5, 5), _ones(m, 4, 3, 3, 3),
                                               padding="same", stride=2),
    "conv_padding_string": lambda m, f: f.conv2d(_ones(m, 1, 3, 5, 5), _ones(m, 4, 3, 3, 3),
                                                 padding="full"),
    "conv1d_negative_padding": lambda m, f: f.conv1d(_ones(m, 1, 3, 5), _ones(m, 4, 3, 3),
                                                     padding=-2),
    "conv_bias_size": lambda m, f: f.conv2d(_ones(m, 1, 3, 5, 5), _ones(m, 4, 3, 3, 3),
                                            bias=_ones(m, 3)),
    "pool_padding_over_half": lambda m, f: f.max_pool2d(_ones(m, 1, 3, 5, 5), 2, padding=2),
    "pool_zero_stride": lambda m, f: f.max_pool2d(_ones(m, 1, 3, 5, 5), 2, stride=0),
    "pool_negative_stride": lambda m, f: f.avg_pool2d(_ones(m, 1, 3, 5, 5), 2, stride=-1),
    "avg_pool1d_zero_stride": lambda m, f: f.avg_pool1d(_ones(m, 1, 3, 5), 2, stride=0),
    "max_pool1d_stride": lambda m, f: f.max_pool1d(_ones(m, 1, 3, 5), 2, stride=-1),
    "pool_output_too_small": lambda m, f: f.max_pool2d(_ones(m, 1, 3, 2, 5), 3),
    "mha_key_padding_mask_dtype": lambda m, f: m.nn.MultiheadAttention(8, 2)(
        _ones(m, 4, 2, 8), _ones(m, 5, 2, 8), _ones(m, 5, 2, 8),
        key_padding_mask=_ones(m, 2, 5, dt="int64")),
    "mha_attn_mask_dtype": lambda m, f: m.nn.MultiheadAttention(8, 2)(
        _ones(m, 4, 2, 8), _ones(m, 5, 2, 8), _ones(m, 5, 2, 8),
        attn_mask=_ones(m, 4, 5, dt="int64")),
    "mha_embed_dim": lambda m, f: m.nn.MultiheadAttention(8, 2)(
        _ones(m, 4, 2, 6), _ones(m, 5, 2, 6), _ones(m, 5, 2, 6)),
    "mha_heads": lambda m, f: m.nn.MultiheadAttention(8, 3),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_errors_as_torch(case):
    fn = BAD[case]
    errs = []
    for m, f in ((tp, F), (torch, TF)):
        with pytest.raises(Exception) as e:
            fn(m, f)
        errs.append((type(e.value), str(e.value)))
    assert errs[0] == errs[1]


def test_sdpa_mismatched_head_dims_and_mask_shapes_name_the_shapes():
    q, k, v = _ones(tp, 2, 3, 4, 8), _ones(tp, 2, 3, 5, 6), _ones(tp, 2, 3, 5, 8)
    with pytest.raises(RuntimeError, match=r"query \[2, 3, 4, 8\] and key \[2, 3, 5, 6\]"):
        F.scaled_dot_product_attention(q, k, v)
    with pytest.raises(RuntimeError, match=r"attn_mask of shape \[4, 4\]"):
        F.scaled_dot_product_attention(q, v, v, attn_mask=_ones(tp, 4, 4, dt="bool"))
    with pytest.raises(RuntimeError, match=r"key \[2, 3, 5, 8\] and value \[2, 3, 6, 8\]"):
        F.scaled_dot_product_attention(q, v, _ones(tp, 2, 3, 6, 8))
    cf = tp.compile(lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, attn_mask=m))
    with pytest.raises(RuntimeError, match=r"attn_mask of shape \[4, 4\]"):
        cf(q, v, v, _ones(tp, 4, 4, dt="bool"))


def test_sdpa_causal_and_mask_combine_as_torch():
    qn, kn, vn = (RNG.standard_normal((1, 2, 4, 8)).astype(np.float32) for _ in range(3))
    m = RNG.random((4, 4)) > 0.3
    m[:, 0] = True
    r = F.scaled_dot_product_attention(tp.tensor(qn), tp.tensor(kn), tp.tensor(vn),
                                       attn_mask=tp.tensor(m), is_causal=True)
    t = TF.scaled_dot_product_attention(torch.tensor(qn), torch.tensor(kn), torch.tensor(vn),
                                        attn_mask=torch.tensor(m), is_causal=True)
    close(r, t, 1e-5, 1e-6)


def test_sdpa_causal_with_mask_raises_off_the_flash_path():
    m = np.ones((4, 4), bool)
    for shapes in (((2, 4, 8),) * 3, ((1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 4))):
        arrs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
        same_error(lambda: F.scaled_dot_product_attention(*map(tp.tensor, arrs), attn_mask=tp.tensor(m),
                                                          is_causal=True),
                   lambda: TF.scaled_dot_product_attention(*map(torch.tensor, arrs),
                                                           attn_mask=torch.tensor(m), is_causal=True))


# ------------------------------------------------ in-place writes to constants

_HELD = {}


def test_compiled_writes_to_an_unlifted_tensor_land_in_it():
    """A tensor the trace meets that is not lifted (held in a dict) is a
    constant held by reference; the function's in-place writes to it are
    written back by the compiled program (they were dropped)."""
    for strict in (False, True):
        _HELD["buf"] = tp.zeros(3)

        def f(a):
            _HELD["buf"].add_(a.sum(0))
            return a * 2
        cf = tp.compile(f, strict_native=strict)
        cf(tp.ones(4, 3))
        cf(tp.ones(4, 3))
        close(_HELD["buf"], np.full(3, 8.0, np.float32), 0, 0)
        _HELD["c"] = tp.zeros(2, 3)

        def g(a):
            _HELD["c"][1].copy_(a)
            return _HELD["c"].sum() + a
        cg = tp.compile(g, strict_native=strict)
        r = cg(tp.arange(3.0))
        close(_HELD["c"], np.array([[0, 0, 0], [0, 1, 2]], np.float32), 0, 0)
        close(r, np.arange(3.0) + 3.0, 0, 0)


def test_batch_norm_training_with_unlifted_running_stats_native():
    _HELD["rm"], _HELD["rv"] = tp.zeros(3), tp.ones(3)
    cf = strict(lambda a: F.batch_norm(a, _HELD["rm"], _HELD["rv"], training=True, momentum=0.2))
    trm, trv = torch.zeros(3), torch.ones(3)
    for _ in range(3):
        x = RNG.standard_normal((4, 3, 5, 5)).astype(np.float32)
        y = cf(tp.tensor(x))
        ty = TF.batch_norm(torch.tensor(x), trm, trv, training=True, momentum=0.2)
        close(y, ty, 1e-5, 1e-5)
        close(_HELD["rm"], trm, 1e-5, 1e-6)
        close(_HELD["rv"], trv, 1e-5, 1e-6)
    assert len(cf.versions) == 1


# ------------------------------------------------ guards that can never hold

def test_mark_dynamic_specialized_is_a_constraint_violation():
    """A dim marked with mark_dynamic that the function pins (s0 == 4) or
    bounds (s0 > 3) cannot serve the sizes >= 2 the mark asks for: torch's
    ConstraintViolationError, naming the dim and the guard."""
    def pinned(x):
        return x * 2 if x.size(0) == 4 else x

    def as_int(x):
        return x * int(x.size(0))

    def bounded(x):
        return x * 2 if x.size(0) > 3 else x

    for fn, text in ((pinned, "specialized it to be a constant (4)"),
                     (as_int, "specialized it to be a constant (4)"),
                     (bounded, "satisfy the generated guard size(inputs[0][0], 0) > 3")):
        cf = tp.compile(fn)
        x = tp.randn(4, 3)
        tp.compiler.mark_dynamic(x, 0)
        with pytest.raises(tp.compiler.ConstraintViolationError,
                           match=r"Constraints violated \(size\(inputs\[0\]\[0\], 0\)\)") as e:
            cf(x)
        assert text in str(e.value)
        assert isinstance(e.value, RuntimeError)
    cf = tp.compile(lambda x: x * x.size(0) + x.size(1))   # symbolic all the way: fine
    x = tp.randn(4, 3)
    tp.compiler.mark_dynamic(x, 0)
    close(cf(x), x.numpy() * 4 + 3)
    cf2 = tp.compile(pinned)                               # unmarked: a plain guard
    close(cf2(tp.ones(4, 3)), np.full((4, 3), 2.0))


def test_index_fill_negative_indices_compiled():
    """index_fill takes indices in [-n, n) as torch does (index_add and
    index_copy do not); the compiled decomposition wrapped none of them and
    raised IndexError at trace time."""
    j = np.array([0, -1, -6], np.int64)
    close(tp.tensor(X).index_fill(1, tp.tensor(j), -2.0),
          torch.tensor(X).index_fill(1, torch.tensor(j), -2.0))
    check_compiled(lambda a, k: a.index_fill(1, k, -2.0), tp.tensor(X), tp.tensor(j))
    with pytest.raises(IndexError):
        tp.compile(lambda a, k: a.index_fill(1, k, -2.0))(tp.tensor(X), tp.tensor([-7]))


def test_one_hot_class_out_of_range_compiled():
    """one_hot(x, num_classes) compiled read a class outside [0, num_classes)
    as a row of zeros on a later call of the version; now the index check
    reruns the call eagerly, which raises eager's error."""
    f = tp.compile(lambda i: F.one_hot(i, 4), strict_native=True)
    close(f(tp.tensor([0, 3, 1])), TF.one_hot(torch.tensor([0, 3, 1]), 4))
    for bad in ([0, 9, 1], [0, -1, 1]):
        same_error(lambda: f(tp.tensor(bad)), lambda: TF.one_hot(torch.tensor(bad), 4))


@pytest.mark.parametrize("case", ["nll", "cross_entropy", "index_add", "scatter", "index_copy",
                                  "one_hot", "multinomial"])
def test_bad_index_on_the_traced_call_raises_eagers_error(case):
    """The first (traced) call with an out-of-range index raised the
    decomposition's own 'index out of range in self' (an IndexError even
    where eager raises RuntimeError); the decomposition now steps aside on
    such a sample, so the call raises eager's error."""
    x = tp.tensor(X)
    fn, args = {
        "nll": (lambda a, t: F.nll_loss(a, t), (x, tp.tensor([0, 6, 1, 1]))),
        "cross_entropy": (lambda a, t: F.cross_entropy(a, t, label_smoothing=0.1),
                          (x, tp.tensor([0, 6, 1, 1]))),
        "index_add": (lambda a, i: a.index_add(0, i, tp.ones(2, 6)), (x, tp.tensor([0, 9]))),
        "scatter": (lambda a, i: a.scatter(0, i, tp.ones(1, 6)), (x, tp.tensor([[0, 9, 0, 0, 0, 0]]))),
        "index_copy": (lambda a, i: a.index_copy(1, i, tp.ones(4, 1)), (x, tp.tensor([7]))),
        "one_hot": (lambda i: F.one_hot(i, 3), (tp.tensor([0, 5]),)),
        "multinomial": (lambda p: tp.multinomial(p, 2), (tp.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]),)),
    }[case]
    with pytest.raises(Exception) as e1:
        fn(*args)
    with pytest.raises(Exception) as e2:
        tp.compile(fn)(*args)
    assert type(e2.value) is type(e1.value)
    assert str(e2.value) == str(e1.value)
