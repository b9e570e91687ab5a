"""Issue 12: the pointwise lowering promotes literal numbers by the tensor
room's one routine (stax_result_type_of, a literal ranked as a wrapped
Python scalar): compiled results and dtypes match eager's."""
import numpy as np
import pytest

import tensorplay as tp

DTYPES = {"int32": tp.int32, "int8": tp.int8, "bool": tp.bool,
          "float16": tp.float16, "float64": tp.float64, "uint8": tp.uint8}

CASES = [
    ("int32", lambda x: x * 2.5),
    ("int32", lambda x: x < 2.5),
    ("int32", lambda x: (x + 1) >= 2.5),
    ("bool", lambda x: x + 1),
    ("bool", lambda x: x * 2.5),
    ("bool", lambda x: x == 1),
    ("bool", lambda x: tp.clamp(x + 0, 0.5, 1.5)),
    ("float16", lambda x: x * 3),
    ("float16", lambda x: x > 1.25),
    ("int8", lambda x: x + 300),
    ("int8", lambda x: x < 300),
    ("int8", lambda x: x == 2.0),
    ("uint8", lambda x: x - 1.5),
    ("float64", lambda x: x * 2.5 + 1),
    ("int32", lambda x: tp.where(x > 1, x, 2.5)),
    ("int32", lambda x: tp.maximum(x, tp.tensor(1.5))),
]


@pytest.mark.parametrize("i", range(len(CASES)))
def test_literal_promotion_compiled_matches_eager(i):
    dt, fn = CASES[i]
    x = tp.tensor(np.array([0, 1, 2, 3], dtype=np.int64)).to(DTYPES[dt])
    want = fn(x)
    got = tp.compile(fn)(x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want.numpy())
