"""Graph core: Node/Graph/GraphModule API, names, users, lint, printing, codegen."""
import gc
import operator

import pytest

from tensorplay import _C


def build():
    g = _C.Graph()
    x = g.placeholder("x")
    w = g.placeholder("w")
    a = g.call_function(operator.add, (x, w))
    m = g.call_function(operator.mul, (a, 2))
    s = g.call_method("sum", (m, -1))
    g.output(s)
    return g, (x, w, a, m, s)


def test_names_rule():
    g = _C.Graph()
    x = g.placeholder("x")
    n1 = g.call_method("sum", (x,))
    n2 = g.call_method("sum", (n1,))
    a1 = g.call_function(operator.add, (n2, 1))
    a2 = g.call_function(operator.add, (a1, 1))
    a3 = g.call_function(operator.add, (a2, 1))
    c1 = g.call_method("copy_", (x, a3))
    c2 = g.call_method("copy_", (x, a3))
    assert [n.name for n in (n1, n2, a1, a2, a3, c1, c2)] == [
        "sum_0", "sum_1", "add", "add_0", "add_1", "copy_", "copy__0"]
    # erasing frees the name: the next 'add' reuses add_0 (seed Example 4.2)
    g.erase_node(c2)
    g.erase_node(c1)
    a3.replace_all_uses_with(a2)
    g.erase_node(a3)
    n = g.call_function(operator.add, (a2, 2))
    assert n.name == "add_1"
    g.lint()


def test_print_format():
    g, (x, w, a, m, s) = build()
    txt = str(g)
    assert txt.splitlines() == [
        "graph(",
        "    %x : [num_users=1] = placeholder[target=x]",
        "    %w : [num_users=1] = placeholder[target=w]",
        "    %add : [num_users=1] = call_function[target=operator.add](args = (%x, %w), kwargs = {})",
        "    %mul : [num_users=1] = call_function[target=operator.mul](args = (%add, 2), kwargs = {})",
        "    %sum_0 : [num_users=1] = call_method[target=sum](args = (%mul, -1), kwargs = {})",
        "    return sum_0",
        ")",
    ]


def test_users_and_args_setter():
    g, (x, w, a, m, s) = build()
    assert list(x.users) == [a]
    m.args = (x, 3)
    assert a not in [] and m in x.users and m not in a.users
    assert m.all_input_nodes == [x]
    m.kwargs = {"k": w}
    assert m in w.users
    g.lint()


def test_erase_with_users_fails():
    g, (x, w, a, m, s) = build()
    with pytest.raises(RuntimeError):
        g.erase_node(a)


def test_insert_points_and_rauw():
    g, (x, w, a, m, s) = build()
    with g.inserting_after(a):
        n1 = g.call_function(operator.neg, (a,))
        n2 = g.call_function(operator.neg, (n1,))
    names = [n.name for n in g.nodes]
    assert names == ["x", "w", "add", "neg", "neg_0", "mul", "sum_0", "output"]
    m.replace_input_with(a, n2)
    g.lint()
    with g.inserting_before(m):
        k = g.call_function(operator.abs, (n2,))
    assert g.nodes.index(k) == g.nodes.index(m) - 1
    users = n2.replace_all_uses_with(k)
    # k itself uses n2; it must not become a self-user
    assert k.args == (n2,)
    assert m.args[0] is k and m in users
    g.lint()
    assert g.nodes[-1].op == "output"


def test_lint_detects_order():
    g = _C.Graph()
    x = g.placeholder("x")
    a = g.call_function(operator.neg, (x,))
    with g.inserting_before(a):
        b = g.call_function(operator.neg, (x,))
    a.args = (b,)
    g.lint()
    b.args = (a,)   # cycle / use before def
    with pytest.raises(RuntimeError, match="topological"):
        g.lint()


def test_codegen_and_call():
    g, _ = build()
    gm = _C.GraphModule(g)
    code = gm.code
    assert "def forward(self, x, w):" in code
    assert "add = x + w" in code and "sum_0 = mul.sum(-1)" in code

    class V:
        def __init__(self, v):
            self.v = v

        def __add__(self, o):
            return V(self.v + o.v)

        def __mul__(self, k):
            return V(self.v * k)

        def sum(self, d):
            return self.v * 10 + d

    assert gm(V(1), V(2)) == 59
    # the graph changes: gm regenerates its forward
    out = g.nodes[-1]
    s = out.args[0]
    with g.inserting_before(out):
        t = g.call_function(operator.neg, (s,))
    out.args = (t,)
    assert gm(V(1), V(2)) == -59
    assert "return neg" in gm.code


def test_codegen_constants_and_get_attr():
    g = _C.Graph()
    x = g.placeholder("x")
    c = g.get_attr("_tensor_constant0")
    f = g.call_function(max, (x, c))
    y = g.call_function(operator.getitem, ((f, float("inf"), slice(None, 2)), 0))
    g.output((y, {"a": f}))
    gm = _C.GraphModule({"_tensor_constant0": 7}, g)
    assert gm(3) == (7, {"a": 7})
    assert gm(9) == (9, {"a": 9})
    assert "self._tensor_constant0" in gm.code


def test_regions():
    g, (x, w, a, m, s) = build()
    a.meta["region"] = 0
    m.meta["region"] = 0
    assert g.regions() == [("add", "pointwise", 0), ("mul", "pointwise", 0),
                           ("sum_0", None, None)]


def test_node_copy_and_find():
    g, (x, w, a, m, s) = build()
    g2 = _C.Graph()
    env = {}
    for n in g.nodes:
        env[n] = g2.node_copy(n, env)
    assert str(g2) == str(g)
    assert g.find_nodes(op="call_method", target="sum") == [s]


def test_gc_no_leak():
    gc.collect()
    before = len(gc.get_objects())
    for _ in range(2000):
        g, _n = build()
        _C.GraphModule(g).code
    gc.collect()
    after = len(gc.get_objects())
    assert after - before < 200
