"""Convolution, pooling, BatchNorm2d and attention (issue 16 items 3, 4):
parity with torch 2.13 eager (values, gradients, errors), and compiled
natively (strict_native=True: no fallback kernel)."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional
RNG = np.random.default_rng(0)


def r(*s):
    return RNG.standard_normal(s).astype(np.float32)


def close(a, b, rtol=1e-4, atol=1e-5):
    a = a.detach().numpy() if hasattr(a, "detach") else a
    b = b.detach().numpy() if hasattr(b, "detach") else b
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def same_error(f1, f2, exc=RuntimeError):
    with pytest.raises(exc) as e1:
        f1()
    with pytest.raises(exc) as e2:
        f2()
    assert str(e1.value) == str(e2.value).replace("torch.Size", "tensorplay.Size")


CONV2D = [dict(), dict(stride=2, padding=1), dict(padding="same", dilation=2),
          dict(padding="valid", stride=(2, 1)), dict(groups=2, padding=(1, 2)),
          dict(groups=4, stride=2, dilation=(2, 1)), dict(padding="same")]


@pytest.mark.parametrize("kw", CONV2D, ids=[str(k) for k in CONV2D])
def test_conv2d_eager_compiled_and_grads(kw):
    g = kw.get("groups", 1)
    x, w, b = r(2, 4, 9, 8), r(8, 4 // g, 3, 2), r(8)
    ref = TF.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), **kw)
    close(F.conv2d(tp.tensor(x), tp.tensor(w), tp.tensor(b), **kw), ref)
    cf = tp.compile(lambda x, w, b: F.conv2d(x, w, b, **kw), strict_native=True)
    close(cf(tp.tensor(x), tp.tensor(w), tp.tensor(b)), ref)
    X, W, B = (tp.tensor(a, requires_grad=True) for a in (x, w, b))
    TX, TW, TB = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    (F.conv2d(X, W, B, **kw) ** 2).sum().backward()
    (TF.conv2d(TX, TW, TB, **kw) ** 2).sum().backward()
    for a, t in ((X, TX), (W, TW), (B, TB)):
        close(a.grad, t.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=2, dilation=2),
                                dict(padding="same", groups=2)])
def test_conv1d(kw):
    g = kw.get("groups", 1)
    x, w = r(2, 4, 11), r(6, 4 // g, 3)
    ref = TF.conv1d(torch.tensor(x), torch.tensor(w), **kw)
    close(F.conv1d(tp.tensor(x), tp.tensor(w), **kw), ref)
    cf = tp.compile(lambda x, w: F.conv1d(x, w, **kw), strict_native=True)
    close(cf(tp.tensor(x), tp.tensor(w)), ref)
    close(F.conv1d(tp.tensor(x[0]), tp.tensor(w), **kw), ref[0])     # unbatched


def test_conv_errors_as_torch_words_them():
    x, w = r(2, 4, 5, 5), r(8, 3, 3, 3)
    cases = [
        (lambda m, f: f.conv2d(m.tensor(x), m.tensor(w))),                       # channels
        (lambda m, f: f.conv2d(m.tensor(x), m.tensor(r(6, 2, 3, 3)), groups=4)),  # groups
        (lambda m, f: f.conv2d(m.tensor(x), m.tensor(r(8, 4, 7, 7)))),            # kernel > input
        (lambda m, f: f.conv2d(m.tensor(x), m.tensor(r(8, 4, 3, 3)), padding="same", stride=2)),
        (lambda m, f: f.conv2d(m.tensor(x), m.tensor(r(8, 4, 3, 3)), bias=m.tensor(r(3)))),
        (lambda m, f: f.max_pool2d(m.tensor(x), 3, padding=2)),                   # pad > k/2
    ]
    for c in cases:
        same_error(lambda: c(tp, F), lambda: c(torch, TF))
    # torch raises RuntimeError("Invalid padding string: 'full'"), word for word
    same_error(lambda: F.conv2d(tp.tensor(x), tp.tensor(r(8, 4, 3, 3)), padding="full"),
               lambda: TF.conv2d(torch.tensor(x), torch.tensor(r(8, 4, 3, 3)), padding="full"))


POOL = [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=(2, 3), stride=(1, 2))]


@pytest.mark.parametrize("kw", POOL, ids=[str(k) for k in POOL])
def test_pooling(kw):
    x = r(2, 3, 9, 8)
    tx = torch.tensor(x)
    close(F.max_pool2d(tp.tensor(x), **kw), TF.max_pool2d(tx, **kw))
    close(F.avg_pool2d(tp.tensor(x), **kw), TF.avg_pool2d(tx, **kw))
    close(F.avg_pool2d(tp.tensor(x), count_include_pad=False, **kw),
          TF.avg_pool2d(tx, count_include_pad=False, **kw))
    cf = tp.compile(lambda a: F.max_pool2d(a, **kw) + 1, strict_native=True)
    close(cf(tp.tensor(x)), TF.max_pool2d(tx, **kw) + 1)
    cf = tp.compile(lambda a: F.avg_pool2d(a, **kw), strict_native=True)
    close(cf(tp.tensor(x)), TF.avg_pool2d(tx, **kw))
    X = tp.tensor(x, requires_grad=True)
    TX = torch.tensor(x, requires_grad=True)
    (F.max_pool2d(X, **kw) * 3).sum().backward()
    (TF.max_pool2d(TX, **kw) * 3).sum().backward()
    close(X.grad, TX.grad)


@pytest.mark.parametrize("o", [1, (3, 4), (4, 3), 5, (None, 2)])
def test_adaptive_avg_pool2d(o):
    x = r(2, 3, 9, 8)
    ref = TF.adaptive_avg_pool2d(torch.tensor(x), o)
    close(F.adaptive_avg_pool2d(tp.tensor(x), o), ref)
    cf = tp.compile(lambda a: F.adaptive_avg_pool2d(a, o), strict_native=True)
    close(cf(tp.tensor(x)), ref)


def test_modules_default_init_and_forward():
    tp.manual_seed(0)
    m = tp.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    assert tuple(m.weight.shape) == (6, 2, 3, 3) and tuple(m.bias.shape) == (6,)
    bound = 1 / np.sqrt(2 * 9)           # kaiming_uniform(a=sqrt(5)): 1/sqrt(fan_in)
    assert np.abs(m.weight.detach().numpy()).max() <= bound + 1e-6
    assert np.abs(m.bias.detach().numpy()).max() <= bound + 1e-6
    assert np.abs(m.weight.detach().numpy()).max() > 0.5 * bound
    tm = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    assert repr(m) == repr(tm)
    with torch.no_grad():
        tm.weight.copy_(torch.tensor(m.weight.detach().numpy()))
        tm.bias.copy_(torch.tensor(m.bias.detach().numpy()))
    x = r(2, 4, 7, 7)
    close(m(tp.tensor(x)), tm(torch.tensor(x)))
    c1 = tp.nn.Conv1d(3, 5, 2, bias=False)
    assert c1.bias is None and tuple(c1.weight.shape) == (5, 3, 2)
    seq = tp.nn.Sequential(tp.nn.MaxPool2d(2), tp.nn.AvgPool2d(2, 1), tp.nn.AdaptiveAvgPool2d(1),
                           tp.nn.Flatten())
    tseq = torch.nn.Sequential(torch.nn.MaxPool2d(2), torch.nn.AvgPool2d(2, 1),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    close(seq(tp.tensor(x)), tseq(torch.tensor(x)))
    with pytest.raises(ValueError):
        tp.nn.Conv2d(3, 4, 3, groups=2)


def test_batchnorm2d_training_eval_compiled():
    bn, tbn = tp.nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)
    cbn = tp.compile(bn, strict_native=True)
    x = r(3, 4, 5, 5)
    with tp.no_grad(), torch.no_grad():
        for i in range(3):
            close(cbn(tp.tensor(x * (i + 1))), tbn(torch.tensor(x * (i + 1))))
            close(bn.running_mean, tbn.running_mean)
            close(bn.running_var, tbn.running_var)
        assert int(bn.num_batches_tracked) == 3
        cbn.eval()
        tbn.eval()
        close(cbn(tp.tensor(x)), tbn(torch.tensor(x)))
    assert cbn.stats()["fallbacks"] == 0
    with pytest.raises(ValueError, match="expected 4D input"):
        bn(tp.tensor(x[0]))
    # eager training gradient
    bn.train()
    tbn.train()
    X, TX = tp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (bn(X) ** 3).sum().backward()
    (tbn(TX) ** 3).sum().backward()
    close(X.grad, TX.grad, rtol=1e-3, atol=1e-4)
    close(bn.weight.grad, tbn.weight.grad, rtol=1e-3, atol=1e-4)


def test_functional_batch_norm_training_compiled():
    x = r(4, 3, 6)
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    a, b = tp.tensor(rm.copy()), tp.tensor(rv.copy())
    ta, tb = torch.tensor(rm.copy()), torch.tensor(rv.copy())
    cf = tp.compile(lambda x, m, v: F.batch_norm(x, m, v, training=True, momentum=0.3),
                    strict_native=True)
    close(cf(tp.tensor(x), a, b), TF.batch_norm(torch.tensor(x), ta, tb, training=True, momentum=0.3))
    close(a, ta)
    close(b, tb)


# ---------------------------------------------------------------- attention

def _sdpa_pair(q, k, v, **kw):
    tkw = {n: (torch.tensor(x) if isinstance(x, np.ndarray) else x) for n, x in kw.items()}
    pkw = {n: (tp.tensor(x) if isinstance(x, np.ndarray) else x) for n, x in kw.items()}
    ref = TF.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), **tkw)
    got = F.scaled_dot_product_attention(tp.tensor(q), tp.tensor(k), tp.tensor(v), **pkw)
    close(got, ref)
    cf = tp.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **pkw),
                    strict_native=True)
    close(cf(tp.tensor(q), tp.tensor(k), tp.tensor(v)), ref)


def test_sdpa():
    q, k, v = r(2, 3, 5, 8), r(2, 3, 7, 8), r(2, 3, 7, 4)
    _sdpa_pair(q, k, v)
    _sdpa_pair(q, k, v, scale=0.3)
    _sdpa_pair(q, k[:, :, :5], v[:, :, :5], is_causal=True)
    _sdpa_pair(q, k, v, attn_mask=RNG.random((5, 7)) > 0.3)
    _sdpa_pair(q, k, v, attn_mask=r(2, 1, 5, 7))
    _sdpa_pair(q[0, 0], k[0, 0], v[0, 0])
    Q, K, V = (tp.tensor(a, requires_grad=True) for a in (q, k, v))
    TQ, TK, TV = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    (F.scaled_dot_product_attention(Q, K, V) ** 2).sum().backward()
    (TF.scaled_dot_product_attention(TQ, TK, TV) ** 2).sum().backward()
    for a, t in ((Q, TQ), (K, TK), (V, TV)):
        close(a.grad, t.grad)


def test_sdpa_bad_inputs():
    q, k, v = r(2, 5, 8), r(2, 7, 8), r(2, 7, 4)
    with pytest.raises(RuntimeError, match="head dim"):
        F.scaled_dot_product_attention(tp.tensor(q), tp.tensor(r(2, 7, 6)), tp.tensor(v))
    with pytest.raises(RuntimeError, match="sequence length"):
        F.scaled_dot_product_attention(tp.tensor(q), tp.tensor(k), tp.tensor(r(2, 6, 4)))
    with pytest.raises(RuntimeError, match="attn_mask of shape"):
        F.scaled_dot_product_attention(tp.tensor(q), tp.tensor(k), tp.tensor(v),
                                       attn_mask=tp.ones(5, 6, dtype=tp.bool))
    same_error(lambda: F.scaled_dot_product_attention(tp.tensor(q), tp.tensor(k), tp.tensor(v),
                                                      attn_mask=tp.ones(5, 7, dtype=tp.int64)),
               lambda: TF.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k),
                                                       torch.tensor(v),
                                                       attn_mask=torch.ones(5, 7, dtype=torch.int64)))
    same_error(lambda: F.scaled_dot_product_attention(tp.tensor(q), tp.tensor(k), tp.tensor(v),
                                                      attn_mask=tp.ones(5, 7, dtype=tp.bool),
                                                      is_causal=True),
               lambda: TF.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k),
                                                       torch.tensor(v),
                                                       attn_mask=torch.ones(5, 7, dtype=torch.bool),
                                                       is_causal=True))
    with pytest.raises(RuntimeError, match="same dtype"):
        F.scaled_dot_product_attention(tp.tensor(q), tp.tensor(k).double(), tp.tensor(v))


def _copy_mha(m, tm):
    with torch.no_grad():
        for (n, p), (tn, tpar) in zip(m.named_parameters(), tm.named_parameters()):
            assert n == tn
            tpar.copy_(torch.tensor(p.detach().numpy()))


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention(batch_first):
    E, H, L, S, N = 8, 2, 5, 6, 3
    m = tp.nn.MultiheadAttention(E, H, batch_first=batch_first)
    tm = torch.nn.MultiheadAttention(E, H, batch_first=batch_first)
    _copy_mha(m, tm)
    sh = (lambda a, b: (N, a, b)) if batch_first else (lambda a, b: (a, N, b))
    q, k, v = r(*sh(L, E)), r(*sh(S, E)), r(*sh(S, E))
    kpm = RNG.random((N, S)) > 0.7
    kpm[:, 0] = False
    am = r(L, S)
    for kw in (dict(), dict(key_padding_mask=kpm), dict(attn_mask=am),
               dict(attn_mask=am, key_padding_mask=kpm, average_attn_weights=False),
               dict(need_weights=False)):
        pkw = {n: (tp.tensor(x) if isinstance(x, np.ndarray) else x) for n, x in kw.items()}
        tkw = {n: (torch.tensor(x) if isinstance(x, np.ndarray) else x) for n, x in kw.items()}
        o, w = m(tp.tensor(q), tp.tensor(k), tp.tensor(v), **pkw)
        to, tw = tm(torch.tensor(q), torch.tensor(k), torch.tensor(v), **tkw)
        close(o, to)
        assert (w is None) == (tw is None)
        if w is not None:
            close(w, tw)
    m.eval()
    tm.eval()
    cm = tp.compile(m, strict_native=True)
    with tp.no_grad(), torch.no_grad():
        o, w = cm(tp.tensor(q), tp.tensor(k), tp.tensor(v), key_padding_mask=tp.tensor(kpm))
        to, tw = tm(torch.tensor(q), torch.tensor(k), torch.tensor(v),
                    key_padding_mask=torch.tensor(kpm))
    close(o, to)
    close(w, tw)


def test_multihead_attention_mask_errors():
    m = tp.nn.MultiheadAttention(8, 2)
    tm = torch.nn.MultiheadAttention(8, 2)
    q = r(5, 3, 8)
    same_error(lambda: m(tp.tensor(q), tp.tensor(q), tp.tensor(q), attn_mask=tp.zeros(4, 5)),
               lambda: tm(torch.tensor(q), torch.tensor(q), torch.tensor(q),
                          attn_mask=torch.zeros(4, 5)))
    with pytest.raises(AssertionError):
        tp.nn.MultiheadAttention(8, 3)
