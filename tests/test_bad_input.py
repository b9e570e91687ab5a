"""Bad input to every public entry point: a clear Python exception of the
type PyTorch raises, a message naming the problem, no crash, and no poisoned
cache entry (a compiled function that failed once still fails the same way,
keeps no version for the failed call, and the next good call works).

Table-driven: each case is (id, make inputs, the bad call, exception types,
regexes the message must match).  Cases over tensors also run inside
``tp.compile`` and must raise the same exception type there."""
import gc
import re
import sys

import numpy as np
import pytest
from _helpers import isolate_compile_budget, skip_unless_landed  # noqa: F401 (autouse fixture)

tp = pytest.importorskip("tensorplay")
F = getattr(getattr(tp, "nn", None), "functional", None)


skip_unless_landed(tp)


def _t(*shape, dtype=None):
    return tp.ones(*shape) if dtype is None else tp.ones(*shape, dtype=dtype)


# (id, inputs(tp) -> tuple, bad(tp, *inputs), exception types, [regexes], also compiled)
CASES = [
    ("add-shapes", lambda: (_t(2, 3), _t(4)), lambda x, y: x + y, RuntimeError, [r"3", r"4"], True),
    ("mul-shapes-3d", lambda: (_t(2, 3, 5), _t(2, 4, 5)), lambda x, y: x * y, RuntimeError, [r"3", r"4"], True),
    ("where-shapes", lambda: (_t(2, 3), _t(5)), lambda x, y: tp.where(x > 0, x, y), RuntimeError, [r"3", r"5"],
     True),
    ("sum-dim-range", lambda: (_t(2, 3),), lambda x: x.sum(5), IndexError, [r"5", r"range|dim"], True),
    ("amax-dim-range", lambda: (_t(2, 3),), lambda x: x.amax(-3), IndexError, [r"-3"], True),
    ("mean-tuple-dim-range", lambda: (_t(2, 3),), lambda x: x.mean((0, 2)), IndexError, [r"2"], True),
    ("transpose-dim-range", lambda: (_t(2, 3),), lambda x: x.transpose(0, 7), IndexError, [r"7"], True),
    ("unsqueeze-dim-range", lambda: (_t(2, 3),), lambda x: x.unsqueeze(4), IndexError, [r"4"], True),
    ("index-range", lambda: (_t(2, 3),), lambda x: x[5], IndexError, [r"5"], True),
    ("index-range-dim1", lambda: (_t(2, 3),), lambda x: x[:, -4], IndexError, [r"-4"], True),
    ("too-many-indices", lambda: (_t(2, 3),), lambda x: x[0, 0, 0], IndexError, [r"ind"], True),
    ("reshape-numel", lambda: (_t(2, 3),), lambda x: x.reshape(7), RuntimeError, [r"7", r"6"], True),
    ("reshape-two-minus-one", lambda: (_t(2, 3),), lambda x: x.reshape(-1, -1), RuntimeError,
     [r"one dimension|-1|infer"], True),
    ("view-noncontiguous", lambda: (_t(2, 3),), lambda x: x.t().view(6), RuntimeError,
     [r"view|contiguous|stride"], True),
    ("expand-bad", lambda: (_t(2, 3),), lambda x: x.expand(5, 4), RuntimeError, [r"expand|size"], True),
    ("permute-repeated", lambda: (_t(2, 3),), lambda x: x.permute(0, 0), RuntimeError,
     [r"repeat|perm|dim"], True),
    ("matmul-shapes", lambda: (_t(2, 3), _t(4, 5)), lambda x, y: x @ y, RuntimeError, [r"3", r"4"], True),
    ("add-str", lambda: (_t(2),), lambda x: tp.add(x, "a"), TypeError, [r"str|add|argument"], True),
    ("sum-dim-str", lambda: (_t(2),), lambda x: x.sum(dim="a"), TypeError, [r"dim|str|int"], True),
    ("mean-int", lambda: (_t(3, dtype=tp.int64),), lambda x: x.mean(), RuntimeError,
     [r"dtype|float|long|int64"], True),
    ("inplace-cast", lambda: (_t(3, dtype=tp.int64),), lambda x: x.add_(0.5), RuntimeError,
     [r"cast|float|long|int64"], True),
    ("sub-bool", lambda: (_t(3) > 0,), lambda x: x - x, RuntimeError, [r"bool"], True),
    ("neg-bool", lambda: (_t(3) > 0,), lambda x: -x, RuntimeError, [r"bool"], True),
    ("where-cond-float", lambda: (_t(3),), lambda x: tp.where(x, x, x), RuntimeError, [r"bool|cond"], True),
    ("clamp-no-bounds", lambda: (_t(3),), lambda x: x.clamp(), RuntimeError, [r"min|max"], True),
    ("linear-shapes", lambda: (_t(2, 4),), lambda x: tp.nn.Linear(3, 2)(x), RuntimeError, [r"4", r"3"], True),
    ("layer-norm-shape", lambda: (_t(2, 3),), lambda x: F.layer_norm(x, (4,)), RuntimeError, [r"4|3"], True),
    ("int-of-multi", lambda: (_t(3),), lambda x: int(x), (RuntimeError, ValueError, TypeError),
     [r"element|scalar|convert"], True),
    ("bool-of-multi", lambda: (_t(3),), lambda x: bool(x), (RuntimeError, ValueError),
     [r"ambiguous|element|more than one"], True),
    ("item-of-multi", lambda: (_t(3),), lambda x: x.item(), (RuntimeError, ValueError),
     [r"element|scalar|item"], False),
    ("cat-shapes", lambda: (_t(2, 3), _t(2, 4)), lambda x, y: tp.cat([x, y], 0), RuntimeError,
     [r"3|4"], True),
    ("to-bad-dtype", lambda: (_t(3),), lambda x: x.to("nonsense"), (TypeError, ValueError, RuntimeError),
     [r"nonsense|dtype"], False),
    # creation and module-level functions (eager only)
    ("zeros-bad-dtype", lambda: (), lambda: tp.zeros(2, dtype="complex128"), (TypeError, ValueError),
     [r"complex128|dtype"], False),
    ("from-numpy-complex", lambda: (), lambda: tp.from_numpy(np.zeros(3, np.complex64)), TypeError,
     [r"complex|dtype|type"], False),
    ("from-numpy-list", lambda: (), lambda: tp.from_numpy([1, 2]), TypeError, [r"ndarray|numpy|list"], False),
    ("tensor-ragged", lambda: (), lambda: tp.tensor([[1, 2], [3]]), (ValueError, TypeError),
     [r"length|sequence|shape|ragged|inhomogeneous"], False),
    ("tensor-str", lambda: (), lambda: tp.tensor("abc"), (TypeError, ValueError), [r"str|type|data"], False),
    ("ones-negative", lambda: (), lambda: tp.ones(-1), RuntimeError, [r"-1|negative"], False),
    ("empty-bad-size", lambda: (), lambda: tp.empty((2, "a")), TypeError, [r"str|int|size"], False),
    ("empty-huge", lambda: (), lambda: tp.empty(1 << 40, 1 << 40), (RuntimeError, MemoryError, ValueError,
                                                                   OverflowError), [r"."], False),
    ("arange-zero-step", lambda: (), lambda: tp.arange(0, 10, 0), (RuntimeError, ValueError),
     [r"step|zero"], False),
    ("manual-seed-str", lambda: (), lambda: tp.manual_seed("a"), (TypeError, ValueError, RuntimeError),
     [r"str|int|seed"], False),
]


