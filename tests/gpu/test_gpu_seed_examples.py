"""The design card's examples (/work/shared/seeds/000_11614f4b0a8e340b.txt,
Examples 1.1, 2.1, 2.2, 3.2, 3.3, 4.1-4.4) on CUDA tensors, compiled, with
the card's own numbers: the same results and specialization versions as the
card states for the CPU, outputs on the device, no host fallback."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

DEV = "cuda"


def close(got, want, tol=1e-5):
    assert got.device.type == DEV, "result left the device"
    np.testing.assert_allclose(got.cpu().double().numpy(), want.double().numpy(), rtol=tol,
                               atol=tol)


class no_fallback:
    def __enter__(self):
        self.before = dict(tp.cuda.host_fallbacks()) if DEV == "cuda" else {}

    def __exit__(self, *exc):
        if exc[0] is None and DEV == "cuda":
            assert tp.cuda.host_fallbacks() == self.before, tp.cuda.host_fallbacks()


def test_example_1_1_fused_relu_mul_sum():
    def f(x, w):
        return (tp.relu(x + w) * 2).sum(-1)

    tp.manual_seed(0)
    x, w = tp.randn(64, 128), tp.randn(64, 128)
    cf = tp.compile(f, strict_native=True)
    with no_fallback():
        y = cf(x.to(DEV), w.to(DEV))
        assert tuple(y.shape) == (64,)
        close(y, f(x, w))
        close(cf(w.to(DEV), x.to(DEV)), f(w, x))
    assert cf.stats()["compiles"] == 1


def test_example_2_1_scalar_values_and_zero_dim_tensors():
    def g(x, k):
        return x * k

    x = tp.arange(6.0).reshape(2, 3)
    cg = tp.compile(g)
    close(cg(x.to(DEV), 3), x * 3)
    close(cg(x.to(DEV), 4), x * 4)
    assert cg.stats()["versions"] == 2               # k enters sigma by value
    ct = tp.compile(g)
    close(ct(x.to(DEV), tp.tensor(3.0).to(DEV)), x * 3)
    close(ct(x.to(DEV), tp.tensor(4.0).to(DEV)), x * 4)
    assert ct.stats()["versions"] == 1               # read from the tensor at run time


def test_example_2_2_lifted_global_sees_in_place_change():
    scale = tp.ones(128, device=DEV)

    def f(x):
        return x * scale

    x = tp.arange(128.0)
    cf = tp.compile(f)
    close(cf(x.to(DEV)), x)
    scale.mul_(2)
    close(cf(x.to(DEV)), x * 2)                      # reflects the modified scale
    assert cf.stats()["versions"] == 1


def test_example_3_2_data_gate_versions():
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x - 1

    cf = tp.compile(f, strict_native=True)
    with no_fallback():
        a = cf(tp.ones(4, 8, device=DEV))
        b = cf(-2 * tp.ones(4, 8, device=DEV))
        c = cf(tp.ones(6, 8, device=DEV))
    close(a, tp.full((4, 8), 2.0))                   # all 2
    close(b, tp.full((4, 8), -3.0))                  # all -3
    close(c, tp.full((6, 8), 2.0))                   # all 2
    assert cf.stats()["versions"] == 3


def test_example_3_3_int_value_versus_gate():
    def f1(x):
        n = int(x.sum())
        return x * n

    def f2(x):
        n = tp.graph.gate(x.sum())
        return x * n

    c1, c2 = tp.compile(f1), tp.compile(f2)
    for c in (c1, c2):
        r1 = c(tp.ones(2, 3, device=DEV))
        r2 = c(2 * tp.ones(2, 3, device=DEV))
        assert r1.device.type == DEV and r2.device.type == DEV
        assert r1[0, 0].item() == 6 and r2[0, 0].item() == 24     # first elements 6 and 24
    assert c1.stats()["versions"] == 2 and c2.stats()["versions"] == 1


def test_example_4_1_and_4_2_normalized_graphs_compute_the_same():
    def n(x):
        return (2 * x + 0).exp()

    def s(x):
        y = x * 3
        return F.selu(y) + F.selu(y * 1) * 2

    x = tp.linspace(-2, 2, 40).reshape(4, 10)
    with no_fallback():
        close(tp.compile(n, strict_native=True)(x.to(DEV)), n(x))
        close(tp.compile(s, strict_native=True)(x.to(DEV)), s(x))


def test_example_4_3_layer_norm_and_mse_loss():
    tp.manual_seed(1)
    x, y = tp.randn(5, 8), tp.randn(5, 8)
    w, b = tp.randn(8), tp.randn(8)

    def ln(x, w, b):
        return F.layer_norm(x, (8,), w, b)

    def mse(x, y):
        return F.mse_loss(x, y)

    with no_fallback():
        close(tp.compile(ln, strict_native=True)(x.to(DEV), w.to(DEV), b.to(DEV)), ln(x, w, b))
        close(tp.compile(mse, strict_native=True)(x.to(DEV), y.to(DEV)), mse(x, y))


def test_example_4_4_in_place_updates_reach_the_inputs():
    def f(x, y):
        x.mul_(2)
        y[0].add_(1)
        return x + y

    x0, y0 = tp.arange(6.0).reshape(2, 3), tp.ones(2, 3)
    xe, ye = x0.clone(), y0.clone()
    want = f(xe, ye)
    xc, yc = x0.to(DEV), y0.to(DEV)
    vx, vy = xc._version, yc._version
    with no_fallback():
        got = tp.compile(f)(xc, yc)
    close(got, want)
    close(xc, xe)                                    # x doubled
    close(yc, ye)                                    # row 0 of y plus one
    assert xc._version > vx and yc._version > vy
