"""Stax CPU back end (lower room): Example 1.1 end to end, kernel counts,
vector IR, fresh outputs, strict_native."""
import re

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _C



@pytest.fixture(autouse=True)
def _unlimited_compiles():
    """the whole suite compiles more functions than the process-wide
    accumulated_cache_size_limit (256) allows; these tests measure the back
    end, not that limit"""
    cfg = tp.compiler.config
    old = cfg.accumulated_cache_size_limit
    cfg.accumulated_cache_size_limit = 1 << 30
    yield
    cfg.accumulated_cache_size_limit = old

def ex11(x, w):
    return (tp.relu(x + w) * 2).sum(-1)


def np_(t):
    return np.asarray(t.numpy())


def compile_direct(fn, *args, **opts):
    """trace with tp.compile's machinery, then call the back end directly"""
    cf = tp.compile(fn, **opts)
    cf(*args)
    v = cf.versions[0]
    return cf, v


def test_example_11_one_fused_vectorized_kernel():
    x, w = tp.randn(64, 128), tp.randn(64, 128)
    cf = tp.compile(ex11, strict_native=True)
    y = cf(x, w)
    ref = (np.maximum(np_(x) + np_(w), 0) * 2).sum(-1)
    err = np.max(np.abs(np_(y) - ref)) / max(1.0, np.max(np.abs(ref)))
    assert err < 1e-4
    ks = cf.versions[0].kernels
    assert len(ks) == 1
    assert re.search(r"<(8|16|32) x float>", ks[0].source)
    assert "reduce" in ks[0].loop_ir
    assert ks[0].bytes_read == 2 * 64 * 128 * 4
    assert ks[0].bytes_written == 64 * 4


def test_backend_direct_on_graph_module():
    x, w = tp.randn(8, 32), tp.randn(8, 32)
    cf, v = compile_direct(ex11, x, w)
    prog = _C.stax_backend(v.graph_module, [x, w], strict_native=True)
    assert prog.fallbacks == 0
    assert prog.lower_bound_bytes == 2 * 8 * 32 * 4 + 8 * 4
    np.testing.assert_allclose(np_(prog(x, w)), np_(ex11(x, w)), rtol=1e-5, atol=1e-5)


def test_outputs_never_alias_across_calls():
    cf = tp.compile(lambda a: a * 2 + 1)
    a = tp.randn(16)
    y1 = cf(a)
    y2 = cf(a)
    assert not np.shares_memory(np_(y1), np_(y2))
    np.testing.assert_allclose(np_(y1), np_(a) * 2 + 1, rtol=1e-6)


def test_float32_sum_2_24_precision():
    n = 1 << 24
    rng = np.random.default_rng(0)
    a = rng.random(n, dtype=np.float32)
    x = tp.from_numpy(a)
    cf = tp.compile(lambda t: t.sum())
    got = float(np_(cf(x)))
    ref = float(a.astype(np.float64).sum())
    assert abs(got - ref) / abs(ref) < 1e-6


def test_dynamic_reuses_artifact_across_sizes():
    cf = tp.compile(lambda x: (x * 2).sum(-1), dynamic=True)
    for n in (3, 5, 9):
        x = tp.randn(4, n)
        np.testing.assert_allclose(np_(cf(x)), np_(x).sum(-1) * 2, rtol=1e-5, atol=1e-5)


def test_input_mutation_in_place_and_version_bump():
    def f(x, y):
        z = x * 2
        x.add_(1)            # functionalized: copy_ into x after the reads
        return z + y, x
    a, b = tp.randn(4, 5), tp.randn(4, 5)
    a2 = tp.from_numpy(np_(a).copy())
    cf = tp.compile(f, strict_native=True)
    v0 = a2._version
    out, xo = cf(a2, b)
    np.testing.assert_allclose(np_(out), np_(a) * 2 + np_(b), rtol=1e-6)
    np.testing.assert_allclose(np_(a2), np_(a) + 1, rtol=1e-6)
    assert a2._version > v0


def test_mutations_of_two_inputs_see_old_values():
    def f(x0, x1):
        x1[:] = x0
        x0.mul_(0)
        return x1.sum()
    a, b = tp.randn(3, 4), tp.randn(3, 4)
    ea, eb = tp.from_numpy(np_(a).copy()), tp.from_numpy(np_(b).copy())
    ca, cb = tp.from_numpy(np_(a).copy()), tp.from_numpy(np_(b).copy())
    e = f(ea, eb)
    c = tp.compile(f)(ca, cb)
    np.testing.assert_allclose(np_(c), np_(e), rtol=1e-5)
    np.testing.assert_array_equal(np_(ca), np_(ea))
    np.testing.assert_array_equal(np_(cb), np_(eb))


def test_pooled_outputs_are_fresh():
    cf = tp.compile(lambda a: a * 2)
    a = tp.randn(256, 256)          # pooled size class
    y1 = cf(a)
    keep = np_(y1).copy()
    y2 = cf(a)
    assert not np.shares_memory(np_(y1), np_(y2))
    del y2
    y3 = cf(a * 0)
    np.testing.assert_array_equal(np_(y1), keep)
    assert np.all(np_(y3) == 0)


def test_requires_grad_follows_differentiable_inputs():
    w = tp.randn(4)
    w.requires_grad_(True)
    x = tp.randn(4)
    cf = tp.compile(lambda a, b: (a * b, (a > 0).float() + x, b + 1))
    r = cf(w, x)
    e = (w * x, (w > 0).float() + x, x + 1)
    assert [t.requires_grad for t in r] == [t.requires_grad for t in e]


def test_overwritten_grad_output_keeps_requires_grad():
    """copy_/fill_/setitem into a value created from a grad input: eager's
    value keeps requires_grad though the op graph's value (clone of the
    source) no longer reads the grad input; other outputs stay as eager."""
    tp.manual_seed(0)
    m = tp.nn.Linear(3, 3)

    def f(x):
        v = m(x)
        v.copy_(x)
        u = (x > 0).float()
        u.zero_()
        w = m(x)
        w[:] = 1.0
        return [v, u, x * 2], {"w": w}

    x = tp.ones(2, 3)
    e, c = f(x), tp.compile(f)(x)
    flags = lambda r: [t.requires_grad for t in r[0]] + [r[1]["w"].requires_grad]  # noqa: E731
    assert flags(c) == flags(e) == [True, False, False, True]
    with tp.no_grad():
        assert not tp.compile(f)(x)[0][0].requires_grad


def test_mutated_input_and_fresh_output_requires_grad_like_eager():
    w = tp.ones(3, requires_grad=True)

    def f(x, y, w):
        x.add_(w)
        y.add_(x)
        return x * 2

    def g(x, w):
        v = (x + w).exp()
        x.copy_(v)
        return v, x

    for fn, n in ((f, 2), (g, 1)):
        got = []
        for run in (fn, tp.compile(fn)):
            ins = [tp.ones(3) for _ in range(n)]
            out = run(*ins, w)
            outs = out if isinstance(out, tuple) else (out,)
            got.append(([t.requires_grad for t in ins], [o.requires_grad for o in outs],
                        [any(o is t for t in ins) for o in outs]))
        assert got[0] == got[1], fn.__name__
