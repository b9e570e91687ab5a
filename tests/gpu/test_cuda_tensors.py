"""CUDA tensors on a GPU: the device model, the caching allocator, eager
ops (generated kernels, cuBLAS, host fallbacks) and tp.compile on CUDA
inputs, each against the same computation on the CPU.

    sh scripts/gpu/build.sh .gpu python3 -m pytest tests/gpu   # on a GPU machine

Skipped without an NVIDIA GPU and its driver.
"""
import math
import warnings

import numpy as np
import pytest

import tensorplay as tp

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

RTOL = {tp.float16: 2e-3, tp.float32: 2e-5, tp.float64: 1e-12}


def close(got, want, tol=None):
    assert got.is_cuda, "result left the device"
    assert tuple(got.shape) == tuple(want.shape) and got.dtype == want.dtype
    g, w = got.cpu().numpy(), want.numpy()
    if g.dtype.kind in "biu":
        assert np.array_equal(g, w)
        return
    rt = tol or RTOL[want.dtype]
    np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rt,
                               atol=rt, equal_nan=True)


def data(shape, dtype=tp.float32, special=True, seed=0):
    rng = np.random.default_rng(seed)
    if dtype in (tp.int32, tp.int64):
        a = rng.integers(-20, 20, size=shape)
    elif dtype is tp.bool:
        a = rng.integers(0, 2, size=shape).astype(bool)
    else:
        a = rng.standard_normal(shape) * 3
        if special and a.size >= 4:
            a.flat[:3] = [np.nan, np.inf, -np.inf]
    return tp.tensor(a.tolist() if a.ndim else a.item(), dtype=dtype)


# ------------------------------------------------------------ device model

def test_device_model_names():
    x = tp.ones(4, device="cuda")
    assert x.is_cuda and x.device == tp.device("cuda:0") and str(x.device) == "cuda:0"
    assert tp.cuda.device_count() >= 1 and tp.cuda.current_device() == 0
    assert "device='cuda:0'" in repr(x)
    assert x.cpu().tolist() == [1.0] * 4 and not x.cpu().is_cuda
    assert x.cuda() is x and x.to("cuda") is x
    assert tp.zeros_like(x).is_cuda and tp.empty(0, device="cuda").shape == (0,)


def test_numpy_of_cuda_raises_torchs_error():
    with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy"):
        tp.ones(2, device="cuda").numpy()


def test_mixing_devices_names_both():
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*"
                                           "cuda:0 and cpu"):
        tp.ones(2, device="cuda") + tp.ones(2)
    # a 0-d host tensor is a scalar to a CUDA op, as in torch
    close(tp.ones(2, device="cuda") + tp.tensor(2.0), tp.full((2,), 3.0))


def test_round_trips_keep_values_and_layout():
    x = data((5, 7), tp.float64)
    t = x.t()
    for v in (x, t, x[1:4, ::2], t[2]):
        c = v.cuda()
        # torch's preserve_format: a dense tensor keeps its strides, another
        # gets a dense layout in its stride order (what clone gives)
        assert c.stride() == v.clone().stride()
        close(c, v.contiguous())
        assert np.array_equal(c.cpu().numpy(), v.numpy(), equal_nan=True)
    y = x.cuda()
    assert y[1, 2].item() == x[1, 2].item() or math.isnan(x[1, 2].item())
    assert y.t()[3].cpu().tolist()[1:] == x.t()[3].tolist()[1:]
    close(y[tp.tensor([0, 2, 4])], x[tp.tensor([0, 2, 4])])
    z = tp.zeros(3, 4, device="cuda")
    z[1] = 5.0
    z[:, 2] = tp.arange(3.0)
    w = tp.zeros(3, 4)
    w[1] = 5.0
    w[:, 2] = tp.arange(3.0)
    close(z, w)


def test_random_draws_equal_the_cpu_stream():
    tp.cuda.manual_seed(123)
    a = tp.rand(1000, device="cuda")
    b = tp.randn(7, 3, device="cuda", dtype=tp.float64)
    tp.manual_seed(123)
    a2, b2 = tp.rand(1000), tp.randn(7, 3, dtype=tp.float64)
    assert np.array_equal(a.cpu().numpy(), a2.numpy())
    assert np.array_equal(b.cpu().numpy(), b2.numpy())


# ---------------------------------------------------------------- allocator

def test_allocator_reuses_blocks_and_frees_nothing_on_the_hot_path():
    x = tp.ones(1 << 20, device="cuda")
    tp.cuda.synchronize()
    y = x * 2.0
    del y
    base = tp.cuda.memory_allocated()
    stats0 = tp._C.cuda_memory_stats()
    for _ in range(2000):
        y = x * 2.0
        del y
    tp.cuda.synchronize()
    stats1 = tp._C.cuda_memory_stats()
    assert tp.cuda.memory_allocated() == base
    assert stats1["driver_allocs"] == stats0["driver_allocs"]
    assert tp.cuda.max_memory_allocated() >= base + 4 * (1 << 20)
    del x
    reserved = tp.cuda.memory_reserved()
    tp.cuda.empty_cache()
    assert tp.cuda.memory_reserved() < reserved


