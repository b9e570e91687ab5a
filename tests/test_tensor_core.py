"""Core Tensor: dtypes, promotion, creation, metadata, no-copy NumPy interop."""
import numpy as np
import pytest

import tensorplay as tp

try:
    import torch
except Exception:  # pragma: no cover
    torch = None

DTYPES = [tp.bool, tp.uint8, tp.int8, tp.int16, tp.int32, tp.int64,
          tp.float16, tp.float32, tp.float64]


def test_dtype_objects():
    assert repr(tp.float32) == "tensorplay.float32"
    assert tp.float is tp.float32 and tp.double is tp.float64
    assert tp.half is tp.float16 and tp.long is tp.int64
    assert tp.int is tp.int32 and tp.short is tp.int16
    assert tp.float32.is_floating_point and not tp.int64.is_floating_point
    assert [d.itemsize for d in DTYPES] == [1, 1, 1, 2, 4, 8, 2, 4, 8]
    assert tp.get_default_dtype() is tp.float32


@pytest.mark.parametrize("a,b,r", [
    (tp.uint8, tp.int8, tp.int16), (tp.bool, tp.int32, tp.int32),
    (tp.int64, tp.float16, tp.float16), (tp.float16, tp.float32, tp.float32),
    (tp.uint8, tp.int64, tp.int64), (tp.int8, tp.int16, tp.int16)])
def test_promote_types(a, b, r):
    assert tp.promote_types(a, b) is r
    assert tp.promote_types(b, a) is r


def test_promote_types_all_pairs_vs_torch():
    if torch is None:
        pytest.skip("torch not installed")
    for a in DTYPES:
        for b in DTYPES:
            ta, tb = getattr(torch, str(a)[11:]), getattr(torch, str(b)[11:])
            assert str(tp.promote_types(a, b))[11:] == str(torch.promote_types(ta, tb))[6:]


def test_result_type():
    assert tp.result_type(tp.tensor([1, 2]), 2.5) is tp.float32
    assert tp.result_type(tp.tensor([1.0]), tp.tensor(1.0, dtype=tp.float64)) is tp.float32
    assert tp.result_type(tp.tensor([True]), 3) is tp.int64
    assert tp.result_type(tp.tensor([1], dtype=tp.uint8), tp.tensor([1], dtype=tp.int8)) is tp.int16
    assert tp.result_type(tp.tensor([1], dtype=tp.int32), 5) is tp.int32
    assert tp.result_type(tp.tensor(1, dtype=tp.int32), tp.tensor([1], dtype=tp.int8)) is tp.int8
    assert tp.result_type(tp.tensor(1.0, dtype=tp.float64), tp.tensor([1], dtype=tp.int8)) is tp.float64
    assert tp.result_type(2, 2.0) is tp.float32
    assert tp.result_type(tp.tensor([1], dtype=tp.float16), 1.0) is tp.float16


def test_tensor_inference():
    assert tp.tensor([1.0, 2]).dtype is tp.float32
    assert tp.tensor([1, 2]).dtype is tp.int64
    assert tp.tensor([True, False]).dtype is tp.bool
    assert tp.tensor(np.zeros(2, np.float64)).dtype is tp.float64
    assert tp.tensor([[1, 2], [3, 4]]).shape == (2, 2)
    assert tp.tensor(3.5).shape == () and tp.tensor(3.5).dim() == 0


def test_size_and_device():
    x = tp.zeros(2, 3)
    assert isinstance(x.shape, tp.Size) and isinstance(x.shape, tuple)
    assert repr(x.shape) == "tensorplay.Size([2, 3])"
    assert x.size() == (2, 3) and x.size(1) == 3 and x.size(-1) == 3
    assert x.shape.numel() == 6
    assert repr(x.device) == "device(type='cpu')" and x.device == "cpu"
    assert x.stride() == (3, 1) and x.stride(0) == 3


@pytest.mark.parametrize("dt", DTYPES)
def test_numpy_roundtrip_no_copy(dt):
    x = tp.zeros(3, 4, dtype=dt)
    a = x.numpy()
    assert np.shares_memory(a, x.numpy())
    a[1, 2] = 1
    assert x.tolist()[1][2] == 1
    y = tp.from_numpy(a)
    assert y.dtype is dt and np.shares_memory(y.numpy(), a)


def test_from_numpy_errors():
    with pytest.raises(ValueError, match="negative"):
        tp.from_numpy(np.arange(5)[::-1])
    with pytest.raises(TypeError, match="can't convert np.ndarray of type numpy.complex128"):
        tp.from_numpy(np.zeros(2, np.complex128))
    with pytest.raises(TypeError):
        tp.from_numpy([1, 2])


