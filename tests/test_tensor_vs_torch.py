"""The tensor room's surface run side by side with PyTorch (skipped without torch):
creation results, dtype inference, metadata, and bad input (exception type and message)."""
import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")


def both(f):
    """Run f on both libraries; return (tp_result_or_exc, torch_result_or_exc)."""
    out = []
    for lib in (tp, torch):
        try:
            out.append(f(lib))
        except Exception as e:  # noqa: BLE001
            out.append(e)
    return out


def dtname(d):
    return str(d).split(".")[-1]


CREATION = [
    ("tensor_f", lambda L: L.tensor([1.0, 2, 3])), ("tensor_i", lambda L: L.tensor([[1, 2], [3, 4]])),
    ("tensor_b", lambda L: L.tensor([True, False])), ("tensor_mix", lambda L: L.tensor([True, 2])),
    ("tensor_0d", lambda L: L.tensor(7)), ("tensor_empty", lambda L: L.tensor([])),
    ("tensor_nested_empty", lambda L: L.tensor([[], []])),
    ("tensor_np64", lambda L: L.tensor(np.array([1.5, 2.5]))),
    ("tensor_np_i32", lambda L: L.tensor(np.array([1, 2], np.int32))),
    ("tensor_dtype", lambda L: L.tensor([1.7, -2.7], dtype=L.int64)),
    ("zeros", lambda L: L.zeros(2, 3)), ("zeros_t", lambda L: L.zeros((2, 3), dtype=L.int16)),
    ("zeros_0", lambda L: L.zeros(0)), ("zeros_scalar", lambda L: L.zeros(())),
    ("ones", lambda L: L.ones(3, dtype=L.bool)), ("full_i", lambda L: L.full((2,), 3)),
    ("full_f", lambda L: L.full((2, 2), 1.5)), ("full_b", lambda L: L.full((1,), False)),
    ("arange_i", lambda L: L.arange(7)), ("arange_f", lambda L: L.arange(0.0, 1.0, 0.1)),
    ("arange_neg", lambda L: L.arange(5, -5, -2)), ("arange_mixed", lambda L: L.arange(1, 4, 0.5)),
    ("arange_dt", lambda L: L.arange(5, dtype=L.float64)),
    ("linspace", lambda L: L.linspace(-1, 1, 7)), ("linspace1", lambda L: L.linspace(2, 3, 1)),
    ("linspace0", lambda L: L.linspace(2, 3, 0)), ("linspace_d", lambda L: L.linspace(0, 10, 11, dtype=L.float64)),
    ("eye", lambda L: L.eye(3)), ("eye_nm", lambda L: L.eye(2, 4, dtype=L.int32)),
    ("zeros_like", lambda L: L.zeros_like(L.ones(2, 3, dtype=L.int8))),
    ("ones_like_dt", lambda L: L.ones_like(L.ones(2), dtype=L.float64)),
    ("full_like", lambda L: L.full_like(L.ones(2, dtype=L.int32), 2.7)),
]


@pytest.mark.parametrize("name,f", CREATION, ids=[c[0] for c in CREATION])
def test_creation_matches_torch(name, f):
    a, b = both(f)
    assert not isinstance(a, Exception), a
    assert dtname(a.dtype) == dtname(b.dtype)
    assert tuple(a.shape) == tuple(b.shape)
    assert a.stride() == b.stride()
    np.testing.assert_allclose(a.numpy().astype(np.float64), b.numpy().astype(np.float64), rtol=1e-6)
    ra = repr(a).replace("tensorplay.", "torch.")
    assert " ".join(ra.split()) == " ".join(repr(b).split())


