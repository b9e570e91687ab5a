"""Issue 13 (reliability, round 2): crashes, strict_native holes, config and
back-end checks. Each test is named after the repro it guards."""
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay._C import NativeCompileError


def _outcome(fn, *args):
    """('ok', value as a list / Python object) or ('err', type, message)."""
    try:
        r = fn(*args)
    except Exception as e:  # noqa: BLE001
        return ("err", type(e), str(e))
    if isinstance(r, tp.Tensor):
        return ("ok", r.dtype, r.tolist())
    return ("ok", r)


# ---------------------------------------------------------------- crashes
@pytest.mark.parametrize("expr", ["x.type()", "x.nbytes", "x.itemsize", "x.is_cuda", "x.is_cpu",
                                  "x.data_ptr()", "(x.type(), x)", "(x.nbytes, x * 2)"])
@pytest.mark.parametrize("strict", [False, True])
def test_non_tensor_getattr_output_no_segfault(expr, strict):
    fn = eval("lambda x: " + expr)
    x = tp.randn(3, 4)
    f = tp.compile(fn, strict_native=strict)
    if strict and "data_ptr" in expr:
        # the address of the input is not compiled code: strict says so
        with pytest.raises(NativeCompileError, match="data_ptr"):
            f(x)
        return
    for _ in range(2):
        got, want = f(x), fn(x)
        if isinstance(want, tuple):
            assert got[0] == want[0]
            assert (got[1] == want[1]).all()
        else:
            assert got == want and type(got) is type(want)


def test_nbytes_dynamic_follows_the_shape():
    f = tp.compile(lambda x: (x.nbytes, x + 1), dynamic=True)
    assert f(tp.randn(3, 4))[0] == 48
    assert f(tp.randn(5, 4))[0] == 80


_MIN = {"int64": -2 ** 63, "int32": -2 ** 31, "int16": -2 ** 15, "int8": -128}
_DIV_EXPRS = ["a // b", "a % b", "tp.fmod(a, b)", "tp.div(a, b, rounding_mode='floor')",
              "tp.div(a, b, rounding_mode='trunc')", "tp.remainder(a, b)", "tp.floor_divide(a, b)"]


@pytest.mark.parametrize("dt", list(_MIN))
@pytest.mark.parametrize("expr", _DIV_EXPRS)
@pytest.mark.parametrize("strict", [False, True])
def test_int_min_floordiv_minus_one_no_sigfpe(dt, expr, strict):
    fn = eval("lambda a, b: " + expr)
    d = getattr(tp, dt)
    f = tp.compile(fn, strict_native=strict)
    a0, b0 = tp.tensor([4, 5, 6, 7], dtype=d), tp.tensor([3, 1, 2, 2], dtype=d)
    assert _outcome(f, a0, b0) == _outcome(fn, a0, b0)
    a = tp.tensor([_MIN[dt], 5, -7, 7, _MIN[dt]], dtype=d)
    b = tp.tensor([-1, 1, 2, -2, 1], dtype=d)
    got = _outcome(f, a, b)
    assert got == _outcome(fn, a, b)
    # torch wraps: INT_MIN // -1 == INT_MIN, INT_MIN % -1 == 0
    q = got[2][0]
    assert q in (_MIN[dt], 0)


@pytest.mark.parametrize("dt", ["int64", "int32", "int8", "uint8"])
@pytest.mark.parametrize("expr", _DIV_EXPRS + ["(a + 1) // (b * 2)", "a // b + 1"])
@pytest.mark.parametrize("strict", [False, True])
def test_int_division_by_zero_raises_like_eager(dt, expr, strict):
    fn = eval("lambda a, b: " + expr)
    d = getattr(tp, dt)
    f = tp.compile(fn, strict_native=strict)
    a, ok = tp.tensor([7, 8, 9], dtype=d), tp.tensor([2, 3, 4], dtype=d)
    assert _outcome(f, a, ok) == _outcome(fn, a, ok)
    z = tp.tensor([1, 0, 1], dtype=d)
    want = _outcome(fn, a, z)
    assert want[0] == "err" and want[1] is RuntimeError and want[2] == "ZeroDivisionError"
    assert _outcome(f, a, z) == want
    assert _outcome(f, a, ok) == _outcome(fn, a, ok)   # the version is still good