def test_version_counter_shared_by_views():
    x = tp.zeros(4)
    v = x.view(2, 2)
    assert x._version == 0
    v.fill_(1.0)
    assert x._version == 1 and v._version == 1
    x.zero_()
    assert v._version == 2
    x.copy_(tp.ones(4))
    assert v._version == 3 and v.tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_scalar_conversions():
    assert bool(tp.tensor([1])) and float(tp.tensor(2.5)) == 2.5 and int(tp.tensor(3.7)) == 3
    assert [10, 20, 30][tp.tensor(1)] == 20
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value is ambiguous"):
        bool(tp.tensor([1, 2]))
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(tp.tensor(1.0))
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        iter(tp.tensor(1.0))
    with pytest.raises(RuntimeError, match="a Tensor with 2 elements cannot be converted to Scalar"):
        tp.tensor([1, 2]).item()
    assert [r.tolist() for r in tp.tensor([[1, 2], [3, 4]])] == [[1, 2], [3, 4]]
    assert len(tp.zeros(5, 2)) == 5


def test_hash_identity():
    a, b = tp.zeros(1), tp.zeros(1)
    assert len({a, b}) == 2 and hash(a) == id(a) // 16 or hash(a) != hash(b)


def test_conversions():
    x = tp.tensor([1.7, -2.2])
    assert x.long().tolist() == [1, -2]
    assert x.to(tp.float64).dtype is tp.float64
    assert x.to("cpu") is x and x.to(tp.float32) is x
    assert x.bool().tolist() == [True, True]
    assert x.half().dtype is tp.float16 and x.double().dtype is tp.float64
    c = x.clone()
    assert not np.shares_memory(c.numpy(), x.numpy())


def test_requires_grad():
    x = tp.ones(2)
    assert not x.requires_grad and x.is_leaf
    x.requires_grad_()
    assert x.requires_grad
    with pytest.raises(RuntimeError, match="only Tensors of floating point"):
        tp.ones(2, dtype=tp.int64).requires_grad_()
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad"):
        x.numpy()
    assert not x.detach().requires_grad
    assert repr(x) == "tensor([1., 1.], requires_grad=True)"


def test_grad_mode():
    assert tp.is_grad_enabled()
    with tp.no_grad():
        assert not tp.is_grad_enabled()
        with tp.enable_grad():
            assert tp.is_grad_enabled()
        assert not tp.is_grad_enabled()
    assert tp.is_grad_enabled()
    tp.set_grad_enabled(False)
    assert not tp.is_grad_enabled()
    tp.set_grad_enabled(True)
    with tp.set_grad_enabled(False):
        assert not tp.is_grad_enabled()
    assert tp.is_grad_enabled()
    with tp.inference_mode():
        assert not tp.is_grad_enabled()
    assert tp.is_grad_enabled()

    @tp.no_grad()
    def f():
        return tp.is_grad_enabled()
    assert f() is False and tp.is_grad_enabled()


