"""More model code in the PyTorch idiom (users helper, session 6), written once
and instantiated for torch and tensorplay (`lib`): a ViT (patch embedding by a
strided Conv2d, cls token, learned position embedding, hand-written blocks or
nn.TransformerEncoder), a UNet (Conv2d/ConvTranspose2d/MaxPool2d/BatchNorm2d,
skip connections by cat, F.pad, F.interpolate), the word-language-model RNN
(Embedding + LSTM/GRU + tied decoder), mixture-of-experts layers (top-k router,
index_add dispatch, einsum), and VAEs (reparameterization, BCE and KL)."""

def vit(lib):
    nn, F = lib.nn, lib.nn.functional
    class PatchEmbed(nn.Module):
        def __init__(self, img=16, patch=4, cin=3, d=32):
            super().__init__()
            self.proj = nn.Conv2d(cin, d, kernel_size=patch, stride=patch)
            self.n = (img // patch) ** 2
        def forward(self, x):
            x = self.proj(x)                       # B, d, H/p, W/p
            return x.flatten(2).transpose(1, 2)    # B, N, d
    class Attention(nn.Module):
        def __init__(self, d, h, p):
            super().__init__()
            self.h = h; self.scale = (d // h) ** -0.5
            self.qkv = nn.Linear(d, d * 3, bias=True)
            self.attn_drop = nn.Dropout(p)
            self.proj = nn.Linear(d, d)
            self.proj_drop = nn.Dropout(p)
        def forward(self, x):
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, N, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            attn = (q @ k.transpose(-2, -1)) * self.scale
            attn = attn.softmax(dim=-1)
            attn = self.attn_drop(attn)
            x = (attn @ v).transpose(1, 2).reshape(B, N, C)
            return self.proj_drop(self.proj(x))
    class Block(nn.Module):
        def __init__(self, d, h, p):
            super().__init__()
            self.norm1 = nn.LayerNorm(d, eps=1e-6)
            self.attn = Attention(d, h, p)
            self.norm2 = nn.LayerNorm(d, eps=1e-6)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Dropout(p),
                                     nn.Linear(4 * d, d), nn.Dropout(p))
        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))
    class ViT(nn.Module):
        def __init__(self, img=16, patch=4, d=32, depth=2, h=4, classes=10, p=0.1, use_torch_encoder=False):
            super().__init__()
            self.patch_embed = PatchEmbed(img, patch, 3, d)
            self.cls_token = nn.Parameter(lib.zeros(1, 1, d))
            self.pos_embed = nn.Parameter(lib.randn(1, self.patch_embed.n + 1, d) * .02)
            self.pos_drop = nn.Dropout(p)
            self.use_torch_encoder = use_torch_encoder
            if use_torch_encoder:
                layer = nn.TransformerEncoderLayer(d, h, 4 * d, dropout=p, activation="gelu",
                                                   batch_first=True, norm_first=True)
                self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
            else:
                self.blocks = nn.Sequential(*[Block(d, h, p) for _ in range(depth)])
            self.norm = nn.LayerNorm(d, eps=1e-6)
            self.head = nn.Linear(d, classes)
            nn.init.trunc_normal_(self.pos_embed, std=.02)
            nn.init.trunc_normal_(self.cls_token, std=.02)
            self.apply(self._init_weights)
        def _init_weights(self, m):
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=.02)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.LayerNorm):
                nn.init.constant_(m.bias, 0); nn.init.constant_(m.weight, 1.0)
        def forward(self, x):
            x = self.patch_embed(x)
            cls = self.cls_token.expand(x.shape[0], -1, -1)
            x = lib.cat((cls, x), dim=1)
            x = self.pos_drop(x + self.pos_embed)
            x = self.blocks(x)
            x = self.norm(x)
            return self.head(x[:, 0])
    return ViT