def test_int_floordiv_by_zero_in_a_row_of_a_broadcast():
    fn = lambda a, b: a // b  # noqa: E731
    f = tp.compile(fn)
    a = tp.arange(12).reshape(3, 4)
    assert _outcome(f, a, tp.tensor([1, 2, 3, 4])) == _outcome(fn, a, tp.tensor([1, 2, 3, 4]))
    assert _outcome(f, a, tp.tensor([1, 2, 0, 4])) == ("err", RuntimeError, "ZeroDivisionError")


@pytest.mark.parametrize("mk", [np.float64, np.float32, np.int64, np.int32, np.bool_])
def test_numpy_scalar_argument_no_guard_formatter_error(mk):
    x = tp.randn(3)
    f = tp.compile(lambda x, s: x * s)
    for v in (mk(2), mk(2), mk(3) if mk is not np.bool_ else mk(False)):
        assert (f(x, v) == x * v).all()
    assert f.stats()["compiles"] == 2    # by value: equal scalars share a version
    assert f.stats()["fallbacks"] == 0


@pytest.mark.parametrize("mk", [np.float64, np.float32, np.int64, np.bool_])
def test_numpy_scalar_global_is_guarded_by_value(mk):
    g = {"tp": tp, "scale": mk(2)}
    exec("def h(x):\n    return x * scale\n", g)
    f = tp.compile(g["h"])
    x = tp.randn(4)
    assert (f(x) == x * mk(2)).all()
    g["scale"] = mk(5) if mk is not np.bool_ else mk(False)
    assert (f(x) == x * g["scale"]).all()


def test_numpy_sqrt_scale_global_strict():
    g = {"tp": tp, "np": np, "scale": np.sqrt(16.0)}
    exec("def attn(q, k):\n    return (q @ k.T) / scale\n", g)
    f = tp.compile(g["attn"], strict_native=True)
    q, k = tp.randn(4, 16), tp.randn(4, 16)
    assert tp.allclose(f(q, k), g["attn"](q, k))


# ---------------------------------------------------- integer pow / trunc
@pytest.mark.parametrize("dt", ["int64", "int32", "int16", "int8", "uint8"])
@pytest.mark.parametrize("expr", ["a ** 2", "a.pow(2)", "a.pow(3)", "a ** b", "tp.pow(a, b)",
                                  "a.div(3, rounding_mode='trunc')", "a.div(b, rounding_mode='trunc')",
                                  "a.div(3, rounding_mode='floor')"])
def test_int_pow_llvm_verifier_native_under_strict(dt, expr):
    fn = eval("lambda a, b: " + expr)
    d = getattr(tp, dt)
    f = tp.compile(fn, strict_native=True)
    lo = 0 if dt == "uint8" else -5
    a = tp.tensor(list(range(lo, lo + 12)), dtype=d)
    b = tp.tensor([3, 2, 1, 5, 4, 7, 2, 3, 1, 2, 9, 1], dtype=d)
    assert _outcome(f, a, b) == _outcome(fn, a, b)


@pytest.mark.parametrize("dt", ["int64", "int32", "int8"])
def test_int_pow_negative_tensor_exponent_matches_torch(dt):
    d = getattr(tp, dt)
    fn = lambda a, b: a ** b  # noqa: E731
    f = tp.compile(fn, strict_native=True)
    a = tp.tensor([0, 1, -1, 2, -2, -1, 3, 0, 5], dtype=d)
    b = tp.tensor([-1, -5, -3, -2, -1, -4, 0, 0, 7], dtype=d)
    got = f(a, b).tolist()
    assert got == fn(a, b).tolist()
    assert got[:8] == [0, 1, -1, 0, 0, 1, 1, 1]


def test_int_pow_negative_scalar_exponent_raises_like_eager():
    fn = lambda a: a ** -1  # noqa: E731
    a = tp.tensor([2, 3])
    want = _outcome(fn, a)
    assert want[:2] == ("err", RuntimeError)
    got = _outcome(tp.compile(fn), a)
    assert got[:2] == want[:2] and "negative integer powers" in got[2]
