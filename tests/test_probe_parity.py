"""Divergences from PyTorch found by probing tensorplay as a torch user
would (eager, tp.compile, tp.compile(strict_native=True)); each test is the
minimal repro of one finding, compared with torch where it is installed."""
import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")


def _modes(fn):
    """fn eagerly, compiled, and compiled with strict_native."""
    return [("eager", fn), ("compile", tp.compile(fn)),
            ("strict", tp.compile(fn, strict_native=True))]


# ---------------------------------------------------------------- autograd

PROD_CASES = [
    ("one zero", lambda t: t.prod(), [2.0, 0.0, 3.0]),
    ("two zeros", lambda t: t.prod(), [0.0, 0.0, 3.0]),
    ("dim", lambda t: (t.prod(1) * 2 + t.prod(1)[0]).sum(),
     [[2.0, 0.0, 3.0], [0.0, 0.0, 1.0], [1.0, 2.0, 3.0]]),
    ("keepdim", lambda t: t.prod(0, keepdim=True).sum(),
     [[2.0, 0.0, 3.0], [0.0, 0.0, 1.0], [1.0, 2.0, 3.0]]),
]


def _grad_like_torch(fn, x, **tol):
    """x's gradient of fn(x).backward(), eager and compiled (_modes), equals torch's."""
    x = np.array(x, np.float32)
    t = torch.tensor(x, requires_grad=True)
    fn(t).backward()
    for mode, f in _modes(fn):
        p = tp.tensor(x, requires_grad=True)
        f(p).backward()
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), err_msg=mode, **tol)


@pytest.mark.parametrize("name,fn,x", PROD_CASES, ids=[c[0] for c in PROD_CASES])
def test_prod_backward_with_zeros_is_finite_like_torch(name, fn, x):
    # was grad * prod / x: 0/0 = NaN at a zero
    _grad_like_torch(fn, x, rtol=1e-6)


@pytest.mark.parametrize("x", [[2.0, 0.0, 3.0], [0.0, 0.0, 3.0], [2.0, 5.0, 3.0]])
def test_prod_double_backward_with_zeros(x):
    w = [1.0, 2.0, 3.0]
    t = torch.tensor(x, requires_grad=True)
    g, = torch.autograd.grad(t.prod(), t, create_graph=True)
    want, = torch.autograd.grad((g * torch.tensor(w)).sum(), t)
    for mode, f in _modes(lambda a: a.prod())[:2]:
        p = tp.tensor(x, requires_grad=True)
        g, = tp.autograd.grad(f(p), p, create_graph=True)
        got, = tp.autograd.grad((g * tp.tensor(w)).sum(), p)
        np.testing.assert_allclose(got.numpy(), want.numpy(), err_msg=mode)


STD_CASES = [
    ("all", lambda t: t.std(), [1.0, 1.0, 1.0]),
    ("dim", lambda t: t.std(1).sum(), [[1.0, 1.0], [1.0, 2.0]]),
]


@pytest.mark.parametrize("name,fn,x", STD_CASES, ids=[c[0] for c in STD_CASES])
def test_std_backward_of_constant_slice_is_zero_like_torch(name, fn, x):
    # was var's gradient / (2 * std) = 0/0 = NaN where std is 0
    _grad_like_torch(fn, x, atol=1e-6)


def test_std_mean_backward_of_constant_slice():
    x = np.array([[1.0, 1.0], [1.0, 2.0]], np.float32)
    t = torch.tensor(x, requires_grad=True)
    s, m = torch.std_mean(t, 1)
    (s.sum() + m.sum()).backward()
    p = tp.tensor(x, requires_grad=True)
    s, m = tp.std_mean(p, 1)
    (s.sum() + m.sum()).backward()
    np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), atol=1e-6)


