"""Philox4x32-10 generator: known answers, the documented stream, determinism."""
import math

import numpy as np
import pytest

import tensorplay as tp


def test_philox_known_answers():
    f = tp._C._philox4x32
    assert f((0, 0), (0, 0, 0, 0)) == (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)
    assert f((0xffffffff,) * 2, (0xffffffff,) * 4) == (0x408f276d, 0x41c83b0e, 0xa20bc7c6,
                                                         0x6d5451fd)
    assert f((0xa4093822, 0x299f31d0), (0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344)) == \
        (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)


def _word(seed, offset, j):
    c = offset // 4 + j // 4
    return tp._C._philox4x32((seed & 0xffffffff, seed >> 32), (c & 0xffffffff, c >> 32, 0, 0))[j % 4]


def _elem(seed, offset, i, W):
    return [_word(seed, offset, i * W + k) for k in range(W)]


def u53(a, b):
    return ((a >> 5) * 2.0 ** 26 + (b >> 6)) * 2.0 ** -53


def test_stream_matches_docs():
    S = 123456789012
    g = tp.Generator().manual_seed(S)
    x = tp.rand(5, generator=g)
    for i, v in enumerate(x.tolist()):
        w = _elem(S, 0, i, 1)
        assert v == np.float32((w[0] >> 8) * 2.0 ** -24)
    assert g.offset == 8          # 5 words rounded up to 8
    y = tp.rand(3, dtype=tp.float64, generator=g)
    for i, v in enumerate(y.tolist()):
        w = _elem(S, 8, i, 2)
        assert v == u53(w[0], w[1])
    assert g.offset == 16
    z = tp.randn(4, dtype=tp.float64, generator=g)
    for i, v in enumerate(z.tolist()):
        w = _elem(S, 16, i, 4)
        u1, u2 = u53(w[0], w[1]), u53(w[2], w[3])
        assert v == pytest.approx(math.sqrt(-2 * math.log(1 - u1)) * math.cos(2 * math.pi * u2),
                                  rel=1e-12)
    assert g.offset == 32
    z32 = tp.randn(3, generator=g)
    for i, v in enumerate(z32.tolist()):
        w = _elem(S, 32, i, 2)
        u1, u2 = (w[0] >> 8) * 2.0 ** -24, (w[1] >> 8) * 2.0 ** -24
        assert v == np.float32(math.sqrt(-2 * math.log(1 - u1)) * math.cos(2 * math.pi * u2))
    assert g.offset == 40
    r = tp.randint(3, 10, (4,), generator=g)
    for i, v in enumerate(r.tolist()):
        w = _elem(S, 40, i, 2)
        assert v == 3 + ((w[0] | (w[1] << 32)) % 7)


def test_noncontiguous_fill_uses_row_major_order():
    g = tp.Generator().manual_seed(3)
    a = tp.rand(3, 4, generator=g)
    g.manual_seed(3)
    t = tp.zeros(4, 3).t()
    t.uniform_(generator=g)
    assert t.tolist() == a.tolist()


def test_manual_seed_determinism():
    tp.manual_seed(0)
    a = tp.randn(10)
    tp.manual_seed(0)
    b = tp.randn(10)
    assert a.tolist() == b.tolist()
    c = tp.randn(10)
    assert a.tolist() != c.tolist()
    assert tp.initial_seed() == 0


def test_state_roundtrip_and_fork_rng():
    tp.manual_seed(5)
    s = tp.get_rng_state()
    assert s.dtype is tp.uint8 and s.shape == (16,)
    a = tp.rand(4)
    tp.set_rng_state(s)
    assert tp.rand(4).tolist() == a.tolist()
    st = tp.random.get_rng_state()
    with tp.random.fork_rng():
        tp.rand(100)
    assert tp.random.get_rng_state().tolist() == st.tolist()
    g = tp.Generator()
    g.manual_seed(7)
    st = g.get_state()
    u = tp.rand(3, generator=g)
    g.set_state(st)
    assert tp.rand(3, generator=g).tolist() == u.tolist()
    assert g.initial_seed() == 7


def test_distributions_statistics():
    tp.manual_seed(1)
    u = tp.rand(100000).numpy()
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    n = tp.randn(100000).numpy()
    assert abs(n.mean()) < 0.02 and abs(n.std() - 1) < 0.02
    r = tp.randint(0, 5, (10000,)).numpy()
    assert set(np.unique(r).tolist()) == {0, 1, 2, 3, 4}
    p = tp.randperm(50)
    assert sorted(p.tolist()) == list(range(50)) and p.dtype is tp.int64
    b = tp.bernoulli(tp.full((10000,), 0.3)).numpy()
    assert abs(b.mean() - 0.3) < 0.03
    x = tp.empty(10000).uniform_(2, 3)
    xn = x.numpy()
    assert 2 <= xn.min() and xn.max() < 3
    y = tp.empty(10000, dtype=tp.float64).normal_(5, 2).numpy()
    assert abs(y.mean() - 5) < 0.1 and abs(y.std() - 2) < 0.1
    m = tp.normal(tp.full((1000,), 10.0), 0.5).numpy()
    assert abs(m.mean() - 10) < 0.1
    assert tp.normal(1.0, 2.0, (3, 2)).shape == (3, 2)
    assert tp.rand(2, 3, dtype=tp.float16).dtype is tp.float16


def test_random_bumps_version():
    x = tp.zeros(3)
    v = x.view(3)
    x.normal_()
    assert v._version == 1
    x.uniform_()
    x.bernoulli_(0.5)
    assert v._version == 3


def test_random_errors():
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        tp.rand(3, dtype=tp.int64)
    with pytest.raises(RuntimeError, match="from=.* >= to="):
        tp.randint(5, 5, (2,))
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        tp.empty(3).normal_(0, -1)
    with pytest.raises(RuntimeError, match=r"bernoulli_ expects p to be in \[0, 1\]"):
        tp.empty(3).bernoulli_(1.5)


def test_large_parallel_fill_matches_strided_serial_fill():
    # contiguous draws above the threading threshold split across threads;
    # the values are a pure function of (seed, offset, index)
    for fn in ("normal_", "uniform_"):
        g = tp.Generator().manual_seed(11)
        a = getattr(tp.empty(600, 500), fn)(generator=g)
        g.manual_seed(11)
        b = getattr(tp.empty(500, 600).t(), fn)(generator=g)
        assert (a.numpy() == b.numpy()).all()
