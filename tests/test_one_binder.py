"""Issue 12: one argument binder. The op-level graph binds a call's
arguments with the eager binder (stax_op_bind: the ops room's schema and
defaults), so a call eager accepts is an op of the op graph, not a call
copied as written."""
import numpy as np

import tensorplay as tp


def _op_graph(fn, *args):
    cf = tp.compile(fn)
    got = cf(*args)
    want = fn(*args)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    return str(cf.versions[0].op_graph)


def test_numpy_keyword_spellings_bind_to_the_op():
    # axis= / keepdims= are eager's aliases of dim= / keepdim=
    x = tp.randn(3, 4)
    s = _op_graph(lambda a: a.sum(axis=1, keepdims=True) * 2, x)
    assert "tp.sum." in s and "axis" not in s, s


def test_varargs_sizes_stay_a_list():
    x = tp.randn(3, 4)
    s = _op_graph(lambda a: a.view(2, 6) * 2, x)
    assert "tp.reshape.default(primals_1, [2, 6])" in s, s


def test_defaults_come_from_the_op_table():
    # trailing defaults are dropped against the ops room's own defaults
    x = tp.randn(3, 4)
    s = _op_graph(lambda a: tp.softmax(a, -1) + a.mean(0), x)
    assert "keepdim" not in s and "dtype" not in s, s
