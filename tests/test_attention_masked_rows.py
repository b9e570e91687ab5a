"""A query row whose keys are all masked (a causal mask over left padding)
is 0 in MultiheadAttention(need_weights=False) and so in the transformer
layers, as torch's (it runs scaled_dot_product_attention's _safe_softmax);
the returned weights' softmax stays NaN there, as torch's. The row was NaN,
which the layer's LayerNorm then spread over the whole output row."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn

torch = pytest.importorskip("torch")

E, S, N = 8, 5, 3


def _copy(tm, pm):
    pm.load_state_dict({k: tp.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})


def _masks():
    causal = np.triu(np.ones((S, S), bool), 1)
    kpm = np.zeros((N, S), bool)
    kpm[0, -2:] = True
    kpm[2, 0] = True          # batch 2, query 0: its only key is padding
    return causal, kpm


@pytest.mark.parametrize("need_weights", [False, True])
def test_mha_fully_masked_row(need_weights):
    torch.manual_seed(0)
    tm, pm = torch.nn.MultiheadAttention(E, 2), nn.MultiheadAttention(E, 2)
    _copy(tm, pm)
    causal, kpm = _masks()
    x = np.random.default_rng(0).standard_normal((S, N, E)).astype(np.float32)
    with torch.no_grad():
        want = tm(torch.tensor(x), torch.tensor(x), torch.tensor(x), attn_mask=torch.tensor(causal),
                  key_padding_mask=torch.tensor(kpm), need_weights=need_weights)[0].numpy()
    got = pm(tp.tensor(x), tp.tensor(x), tp.tensor(x), attn_mask=tp.tensor(causal),
             key_padding_mask=tp.tensor(kpm), need_weights=need_weights)[0].detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)
    assert np.isnan(got[0, 2]).all() == need_weights


@pytest.mark.parametrize("compiled", [False, True])
def test_encoder_layer_with_causal_mask_over_padding(compiled):
    torch.manual_seed(0)
    te = torch.nn.TransformerEncoderLayer(E, 2, 16, dropout=0.0)
    pe = nn.TransformerEncoderLayer(E, 2, 16, dropout=0.0)
    _copy(te, pe)
    causal, kpm = _masks()
    x = np.random.default_rng(1).standard_normal((S, N, E)).astype(np.float32)
    with torch.no_grad():
        want = te(torch.tensor(x), src_mask=torch.tensor(causal),
                  src_key_padding_mask=torch.tensor(kpm)).numpy()
    f = tp.compile(pe) if compiled else pe
    got = f(tp.tensor(x), src_mask=tp.tensor(causal), src_key_padding_mask=tp.tensor(kpm))
    got = got.detach().numpy()
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
