"""What real models still ran eagerly under tp.compile (issue 16): each is
native under strict_native=True now and agrees with eager and torch.
BatchNorm2d in training mode with a compiled backward (the forward program
writes the running statistics), the compiled backward of index_select /
gather whose index is an input, fp16 cross_entropy, multinomial without
replacement beyond 16 samples and with generator=."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def strict(fn):
    return tp.compile(fn, strict_native=True)


def close(a, b, rtol=1e-5, atol=1e-5):
    a = a.detach().numpy() if hasattr(a, "detach") else a
    b = b.detach().numpy() if hasattr(b, "detach") else b
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               rtol=rtol, atol=atol)


def test_batchnorm2d_training_compiled_backward_writes_running_stats():
    rng = np.random.default_rng(0)
    bn, tbn = nn.BatchNorm2d(4, momentum=0.2), torch.nn.BatchNorm2d(4, momentum=0.2)
    w0 = rng.standard_normal(4).astype(np.float32)
    with tp.no_grad():
        bn.weight.copy_(tp.tensor(w0))
    with torch.no_grad():
        tbn.weight.copy_(torch.tensor(w0))
    cf = strict(lambda x: (bn(x) ** 2).sum())
    for _ in range(3):
        x = rng.standard_normal((3, 4, 5, 5)).astype(np.float32)
        xt, tx = tp.tensor(x).requires_grad_(), torch.tensor(x).requires_grad_()
        loss = cf(xt)
        loss.backward()
        tl = (tbn(tx) ** 2).sum()
        tl.backward()
        close(loss, tl, rtol=1e-5, atol=1e-3)
        close(xt.grad, tx.grad, atol=1e-4)
        close(bn.running_mean, tbn.running_mean, atol=1e-6)
        close(bn.running_var, tbn.running_var, atol=1e-5)
        assert int(bn.num_batches_tracked) == int(tbn.num_batches_tracked)
    close(bn.weight.grad, tbn.weight.grad, rtol=1e-4, atol=1e-3)
    close(bn.bias.grad, tbn.bias.grad, rtol=1e-4, atol=1e-3)
    assert cf.versions[0].autograd is not None        # compiled, not recomputed eagerly


def test_written_input_that_requires_grad_still_refused():
    cf = strict(lambda a, b: (a.add_(1) * b).sum())
    with pytest.raises(tp._C.NativeCompileError):
        a = tp.randn(3).requires_grad_()
        cf(a * 1, tp.randn(3).requires_grad_()).backward()


@pytest.mark.parametrize("op", ["index_select", "gather"])
def test_index_backward_with_input_index(op):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    if op == "index_select":
        idx = np.array([0, 2, 2, 5, 0], np.int64)          # repeated rows add up

        def f(m, a, i):
            return (a.index_select(0, i) ** 2 * 1.5).sum()
    else:
        idx = rng.integers(0, 5, (6, 3)).astype(np.int64)

        def f(m, a, i):
            return (a.gather(1, i) ** 3).sum()
    cf = strict(lambda a, i: f(tp, a, i))
    for _ in range(2):
        xt, tx = tp.tensor(x).requires_grad_(), torch.tensor(x).requires_grad_()
        cf(xt, tp.tensor(idx)).backward()
        f(torch, tx, torch.tensor(idx)).backward()
        close(xt.grad, tx.grad)
        idx = idx[::-1].copy()
    assert cf.versions[0].autograd is not None


@pytest.mark.parametrize("kw", [{}, {"label_smoothing": 0.1}, {"ignore_index": 2}])
def test_cross_entropy_fp16_compiled(kw):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 10)).astype(np.float16)
    t = rng.integers(0, 10, 8).astype(np.int64)
    t[0] = 2
    cf = strict(lambda a, b: F.cross_entropy(a, b, **kw))
    xt, tx = tp.tensor(x).requires_grad_(), torch.tensor(x).requires_grad_()
    r = cf(xt, tp.tensor(t))
    e = F.cross_entropy(tp.tensor(x), tp.tensor(t), **kw)
    tr = TF.cross_entropy(tx, torch.tensor(t), **kw)
    assert r.dtype == tp.float16
    close(r, tr, rtol=2e-3, atol=2e-3)
    close(r, e, rtol=2e-3, atol=2e-3)
    r.backward()
    tr.backward()
    close(xt.grad, tx.grad, rtol=1e-2, atol=2e-3)


def _same_draws(fn, p, reseed):
    cf = strict(fn)
    for s in (5, 6):
        reseed(s)
        a = cf(p)
        reseed(s)
        b = fn(p)
        assert a.tolist() == b.tolist()
    return a


@pytest.mark.parametrize("ns", [17, 40])
def test_multinomial_many_samples_without_replacement(ns):
    p = tp.rand(3, 40) + 0.01
    a = _same_draws(lambda q: tp.multinomial(q, ns), p, tp.manual_seed)
    assert tuple(a.shape) == (3, ns)
    for row in a.numpy():
        assert len(set(row.tolist())) == ns and row.min() >= 0 and row.max() < 40
    if ns == 40:
        # all categories: a permutation whose order follows the weights
        w = tp.tensor([[1e-6] * 39 + [1e6]]).reshape(1, 40)
        assert strict(lambda q: tp.multinomial(q, 40))(w)[0, 0].item() == 39


def test_multinomial_zero_weights_many_samples_falls_to_eager_error():
    p = tp.ones(2, 30)
    p[1, 5:] = 0
    cf = tp.compile(lambda q: tp.multinomial(q, 20))
    with pytest.raises(RuntimeError, match="not enough non-negative category"):
        cf(p)


@pytest.mark.parametrize("replacement", [False, True])
def test_multinomial_generator(replacement):
    g = tp.Generator().manual_seed(0)
    p = tp.rand(4, 12)
    a = _same_draws(lambda q: tp.multinomial(q, 5, replacement, generator=g), p,
                    g.manual_seed)
    assert tuple(a.shape) == (4, 5)
    # the generator's draws leave the default stream alone
    cf = strict(lambda q: tp.multinomial(q, 5, replacement, generator=g))
    tp.manual_seed(1)
    want = tp.rand(3).tolist()
    tp.manual_seed(1)
    cf(p)
    assert tp.rand(3).tolist() == want
    # and advance the generator as eager does
    g.manual_seed(7)
    x1, x2 = cf(p), cf(p)
    g.manual_seed(7)
    assert tp.multinomial(p, 5, replacement, generator=g).tolist() == x1.tolist()
    assert tp.multinomial(p, 5, replacement, generator=g).tolist() == x2.tolist()


def test_uniform_with_generator_compiled():
    g = tp.Generator().manual_seed(3)
    cf = strict(lambda x: x.clone().uniform_(-1.0, 2.0, generator=g) + x)
    x = tp.zeros(5, 4, dtype=tp.float64)
    g.manual_seed(3)
    a = cf(x)
    g.manual_seed(3)
    b = x.clone().uniform_(-1.0, 2.0, generator=g) + x
    assert a.tolist() == b.tolist()


# ------------------------------------------------- attention: masked rows

def _att_kernels(cf):
    return [k for k in cf.versions[0].artifact.kernels if "attention" in k.name]


def _masks(L, S, rng):
    m = rng.random((L, S)) > 0.4
    m[1] = False                      # every key of row 1 masked
    m[3] = True
    add = np.where(m, 0.0, -np.inf).astype(np.float32)
    add[4, :] = -np.inf               # float mask: row 4 all -inf
    return m, add


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_fully_masked_rows_are_zero_like_torch(dt, kind):
    """torch 2.13's SDPA (math kernel: _safe_softmax) gives 0 for a row whose
    keys are all masked, and no gradient through it: eager, the compiled
    attention kernel and the compiled training graph agree with it."""
    rng = np.random.default_rng(3)
    L, S = 6, 37
    q, k, v = (rng.standard_normal(s).astype(dt) for s in ((2, 3, L, 8), (2, 3, S, 8),
                                                            (2, 3, S, 5)))
    mb, madd = _masks(L, S, rng)
    m = mb if kind == "bool" else madd.astype(dt)
    tm = torch.tensor(m)

    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    tq, tk, tv = (torch.tensor(a).requires_grad_() for a in (q, k, v))
    ref = TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm)
    (ref * torch.arange(5, dtype=ref.dtype)).sum().backward()
    tol = 1e-5 if dt == np.float32 else 1e-10
    e = f(*(tp.tensor(a) for a in (q, k, v, m)))
    close(e, ref, rtol=tol, atol=tol)
    assert not np.isnan(e.numpy()).any()
    cf = strict(f)
    got = cf(*(tp.tensor(a) for a in (q, k, v, m)))
    close(got, ref, rtol=tol, atol=tol)
    assert _att_kernels(cf), "the attention kernel"
    dead = [1] if kind == "bool" else [1, 4]
    assert (got.numpy()[:, :, dead] == 0).all()
    xs = [tp.tensor(a).requires_grad_() for a in (q, k, v)]
    out = strict(f)(*xs, tp.tensor(m))
    (out * tp.arange(5, dtype=out.dtype)).sum().backward()
    for x, t in zip(xs, (tq, tk, tv)):
        close(x.grad, t.grad, rtol=10 * tol, atol=10 * tol)
    assert (xs[0].grad.numpy()[:, :, dead] == 0).all()


def test_sdpa_fully_masked_rows_large_and_causal_offset():
    """Rows with no key left by a hand-made causal mask shifted past the
    diagonal, over several key tiles: 0 from the kernel, like torch."""
    rng = np.random.default_rng(4)
    L, S = 70, 300
    q, k, v = (rng.standard_normal(s).astype(np.float32)
               for s in ((1, 2, L, 16), (1, 2, S, 16), (1, 2, S, 9)))
    m = np.tril(np.ones((L, S), bool), -5)        # rows 0..4 see no key
    cf = strict(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m))
    got = cf(*(tp.tensor(a) for a in (q, k, v, m)))
    ref = TF.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v, m)))
    close(got, ref, rtol=2e-5, atol=2e-5)
    assert (got.numpy()[:, :, :5] == 0).all() and _att_kernels(cf)


def test_handwritten_softmax_formula_keeps_nan_for_masked_rows():
    # the explicit formula is softmax: NaN there in torch and here
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (6, 8), (6, 3)))
    m = np.ones((4, 6), bool)
    m[2] = False

    def f(q, k, v, m):
        return (q @ k.transpose(-2, -1)).masked_fill(~m, float("-inf")).softmax(-1) @ v
    cf = strict(f)
    got = cf(*(tp.tensor(a) for a in (q, k, v, m)))
    assert np.isnan(got.numpy()[2]).all() and not np.isnan(np.delete(got.numpy(), 2, 0)).any()
    assert _att_kernels(cf)


def test_safe_softmax_op():
    x = np.array([[1.0, -np.inf, 2.0], [-np.inf, -np.inf, -np.inf], [0.5, 0.5, np.inf]],
                 np.float32)
    ref = torch._safe_softmax(torch.tensor(x), -1)
    close(tp._safe_softmax(tp.tensor(x), -1), ref)
    got = strict(lambda a: tp._safe_softmax(a * 1, -1))(tp.tensor(x))
    np.testing.assert_array_equal(np.isnan(got.numpy()), np.isnan(ref.numpy()))
    close(np.nan_to_num(got.numpy()), np.nan_to_num(ref.numpy()))
    xt, tx = tp.tensor(x).requires_grad_(), torch.tensor(x).requires_grad_()
    w = np.arange(3, dtype=np.float32)
    (strict(lambda a: tp._safe_softmax(a, 0))(xt)[:, :2] * tp.tensor(w[:2])).sum().backward()
    (torch._safe_softmax(tx, 0)[:, :2] * torch.tensor(w[:2])).sum().backward()
    close(np.nan_to_num(xt.grad.numpy()), np.nan_to_num(tx.grad.numpy()))


# ------------------------------------------------- scatter family: O(n)

def _steps(cf):
    return cf.versions[0].artifact.steps


SCATTERS = [
    ("scatter", lambda x, i, s: x.scatter(0, i, s)),
    ("scatter_value", lambda x, i, s: x.scatter(1, i, -2)),
    ("scatter_add", lambda x, i, s: x.scatter_add(0, i, s)),
    ("scatter_reduce_add", lambda x, i, s: x.scatter(0, i, s, reduce="add")),
    ("scatter_reduce_multiply", lambda x, i, s: x.scatter(0, i, s, reduce="multiply")),
] + [(f"scatter_reduce_{r}_{inc}",
      lambda x, i, s, r=r, inc=inc: x.scatter_reduce(0, i, s, r, include_self=inc))
     for r in ("sum", "prod", "mean", "amax", "amin") for inc in (True, False)]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize("name,fn", SCATTERS, ids=[s[0] for s in SCATTERS])
def test_scatter_family_is_one_pass_step(name, fn, dt):
    """One ST_SCATTER step (O(n + m), in index order) instead of an
    O(n * m) hit mask: same values as eager and torch (duplicates included:
    the last writer, sums in order, integer mean floored)."""
    rng = np.random.default_rng(6)
    x = rng.integers(-5, 6, (5, 7)).astype(dt)
    idx = rng.integers(0, 5, (4, 6))               # smaller than x and src: a sub-block
    src = rng.integers(-5, 6, (4, 7)).astype(dt)
    if name == "scatter_value":
        idx = rng.integers(0, 7, (5, 3))
    if dt in (np.float32, np.float64):
        x, src = x * 0.5, src * 0.25
    cf = strict(fn)
    got = cf(tp.tensor(x), tp.tensor(idx), tp.tensor(src))
    assert "scatter" in _steps(cf)
    ref = fn(torch.tensor(x), torch.tensor(idx), torch.tensor(src))
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(got.numpy(), fn(tp.tensor(x), tp.tensor(idx),
                                                  tp.tensor(src)).numpy())


@pytest.mark.parametrize("dt", [np.float32, np.int64])
def test_index_add_copy_fill_are_one_pass_steps(dt):
    rng = np.random.default_rng(7)
    x = rng.integers(-9, 9, (3, 6, 4)).astype(dt)
    i = np.array([0, 5, 5, 2, 1])
    s = rng.integers(-9, 9, (3, 5, 4)).astype(dt)
    fns = [lambda x, i, s: x.index_add(1, i, s, alpha=3),
           lambda x, i, s: x.index_copy(1, i, s),
           lambda x, i, s: x.index_fill(1, i - 6, 7)]        # negative indices: index_fill's
    for fn in fns:
        cf = strict(fn)
        got = cf(tp.tensor(x), tp.tensor(i), tp.tensor(s))
        assert "scatter" in _steps(cf)
        ref = fn(torch.tensor(x), torch.tensor(i), torch.tensor(s))
        np.testing.assert_array_equal(got.numpy(), ref.numpy())


def test_scatter_step_is_linear_and_keeps_eager_errors():
    import time
    rng = np.random.default_rng(8)
    n = 200_000
    x, s = tp.zeros(n), tp.ones(n)
    i = tp.tensor(rng.integers(0, n, n))
    cf = strict(lambda x, i, s: x.scatter_add(0, i, s))
    cf(x, i, s)
    t = time.perf_counter()
    got = cf(x, i, s)
    # n * m = 4e10 for the hit mask: minutes; one pass: milliseconds
    assert time.perf_counter() - t < 2.0
    np.testing.assert_array_equal(got.numpy(), np.bincount(i.numpy(), minlength=n))
    # an index out of range: eager's error (the call reruns eagerly)
    small = tp.compile(lambda x, i, s: x.scatter_add(0, i, s))
    xs, ss = tp.zeros(5), tp.ones(3)
    small(xs, tp.tensor([0, 1, 4]), ss)
    with pytest.raises(RuntimeError, match="out of bounds"):
        small(xs, tp.tensor([0, 9, 4]), ss)


def test_scatter_add_backward_with_input_index():
    rng = np.random.default_rng(9)
    x, s = rng.standard_normal((4, 5)), rng.standard_normal((3, 5))
    i = rng.integers(0, 4, (3, 5))

    def f(m, x, i, s):
        return (x.scatter_add(0, i, s) ** 2).sum()
    xt, st = tp.tensor(x).requires_grad_(), tp.tensor(s).requires_grad_()
    tx, ts = torch.tensor(x).requires_grad_(), torch.tensor(s).requires_grad_()
    strict(lambda x, i, s: f(tp, x, i, s))(xt, tp.tensor(i), st).backward()
    f(torch, tx, torch.tensor(i), ts).backward()
    close(xt.grad, tx.grad)
    close(st.grad, ts.grad)
