"""Compiled outputs alias exactly as eager's (issue 13, torch.compile's rule):
an output shares memory with an input, or with another output, iff eager's
does, and an output eager makes fresh is the caller's own (a write into it
reaches no input, no other output and no later call).

The front-end passes fold identities (x + 0, x * 1, x / 1, dropout off),
merge equal computations (CSE) and fold constants; lowering merges again at
the op level. None of that may show in the outputs: eager's aliasing is read
on the graph as traced (compiler/_aliasing.py, output_aliasing) and the
program's outputs are brought to it (OutputFix)."""
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

# identity-like forms: which of them alias their argument is eager's business
FORMS = {
    "add0": lambda x: x + 0, "add0f": lambda x: x + 0.0, "sub0": lambda x: x - 0,
    "mul1": lambda x: x * 1, "mul1f": lambda x: x * 1.0, "div1": lambda x: x / 1,
    "rmul1": lambda x: 1 * x, "radd0": lambda x: 0 + x, "add_m": lambda x: x.add(0),
    "mul_m": lambda x: x.mul(1), "sub_m": lambda x: x.sub(0), "div_m": lambda x: x.div(1),
    "tp_add": lambda x: tp.add(x, 0), "tp_mul": lambda x: tp.mul(x, 1),
    "add_zeros": lambda x: x + tp.zeros(3), "mul_ones": lambda x: x * tp.ones(3),
    "pow1": lambda x: x ** 1, "pow1_m": lambda x: x.pow(1),
    "to_same": lambda x: x.to(x.dtype), "to_f32": lambda x: x.to(tp.float32),
    "float": lambda x: x.float(), "type_as": lambda x: x.type_as(x),
    "contiguous": lambda x: x.contiguous(), "clone": lambda x: x.clone(),
    "where_true": lambda x: tp.where(tp.ones(3, dtype=tp.bool), x, 0.0),
    "expand_same": lambda x: x.expand(3), "expand_as": lambda x: x.expand_as(x),
    "reshape_same": lambda x: x.reshape(3), "reshape": lambda x: x.reshape(1, 3),
    "view": lambda x: x.view(-1), "flatten": lambda x: x.flatten(), "detach": lambda x: x.detach(),
    "getitem_all": lambda x: x[:], "ellipsis": lambda x: x[...], "negneg": lambda x: -(-x),
    "cat1": lambda x: tp.cat([x]), "stack1": lambda x: tp.stack([x])[0],
    "repeat1": lambda x: x.repeat(1), "dropout_eval": lambda x: F.dropout(x, 0.5, training=False),
    "dropout_p0": lambda x: F.dropout(x, 0.0, training=True),
    "unsqueeze_squeeze": lambda x: x.unsqueeze(0).squeeze(0),
    "add0_unsqueeze": lambda x: (x + 0.0).unsqueeze(0), "mul1_view": lambda x: (x * 1).view(1, 3)[0],
    "add0_float": lambda x: (x + 0).float(), "add0_contiguous": lambda x: (x + 0).contiguous(),
    "relu_relu": lambda x: tp.relu(tp.relu(x)), "masked_fill_none": lambda x: x.masked_fill(
        tp.zeros(3, dtype=tp.bool), 0.0),
}


# how the form is used: on the input, on an intermediate, twice, with the
# input, with a view of itself, after an equal view of the input (the
# fuzzer's repro: CSE merged the output's view with it), ...
def _in(g):
    return g


def _inter(g):
    return lambda x: g(x * 2)


def _twice(g):
    return lambda x: (g(x), g(x))


def _with_input(g):
    return lambda x: (g(x), x)


def _with_view(g):
    return lambda x: (lambda y: (y, y.unsqueeze(0)))(g(x))


def _same(g):
    return lambda x: (lambda y: (y, y))(g(x))


def _views(g):
    return lambda x: (lambda y: (y[1:], y, y.view(-1)[:2], y * 3))(g(x))


def _after_view(g):
    def f(x):
        v = x.unsqueeze(0)
        tp.relu(tp.relu(v))
        return g(x).unsqueeze(0)
    return f


USES = {"in": _in, "inter": _inter, "twice": _twice, "with_input": _with_input,
        "with_view": _with_view, "same": _same, "views": _views, "after_view": _after_view}


def _leaves(o):
    if isinstance(o, (tuple, list)):
        return [t for x in o for t in _leaves(x)]
    return [o] if isinstance(o, tp.Tensor) else []


def _effects(fn, grad=False):
    """per output leaf: (inputs a zero_() through it changes, other outputs
    it changes, inputs it is)"""
    def make():
        x = tp.tensor([1.5, 2.5, 3.5])
        return [x.requires_grad_() if grad else x]
    n = len(_leaves(fn(*make())))
    sig = []
    for i in range(n):
        ins = make()
        outs = _leaves(fn(*ins))
        bi, bo = [t.detach().clone() for t in ins], [t.detach().clone() for t in outs]
        with tp.no_grad():
            outs[i].zero_()
        sig.append((tuple(j for j, t in enumerate(ins) if bool((t != bi[j]).any())),
                    tuple(j for j, t in enumerate(outs) if j != i and bool((t != bo[j]).any())),
                    tuple(j for j, t in enumerate(ins) if outs[i] is t)))
    return sig


