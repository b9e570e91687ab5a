"""DLPack on the host: tp.from_dlpack and Tensor.__dlpack__ share memory
with NumPy and torch both ways (CUDA: tests/gpu/test_cuda_tensors.py)."""
import gc

import numpy as np
import pytest

import tensorplay as tp


def test_export_to_numpy_shares_memory_and_strides():
    x = tp.arange(12.0).reshape(3, 4).t()
    assert x.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(x)
    assert a.shape == (4, 3) and a.strides == (4, 16)
    x[0, 0] = 100.0
    assert a[0, 0] == 100.0
    assert np.array_equal(a, x.numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.int32,
                                   np.int16, np.int8, np.uint8, np.bool_])
def test_import_from_numpy_is_zero_copy(dtype):
    n = np.arange(6).astype(dtype).reshape(2, 3)
    y = tp.from_dlpack(n)
    assert y.shape == (2, 3) and y.numpy().dtype == n.dtype
    if dtype is not np.bool_:
        n[1, 1] = 4
        assert y[1, 1].item() == 4
    assert np.array_equal(y.numpy(), n)


def test_imported_buffer_lives_as_long_as_the_tensor():
    y = tp.from_dlpack(np.arange(1000.0)[::3])
    gc.collect()
    assert y.shape == (334,) and y[5].item() == 15.0 and y.stride() == (3,)


def test_bad_inputs_raise():
    with pytest.raises(TypeError, match="__dlpack__"):
        tp.from_dlpack(3)
    with pytest.raises(RuntimeError, match="require gradient"):
        tp.ones(2, requires_grad=True).__dlpack__()
    cap = tp.ones(2).__dlpack__()
    tp.from_dlpack(cap)
    with pytest.raises(RuntimeError, match="capsule"):
        tp.from_dlpack(cap)           # a used capsule


def test_torch_both_ways_share_memory():
    torch = pytest.importorskip("torch")
    t = torch.arange(5.0)
    z = tp.from_dlpack(t)
    t[0] = 9.0
    assert z[0].item() == 9.0
    o = tp.ones(3)
    w = torch.from_dlpack(o)
    o[1] = 7.0
    assert w.tolist() == [1.0, 7.0, 1.0]