def test_repr_like_torch():
    assert repr(tp.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    assert repr(tp.tensor([1.5, 2.0])) == "tensor([1.5000, 2.0000])"
    assert repr(tp.tensor([1, 2])) == "tensor([1, 2])"
    assert repr(tp.tensor([1, 2], dtype=tp.int32)) == "tensor([1, 2], dtype=tensorplay.int32)"
    assert repr(tp.tensor(2.5)) == "tensor(2.5000)"
    assert repr(tp.zeros(0, 3)) == "tensor([], size=(0, 3))"
    assert repr(tp.tensor([1e-5, 1.0])) == "tensor([1.0000e-05, 1.0000e+00])"


def test_repr_vs_torch_many():
    if torch is None:
        pytest.skip("torch not installed")
    rng = np.random.default_rng(0)
    cases = [rng.standard_normal((3, 4)).astype(np.float32), np.arange(2000, dtype=np.float32),
             rng.integers(-5, 5, (2, 3, 4)), np.array([np.nan, np.inf, 1.0], np.float32),
             np.array(True), rng.standard_normal((40, 40)) * 1e6, np.zeros((2, 0, 3), np.float32),
             np.array([1, 2], np.uint8), np.ones(3, np.float16)]
    for a in cases:
        import re
        r = re.sub(r",\s+dtype=", ", dtype=", repr(tp.tensor(a)).replace("tensorplay.", "torch."))
        assert r == re.sub(r",\s+dtype=", ", dtype=", repr(torch.tensor(a))), a


def test_creation():
    assert tp.zeros((2, 3)).shape == (2, 3) and tp.zeros(tp.Size([2])).shape == (2,)
    assert tp.ones(2, dtype=tp.int32).tolist() == [1, 1]
    assert tp.full((2,), 7).dtype is tp.int64 and tp.full((2,), 7.0).dtype is tp.float32
    assert tp.full((2,), True).dtype is tp.bool
    assert tp.arange(5).dtype is tp.int64 and tp.arange(0, 1, 0.25).tolist() == [0, 0.25, 0.5, 0.75]
    assert tp.arange(5.0).dtype is tp.float32
    assert tp.linspace(0, 1, 5).tolist() == [0, 0.25, 0.5, 0.75, 1.0]
    assert tp.eye(2, 3).tolist() == [[1, 0, 0], [0, 1, 0]]
    x = tp.zeros(2, 3, dtype=tp.float64)
    assert tp.ones_like(x).dtype is tp.float64 and tp.full_like(x, 2).tolist()[0] == [2, 2, 2]
    assert tp.zeros_like(x, dtype=tp.int8).dtype is tp.int8 and tp.empty_like(x).shape == (2, 3)
    assert tp.rand_like(x).dtype is tp.float64 and tp.randn_like(x).shape == (2, 3)
    a = np.arange(3)
    t = tp.tensor(a)
    a[0] = 5
    assert t.tolist() == [0, 1, 2]
    assert np.shares_memory(tp.as_tensor(a).numpy(), a)
    with pytest.raises(RuntimeError, match="negative dimension"):
        tp.zeros(-1)
    with pytest.raises(TypeError):
        tp.zeros(2.5)


class P(tp.Tensor):
    def __new__(cls, data, requires_grad=True):
        return tp.Tensor._make_subclass(cls, data, requires_grad)


def test_subclass_dict_weakref_pickle_deepcopy():
    import copy
    import gc
    import pickle
    import weakref

    p = P(tp.ones(2, 3))
    assert type(p) is P and p.requires_grad and p.is_leaf and p.shape == (2, 3)
    p.name = "w"
    assert p.__dict__ == {"name": "w"}
    q = pickle.loads(pickle.dumps(p))
    assert type(q) is P and q.requires_grad and q.name == "w"
    r = copy.deepcopy(p)
    assert type(r) is P and r.name == "w" and not np.shares_memory(r.detach().numpy(),
                                                                    p.detach().numpy())
    w = weakref.ref(p)
    del p, q, r
    gc.collect()
    assert w() is None
    x = tp.ones(3)
    x.me = x            # a reference cycle through the instance dict
    wx = weakref.ref(x)
    del x
    gc.collect()
    assert wx() is None
    for o in (tp.float16, tp.Size([2, 3]), tp.device("cpu")):
        assert pickle.loads(pickle.dumps(o)) == o


def test_number_slot_wrappers_exist():
    x = tp.ones(2)
    assert tp.Tensor.__add__(x, x).tolist() == [2.0, 2.0]
    assert tp.Tensor.__radd__(x, 1).tolist() == [2.0, 2.0]
    assert x.__eq__(x).tolist() == [True, True]


def test_huge_sizes_raise():
    with pytest.raises(RuntimeError, match="overflow"):
        tp.empty(1 << 40, 1 << 40)


class _Overrider:
    @classmethod
    def __tensor_function__(cls, func, types, args, kwargs=None):
        return ("override", getattr(func, "__name__", str(func)), types, len(args))


def test_tensor_function_on_room_methods_and_items():
    x = tp.zeros(3)
    q = _Overrider()
    assert x[q][:2] == ("override", "getitem")
    assert x[[0, q]][:2] == ("override", "getitem")
    assert x.copy_(q)[1] == "copy_" and x.expand_as(q)[1] == "expand_as"
    assert x.view(q)[1] == "view" and x.fill_(q)[1] == "fill_" and x.reshape((q, 1))[1] == "reshape"
    r = x.to(q)
    assert r[1] == "to" and r[2] == (_Overrider,) and r[3] == 2
    x[q] = 1.0                       # handled by the override: no write
    assert x.tolist() == [0.0, 0.0, 0.0] and x._version == 0
    assert tp.zeros_like(q)[0] == "override"


def test_half_conversion_matches_numpy():
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.standard_normal(3000) * 10.0 ** rng.integers(-9, 6, 3000),
                         [0.0, -0.0, 65504.0, 65519.99, 65520.0, 2.98e-8, 2.99e-8, 6.1e-5,
                          np.inf, -np.inf, 1.00048828125, 1.000732421875]])
    got = np.array([tp.tensor(float(x), dtype=tp.half).item() for x in xs])
    exp = xs.astype(np.float16).astype(np.float64)
    assert np.array_equal(got, exp) and np.array_equal(np.signbit(got), np.signbit(exp))
    assert np.isnan(tp.tensor(float("nan"), dtype=tp.half).item())


def test_numpy_ufuncs_return_tensors():
    assert repr(np.sqrt(tp.tensor(4.0))) == "tensor(2.)"
    r = np.exp(tp.tensor([0.0, 1.0]))
    assert isinstance(r, tp.Tensor) and r.dtype is tp.float32
    assert isinstance(np.add(np.ones(2), tp.tensor([1.0, 2.0])), tp.Tensor)


def test_no_grad_decorator_without_parentheses_and_views_requires_grad():
    @tp.no_grad
    def f():
        return tp.is_grad_enabled()
    assert f() is False and tp.is_grad_enabled()
    w = tp.ones(3, requires_grad=True)
    v = w[1:]
    assert v.requires_grad and not v.is_leaf
    with tp.no_grad():
        u = w[1:]
    assert not u.requires_grad and u.is_leaf
    assert tp._C._set_grad_enabled(True) is True
