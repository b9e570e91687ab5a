"""Reliability, round 2 (issue 13): the compiled program's runtime checks.

gather / index_select / embedding read at data-dependent indices and an
integer division may meet a zero divisor: the compiled kernels clamp the
loads (memory stays safe) and flag the error; the program then undoes its
writes to the inputs and the call runs eagerly, so the error (type and
message, naming the index like torch) and the writes made before it are
eager's.  Eager's own index errors are torch's.
"""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from _helpers import isolate_compile_budget  # noqa: F401 - autouse: no compile budget here

try:
    import torch
    import torch.nn.functional as TF
except ImportError:      # pragma: no cover
    torch = None


def _outcome(f, *args):
    try:
        r = f(*args)
    except Exception as e:  # noqa: BLE001 - the error is the outcome
        return ("err", type(e), str(e))
    return ("ok", r.tolist() if hasattr(r, "tolist") else r)


_IDX_OPS = {
    "gather": lambda x, i: tp.gather(x, 0, i.reshape(1, -1)),
    "gather_dim1": lambda x, i: tp.gather(x, 1, i.reshape(1, -1).expand(3, 2)),
    "index_select": lambda x, i: tp.index_select(x, 0, i),
    "index_select_dim1": lambda x, i: x.index_select(1, i) * 2,
    "embedding": lambda x, i: F.embedding(i, x),
    "embedding_of_computed": lambda x, i: F.embedding(i * 2 - 2, x + 1),
    "adv_index": lambda x, i: x[i] + 1,
    "adv_index_dim1": lambda x, i: x[:, i] + 1,
}
_IDX = [[0, 2], [-1, 1], [3, 0], [0, -4], [5, 7], [-4, 9], [2, -1]]


@pytest.mark.parametrize("name", sorted(_IDX_OPS))
@pytest.mark.parametrize("strict", [False, True])
def test_compiled_index_ops_raise_like_eager_on_a_later_call(name, strict):
    fn = _IDX_OPS[name]
    x = tp.arange(12.).reshape(3, 4)
    f = tp.compile(fn, strict_native=strict)
    # (advanced tensor indexing is lowered as a gather too: strict passes)
    assert _outcome(f, x, tp.tensor([1, 1])) == _outcome(fn, x, tp.tensor([1, 1]))
    for idx in _IDX * 2:            # twice: the C dispatch's fast levels too
        i = tp.tensor(idx)
        assert _outcome(f, x, i) == _outcome(fn, x, i), (name, idx)
    assert f.stats()["compiles"] == 1


def test_compiled_gather_names_the_first_bad_index_like_torch():
    f = tp.compile(lambda x, i: tp.gather(x, 0, i))
    x = tp.arange(12.).reshape(3, 4)
    f(x, tp.tensor([[0, 1, 2, 0]]))
    with pytest.raises(RuntimeError, match=r"^index -4 is out of bounds for dimension 0 with size 3$"):
        f(x, tp.tensor([[0, -4, 9, 0]]))
    with pytest.raises(RuntimeError, match=r"^index 9 is out of bounds for dimension 0 with size 3$"):
        f(x, tp.tensor([[0, 1, 9, -5]]))


@pytest.mark.parametrize("strict", [False, True])
def test_compiled_embedding_out_of_range_int32_and_empty(strict):
    f = tp.compile(lambda w, i: F.embedding(i, w).sum(-1), strict_native=strict)
    w = tp.randn(5, 3)
    i32 = tp.tensor([[0, 4], [1, 2]], dtype=tp.int32)
    assert tp.allclose(f(w, i32), F.embedding(i32, w).sum(-1))
    with pytest.raises(IndexError, match="^index out of range in self$"):
        f(w, tp.tensor([[0, 5], [1, 2]], dtype=tp.int32))
    assert tp.allclose(f(w, i32), F.embedding(i32, w).sum(-1))


# -- checks before visible writes ---------------------------------------------
def _inplace_then_div(x, y):
    x.add_(1)
    return x // y


def _div_then_inplace(x, y):
    z = x // y
    x.mul_(2)
    return z


