"""Mixed dtypes in the matmul family raise as torch does, with torch's
messages: bfloat16 against float32 (was silently computed in float32),
a linear/addmm bias of another dtype (was silently promoted), and torch's
C type names in "expected m1 and m2 to have the same dtype"."""
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

torch = pytest.importorskip("torch")


def calls(L):
    a = L.ones(2, 2)
    return [
        lambda: a @ L.ones(2, 2, dtype=L.float64),
        lambda: a @ L.ones(2, 2, dtype=L.bfloat16),
        lambda: L.ones(2, 2, dtype=L.bfloat16) @ a,
        lambda: L.mm(a, L.ones(2, 2, dtype=L.float16)),
        lambda: a @ L.ones(2, 2, dtype=L.long),
        lambda: L.ones(2, 2, dtype=L.int32) @ L.ones(2, 2, dtype=L.int8),
        lambda: L.nn.functional.linear(a, L.ones(3, 2, dtype=L.bfloat16)),
        lambda: L.nn.functional.linear(a, a, L.zeros(2, dtype=L.float64)),
        lambda: L.addmm(L.zeros(2, 2, dtype=L.float64), a, a),
        lambda: L.bmm(L.ones(1, 2, 2), L.ones(1, 2, 2, dtype=L.float64)),
        lambda: L.nn.Linear(2, 3).to(L.bfloat16)(a),
    ]


@pytest.mark.parametrize("i", range(len(calls(tp))))
def test_mixed_dtype_matmul_like_torch(i):
    with pytest.raises(RuntimeError) as want:
        calls(torch)[i]()
    with pytest.raises(RuntimeError) as got:
        calls(tp)[i]()
    assert str(got.value) == str(want.value)


def test_same_dtype_still_works():
    b = tp.ones(2, 2, dtype=tp.bfloat16)
    assert (b @ b).dtype == tp.bfloat16
    assert F.linear(b, b, tp.zeros(2, dtype=tp.bfloat16)).dtype == tp.bfloat16
    assert tp.addmm(tp.zeros(2, 2), tp.ones(2, 2), tp.ones(2, 2)).tolist() == [[2.0, 2.0]] * 2
