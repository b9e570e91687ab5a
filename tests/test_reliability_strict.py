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


# ------------------------------------------------------- config, back ends
def test_config_typo_cache_size_limt_raises():
    with pytest.raises(AttributeError, match="cache_size_limt.*did you mean 'cache_size_limit'"):
        tp.compiler.config.cache_size_limt = 2
    assert not hasattr(tp.compiler.config, "cache_size_limt")


@pytest.mark.parametrize("name,value,exc", [
    ("cache_size_limit", "8", TypeError), ("cache_size_limit", -1, ValueError),
    ("cache_size_limit", 2.0, TypeError), ("cache_size_limit", True, TypeError),
    ("accumulated_cache_size_limit", -5, ValueError), ("num_threads", -3, ValueError),
    ("warn_on_fallback", "yes", TypeError)])
def test_config_bad_value_raises_naming_the_setting(name, value, exc):
    old = getattr(tp.compiler.config, name)
    with pytest.raises(exc, match=name):
        setattr(tp.compiler.config, name, value)
    assert getattr(tp.compiler.config, name) == old


def _run_env(code, **env):
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    e = dict(os.environ, PYTHONPATH=os.path.join(root, "python"), **env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          timeout=120)


def test_env_tensorplay_logs_bogus_warns_once():
    r = _run_env("import tensorplay, tensorplay.compiler", TENSORPLAY_LOGS="bogus,recompiles")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("TENSORPLAY_LOGS") == 1 and "'bogus'" in r.stderr


def test_env_num_threads_negative_warns_once():
    r = _run_env("import tensorplay as tp; print(tp.compiler.config.num_threads)",
                 TENSORPLAY_NUM_THREADS="-3")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("TENSORPLAY_NUM_THREADS") == 1
    assert r.stdout.strip() == "0"


def test_backend_returning_non_callable_names_the_backend():
    def my_backend(gm, example_inputs, **options):
        return 42
    f = tp.compile(lambda x: x + 1, backend=my_backend)
    with pytest.raises(TypeError, match="'my_backend' returned int, not a callable"):
        f(tp.ones(2))


def test_strict_backend_failure_is_native_compile_error(monkeypatch):
    from tensorplay.compiler import _backends

    def broken(gm, ex, **kw):
        raise RuntimeError("LLVM verifier rejected kernel0: the back end's log")
    monkeypatch.setattr(_backends._C, "stax_backend", broken)
    f = tp.compile(lambda x: x + 1, strict_native=True)
    with pytest.raises(NativeCompileError, match="the back end's log"):
        f(tp.ones(2))


@pytest.fixture
def recompiles():
    import logging
    lines = []

    class H(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())
    h, lg = H(), logging.getLogger("tensorplay.recompiles")
    lg.addHandler(h)
    tp.compiler.set_logs(recompiles=True)
    yield lines
    tp.compiler.set_logs(recompiles=False)
    lg.removeHandler(h)


def test_recompile_log_separates_versions_and_gate_reads_as_failed(recompiles):
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x - 1
    cf = tp.compile(f)
    cf(tp.ones(4))
    cf(-tp.ones(4))
    cf(tp.ones(6))
    assert recompiles[0] == ("recompiling 'f': version 0: control-flow gate outcomes == (True,) "
                             "(the traced branch; this call: (False,))")
    assert recompiles[1].startswith("recompiling 'f': version 0: inputs[0][0][2][0] == 4; "
                                    "version 1: inputs[0][0][2][0] == 4, ")


# ------------------------------------------------------------ strict holes
def test_strict_log_append_traced_tensor_runs_natively_or_raises():
    log = []

    def f(x):
        log.append(x.sum())
        return x * 2
    # a traced tensor appended to a list: replayed from the compiled call
    g = tp.compile(f, strict_native=True)
    g(tp.ones(3))
    g(tp.ones(3) * 2)
    assert [float(v) for v in log] == [3.0, 6.0]
    assert all(type(v) is tp.Tensor for v in log)

    marker = []

    def h(x):
        marker.append(object())        # not a constant of the key: not replayable
        return x * 2
    with pytest.raises(NativeCompileError, match=r"list\.append.*marker\.append\(object\(\)\)"):
        tp.compile(h, strict_native=True)(tp.ones(3))


# ------------------------------------------------ grad mode, seeds inside
def test_no_grad_block_inside_compiled_requires_grad():
    def f(x):
        with tp.no_grad():
            y = x * 2
            w = y + 1
        z = x * 2
        return y, z, w * x, w.sum()
    x = tp.randn(3).requires_grad_()
    cf = tp.compile(f)
    want = [t.requires_grad for t in f(x)]
    assert want == [False, True, True, False]
    for _ in range(2):
        got = cf(x)
        assert [t.requires_grad for t in got] == want
        assert all(tp.allclose(a, b) for a, b in zip(got, f(x)))


@pytest.mark.parametrize("expr", ["x.detach() * 2", "(x * 2).detach()", "x.detach()",
                                  "(x * 2).detach() + x"])
def test_detach_output_requires_grad_matches_eager(expr):
    fn = eval("lambda x: " + expr)
    x = tp.randn(3).requires_grad_()
    cf = tp.compile(fn)
    for _ in range(2):
        assert cf(x).requires_grad == fn(x).requires_grad


def test_manual_seed_inside_compiled_reseeds_every_call():
    def g(x):
        tp.manual_seed(0)
        return x + tp.rand_like(x), tp.randn_like(x) * 2
    x = tp.zeros(3)
    want = g(x)
    cg = tp.compile(g, strict_native=True)
    for _ in range(3):
        tp.rand(5)                      # move the stream between calls
        got = cg(x)
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    after = tp.rand(4).tolist()
    g(x)
    assert tp.rand(4).tolist() == after   # the stream continues as eagerly


def test_manual_seed_after_a_draw_inside_compiled():
    def g(x):
        a = tp.rand_like(x)
        tp.manual_seed(1)
        return x + a, tp.rand_like(x)
    x = tp.zeros(2)
    tp.manual_seed(5)
    want = g(x)
    with pytest.raises(NativeCompileError, match="manual_seed"):
        tp.compile(g, strict_native=True)(x)
    cg = tp.compile(g)
    tp.manual_seed(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = cg(x)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