def _inplace_view_then_div(x, y):
    x[0].fill_(7)
    return (x % y) + 1


def _embed_then_inplace(w, i):
    r = F.embedding(i, w)
    w.mul_(2)
    return r


def _inplace_then_gather(w, i):
    w.add_(1)
    return tp.gather(w, 0, i.reshape(1, -1))


def _inplace_other_then_index_select(w, i, o):
    o.sub_(3)
    return w.index_select(0, i) + o


@pytest.mark.parametrize("fn,good,bad", [
    (_inplace_then_div, [2, 3, 1], [2, 0, 1]),
    (_div_then_inplace, [2, 3, 1], [2, 0, 1]),
    (_inplace_view_then_div, [2, 3, 1], [2, 0, 1]),
])
@pytest.mark.parametrize("strict", [False, True])
def test_zero_divisor_leaves_the_inputs_as_eager_does(fn, good, bad, strict):
    f = tp.compile(fn, strict_native=strict)
    for ys in (good, bad, good, good, bad):
        xa = tp.tensor([[5, 6, 7], [8, 9, 10]])
        xb = xa.clone()
        y = tp.tensor(ys)
        assert _outcome(f, xa, y) == _outcome(fn, xb, y)
        assert xa.tolist() == xb.tolist(), (fn.__name__, ys)
    assert f.stats()["compiles"] == 1


@pytest.mark.parametrize("fn", [_embed_then_inplace, _inplace_then_gather])
@pytest.mark.parametrize("strict", [False, True])
def test_index_error_leaves_the_inputs_as_eager_does(fn, strict):
    f = tp.compile(fn, strict_native=strict)
    for idx in ([0, 2], [0, 3], [0, 1], [0, 1], [-1, 0], [1, 1]):
        wa = tp.arange(12.).reshape(3, 4)
        wb = wa.clone()
        i = tp.tensor(idx)
        assert _outcome(f, wa, i) == _outcome(fn, wb, i), (fn.__name__, idx)
        assert wa.tolist() == wb.tolist(), (fn.__name__, idx)


def test_index_error_after_a_write_to_another_input():
    fn = _inplace_other_then_index_select
    f = tp.compile(fn)
    for idx in ([0, 2], [0, 3], [2, 2], [-1, 0]):
        oa, ob = tp.ones(2, 4), tp.ones(2, 4)
        w = tp.arange(12.).reshape(3, 4)
        i = tp.tensor(idx)
        assert _outcome(f, w, i, oa) == _outcome(fn, w, i, ob)
        assert oa.tolist() == ob.tolist()


def test_failed_check_does_not_advance_the_random_stream():
    def fn(x, y):
        return x // y + (tp.rand(3) * 0).long()
    f = tp.compile(fn)
    x, ok, z = tp.tensor([4, 5, 6]), tp.tensor([1, 2, 3]), tp.tensor([1, 0, 3])
    f(x, ok)
    tp.manual_seed(3)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(x, z)
    a = tp.rand(4)
    tp.manual_seed(3)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(x, z)
    assert tp.rand(4).tolist() == a.tolist()


# -- eager == torch -----------------------------------------------------------
_TORCH_CASES = [
    ("index_select", lambda m, x, i: m.index_select(x, 0, i)),
    ("gather", lambda m, x, i: m.gather(x, 0, i.reshape(1, -1))),
    ("adv", lambda m, x, i: x[i]),
    ("adv_dim1", lambda m, x, i: x[:, i]),
    ("adv_two", lambda m, x, i: x[i[:1], i[1:]]),
]


@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("name,fn", _TORCH_CASES)
def test_eager_index_errors_are_torchs(name, fn):
    for idx in _IDX:
        x = tp.arange(12.).reshape(3, 4)
        tx = torch.arange(12.).reshape(3, 4)
        got = _outcome(lambda: fn(tp, x, tp.tensor(idx)))
        want = _outcome(lambda: fn(torch, tx, torch.tensor(idx)))
        if want[0] == "err":
            assert got[0] == "err" and got[1] is want[1] and got[2] == want[2], (name, idx)
        else:
            assert got == want, (name, idx)


