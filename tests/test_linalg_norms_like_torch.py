"""tp.linalg (vector_norm, matrix_norm, norm, cross, vecdot, multi_dot)
against torch.linalg 2.13 CPU (issue 13). Matrix 2-norms and nuclear norms
need an SVD, which tensorplay has not: they raise NotImplementedError."""
import math

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

A = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)


def _run(m, f, ordv, dim, kd, shape):
    x = m.tensor(A.reshape(-1)[:int(np.prod(shape))].reshape(shape))
    kw = {"keepdim": kd}
    if ordv is not None:
        kw["ord"] = ordv
    if dim is not None:
        kw["dim"] = dim
    return getattr(m.linalg, f)(x, **kw)


CASES = [(f, o, d, k, s)
         for f, ords, dims in [
             ("vector_norm", [None, 2, 1, math.inf, -math.inf, 0, 3, 0.5], [None, -1, 0, (1, 2), (0, -1)]),
             ("matrix_norm", [None, "fro", 1, -1, math.inf, -math.inf], [None, (0, -1), (-1, -2)]),
             ("norm", [None, "fro", 1, math.inf, 3], [None, -1, (0, -1)])]
         for o in ords for d in dims for k in (False, True) for s in [(2, 3, 4), (3, 4), (4,)]]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_norms(case):
    f, o, d, k, s = CASES[case]
    try:
        want = _run(torch, f, o, d, k, s)
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            _run(tp, f, o, d, k, s)
        return
    got = _run(tp, f, o, d, k, s)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(np.asarray(got.tolist()), want.numpy(), rtol=1e-5, atol=1e-6)


def test_cross_vecdot_multi_dot_and_svd_norms():
    a, b = A[0, :, :3], A[1, :, 1:]
    np.testing.assert_allclose(np.asarray(tp.linalg.cross(tp.tensor(a), tp.tensor(b)).tolist()),
                               torch.linalg.cross(torch.tensor(a), torch.tensor(b)).numpy(),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(tp.linalg.vecdot(tp.tensor(a), tp.tensor(b)).tolist()),
                               torch.linalg.vecdot(torch.tensor(a), torch.tensor(b)).numpy(),
                               rtol=1e-5, atol=1e-6)
    ms = [A[0], A[1].T, A[0]]
    np.testing.assert_allclose(
        np.asarray(tp.linalg.multi_dot([tp.tensor(m) for m in ms]).tolist()),
        torch.linalg.multi_dot([torch.tensor(m) for m in ms]).numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(NotImplementedError, match="SVD"):
        tp.linalg.matrix_norm(tp.tensor(A), ord=2)
    f = tp.compile(lambda x: tp.linalg.vector_norm(x, dim=-1) + tp.linalg.matrix_norm(x)[:, None],
                   strict_native=True)
    x = tp.tensor(A)
    np.testing.assert_allclose(np.asarray(f(x).tolist()),
                               np.asarray((tp.linalg.vector_norm(x, dim=-1)
                                           + tp.linalg.matrix_norm(x)[:, None]).tolist()), rtol=1e-5)
