"""Compiled float -> integer casts on CUDA (issue 14): the NVRTC kernel's
conversion of a float to int32/int64/uint8 (uint8 of a negative float
saturated to 0 before: the low byte of the int64 is torch's) (negatives, fractions, values past
uint8's range; no NaN, all within int32) equals eager CUDA (a kernel of its
own, tests/gpu/test_cuda_gpuops.py), the CPU and torch's CUDA rule
(tests/_cuda_data.py::cuda_int_rule), alone and fused with arithmetic, on
contiguous and transposed inputs.

    sh scripts/gpu/build.sh .gpu python3 -m pytest tests/gpu   # on a GPU machine
"""
import numpy as np
import pytest

import tensorplay as tp

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

from _cuda_data import cuda_int_rule  # noqa: E402

EDGES = [-0.0, 0.0, -0.5, 0.5, -0.99, 0.99, -1.0, 1.0, -1.5, 2.9, -2.9, 127.9, -128.5, -129.0,
         255.5, -255.9, 256.0, -256.0, 300.7, -300.5, 1000.25, -1000.25, 65504.0, -65504.0,
         70000.5, -70000.5, 2.0 ** 24, -2.0 ** 24]


def _values(src):
    rng = np.random.default_rng(11)
    v = EDGES + list(np.round(rng.uniform(-1200, 1200, size=292), 2))
    if src in ("float16", "bfloat16"):
        v = [x for x in v if abs(x) <= 30000]   # x + x stays finite
    v = v[:8 * (len(v) // 8)]
    return tp.tensor(v, dtype=tp.float64).to(getattr(tp, src)).reshape(8, -1)


FORMS = {
    "alone": lambda a, dt: a.to(dt),
    "doubled": lambda a, dt: (a + a).to(dt),          # exact in every float dtype
    "negated_then_int_add": lambda a, dt: (-a).to(dt) + 1,
}


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("layout", ["contig", "T"])
@pytest.mark.parametrize("src", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("dst", ["int32", "int64", "uint8"])
def test_compiled_float_to_int_on_cuda_matches_eager_cuda_and_cpu(form, layout, src, dst):
    x = _values(src)
    xc = x.cuda()
    if layout == "T":
        x, xc = x.t(), xc.t()
        assert not xc.is_contiguous()
    dt = getattr(tp, dst)
    fn = FORMS[form]
    cf = tp.compile(lambda a: fn(a, dt), strict_native=True)
    got = cf(xc)
    assert got.is_cuda and got.dtype == dt
    st = cf.stats()
    assert not st.get("fallbacks"), st
    eager_cuda = fn(xc, dt)
    cpu = fn(x, dt)
    g = got.cpu().tolist()
    assert g == eager_cuda.cpu().tolist()
    assert g == cpu.tolist()
    # the rule torch's CUDA kernels follow, element by element
    pre = {"alone": x, "doubled": x + x, "negated_then_int_add": -x}[form]
    want = [cuda_int_rule(v, dst, src) for v in pre.double().flatten().tolist()]
    if form == "negated_then_int_add":
        want = [(w + 1) & 0xFF if dst == "uint8" else w + 1 for w in want]
    assert [v for row in g for v in row] == want
