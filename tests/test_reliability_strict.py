"""Issue 13 (reliability, round 2): crashes, strict_native holes, config and
back-end checks. Each test is named after the repro it guards."""
import warnings

import numpy as np
import pytest

import tensorplay as tp
from _helpers import recompile_log
import tensorplay.nn.functional as F
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
    with recompile_log() as lines:
        yield lines


def test_recompile_log_separates_versions_and_gate_reads_as_failed(recompiles):
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x - 1
    cf = tp.compile(f)
    cf(tp.ones(4))
    cf(-tp.ones(4))
    cf(tp.ones(6))
    # the seed's line (Example 3.2, exact), then the same guards per version,
    # the gate read as the failed condition
    assert recompiles == [
        "recompiling 'f': control-flow gate outcomes match the traced branch",
        "  failed guards by version: version 0: control-flow gate outcomes == (True,) "
        "(the traced branch; this call: (False,))",
        "recompiling 'f': inputs[0][0][2][0] == 4; inputs[0][0][2][0] == 4; "
        "control-flow gate outcomes match the traced branch",
        "  failed guards by version: version 0: inputs[0][0][2][0] == 4; "
        "version 1: inputs[0][0][2][0] == 4, control-flow gate outcomes == (False,) "
        "(the traced branch; this call: (True,))",
    ]


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


# ------------------------------------------- strict: native, not refused
T = 5


