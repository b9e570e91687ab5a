"""Device transfers inside a compiled function.

A native program runs the kernels of one device (its inputs'); a call
inside the function whose value lives on another device (y.cpu() of a CUDA
tensor, x.cuda() of a CPU one) is refused by the lowering
(csrc/lower/program_build.c: refuse_foreign_device), so that version runs
eagerly and strict_native raises NativeCompileError naming the call.
Before, y.cpu() in a CUDA program ran as an eager step whose host buffer
the next kernel read as a device pointer (CUDA_ERROR_ILLEGAL_ADDRESS on the
H200). The CUDA cases run in tests/gpu/test_gpu_first_call.py (ISOLATED);
here: transfers to the program's own device are no-ops and stay native.
"""
import numpy as np
import pytest

import tensorplay as tp


def _x(*shape):
    return tp.from_numpy(np.random.default_rng(3).standard_normal(shape).astype(np.float32))


SAME_DEVICE = [
    ("cpu", lambda x: (x * 3 + 1).cpu().sum(0)),
    ("to_str", lambda x: (x * 3 + 1).to("cpu") - 1),
    ("to_kw", lambda x: (x * 2).to(device="cpu").amax(-1)),
    ("to_device", lambda x: tp.relu(x).to(tp.device("cpu")) * x),
    ("both_outputs", lambda x: (x + 1, (x + 1).cpu() * 2)),
    ("scalar_tensor", lambda x: x * tp.tensor(2.5).cpu() + 1),
]


@pytest.mark.parametrize("name,fn", SAME_DEVICE, ids=[c[0] for c in SAME_DEVICE])
def test_transfer_to_the_programs_own_device_stays_native(name, fn):
    x = _x(6, 33)
    got = tp.compile(fn, strict_native=True)(x)
    want = fn(x)
    if isinstance(want, tuple):
        for g, w in zip(got, want):
            assert not g.is_cuda
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, atol=1e-6)
    else:
        assert not got.is_cuda
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)

