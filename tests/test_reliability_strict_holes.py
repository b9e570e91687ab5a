"""strict_native holes of issue 13, now native: random draws in bfloat16
(and float16) equal eager's bit for bit, nan_to_num() with its default
posinf/neginf, and bool-mask indexing x[mask] (its size a value gate on the
mask's count, as masked_select)."""
import warnings

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")


def _strict(fn):
    return tp.compile(fn, strict_native=True)


def _bits(t):
    return t.view(tp.int16).numpy() if t.dtype in (tp.bfloat16, tp.float16) else t.numpy()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("kind", ["rand", "randn", "rand_like", "randn_like", "uniform_", "normal_"])
def test_half_like_random_draws_are_native_and_match_eager(kind, dtype):
    dt = getattr(tp, dtype)
    fns = {
        "rand": lambda x: x + tp.rand(257, dtype=dt),
        "randn": lambda x: x + tp.randn(257, dtype=dt),
        "rand_like": lambda x: tp.rand_like(x) * 2,
        "randn_like": lambda x: tp.randn_like(x) + 1,
        "uniform_": lambda x: (x * 1).uniform_(-2.0, 3.0),
        "normal_": lambda x: (x * 1).normal_(0.5, 2.0),
    }
    fn = fns[kind]
    x = tp.zeros(257, dtype=dt)
    cf = _strict(fn)
    for seed in (0, 7):
        tp.manual_seed(seed)
        want = fn(x)
        tp.manual_seed(seed)
        got = cf(x)
        assert got.dtype == want.dtype == dt
        np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_nan_to_num_default_posinf_neginf_is_native(dtype):
    dt = getattr(tp, dtype)
    x = tp.tensor([float("nan"), float("inf"), -float("inf"), 1.5, -2.0]).to(dt)
    for fn in (lambda x: x.nan_to_num(), lambda x: tp.nan_to_num(x, nan=0.25),
               lambda x: tp.nan_to_num(x, posinf=7.0), lambda x: x.nan_to_num(neginf=-7.0)):
        got, want = _strict(fn)(x), fn(x)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(_bits(got), _bits(want))


def test_nan_to_num_default_matches_torch():
    torch = pytest.importorskip("torch")
    a = np.array([np.nan, np.inf, -np.inf, 1.5], dtype=np.float32)
    got = _strict(lambda x: x.nan_to_num())(tp.tensor(a)).numpy()
    np.testing.assert_array_equal(got, torch.tensor(a).nan_to_num().numpy())


MASK_CASES = {
    "1d": (lambda x, m: x[m] * 2, (5,), (5,)),
    "rows": (lambda x, m: x[m] + 1, (4, 3), (4,)),
    "full_2d": (lambda x, m: x[m].sum(), (4, 3), (4, 3)),
    "leading_2d": (lambda x, m: x[m], (2, 3, 2), (2, 3)),
    "read_then_write": (None, (6,), (6,)),
}


def _read_then_write(x, m):
    y = x * 1
    y[m] = y[m] * 2
    return y


@pytest.mark.parametrize("case", sorted(MASK_CASES))
def test_bool_mask_index_is_native(case):
    fn, xs, ms = MASK_CASES[case]
    fn = fn or _read_then_write
    rng = np.random.default_rng(3)
    cf = _strict(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in (0.5, 0.0, 1.0, 0.3):
            x = tp.tensor(rng.standard_normal(xs).astype(np.float32))
            m = tp.tensor(rng.random(ms) < p)
            got, want = cf(x, m), fn(x, m)
            assert tuple(got.shape) == tuple(want.shape)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_bool_mask_of_wrong_shape_raises_eagers_error():
    f = lambda x, m: x[m]  # noqa: E731
    x, m = tp.ones(4, 3), tp.tensor([True, False, True])
    with pytest.raises(IndexError) as e_eager:
        f(x, m)
    with pytest.raises(IndexError) as e_comp:
        tp.compile(f)(x, m)
    assert str(e_comp.value).splitlines()[0] == str(e_eager.value)


def _set_rows(x, m, v):
    x[m] = v
    return x * 1


@pytest.mark.parametrize("vshape", ["rows", "broadcast_row"])
def test_bool_mask_setitem_of_a_tensor_on_an_input_is_native(vshape):
    rng = np.random.default_rng(5)
    cf = _strict(_set_rows)
    for p in (0.5, 1.0, 0.0):
        xa = rng.standard_normal((5, 3)).astype(np.float32)
        ma = rng.random(5) < p
        n = int(ma.sum())
        va = rng.standard_normal((n, 3) if vshape == "rows" else (3,)).astype(np.float64)
        xe, xc = tp.tensor(xa), tp.tensor(xa)
        want = _set_rows(xe, tp.tensor(ma), tp.tensor(va))
        got = cf(xc, tp.tensor(ma), tp.tensor(va))
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        np.testing.assert_array_equal(xc.numpy(), xe.numpy())     # the input written
        assert got.dtype == want.dtype == tp.float32
