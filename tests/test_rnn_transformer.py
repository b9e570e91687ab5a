"""nn.RNN / LSTM / GRU, their cells, and nn.Transformer* against torch 2.13:
parameter names, shapes and order (a torch state_dict loads), init ranges,
errors word for word, outputs and final states, gradients of inputs and
parameters (float32, rtol/atol 1e-5; 1e-4 for the transformer's gradients),
and compiled with strict_native=True, forward and backward."""
import warnings

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(5)


def r(*s):
    return RNG.standard_normal(s).astype(np.float32)


def close(a, b, rtol=1e-5, atol=1e-5):
    a = a.detach().numpy() if hasattr(a, "detach") else a
    b = b.detach().numpy() if hasattr(b, "detach") else b
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def twin(name, *args, **kw):
    """The same module in both libraries, torch's weights copied over."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = getattr(torch.nn, name)(*args, **kw)
        m = getattr(nn, name)(*args, **kw)
    sd = t.state_dict()
    assert list(m.state_dict()) == list(sd)
    assert [tuple(v.shape) for v in m.state_dict().values()] == \
        [tuple(v.shape) for v in sd.values()]
    m.load_state_dict({k: tp.tensor(v.numpy()) for k, v in sd.items()})
    return m, t


def flat(o):
    if isinstance(o, (tuple, list)):
        return [y for x in o for y in flat(x)]
    return [o]


def check_run(m, t, args, grads=True, rtol=1e-5, atol=1e-5):
    """m(*args) against t(*args): every output, then the gradients of the
    float inputs and of every parameter."""
    def conv(lib, a):
        if isinstance(a, tuple):
            return tuple(conv(lib, x) for x in a)
        if isinstance(a, np.ndarray):
            # data (3-D and up) requires grad; masks (2-D) do not
            return lib.tensor(a, requires_grad=a.dtype == np.float32 and a.ndim >= 3)
        return a
    ta = [conv(torch, a) for a in args]
    pa = [conv(tp, a) for a in args]
    ref, out = flat(t(*ta)), flat(m(*pa))
    assert len(ref) == len(out)
    for o, q in zip(out, ref):
        assert tuple(o.shape) == tuple(q.shape)
        close(o, q, rtol, atol)
    if not grads:
        return
    gs = [r(*q.shape) for q in ref]
    sum((q * torch.tensor(g)).sum() for q, g in zip(ref, gs)).backward()
    sum((o * tp.tensor(g)).sum() for o, g in zip(out, gs)).backward()
    for a, b in zip(flat(pa), flat(ta)):
        if isinstance(b, torch.Tensor) and b.requires_grad:
            close(a.grad, b.grad, rtol, atol)
    for (k, p), (_, q) in zip(m.named_parameters(), t.named_parameters()):
        assert (p.grad is None) == (q.grad is None), k
        if q.grad is not None:
            close(p.grad, q.grad, rtol, atol)


RNNS = [("LSTM", dict()), ("LSTM", dict(num_layers=2, bidirectional=True)),
        ("LSTM", dict(proj_size=3, batch_first=True)),
        ("LSTM", dict(num_layers=2, bias=False, proj_size=2, bidirectional=True)),
        ("GRU", dict()), ("GRU", dict(num_layers=2, bidirectional=True, batch_first=True)),
        ("GRU", dict(bias=False)), ("RNN", dict()),
        ("RNN", dict(nonlinearity="relu", num_layers=2, bidirectional=True)),
        ("RNN", dict(num_layers=3, batch_first=True, bias=False))]


@pytest.mark.parametrize("name,kw", RNNS, ids=[f"{n}-{k}" for n, k in RNNS])
@pytest.mark.filterwarnings("ignore:LSTM with projections")
def test_rnn_like_torch(name, kw):
    m, t = twin(name, 4, 5, **kw)
    assert repr(m) == repr(t)
    bf = kw.get("batch_first", False)
    x = r(2, 3, 4) if bf else r(3, 2, 4)
    xu = x[0] if bf else x[:, 0]         # one sequence, unbatched
    check_run(m, t, [x])
    dirs = 2 if kw.get("bidirectional") else 1
    layers = kw.get("num_layers", 1)
    hs = kw.get("proj_size", 0) or 5
    h0 = r(layers * dirs, 2, hs)
    m.zero_grad()
    t.zero_grad()
    if name == "LSTM":
        c0 = r(layers * dirs, 2, 5)
        check_run(m, t, [x, (h0, c0)])
        # unbatched: (L, H_in) with 2-D states
        ref = t(torch.tensor(xu), (torch.tensor(h0[:, 0]), torch.tensor(c0[:, 0])))
        out = m(tp.tensor(xu), (tp.tensor(h0[:, 0]), tp.tensor(c0[:, 0])))
    else:
        check_run(m, t, [x, h0])
        ref = t(torch.tensor(xu), torch.tensor(h0[:, 0]))
        out = m(tp.tensor(xu), tp.tensor(h0[:, 0]))
    for o, q in zip(flat(out), flat(ref)):
        assert tuple(o.shape) == tuple(q.shape)
        close(o, q)


@pytest.mark.filterwarnings("ignore:LSTM with projections")
@pytest.mark.parametrize("name,kw", [("LSTM", dict(num_layers=2, bidirectional=True,
                                                    proj_size=2)),
                                     ("GRU", dict(batch_first=True)),
                                     ("RNN", dict(nonlinearity="relu"))])
def test_rnn_compiled_natively(name, kw):
    m, t = twin(name, 3, 4, **kw)
    x = r(3, 2, 3)
    cm = tp.compile(m, strict_native=True)
    X, TX = tp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref = flat(cm(X)), flat(t(TX))
    for o, q in zip(out, ref):
        close(o, q)
    gs = [r(*q.shape) for q in ref]
    sum((q * torch.tensor(g)).sum() for q, g in zip(ref, gs)).backward()
    sum((o * tp.tensor(g)).sum() for o, g in zip(out, gs)).backward()
    close(X.grad, TX.grad)
    for p, q in zip(m.parameters(), t.parameters()):
        close(p.grad, q.grad)


CELLS = [("LSTMCell", dict()), ("LSTMCell", dict(bias=False)), ("GRUCell", dict()),
         ("RNNCell", dict()), ("RNNCell", dict(nonlinearity="relu", bias=False))]


@pytest.mark.parametrize("name,kw", CELLS, ids=[f"{n}-{k}" for n, k in CELLS])
def test_cells_like_torch_eager_and_compiled(name, kw):
    m, t = twin(name, 4, 3, **kw)
    assert repr(m) == repr(t)
    x = r(2, 4)
    check_run(m, t, [x])
    h = (r(2, 3), r(2, 3)) if name == "LSTMCell" else r(2, 3)
    m.zero_grad()
    t.zero_grad()
    check_run(m, t, [x, h])
    # unbatched
    hu = (h[0][0], h[1][0]) if name == "LSTMCell" else h[0]
    th = tuple(torch.tensor(a) for a in hu) if name == "LSTMCell" else torch.tensor(hu)
    ph = tuple(tp.tensor(a) for a in hu) if name == "LSTMCell" else tp.tensor(hu)
    for o, q in zip(flat(m(tp.tensor(x[0]), ph)), flat(t(torch.tensor(x[0]), th))):
        assert tuple(o.shape) == tuple(q.shape)
        close(o, q)
    cm = tp.compile(m, strict_native=True)
    for o, q in zip(flat(cm(tp.tensor(x))), flat(t(torch.tensor(x)))):
        close(o, q)


def test_rnn_init_ranges_and_dropout():
    m = nn.LSTM(3, 16, num_layers=2, dropout=0.5)
    for p in m.parameters():
        a = np.abs(p.detach().numpy())
        assert a.max() <= 0.25 + 1e-7 and a.max() > 0.2      # U(-1/sqrt(16), 1/sqrt(16))
    c = nn.GRUCell(3, 4)
    for p in c.parameters():
        assert np.abs(p.detach().numpy()).max() <= 0.5 + 1e-7
    x = tp.tensor(r(5, 2, 3))
    a, _ = m(x)
    b, _ = m(x)
    assert not np.allclose(a.detach().numpy(), b.detach().numpy())   # dropout between layers
    m.eval()
    a, _ = m(x)
    b, _ = m(x)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.GRU(3, 4, dropout=0.2)


def same_error(f_tp, f_torch, exc=Exception):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(exc) as et:
            f_torch()
        with pytest.raises(exc) as ep:
            f_tp()
    assert type(ep.value) is type(et.value)
    assert str(ep.value) == str(et.value).replace("torch.", "tensorplay.")


RNN_ERRS = [
    lambda m: m.nn.LSTM(3, 4, dropout=1.5),
    lambda m: m.nn.LSTM(3, 4, proj_size=4),
    lambda m: m.nn.LSTM(3, 4, proj_size=-1),
    lambda m: m.nn.GRU(3, 4, proj_size=2),
    lambda m: m.nn.RNN(3, 4, nonlinearity="sigmoid"),
    lambda m: m.nn.RNN(3, 4, num_layers=0),
    lambda m: m.nn.LSTM(3, 0),
    lambda m: m.nn.LSTM(3, 4.0),
    lambda m: m.nn.LSTM(3, 4, bias=1),
    lambda m: m.nn.LSTM(3, 4)(m.ones(2, 2, 2, 3)),
    lambda m: m.nn.LSTM(3, 4)(m.ones(2, 2, 5)),
    lambda m: m.nn.GRU(3, 4)(m.ones(2, 2, 3), m.ones(1, 3, 4)),
    lambda m: m.nn.GRU(3, 4)(m.ones(2, 2, 3), m.ones(2, 4)),
    lambda m: m.nn.LSTM(3, 4)(m.ones(2, 2, 3), (m.ones(1, 2, 4), m.ones(1, 2, 5))),
    lambda m: m.nn.LSTM(3, 4)(m.ones(2, 2, 3), (m.ones(2, 4), m.ones(1, 2, 4))),
    lambda m: m.nn.RNN(3, 4)(m.ones(2, 2, 3, dtype=m.float64)),
    lambda m: m.nn.LSTMCell(3, 4)(m.ones(2, 2, 3)),
    lambda m: m.nn.GRUCell(3, 4)(m.ones(2, 5)),
    lambda m: m.nn.GRUCell(3, 4)(m.ones(2, 3), m.ones(3, 4)),
    lambda m: m.nn.RNNCell(3, 4)(m.ones(2, 3), m.ones(2, 5)),
    lambda m: m.nn.LSTMCell(3, 4)(m.ones(3), (m.ones(4), m.ones(1, 1, 4))),
]


@pytest.mark.parametrize("i", range(len(RNN_ERRS)))
def test_rnn_errors_like_torch(i):
    same_error(lambda: RNN_ERRS[i](tp), lambda: RNN_ERRS[i](torch))


def test_packed_sequence_refused():
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.ones(3, 2, 3), [3, 2])
    with pytest.raises(NotImplementedError, match="packed sequences"):
        nn.LSTM(3, 4)(packed)


# ---- transformers

ENC = [dict(), dict(norm_first=True, activation="gelu"), dict(batch_first=True),
       dict(activation=F.gelu, bias=False, norm_first=True, batch_first=True)]


@pytest.mark.parametrize("kw", ENC, ids=[str(k) for k in ENC])
def test_encoder_layer_like_torch(kw):
    tkw = dict(kw)
    if tkw.get("activation") is F.gelu:
        tkw["activation"] = torch.nn.functional.gelu
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, **tkw)
    m = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, **kw)
    sd = t.state_dict()
    assert list(m.state_dict()) == list(sd)
    m.load_state_dict({k: tp.tensor(v.numpy()) for k, v in sd.items()})
    bf = kw.get("batch_first", False)
    x = r(2, 5, 8) if bf else r(5, 2, 8)
    mask = np.triu(np.ones((5, 5), bool), 1)
    kpm = np.zeros((2, 5), bool)
    kpm[1, 3:] = True
    check_run(m, t, [x, mask, kpm], rtol=1e-4, atol=1e-4)
    fmask = np.where(mask, -1e9, 0.0).astype(np.float32)
    m.zero_grad()
    t.zero_grad()
    check_run(m, t, [x, fmask], rtol=1e-4, atol=1e-4)


def test_decoder_and_transformer_like_torch():
    for kw in (dict(), dict(norm_first=True, batch_first=True, activation="gelu")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = torch.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2,
                                     num_decoder_layers=2, dim_feedforward=16, dropout=0.0,
                                     **kw)
        m = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2,
                           dim_feedforward=16, dropout=0.0, **kw)
        sd = t.state_dict()
        assert list(m.state_dict()) == list(sd)
        assert [tuple(v.shape) for v in m.state_dict().values()] == \
            [tuple(v.shape) for v in sd.values()]
        # xavier_uniform_ on every matrix: bound sqrt(6 / (fan_in + fan_out))
        w = m.encoder.layers[0].linear1.weight.detach().numpy()
        assert np.abs(w).max() <= np.sqrt(6 / 24) + 1e-6
        assert m.encoder.layers[0].linear1.weight is not m.encoder.layers[1].linear1.weight
        m.load_state_dict({k: tp.tensor(v.numpy()) for k, v in sd.items()})
        bf = kw.get("batch_first", False)
        src = r(2, 5, 8) if bf else r(5, 2, 8)
        tgt = r(2, 4, 8) if bf else r(4, 2, 8)
        tmask = nn.Transformer.generate_square_subsequent_mask(4).numpy()
        np.testing.assert_array_equal(
            tmask, torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())
        kpm = np.zeros((2, 5), bool)
        kpm[0, 4:] = True

        def run(lib, mod, a, b, mk, kp):
            return mod(a, b, tgt_mask=mk, src_key_padding_mask=kp, memory_key_padding_mask=kp)
        tt = lambda a, b, mk, kp: run(torch, t, a, b, mk, kp)    # noqa: E731
        mm = lambda a, b, mk, kp: run(tp, m, a, b, mk, kp)       # noqa: E731
        check_run(_Call(mm, m), _Call(tt, t), [src, tgt, tmask, kpm], rtol=1e-4, atol=1e-4)
    # errors
    m = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                       dim_feedforward=16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = torch.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                                 dim_feedforward=16)
    same_error(lambda: m(tp.tensor(r(5, 2, 8)), tp.tensor(r(4, 3, 8))),
               lambda: t(torch.tensor(r(5, 2, 8)), torch.tensor(r(4, 3, 8))))
    same_error(lambda: m(tp.tensor(r(5, 2, 6)), tp.tensor(r(4, 2, 6))),
               lambda: t(torch.tensor(r(5, 2, 6)), torch.tensor(r(4, 2, 6))))
    same_error(lambda: nn.TransformerEncoderLayer(8, 2, activation="tanh"),
               lambda: torch.nn.TransformerEncoderLayer(8, 2, activation="tanh"))


class _Call:
    """A callable with the parameters of the module it calls (check_run
    compares parameter gradients)."""

    def __init__(self, fn, mod):
        self.fn, self.mod = fn, mod

    def __call__(self, *a):
        return self.fn(*a)

    def named_parameters(self):
        return self.mod.named_parameters()


def test_transformer_compiled_natively():
    t = torch.nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                         batch_first=True, norm_first=True)
    m = nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True,
                                   norm_first=True)
    m.load_state_dict({k: tp.tensor(v.numpy()) for k, v in t.state_dict().items()})
    tgt, mem = r(2, 4, 8), r(2, 5, 8)
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    cm = tp.compile(lambda a, b: m(a, b, tgt_mask=mask), strict_native=True)
    A, B = tp.tensor(tgt, requires_grad=True), tp.tensor(mem, requires_grad=True)
    TA, TB = torch.tensor(tgt, requires_grad=True), torch.tensor(mem, requires_grad=True)
    out = cm(A, B)
    ref = t(TA, TB, tgt_mask=torch.tensor(mask.numpy()))
    close(out, ref, 1e-4, 1e-4)
    g = r(*ref.shape)
    (out * tp.tensor(g)).sum().backward()
    (ref * torch.tensor(g)).sum().backward()
    close(A.grad, TA.grad, 1e-4, 1e-4)
    close(B.grad, TB.grad, 1e-4, 1e-4)
    for p, q in zip(m.parameters(), t.parameters()):
        close(p.grad, q.grad, 1e-4, 1e-4)


# ---- compiler limits an unrolled recurrence reached

def test_long_unrolled_backward_compiles_natively():
    # 40 steps of tanh(x_t W^T): W's gradient is a sum of 40 products, and
    # the backward's pointwise chain grew one body / one fused kernel past
    # the 64 buffers code generation takes ("kernel has too many buffers")
    x, w = r(40, 3, 5), r(6, 5)
    X, W = tp.tensor(x, requires_grad=True), tp.tensor(w, requires_grad=True)
    TX, TW = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)

    def f(lib, fn):
        return lambda a, b: lib.stack([fn(at, b).tanh() for at in a.unbind(0)], 0).sum()
    tp.compile(f(tp, F.linear), strict_native=True)(X, W).backward()
    f(torch, torch.nn.functional.linear)(TX, TW).backward()
    close(X.grad, TX.grad)
    close(W.grad, TW.grad, 1e-4, 1e-4)


def test_saved_slice_of_a_product_compiles_backward():
    # the backward saved a slice of a matmul (a GRU's gate); the forward
    # program handed it over in another layout than the backward was
    # compiled for ("input 0 has another ... strides")
    x, w = r(3, 4), r(6, 4)
    X, W = tp.tensor(x, requires_grad=True), tp.tensor(w, requires_grad=True)
    TX, TW = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    f = tp.compile(lambda a, b: ((a @ b.t())[:, 4:] * a[:, :2]).sum(), strict_native=True)
    f(X, W).backward()
    ((TX @ TW.t())[:, 4:] * TX[:, :2]).sum().backward()
    close(X.grad, TX.grad)
    close(W.grad, TW.grad)