def test_out_of_memory_raises_and_the_allocator_stays_usable():
    with pytest.raises(tp.cuda.OutOfMemoryError, match="CUDA out of memory"):
        tp.empty(1 << 45, device="cuda", dtype=tp.uint8)
    assert isinstance(tp.cuda.OutOfMemoryError("x"), RuntimeError)
    close(tp.ones(3, device="cuda") + 1, tp.full((3,), 2.0))


def test_no_leak_over_many_compiled_calls():
    f = tp.compile(lambda a, b: (a * b + 1).sum(-1))
    a, b = tp.rand(64, 128, device="cuda"), tp.rand(64, 128, device="cuda")
    f(a, b)
    tp.cuda.synchronize()
    base = tp.cuda.memory_allocated()
    for _ in range(20000):
        r = f(a, b)
    del r
    tp.cuda.synchronize()
    assert tp.cuda.memory_allocated() == base


# ----------------------------------------------------------------- eager ops

UNARY = ["neg", "abs", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "relu",
         "floor", "ceil", "round", "reciprocal", "expm1", "log1p", "erf", "isnan", "isinf"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "pow", "eq", "lt", "ge",
          "atan2", "fmod", "remainder"]


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64, tp.float16])
@pytest.mark.parametrize("name", UNARY)
def test_eager_unary_matches_cpu(name, dtype):
    x = data((33, 17), dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        close(getattr(tp, name)(x.cuda()), getattr(tp, name)(x))
        close(getattr(tp, name)(x.cuda().t()), getattr(tp, name)(x.t()))
        close(getattr(tp, name)(tp.empty(0, 3, dtype=dtype).cuda()),
              getattr(tp, name)(tp.empty(0, 3, dtype=dtype)))


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64, tp.int64, tp.int32])
@pytest.mark.parametrize("name", BINARY)
def test_eager_binary_matches_cpu(name, dtype):
    if dtype in (tp.int64, tp.int32) and name in ("atan2", "pow", "div"):
        pytest.skip("float-only op here")
    x, y = data((8, 16), dtype, seed=1), data((16,), dtype, seed=2)
    if dtype in (tp.int64, tp.int32) and name in ("fmod", "remainder"):
        y = y.abs() + 1
    close(getattr(tp, name)(x.cuda(), y.cuda()), getattr(tp, name)(x, y))
    if name not in ("maximum", "minimum", "atan2"):     # Tensor-only in torch too
        close(getattr(tp, name)(x.cuda(), 3), getattr(tp, name)(x, 3))


def test_eager_kernels_do_not_fall_back_to_the_host():
    x = tp.rand(100, device="cuda")
    before = dict(tp.cuda.host_fallbacks())
    for _ in range(3):
        y = (x + 1) * 2 - x.exp()
        s = y.sum()
        m = tp.softmax(x.view(10, 10), -1)
    tp.cuda.synchronize()
    after = tp.cuda.host_fallbacks()
    for name in ("add", "mul", "sub", "exp", "sum", "softmax"):
        assert after.get(name, 0) == before.get(name, 0), name
    assert s.is_cuda and m.is_cuda


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64])
@pytest.mark.parametrize("op", [
    lambda x: x.sum(), lambda x: x.sum(-1), lambda x: x.mean(0), lambda x: x.amax(-1),
    lambda x: x.argmax(-1), lambda x: x.var(-1), lambda x: tp.softmax(x, -1),
    lambda x: tp.log_softmax(x, 0), lambda x: tp.nn.functional.layer_norm(x, (x.shape[-1],)),
    lambda x: x.max(-1)[0], lambda x: x.prod(-1), lambda x: tp.logsumexp(x, -1),
    lambda x: x.t().contiguous(), lambda x: tp.cat([x, x], 0), lambda x: x[:, 1::3] * 2,
    lambda x: tp.where(x > 0, x, -x), lambda x: tp.clamp(x, -1, 1),
    lambda x: tp.nn.functional.gelu(x),
])
def test_eager_reductions_and_composites_match_cpu(op, dtype):
    x = data((12, 40), dtype, special=False)
    close(op(x.cuda()), op(x), tol=1e-4 if dtype is tp.float32 else None)


def test_eager_nan_and_inf_reductions():
    x = data((4, 9), tp.float32)
    for op in (lambda v: v.sum(-1), lambda v: v.amax(-1), lambda v: v.max(), lambda v: v.min()):
        close(op(x.cuda()), op(x))