@pytest.mark.parametrize("name,fn", [
    ("causal_mask_tril_ones_bool",
     lambda x: x.masked_fill(~tp.tril(tp.ones(T, T, dtype=tp.bool)), float("-inf")).softmax(-1)),
    ("tril_ones_float", lambda x: x * tp.tril(tp.ones(T, T))),
    ("triu_diagonal", lambda x: tp.triu(x, 1) + tp.tril(x, -2)),
    ("zeros_fill_scalar", lambda x: x + tp.zeros(T, T).fill_(2.5)),
    ("full_ones_empty", lambda x: x * tp.full((T, T), 3.0) + tp.ones(T) - tp.empty(T, T).fill_(1)),
    ("movedim", lambda x: x.reshape(1, T, T).movedim(0, 2) * 2),
    ("moveaxis_fn", lambda x: tp.movedim(x.reshape(T, 1, T), 2, 0) + 1),
    ("diagonal_offset", lambda x: x.diagonal(1) * 2),
    ("diagonal_fn_neg", lambda x: tp.diagonal(x, -1) + 1),
    ("advanced_index_last", lambda x: x.reshape(1, T, T)[:, [-1], :] * 2),
    ("advanced_index_list", lambda x: x[[3, 0, 4]] + 1),
    ("requires_grad_false", lambda x: (x * 2).requires_grad_(False) + 1),
    ("requires_grad_false_method_chain", lambda x: x.exp().requires_grad_(False).sum(0)),
])
def test_strict_native_constant_mask_and_views(name, fn):
    x = tp.randn(T, T)
    cf = tp.compile(fn, strict_native=True)
    got, want = cf(x), fn(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert tp.allclose(got, want, equal_nan=True)
    assert cf.stats()["fallbacks"] == 0


def test_strict_requires_grad_false_detaches_the_variable():
    def g(x):
        y = x * 2
        y.requires_grad_(False)
        return y, y + x, (x * 3).requires_grad_(False)
    cg = tp.compile(g, strict_native=True)
    x = tp.randn(3)                   # nothing requires grad: a no-op flag
    assert all(tp.allclose(a, b) for a, b in zip(cg(x), g(x)))
    assert [t.requires_grad for t in cg(x)] == [t.requires_grad for t in g(x)]
    with tp.no_grad():
        xr = tp.randn(3).requires_grad_()
        assert [t.requires_grad for t in cg(xr)] == [t.requires_grad for t in g(xr)]
    # a computed value that requires grad: eager (torch) raises; so does compiled
    xr = tp.randn(3).requires_grad_()
    with pytest.raises(RuntimeError) as eager:
        g(xr)
    with pytest.raises(RuntimeError) as comp:
        cg(xr)
    assert str(comp.value) == str(eager.value) and "leaf variables" in str(eager.value)


def test_strict_rand_randn_factories_draw_eagers_numbers():
    def h(x):
        return x + tp.rand(3), tp.randn(2, 2, dtype=tp.float64)
    tp.manual_seed(3)
    want = h(tp.zeros(3))
    ch = tp.compile(h, strict_native=True)
    for _ in range(2):
        tp.manual_seed(3)
        got = ch(tp.zeros(3))
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


def test_factory_keywords_reach_the_graph_or_are_refused():
    # generator= reaches the program: it draws from that generator (issue 16)
    fg = lambda x: x + tp.rand(3, generator=tp.default_generator)  # noqa: E731
    cf = tp.compile(fg, strict_native=True)
    tp.manual_seed(5)
    got = cf(tp.zeros(3)).tolist()
    tp.manual_seed(5)
    assert got == fg(tp.zeros(3)).tolist()
    with pytest.raises(NativeCompileError, match="requires_grad=True"):
        tp.compile(lambda x: x + tp.rand(3, requires_grad=True), strict_native=True)(tp.zeros(3))
    fn = lambda x: x + tp.ones(3, device="cpu", dtype=tp.float64, layout=None)  # noqa: E731
    got = tp.compile(fn, strict_native=True)(tp.zeros(3))
    assert got.dtype == tp.float64 and got.tolist() == fn(tp.zeros(3)).tolist()


# ------------------------------------------------- strict: user's words
def test_strict_message_names_user_source_line_for_expanded_input_mutation():
    def f(x):
        x.add_(1)
        return x
    with pytest.raises(Exception) as eager:
        f(tp.ones(3, 1).expand(3, 4))
    with pytest.raises(Exception) as ei:
        tp.compile(f, strict_native=True)(tp.ones(3, 1).expand(3, 4))
    msg = str(ei.value)
    assert type(ei.value) is type(eager.value) and msg == str(eager.value)
    assert "<unknown source line>" not in msg
    # the traceback ends at the user's line, as eager's does
    assert any("x.add_(1)" in str(tb.statement) for tb in ei.traceback)


def test_strict_message_uses_users_words():
    with pytest.raises(NativeCompileError) as ei:
        tp.compile(lambda x: x.data_ptr(), strict_native=True)(tp.ones(2))
    msg = str(ei.value)
    assert "Tensor.data_ptr()" in msg
    assert "op table" not in msg and "node's target" not in msg and "%" not in msg


def test_strict_trace_failure_raises_eagers_exception():
    fn = lambda x: x.reshape(7) + 1  # noqa: E731
    with pytest.raises(RuntimeError) as eager:
        fn(tp.ones(6))
    with pytest.raises(type(eager.value)) as comp:
        tp.compile(fn, strict_native=True)(tp.ones(6))
    assert str(comp.value) == str(eager.value)
    assert "tracing" not in str(comp.value)


# ------------------------------- keywords reach the graph or are refused
@pytest.mark.parametrize("name,fn", [
    ("cross_entropy_weight", lambda x, t, w, y: F.cross_entropy(x, t, weight=w)),
    ("nll_loss_weight", lambda x, t, w, y: F.nll_loss(x.log_softmax(-1), t, weight=w)),
    ("bce_with_logits_pos_weight",
     lambda x, t, w, y: F.binary_cross_entropy_with_logits(x, y, pos_weight=w)),
    ("bce_with_logits_weight", lambda x, t, w, y: F.binary_cross_entropy_with_logits(x, y, weight=w)),
    ("cross_entropy_reduction_sum", lambda x, t, w, y: F.cross_entropy(x, t, reduction="sum")),
    ("cross_entropy_label_smoothing", lambda x, t, w, y: F.cross_entropy(x, t, label_smoothing=0.1)),
    ("mse_reduction_none", lambda x, t, w, y: F.mse_loss(x, y, reduction="none")),
    ("softplus_beta_threshold", lambda x, t, w, y: F.softplus(x, beta=2.0, threshold=1.0)),
    ("gelu_approximate", lambda x, t, w, y: F.gelu(x, approximate="tanh")),
    ("std_correction", lambda x, t, w, y: x.std(1, correction=0)),
    ("sum_dtype", lambda x, t, w, y: x.sum(dtype=tp.float64)),
    ("softmax_dtype", lambda x, t, w, y: x.softmax(-1, dtype=tp.float64)),
    ("add_alpha", lambda x, t, w, y: tp.add(x, y, alpha=2)),
])
def test_keyword_arguments_never_dropped(name, fn):
    tp.manual_seed(0)
    x, t, w, y = tp.randn(4, 6), tp.tensor([1, 0, 5, 2]), tp.rand(6) + 0.5, tp.rand(4, 6)
    want = fn(x, t, w, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = tp.compile(fn)(x, t, w, y)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert tp.allclose(got.double(), want.double(), rtol=1e-5, atol=1e-6)


def test_strict_names_operator_getitem_as_indexing():
    # the call is named from the Python operator table (operator.getitem is
    # "indexing x[...]"), not from the target's __name__ (a mask on a later
    # dim: x[mask] on the leading dims is native since issue 13)
    f = tp.compile(lambda x: x[:, x[0] > 0] * 2, strict_native=True)
    with pytest.raises(NativeCompileError, match=r"strict_native: indexing x\[\.\.\.\] cannot"):
        f(tp.randn(4, 4))


def test_strict_names_a_write_into_an_expanded_input():
    # the functionalized write-back copy_ into an expanded input: strict
    # names the write, not the copy_ op the graph holds
    def fn(x):
        x[0].add_(1)
        return x * 2

    f = tp.compile(fn, strict_native=True)
    with pytest.raises(NativeCompileError,
                       match=r"^strict_native: an in-place write to an input cannot be compiled "
                             r"natively: it writes in place into an expanded input"):
        f(tp.ones(1, 3).expand(4, 3))
