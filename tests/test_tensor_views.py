"""Views and indexing: metadata vs NumPy/PyTorch, storage sharing, versions, errors."""
import numpy as np
import pytest

import tensorplay as tp

try:
    import torch
except Exception:  # pragma: no cover
    torch = None


def base():
    return tp.arange(24).reshape(2, 3, 4)


def shares(a, b):
    return np.shares_memory(a.numpy(), b.numpy())


VIEW_CASES = [
    ("view", lambda x: x.view(6, 4)), ("view-1", lambda x: x.view(-1)),
    ("view_tuple", lambda x: x.view((4, -1))), ("permute", lambda x: x.permute(2, 0, 1)),
    ("permute_neg", lambda x: x.permute((-1, 0, 1))), ("transpose", lambda x: x.transpose(0, 2)),
    ("mT", lambda x: x.mT), ("T2", lambda x: x[0].T), ("t", lambda x: x[0].t()),
    ("expand", lambda x: x[:, :1].expand(2, 5, 4)), ("expand-1", lambda x: x[None].expand(3, -1, -1, -1)),
    ("unsqueeze", lambda x: x.unsqueeze(-1)), ("unsqueeze0", lambda x: x.unsqueeze(0)),
    ("squeeze", lambda x: x[:, :1].squeeze()), ("squeeze1", lambda x: x[:, :1].squeeze(1)),
    ("squeeze_noop", lambda x: x.squeeze(0)), ("flatten", lambda x: x.flatten()),
    ("flatten12", lambda x: x.flatten(1)), ("unflatten", lambda x: x.unflatten(2, (2, 2))),
    ("narrow", lambda x: x.narrow(2, 1, 2)), ("narrow_neg", lambda x: x.narrow(-1, -2, 2)),
    ("select", lambda x: x.select(1, -1)), ("diagonal", lambda x: x.diagonal()),
    ("diagonal_off", lambda x: x.diagonal(1, 1, 2)), ("diagonal_neg", lambda x: x.diagonal(-1, -2, -1)),
    ("as_strided", lambda x: x.as_strided((3, 3), (1, 3), 2)),
    ("movedim", lambda x: x.movedim(0, 2)), ("slice_step", lambda x: x[:, ::2, 1::3]),
    ("int_idx", lambda x: x[1, 2]), ("ellipsis", lambda x: x[..., 1]), ("none", lambda x: x[:, None, 1]),
    ("mixed", lambda x: x[1, ..., None, :2]), ("empty_slice", lambda x: x[:, 3:]),
]


@pytest.mark.parametrize("name,f", VIEW_CASES, ids=[c[0] for c in VIEW_CASES])
def test_views_match_torch(name, f):
    x = base()
    y = f(x)
    assert y._storage is x._storage
    if torch is not None:
        tx = torch.arange(24).reshape(2, 3, 4)
        ty = f(tx)
        assert tuple(y.shape) == tuple(ty.shape)
        assert y.stride() == ty.stride()
        assert y.storage_offset() == ty.storage_offset()
        assert y.is_contiguous() == ty.is_contiguous()
        assert y.tolist() == ty.tolist()


def test_reshape_copies_only_when_needed():
    x = base()
    assert x.reshape(4, 6)._storage is x._storage
    t = x.transpose(0, 2)
    r = t.reshape(-1)
    assert r._storage is not x._storage
    assert r.tolist() == np.arange(24).reshape(2, 3, 4).transpose(2, 1, 0).reshape(-1).tolist()
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        t.view(-1)
    with pytest.raises(RuntimeError, match=r"shape '\[5, -1\]' is invalid for input of size 24"):
        x.view(5, -1)