# ---------------------------------------------------------------- cumsum

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("shape,dim", [((3, 4), 1), ((3, 4), 0), ((2, 300), 1),
                                       ((700, 2), 0), ((5,), 0), ((2, 3, 5), -2)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_compiled_cumsum_keeps_nan_and_inf_in_place(shape, dim, dtype):
    # the compiled cumsum was a matmul with a triangle of ones: 0 * inf gave
    # NaN at every position before a NaN/inf and in the other rows' sums
    rng = np.random.default_rng(len(shape) * 1000 + dim)
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    pos = rng.choice(flat.size, min(3, flat.size), replace=False)
    for p, v in zip(pos, [NAN, INF, -INF]):
        flat[p] = v
    want = torch.tensor(x).to(getattr(torch, dtype)).cumsum(dim).float().numpy()
    for mode, f in _modes(lambda t: t.to(getattr(tp, dtype)).cumsum(dim)):
        got = f(tp.tensor(x)).float().numpy()
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3, equal_nan=True, err_msg=mode)


def test_compiled_cumsum_of_opposite_infinities_is_nan():
    x = np.array([1.0, INF, 2.0, -INF, 3.0, INF], np.float32)
    want = torch.tensor(x).cumsum(0).numpy()
    for mode, f in _modes(lambda t: t.cumsum(0)):
        np.testing.assert_array_equal(f(tp.tensor(x)).numpy(), want, err_msg=mode)


def test_compiled_cumsum_gradient_reaches_non_finite_elements():
    x = np.array([1.0, INF, 2.0, NAN, 3.0], np.float32)
    t = torch.tensor(x, requires_grad=True)
    (t.cumsum(0) * torch.arange(5.0)).sum().backward()
    for mode, f in _modes(lambda a: (a.cumsum(0) * tp.arange(5.0)).sum()):
        p = tp.tensor(x, requires_grad=True)
        f(p).backward()
        np.testing.assert_array_equal(p.grad.numpy(), t.grad.numpy(), err_msg=mode)


# ---------------------------------------------------------------- exception types

def _same_exception(fn_tp, fn_torch):
    with pytest.raises(Exception) as want:
        fn_torch()
    with pytest.raises(Exception) as got:
        fn_tp()
    assert type(got.value) is type(want.value), (got.value, want.value)
    return got.value, want.value


@pytest.mark.parametrize("op", ["and", "or", "xor", "bitwise_not"])
def test_bitwise_on_float_raises_not_implemented_error(op):
    fns = {"and": lambda L, x: x & x, "or": lambda L, x: x | x, "xor": lambda L, x: x ^ 1,
           "bitwise_not": lambda L, x: L.bitwise_not(x)}
    f = fns[op]
    got, want = _same_exception(lambda: f(tp, tp.ones(2)), lambda: f(torch, torch.ones(2)))
    assert str(got) == str(want)


@pytest.mark.parametrize("name", ["gelu", "silu", "elu", "softplus", "leaky_relu"])
def test_float_activation_of_integers_raises_not_implemented_error(name):
    import tensorplay.nn.functional as F
    _same_exception(lambda: getattr(F, name)(tp.ones(2, dtype=tp.int64)),
                    lambda: getattr(torch.nn.functional, name)(torch.ones(2, dtype=torch.int64)))


def test_frac_and_lerp_of_integers_raise_not_implemented_error():
    _same_exception(lambda: tp.ones(2, dtype=tp.int64).frac(),
                    lambda: torch.ones(2, dtype=torch.int64).frac())
    _same_exception(lambda: tp.lerp(tp.ones(2, dtype=tp.int64), tp.ones(2, dtype=tp.int64), 0.5),
                    lambda: torch.lerp(torch.ones(2, dtype=torch.int64),
                                       torch.ones(2, dtype=torch.int64), 0.5))


def test_cat_and_stack_of_empty_list_errors():
    _same_exception(lambda: tp.cat([]), lambda: torch.cat([]))
    got, want = _same_exception(lambda: tp.stack([]), lambda: torch.stack([]))
    assert str(got) == str(want)


def test_full_with_a_string_fill_value_is_a_type_error():
    got, want = _same_exception(lambda: tp.full((2,), "a"), lambda: torch.full((2,), "a"))
    assert "fill_value" in str(got)


@pytest.mark.parametrize("bshape", [(5,), (2, 4), (3, 6, 4)])
def test_linear_with_a_bias_that_does_not_expand_to_the_output(bshape):
    import tensorplay.nn.functional as F
    got, want = _same_exception(
        lambda: F.linear(tp.ones(6, 5), tp.ones(4, 5), tp.ones(*bshape)),
        lambda: torch.nn.functional.linear(torch.ones(6, 5), torch.ones(4, 5),
                                           torch.ones(*bshape)))
    assert str(got).split("(")[0] == str(want).split("(")[0]


@pytest.mark.parametrize("bshape", [(4,), (1,), (6, 4), (1, 4)])
def test_linear_with_a_bias_that_expands(bshape):
    import tensorplay.nn.functional as F
    r = F.linear(tp.ones(6, 5), tp.ones(4, 5), tp.ones(*bshape))
    assert tuple(r.shape) == (6, 4)
    np.testing.assert_array_equal(r.numpy(), np.full((6, 4), 6.0, np.float32))


def test_embedding_of_a_1d_weight():
    import tensorplay.nn.functional as F
    got, want = _same_exception(lambda: F.embedding(tp.tensor([1]), tp.ones(3)),
                                lambda: torch.nn.functional.embedding(torch.tensor([1]),
                                                                      torch.ones(3)))
    assert str(got) == str(want)


# ---------------------------------------------------------------- strict_native

NEW_FACTORIES = [
    ("new_tensor", lambda t: t * t.new_tensor([1.0, 2.0, 3.0])),
    ("new_tensor of a tensor", lambda t: t * t.new_tensor(t * 2)),
    ("new_zeros", lambda t: t + t.new_zeros(3)),
    ("new_ones shape", lambda t: t * t.new_ones(t.shape)),
    ("new_full", lambda t: t + t.new_full((3,), 2.0)),
    ("new_empty", lambda t: t.new_empty(3).fill_(1) + t),
    ("new_zeros dtype", lambda t: t.new_zeros((3,), dtype=tp.int64) + t),
]


@pytest.mark.parametrize("name,fn", NEW_FACTORIES, ids=[c[0] for c in NEW_FACTORIES])
def test_new_factories_compile_natively(name, fn):
    # x.new_zeros(...) and friends were opaque method nodes: strict_native
    # refused them and the joint graph could not differentiate through them
    x = tp.tensor([1.0, 2.0, 3.0])
    want = fn(x)
    got = tp.compile(fn, strict_native=True)(x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_new_tensor_in_a_compiled_backward():
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    f = tp.compile(lambda t: (t * t.new_tensor([1.0, 2.0, 3.0])).sum(), strict_native=True)
    f(x).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 2.0, 3.0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("dim", [0, 1])
def test_compiled_index_add_keeps_nan_and_inf_in_their_rows(dtype, dim):
    # the float index_add was a matmul with the 0/1 hit matrix: 0 * inf
    # made every row NaN
    x = np.zeros((4, 3), np.float32)
    src = np.array([[1, 2, 3], [INF, 5, 6], [-INF, NAN, 1]], np.float32)
    idx = np.array([0, 2, 0])
    if dim == 1:
        x, src = x.T.copy(), src.T.copy()

    def f(a, s, i):
        return a.index_add(dim, i, s, alpha=2)
    dt = getattr(torch, dtype)
    want = f(torch.tensor(x, dtype=dt), torch.tensor(src, dtype=dt), torch.tensor(idx))
    for mode, g in _modes(f):
        got = g(tp.tensor(x).to(getattr(tp, dtype)), tp.tensor(src).to(getattr(tp, dtype)),
                tp.tensor(idx))
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=mode)


MESSAGES = [
    ("arange", lambda L: L.arange(0, 5, -1)),
    ("index_select dtype", lambda L: L.ones(3).index_select(0, L.tensor([1.0]))),
    ("ce float target of another shape",
     lambda L: L.nn.functional.cross_entropy(L.ones(2, 3), L.ones(2))),
    ("ce int target of the input's shape",
     lambda L: L.nn.functional.cross_entropy(L.ones(2, 3), L.ones(2, 3, dtype=L.int64))),
    ("nll batch", lambda L: L.nn.functional.nll_loss(L.ones(2, 3), L.ones(3, dtype=L.int64))),
    ("nll 1d input", lambda L: L.nn.functional.nll_loss(L.ones(3), L.ones(2, dtype=L.int64))),
    ("nll 1d input 2d target",
     lambda L: L.nn.functional.nll_loss(L.ones(3), L.ones(1, 2, dtype=L.int64))),
    ("ce multi-target",
     lambda L: L.nn.functional.cross_entropy(L.ones(2, 3), L.ones(2, 3, 1, dtype=L.int64))),
    ("batch_norm running_mean", lambda L: L.nn.BatchNorm1d(3)(L.ones(2, 4))),
    ("batch_norm running_var", lambda L: L.nn.functional.batch_norm(
        L.ones(2, 4), L.zeros(4), L.ones(3))),
    ("batch_norm weight", lambda L: L.nn.functional.batch_norm(
        L.ones(2, 4), None, None, training=True, weight=L.ones(5))),
]


@pytest.mark.parametrize("name,fn", MESSAGES, ids=[m[0] for m in MESSAGES])
def test_error_type_and_message_like_torch(name, fn):
    # each was NumPy's ValueError/broadcast error, or another wording/type
    got, want = _same_exception(lambda: fn(tp), lambda: fn(torch))
    assert str(got) == str(want)


def test_einsum_with_operands_as_varargs_when_they_require_grad():
    # the autograd path bound einsum(eq, a, b) by the schema (str, Tensor[])
    # and raised "einsum() takes 2 positional arguments but 3 were given"
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = a[::-1].copy()
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    want = torch.einsum("ij,ij->i", ta, tb * 2)
    (want * torch.tensor([1.0, 3.0])).sum().backward()
    for mode, f in _modes(lambda x, y: tp.einsum("ij,ij->i", x, y * 2))[:2]:
        pa, pb = tp.tensor(a, requires_grad=True), tp.tensor(b, requires_grad=True)
        got = f(pa, pb)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), err_msg=mode)
        (got * tp.tensor([1.0, 3.0])).sum().backward()
        np.testing.assert_allclose(pa.grad.numpy(), ta.grad.numpy(), err_msg=mode)
        np.testing.assert_allclose(pb.grad.numpy(), tb.grad.numpy(), err_msg=mode)


