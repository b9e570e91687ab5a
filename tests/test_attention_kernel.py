"""The tiled online-softmax attention kernel (issue 16 item 3, seed Key Point
10): F.scaled_dot_product_attention and the hand-written
softmax(q @ k.transpose(-2, -1) / sqrt(d) [masked]) @ v compile to one
attention kernel whose L x S scores are never in memory; compiled agrees
with eager and with torch 2.13."""
import math

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from tensorplay import _C

RNG = np.random.default_rng(7)


def r(*s, dt=np.float32):
    return RNG.standard_normal(s).astype(dt)


def program(cf):
    return cf.versions[0].artifact


def attention_kernels(cf):
    return [k for k in program(cf).kernels if "attention" in k.name]


def close(a, b, dt=np.float32):
    tol = {np.float16: (2e-2, 2e-2), np.float32: (2e-5, 2e-5), np.float64: (1e-11, 1e-11)}[dt]
    a = a.numpy() if hasattr(a, "numpy") else a
    b = b.detach().numpy() if hasattr(b, "detach") else b
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               rtol=tol[0], atol=tol[1])


def sdpa(q, k, v, **kw):
    return F.scaled_dot_product_attention(q, k, v, **kw)


def check(fn, *arrays, dt=np.float32, fused=True):
    """compiled (strict_native) vs eager; returns the compiled output"""
    xs = [tp.tensor(a) for a in arrays]
    cf = tp.compile(fn, strict_native=True)
    got = cf(*xs)
    ref = fn(*xs)
    close(got, ref, dt)
    assert bool(attention_kernels(cf)) == fused, [k.name for k in program(cf).kernels]
    return got


SHAPES = [  # (batch dims, L, S, E, Ev)
    ((2, 3), 37, 37, 8, 5),
    ((1, 1), 1, 1, 4, 4),          # N = 1
    ((2,), 300, 300, 17, 9),       # N not a multiple of the tiles, d odd
    ((1, 2), 5, 7, 8, 3),          # Lq != Lk
    ((), 6, 9, 3, 2),              # no batch dims
    ((2, 2, 2), 4, 5, 6, 7),       # three batch dims
]


@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_sdpa_shapes(shape):
    bd, L, S, E, Ev = shape
    q, k, v = r(*bd, L, E), r(*bd, S, E), r(*bd, S, Ev)
    check(sdpa, q, k, v)
    check(lambda q, k, v: sdpa(q, k, v, scale=0.3), q, k, v)


@pytest.mark.parametrize("L,S", [(37, 37), (5, 9), (9, 5), (300, 300), (1, 4)])
def test_sdpa_causal_lq_ne_lk(L, S):
    q, k, v = r(2, L, 8), r(2, S, 8), r(2, S, 4)
    check(lambda q, k, v: sdpa(q, k, v, is_causal=True), q, k, v)
    cf = tp.compile(lambda q, k, v: sdpa(q, k, v, is_causal=True), strict_native=True)
    cf(*map(tp.tensor, (q, k, v)))
    # the causal bound is known: key tiles past the diagonal are skipped
    assert "causal: r0 <= x1" in attention_kernels(cf)[0].loop_ir


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.float16])
def test_sdpa_dtypes(dt):
    q, k, v = r(2, 2, 40, 16, dt=dt), r(2, 2, 33, 16, dt=dt), r(2, 2, 33, 8, dt=dt)
    got = check(sdpa, q, k, v, dt=dt)
    assert str(got.dtype).endswith(np.dtype(dt).name)
    check(lambda q, k, v: sdpa(q, k, v, is_causal=True), q, k, v, dt=dt)


MASKS = [(5, 7), (2, 1, 5, 7), (1, 3, 1, 7), (7,)]


@pytest.mark.parametrize("mshape", MASKS, ids=[str(m) for m in MASKS])
def test_sdpa_masks_broadcast(mshape):
    q, k, v = r(2, 3, 5, 8), r(2, 3, 7, 8), r(2, 3, 7, 4)
    bm = RNG.random(mshape) > 0.3
    bm[..., 0] = True                               # no fully-masked row
    check(lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), q, k, v, bm)
    check(lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), q, k, v, r(*mshape))


