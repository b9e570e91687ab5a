"""The bfloat16 and the attention (SDPA) NVRTC kernels on the GPU: compiled
on CUDA tensors (tp.compile renders CUDA C from the loop IR, NVRTC builds
it), against CPU eager. Without a GPU, tests/test_bfloat16.py and
tests/test_attention_kernel.py compile the same kernels to PTX / run them
through the LLVM back end."""
import math

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

RNG = np.random.default_rng(11)


def r(*s, dt=np.float32):
    return RNG.standard_normal(s).astype(dt)


def _flat(v):
    if isinstance(v, (tuple, list)):
        return [t for x in v for t in _flat(x)]
    return [v]


def compare(got, want, rtol, what=""):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.is_cuda, f"{what}: output {i} left the device"
        assert g.dtype == w.dtype and tuple(g.shape) == tuple(w.shape), (what, i)
        g, w = g.cpu(), w
        if g.dtype == tp.bfloat16:
            g, w = g.float(), w.float()
        g, w = g.numpy(), w.numpy()
        if g.dtype.kind in "biu":
            assert np.array_equal(g, w), (what, i)
            continue
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                   atol=rtol, equal_nan=True, err_msg=f"{what}: output {i}")


def run(fn, *xs, rtol):
    """fn compiled on CUDA copies of xs vs fn eager on the CPU; the program
    is an NVRTC one; returns it"""
    cf = tp.compile(fn, strict_native=True)
    got = cf(*[x.cuda() if isinstance(x, tp.Tensor) else x for x in xs])
    compare(got, fn(*xs), rtol, getattr(fn, "__name__", "fn"))
    prog = cf.versions[0].artifact
    assert getattr(prog, "backend", "nvrtc") == "nvrtc", prog
    return prog


# ----------------------------------------------------------------- bfloat16

BF16 = [
    lambda a: (a * 2 + 1).exp() * a,
    lambda a: (a.sum(-1), tp.softmax(a, -1), a.amax(-1), a.argmax(-1)),
    lambda a: (a.float() + 1, a.to(tp.float16), (a > 0).bfloat16()),
    lambda a: tp.nn.functional.layer_norm(a, (a.shape[-1],)) ** 0.3,
    lambda a: (a - 0.3, a * 0.3, a / 0.3, a.abs() ** 0.3, tp.where(a > 0, a, -a)),
]


@pytest.mark.parametrize("i", range(len(BF16)))
@pytest.mark.parametrize("shape", [(3, 4), (37, 129), (2, 5, 1000)])
def test_bfloat16_kernels_on_gpu_match_cpu_eager(i, shape):
    x = tp.tensor(r(*shape) * 3).bfloat16()
    x.reshape(-1)[0] = float("nan")
    if i != 3:      # layer_norm of a row holding 3e38: compiled NaN, eager 0 (on the CPU too)
        x.reshape(-1)[-1] = 3e38
    # one bfloat16 rounding apart (2^-8), a few more through exp/pow
    run(BF16[i], x, rtol=3e-2)


def test_bfloat16_special_values_round_as_the_host():
    x = tp.tensor([1.00390625, 255.5, 3.3963e38, 1e-40, float("nan"), -0.0, float("inf")])
    cf = tp.compile(lambda a: (a.bfloat16(), a.bfloat16().float() * 2), strict_native=True)
    got = cf(x.cuda())
    want = (x.bfloat16(), x.bfloat16().float() * 2)
    assert got[0].cpu().view(tp.int16).tolist() == want[0].view(tp.int16).tolist()
    compare(got[1], want[1], 0.0)


# --------------------------------------------------------------- attention

def sdpa(q, k, v, **kw):
    return F.scaled_dot_product_attention(q, k, v, **kw)


def attention_kernels(prog):
    ks = getattr(prog, "kernels", None)
    return None if ks is None else [k for k in ks if "attention" in k.name]


SHAPES = [((2, 3), 37, 37, 8, 5), ((1, 1), 1, 1, 4, 4), ((2,), 300, 300, 17, 9),
          ((1, 2), 5, 7, 8, 3), ((), 6, 9, 3, 2), ((2, 4), 128, 128, 64, 64)]


@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_sdpa_kernel_on_gpu_matches_cpu_eager(shape):
    bd, L, S, E, Ev = shape
    q, k, v = (tp.tensor(a) for a in (r(*bd, L, E), r(*bd, S, E), r(*bd, S, Ev)))
    prog = run(sdpa, q, k, v, rtol=2e-5)
    ak = attention_kernels(prog)
    assert ak is None or ak, "not one fused attention kernel"
    run(lambda q, k, v: sdpa(q, k, v, scale=0.3), q, k, v, rtol=2e-5)
    run(lambda q, k, v: sdpa(q, k, v, is_causal=True), q, k, v, rtol=2e-5)


@pytest.mark.parametrize("dt", [np.float64, np.float16])
def test_sdpa_dtypes_on_gpu(dt):
    q, k, v = (tp.tensor(a) for a in (r(2, 2, 40, 16, dt=dt), r(2, 2, 33, 16, dt=dt),
                                      r(2, 2, 33, 8, dt=dt)))
    tol = {np.float64: 1e-11, np.float16: 2e-2}[dt]
    run(sdpa, q, k, v, rtol=tol)
    run(lambda q, k, v: sdpa(q, k, v, is_causal=True), q, k, v, rtol=tol)


@pytest.mark.parametrize("mshape", [(5, 7), (2, 1, 5, 7), (7,)])
def test_sdpa_masks_on_gpu(mshape):
    q, k, v = (tp.tensor(a) for a in (r(2, 3, 5, 8), r(2, 3, 7, 8), r(2, 3, 7, 4)))
    bm = RNG.random(mshape) > 0.3
    bm[..., 0] = True
    run(lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), q, k, v, tp.tensor(bm), rtol=2e-5)
    run(lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), q, k, v, tp.tensor(r(*mshape)),
        rtol=2e-5)


def test_handwritten_causal_attention_on_gpu():
    def causal(q, k, v):
        T = q.size(-2)
        att = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        att = att.masked_fill(tp.triu(tp.ones(T, T, dtype=tp.bool, device=q.device),
                                      diagonal=1), float("-inf"))
        return att.softmax(-1) @ v

    q, k, v = (tp.tensor(r(2, 4, 33, 16)) for _ in range(3))
    run(causal, q, k, v, rtol=2e-5)
