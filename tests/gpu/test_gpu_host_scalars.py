"""0-d host tensors in compiled CUDA programs (issue 14, deliverable 4):
torch lets a 0-d CPU tensor join a CUDA op as a scalar (an optimizer's
step count, a loss scale); a compiled CUDA program binds a device copy of
it per call (csrc/lower/program.c lw_host_scalar) and writes a written one
back, instead of running the version eagerly. A CPU tensor with dims next
to a CUDA tensor still raises torch's error.

    sh scripts/gpu/build.sh .gpu python3 -m pytest tests/gpu   # on a GPU machine
"""
import numpy as np
import pytest

import tensorplay as tp
from tensorplay.compiler._aliasing import unwrap

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

F = tp.nn.functional


@pytest.fixture(autouse=True)
def _graphs():
    old = tp.compiler.config.cuda_graphs
    yield
    tp.compiler.config.cuda_graphs = old


def _x(*shape, seed=0):
    return tp.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _close(got, want, tol=1e-6):
    assert got.is_cuda
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=tol, atol=tol)


def test_a_host_scalar_joins_a_cuda_program_natively():
    def f(x, s):
        return F.gelu(x * s + 1)

    cf = tp.compile(f, strict_native=True)
    x = _x(64, 32)
    xc = x.cuda()
    for v in (2.5, -1.0, 0.0, 7.25):
        s = tp.tensor(v)
        _close(cf(xc, s), f(x, s), tol=1e-5)
    assert len(cf.versions) == 1                 # a value is no guard
    p = unwrap(cf.versions[0].artifact)
    assert isinstance(p, tp._C.CompiledProgram) and p.backend == "nvrtc"


def test_an_integer_host_scalar_promotes_as_eager():
    def f(x, n):
        return (x + n) * n

    cf = tp.compile(f, strict_native=True)
    x = _x(16, 8)
    n = tp.tensor(3)
    got = cf(x.cuda(), n)
    want = f(x, n)
    assert got.dtype == want.dtype == tp.float32
    _close(got, want)


def test_a_written_host_scalar_goes_back_to_the_host():
    # an optimizer-like step: the count lives on the host, the parameters
    # on the device
    def step(p, g, t):
        t += 1
        p -= 0.1 * g / t
        return p

    cf = tp.compile(step, strict_native=True)
    p0, g = _x(32, seed=1), _x(32, seed=2)
    pc, gc = p0.cuda(), g.cuda()
    te, tc = tp.tensor(0.0), tp.tensor(0.0)
    pe = p0.clone()
    for _ in range(3):
        step(pe, g, te)
        cf(pc, gc, tc)
    assert not tc.is_cuda and tc.item() == te.item() == 3.0
    _close(pc, pe, tol=1e-6)


def test_a_host_scalar_program_replays_as_a_graph():
    tp.compiler.config.cuda_graphs = True

    def f(x, s):
        return (x * s).softmax(-1) + s

    cf = tp.compile(f)
    x = _x(8, 128)
    xc = x.cuda()
    for v in (1.0, 2.0, 3.0, 0.5, 4.0):
        s = tp.tensor(v)
        _close(cf(xc, s), f(x, s), tol=1e-5)
    info = unwrap(cf.versions[0].artifact).cuda_graph
    assert info["state"] == "graph" and info["graph_replays"] == 4, info


def test_a_host_tensor_with_dims_still_raises_torchs_error():
    def f(x, y):
        return x + y

    cf = tp.compile(f)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        cf(_x(4).cuda(), _x(4))
