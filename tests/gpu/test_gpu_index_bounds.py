"""Gather-like loads with a data-dependent index compiled on CUDA (issue
14: no silent wrong answer): index_select, gather, embedding, x[idx] (with
negative indices counted from the end), take, take_along_dim, int64 and
int32 indices. The kernels clamp the index (the loads never leave the
tensor) and one check kernel per index tensor flags an index out of range;
the program reads the flag after its last step and reruns the call
eagerly, so the compiled call raises exactly eager CUDA's error (type and
message, the same as eager CPU's) and good indices give eager's results.
strict_native=True: no fallback. The CPU-side twin (the same cases
compiled on the CPU, and the NVRTC lowering's clamp, check and PTX):
tests/test_compiled_index_bounds.py.

    python3 -m pytest tests/gpu/test_gpu_index_bounds.py     # on a GPU machine
"""
import numpy as np
import pytest

import tensorplay as tp

pytestmark = pytest.mark.skipif(not tp.cuda.is_available(),
                                reason="needs an NVIDIA GPU and its driver (libcuda)")

import _index_bounds_cases as B  # noqa: E402
from _helpers import kernel_names  # noqa: E402

IDX_DTYPES = [tp.int64, tp.int32]
CASE_VALUES = [(case, v) for case in sorted(B.CASES) for v in B.index_values(case)]


@pytest.mark.parametrize("idt", IDX_DTYPES, ids=str)
@pytest.mark.parametrize("case,values", CASE_VALUES)
def test_compiled_cuda_raises_eagers_error_or_matches(case, values, idt):
    fn = B.CASES[case][0]
    x = B.data(case)
    xd = x.cuda()
    good = tp.tensor(B.index_values(case)["in_range"], dtype=idt)
    i = tp.tensor(B.index_values(case)[values], dtype=idt)
    cf = tp.compile(fn, strict_native=True)
    got = B.outcome(cf, xd, good.cuda())              # compiled on good values
    B.same(got, B.outcome(fn, x, good))
    assert not cf.stats().get("fallbacks"), cf.stats()
    assert any("index_check" in n for n in kernel_names(cf)), kernel_names(cf)
    want_host = B.outcome(fn, x, i)
    want_dev = B.outcome(fn, xd, i.cuda())
    B.same(want_dev, want_host)                       # eager CUDA is eager CPU
    B.same(B.outcome(cf, xd, i.cuda()), want_dev)
    # the program still serves good indices, and was not recompiled
    B.same(B.outcome(cf, xd, good.cuda()), B.outcome(fn, x, good))
    assert len(cf.versions) == 1


@pytest.mark.parametrize("case", sorted(B.CASES))
def test_compiled_cuda_first_call_out_of_range(case):
    fn = B.CASES[case][0]
    x = B.data(case)
    bad = tp.tensor(B.index_values(case)["one_past_the_end"])
    good = tp.tensor(B.index_values(case)["in_range"])
    cf = tp.compile(fn, strict_native=True)
    B.same(B.outcome(cf, x.cuda(), bad.cuda()), B.outcome(fn, x, bad))
    B.same(B.outcome(cf, x.cuda(), good.cuda()), B.outcome(fn, x, good))


def test_far_out_of_range_index_reads_nothing_out_of_bounds():
    """indices far outside the tensor (2**40, 2**62): the clamped loads stay
    in bounds (no illegal address: the context lives on), eager's error"""
    fn = lambda x, i: x.index_select(0, i) * 2
    x = tp.randn(4, 3)
    cf = tp.compile(fn, strict_native=True)
    cf(x.cuda(), tp.tensor([0, 1]).cuda())
    for v in (2 ** 40, -(2 ** 40), 2 ** 62):
        i = tp.tensor([1, v])
        B.same(B.outcome(cf, x.cuda(), i.cuda()), B.outcome(fn, x, i))
    got = cf(x.cuda(), tp.tensor([3, 0]).cuda())
    np.testing.assert_array_equal(got.cpu().numpy(), fn(x, tp.tensor([3, 0])).numpy())
    tp.cuda.synchronize()
