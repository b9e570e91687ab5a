"""Model code beyond the GPT / seq2seq / ResNet of test_models.py (users
helper, session 6), run unmodified on tensorplay with torch's weights:
outputs, gradients and a few optimizer steps against torch 2.13, and the
forward compiled with strict_native=True where it is fully native."""
import io

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

from _models_users import lstm_lm, moe, unet, vae, vit  # noqa: E402


def close(a, b, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol, atol=atol)


def copy_weights(m, tm):
    m.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})


def grads_close(m, tm, rtol=1e-3, atol=1e-5):
    for (n, p), (tn, q) in zip(m.named_parameters(), tm.named_parameters()):
        assert n == tn
        close(p.grad, q.grad, rtol, atol)


@pytest.mark.parametrize("encoder", [False, True], ids=["blocks", "nn.TransformerEncoder"])
def test_vit_eval_eager_and_compiled(encoder):
    torch.manual_seed(0)
    kw = dict(depth=1, use_torch_encoder=encoder)
    tm, m = vit(torch)(**kw).eval(), vit(tp)(**kw).eval()
    copy_weights(m, tm)
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    with torch.no_grad(), tp.no_grad():
        ref = tm(torch.tensor(x))
        close(m(tp.tensor(x)), ref)
        cm = tp.compile(m, strict_native=True)
        close(cm(tp.tensor(x)), ref)
    assert cm.stats()["fallbacks"] == 0


def test_unet_train_step_and_compiled_eval():
    torch.manual_seed(0)
    tm, m = unet(torch)(w=2), unet(tp)(w=2)
    copy_weights(m, tm)
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    tgt = np.random.default_rng(1).integers(0, 2, (2, 16, 16))
    out, ref = m(tp.tensor(x)), tm(torch.tensor(x))          # training mode: batch stats
    close(out, ref)
    loss = tp.nn.functional.cross_entropy(out, tp.tensor(tgt))
    tloss = torch.nn.functional.cross_entropy(ref, torch.tensor(tgt))
    loss.backward()
    tloss.backward()
    close(loss, tloss)
    grads_close(m, tm)
    bn = m.down3.maxpool_conv[1].double_conv[1]
    close(bn.running_var, tm.down3.maxpool_conv[1].double_conv[1].running_var)
    m.eval()
    tm.eval()
    with torch.no_grad(), tp.no_grad():
        ref = tm(torch.tensor(x))
        cm = tp.compile(m, strict_native=True)
        close(cm(tp.tensor(x)), ref)
    assert cm.stats()["fallbacks"] == 0


def test_lstm_language_model_tied_bptt():
    torch.manual_seed(0)
    (TM, trep), (M, rep) = lstm_lm(torch), lstm_lm(tp)
    tm, m = TM("LSTM", dropout=0.0), M("LSTM", dropout=0.0)
    copy_weights(m, tm)
    assert m.decoder.weight is m.encoder.weight
    data = np.random.default_rng(0).integers(0, 50, (7, 3))
    m.eval()
    tm.eval()
    with torch.no_grad(), tp.no_grad():
        ref, (th, tc) = tm(torch.tensor(data), tm.init_hidden(3))
        cm = tp.compile(m, strict_native=True)
        out, (h, c) = cm(tp.tensor(data), m.init_hidden(3))
        close(out, ref)
        close(h, th)
        close(c, tc)
    m.train()
    tm.train()
    th, h = tm.init_hidden(3), m.init_hidden(3)
    crit_t, crit = torch.nn.NLLLoss(), tp.nn.NLLLoss()
    for step in range(2):                       # truncated BPTT, clipping, manual SGD
        seq = np.random.default_rng(step).integers(0, 50, (6, 3))
        tgt = np.random.default_rng(step + 10).integers(0, 50, (18,))
        th, h = trep(th), rep(h)
        tm.zero_grad()
        m.zero_grad()
        tout, th = tm(torch.tensor(seq), th)
        out, h = m(tp.tensor(seq), h)
        tl, lo = crit_t(tout, torch.tensor(tgt)), crit(out, tp.tensor(tgt))
        tl.backward()
        lo.backward()
        close(lo, tl)
        torch.nn.utils.clip_grad_norm_(tm.parameters(), 0.25)
        tp.nn.utils.clip_grad_norm_(m.parameters(), 0.25)
        for p in tm.parameters():
            p.data.add_(p.grad, alpha=-5.0)
        for p in m.parameters():
            p.data.add_(p.grad, alpha=-5.0)
    for p, q in zip(m.parameters(), tm.parameters()):
        close(p, q)


def test_moe_dense_native_and_sparse_like_torch():
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    (TS, TD), (S, D) = moe(torch), moe(tp)
    # dense (soft top-k gates): topk + scatter + einsum, fully native
    torch.manual_seed(0)
    td, d = TD(), D()
    copy_weights(d, td)
    ref = td(torch.tensor(x))
    out = d(tp.tensor(x))
    close(out, ref)
    ref.square().mean().backward()
    out.square().mean().backward()
    grads_close(d, td)
    cd = tp.compile(d, strict_native=True)
    with tp.no_grad():
        close(cd(tp.tensor(x)), ref)
    assert cd.stats()["fallbacks"] == 0
    # sparse (Mixtral-style): where(mask) dispatch, index_add_ combine
    torch.manual_seed(0)
    ts, s = TS(), S()
    copy_weights(s, ts)
    (ty, taux, _), (y, aux, _) = ts(torch.tensor(x)), s(tp.tensor(x))
    close(y, ty)
    close(aux, taux)
    (ty.square().mean() + 0.01 * taux).backward()
    (y.square().mean() + 0.01 * aux).backward()
    grads_close(s, ts)
    with tp.no_grad():
        close(tp.compile(s)(tp.tensor(x))[0], ty)


