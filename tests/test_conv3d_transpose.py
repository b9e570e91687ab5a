"""F.conv3d / nn.Conv3d and F.conv_transpose{1,2,3}d / nn.ConvTranspose*
against torch 2.13: values and gradients (float32, rtol 1e-4 / atol 1e-4),
errors word for word, parameter shapes, state_dict keys, init bounds,
output_size; compiled with strict_native=True (forward and backward)."""
import math

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional
RNG = np.random.default_rng(7)


def r(*s):
    return RNG.standard_normal(s).astype(np.float32)


def close(a, b, rtol=1e-4, atol=1e-4):
    a = a.detach().numpy() if hasattr(a, "detach") else a
    b = b.detach().numpy() if hasattr(b, "detach") else b
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def check_fn(name, x, w, b, kw, compiled=True):
    """Values and gradients of F.<name> against torch's, eager and compiled."""
    f, tf = getattr(F, name), getattr(TF, name)
    args = [x, w] + ([b] if b is not None else [])
    ref_in = [torch.tensor(a, requires_grad=True) for a in args]
    ref = tf(*ref_in, **kw)
    mine = [tp.tensor(a, requires_grad=True) for a in args]
    out = f(*mine, **kw)
    close(out, ref)
    g = r(*ref.shape)
    ref.backward(torch.tensor(g))
    out.backward(tp.tensor(g))
    for a, t in zip(mine, ref_in):
        close(a.grad, t.grad)
    if compiled:
        cf = tp.compile(lambda *a: f(*a, **kw), strict_native=True)
        close(cf(*(tp.tensor(a) for a in args)), ref)
        # the compiled backward: a training step's gradients, natively
        mine = [tp.tensor(a, requires_grad=True) for a in args]
        cl = tp.compile(lambda *a: (f(*a, **kw) * tp.tensor(g)).sum(), strict_native=True)
        cl(*mine).backward()
        for a, t in zip(mine, ref_in):
            close(a.grad, t.grad)


CONV3D = [dict(), dict(stride=2, padding=1), dict(padding="same", dilation=(1, 2, 1)),
          dict(groups=2, stride=(1, 2, 1), padding=(0, 1, 1))]


@pytest.mark.parametrize("kw", CONV3D, ids=[str(k) for k in CONV3D])
def test_conv3d_like_torch(kw):
    g = kw.get("groups", 1)
    check_fn("conv3d", r(2, 4, 5, 6, 5), r(6, 4 // g, 3, 2, 3), r(6), kw)


def test_conv3d_unbatched_and_module():
    x = r(3, 4, 5, 4)
    t = torch.nn.Conv3d(3, 4, (2, 3, 2), stride=(1, 2, 1), padding=1, bias=False)
    m = nn.Conv3d(3, 4, (2, 3, 2), stride=(1, 2, 1), padding=1, bias=False)
    assert repr(m) == repr(t)
    assert list(m.state_dict()) == list(t.state_dict()) == ["weight"]
    m.load_state_dict({k: tp.tensor(v.numpy()) for k, v in t.state_dict().items()})
    close(m(tp.tensor(x)), t(torch.tensor(x)))
    tr = torch.nn.Conv3d(2, 2, 3, padding=1, padding_mode="circular")
    mr = nn.Conv3d(2, 2, 3, padding=1, padding_mode="circular")
    mr.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in tr.state_dict().items()})
    x = r(1, 2, 4, 4, 4)
    close(mr(tp.tensor(x)), tr(torch.tensor(x)))