def test_split_chunk_unbind():
    x = tp.arange(10)
    assert [p.tolist() for p in x.split(4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [p.tolist() for p in x.split([3, 7])] == [[0, 1, 2], list(range(3, 10))]
    assert [p.tolist() for p in x.chunk(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [p.tolist() for p in tp.arange(6).reshape(2, 3).unbind(1)] == [[0, 3], [1, 4], [2, 5]]
    assert all(p._storage is x._storage for p in x.split(4))
    with pytest.raises(RuntimeError, match="split_with_sizes expects split_sizes to sum exactly to 10"):
        x.split([3, 3])
    with pytest.raises(RuntimeError, match="chunk expects `chunks` to be greater than 0"):
        x.chunk(0)
    if torch is not None:
        for n in range(1, 7):
            assert [p.tolist() for p in tp.arange(5).chunk(n)] == \
                [p.tolist() for p in torch.arange(5).chunk(n)]


def test_dim_errors_like_torch():
    x = tp.zeros(2, 3)
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 5\)"):
        x.transpose(0, 5)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.unsqueeze(3)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.size(2)
    with pytest.raises(RuntimeError, match="t\\(\\) expects a tensor with <= 2 dimensions, but self is 3D"):
        base().t()
    with pytest.raises(RuntimeError, match="The expanded size of the tensor \\(4\\) must match the existing size \\(3\\)"):
        x.expand(2, 4)
    with pytest.raises(RuntimeError, match="number of dimensions in the tensor input does not match"):
        x.permute(0)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 2"):
        x[3]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        x[0, 0, 0]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        x[::-1]
    with pytest.raises(IndexError, match="select\\(\\) cannot be applied to a 0-dim tensor"):
        tp.tensor(1.0).select(0, 0)
    with pytest.raises(RuntimeError, match="start \\(2\\) \\+ length \\(2\\) exceeds dimension size \\(3\\)"):
        x.narrow(1, 2, 2)


def test_zero_d_and_zero_size():
    s = tp.tensor(5.0)
    assert s[None].shape == (1,) and s[...].shape == () and s.unsqueeze(0).shape == (1,)
    assert s.view(1).shape == (1,) and s.reshape(()).shape == () and s.flatten().shape == (1,)
    assert s.expand(3).tolist() == [5.0, 5.0, 5.0]
    assert s.squeeze().shape == () and s.squeeze(0).shape == () and s.unsqueeze(-1).shape == (1,)
    z = tp.zeros(0, 3)
    assert z.view(3, 0).shape == (3, 0) and z.reshape(-1).shape == (0,)
    assert z.t().shape == (3, 0) and z[:, 1].shape == (0,) and z.flatten().numel() == 0
    assert z.split(2) == () or len(z.split(2)) == 1


def test_advanced_indexing_copies():
    x = tp.arange(12).reshape(3, 4)
    a = np.arange(12).reshape(3, 4)
    m = x.numpy() > 5
    y = x[tp.tensor(m)]
    assert y.tolist() == a[m].tolist()
    assert y._storage is not x._storage
    assert x[[0, 2]].tolist() == a[[0, 2]].tolist()
    assert x[tp.tensor([2, 0]), 1:].tolist() == a[[2, 0], 1:].tolist()
    assert x[:, tp.tensor([True, False, True, False])].tolist() == a[:, [True, False, True, False]].tolist()
    assert x[tp.tensor(1)].tolist() == a[1].tolist()
    with pytest.raises(IndexError):
        x[tp.tensor([0, 5])]
    with pytest.raises(IndexError, match="tensors used as indices must be long"):
        x[tp.tensor([0.0])]


def test_setitem_bumps_version_shared_by_views():
    x = tp.zeros(3, 4)
    v = x[1]
    x[0] = 1.0
    assert x._version == 1 and v._version == 1
    x[:, 1] = tp.tensor([1.0, 2.0, 3.0])
    assert v.tolist() == [0.0, 2.0, 0.0, 0.0] and v._version == 2
    x[x.numpy() > 1.5] = -1.0 if False else -1.0
    x[tp.tensor(x.numpy() > 1.5)] = 7.0
    assert v._version == 4
    x[[0, 2], 3] = tp.tensor([5.0, 6.0])
    assert x[:, 3].tolist() == [5.0, 0.0, 6.0] and v._version == 5
    v[...] = 9
    assert x[1].tolist() == [9.0] * 4 and x._version == 6
    with pytest.raises(RuntimeError, match="The expanded size of the tensor"):
        x[:2] = tp.tensor([1.0, 2.0, 3.0])


def test_setitem_dtype_cast_and_noncontiguous():
    x = tp.zeros(4, 4, dtype=tp.int32)
    t = x.t()
    t[0] = tp.tensor([1.7, 2.2, 3.9, 4.0])
    assert x[:, 0].tolist() == [1, 2, 3, 4]
    assert not t.is_contiguous() and t.contiguous().is_contiguous()


@pytest.mark.parametrize("dt", [tp.bool, tp.uint8, tp.int8, tp.int16, tp.int32, tp.int64,
                                tp.float16, tp.float32, tp.float64])
def test_every_dtype_views_and_items(dt):
    a = (np.arange(6).reshape(2, 3) % 2).astype(tp.tensor([], dtype=dt).numpy().dtype)
    x = tp.tensor(a)
    assert x.dtype is dt
    assert x.t().tolist() == a.T.tolist()
    assert x[1, 2].item() == a[1, 2].item()
    assert x.flatten()[::2].tolist() == a.reshape(-1)[::2].tolist()
    x[0, 0] = 1
    assert x[0, 0].item() == 1
