"""Dynamic shapes with symbolic sizes (seed Key Point 8, issue 16 item 1):
size reads return symbolic sizes, relations become shape guards, automatic
dynamic, mark_dynamic / mark_static, canonical strides of size-1 dims, and
an autoregressive generate() loop that stops recompiling."""
import math

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn
import tensorplay.nn.functional as F
from tensorplay.compiler._symbolic import Expr, compile_guards, eval_guards

from _helpers import recompile_log


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=tol, atol=tol)


def _guards(v):
    return [str(g) for g in v.guards]


# -- a small GPT written in the PyTorch idiom ---------------------------------
class _Attn(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("bias", tp.tril(tp.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class _GPT(nn.Module):
    def __init__(self, vocab=32, n_embd=16, n_head=4, block_size=32):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.ln = nn.LayerNorm(n_embd)
        self.attn = _Attn(n_embd, n_head, block_size)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx):
        b, t = idx.size()
        assert t <= self.block_size, f"Cannot forward sequence of length {t}"
        pos = tp.arange(0, t, dtype=tp.long)
        x = self.wte(idx) + self.wpe(pos)
        x = x + self.attn(self.ln(x))
        x = x + self.proj(F.gelu(self.fc(x)))
        return self.lm_head(x)


def _generate(fwd, idx, steps, block_size):
    for _ in range(steps):
        idx_cond = idx if idx.size(1) <= block_size else idx[:, -block_size:]
        logits = fwd(idx_cond)[:, -1, :]
        idx = tp.cat((idx, tp.argmax(logits, dim=-1, keepdim=True)), dim=1)
    return idx


@pytest.mark.parametrize("dynamic", [None, True])
def test_generate_loop_two_versions_no_eager(dynamic):
    tp.manual_seed(0)
    m = _GPT()
    idx = tp.randint(0, 32, (1, 4))
    with tp.no_grad():
        want = _generate(m, idx, 20, 32)
        cf = tp.compile(m, dynamic=dynamic, strict_native=True)
        got = _generate(cf, idx, 20, 32)
    assert (got == want).all().item()
    st = cf.stats()
    assert st["versions"] <= 2 and st["eager_calls"] == 0 and st["fallbacks"] == 0, st
    g = _guards(cf.versions[-1])
    assert "s0 >= 2" in g and "s0 <= 32" in g          # the assert t <= block_size


def test_generate_loop_logits_match_eager_each_step():
    tp.manual_seed(1)
    m = _GPT()
    cf = tp.compile(m)
    with tp.no_grad():
        for t in range(3, 12):
            idx = tp.randint(0, 32, (2, t))
            _close(cf(idx), m(idx), 1e-4)
    assert len(cf.versions) == 2


# -- symbolic guards ------------------------------------------------------------
def test_relation_guard_not_value_guard():
    def f(x):
        n = x.shape[0]
        if n <= 8:
            return x * 2
        return x * 3
    cf = tp.compile(f, dynamic=True)
    for n in (3, 5, 8, 2):
        x = tp.randn(n, 4)
        _close(cf(x), f(x))
    assert len(cf.versions) == 1
    g = _guards(cf.versions[0])
    assert "s0 >= 2" in g and "s0 <= 8" in g
    assert not any(s.startswith("size(inputs[0][0], 0) ==") for s in g)
    x = tp.randn(9, 4)
    with recompile_log() as lines:
        _close(cf(x), f(x))
    assert len(cf.versions) == 2
    assert "s0 <= 8 (s0 = size(inputs[0][0], 0) = 9)" in lines[0]
    assert "s0 > 8" in _guards(cf.versions[1])


def test_arithmetic_stays_symbolic_in_views_and_factories():
    def f(x):
        b, t = x.size()
        y = x.reshape(b * t).view(b, t)[:, : t - 1]
        z = tp.zeros(b, t - 1) + tp.arange(t - 1).float()
        return y + z, y.sum() / (t - 1)
    cf = tp.compile(f, dynamic=True, strict_native=True)
    for b, t in ((2, 5), (3, 9), (4, 2), (7, 33)):
        x = tp.randn(b, t)
        got, want = cf(x), f(x)
        _close(got[0], want[0])
        _close(got[1], want[1])
    assert len(cf.versions) == 1


def test_int_specializes_with_an_equality_guard():
    def f(x):
        k = int(x.size(1))              # a Python int: specialized
        return x[:, :k] * k
    cf = tp.compile(f, dynamic=True)
    cf(tp.randn(3, 5))
    g = _guards(cf.versions[0])
    assert "s1 == 5" in g
    x = tp.randn(3, 6)
    _close(cf(x), f(x))
    assert len(cf.versions) == 2


def test_duck_sizing_equal_sizes_share_a_symbol():
    def f(x, y):
        return x + y[: x.size(0)]
    cf = tp.compile(f, dynamic=True)
    x, y = tp.randn(4), tp.randn(4)
    _close(cf(x, y), f(x, y))
    g = _guards(cf.versions[0])
    assert "size(inputs[0][1], 0) == s0" in g
    x, y = tp.randn(6), tp.randn(6)
    _close(cf(x, y), f(x, y))
    assert len(cf.versions) == 1
    x, y = tp.randn(3), tp.randn(7)          # the equality fails: a new version
    _close(cf(x, y), f(x, y))
    assert len(cf.versions) == 2


def test_sizes_zero_and_one_specialize():
    def f(x):
        b, n = x.shape
        return x.view(b * n) + n
    cf = tp.compile(f, dynamic=True)
    for n in (1, 4, 0, 5, 1):
        x = tp.randn(3, n)
        _close(cf(x), f(x))
    # n = 1 and n = 0: exact guards; n >= 2: one symbolic version
    assert len(cf.versions) == 3
    g = [_guards(v) for v in cf.versions]
    assert "size(inputs[0][0], 1) == 1" in g[0]
    assert "s1 >= 2" in g[1]
    assert "size(inputs[0][0], 1) == 0" in g[2]


def test_derived_sizes_are_matched_to_symbols():
    def f(x, w):
        h = x @ w                               # (n, 8) from (n, 3)
        n, m = h.shape                          # n symbolic, m static
        return h.view(n * m), m
    cf = tp.compile(f, dynamic=True)
    w = tp.randn(3, 8)
    for n in (4, 6, 11):
        x = tp.randn(n, 3)
        got, want = cf(x, w), f(x, w)
        _close(got[0], want[0])
        assert got[1] == 8
    assert len(cf.versions) == 1


def test_automatic_dynamic_marks_only_the_changed_dim():
    def f(x):
        b, t = x.size()
        return (x * t).sum(1) + b
    cf = tp.compile(f)                 # dynamic=None: automatic
    cf(tp.randn(2, 4))
    assert not cf.versions[0].dynamic
    for t in range(5, 12):
        x = tp.randn(2, t)
        _close(cf(x), f(x))
    assert len(cf.versions) == 2
    g = _guards(cf.versions[1])
    assert "s0 >= 2" in g and "size(inputs[0][0], 0) == 2" in g
    x = tp.randn(3, 7)                  # the batch changes: that dim too
    _close(cf(x), f(x))
    assert len(cf.versions) == 3
    for b, t in ((4, 9), (5, 13)):
        x = tp.randn(b, t)
        _close(cf(x), f(x))
    assert len(cf.versions) == 3


def test_dynamic_false_never_generalizes():
    cf = tp.compile(lambda x: x.sum(0) * x.shape[0], dynamic=False)
    for n in (2, 3, 4, 5):
        cf(tp.randn(n))
    assert len(cf.versions) == 4


def test_mark_dynamic_and_mark_static():
    def f(x):
        return x * x.size(0) + x.size(1)
    cf = tp.compile(f)
    x = tp.randn(4, 5)
    tp.compiler.mark_dynamic(x, 0)
    _close(cf(x), f(x))
    g = _guards(cf.versions[0])
    assert "s0 >= 2" in g and "size(inputs[0][0], 1) == 5" in g
    for n in (6, 9):
        y = tp.randn(n, 5)
        tp.compiler.mark_dynamic(y, 0)
        _close(cf(y), f(y))
    assert len(cf.versions) == 1
    cs = tp.compile(f, dynamic=True)
    x = tp.randn(4, 5)
    tp.compiler.mark_static(x, 1)
    _close(cs(x), f(x))
    g = _guards(cs.versions[0])
    assert "size(inputs[0][0], 1) == 5" in g and "s0 >= 2" in g
    with pytest.raises(IndexError):
        tp.compiler.mark_dynamic(x, 2)
    with pytest.raises(TypeError):
        tp.compiler.mark_static([1], 0)


def test_size_one_stride_is_canonical():
    cf = tp.compile(lambda x: x * 2, dynamic=False)
    for t in range(3, 9):
        out = tp.randn(1, t, 5)
        x = out[:, -1]                       # (1, 5), strides (5t, 1)
        _close(cf(x), x * 2)
    assert len(cf.versions) == 1
    assert "inputs[0][0][6] == (5, 1)" in _guards(cf.versions[0])
    cd = tp.compile(lambda x: x + 1, dynamic=True)
    for t in range(3, 7):
        x = tp.randn(1, t, 4)[:, -1]
        _close(cd(x), x + 1)
    assert len(cd.versions) == 1


def test_eager_backend_runs_symbolic_graphs():
    def f(x):
        b, t = x.shape
        return x.reshape(t * b) * t
    cf = tp.compile(f, backend="eager", dynamic=True)
    for b, t in ((2, 3), (4, 5), (3, 8)):
        x = tp.randn(b, t)
        _close(cf(x), f(x))
    assert len(cf.versions) == 1


def test_guard_program_matches_python_evaluation():
    s0, s1 = Expr("sym", 0), Expr("sym", 1)
    guards = [(Expr("le", s0, 64), True), (Expr("eq", Expr("mod", s1, 4), 0), True),
              (Expr("lt", Expr("floordiv", Expr("neg", s0), 3), -2), False),
              (Expr("eq", Expr("size", 0, 1), s1), True)]
    sources = ((0, 0), (1, 0))
    prog = compile_guards(guards, sources)
    assert prog is not None and len(prog) % 3 == 0
    for a, b in ((4, 8), (70, 8), (5, 7), (9, 12)):
        flat = [tp.randn(a, b), tp.randn(b)]
        want = eval_guards(guards, sources, flat) < 0
        assert want == (a <= 64 and b % 4 == 0 and not (-a // 3 < -2))
    assert compile_guards([(Expr("truediv", s0, 2), True)], sources) is None