def handwritten_div(q, k, v):
    att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
    return F.softmax(att, dim=-1) @ v


def handwritten_mul_masked_fill(q, k, v, m):
    att = q.matmul(k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    att = att.masked_fill(m, float("-inf"))
    return att.softmax(dim=-1).matmul(v)


def handwritten_add(q, k, v, m):
    return (q @ k.transpose(-2, -1) * 0.25 + m).softmax(-1) @ v


def handwritten_causal_triu(q, k, v):
    T = q.size(-2)
    att = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    att = att.masked_fill(tp.triu(tp.ones(T, T, dtype=tp.bool), diagonal=1), float("-inf"))
    return att.softmax(-1) @ v


def test_handwritten_patterns():
    q, k, v = r(2, 4, 33, 16), r(2, 4, 33, 16), r(2, 4, 33, 16)
    check(handwritten_div, q, k, v)
    m = RNG.random((33, 33)) > 0.5
    m[:, 0] = False
    check(handwritten_mul_masked_fill, q, k, v, m)
    check(handwritten_add, q, k, v, r(4, 33, 33))
    check(handwritten_causal_triu, q, k, v)
    cf = tp.compile(handwritten_causal_triu, strict_native=True)
    cf(*map(tp.tensor, (q, k, v)))
    assert "causal: r0 <= x1" in attention_kernels(cf)[0].loop_ir


def test_parity_with_torch():
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    q, k, v = r(2, 3, 70, 16), r(2, 3, 50, 16), r(2, 3, 50, 12)
    m = RNG.random((70, 50)) > 0.4
    m[:, 0] = True
    T = [torch.tensor(a) for a in (q, k, v)]
    for kw, tkw in ((dict(), dict()), (dict(is_causal=True), dict(is_causal=True)),
                    (dict(attn_mask=tp.tensor(m)), dict(attn_mask=torch.tensor(m))),
                    (dict(scale=0.1), dict(scale=0.1))):
        cf = tp.compile(lambda q, k, v: sdpa(q, k, v, **kw), strict_native=True)
        close(cf(*map(tp.tensor, (q, k, v))), TF.scaled_dot_product_attention(*T, **tkw))
        assert attention_kernels(cf)
    mm = RNG.random((70, 50)) > 0.5
    ref = (T[0] @ T[1].transpose(-2, -1) * 0.25).masked_fill(torch.tensor(mm), float("-inf"))
    ref = ref.softmax(-1) @ T[2]
    got = check(handwritten_mul_masked_fill, q, k, v, mm)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=2e-5, atol=2e-5)


def test_fully_masked_rows_and_nan():
    # a row whose keys are all masked is NaN, as the explicit formula in
    # eager (tensorplay and torch); NaN in q poisons its row only
    torch = pytest.importorskip("torch")
    q, k, v = r(1, 2, 6, 8), r(1, 2, 5, 8), r(1, 2, 5, 3)
    m = RNG.random((6, 5)) > 0.5
    m[2] = True
    m[4, :] = False
    got = check(handwritten_mul_masked_fill, q, k, v, m)
    assert np.isnan(got.numpy()[:, :, 2]).all()
    T = [torch.tensor(a) for a in (q, k, v)]
    ref = (T[0] @ T[1].transpose(-2, -1) * (1 / math.sqrt(8))).masked_fill(
        torch.tensor(m), float("-inf")).softmax(-1) @ T[2]
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=2e-5, atol=2e-5)
    add = np.zeros((6, 5), np.float32)
    add[1] = -np.inf
    add[3, 1:] = -np.inf
    got = check(handwritten_add, q, k, v, add)
    assert np.isnan(got.numpy()[:, :, 1]).all() and not np.isnan(got.numpy()[:, :, 3]).any()
    qn = q.copy()
    qn[0, 1, 4, 2] = np.nan
    got = check(handwritten_div, qn, k, v)
    assert np.isnan(got.numpy()[0, 1, 4]).all()
    assert not np.isnan(np.delete(got.numpy()[0, 1], 4, axis=0)).any()