@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("key", ["[:, :, I([5])]", "[:, I([5])]", "[I([0]), :, I([5])]",
                                 "[:, I([0]), I([5])]", "[I([0]), I([7])]", "[..., I([9])]",
                                 "[I([[5]])]", "[[0, 9]]", "[I([True, False]), I([4])]"])
@pytest.mark.parametrize("write", [False, True])
def test_eager_advanced_index_bounds_message_is_torchs(key, write):
    def run(m):
        x = m.zeros(2, 3, 4)
        code = ("x" + key + " = 1") if write else ("x" + key)
        try:
            exec(code, {"x": x, "I": m.tensor})
        except Exception as e:  # noqa: BLE001
            return type(e), str(e)
        return None
    assert run(tp) == run(torch)


# -- number / tensor is torch's __rtruediv__ ----------------------------------
_RDIV_VALUES = [1e-40, 3.0, 0.0, -1e-39, 7.0, 1e-38, float("nan"), float("inf"), -0.0, 0.1]


@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("dt", ["float32", "float64", "float16", "int64", "int32", "bool"])
@pytest.mark.parametrize("num", [0.0, 2.0, 5, True, -3.5])
@pytest.mark.parametrize("compiled", [False, True])
def test_number_over_tensor_is_torchs_reciprocal_times_number(dt, num, compiled):
    import numpy as np
    vals = np.array(_RDIV_VALUES if dt.startswith("float") else [3, 7, 0, 1, 2, 5],
                    dtype=dt if dt != "bool" else "float64")
    if dt == "bool":
        vals = vals != 0
    t = torch.from_numpy(vals.copy())
    x = tp.from_numpy(vals.copy())
    fn = lambda a: num / a  # noqa: E731
    want = fn(t)
    f = tp.compile(fn, strict_native=True) if compiled else fn
    got = f(x)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_float32_zero_over_tiny_is_nan_like_torch():
    t = tp.tensor([1e-40, 2.0])
    assert (0.0 / t).isnan().tolist() == [True, False]
    assert tp.compile(lambda a: 0.0 / a + 0)(t).isnan().tolist() == [True, False]


# -- movedim / moveaxis with tuples of dims -----------------------------------
_MOVEDIM_ARGS = ["(0, 1), (2, 3)", "[0, 1], [-1, -2]", "(0,), (3,)", "(0, 0), (1, 2)",
                 "(0, 1), (2,)", "(0, 5), (1, 2)", "(), ()", "(0, 1), (1, 0)", "(1,), 2",
                 "(0, 1), (2, 2)", "(-5,), (0,)", "(0, -4), (1, 2)", "(0, 1), [1, 2]", "2, 0"]


@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("args", _MOVEDIM_ARGS)
@pytest.mark.parametrize("name", ["movedim", "moveaxis"])
def test_eager_movedim_with_tuples_is_torchs(args, name):
    def run(m):
        x = m.arange(120.).reshape(2, 3, 4, 5)
        try:
            r = getattr(x, name)(*eval(args))
            r2 = getattr(m, name)(x, *eval(args))
        except Exception as e:  # noqa: BLE001
            return type(e).__name__, str(e).splitlines()[0]
        return tuple(r.shape), r.stride(), r.flatten().tolist(), r2.flatten().tolist()
    assert run(tp) == run(torch)


@pytest.mark.parametrize("fn", [lambda x: x.movedim((0, 1), (2, 3)) * 1,
                                lambda x: tp.movedim(x, [0, -1], [-1, 0]) + 1,
                                lambda x: x.moveaxis((1,), (0,)),
                                lambda x: x.movedim(source=(0, 2), destination=(1, 0)) - 1])
def test_compiled_movedim_with_tuples_native(fn):
    x = tp.randn(2, 3, 4, 5)
    f = tp.compile(fn, strict_native=True)
    r, want = f(x), fn(x)
    assert r.shape == want.shape and (r == want).all().item()


# -- strict names the store's own line ----------------------------------------
_STATE = {}


class _Plain:
    pass


_OBJ = _Plain()