def _check_exc(excinfo, types, patterns, what):
    e = excinfo
    assert isinstance(e, types), f"{what}: {type(e).__name__}: {e} (want {types})"
    msg = str(e)
    for p in patterns:
        assert re.search(p, msg, re.I), f"{what}: message {msg!r} does not match {p!r}"


def _raises(fn, *args):
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001
        return e
    return None


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_eager(case):
    cid, inputs, bad, types, pats, _ = case
    args = inputs()
    e = _raises(bad, *args)
    assert e is not None, f"{cid}: no exception"
    _check_exc(e, types, pats, cid)


@pytest.mark.parametrize("case", [c for c in CASES if c[5]], ids=[c[0] for c in CASES if c[5]])
def test_bad_input_compiled(case):
    """The same bad call inside tp.compile raises the same exception type,
    twice (no cached artifact), keeps no version, and the process goes on."""
    cid, inputs, bad, types, pats, _ = case
    args = inputs()
    eager = _raises(bad, *args)
    cf = tp.compile(lambda *a: bad(*a))
    for attempt in range(2):
        e = _raises(cf, *inputs())
        assert e is not None, f"{cid}: compiled call {attempt} returned a value, eager raised {eager!r}"
        assert isinstance(e, type(eager)) or isinstance(e, types), \
            f"{cid}: compiled raised {type(e).__name__}: {e}; eager {type(eager).__name__}: {eager}"
    assert len(cf.versions) == 0, f"{cid}: a failed compile left {len(cf.versions)} version(s)"
    good = tp.compile(lambda x: x * 2 + 1)
    assert np.allclose(good(tp.ones(3)).numpy(), 3.0)


