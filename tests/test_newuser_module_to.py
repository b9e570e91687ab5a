"""Module.to / .double() / .half() / .cuda() as a PyTorch user relies on
them: parameters keep their identity (an optimizer made before the cast
keeps training the model; they were replaced by new Parameter objects),
gradients are cast too, to(device) moves (it returned self silently, so a
CUDA model stayed on the CPU), to(tensor), torch's TypeError for an
integer dtype; get_submodule/get_parameter/get_buffer with torch's errors."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn


def model():
    tp.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))


def test_cast_keeps_parameter_identity_and_optimizer():
    m = model()
    opt = tp.optim.SGD(m.parameters(), lr=0.1)
    w = m[0].weight
    m(tp.randn(4, 2)).sum().backward()
    m.double()
    assert m[0].weight is w and w.dtype == tp.float64 and w.grad.dtype == tp.float64
    assert m[1].running_mean.dtype == tp.float64 and m[1].num_batches_tracked.dtype == tp.int64
    before = w.detach().clone()
    opt.step()
    assert not tp.equal(before, w.detach()) if hasattr(tp, "equal") else \
        not np.array_equal(before.numpy(), w.detach().numpy())
    m.to(tp.float32)
    assert w.dtype == tp.float32 and m[0].bias.dtype == tp.float32
    m.to(tp.zeros(1, dtype=tp.float64))
    assert w.dtype == tp.float64
    m.half()
    assert w.dtype == tp.float16 and w.requires_grad and isinstance(w, nn.Parameter)


def test_compiled_model_follows_cast():
    m = model().eval()
    cm = tp.compile(m)
    x = tp.randn(3, 2)
    a = cm(x)
    m.double()
    b = cm(x.double())
    assert b.dtype == tp.float64
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_to_errors_and_devices():
    m = model()
    with pytest.raises(TypeError, match="only accepts floating point or complex dtypes"):
        m.to(tp.int64)
    assert m.to("cpu") is m and m.cpu() is m and m[0].weight.device == tp.device("cpu")
    if not tp.cuda.is_available():
        with pytest.raises(RuntimeError):
            m.to("cuda")
        with pytest.raises(RuntimeError):
            m.cuda()


def test_get_submodule_parameter_buffer():
    m = model()
    assert m.get_submodule("") is m and m.get_submodule("0") is m[0]
    assert m.get_parameter("1.weight") is m[1].weight
    assert m.get_buffer("1.running_mean") is m[1].running_mean
    for call, msg in [(lambda: m.get_submodule("0.x"), "Linear has no attribute `x`"),
                      (lambda: m.get_submodule("0.weight"), "`weight` is not an nn.Module"),
                      (lambda: m.get_parameter("1.running_mean"), "`running_mean` is not an nn.Parameter"),
                      (lambda: m.get_buffer("1.weight"), "`weight` is not a buffer")]:
        with pytest.raises(AttributeError) as ei:
            call()
        assert str(ei.value) == msg
