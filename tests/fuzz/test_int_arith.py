"""Differential fuzz of integer arithmetic at its edges (issue 13): random
expressions of //, %, fmod, div(rounding_mode=...), remainder, ** and pow
over int8/int16/int32/int64/uint8 operands whose values favour INT_MIN,
INT_MAX, -1 and 0. Each program is compiled once (strict_native: every op
must lower natively) and called on ordinary data, then on edge data; the
compiled call must give eager's result or raise eager's error (type and
message), and eager must match a Python model of torch's semantics
(two's-complement wrap: INT_MIN // -1 == INT_MIN, INT_MIN % -1 == 0; integer
division by zero raises RuntimeError('ZeroDivisionError')).

TENSORPLAY_FUZZ_N programs (default 100)."""
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from . import conftest

N = int(os.environ.get("TENSORPLAY_FUZZ_N", "100"))

BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8}
BINARY = ["floordiv", "mod", "fmod", "trunc", "floor", "remainder", "pow", "add", "sub", "mul"]
UNARY = ["neg", "abs", "pow_scalar"]


def _wrap(v, dt):
    b = BITS[dt]
    v &= (1 << b) - 1
    if dt != "uint8" and v >= 1 << (b - 1):
        v -= 1 << b
    return v


def _tdiv(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


class _Err(Exception):
    pass


def _model(op, a, b, dt):
    """torch's result for one element (Python ints in, Python int out)."""
    if op in ("floordiv", "floor", "mod", "remainder", "fmod", "trunc") and b == 0:
        raise _Err("ZeroDivisionError")
    if op in ("floordiv", "floor"):
        r = a // b
    elif op in ("mod", "remainder"):
        r = a % b
    elif op == "fmod":
        r = a - b * _tdiv(a, b)
    elif op == "trunc":
        r = _tdiv(a, b)
    elif op in ("pow", "pow_scalar"):
        if b < 0:
            r = 1 if a == 1 else ((-1 if b % 2 else 1) if a == -1 else 0)
        else:
            r = pow(a, b, 1 << BITS[dt])
    elif op == "add":
        r = a + b
    elif op == "sub":
        r = a - b
    elif op == "mul":
        r = a * b
    elif op == "neg":
        r = -a
    elif op == "abs":
        r = abs(a)
    else:
        raise AssertionError(op)
    return _wrap(r, dt)


def _src(op, a, b):
    return {"floordiv": f"({a} // {b})", "mod": f"({a} % {b})", "fmod": f"tp.fmod({a}, {b})",
            "trunc": f"tp.div({a}, {b}, rounding_mode='trunc')",
            "floor": f"{a}.div({b}, rounding_mode='floor')", "remainder": f"tp.remainder({a}, {b})",
            "pow": f"({a} ** {b})", "add": f"({a} + {b})", "sub": f"({a} - {b})",
            "mul": f"({a} * {b})", "neg": f"(-{a})", "abs": f"{a}.abs()",
            "pow_scalar": f"{a}.pow({b})"}[op]


def _draw_expr(d, depth, names, unsigned):
    """(source, evaluator(env) -> list of ints)."""
    if depth == 0 or d.draw(st.integers(0, 3)) == 0:
        n = d.draw(st.sampled_from(names))
        return n, (lambda env, n=n: env[n])
    op = d.draw(st.sampled_from(BINARY + UNARY))
    sa, fa = _draw_expr(d, depth - 1, names, unsigned)
    if op in ("neg", "abs"):
        return _src(op, sa, None), (lambda env: [_model(op, a, 0, env["dt"]) for a in fa(env)])
    if op == "pow_scalar":
        k = d.draw(st.integers(0, 9))
        return _src(op, sa, k), (lambda env: [_model(op, a, k, env["dt"]) for a in fa(env)])
    if d.draw(st.integers(0, 4)) == 0 and op != "pow":
        # a Python scalar operand (unsigned tensors: non-negative ones)
        k = d.draw(st.sampled_from([1, 2, 3, 7] if unsigned else [-3, -2, -1, 1, 2, 3, 7]))
        return _src(op, sa, k), (lambda env: [_model(op, a, k, env["dt"]) for a in fa(env)])
    sb, fb = _draw_expr(d, depth - 1, names, unsigned)
    return _src(op, sa, sb), (lambda env: [_model(op, a, b, env["dt"])
                                           for a, b in zip(fa(env), fb(env))])


def _values(d, dt, n, edge):
    b = BITS[dt]
    lo, hi = (0, (1 << b) - 1) if dt == "uint8" else (-(1 << (b - 1)), (1 << (b - 1)) - 1)
    if not edge:
        return [d.draw(st.integers(1, 9)) for _ in range(n)]
    pool = [lo, lo + 1, -2, -1, 0, 1, 2, hi] if dt != "uint8" else [0, 1, 2, 255, 254, 128]
    return [d.draw(st.one_of(st.sampled_from(pool), st.integers(lo, hi))) for _ in range(n)]


def _outcome(fn, *args):
    try:
        r = fn(*args)
    except Exception as e:  # noqa: BLE001
        return ("err", type(e).__name__, str(e))
    return ("ok", str(r.dtype), r.tolist())


@settings(max_examples=N, derandomize=True, deadline=None, database=None, print_blob=False,
          suppress_health_check=list(HealthCheck))
@given(st.data())
def test_int_division_pow_edges_compiled_matches_eager(data):
    import tensorplay as tp
    d = data
    dt = d.draw(st.sampled_from(sorted(BITS)))
    names = ["a", "b", "c"]
    src, ev = _draw_expr(d, 3, names, dt == "uint8")
    code = f"def f(a, b, c):\n    return {src}\n"
    g = {"tp": tp}
    exec(code, g)
    f = g["f"]
    cf = tp.compile(f, strict_native=True)
    n = 5
    dtype = getattr(tp, dt)
    for edge in (False, True, True):
        vals = {k: _values(d, dt, n, edge) for k in names}
        args = [tp.tensor(vals[k], dtype=dtype) for k in names]
        want = _outcome(f, *args)
        got = _outcome(cf, *args)
        conftest.SUMMARY["int_arith_calls"] += 1
        assert got == want, f"compiled != eager\n{code}inputs {vals} ({dt})\neager {want}\ncompiled {got}"
        env = dict(vals, dt=dt)
        try:
            model = ("ok", str(dtype), ev(env))
        except _Err as e:
            model = ("err", "RuntimeError", str(e))
        if want[0] == "err" and "negative integer powers" in want[2]:
            continue
        assert want[:2] == model[:2] and (want[0] == "err" or want[2] == model[2]), \
            f"eager != torch's semantics\n{code}inputs {vals} ({dt})\neager {want}\nmodel {model}"
    conftest.SUMMARY["int_arith_programs"] += 1