def test_no_score_buffer_in_the_plan():
    L, S = 96, 80
    q, k, v = r(2, 2, L, 16), r(2, 2, S, 16), r(2, 2, S, 8)
    for fn in (sdpa, lambda q, k, v: sdpa(q, k, v, is_causal=True), handwritten_div):
        cf = tp.compile(fn, strict_native=True)
        cf(*map(tp.tensor, (q, k, v)))
        p = program(cf)
        assert [s for s in p.steps if s.startswith("kernel")] == \
            ["kernel " + attention_kernels(cf)[0].name]
        assert "library" not in p.steps                 # no matmul call either
        shapes = [b[1] for b in p.buffer_plan]
        assert all(s[-2:] != (L, S) for s in shapes), p.buffer_plan
        assert (2, 2, L, 8) in shapes


def test_other_readers_keep_the_decomposition():
    q, k, v = r(2, 9, 8), r(2, 9, 8), r(2, 9, 4)

    def probs_returned(q, k, v):
        p = (q @ k.transpose(-2, -1)).softmax(-1)
        return p @ v, p

    def scores_returned(q, k, v):
        s = q @ k.transpose(-2, -1) * 0.5
        return s.softmax(-1) @ v, s

    def probs_scaled(q, k, v):
        return ((q @ k.transpose(-2, -1)).softmax(-1) * 2) @ v

    def softmax_dim0(q, k, v):
        return (q @ k.transpose(-2, -1)).softmax(0) @ v

    for fn in (probs_returned, scores_returned, probs_scaled, softmax_dim0):
        xs = [tp.tensor(a) for a in (q, k, v)]
        cf = tp.compile(fn, strict_native=True)
        got, ref = cf(*xs), fn(*xs)
        for a, b in zip(got if isinstance(got, tuple) else (got,),
                        ref if isinstance(ref, tuple) else (ref,)):
            close(a, b)
        assert not attention_kernels(cf), fn.__name__


def test_compiled_training_keeps_gradients():
    q, k, v = r(2, 7, 8), r(2, 7, 8), r(2, 7, 4)

    def loss(q, k, v):
        return (sdpa(q, k, v, is_causal=True) ** 2).sum()

    grads = []
    for f in (loss, tp.compile(loss)):
        xs = [tp.tensor(a, requires_grad=True) for a in (q, k, v)]
        f(*xs).backward()
        grads.append([x.grad.numpy() for x in xs])
    for a, b in zip(*grads):
        close(a, b)


def test_dynamic_lengths_one_kernel():
    def f(q, k, v):
        return sdpa(q, k, v, is_causal=True)

    cf = tp.compile(f, dynamic=True, strict_native=True)
    for t in (5, 6, 9, 70):
        q, k, v = r(1, 2, t, 8), r(1, 2, t, 8), r(1, 2, t, 8)
        close(cf(*map(tp.tensor, (q, k, v))), f(*map(tp.tensor, (q, k, v))))
    assert len(cf.versions) <= 2


def test_growing_length_reuses_a_few_attention_kernels():
    """Under dynamic shapes a growing query length (a generate loop) reuses
    kernels: the query tile is rounded to a power of two, so 4..40 compile a
    handful of attention kernels, not one per length (each was ~0.3 s of LLVM)."""
    def f(q, k, v):
        return sdpa(q, k, v, is_causal=True)

    cf = tp.compile(f, dynamic=True, strict_native=True)
    q, k, v = r(1, 2, 4, 8), r(1, 2, 4, 8), r(1, 2, 4, 8)
    cf(*map(tp.tensor, (q, k, v)))
    before = _C._cache_counters()    # (hits, misses, back-end compiles) of the process
    for t in range(5, 41):
        q, k, v = r(1, 2, t, 8), r(1, 2, t, 8), r(1, 2, t, 8)
        close(cf(*map(tp.tensor, (q, k, v))), f(*map(tp.tensor, (q, k, v))))
    after = _C._cache_counters()
    assert len(cf.versions) == 1
    assert (after[0] - before[0]) + (after[2] - before[2]) <= 6, (before, after)