def test_eager_in_place_ops_write_the_device_buffer():
    x = data((6, 5), tp.float32, special=False)
    c = x.cuda()
    v0 = c._version
    c.add_(1.5).mul_(2)
    x.add_(1.5).mul_(2)
    close(c, x)
    assert c._version > v0
    c2 = x.cuda()
    c2[:, 1].zero_()
    x[:, 1].zero_()
    close(c2, x)


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64])
def test_matmul_through_cublas(dtype):
    a, b = data((33, 20), dtype, special=False), data((20, 17), dtype, special=False)
    tol = 1e-4 if dtype is tp.float32 else None
    close(a.cuda() @ b.cuda(), a @ b, tol)
    close(a.cuda().t().t() @ b.cuda().t().contiguous().t(), a @ b, tol)
    close(tp.mm(b.cuda().t(), a.cuda().t()), tp.mm(b.t(), a.t()), tol)
    A, B = data((3, 5, 4), dtype, special=False), data((3, 4, 6), dtype, special=False)
    close(tp.bmm(A.cuda(), B.cuda()), tp.bmm(A, B), tol)
    close(tp.matmul(A.cuda(), b[:4].cuda()), tp.matmul(A, b[:4]), tol)
    w, bias = data((7, 20), dtype, special=False), data((7,), dtype, special=False)
    close(tp.nn.functional.linear(a.cuda(), w.cuda(), bias.cuda()),
          tp.nn.functional.linear(a, w, bias), tol)
    assert "matmul" not in tp.cuda.host_fallbacks()


def test_strict_mode_raises_instead_of_host_fallback():
    # every op of the table has a CUDA path now (unique(dim) of float16 was
    # the last one this used): the host fallback itself, as ops reach it
    from tensorplay.cuda import _eager
    x = tp.rand(5, 2, device="cuda")
    probe = lambda t: t.flip(0) * 2          # noqa: E731  runs on the host copies
    tp.cuda.set_strict(True)
    try:
        with pytest.raises(RuntimeError, match="'probe_op' has no CUDA kernel"):
            _eager._host("probe_op", probe, (x,), {}, False)
    finally:
        tp.cuda.set_strict(False)
    with pytest.warns(UserWarning, match="runs on the host"):
        r = _eager._host("probe_op", probe, (x,), {}, False)
    assert r.is_cuda
    assert r.cpu().tolist() == (x.cpu().flip(0) * 2).tolist()
    assert tp.cuda.host_fallbacks().get("probe_op", 0) >= 1


def test_autograd_through_cuda_ops():
    x = data((4, 6), tp.float32, special=False)
    xc = x.cuda().requires_grad_()
    xh = x.clone().requires_grad_()
    (xc.exp() * 2).sum().backward()
    (xh.exp() * 2).sum().backward()
    close(xc.grad, xh.grad)


# ----------------------------------------------------------------- compiled

def test_compiled_runs_nvrtc_kernels_on_device_buffers():
    def ex11(x, w):
        return (tp.relu(x + w) * 2).sum(-1)
    f = tp.compile(ex11, strict_native=True)
    x, w = data((64, 128), special=False, seed=3), data((64, 128), special=False, seed=4)
    r = f(x.cuda(), w.cuda())
    close(r, ex11(x, w), 1e-5)
    r2 = f(x, w)                      # the device is part of sigma
    assert not r2.is_cuda
    close(f(x.cuda(), w.cuda()), ex11(x, w), 1e-5)


@pytest.mark.parametrize("fn", [
    lambda x: tp.softmax(x, -1),
    lambda x: tp.nn.functional.layer_norm(x, (x.shape[-1],)),
    lambda x: (x @ x.t()).relu().sum(0),
    lambda x: tp.where(x > 0.5, x.exp(), x * 3).mean(-1),
    lambda x: x.t().contiguous() + 1,
])
def test_compiled_on_cuda_matches_eager_cpu(fn):
    x = data((32, 48), special=False, seed=5)
    close(tp.compile(fn)(x.cuda()), fn(x), 1e-4)


def test_compiled_data_gate_on_cuda():
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x - 1
    g = tp.compile(f)
    for v in (tp.ones(8), -tp.ones(8), tp.ones(8)):
        close(g(v.cuda()), f(v))


def test_compiled_random_on_cuda_is_eagers_stream():
    f = tp.compile(lambda x: tp.nn.functional.dropout(x, 0.5, True) + tp.rand_like(x))
    x = tp.ones(4, 64)
    tp.manual_seed(5)
    got = f(x.cuda())
    tp.manual_seed(5)
    want = tp.nn.functional.dropout(x, 0.5, True) + tp.rand_like(x)
    close(got, want)


# -------------------------------------------------------------------- DLPack

