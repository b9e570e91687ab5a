"""dynamic=True on the Stax back end: one JIT compile serves every size of a
shape class (sizes, size-derived strides and numel constants are kernel size
arguments); values match eager."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.functional as F
from tensorplay import _C


def _count():
    return _C._jit_compile_count()


def _check(cf, f, inputs, tol=1e-5):
    for args in inputs:
        got = cf(*args)
        want = f(*args)
        if isinstance(want, tuple):
            for g, w in zip(got, want):
                np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=tol, atol=tol)
        else:
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, atol=tol)


def test_square_and_transposed_two_versions_two_compiles():
    def f(x):
        return x.sin() * 2 + 1

    cf = tp.compile(f, dynamic=True)
    c0 = _count()
    inputs = []
    for n in (4, 6, 8):
        x = tp.randn(n, n)
        inputs += [(x,), (x.t(),)]
    _check(cf, f, inputs)
    assert len(cf.versions) == 2
    assert _count() - c0 == 2
    assert cf.stats()["artifacts"] == 2 and cf.stats()["compiles"] == 2
    # sizes and strides are size arguments, not constants
    ir = cf.versions[0].kernels[0].loop_ir
    assert "*4" not in ir and "s" in ir


def test_example_1_1_varying_n_m():
    def f(x, w):
        return (tp.relu(x + w) * 2).sum(-1)

    cf = tp.compile(f, dynamic=True)
    c0 = _count()
    _check(cf, f, [(tp.randn(n, m), tp.randn(m)) for n, m in ((8, 16), (5, 33), (64, 128), (3, 7))])
    assert len(cf.versions) == 1
    assert _count() - c0 == 1


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "mean", "var"])
def test_normalizations_one_compile(name):
    def f(x):
        if name == "softmax":
            return F.softmax(x, -1)
        if name == "log_softmax":
            return F.log_softmax(x, -1)
        if name == "layer_norm":
            return F.layer_norm(x, (8,))
        if name == "mean":
            return x.mean(1)
        return x.var(1)

    cf = tp.compile(f, dynamic=True)
    sizes = ((4, 8), (6, 5), (9, 17), (32, 100))
    if name == "layer_norm":
        # normalized_shape is a constant of the call: vary the rows
        sizes = ((4, 8), (6, 8), (33, 8))
    c0 = _count()
    _check(cf, f, [(tp.randn(*s),) for s in sizes])
    n0 = _count() - c0
    assert len(cf.versions) == 1
    assert n0 == len(cf.versions[0].kernels), n0


def test_mean_divisor_is_a_size_argument():
    cf = tp.compile(lambda x: x.mean(1), dynamic=True)
    cf(tp.randn(4, 8))
    ir = cf.versions[0].kernels[0].loop_ir
    assert ", 8)" not in ir


def test_broadcast_and_step2_slices():
    def f(x, b):
        return x * b

    cf = tp.compile(f, dynamic=True)
    c0 = _count()
    _check(cf, f, [(tp.randn(n, n + 1), tp.randn(n + 1).expand(n, n + 1)) for n in (3, 5, 9)])
    assert _count() - c0 == 1

    def g(x):
        return x[:, ::2] + 1

    cg = tp.compile(g, dynamic=True)
    c0 = _count()
    _check(cg, g, [(tp.randn(n, 2 * n),) for n in (3, 5, 9)])
    assert _count() - c0 == 1


def test_sizes_zero_and_one():
    def f(x):
        return (x * 3).sum(1)

    cf = tp.compile(f, dynamic=True)
    # size 1 and 0 may compile a kernel of their own (constant 0/1 strides
    # and extents specialize), but results are right and other sizes share
    _check(cf, f, [(tp.randn(n, 5),) for n in (4, 1, 0, 7, 9)])
    c0 = _count()
    _check(cf, f, [(tp.randn(n, 5),) for n in (11, 13)])
    assert _count() - c0 == 0


def test_symbolic_sizes_arguments_read_at_call_time():
    # the artifact itself (no guards in between) takes a new size of the
    # class without a JIT compile
    f = lambda x: F.softmax(x, -1)
    cf = tp.compile(f, dynamic=True)
    cf(tp.randn(4, 5))
    art = cf.versions[0].artifact
    assert art.dynamic
    c0 = _count()
    for s in ((7, 3), (2, 129), (64, 64)):
        x = tp.randn(*s)
        np.testing.assert_allclose(art(x).numpy(), f(x).numpy(), rtol=1e-5, atol=1e-6)
    assert _count() == c0


def test_static_keeps_constants():
    cf = tp.compile(lambda x: x.mean(1))
    cf(tp.randn(4, 8))
    ir = cf.versions[0].kernels[0].loop_ir
    assert "x0*8" in ir and ", 8)" in ir


_FUNCS = {
    "cat": lambda x: tp.cat([x, x * 2], 1) + 1,
    "pad": lambda x: F.pad(x, (1, 2)) * 3,
    "reshape_t": lambda x: x.t().reshape(-1) + 1,
    "slice_offset": lambda x: x[1:, 2:] * x[:-1, :-2],
    "flip_sum": lambda x: x.flip(0).sum(0),
    "col_sum": lambda x: x.sum(0),
    "amax_argmax": lambda x: (x.amax(1), x.argmax(1)),
    "index_select": lambda x: tp.index_select(x, 0, tp.tensor([0, 2, 1])) + 1,
    "unsqueeze_bcast": lambda x: x.unsqueeze(0) + x.unsqueeze(1).sum(-1, keepdim=True),
    "inplace": lambda x: x.clone().add_(1).mul_(x),
    "std_mean": lambda x: (x.std(0), x.mean()),
    "where": lambda x: tp.where(x > 0, x, x.sum(1, keepdim=True)),
}


@pytest.mark.parametrize("name", sorted(_FUNCS))
def test_ops_across_sizes(name):
    f = _FUNCS[name]
    cf = tp.compile(f, dynamic=True)
    sizes = ((3, 4), (5, 7), (6, 9), (9, 6), (17, 33))
    c0 = _count()
    _check(cf, f, [(tp.randn(*s),) for s in sizes])
    n = _count() - c0
    kernels = sum(len(v.kernels) for v in cf.versions)
    # the first size compiles; the others reuse its kernels
    assert n == kernels, (n, kernels)