def test_multihead_attention_without_weights():
    torch = pytest.importorskip("torch")
    m = tp.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    tm = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        for (n, p), (tn, tpar) in zip(m.named_parameters(), tm.named_parameters()):
            tpar.copy_(torch.tensor(p.detach().numpy()))
    x = r(2, 11, 16)

    def f(x):
        return m(x, x, x, need_weights=False)[0]

    with tp.no_grad():
        cf = tp.compile(f, strict_native=True)
        got = cf(tp.tensor(x))
    with torch.no_grad():
        ref = tm(*(torch.tensor(x),) * 3, need_weights=False)[0]
    close(got, ref)
    assert attention_kernels(cf)


@pytest.mark.parametrize("dt", [np.float32, np.float16, np.float64])
def test_nvrtc_renders_the_attention_kernel_to_ptx(dt):
    import tensorplay._C as C
    from _nvrtc import nvrtc_kernels
    q, k, v = (tp.tensor(a) for a in (r(2, 3, 37, 8, dt=dt), r(2, 3, 29, 8, dt=dt),
                                      r(2, 3, 29, 40, dt=dt)))
    m = tp.tensor(RNG.random((37, 29)) > 0.3)
    for fn, args in ((lambda q, k, v: sdpa(q, k, v, is_causal=True), (q, k, v)),
                     (lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), (q, k, v, m))):
        ks = nvrtc_kernels(fn, *args, compile=C.nvrtc_available())
        assert [x.name for x in ks] == ["kernel0_fused_attention"]
        src = ks[0].source
        # one pass over the keys per row, the running (m, l, acc) in registers
        assert "mrun" in src and "lrun" in src and "accv[e] * alpha" in src


def test_very_wide_heads_keep_the_decomposition():
    # the packed K / V tiles of a head dim past 512 would not fit a thread's
    # stack: decomposed, still native and right
    q, k, v = r(1, 3, 600), r(1, 4, 600), r(1, 4, 2)
    check(sdpa, q, k, v, fused=False)


def test_softmax_of_a_weight_product_is_not_attention():
    # q @ k.transpose(-2, -1) marks the scores; softmax(relu(x @ w)) @ w2
    # (a model's layer) keeps its BLAS matmuls
    w1, w2 = r(16, 16), r(16, 8)
    check(lambda x, a, b: tp.softmax(tp.relu(x @ a) * 0.5, -1) @ b, r(8, 16), w1, w2,
          fused=False)


def test_sdpa_heads_split_from_batch_8():
    """q, k, v as GPT makes them (split + view + transpose of one (B, T, 3C)
    buffer): the flat batch var reaches the loads as x0 / H and x0 % H. At
    B = 8 the loop splitter split it, which broke the attention kernel's
    fixed loop layout ('malformed attention kernel')."""
    def f(x):
        B, T, C = x.shape
        q, k, v = x.split(C // 3, dim=2)
        q, k, v = (t.view(B, T, 4, C // 12).transpose(1, 2) for t in (q, k, v))
        return sdpa(q, k, v, is_causal=True)
    for b in (2, 8):
        check(f, r(b, 16, 96))


def test_handwritten_heads_split_from_a_projection_stay_one_attention_kernel():
    # the hand-written pattern of bench/cache.py's GPT block (masked_fill
    # with a causal mask, softmax, @ v) over heads split from one (B, T, 3C)
    # projection at batch 8, where the loop splitter used to split the
    # attention kernel's batch var
    B, T, C, h = 8, 8, 32, 4
    hs = C // h

    def f(x, mask):
        q, k, v = x.split(C, dim=-1)
        q, k, v = (t.reshape(B, T, h, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask == 0, float("-inf"))
        return (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)

    check(f, r(B, T, 3 * C), np.tril(np.ones((T, T), np.float32)))
