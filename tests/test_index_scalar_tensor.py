"""A 0-d integer tensor in an indexing key is the int it holds (torch's
rule): a select, so x[t] is a view and x[t, :, j] drops the selected dim
before j indexes (NumPy's rule, which broadcast t with j and put the result
dims first, gave (2, 3) where torch gives (3, 2) and refused the matching
setitem). int8/int16 0-d tensors select too; 0-d bool/uint8 stay masks.
Compiled code gathers the one row, so the index stays a graph value."""
import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

BASE = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)


def _keys(m, i):
    """keys over a (2, 3, 4) tensor; m the module (tp or torch), i the 0-d index"""
    j = m.tensor([0, 2])
    return [(i,), (i, slice(None), j), (slice(None), i, j), (m.tensor([0, 1]), slice(None), i),
            (i, slice(1, None)), (Ellipsis, i), (None, i, j), (i, 1, j), (i, m.tensor([[1], [2]]))]


@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "int8"])
@pytest.mark.parametrize("v", [1, 0, -1])
def test_getitem_and_setitem_as_torch(dtype, v):
    for kt, kw in zip(_keys(tp, tp.tensor(v, dtype=getattr(tp, dtype))),
                      _keys(torch, torch.tensor(v, dtype=getattr(torch, dtype)))):
        x, y = tp.tensor(BASE), torch.tensor(BASE)
        got, want = x[kt], y[kw]
        assert tuple(got.shape) == tuple(want.shape), kt
        assert np.array_equal(got.numpy(), want.numpy()), kt
        val = np.arange(want.numel(), dtype=np.float32).reshape(tuple(want.shape)) + 100
        x[kt] = tp.tensor(val)
        y[kw] = torch.tensor(val)
        assert np.array_equal(x.numpy(), y.numpy()), kt


def test_a_scalar_tensor_key_is_a_view_and_bounds_checked():
    x = tp.tensor(BASE)
    r = x[tp.tensor(1)]
    assert r.data_ptr() == x[1].data_ptr()
    r.fill_(0)
    assert float(x[1].sum()) == 0.0
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 2"):
        x[tp.tensor(5)]


def test_bool_and_uint8_scalars_stay_masks():
    x = tp.tensor(BASE)
    assert tuple(x[tp.tensor(True)].shape) == (1, 2, 3, 4)
    assert tuple(x[tp.tensor(True), :, tp.tensor([0, 2])].shape) == (2, 2, 4)


@pytest.mark.parametrize("key", ["i", "i,:,j", ":,i", "i,1:", "j[:1],:,i"])
def test_compiled_follows_the_index_value(key):
    """each call's own index value, natively: the value is guarded (a view
    of the indexed tensor as eager's, so writes through it land), one
    version per distinct value, no eager fallback"""
    fn = eval(f"lambda x, i, j: x[{key}] * 2")
    c = tp.compile(fn, strict_native=True)
    x, j = tp.tensor(BASE), tp.tensor([0, 2])
    for v in (1, 0, -1, 1):
        i = tp.tensor(v)
        want = fn(x, i, j)
        got = c(x, i, j)
        assert tuple(got.shape) == tuple(want.shape)
        assert np.array_equal(got.numpy(), want.numpy()), v
    assert c.stats()["versions"] == 3


@pytest.mark.parametrize("write", ["x[i].add_(1)", "x[i].zero_()", "x[:, i].mul_(3)",
                                   "x[i][0].fill_(7)", "x[..., i].mul_(-2)"])
def test_compiled_writes_through_a_scalar_tensor_key_reach_the_tensor(write):
    """x[t0] is a view in eager (and torch): an in-place op on it writes x;
    compiled code wrote a gathered copy and lost the write"""
    src = f"def fn(x, i):\n    {write}\n    return x * 1\n"
    ns = {}
    exec(src, ns)
    fn = ns["fn"]
    c = tp.compile(fn, strict_native=True)
    for v in (1, 0, 1, -1):
        xe, xc = tp.tensor(BASE), tp.tensor(BASE)
        want = fn(xe, tp.tensor(v))
        got = c(xc, tp.tensor(v))
        assert np.array_equal(got.numpy(), want.numpy()), (write, v)
        assert np.array_equal(xc.numpy(), xe.numpy()), (write, v)