TRANSPOSE = [
    ("conv_transpose1d", (2, 4, 7), (4, 3, 3), dict()),
    ("conv_transpose1d", (2, 4, 7), (4, 3, 3), dict(stride=3, padding=2, output_padding=1)),
    ("conv_transpose1d", (4, 7), (4, 2, 4), dict(stride=2, groups=2, dilation=2)),
    ("conv_transpose2d", (2, 4, 5, 6), (4, 3, 3, 2), dict()),
    ("conv_transpose2d", (2, 4, 5, 6), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    ("conv_transpose2d", (2, 4, 5, 4), (4, 2, 3, 3),
     dict(stride=(2, 1), padding=(2, 0), groups=2, dilation=(1, 2))),
    ("conv_transpose2d", (1, 2, 4, 4), (2, 2, 2, 2), dict(padding=3, stride=3)),  # crops
    ("conv_transpose3d", (2, 4, 3, 4, 3), (4, 2, 2, 3, 2), dict()),
    ("conv_transpose3d", (1, 4, 3, 3, 4), (4, 3, 3, 2, 2),
     dict(stride=(2, 1, 2), padding=(1, 0, 1), output_padding=(1, 0, 0), groups=2)),
]


@pytest.mark.parametrize("name,xs,ws,kw", TRANSPOSE,
                         ids=[f"{t[0]}-{t[3]}" for t in TRANSPOSE])
def test_conv_transpose_like_torch(name, xs, ws, kw):
    cout = ws[1] * kw.get("groups", 1)
    check_fn(name, r(*xs), r(*ws), r(cout), kw)


def same_error(f1, f2, exc=RuntimeError):
    with pytest.raises(exc) as e1:
        f1()
    with pytest.raises(exc) as e2:
        f2()
    assert str(e1.value) == str(e2.value).replace("torch.Size", "tensorplay.Size")


ERRS = [
    lambda m, f: f.conv_transpose2d(m.tensor(r(2, 5, 4, 4)), m.tensor(r(4, 3, 3, 3))),
    lambda m, f: f.conv_transpose2d(m.tensor(r(2, 4, 4, 4)), m.tensor(r(4, 3, 3, 3)),
                                    output_padding=1),
    lambda m, f: f.conv_transpose1d(m.tensor(r(2, 4, 4)), m.tensor(r(4, 3, 3)),
                                    output_padding=2, stride=2),
    lambda m, f: f.conv_transpose3d(m.tensor(r(2, 4, 4, 4, 4)), m.tensor(r(4, 3, 3, 3, 3)),
                                    output_padding=(1, 0, 2), stride=(1, 1, 2)),
    lambda m, f: f.conv_transpose2d(m.tensor(r(2, 4, 4, 4)), m.tensor(r(4, 3, 3, 3)), groups=3),
    lambda m, f: f.conv_transpose2d(m.tensor(r(4, 4, 4)), m.tensor(r(4, 3, 3, 3)), padding=5),
    lambda m, f: f.conv_transpose3d(m.tensor(r(4, 4, 4)), m.tensor(r(4, 3, 3, 3, 3))),
    lambda m, f: f.conv3d(m.tensor(r(4, 4, 4)), m.tensor(r(4, 3, 3, 3, 3))),
    lambda m, f: f.conv3d(m.tensor(r(2, 4, 4, 4, 4)), m.tensor(r(4, 4, 5, 5, 5))),
    lambda m, f: f.conv3d(m.tensor(r(2, 4, 4, 4, 4)), m.tensor(r(4, 4, 3, 3, 3)),
                          padding="same", stride=2),
    lambda m, f: f.conv_transpose2d(m.tensor(r(2, 4, 4, 4)), m.tensor(r(4, 3, 3, 3)), stride=0),
    lambda m, f: f.conv_transpose2d(m.tensor(r(2, 4, 4, 4)), m.tensor(r(4, 3, 3, 3)),
                                    padding=-1),
    lambda m, f: f.conv_transpose2d(m.tensor(r(2, 4, 4, 4)), m.tensor(r(4, 3, 3, 3)),
                                    bias=m.tensor(r(4))),
]


@pytest.mark.parametrize("i", range(len(ERRS)))
def test_conv3d_transpose_errors_as_torch(i):
    same_error(lambda: ERRS[i](tp, F), lambda: ERRS[i](torch, TF))


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_transpose_module_like_torch(nd):
    kw = dict(stride=2, padding=1, output_padding=1, groups=2, dilation=1)
    T = getattr(torch.nn, f"ConvTranspose{nd}d")(4, 6, 3, **kw)
    M = getattr(nn, f"ConvTranspose{nd}d")(4, 6, 3, **kw)
    assert repr(M) == repr(T)
    sd = T.state_dict()
    assert list(M.state_dict()) == list(sd)
    assert [tuple(v.shape) for v in M.state_dict().values()] == \
        [tuple(v.shape) for v in sd.values()]
    # torch's init bounds: kaiming_uniform(a=sqrt(5)) gives 1/sqrt(fan_in)
    # for both, fan_in = C_out/groups * prod(k)
    bound = 1 / math.sqrt(3 * 3 ** nd)
    for p in M.parameters():
        a = p.detach().numpy()
        assert np.abs(a).max() <= bound + 1e-6 and np.abs(a).max() > bound * 0.5
    M.load_state_dict({k: tp.tensor(v.numpy()) for k, v in sd.items()})
    x = r(*(2, 4, 4, 3, 5)[:nd + 2])
    close(M(tp.tensor(x)), T(torch.tensor(x)))
    size = [2 * s for s in x.shape[2:]]
    close(M(tp.tensor(x), output_size=size), T(torch.tensor(x), output_size=size))
    cm = tp.compile(M, strict_native=True)
    close(cm(tp.tensor(x)), T(torch.tensor(x)))
    bad = [2 * s + 3 for s in x.shape[2:]]
    same_error(lambda: M(tp.tensor(x), output_size=bad),
               lambda: T(torch.tensor(x), output_size=bad), ValueError)
    same_error(lambda: getattr(nn, f"ConvTranspose{nd}d")(2, 2, 3, padding_mode="reflect"),
               lambda: getattr(torch.nn, f"ConvTranspose{nd}d")(2, 2, 3,
                                                                padding_mode="reflect"),
               ValueError)


def test_stack_backward_compiles_natively():
    # conv3d's columns are a stack; stack's derivative was a traced unbind
    # (one value for the tuple), so every compiled backward through a stack
    # failed under strict_native ("Proxy is not a sequence")
    x = r(3, 4)
    X = tp.tensor(x, requires_grad=True)
    TX = torch.tensor(x, requires_grad=True)
    f = tp.compile(lambda a: (tp.stack([a, a * 2, a[:, ::2].sum(1, keepdim=True) + a], -1)
                              ** 2).sum(), strict_native=True)
    f(X).backward()
    (torch.stack([TX, TX * 2, TX[:, ::2].sum(1, keepdim=True) + TX], -1) ** 2).sum().backward()
    close(X.grad, TX.grad, rtol=1e-5, atol=1e-5)


def test_many_views_backward_compiles_natively():
    # every view's gradient in a compiled backward is an index_select by a
    # constant inverse map; each used to get a run-time bounds check, and a
    # program holds 32 of them: 40 row selects (an unrolled recurrence)
    # failed under strict_native. Constant in-range indices need no check.
    x = r(40, 3)
    X = tp.tensor(x, requires_grad=True)
    TX = torch.tensor(x, requires_grad=True)
    f = tp.compile(lambda a: sum((a[t] * (t + 1)).sum() for t in range(40)),
                   strict_native=True)
    f(X).backward()
    sum((TX[t] * (t + 1)).sum() for t in range(40)).backward()
    close(X.grad, TX.grad, rtol=1e-5, atol=1e-5)
    # an index that is not a constant keeps its check: eager's error
    g = tp.compile(lambda a, i: a.index_select(0, i) * 2, strict_native=True)
    with pytest.raises(Exception):
        g(X.detach(), tp.tensor([0, 41]))