# ------------------------------------------------------------------ tp.compile itself

def test_compile_non_callable():
    for bad in (3, "f", None.__class__, [lambda x: x]):
        if callable(bad):
            continue
        with pytest.raises(TypeError, match=r"callable"):
            tp.compile(bad)


def test_compile_unknown_backend():
    e = _raises(lambda: tp.compile(lambda x: x + 1, backend="no_such_backend")(tp.ones(2)))
    assert isinstance(e, (ValueError, KeyError, RuntimeError, TypeError)), repr(e)
    assert "no_such_backend" in str(e)


def test_compile_backend_wrong_type():
    e = _raises(lambda: tp.compile(lambda x: x + 1, backend=42)(tp.ones(2)))
    assert isinstance(e, (TypeError, ValueError)), repr(e)


def test_compiled_wrong_arity_and_kwargs():
    cf = tp.compile(lambda x, y: x + y)
    x = tp.ones(2)
    with pytest.raises(TypeError):
        cf(x)
    with pytest.raises(TypeError):
        cf(x, x, x)
    with pytest.raises(TypeError):
        cf(x, x, z=x)
    assert np.allclose(cf(x, x).numpy(), 2.0)
    assert len(cf.versions) == 1


def test_function_raises_then_good_call():
    def f(x):
        if x.shape[0] == 3:
            raise ValueError("boom: three rows")
        return x * 2
    cf = tp.compile(f)
    for _ in range(2):
        with pytest.raises(ValueError, match="boom"):
            cf(tp.ones(3, 2))
    assert np.allclose(cf(tp.ones(4, 2)).numpy(), 2.0)
    with pytest.raises(ValueError, match="boom"):
        cf(tp.ones(3, 2))
    assert len(cf.versions) == 1
    assert np.allclose(cf(tp.ones(4, 2)).numpy(), 2.0)


def test_data_dependent_raise_is_not_cached():
    def f(x):
        if x.sum() > 100:
            raise OverflowError("too big")
        return x + 1
    cf = tp.compile(f)
    assert np.allclose(cf(tp.ones(4)).numpy(), 2.0)
    with pytest.raises(OverflowError, match="too big"):
        cf(tp.ones(4) * 1000)
    with pytest.raises(OverflowError, match="too big"):
        cf(tp.ones(4) * 1000)
    assert np.allclose(cf(tp.ones(4)).numpy(), 2.0)


