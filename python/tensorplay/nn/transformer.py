"""nn.TransformerEncoderLayer, TransformerEncoder, TransformerDecoderLayer,
TransformerDecoder and Transformer, built from MultiheadAttention, Linear,
LayerNorm and Dropout with torch's submodule names (so torch's state_dict
keys: self_attn.in_proj_weight, linear1.weight, norm1.bias, layers.0...,
encoder.norm.weight, ...), post-norm or pre-norm (norm_first), relu/gelu
or a callable activation, batch_first, attention and key padding masks.
Every piece is an op-table composition: tp.compile traces a transformer
natively."""
import copy

import tensorplay as _tp
import tensorplay.functional as F
from tensorplay.nn.modules import Dropout, LayerNorm, Linear, Module, ModuleList, \
    MultiheadAttention

__all__ = ["TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer",
           "TransformerDecoder", "Transformer"]


def _activation(activation):
    if isinstance(activation, str):
        if activation == "relu":
            return F.relu
        if activation == "gelu":
            return F.gelu
        raise RuntimeError(f"activation should be relu/gelu, not {activation}")
    return activation


def _clones(module, n):
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


def generate_square_subsequent_mask(sz, device=None, dtype=None):
    """(sz, sz) float mask: 0 on and below the diagonal, -inf above (each
    position attends to itself and the positions before it)."""
    kw = {} if dtype is None else {"dtype": dtype}
    return _tp.triu(_tp.full((sz, sz), float("-inf"), **kw), diagonal=1)


def _build_layer(layer, cross, d_model, nhead, dim_feedforward, dropout, activation,
                 layer_norm_eps, batch_first, norm_first, bias, dtype):
    """The submodules of an encoder layer, or with cross=True a decoder
    layer (multihead_attn, norm3, dropout3), made in torch's order: the
    same random initialization and state_dict key order."""
    n = 3 if cross else 2

    def attention():
        return MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                  batch_first=batch_first, dtype=dtype)

    layer.self_attn = attention()
    if cross:
        layer.multihead_attn = attention()
    layer.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
    layer.dropout = Dropout(dropout)
    layer.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
    layer.norm_first = norm_first
    for i in range(1, n + 1):
        setattr(layer, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias,
                                             dtype=dtype))
    for i in range(1, n + 1):
        setattr(layer, f"dropout{i}", Dropout(dropout))
    layer.activation = _activation(activation)


class TransformerEncoderLayer(Module):
    """torch.nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048,
    dropout=0.1, activation=relu, layer_norm_eps=1e-5, batch_first=False,
    norm_first=False, bias=True). forward(src (S, N, E) or (N, S, E) with
    batch_first, or (S, E); src_mask (S, S) or (N*nhead, S, S), bool or
    float; src_key_padding_mask (N, S); is_causal: a hint that src_mask is
    the causal mask) -> like src."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=F.relu,
                 layer_norm_eps=1e-05, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__()
        _build_layer(self, False, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                     batch_first, norm_first, bias, dtype)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout2(x)


class TransformerDecoderLayer(Module):
    """torch.nn.TransformerDecoderLayer (same arguments as the encoder
    layer): self-attention over tgt, attention to memory, feed-forward.
    forward(tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None,
    tgt_is_causal=False, memory_is_causal=False) -> like tgt."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation=F.relu,
                 layer_norm_eps=1e-05, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__()
        _build_layer(self, True, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                     batch_first, norm_first, bias, dtype)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask,
                                    memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask,
                                              tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask,
                                               memory_key_padding_mask, memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           is_causal=is_causal, need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal=False):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, is_causal=is_causal,
                                need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout3(x)


class TransformerEncoder(Module):
    """torch.nn.TransformerEncoder(encoder_layer, num_layers, norm=None):
    num_layers deep copies of encoder_layer (layers.0, layers.1, ...), then
    norm. forward(src, mask=None, src_key_padding_mask=None, is_causal=None).
    (torch's nested-tensor fast path, which zeroes padded positions in
    inference, is not taken: padded positions keep their computed values,
    as torch gives with grad enabled.)"""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = False
        self.mask_check = mask_check

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        out = src
        causal = bool(is_causal) if is_causal is not None else False
        for mod in self.layers:
            out = mod(out, src_mask=mask, is_causal=causal,
                      src_key_padding_mask=src_key_padding_mask)
        if self.norm is not None:
            out = self.norm(out)
        return out


class TransformerDecoder(Module):
    """torch.nn.TransformerDecoder(decoder_layer, num_layers, norm=None).
    forward(tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None,
    tgt_is_causal=None, memory_is_causal=False)."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        out = tgt
        causal = bool(tgt_is_causal) if tgt_is_causal is not None else False
        for mod in self.layers:
            out = mod(out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=causal, memory_is_causal=memory_is_causal)
        if self.norm is not None:
            out = self.norm(out)
        return out


class Transformer(Module):
    """torch.nn.Transformer(d_model=512, nhead=8, num_encoder_layers=6,
    num_decoder_layers=6, dim_feedforward=2048, dropout=0.1,
    activation=relu, custom_encoder=None, custom_decoder=None,
    layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True):
    encoder (with a final LayerNorm) and decoder (likewise); every
    parameter of more than one dim xavier_uniform_. forward(src, tgt, ...)
    -> (T, N, E) (or (N, T, E) with batch_first). RuntimeError (torch's
    words) when src and tgt differ in batch or their feature size is not
    d_model."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation=F.relu, custom_encoder=None,
                 custom_decoder=None, layer_norm_eps=1e-05, batch_first=False,
                 norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout,
                                            activation, layer_norm_eps, batch_first,
                                            norm_first, bias, dtype=dtype)
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
            self.encoder = TransformerEncoder(layer, num_encoder_layers, norm)
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout,
                                            activation, layer_norm_eps, batch_first,
                                            norm_first, bias, dtype=dtype)
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
            self.decoder = TransformerDecoder(layer, num_decoder_layers, norm)
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal=False):
        batched = src.dim() == 3
        if batched:
            b = 0 if self.batch_first else 1
            if src.shape[b] != tgt.shape[b]:
                raise RuntimeError("the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    generate_square_subsequent_mask = staticmethod(generate_square_subsequent_mask)

    def _reset_parameters(self):
        from tensorplay.nn import init
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)
