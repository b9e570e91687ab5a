"""torch names a model file uses that tensorplay lacked or got wrong, against
torch 2.13 CPU (issue 13): nn.init.orthogonal_, unique_consecutive,
copysign, xlogy's result dtype, hypot on integers; eager and compiled."""
import warnings

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")
NAN = float("nan")


def _cmp(a, b):
    A = a if isinstance(a, tuple) else (a,)
    B = b if isinstance(b, tuple) else (b,)
    assert len(A) == len(B)
    for p, q in zip(A, B):
        assert str(p.dtype).split(".")[-1] == str(q.dtype).split(".")[-1]
        assert tuple(p.shape) == tuple(q.shape)
        x, y = np.asarray(p.tolist(), dtype=np.float64), np.asarray(q.tolist(), dtype=np.float64)
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(np.signbit(x), np.signbit(y))


UC = [([NAN, NAN, 0.0, -0.0, 1.0], {}), ([-0.0, 0.0], {}), ([[1, 1], [1, 1], [2, 1]], {"dim": 0}),
      ([[1, 1], [1, 1], [2, 1]], {"dim": 1}), ([[1, 1], [1, 1], [2, 1]], {"dim": -1}), (5, {}),
      ([], {}), ([True, True, False], {}), ([[3, 3, 1], [3, 3, 2]], {}),
      ([[1.0, NAN], [1.0, NAN]], {"dim": 0}), ([[]], {"dim": 1})]


@pytest.mark.parametrize("case", range(len(UC)))
@pytest.mark.parametrize("ri,rc", [(False, False), (True, False), (False, True), (True, True)])
def test_unique_consecutive(case, ri, rc):
    v, kw = UC[case]
    want = torch.unique_consecutive(torch.tensor(v), return_inverse=ri, return_counts=rc, **kw)
    _cmp(tp.unique_consecutive(tp.tensor(v), return_inverse=ri, return_counts=rc, **kw), want)
    _cmp(tp.tensor(v).unique_consecutive(return_inverse=ri, return_counts=rc, **kw), want)
    f = tp.compile(lambda x: tp.unique_consecutive(x, return_inverse=ri, return_counts=rc, **kw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _cmp(f(tp.tensor(v)), want)


def test_unique_consecutive_bad_dim():
    for m in (tp, torch):
        with pytest.raises(IndexError):
            m.unique_consecutive(m.tensor([1, 2]), dim=1)


@pytest.mark.parametrize("shape,gain", [((3, 5), 1.0), ((5, 3), 2.0), ((6, 2, 2), 1.0), ((4, 4), 0.5)])
def test_orthogonal_(shape, gain):
    w = tp.empty(*shape)
    assert tp.nn.init.orthogonal_(w, gain=gain) is w
    a = np.asarray(w.tolist(), dtype=np.float64).reshape(shape[0], -1)
    g = a @ a.T if a.shape[0] <= a.shape[1] else a.T @ a
    np.testing.assert_allclose(g, gain ** 2 * np.eye(g.shape[0]), atol=1e-5)
    # the same checks as torch's
    for m in (tp, torch):
        with pytest.raises(ValueError, match="Only tensors with 2 or more dimensions"):
            m.nn.init.orthogonal_(m.empty(3))
        assert tuple(m.nn.init.orthogonal_(m.empty(0, 3)).shape) == (0, 3)


SC = [(2.0, None), (-1, None)]


@pytest.mark.parametrize("fn", ["copysign", "xlogy"])
@pytest.mark.parametrize("da,db", [("float32", "float32"), ("int64", "int64"), ("int8", "bfloat16"),
                                   ("bfloat16", "int8"), ("float16", "bool"), ("bool", "int32"),
                                   ("float16", "int64"), ("int32", "scalar"), ("scalar", "int8"),
                                   ("bfloat16", "scalar")])
def test_float_result_binaries(fn, da, db):
    va = [2.0, -1.0, 0.0, -0.0, 3.0]
    vb = [-1.0, 0.0, -0.0, 2.0, 1.0]

    def mk(m, v, d):
        if d == "scalar":
            return -1.5
        if d == "bool":
            return m.tensor([x != 0 for x in v])
        if d.startswith("int"):
            return m.tensor([int(x) for x in v], dtype=getattr(m, d))
        return m.tensor(v, dtype=getattr(m, d))
    try:
        want = getattr(torch, fn)(mk(torch, va, da), mk(torch, vb, db))
    except TypeError:
        with pytest.raises(TypeError):
            getattr(tp, fn)(mk(tp, va, da), mk(tp, vb, db))
        return
    got = getattr(tp, fn)(mk(tp, va, da), mk(tp, vb, db))
    _cmp(got.float() if got.dtype == tp.bfloat16 else got,
         want.float() if want.dtype == torch.bfloat16 else want)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    if da != "scalar" and db != "scalar":
        f = tp.compile(lambda a, b: getattr(tp, fn)(a, b), strict_native=True)
        assert f(mk(tp, va, da), mk(tp, vb, db)).dtype == got.dtype


def test_hypot_integers_raise_like_torch():
    for m in (tp, torch):
        with pytest.raises(NotImplementedError, match="\"hypot_cpu\" not implemented for 'Long'"):
            m.hypot(m.tensor([3]), m.tensor([4]))
    np.testing.assert_allclose(tp.hypot(tp.tensor([3], dtype=tp.int8), tp.tensor([4.0])).tolist(),
                               [5.0])
