"""Model code written once in the PyTorch idiom and instantiated for both
libraries (`lib` is torch or tensorplay): a GPT-2-style decoder, a
transformer encoder-decoder and a ResNet-style CNN."""
import math


def gpt(lib):
    nn, F = lib.nn, lib.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self, n_embd, n_head, block_size, sdpa):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.n_head = n_head
            self.n_embd = n_embd
            self.sdpa = sdpa
            self.register_buffer("bias", lib.tril(lib.ones(block_size, block_size))
                                 .view(1, 1, block_size, block_size))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            if self.sdpa:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0,
                                                   is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
                att = F.softmax(att, dim=-1)
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self, n_embd):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.gelu = nn.GELU(approximate="tanh")
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self, n_embd, n_head, block_size, sdpa):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = CausalSelfAttention(n_embd, n_head, block_size, sdpa)
            self.ln_2 = nn.LayerNorm(n_embd)
            self.mlp = MLP(n_embd)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlp(self.ln_2(x))
            return x

    class GPT(nn.Module):
        def __init__(self, vocab_size=64, block_size=32, n_layer=2, n_head=4, n_embd=32,
                     sdpa=True):
            super().__init__()
            self.block_size = block_size
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab_size, n_embd),
                wpe=nn.Embedding(block_size, n_embd),
                h=nn.ModuleList([Block(n_embd, n_head, block_size, sdpa)
                                 for _ in range(n_layer)]),
                ln_f=nn.LayerNorm(n_embd),
            ))
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight      # tied embeddings

        def forward(self, idx):
            b, t = idx.size()
            pos = lib.arange(0, t, dtype=lib.long)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            return self.lm_head(x)

        @lib.no_grad()
        def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
            for _ in range(max_new_tokens):
                idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
                logits = self(idx_cond)
                logits = logits[:, -1, :] / temperature
                if top_k is not None:
                    v, _ = lib.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float("Inf")
                probs = F.softmax(logits, dim=-1)
                idx_next = lib.multinomial(probs, num_samples=1)
                idx = lib.cat((idx, idx_next), dim=1)
            return idx

    return GPT


def seq2seq(lib):
    nn, F = lib.nn, lib.nn.functional

    class EncoderLayer(nn.Module):
        def __init__(self, d, h, ff):
            super().__init__()
            self.self_attn = nn.MultiheadAttention(d, h, batch_first=True)
            self.linear1 = nn.Linear(d, ff)
            self.linear2 = nn.Linear(ff, d)
            self.norm1 = nn.LayerNorm(d)
            self.norm2 = nn.LayerNorm(d)

        def forward(self, src, src_key_padding_mask):
            a, _ = self.self_attn(src, src, src, key_padding_mask=src_key_padding_mask,
                                  need_weights=False)
            src = self.norm1(src + a)
            return self.norm2(src + self.linear2(F.relu(self.linear1(src))))

    class DecoderLayer(nn.Module):
        def __init__(self, d, h, ff):
            super().__init__()
            self.self_attn = nn.MultiheadAttention(d, h, batch_first=True)
            self.cross_attn = nn.MultiheadAttention(d, h, batch_first=True)
            self.linear1 = nn.Linear(d, ff)
            self.linear2 = nn.Linear(ff, d)
            self.norm1 = nn.LayerNorm(d)
            self.norm2 = nn.LayerNorm(d)
            self.norm3 = nn.LayerNorm(d)

        def forward(self, tgt, memory, tgt_mask, memory_key_padding_mask):
            a, _ = self.self_attn(tgt, tgt, tgt, attn_mask=tgt_mask, need_weights=False)
            tgt = self.norm1(tgt + a)
            a, _ = self.cross_attn(tgt, memory, memory,
                                   key_padding_mask=memory_key_padding_mask)
            tgt = self.norm2(tgt + a)
            return self.norm3(tgt + self.linear2(F.relu(self.linear1(tgt))))

    class Seq2Seq(nn.Module):
        def __init__(self, vocab=40, d=32, h=4, ff=64, layers=2, max_len=32):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(max_len, d)
            self.enc = nn.ModuleList([EncoderLayer(d, h, ff) for _ in range(layers)])
            self.dec = nn.ModuleList([DecoderLayer(d, h, ff) for _ in range(layers)])
            self.out = nn.Linear(d, vocab)

        def forward(self, src, tgt, src_pad):
            S, T = src.size(1), tgt.size(1)
            x = self.emb(src) + self.pos(lib.arange(S))
            for layer in self.enc:
                x = layer(x, src_pad)
            causal = lib.triu(lib.full((T, T), float("-inf")), diagonal=1)
            y = self.emb(tgt) + self.pos(lib.arange(T))
            for layer in self.dec:
                y = layer(y, x, causal, src_pad)
            return self.out(y)

    return Seq2Seq


def resnet(lib):
    nn, F = lib.nn, lib.nn.functional

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                              nn.BatchNorm2d(cout))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + self.shortcut(x))

    class ResNet(nn.Module):
        def __init__(self, num_classes=10, width=8):
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.pool = nn.MaxPool2d(2)
            self.layer1 = BasicBlock(width, width, 1)
            self.layer2 = BasicBlock(width, 2 * width, 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.flatten = nn.Flatten()
            self.fc = nn.Linear(2 * width, num_classes)

        def forward(self, x):
            x = self.pool(F.relu(self.bn1(self.conv1(x))))
            x = self.layer2(self.layer1(x))
            return self.fc(self.flatten(self.avgpool(x)))

    return ResNet


def copy_weights(tp_model, torch_model):
    """torch's parameters and buffers into the tensorplay model (same names)."""
    import tensorplay as tp
    sd = {k: tp.tensor(v.detach().numpy()) for k, v in torch_model.state_dict().items()}
    tp_model.load_state_dict(sd)