def _store_read_container(x):
    y = x * 2
    z = y + 1
    if len(_STATE) >= 0:
        _STATE["last"] = z  # STORE-LINE-A
    return y


def _store_plain_attr(x):
    y = x * 2
    _OBJ.val = y  # STORE-LINE-B
    return y + 1


class _Cache(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        y = x * 3
        if "k" in self.cache:
            y = y + 0
        self.cache["k"] = y  # STORE-LINE-C
        return y - 1


def _marker_line(tag):
    import inspect
    src, start = inspect.getsourcelines(__import__(__name__))
    for i, line in enumerate(src):
        if tag in line and "_marker_line" not in line:
            return start + i if start else i + 1
    raise AssertionError(tag)


@pytest.mark.parametrize("fn,tag", [(_store_read_container, "STORE-LINE-A"),
                                    (_store_plain_attr, "STORE-LINE-B"),
                                    (_Cache, "STORE-LINE-C")])
def test_strict_unsafe_store_names_the_stores_line(fn, tag):
    f = tp.compile(fn() if isinstance(fn, type) else fn, strict_native=True)
    with pytest.raises(tp.compiler.NativeCompileError) as ei:
        f(tp.randn(3))
    assert f"test_reliability_checks.py:{_marker_line(tag)} in " in str(ei.value)


# -- add/sub with alpha: torch's fused multiply-add ---------------------------
@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("dt", ["float32", "float64", "float16"])
@pytest.mark.parametrize("op", ["add", "sub"])
@pytest.mark.parametrize("alpha", [0.3, -2.7, 3, 1])
def test_add_sub_alpha_is_torchs_fma(dt, op, alpha):
    import numpy as np
    rng = np.random.default_rng(5)
    # 1024: torch's vectorized body only (its scalar tail does not fuse)
    xa = rng.standard_normal(1024).astype(dt)
    ya = rng.standard_normal(1024).astype(dt)
    fn = lambda a, b: getattr(tp, op)(a, b, alpha=alpha)  # noqa: E731
    want = getattr(torch, op)(torch.from_numpy(xa), torch.from_numpy(ya), alpha=alpha).numpy()
    got = fn(tp.from_numpy(xa), tp.from_numpy(ya)).numpy()
    comp = tp.compile(fn)(tp.from_numpy(xa), tp.from_numpy(ya)).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(comp, got)


@pytest.mark.parametrize("dt", ["float32", "float64", "float16", "int32", "int64"])
@pytest.mark.parametrize("expr", ["x + 0.1", "x - 3", "0.5 + x", "tp.sub(x, 0.1, alpha=-1)",
                                  "tp.add(x, 0.1, alpha=-1)", "tp.sub(x, x * 3, alpha=2)",
                                  "x.add(3, alpha=0.5)", "tp.add(x, y, alpha=-0.7)",
                                  "tp.rsub(x, y, alpha=2)"])
def test_add_sub_alpha_compiled_equals_eager(dt, expr):
    import numpy as np
    rng = np.random.default_rng(7)
    if dt.startswith("int") and ("0." in expr):
        pytest.skip("float alpha/operand on integers: an error in both")
    x = tp.from_numpy((rng.standard_normal(257) * 10).astype(dt))
    y = tp.from_numpy((rng.standard_normal(257) * 10).astype(dt))
    fn = eval("lambda x, y: " + expr)
    np.testing.assert_array_equal(tp.compile(fn)(x, y).numpy(), fn(x, y).numpy())


@pytest.mark.parametrize("shapes", [((), ()), ((), (3,)), ((2, 1), (3,))])
def test_add_alpha_keeps_the_broadcast_shape(shapes):
    # make fuzz N=20000: tp.add(v, v, alpha=2) of a 0-d tensor came back 1-d
    a, b = tp.ones(*shapes[0]), tp.ones(*shapes[1])
    want = tuple(np.broadcast_shapes(shapes[0], shapes[1]))
    for fn in (lambda a, b: tp.add(a, b, alpha=2), lambda a, b: tp.sub(a, b, alpha=0.5)):
        assert tuple(fn(a, b).shape) == want
        assert tuple(tp.compile(fn)(a, b).shape) == want