ERRORS = [
    ("view_dim", lambda L: L.zeros(2, 3).transpose(0, 5)),
    ("size_dim", lambda L: L.zeros(2, 3).size(-3)),
    ("unsqueeze", lambda L: L.zeros(2).unsqueeze(2)),
    ("bool_many", lambda L: bool(L.zeros(2))),
    ("bool_none", lambda L: bool(L.zeros(0))),
    ("item_many", lambda L: L.zeros(2).item()),
    ("len0d", lambda L: len(L.tensor(1.0))),
    ("iter0d", lambda L: iter(L.tensor(1.0))),
    ("int_many", lambda L: int(L.zeros(2))),
    ("index_float", lambda L: [1, 2][L.tensor(1.0)]),
    ("t3d", lambda L: L.zeros(2, 2, 2).t()),
    ("view_bad", lambda L: L.zeros(2, 3).t().view(6)),
    ("view_size", lambda L: L.zeros(2, 3).view(4, -1)),
    ("view_2infer", lambda L: L.zeros(2, 3).view(-1, -1)),
    ("expand_bad", lambda L: L.zeros(2, 3).expand(3, 3)),
    ("permute_dup", lambda L: L.zeros(2, 3).permute(0, 0)),
    ("oob", lambda L: L.zeros(2, 3)[2]),
    ("too_many", lambda L: L.zeros(2)[0, 0]),
    ("neg_step", lambda L: L.zeros(4)[::-1]),
    ("float_idx", lambda L: L.zeros(4)[1.0]),
    ("narrow_len", lambda L: L.zeros(4).narrow(0, 3, 2)),
    ("select_0d", lambda L: L.tensor(1.0).select(0, 0)),
    ("split_sum", lambda L: L.zeros(4).split([1, 2])),
    ("chunk0", lambda L: L.zeros(4).chunk(0)),
    ("neg_dim", lambda L: L.zeros(-1)),
    ("float_size", lambda L: L.zeros(2.5)),
    ("req_grad_int", lambda L: L.zeros(2, dtype=L.int64).requires_grad_()),
    ("numpy_grad", lambda L: L.zeros(2, requires_grad=True).numpy()),
    ("from_numpy_neg", lambda L: L.from_numpy(np.arange(3)[::-1])),
    ("from_numpy_list", lambda L: L.from_numpy([1, 2])),
    ("arange_step0", lambda L: L.arange(0, 5, 0)),
    ("arange_sign", lambda L: L.arange(0, 5, -1)),
    ("rand_int", lambda L: L.rand(2, dtype=L.int64)),
    ("randint_eq", lambda L: L.randint(3, 3, (2,))),
    ("normal_std", lambda L: L.empty(2).normal_(0, -1)),
    ("diag_same", lambda L: L.zeros(2, 2).diagonal(0, 1, 1)),
    ("setitem_shape", lambda L: L.zeros(2, 3).__setitem__(slice(None), L.zeros(4))),
    ("copy_shape", lambda L: L.zeros(2, 3).copy_(L.zeros(2))),
    ("mT_1d", lambda L: L.zeros(3).mT),
]


@pytest.mark.parametrize("name,f", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_match_torch(name, f):
    a, b = both(f)
    assert isinstance(b, Exception), f"torch accepted {name}"
    assert isinstance(a, Exception), f"tensorplay accepted {name}: {a!r}"
    assert isinstance(a, type(b)) or type(a) is type(b), (name, a, b)


EXACT_MESSAGES = ["view_dim", "size_dim", "bool_many", "bool_none", "item_many", "len0d",
                  "iter0d", "t3d", "view_bad", "view_size", "expand_bad", "oob", "too_many",
                  "neg_step", "narrow_len", "select_0d", "chunk0", "req_grad_int", "numpy_grad",
                  "from_numpy_neg", "arange_step0", "diag_same", "setitem_shape", "mT_1d"]


@pytest.mark.parametrize("name", EXACT_MESSAGES)
def test_error_messages_match_torch(name):
    f = dict(ERRORS)[name]
    a, b = both(f)
    ma = str(a).replace("tensorplay.", "torch.")
    mb = str(b).split("\n")[0]
    assert ma.strip().lower() == mb.strip().lower(), (ma, mb)


def test_views_of_every_dtype_match_torch():
    for dt in ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
               "bfloat16"]:
        a = np.arange(24).reshape(2, 3, 4) % 3
        x = tp.tensor(a, dtype=getattr(tp, dt))
        y = torch.tensor(a, dtype=getattr(torch, dt))
        for f in (lambda t: t.transpose(0, 2)[1:, ::2], lambda t: t[:, None, 1].expand(2, 3, 4),
                  lambda t: t.reshape(6, 4).t()[::3], lambda t: t.diagonal(0, 1, 2)):
            u, v = f(x), f(y)
            assert u.stride() == v.stride() and u.tolist() == v.tolist()
