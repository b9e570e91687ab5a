"""Compiled as_strided reads its input's storage as eager does (issue 13: no
silent wrong answer): a non-contiguous input or intermediate (x.t(), a
computed value's transpose) and storage offsets give eager's values; where
the lowering cannot index the storage the version runs eagerly, and
strict_native raises NativeCompileError naming as_strided."""
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

CASES = [
    ("input_t", lambda x: x.as_strided((2, 2), (1, 2)) + 0,
     lambda m: m.arange(9.).reshape(3, 3).t()),
    ("input_t_offset", lambda x: x.as_strided((2, 2), (1, 3), 2) + 0,
     lambda m: m.arange(9.).reshape(3, 3).t()),
    ("input_slice", lambda x: x.as_strided((2, 2), (1, 2)) + 0,
     lambda m: m.arange(12.).reshape(3, 4)[1:, 1:]),
    ("input_slice_offset", lambda x: x.as_strided((2, 2), (1, 2), 3) + 0,
     lambda m: m.arange(12.).reshape(3, 4)[1:, 1:]),
    ("traced_t", lambda x: x.t().as_strided((2, 2), (1, 2)) + 0,
     lambda m: m.arange(9.).reshape(3, 3)),
    ("traced_t_out", lambda x: x.t().as_strided((2, 2), (1, 2)),
     lambda m: m.arange(9.).reshape(3, 3)),
    ("computed_t", lambda x: (x * 2).t().as_strided((2, 2), (1, 2)),
     lambda m: m.arange(9.).reshape(3, 3)),
    ("computed_t_slice", lambda x: (x * 2).t()[1:].as_strided((2, 2), (1, 2)),
     lambda m: m.arange(9.).reshape(3, 3)),
    ("traced_slice_offset", lambda x: x[1:].as_strided((2, 2), (1, 2), 1) + 0,
     lambda m: m.arange(9.)),
    ("computed_slice", lambda x: (x * 2)[1:].as_strided((2, 2), (1, 2)),
     lambda m: m.arange(9.)),
    ("unfold_t", lambda x: x.t().unfold(1, 2, 1) + 0, lambda m: m.arange(12.).reshape(3, 4)),
    ("unfold_input_t", lambda x: x.unfold(0, 2, 1) + 0,
     lambda m: m.arange(12.).reshape(3, 4).t()),
    ("unfold_computed_t", lambda x: (x * 2).t().unfold(0, 2, 1) + 0,
     lambda m: m.arange(12.).reshape(3, 4)),
    ("unfold_slice", lambda x: x[:, 1:].unfold(0, 2, 1) * 1,
     lambda m: m.arange(12.).reshape(3, 4)),
]


@pytest.mark.parametrize("name,f,mk", CASES, ids=[c[0] for c in CASES])
def test_compiled_as_strided_matches_eager_and_torch(name, f, mk):
    ref = f(mk(torch)).tolist()
    assert f(mk(tp)).tolist() == ref
    with _quiet():
        assert tp.compile(f)(mk(tp)).tolist() == ref


@pytest.mark.parametrize("name,f,mk", CASES, ids=[c[0] for c in CASES])
def test_strict_as_strided_is_eager_or_refused(name, f, mk):
    ref = f(mk(torch)).tolist()
    try:
        got = tp.compile(f, strict_native=True)(mk(tp)).tolist()
    except tp._C.NativeCompileError as e:
        assert "as_strided" in str(e)
        return
    assert got == ref


def test_strict_refuses_as_strided_of_a_transpose():
    f = lambda x: (x * 2).t().as_strided((2, 2), (1, 2))  # noqa: E731
    with pytest.raises(tp._C.NativeCompileError, match="as_strided"):
        tp.compile(f, strict_native=True)(tp.arange(9.).reshape(3, 3))


def _quiet():
    import warnings
    import contextlib

    @contextlib.contextmanager
    def cm():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    return cm()