def _storages(fn):
    x = tp.tensor([1.5, 2.5, 3.5])
    outs = _leaves(fn(x))
    return [[o._storage is x._storage] + [o._storage is p._storage for p in outs] for o in outs]


@pytest.mark.parametrize("backend", ["stax", "eager"])
@pytest.mark.parametrize("use", list(USES))
@pytest.mark.parametrize("form", list(FORMS))
def test_output_aliasing_follows_eager(form, use, backend):
    f = USES[use](FORMS[form])
    want = _effects(f)
    cf = tp.compile(f, backend=backend)
    assert _effects(cf) == want            # the compiling call
    assert _effects(cf) == want            # a cached call
    assert _storages(cf) == _storages(f)   # memory shared, not just values


@pytest.mark.parametrize("use", ["in", "twice", "with_input", "views", "after_view"])
@pytest.mark.parametrize("form", ["add0f", "mul1", "contiguous", "clone", "dropout_eval", "expand_same"])
def test_output_aliasing_follows_eager_with_grad(form, use):
    """versions with compiled autograd: the aliasing, and the gradients"""
    f = USES[use](FORMS[form])
    cf = tp.compile(f)
    assert _effects(cf, grad=True) == _effects(f, grad=True)

    def grads(fn):
        x = tp.tensor([1.5, 2.5, 3.5], requires_grad=True)
        tot = sum(((o * (k + 1.5)).sum() for k, o in enumerate(_leaves(fn(x))) if o.requires_grad),
                  tp.zeros(()))
        tot.backward()
        return x.grad.tolist()
    assert grads(cf) == grads(f)
    assert grads(cf) == grads(f)


def test_issue_repro_view_of_folded_add_does_not_alias_the_input():
    def f(x0, x1):
        v1 = x1.unsqueeze(0)
        tp.relu(tp.relu(v1))
        return (x1 + 0.0).unsqueeze(0)
    x0, x1 = tp.randn(3), tp.randn(3)
    before = x1.clone()
    y = tp.compile(f)(x0, x1)
    y.zero_()
    assert tp.allclose(x1, before)


@pytest.mark.parametrize("dynamic", [False, True])
def test_equal_outputs_merged_by_the_passes_are_two_tensors(dynamic):
    cf = tp.compile(lambda x: (tp.relu(x), x.relu(), x * 2, x * 2), dynamic=dynamic)
    for n in (3, 3, 5):
        x = tp.randn(4, n).t()
        a, b, c, d = cf(x)
        assert a._storage is not b._storage and c._storage is not d._storage
        a.zero_()
        c.zero_()
        assert tp.allclose(b, x.relu()) and tp.allclose(d, x * 2)


@pytest.mark.parametrize("backend", ["stax", "eager"])
def test_a_tensor_made_inside_is_new_on_every_call(backend):
    """tp.ones(3) inside the function is a constant of the trace; eager
    makes a new one per call, so a write into the returned one must not
    reach the next call"""
    cf = tp.compile(lambda x: (x + 1, tp.ones(3), tp.arange(3.0) * 2), backend=backend)
    x = tp.randn(3)
    for _ in range(3):
        _, a, b = cf(x)
        assert a.tolist() == [1.0, 1.0, 1.0] and b.tolist() == [0.0, 2.0, 4.0]
        a.add_(10)
        b.add_(10)


def test_a_tensor_found_outside_is_returned_as_itself():
    c = tp.arange(3.0)
    cf = tp.compile(lambda x: (x + 1, c))
    for _ in range(2):
        _, got = cf(tp.randn(3))
        assert got is c


def test_a_stored_tensor_made_inside_is_the_returned_one_and_new_per_call():
    log = []

    def f(x):
        v = tp.ones(2)
        log.append(v)
        empty = tp.ones(0, 4)
        log.append(empty)
        return tp.neg(x), v
    cf = tp.compile(f)
    for i in range(3):
        _, v = cf(tp.randn(2))
        assert v is log[-2] and v.tolist() == [1.0, 1.0] and tuple(log[-1].shape) == (0, 4)
        v.add_(1)
    assert len({id(t) for t in log}) == 6


def test_two_outputs_one_view_of_the_other_through_a_view_output():
    """y = (x * 1).view(1, 3)[0]; return y, y.unsqueeze(0): the second is
    regenerated from the first (itself a view of an intermediate)"""
    cf = tp.compile(lambda x: (lambda y: (y, y.unsqueeze(0)))((x * 1).view(1, 3)[0]))
    for _ in range(2):
        a, b = cf(tp.randn(3))
        assert a._storage is b._storage
        a.zero_()
        assert b.abs().sum().item() == 0


def test_the_program_says_which_outputs_share_buffers():
    cf = tp.compile(lambda x: (tp.relu(x), x.relu(), x + 1, tp.ones(2)))
    cf(tp.randn(3))
    art = cf.versions[0].artifact
    slots = getattr(art, "_art", art).output_slots
    kinds = [k for k, _ in slots]
    assert kinds[2] == "temp" and kinds[3] == "const"
    assert slots[0][1] == slots[1][1]      # one buffer returned twice
