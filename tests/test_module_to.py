"""nn.Module.type / bfloat16 with torch's semantics (main's Module.to is
covered by tests/test_newuser_module_to.py): Module.type casts every
parameter and buffer, integer buffers too, where .to(dtype) casts only the
floating ones; Module.bfloat16 casts the floating ones. Optimizer state and
CUDA pickling across devices run in tests/gpu/test_gpu_module_training.py
(a dry run on the CPU: TP_GPU_TEST_DEVICE=cpu)."""
import pytest

import tensorplay as tp
from tensorplay import nn


def net():
    tp.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))


def test_bfloat16_returns_self_and_casts_floating_tensors_only():
    m = net()
    w = m[0].weight
    assert m.bfloat16() is m and m[0].weight is w
    assert all(p.dtype == tp.bfloat16 for p in m.parameters())
    assert m[1].running_mean.dtype == tp.bfloat16
    assert m[1].num_batches_tracked.dtype == tp.int64
    m(tp.randn(5, 3).bfloat16()).float().sum().backward()
    assert w.grad.dtype == tp.bfloat16


def test_type_casts_integer_buffers_too_and_to_refuses_integer_dtypes():
    m = net()
    with pytest.raises(TypeError, match="only accepts floating point or complex dtypes"):
        m.to(tp.int32)
    w = m[0].weight
    m(tp.randn(5, 3)).sum().backward()
    assert m.type(tp.float64) is m and m[0].weight is w
    assert m[1].num_batches_tracked.dtype == tp.float64
    assert w.dtype == tp.float64 and w.grad.dtype == tp.float64


def test_module_type_matches_torch():
    torch = pytest.importorskip("torch")
    tm = torch.nn.BatchNorm1d(4).type(torch.float64)
    m = nn.BatchNorm1d(4).type(tp.float64)
    for (k, a), (k2, b) in zip(tm.state_dict().items(), m.state_dict().items()):
        assert k == k2 and str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1]
