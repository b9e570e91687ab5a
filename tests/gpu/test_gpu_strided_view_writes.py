"""Compiled writes through diagonal / unfold / movedim / as_strided views on
CUDA tensors: the as_strided_scatter index map (csrc/lower/lower_movement.c)
renders to CUDA C as to LLVM; strict, so no host step; equal to CPU eager.

    sh scripts/gpu/build.sh .gpu python3 -m pytest tests/gpu   # on a GPU machine
"""
import pytest

import tensorplay as tp

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

VIEWS = {
    "diagonal": lambda v: v.diagonal(1),
    "movedim": lambda v: v.movedim(0, 1),
    "unfold": lambda v: v.unfold(1, 2, 2),
    "sliced_diagonal": lambda v: v[1:, :].diagonal(),
    "as_strided": lambda v: v.as_strided((2, 2), (5, 2), 1),
}


@pytest.mark.parametrize("dtype", [tp.float32, tp.float16, tp.int64], ids=str)
@pytest.mark.parametrize("vk", sorted(VIEWS))
def test_compiled_write_through_a_strided_view_on_cuda(vk, dtype):
    def f(x0):
        v1 = x0 * 2
        VIEWS[vk](v1).add_(3)
        return v1
    x = (tp.arange(20) - 7).reshape(4, 5).to(dtype)
    got = tp.compile(f, strict_native=True)(x.cuda())
    assert got.is_cuda
    assert tp.equal(got.cpu(), f(x))
