"""The Python-operator rows of ops.def are the one table of Python's operator
syntax: Tensor's and Proxy's number slots, stax_op_for_target, the graph
printer, ConstFold, NormalizeOperators and DecomposePass all derive from them.
These tests check every derived view against the rows (issue 12, item 1) and
that `+x` means PyTorch's `positive` (x itself) everywhere."""
import operator

import numpy as np
import pytest
import torch

import tensorplay as tp
from tensorplay import _C

PYOPS = _C._pyop_table()
BY_FN = {r["fn"]: r for r in PYOPS}
OPS = {r["name"]: r for r in _C._op_table()}

# slot rows: (dunder base, operand count) by operator function
DUNDER = {
    "add": "add", "sub": "sub", "mul": "mul", "truediv": "truediv",
    "floordiv": "floordiv", "mod": "mod", "pow": "pow", "matmul": "matmul",
    "and_": "and", "or_": "or", "xor": "xor", "lshift": "lshift",
    "rshift": "rshift", "neg": "neg", "pos": "pos", "invert": "invert",
    "abs": "abs", "lt": "lt", "le": "le", "eq": "eq", "ne": "ne", "gt": "gt",
    "ge": "ge",
}


def test_rows_are_consistent():
    fns = [r["fn"] for r in PYOPS]
    assert len(fns) == len(set(fns))
    for r in PYOPS:
        assert r["function"] is getattr(operator, r["fn"])
        if r["ifn"] is not None:
            assert r["ifunction"] is getattr(operator, r["ifn"])
        if r["op"] is not None:
            assert r["op"] in OPS
        if r["slot"]:
            assert r["fn"] in DUNDER
    # the op table's OPERATOR flag is exactly "some Python operator means it"
    meant = {r["op"] for r in PYOPS if r["op"] is not None}
    STAX_OPF_OPERATOR = 1 << 7   # ops.h
    flagged = {n for n, r in OPS.items() if r["flags"] & STAX_OPF_OPERATOR}
    assert flagged == meant


@pytest.mark.parametrize("row", [r for r in PYOPS if r["slot"]], ids=lambda r: r["fn"])
def test_slots_follow_the_rows(row):
    base = DUNDER[row["fn"]]
    assert f"__{base}__" in vars(_C.Proxy) or base in ("lt", "le", "eq", "ne", "gt", "ge")
    x = tp.tensor([[1, 2], [3, 4]])
    args = (x,) if row["arity"] == 1 else (x, x)
    if row["op"] is None:
        # no op means it: Tensor's slot is empty (Python's own TypeError)
        with pytest.raises(TypeError):
            row["function"](*args)
        return
    if row["ifn"] is not None:
        y = x.float() if row["fn"] in ("truediv", "pow", "matmul") else x.clone()
        r = row["ifunction"](y, y.clone())
        # an op with an in-place twin mutates; otherwise Python falls back
        assert (r is y) == (row["inplace_op"] is not None)


@pytest.mark.parametrize("row", [r for r in PYOPS if r["op"] is not None],
                         ids=lambda r: r["fn"])
def test_op_for_target_follows_the_rows(row):
    assert _C._op_for_target("call_function", row["function"]) == row["op"]
    if row["ifn"] is not None:
        assert _C._op_for_target("call_function", row["ifunction"]) == row["inplace_op"]


def _sample(row):
    x = tp.tensor([[1, 2], [3, 4]])
    if row["fn"] in ("truediv", "pow", "matmul", "neg", "pos", "abs"):
        x = x.float()
    return x


@pytest.mark.parametrize("row", [r for r in PYOPS if r["slot"] and r["op"] is not None],
                         ids=lambda r: r["fn"])
def test_eager_slot_matches_torch(row):
    f = row["function"]
    x = _sample(row)
    t = torch.tensor(np.asarray(x.numpy()))
    args, targs = ((x,), (t,)) if row["arity"] == 1 else ((x, x), (t, t))
    r, e = f(*args), f(*targs)
    np.testing.assert_allclose(np.asarray(r.numpy(), dtype=np.float64),
                               e.double().numpy())


@pytest.mark.parametrize("row", [r for r in PYOPS if r["sym"] is not None],
                         ids=lambda r: r["fn"])
def test_printer_spells_the_symbol(row):
    g = _C.Graph()
    a = g.placeholder("a")
    b = g.placeholder("b")
    n = g.call_function(row["function"], (a,) if row["arity"] == 1 else (a, b))
    g.output(n)
    code = _C.GraphModule(g).code
    want = f"{row['sym']}a" if row["arity"] == 1 else f"a {row['sym']} b"
    assert want in code, code