def test_dlpack_with_torch_cuda_is_zero_copy_both_ways():
    torch = pytest.importorskip("torch")
    x = tp.arange(12.0, device="cuda").reshape(3, 4)
    assert x.__dlpack_device__() == (2, 0)
    t = torch.from_dlpack(x)
    assert t.is_cuda and t.data_ptr() == x.data_ptr() and t.tolist() == x.cpu().tolist()
    u = torch.arange(6.0, device="cuda").reshape(2, 3).t()
    y = tp.from_dlpack(u)
    assert y.is_cuda and y.data_ptr() == u.data_ptr() and y.stride() == u.stride()
    u.mul_(2)                       # torch's stream: from_dlpack ordered it
    close(y * 1, tp.tensor(u.cpu().numpy()))


def test_dlpack_with_cupy_and_jax():
    cp = pytest.importorskip("cupy")
    a = cp.arange(10, dtype=cp.float32)
    y = tp.from_dlpack(a)
    assert y.is_cuda and y.data_ptr() == a.data.ptr
    b = cp.from_dlpack(tp.ones(4, device="cuda") * 3)
    assert cp.asnumpy(b).tolist() == [3.0] * 4
    import os
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    j = jax.dlpack.from_dlpack(tp.arange(5.0, device="cuda"))
    assert list(np.asarray(j)) == [0.0, 1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("op", [
    lambda x: x.mean(-1), lambda x: x.var(0), lambda x: tp.softmax(x, -1),
    lambda x: x.sum(), lambda x: tp.nn.functional.layer_norm(x, (x.shape[-1],)),
    lambda x: (x * 2 + 1).relu(), lambda x: x.amax(-1), lambda x: x.argmax(0),
])
def test_one_eager_op_at_many_sizes(op):
    """the kernel cache keys every size apart (or, with
    TENSORPLAY_CUDA_EAGER_DYNAMIC=1, one dynamic program per layout class):
    either way each size gives eager's values"""
    for shape in [(12, 40), (7, 3), (100, 1000), (1, 5), (64, 1)]:
        x = data(shape, tp.float32, special=False, seed=sum(shape))
        close(op(x.cuda()), op(x), tol=1e-4)


def test_reductions_short_and_long_rows_match_cpu():
    """rows of a few elements run several per block (one warp each), long
    rows get a searched block size: both must reduce exactly as before"""
    for shape in [(100000, 7), (3000, 33), (64, 100000), (4096, 4096)]:
        x = data(shape, tp.float32, special=False, seed=1)
        close(x.cuda().sum(-1), x.sum(-1), tol=1e-4)
        close(tp.softmax(x.cuda(), -1), tp.softmax(x, -1), tol=1e-5)
        close(x.cuda().argmax(-1), x.argmax(-1))
        f = tp.compile(lambda v: (v * 2).sum(-1) + v.amax(-1))
        got = f(x.cuda())
        if shape[1] < 4096:
            close(got, (x * 2).sum(-1) + x.amax(-1), tol=1e-4)
        # and against the exact (float64) sums, within a few roundings at the
        # scale of each row's sum of magnitudes: at 4096^2 the CPU's float32
        # sum itself is off by up to 1.6e-4 (results cancel to ~0.05 from
        # terms of ~6), beyond the 1e-4 above, and the GPU's by less
        a = x.numpy().astype(np.float64)
        exact = (a * 2).sum(-1) + a.max(-1)
        assert got.is_cuda and got.dtype == tp.float32
        err = np.abs(got.cpu().numpy().astype(np.float64) - exact)
        assert (err <= 4 * 2.0 ** -24 * np.abs(a * 2).sum(-1) + 1e-6).all(), err.max()


def test_indexing_and_shape_ops_run_as_kernels():
    x = data((6, 5), tp.float32, special=False)
    i = tp.tensor([4, 0, 2])
    w = data((10, 3), tp.float32, special=False)
    before = dict(tp.cuda.host_fallbacks())
    cases = [
        lambda a: tp.cat([a, a * 2], 0), lambda a: tp.stack([a, a], 1),
        lambda a: tp.index_select(a, 1, i.cuda() if a.is_cuda else i),
        lambda a: tp.gather(a, 1, (tp.zeros(6, 2, dtype=tp.int64).cuda()
                                   if a.is_cuda else tp.zeros(6, 2, dtype=tp.int64))),
        lambda a: tp.nn.functional.pad(a, (1, 2)), lambda a: tp.flip(a, [0]),
        lambda a: tp.tril(a), lambda a: tp.cumsum(a, 1), lambda a: tp.roll(a, 2, 0),
    ]
    for op in cases:
        close(op(x.cuda()), op(x), 1e-5)
    e = tp.nn.functional.embedding(i.cuda(), w.cuda())
    close(e, tp.nn.functional.embedding(i, w))
    after = tp.cuda.host_fallbacks()
    for name in ("cat", "stack", "index_select", "embedding", "pad"):
        assert after.get(name, 0) == before.get(name, 0), name
