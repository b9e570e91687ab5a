"""tensorplay.testing.assert_close against torch.testing.assert_close:
the same pass/fail, exception type and message (with the library name
swapped) on tensors of each dtype, 0-d tensors, Python scalars, nested
containers, NaN/inf, shape/dtype mismatches, custom tolerances and msg."""
import numpy as np
import pytest

import tensorplay as tp

NAN, INF = float("nan"), float("inf")


def cases(L):
    return [
        (L.zeros(3), L.ones(3), {}),
        (L.tensor(1.0), L.tensor(2.0), {}),
        (L.tensor([1.0]), L.tensor([2.0]), {}),
        (L.tensor([1, 2]), L.tensor([1, 3]), {}),
        (L.tensor([True]), L.tensor([False]), {}),
        (L.zeros(3), L.zeros(2), {}),
        (L.zeros(3), L.zeros(3, dtype=L.float64), {}),
        (L.zeros(3), L.zeros(3, dtype=L.float64), {"check_dtype": False}),
        (1.0, 1.5, {}), (1, 2, {}), (1, 1.0, {}), (1.0, 1.0 + 1e-9, {}),
        ([L.zeros(2), 1.0], [L.zeros(2), 2.0], {}),
        ({"a": L.zeros(2)}, {"a": L.ones(2)}, {}),
        ({"a": L.zeros(2)}, {"b": L.ones(2)}, {}),
        ([1, 2], [1], {}),
        (L.tensor([NAN]), L.tensor([NAN]), {}),
        (L.tensor([NAN]), L.tensor([NAN]), {"equal_nan": True}),
        (L.zeros(2), [0.0, 0.0], {}),
        (L.zeros(2, 3), L.tensor([[0, 0, 0], [0, 1e-3, 0.0]]), {}),
        (L.tensor([0.0, 1.0, INF]), L.tensor([0.0, 1.0, 2.0]), {}),
        (L.tensor([0.0, 1.0, INF]), L.tensor([0.0, 1.0, INF]), {}),
        (L.tensor([1.0, 2.0], dtype=L.float16), L.tensor([1.0, 2.001], dtype=L.float16), {}),
        (L.tensor([1.0, 2.0], dtype=L.bfloat16), L.tensor([1.0, 2.02], dtype=L.bfloat16), {}),
        (L.arange(6).reshape(2, 3), L.arange(6).reshape(2, 3) * 2, {}),
        (L.ones(2, requires_grad=True) * 2, L.full((2,), 2.0), {}),
        (np.array([1.0, 2.0]), np.array([1.0, 2.5]), {}),
        (L.zeros(2), L.ones(2), {"msg": "custom"}),
        (L.zeros(2), L.ones(2), {"atol": 1}),
        (L.zeros(2), L.ones(2), {"rtol": 0, "atol": 1}),
        (L.zeros(2), L.ones(2), {"rtol": 0.1, "atol": 0.1}),
        (L.zeros(2), L.ones(2), {"msg": lambda m: "X" + m[:5]}),
    ]


def outcome(L, a, b, kw):
    try:
        L.testing.assert_close(a, b, **kw)
        return "ok"
    except Exception as e:  # noqa: BLE001
        return (type(e).__name__, str(e).replace("tensorplay", "torch"))


@pytest.mark.parametrize("i", range(len(cases(tp))))
def test_assert_close_like_torch(i):
    torch = pytest.importorskip("torch")
    a, b, kw = cases(tp)[i]
    ta, tb, tkw = cases(torch)[i]
    assert outcome(tp, a, b, kw) == outcome(torch, ta, tb, tkw)


def test_assert_close_without_torch():
    tp.testing.assert_close(tp.ones(2), tp.ones(2) + 1e-7)
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 2 \\(50.0%\\)"):
        tp.testing.assert_close(tp.tensor([1.0, 2.0]), tp.tensor([1.0, 3.0]))
    with pytest.raises(ValueError, match="Both 'rtol' and 'atol'"):
        tp.testing.assert_close(tp.ones(1), tp.ones(1), rtol=1e-3)