def test_traced_operators_print_their_symbols():
    def f(x, y):
        return (x + y, x - y, x * y, x / y, x // y, x % y, x ** y, -x, +x,
                x < y, x <= y, x == y, x != y, x > y, x >= y)
    x = tp.tensor([1.0, 2.0])
    code = _C.trace(f, (x, x + 1)).graph_module.code
    for sym in ("+", "-", "*", "/", "//", "%", "**", "<", "<=", "==", "!=",
                ">", ">="):
        assert f"x {sym} y" in code, (sym, code)
    assert "-x" in code and "+x" in code


# ---- +x means positive (PyTorch: x itself) everywhere ---------------------

def test_pos_eager_is_positive():
    x = tp.tensor([1.0, -2.0])
    assert (+x) is x
    assert tp.positive(x) is x and x.positive() is x
    t = torch.tensor([1.0, -2.0])
    assert (+t) is t   # the meaning we follow
    with pytest.raises(RuntimeError, match="on a bool tensor is not supported"):
        +tp.tensor([True])
    with pytest.raises(RuntimeError, match="on a bool tensor is not supported"):
        +torch.tensor([True])


def test_pos_in_the_graph_room():
    assert _C._op_for_target("call_function", operator.pos) == "positive"
    assert BY_FN["pos"]["op"] == "positive" and BY_FN["pos"]["sym"] == "+"
    assert BY_FN["pos"]["fold"]


def test_pos_compiled_aliases_like_eager():
    def f(x):
        y = +x
        y.add_(1)
        return y * 2, +(x - 1)
    a, b = tp.tensor([1.0, 2.0]), tp.tensor([1.0, 2.0])
    e = f(a)
    c = tp.compile(f)(b)
    for u, v in zip(e, c):
        np.testing.assert_array_equal(u.numpy(), v.numpy())
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(b.numpy(), [2.0, 3.0])


def test_inplace_operators_on_proxy_record_the_twin():
    def f(x):
        x += 1
        x /= 2
        x **= 2
        return x
    x = tp.tensor([1.0, 3.0])
    gm = _C.trace(f, (x.clone(),)).graph_module
    meths = [n.target for n in gm.graph.nodes if n.op == "call_method"]
    assert meths == ["add_", "div_", "pow_"]
    y = x.clone()
    np.testing.assert_array_equal(tp.compile(f)(y).numpy(), f(x.clone()).numpy())


# ---- the C core never imports the package (issue 12, item 3) -------------

def test_no_c_file_imports_the_package():
    import pathlib
    import re
    root = pathlib.Path(__file__).resolve().parent.parent / "csrc"
    bad = []
    for f in root.rglob("*.c"):
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if re.search(r'PyImport_\w*\(\s*"tensorplay', line):
                bad.append(f"{f.relative_to(root)}:{i}")
    assert not bad, bad


def test_core_runs_with_package_modules_unimportable(monkeypatch):
    import sys

    def f(x):
        y = x * 2
        y.add_(1)
        return y + tp.randn(3)

    x = tp.tensor([1.0, 2.0, 3.0])
    for name in ("tensorplay.ops", "tensorplay.random", "tensorplay._tensor",
                 "tensorplay.functional"):
        monkeypatch.setitem(sys.modules, name, None)
    tr = _C.trace(f, (x,))
    og = _C.make_op_graph(tr.graph_module)
    assert any(getattr(n.target, "_stax_op", None) for n in og.graph.nodes
               if n.op == "call_function")


def test_register_rejects_unknown_names():
    with pytest.raises(KeyError):
        _C._register("tensorplay.nothing", object())


# ---- the passes edit StaxGraph/StaxNode directly (issue 12, item 2) ------

def test_passes_want_a_tensorplay_graph():
    class FakeGraph:
        nodes = []
    with pytest.raises(TypeError, match="tensorplay Graph"):
        _C.run_frontend_passes(FakeGraph())
    class FakeGM:
        graph = FakeGraph()
    with pytest.raises(TypeError, match="tensorplay Graph"):
        _C.make_op_graph(FakeGM())


def test_decomposition_keeps_the_users_insertion_point():
    # DecomposePass inserts before the expanded node; a Graph's own
    # insertion point (inserting_after) is left as the user set it
    g = _C.Graph()
    x = g.placeholder("x")
    x.meta["val"] = tp.tensor([1.0, -2.0])
    r = g.call_function(tp.functional.relu6, (x,))
    r.meta["val"] = tp.functional.relu6(x.meta["val"])
    g.output(r)
    gm = _C.GraphModule(g)
    with g.inserting_after(x):
        _C.run_frontend_passes(gm)
        n = g.call_function(operator.neg, (x,))
    nodes = list(g.nodes)
    assert nodes[1] is n
    gm.graph.lint()