@pytest.mark.parametrize("ret", ["none", "str", "object", "int", "dict", "list"])
def test_returns_non_tensor(ret):
    """Non-tensor outputs: either the same value as eager, or a clear exception."""
    sentinel = object()

    def f(x):
        y = x + 1
        return {"none": None, "str": "abc", "object": sentinel, "int": 3,
                "dict": {"a": y, "b": 2}, "list": [y, y * 2]}[ret]
    x = tp.ones(2)
    want = f(x)
    cf = tp.compile(f)
    try:
        got = cf(x)
    except (TypeError, ValueError, RuntimeError, NotImplementedError) as e:
        assert re.search(r"output|return|tensor", str(e), re.I), str(e)
        return
    if ret == "dict":
        assert set(got) == {"a", "b"} and got["b"] == 2 and np.allclose(got["a"].numpy(), 2.0)
    elif ret == "list":
        assert isinstance(got, list) and np.allclose(got[1].numpy(), 4.0)
    elif ret == "object":
        assert got is sentinel
    else:
        assert got == want and type(got) is type(want)
    got2 = cf(x)  # cached version gives the same
    assert type(got2) is type(got)


def test_infinite_recursion():
    def f(x):
        return f(x + 1)
    cf = tp.compile(f)
    lim = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        with pytest.raises(RecursionError):
            cf(tp.ones(2))
    finally:
        sys.setrecursionlimit(lim)
    assert len(cf.versions) == 0
    assert np.allclose(tp.compile(lambda x: x - 1)(tp.ones(2)).numpy(), 0.0)


def test_finite_recursion():
    def f(x, n):
        return x if n == 0 else f(x * 2, n - 1)
    cf = tp.compile(f)
    assert np.allclose(cf(tp.ones(2), 3).numpy(), 8.0)
    assert np.allclose(cf(tp.ones(2), 2).numpy(), 4.0)


def test_generator_function():
    def g(x):
        yield x + 1
    e = _raises(lambda: tp.compile(g)(tp.ones(2)))
    assert e is not None and isinstance(e, (TypeError, ValueError, NotImplementedError, RuntimeError)), repr(e)
    assert re.search(r"generator|output|return|tensor", str(e), re.I), str(e)


def test_strict_native_unusual_dtypes():
    """float16/int8 etc.: the right answer or a NativeCompileError naming the problem; never a crash."""
    for dt in ("float16", "int8", "uint8", "int16", "int32"):
        dtype = getattr(tp, dt)
        x = tp.ones(4, dtype=dtype)
        cf = tp.compile(lambda x: x * 2, strict_native=True)
        try:
            y = cf(x)
        except tp.compiler.NativeCompileError as e:
            assert str(e), dt
            continue
        assert str(y.dtype).endswith(dt) and np.allclose(y.numpy().astype(np.float64), 2.0), (dt, y)


def test_set_logs_unknown_key():
    e = _raises(lambda: tp.compiler.set_logs(no_such_log=True))
    assert isinstance(e, (TypeError, ValueError)) and "no_such_log" in str(e), repr(e)


def test_register_backend_non_callable():
    e = _raises(lambda: tp.compiler.register_backend("bad_backend_xyz")(42))
    if e is None:
        e = _raises(lambda: tp.compile(lambda x: x + 1, backend="bad_backend_xyz")(tp.ones(2)))
    assert isinstance(e, (TypeError, ValueError)), repr(e)


def test_backend_raises_is_not_cached():
    calls = []

    def bad_backend(gm, example_inputs, **kw):
        calls.append(1)
        raise RuntimeError("backend exploded")
    cf = tp.compile(lambda x: x + 1, backend=bad_backend)
    e = _raises(cf, tp.ones(2))
    # either propagated, or warned and ran eagerly with the right answer
    if e is not None:
        assert "exploded" in str(e)
    good = tp.compile(lambda x: x + 1)
    assert np.allclose(good(tp.ones(2)).numpy(), 2.0)
    gc.collect()


def test_accumulated_limit_is_per_function():
    """config.accumulated_cache_size_limit counts the compiles of one code
    object (as PyTorch's): many different functions each compile."""
    from tensorplay.compiler import config
    saved = config.accumulated_cache_size_limit
    try:
        config.accumulated_cache_size_limit = 4
        for k in range(6):
            cf = tp.compile(eval(f"lambda x: x + {k}"), strict_native=False)
            cf(tp.ones(2))
            assert cf.stats()["compiles"] == 1, f"function {k}: {cf.stats()}"
    finally:
        config.accumulated_cache_size_limit = saved
