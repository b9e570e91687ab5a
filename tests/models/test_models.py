"""Real models as tests (issue 16 item 8): PyTorch-idiom code run on
tensorplay with torch's weights, compared with torch eager, compiled with
strict_native=True (no fallback in forward)."""
import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

from _models import copy_weights, gpt, resnet, seq2seq  # noqa: E402


def close(a, b, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol, atol=atol)


def _pair(factory, **kw):
    torch.manual_seed(0)
    tm = factory(torch)(**kw).eval()
    m = factory(tp)(**kw).eval()
    copy_weights(m, tm)
    return m, tm


@pytest.mark.parametrize("sdpa", [True, False], ids=["sdpa", "explicit"])
def test_gpt_forward_eager_and_compiled(sdpa):
    m, tm = _pair(gpt, sdpa=sdpa)
    assert m.lm_head.weight is m.transformer.wte.weight          # tied
    idx = np.random.default_rng(1).integers(0, 64, (3, 11))
    with torch.no_grad(), tp.no_grad():
        ref = tm(torch.tensor(idx))
        close(m(tp.tensor(idx)), ref)
        cm = tp.compile(m, strict_native=True)
        close(cm(tp.tensor(idx)), ref)
        close(cm(tp.tensor(idx)), ref)
    st = cm.stats()
    assert st["fallbacks"] == 0 and st["versions"] == 1


def test_gpt_generate_compiled_in_place():
    m, tm = _pair(gpt)
    idx = np.random.default_rng(2).integers(0, 64, (2, 4))
    # top_k=1: the argmax token, the same in both libraries
    ref = tm.generate(torch.tensor(idx), 3, top_k=1)
    m.compile(strict_native=True)
    out = m.generate(tp.tensor(idx), 3, top_k=1)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    cf = m._compiled_call_impl
    st = cf.stats()
    assert st["eager_calls"] == 0 and st["fallbacks"] == 0
    assert st["versions"] <= 3          # one per length until shapes are dynamic (item 1)
    # temperature / top-k sampling: the compiled forward draws nothing, so
    # the same seed gives the same tokens as eager, all within the top k
    tp.manual_seed(7)
    a = m.generate(tp.tensor(idx), 2, temperature=0.8, top_k=5)
    m2, _ = _pair(gpt)
    tp.manual_seed(7)
    b = m2.generate(tp.tensor(idx), 2, temperature=0.8, top_k=5)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert tuple(a.shape) == (2, 6) and a.dtype == tp.int64


def test_seq2seq_with_masks():
    m, tm = _pair(seq2seq, layers=1)
    rng = np.random.default_rng(3)
    src = rng.integers(0, 40, (2, 9))
    tgt = rng.integers(0, 40, (2, 7))
    pad = np.zeros((2, 9), bool)
    pad[0, 6:] = True
    with torch.no_grad(), tp.no_grad():
        ref = tm(torch.tensor(src), torch.tensor(tgt), torch.tensor(pad))
        close(m(tp.tensor(src), tp.tensor(tgt), tp.tensor(pad)), ref)
        cm = tp.compile(m, strict_native=True)
        close(cm(tp.tensor(src), tp.tensor(tgt), tp.tensor(pad)), ref)
    assert cm.stats()["fallbacks"] == 0


def test_resnet_eval_and_train():
    m, tm = _pair(resnet)
    x = np.random.default_rng(4).standard_normal((4, 3, 16, 16)).astype(np.float32)
    with torch.no_grad(), tp.no_grad():
        ref = tm(torch.tensor(x))
        close(m(tp.tensor(x)), ref)
        cm = tp.compile(m, strict_native=True)
        close(cm(tp.tensor(x)), ref)
        assert cm.stats()["fallbacks"] == 0
        # training mode compiled: batch statistics and running-stat updates
        cm.train()
        tm.train()
        close(cm(tp.tensor(x)), tm(torch.tensor(x)))
        close(m.layer2.bn2.running_var, tm.layer2.bn2.running_var)
        assert cm.stats()["fallbacks"] == 0
    # one SGD step in training mode, eager: the same loss and gradients
    y = np.array([1, 3, 0, 9])
    loss = tp.nn.functional.cross_entropy(m(tp.tensor(x)), tp.tensor(y))
    tloss = torch.nn.functional.cross_entropy(tm(torch.tensor(x)), torch.tensor(y))
    loss.backward()
    tloss.backward()
    close(loss, tloss)
    for (n, p), (tn, q) in zip(m.named_parameters(), tm.named_parameters()):
        assert n == tn
        close(p.grad, q.grad, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("sdpa", [True, False], ids=["sdpa", "explicit"])
def test_gpt_generate_dynamic_one_version(sdpa):
    """dynamic=True: the growing length stays a symbolic size (SDPA's causal
    mask is derived from the scores, not a constant of the length), so 20
    tokens run one compiled version, no eager call."""
    m, tm = _pair(gpt, sdpa=sdpa)
    idx = np.random.default_rng(5).integers(0, 64, (1, 4))
    m.compile(dynamic=True, strict_native=True)
    out = m.generate(tp.tensor(idx), 20, top_k=1)
    np.testing.assert_array_equal(out.numpy(), tm.generate(torch.tensor(idx), 20, top_k=1).numpy())
    st = m._compiled_call_impl.stats()
    assert st["versions"] == 1 and st["eager_calls"] == 0 and st["fallbacks"] == 0


def test_gpt_generate_default_compile_goes_dynamic():
    """The default (dynamic=None) is automatic dynamic for module.compile()
    as for tp.compile(): the second length makes the length symbolic, so 10
    tokens of a growing sequence run 2 versions and no eager call (it was
    one version per length, then eager past the limit, for
    module.compile())."""
    m, tm = _pair(gpt)
    idx = np.random.default_rng(3).integers(0, 64, (1, 4))
    m.compile(strict_native=True)
    out = m.generate(tp.tensor(idx), 10, top_k=1)
    np.testing.assert_array_equal(out.numpy(), tm.generate(torch.tensor(idx), 10, top_k=1).numpy())
    st = m._compiled_call_impl.stats()
    assert st["versions"] == 2 and st["eager_calls"] == 0 and st["fallbacks"] == 0
