"""tp.autocast and tp.amp.GradScaler against torch 2.13 CPU (issue 13):
result dtypes of torch's CPU autocast op lists, values equal to the
explicit casts, gradients reaching float32 parameters, nesting and
disabling, compiled functions inside a region, GradScaler's skip/backoff."""
import warnings

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

X = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
W = np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32)

CASES = {
    "mm": lambda m, x, w, xb, t: x @ w,
    "matmul": lambda m, x, w, xb, t: m.matmul(x, w),
    "linear": lambda m, x, w, xb, t: m.nn.functional.linear(x, w, m.ones(4)),
    "bmm": lambda m, x, w, xb, t: m.bmm(x[None], w[None]),
    "baddbmm": lambda m, x, w, xb, t: m.baddbmm(x[None], x[None], w[None]),
    "addmm": lambda m, x, w, xb, t: m.addmm(x, x, w),
    "conv1d": lambda m, x, w, xb, t: m.nn.functional.conv1d(x[None], w[:, :, None]),
    "conv2d_bias": lambda m, x, w, xb, t: m.nn.functional.conv2d(x[None, None], w[None, None],
                                                                 m.ones(1)),
    "sdpa": lambda m, x, w, xb, t: m.nn.functional.scaled_dot_product_attention(
        x[None], x[None], x[None]),
    "softmax_f32": lambda m, x, w, xb, t: x.softmax(-1),
    "softmax_bf16": lambda m, x, w, xb, t: xb.softmax(-1),
    "sum_bf16": lambda m, x, w, xb, t: xb.sum(),
    "exp_bf16": lambda m, x, w, xb, t: xb.exp(),
    "layer_norm_bf16": lambda m, x, w, xb, t: m.nn.functional.layer_norm(xb, (4,)),
    "cross_entropy": lambda m, x, w, xb, t: m.nn.functional.cross_entropy(xb, t),
    "nll_loss": lambda m, x, w, xb, t: m.nn.functional.nll_loss(xb, t),
    "mse_loss": lambda m, x, w, xb, t: m.nn.functional.mse_loss(xb, xb),
    "huber_loss": lambda m, x, w, xb, t: m.nn.functional.huber_loss(xb, xb),
    "bce_logits": lambda m, x, w, xb, t: m.nn.functional.binary_cross_entropy_with_logits(xb, xb),
    "prod": lambda m, x, w, xb, t: xb.prod(),
    "cat": lambda m, x, w, xb, t: m.cat([x, xb]),
    "stack": lambda m, x, w, xb, t: m.stack([xb, xb]),
    "add": lambda m, x, w, xb, t: x + xb,
    "mm_int": lambda m, x, w, xb, t: t @ t,
    "mm_f64": lambda m, x, w, xb, t: x.double() @ w.double(),
    "Linear": lambda m, x, w, xb, t: m.nn.Linear(4, 3)(x),
    "MultiheadAttention": lambda m, x, w, xb, t: m.nn.MultiheadAttention(4, 2)(
        x[None], x[None], x[None])[0],
}


def _dt(r):
    return str(r.dtype).split(".")[-1]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_result_dtypes_match_torch_cpu_autocast(name, dtype):
    got = []
    for m in (tp, torch):
        x, w = m.tensor(X), m.tensor(W)
        args = (m, x, w, x.bfloat16(), m.tensor([0, 1, 2, 3]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with m.autocast("cpu", dtype=getattr(m, dtype)):
                try:
                    got.append(_dt(CASES[name](*args)))
                except RuntimeError as e:
                    # torch's promote lists know float32 and the region's
                    # dtype only: bfloat16 operands in a float16 region raise
                    assert m is torch and "Unexpected floating ScalarType" in str(e)
                    return
            got.append(_dt(CASES[name](*args)))      # outside: as before
    assert got[:2] == got[2:]


def test_values_are_the_explicit_casts():
    x, w = tp.tensor(X), tp.tensor(W)
    with tp.autocast("cpu"):
        y = x @ w
    np.testing.assert_array_equal(np.asarray(y.float().tolist()),
                                  np.asarray((x.bfloat16() @ w.bfloat16()).float().tolist()))
    tx, tw = torch.tensor(X), torch.tensor(W)
    with torch.autocast("cpu"):
        ty = tx @ tw
    np.testing.assert_allclose(np.asarray(y.float().tolist()), ty.float().numpy(), rtol=1e-2,
                               atol=1e-2)


def test_gradients_reach_float32_parameters():
    lin = tp.nn.Linear(4, 3)
    x = tp.tensor(X)
    with tp.autocast("cpu", dtype=tp.bfloat16):
        y = lin(x)
        loss = tp.nn.functional.mse_loss(y, tp.zeros(4, 3))
    assert y.dtype == tp.bfloat16 and loss.dtype == tp.float32
    loss.backward()
    assert lin.weight.grad.dtype == tp.float32 and lin.weight.grad.shape == (3, 4)


def test_nesting_disabling_decorator_and_state():
    x, w = tp.tensor(X), tp.tensor(W)
    assert not tp.is_autocast_enabled("cpu")
    with tp.autocast("cpu"):
        assert tp.is_autocast_enabled("cpu") and not tp.is_autocast_enabled("cuda")
        with tp.autocast("cpu", enabled=False):
            assert (x @ w).dtype == tp.float32
        with tp.autocast("cpu", dtype=tp.float16):
            assert (x @ w).dtype == tp.float16
            assert tp.get_autocast_dtype("cpu") == tp.float16
        assert (x @ w).dtype == tp.bfloat16
    assert (x @ w).dtype == tp.float32

    @tp.autocast("cpu")
    def f(a, b):
        return a @ b
    assert f(x, w).dtype == tp.bfloat16 and (x @ w).dtype == tp.float32
    with pytest.warns(UserWarning, match="CPU Autocast only supports dtypes"):
        with tp.autocast("cpu", dtype=tp.float64):
            assert (x @ w).dtype == tp.float32
    with pytest.raises(RuntimeError, match="unsupported autocast device_type"):
        tp.autocast("xla")
    assert tp.amp.autocast is tp.autocast


def test_compiled_function_inside_a_region_runs_eagerly():
    lin = tp.nn.Linear(4, 3)
    f = tp.compile(lambda x: lin(x).relu())
    x = tp.tensor(X)
    assert f(x).dtype == tp.float32
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with tp.autocast("cpu"):
            y = f(x)
    assert y.dtype == tp.bfloat16
    assert any("autocast" in str(r.message) for r in rec)
    assert f(x).dtype == tp.float32
    g = tp.compile(lambda x: lin(x), strict_native=True)
    g(x)
    with tp.autocast("cpu"):
        with pytest.raises(tp.compiler.NativeCompileError, match="autocast"):
            g(x)


def test_grad_scaler_skips_inf_steps_and_backs_off():
    results = []
    for m in (tp, torch):
        p = m.nn.Parameter(m.tensor([1.0, 2.0]))
        opt = m.optim.SGD([p], lr=0.1)
        sc = m.amp.GradScaler("cpu", init_scale=4.0, growth_interval=2)
        log = []
        for k, g in enumerate([[1.0, 1.0], [float("inf"), 1.0], [2.0, 0.0], [1.0, 1.0]]):
            opt.zero_grad()
            loss = (p * m.tensor(g)).sum()
            sc.scale(loss).backward()
            sc.step(opt)
            sc.update()
            log.append((sc.get_scale(), p.detach().tolist()))
        results.append(log)
    assert results[0] == results[1]