def test_vae_compiled_training_and_conv_vae_strict():
    rng = np.random.default_rng(0)
    x = rng.random((6, 64)).astype(np.float32)
    eps = rng.standard_normal((6, 8)).astype(np.float32)
    torch.manual_seed(0)
    (TV, tloss, TC), (V, loss, C) = vae(torch), vae(tp)
    tm, m = TV(), V()
    copy_weights(m, tm)
    topt = torch.optim.Adam(tm.parameters(), lr=1e-2)
    opt = tp.optim.Adam(m.parameters(), lr=1e-2)

    def step(x, e):
        r, mu, lv = m(x, e)
        return loss(r, x, mu, lv)
    cstep = tp.compile(step)
    for _ in range(3):
        topt.zero_grad()
        opt.zero_grad()
        r, mu, lv = tm(torch.tensor(x), torch.tensor(eps))
        tl = tloss(r, torch.tensor(x), mu, lv)
        lo = cstep(tp.tensor(x), tp.tensor(eps))
        tl.backward()
        lo.backward()
        close(lo, tl)
        topt.step()
        opt.step()
    for p, q in zip(m.parameters(), tm.parameters()):
        close(p, q)
    assert cstep.stats()["versions"] == 1 and cstep.stats()["fallbacks"] == 0
    # randn_like inside the compiled forward: the eager draw under one seed
    cm = tp.compile(m, strict_native=True)
    tp.manual_seed(3)
    a = cm(tp.tensor(x))[0]
    tp.manual_seed(3)
    close(a, m(tp.tensor(x))[0])
    # conv VAE: BCE-with-logits reduction='none', LeakyReLU, Unflatten, ConvTranspose2d
    torch.manual_seed(0)
    tc, c = TC(), C()
    copy_weights(c, tc)
    img = (rng.random((3, 1, 16, 16)) > 0.5).astype(np.float32)
    e2 = rng.standard_normal((3, 4)).astype(np.float32)
    tL, _ = tc(torch.tensor(img), torch.tensor(e2))
    tL.backward()
    cc = tp.compile(c, strict_native=True)
    L, _ = cc(tp.tensor(img), tp.tensor(e2))
    L.backward()
    close(L, tL)
    grads_close(c, tc)


def test_training_loop_adamw_cosine_accumulation_checkpoint():
    """The usual recipe: AdamW with decay / no-decay groups, cosine LR,
    gradient accumulation, clip_grad_norm_, label smoothing, no_grad eval,
    then a checkpoint (model, optimizer, scheduler) saved, loaded and
    resumed: each step as torch's."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8, 12)).astype(np.float32)
    Y = rng.integers(0, 4, 8)

    def build(lib):
        nn = lib.nn
        return nn.Sequential(nn.Linear(12, 16), nn.LayerNorm(16), nn.GELU(), nn.Dropout(0.0),
                             nn.Linear(16, 4))

    def setup(lib, model):
        decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
        opt = lib.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                               {"params": no_decay, "weight_decay": 0.0}], lr=3e-3,
                              betas=(0.9, 0.95))
        sched = lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4, eta_min=1e-4)
        return opt, sched

    def epoch(lib, model, fwd, opt, sched, data):
        crit = lib.nn.CrossEntropyLoss(label_smoothing=0.1)
        out = []
        model.train()
        opt.zero_grad(set_to_none=True)
        for i, (xb, yb) in enumerate(data):
            loss = crit(fwd(xb), yb) / 2
            loss.backward()
            if i % 2 == 1:
                out.append(float(lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
                opt.step()
                opt.zero_grad(set_to_none=True)
                sched.step()
                out.append(sched.get_last_lr()[0])
            out.append(loss.item())
        model.eval()
        with lib.no_grad():
            logits = lib.cat([fwd(xb) for xb, _ in data])
            out.append(crit(logits, lib.cat([yb for _, yb in data])).item())
        return out

    torch.manual_seed(0)
    tm = build(torch)
    m = build(tp)
    copy_weights(m, tm)
    tdata = [(torch.tensor(X[i:i + 2]), torch.tensor(Y[i:i + 2])) for i in range(0, 8, 2)]
    data = [(tp.tensor(X[i:i + 2]), tp.tensor(Y[i:i + 2])) for i in range(0, 8, 2)]
    topt, tsched = setup(torch, tm)
    opt, sched = setup(tp, m)
    fwd = tp.compile(m)
    np.testing.assert_allclose(epoch(tp, m, fwd, opt, sched, data),
                               epoch(torch, tm, tm, topt, tsched, tdata), rtol=1e-4, atol=1e-6)
    buf = io.BytesIO()
    tp.save({"model": m.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}, buf)
    buf.seek(0)
    ck = tp.load(buf)
    m2 = build(tp)
    m2.load_state_dict(ck["model"])
    opt2, sched2 = setup(tp, m2)
    opt2.load_state_dict(ck["opt"])
    sched2.load_state_dict(ck["sched"])
    assert sched2.last_epoch == tsched.last_epoch
    np.testing.assert_allclose(epoch(tp, m2, tp.compile(m2), opt2, sched2, data),
                               epoch(torch, tm, tm, topt, tsched, tdata), rtol=1e-4, atol=1e-6)
    assert fwd.stats()["fallbacks"] == 0