def unet(lib):
    nn, F = lib.nn, lib.nn.functional
    class DoubleConv(nn.Module):
        def __init__(self, cin, cout, mid=None):
            super().__init__()
            mid = mid or cout
            self.double_conv = nn.Sequential(
                nn.Conv2d(cin, mid, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
                nn.Conv2d(mid, cout, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(cout), nn.ReLU(inplace=True))
        def forward(self, x):
            return self.double_conv(x)
    class Down(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(cin, cout))
        def forward(self, x):
            return self.maxpool_conv(x)
    class Up(nn.Module):
        def __init__(self, cin, cout, bilinear):
            super().__init__()
            self.bilinear = bilinear
            if bilinear:
                self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
                self.conv = DoubleConv(cin, cout, cin // 2)
            else:
                self.up = nn.ConvTranspose2d(cin, cin // 2, kernel_size=2, stride=2)
                self.conv = DoubleConv(cin, cout)
        def forward(self, x1, x2):
            x1 = self.up(x1)
            diffY = x2.size()[2] - x1.size()[2]
            diffX = x2.size()[3] - x1.size()[3]
            x1 = F.pad(x1, [diffX // 2, diffX - diffX // 2, diffY // 2, diffY - diffY // 2])
            x = lib.cat([x2, x1], dim=1)
            return self.conv(x)
    class UNet(nn.Module):
        def __init__(self, n_channels=3, n_classes=2, bilinear=False, w=4):
            super().__init__()
            self.inc = DoubleConv(n_channels, w)
            self.down1 = Down(w, 2 * w)
            self.down2 = Down(2 * w, 4 * w)
            factor = 2 if bilinear else 1
            self.down3 = Down(4 * w, 8 * w // factor)
            self.up1 = Up(8 * w, 4 * w // factor, bilinear)
            self.up2 = Up(4 * w, 2 * w // factor, bilinear)
            self.up3 = Up(2 * w, w, bilinear)
            self.outc = nn.Conv2d(w, n_classes, kernel_size=1)
        def forward(self, x):
            x1 = self.inc(x)
            x2 = self.down1(x1)
            x3 = self.down2(x2)
            x4 = self.down3(x3)
            x = self.up1(x4, x3)
            x = self.up2(x, x2)
            x = self.up3(x, x1)
            logits = self.outc(x)
            # a side output resized back with interpolate (nearest)
            aux = F.interpolate(x4.mean(1, keepdim=True), size=logits.shape[-2:], mode="nearest")
            return logits + aux
    return UNet


def lstm_lm(lib):
    nn, F = lib.nn, lib.nn.functional
    class RNNModel(nn.Module):
        """word_language_model's RNNModel: Embedding -> LSTM -> Linear, tied weights."""
        def __init__(self, rnn_type="LSTM", ntoken=50, ninp=16, nhid=16, nlayers=2, dropout=0.2, tie_weights=True):
            super().__init__()
            self.ntoken = ntoken
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            if rnn_type in ["LSTM", "GRU"]:
                self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
            else:
                self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity="tanh", dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)
            if tie_weights:
                self.decoder.weight = self.encoder.weight
            self.init_weights()
            self.rnn_type = rnn_type; self.nhid = nhid; self.nlayers = nlayers
        def init_weights(self):
            initrange = 0.1
            nn.init.uniform_(self.encoder.weight, -initrange, initrange)
            nn.init.zeros_(self.decoder.bias)
        def forward(self, input, hidden):
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            output = self.drop(output)
            decoded = self.decoder(output)
            decoded = decoded.view(-1, self.ntoken)
            return F.log_softmax(decoded, dim=1), hidden
        def init_hidden(self, bsz):
            weight = next(self.parameters())
            if self.rnn_type == "LSTM":
                return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                        weight.new_zeros(self.nlayers, bsz, self.nhid))
            return weight.new_zeros(self.nlayers, bsz, self.nhid)
    def repackage_hidden(h):
        if isinstance(h, lib.Tensor):
            return h.detach()
        return tuple(repackage_hidden(v) for v in h)
    return RNNModel, repackage_hidden


def moe(lib):
    nn, F = lib.nn, lib.nn.functional
    class Expert(nn.Module):
        def __init__(self, d, hidden):
            super().__init__()
            self.w1 = nn.Linear(d, hidden, bias=False)
            self.w2 = nn.Linear(hidden, d, bias=False)
            self.w3 = nn.Linear(d, hidden, bias=False)
        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
    class MoE(nn.Module):
        """Mixtral-style sparse MoE: top-k router, softmax gates over the chosen
        experts, token dispatch by index, combine with index_add_."""
        def __init__(self, d=16, hidden=32, n_experts=4, top_k=2):
            super().__init__()
            self.gate = nn.Linear(d, n_experts, bias=False)
            self.experts = nn.ModuleList([Expert(d, hidden) for _ in range(n_experts)])
            self.top_k = top_k; self.n_experts = n_experts
        def forward(self, x):
            B, T, D = x.shape
            x = x.view(-1, D)
            router_logits = self.gate(x)
            routing_weights = F.softmax(router_logits, dim=1, dtype=lib.float)
            routing_weights, selected = lib.topk(routing_weights, self.top_k, dim=-1)
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
            routing_weights = routing_weights.to(x.dtype)
            out = lib.zeros((B * T, D), dtype=x.dtype, device=x.device)
            expert_mask = F.one_hot(selected, num_classes=self.n_experts).permute(2, 1, 0)
            for e in range(self.n_experts):
                idx, top_x = lib.where(expert_mask[e])
                cur = x[None, top_x].reshape(-1, D)
                cur = self.experts[e](cur) * routing_weights[top_x, idx, None]
                out.index_add_(0, top_x, cur.to(x.dtype))
            # load-balancing auxiliary loss (Switch): fraction routed x mean prob
            probs = F.softmax(router_logits, dim=-1)
            # expert_mask (E, k, N): the fraction of routed slots per expert
            frac = expert_mask.float().sum(dim=1).mean(dim=1)
            aux = self.n_experts * lib.einsum("e,e->", frac, probs.mean(0))
            return out.reshape(B, T, D), aux, router_logits
    class DenseMoE(nn.Module):
        """soft (dense) mixture through einsum and scatter: no data-dependent shapes."""
        def __init__(self, d=16, hidden=32, n_experts=4, top_k=2):
            super().__init__()
            self.gate = nn.Linear(d, n_experts)
            self.w_in = nn.Parameter(lib.randn(n_experts, d, hidden) * 0.1)
            self.w_out = nn.Parameter(lib.randn(n_experts, hidden, d) * 0.1)
            self.top_k = top_k
        def forward(self, x):
            logits = self.gate(x)                                 # B,T,E
            vals, idx = logits.topk(self.top_k, dim=-1)
            sparse = lib.full_like(logits, float("-inf")).scatter(-1, idx, vals)
            gates = sparse.softmax(-1)                            # zeros off the top-k
            h = F.gelu(lib.einsum("btd,edh->bteh", x, self.w_in))
            y = lib.einsum("bteh,ehd->bted", h, self.w_out)
            return lib.einsum("bted,bte->btd", y, gates)
    return MoE, DenseMoE


def vae(lib):
    nn, F = lib.nn, lib.nn.functional
    class VAE(nn.Module):
        def __init__(self, d_in=64, h=32, z=8):
            super().__init__()
            self.fc1 = nn.Linear(d_in, h)
            self.fc21 = nn.Linear(h, z)
            self.fc22 = nn.Linear(h, z)
            self.fc3 = nn.Linear(z, h)
            self.fc4 = nn.Linear(h, d_in)
            self.d_in = d_in
        def encode(self, x):
            h1 = F.relu(self.fc1(x))
            return self.fc21(h1), self.fc22(h1)
        def reparameterize(self, mu, logvar, eps=None):
            std = lib.exp(0.5 * logvar)
            if eps is None:
                eps = lib.randn_like(std)
            return mu + eps * std
        def decode(self, z):
            h3 = F.relu(self.fc3(z))
            return lib.sigmoid(self.fc4(h3))
        def forward(self, x, eps=None):
            mu, logvar = self.encode(x.view(-1, self.d_in))
            z = self.reparameterize(mu, logvar, eps)
            return self.decode(z), mu, logvar
    def loss_function(recon_x, x, mu, logvar):
        BCE = F.binary_cross_entropy(recon_x, x.view(-1, recon_x.shape[-1]), reduction="sum")
        KLD = -0.5 * lib.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return BCE + KLD
    class ConvVAE(nn.Module):
        def __init__(self, z=4):
            super().__init__()
            self.enc = nn.Sequential(nn.Conv2d(1, 4, 3, 2, 1), nn.LeakyReLU(0.2),
                                     nn.Conv2d(4, 8, 3, 2, 1), nn.LeakyReLU(0.2), nn.Flatten())
            self.mu = nn.Linear(8 * 4 * 4, z); self.lv = nn.Linear(8 * 4 * 4, z)
            self.dec_in = nn.Linear(z, 8 * 4 * 4)
            self.dec = nn.Sequential(nn.Unflatten(1, (8, 4, 4)),
                                     nn.ConvTranspose2d(8, 4, 4, 2, 1), nn.ReLU(),
                                     nn.ConvTranspose2d(4, 1, 4, 2, 1))
        def forward(self, x, eps):
            h = self.enc(x)
            mu, logvar = self.mu(h), self.lv(h)
            z = mu + eps * (0.5 * logvar).exp()
            logits = self.dec(self.dec_in(z))
            rec = F.binary_cross_entropy_with_logits(logits, x, reduction="none").sum(dim=(1, 2, 3)).mean()
            kl = (-0.5 * (1 + logvar - mu ** 2 - logvar.exp()).sum(1)).mean()
            return rec + kl, logits
    return VAE, loss_function, ConvVAE
