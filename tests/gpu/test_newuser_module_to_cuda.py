"""model.to('cuda') / model.cuda() on a GPU: parameters, gradients and
buffers move in place (the same Parameter objects, so an optimizer made
before the move keeps training the model; before, Module.to ignored
devices), and eager and compiled training steps on the device match the
CPU's.

Skipped without an NVIDIA GPU and its driver.
"""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn
import tensorplay.nn.functional as F

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")


def model():
    tp.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


@pytest.mark.parametrize("compiled", [False, True])
def test_model_to_cuda_trains_like_cpu(compiled):
    x = tp.tensor(np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32))
    y = tp.tensor(np.arange(16) % 3)
    out = []
    for dev in ("cpu", "cuda"):
        m = model()
        opt = tp.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        w = m[0].weight
        m.to(dev) if dev == "cpu" else m.cuda()
        assert m[0].weight is w and w.device.type == dev and m[1].running_mean.device.type == dev
        f = tp.compile(m) if compiled else m
        for _ in range(3):
            opt.zero_grad()
            F.cross_entropy(f(x.to(dev)), y.to(dev)).backward()
            assert w.grad.device.type == dev
            opt.step()
        out.append([p.detach().cpu().numpy() for p in m.parameters()])
    for a, b in zip(*out):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