def test_derivative_is_a_column_of_the_op_table():
    # the derivative formulas are the op table's STAX_OP_DERIV rows keyed by
    # op id: every row has one, autograd parses exactly those texts, and an
    # in-place twin (add_) shares its row's id but carries none of its own
    derivs = _C._autograd_derivatives()
    for r in _C._op_table():
        twin = r["flags"] & (1 << 3) and r["inplace"] is not None
        if twin:
            assert r["derivative"] is None, r["name"]
            continue
        assert r["derivative"], r["name"]
        assert derivs[r["name"]]["formula"] == r["derivative"]
    assert len(derivs) == len({r["id"] for r in _C._op_table()})
    assert _C._op_info("mul")["derivative"] == "self: (mul grad other) other: (mul grad self)"
    assert _C._op_info("add_")["derivative"] is None
    assert derivs["eq"]["kind"] == "nondiff"


def test_lowering_rule_is_a_column_of_the_op_table():
    # lw_lower_node switches on the STAX_OP_LOWER column, never on a name:
    # each op kind has the rules its lowering has, and the fused composites
    # and the copy/cast ops name theirs
    kinds = {
        "pointwise": {"formula", "cast", "none"}, "reduction": {"reduction"},
        "view": {"view"}, "extern": {"matmul"}, "random": {"random"},
        "composite": {"softmax", "layer_norm", "batch_norm", "none"},
        "other": {"cat", "pad", "gather", "scatter", "tri", "fill_like", "one_hot", "unfold",
                  "none"},
    }
    for r in _C._op_table():
        assert r["lower"] in kinds[r["kind"]], (r["name"], r["lower"])
        if r["kind"] == "pointwise":
            assert (r["lower"] == "none") == (r["formula"] is None), r["name"]
    rule = {n: OPS[n]["lower"] for n in ("softmax", "log_softmax", "native_layer_norm",
                                         "clone", "stack", "full_like", "tril", "embedding")}
    assert rule == {"softmax": "softmax", "log_softmax": "softmax",
                    "native_layer_norm": "layer_norm", "clone": "cast", "stack": "cat",
                    "full_like": "fill_like", "tril": "tri", "embedding": "gather"}
    # the rule lowers natively: no eager fallback kernel for a fused softmax
    x = tp.randn(4, 8)
    cf = tp.compile(lambda t: tp.softmax(t * 2, dim=-1), backend="stax", strict_native=True)
    np.testing.assert_allclose(cf(x).numpy(), tp.softmax(x * 2, dim=-1).numpy(), rtol=1e-5)


def _unparse(t):
    return t if isinstance(t, str) else "(" + " ".join(_unparse(x) for x in t) + ")"


def test_formula_and_decomposition_columns_have_one_parser():
    # the ops room parses each S-expression column once (ops_sexp.c); the
    # pointwise lowering and DecomposePass walk those trees. Every row's text
    # is exactly one well-formed expression (a malformed row would be no tree)
    for r in _C._op_table():
        formula, decomp = _C._op_trees(r["name"])
        for text, tree in ((r["formula"], formula), (r["decomposition"], decomp)):
            if text is None:
                assert tree is None, r["name"]
            else:
                assert tree is not None and _unparse(tree) == " ".join(text.split()), r["name"]
    assert _C._op_trees("add") == (("fma", "b", "$alpha", "a"), None)   # torch's fmadd
    assert _C._op_trees("add_") == _C._op_trees("add")
    # the pointwise lowering reads the same tree: div's (case ...) picks by rounding_mode
    x, y = tp.tensor([7.0, -7.0]), tp.tensor([2.0, 2.0])
    for mode in (None, "trunc", "floor"):
        cf = tp.compile(lambda a, b, m=mode: tp.div(a, b, rounding_mode=m), strict_native=True)
        np.testing.assert_allclose(cf(x, y).numpy(), tp.div(x, y, rounding_mode=mode).numpy())


@pytest.mark.parametrize("a_dt,b", [
    ("int8", ("t0", "float64")), ("uint8", ("t0", "int8")), ("bool", 2), ("int32", 2.5),
    ("int32", ("t1", "float16")), ("bool", ("t0", "int16")), ("float16", ("t0", "float64")),
    ("int64", True),
])
def test_lowered_comparison_promotes_as_result_type(a_dt, b):
    # one promotion routine (csrc/tensor/dtype.c: stax_result_type_of) serves
    # eager's result_type and the lowering of comparisons: a dimensioned
    # tensor outranks a 0-d one outranks a Python scalar within a category
    a = tp.tensor([-3, 0, 1, 2, 3], dtype=getattr(tp, a_dt))
    if isinstance(b, tuple):
        shape = () if b[0] == "t0" else (5,)
        b = tp.full(shape, 1.5 if "float" in b[1] else 1, dtype=getattr(tp, b[1]))
    cf = tp.compile(lambda x, y: (x < y, x == y, x >= y), strict_native=True)
    for got, want in zip(cf(a, b), (a < b, a == b, a >= b)):
        assert got.dtype == tp.bool
        np.testing.assert_array_equal(got.numpy(), want.numpy())