# ---------------------------------------------------------------- compiled backward

BACKWARDS = [
    # _pick took a proxy's replayed index for a tuple of outputs
    ("gather of argsort", lambda L, a: (a.gather(1, a.argsort(1)) * 2).sum()),
    ("gather of argmax", lambda L, a: (a.gather(1, a.argmax(1, keepdim=True)) * 2).sum()),
    # _log(proxy) went to math.log
    ("pow tensor exponent", lambda L, a: (a.abs() ** (a * 0.5)).sum()),
    # x[[...]] was taken for a multi-output op's tuple element
    ("list index", lambda L, a: (a[[0, 1, 1]] * L.arange(4.0)).sum()),
    ("list index dim 1", lambda L, a: (a[:, [2, 0, 2]] * L.arange(3.0)).sum()),
    ("tensor index", lambda L, a: (a[L.tensor([1, 0])][:, 1] * 3).sum()),
]


@pytest.mark.parametrize("name,fn", BACKWARDS, ids=[b[0] for b in BACKWARDS])
def test_backward_is_compiled(name, fn):
    # each fell back to recomputing the function eagerly (a RuntimeWarning)
    import warnings
    a = np.array([[1.0, -2.0, 3.0, 0.5], [4.0, 5.0, -6.0, 2.0], [0.3, 0.2, 0.1, 0.7]],
                 np.float32)
    t = torch.tensor(a, requires_grad=True)
    fn(torch, t).backward()
    p = tp.compile(lambda x: fn(tp, x), strict_native="argsort" not in name)
    x = tp.tensor(a, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        p(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)
