"""Gather-like loads with a data-dependent index (index_select, gather,
embedding, x[idx], take, take_along_dim) in compiled programs: every back
end clamps the index into range (the loads never leave the tensor) and
adds one run-time range check per index tensor; a failed check reruns the
call eagerly, so an out-of-range index raises exactly eager's error (type
and message) instead of a silently clamped result.

Compiled CPU (LLVM, strict_native: the check is a native kernel) is run
against eager here; the NVRTC back end's lowering of the same programs is
checked without a GPU (the clamp, the check kernel, PTX).
tests/gpu/test_gpu_index_bounds.py runs the cases compiled on a GPU.
"""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay._C as C
import _index_bounds_cases as B
from _nvrtc import nvrtc_program

needs_nvrtc = pytest.mark.skipif(
    not C.nvrtc_available(),
    reason="libnvrtc not found (pip install nvidia-cuda-nvrtc-cu12)")

IDX_DTYPES = [tp.int64, tp.int32]
CASE_VALUES = [(case, v) for case in sorted(B.CASES) for v in B.index_values(case)]


def _native(cf):
    p = cf.versions[0].artifact
    assert p.fallbacks == 0, p
    assert any("index_check" in k.name for k in p.kernels), [k.name for k in p.kernels]
    return p


@pytest.mark.parametrize("idt", IDX_DTYPES, ids=str)
@pytest.mark.parametrize("case,values", CASE_VALUES)
def test_compiled_cpu_raises_eagers_error_or_matches(case, values, idt):
    fn = B.CASES[case][0]
    x = B.data(case)
    good = tp.tensor(B.index_values(case)["in_range"], dtype=idt)
    i = tp.tensor(B.index_values(case)[values], dtype=idt)
    cf = tp.compile(fn, strict_native=True)
    B.same(B.outcome(cf, x, good), B.outcome(fn, x, good))     # compiled on good values
    _native(cf)
    want = B.outcome(fn, x, i)
    if values in ("in_range", "negative_in_range"):
        assert want[0] == "ok"
    else:
        assert want[0] in (IndexError, RuntimeError), want
    B.same(B.outcome(cf, x, i), want)
    # and again: the program stays (a failed check does not recompile)
    B.same(B.outcome(cf, x, good), B.outcome(fn, x, good))
    assert len(cf.versions) == 1


@pytest.mark.parametrize("case", sorted(B.CASES))
def test_compiled_cpu_first_call_out_of_range(case):
    """compiled on an out-of-range index: eager's error, then good calls run"""
    fn = B.CASES[case][0]
    x = B.data(case)
    bad = tp.tensor(B.index_values(case)["one_past_the_end"])
    good = tp.tensor(B.index_values(case)["in_range"])
    cf = tp.compile(fn, strict_native=True)
    B.same(B.outcome(cf, x, bad), B.outcome(fn, x, bad))
    B.same(B.outcome(cf, x, good), B.outcome(fn, x, good))


def test_compiled_cpu_never_reads_out_of_bounds_before_the_check():
    """an index far outside the tensor (2**40): the clamped loads stay in
    bounds (no crash), the check raises eager's error"""
    x = tp.randn(4, 3)
    fn = lambda x, i: x.index_select(0, i) * 2
    cf = tp.compile(fn, strict_native=True)
    cf(x, tp.tensor([0, 1]))
    for v in (2 ** 40, -(2 ** 40), 2 ** 62):
        i = tp.tensor([1, v])
        B.same(B.outcome(cf, x, i), B.outcome(fn, x, i))


def test_mask_index_matches_eager():
    """a bool mask (data-dependent shape) gives eager's results and errors"""
    fn = lambda x, m: x[m] * 2
    x = tp.randn(4, 3)
    cf = tp.compile(fn)
    for m in (tp.tensor([True, False, True, True]), tp.tensor([True, False, True])):
        B.same(B.outcome(cf, x, m), B.outcome(fn, x, m))


def test_constant_and_arange_indices_need_no_check():
    """an index the program holds (a constant, an arange) is checked when
    compiling: no check kernel"""
    x = tp.randn(5, 3)
    for fn in (lambda x: x.index_select(0, tp.arange(3)) * 2,
               lambda x: x[tp.tensor([0, -1, 2])] + 1,
               lambda x: tp.gather(x, 1, tp.tensor([[0], [2], [1], [1], [0]])) + 1):
        cf = tp.compile(fn, strict_native=True)
        np.testing.assert_array_equal(cf(x).numpy(), fn(x).numpy())
        p = cf.versions[0].artifact
        assert not any("index_check" in k.name for k in p.kernels), [k.name for k in p.kernels]


def test_provably_in_range_made_index_needs_no_check():
    """arange minus 0 or 5 (a clamped input): in [-5, 5), which x[...]
    wraps: proved when compiling, no check kernel; eager's results"""
    fn = lambda x, i: x[tp.arange(5) - i.clamp(0, 1) * 5] + 1
    x = tp.randn(5, 3)
    cf = tp.compile(fn, strict_native=True)
    for v in ([0], [1], [9], [-4]):
        i = tp.tensor(v)
        B.same(B.outcome(cf, x, i), B.outcome(fn, x, i))
    p = cf.versions[0].artifact
    assert p.fallbacks == 0 and len(cf.versions) == 1
    assert not any("index_check" in k.name for k in p.kernels), [k.name for k in p.kernels]


# indices made in the program whose range the lowering bounds but cannot
# prove inside [0, 5): each keeps its check (the proof is sound)
MADE = {
    "clamp_to_n": (lambda x, i: x.index_select(0, i.clamp(0, 5)) * 2, [1, 2], [1, 7]),
    "clamp_to_minus_one": (lambda x, i: x.index_select(0, i.clamp(-1, 4)) * 2, [1, 2], [-3, 0]),
    "where_of_aranges": (lambda x, i: x.index_select(
        0, tp.where(i > 100, tp.arange(5) + 1, tp.arange(5))) * 2, [0] * 5, [0, 0, 0, 0, 101]),
    "arange_shifted": (lambda x, i: x[tp.arange(5) - i.clamp(0, 1) * 6] + 1, [0], [1]),
}


@pytest.mark.parametrize("name", sorted(MADE))
def test_program_made_index_out_of_range_keeps_its_check(name):
    fn, good, bad = MADE[name]
    x = tp.randn(5, 3)
    cf = tp.compile(fn, strict_native=True)
    good, bad = tp.tensor(good), tp.tensor(bad)
    B.same(B.outcome(cf, x, good), B.outcome(fn, x, good))
    _native(cf)
    want = B.outcome(fn, x, bad)
    assert want[0] in (IndexError, RuntimeError), want
    B.same(B.outcome(cf, x, bad), want)


# ------------------------------------------------------------ NVRTC lowering

@needs_nvrtc
@pytest.mark.parametrize("idt", IDX_DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(B.CASES))
def test_nvrtc_gathers_are_clamped_and_checked_once(case, idt):
    fn, _, good, n, wraps = B.CASES[case]
    p = nvrtc_program(fn, B.data(case), tp.tensor(good, dtype=idt))
    # one check per index tensor however many loads read it ("two_uses")
    checks = [k for k in p.kernels if "index_check" in k.name]
    assert len(checks) == 1, [k.name for k in p.kernels]
    ir = checks[0].loop_ir
    assert ir.count("any[bool](or(lt(") == 1, ir
    assert f", {n})))" in ir, ir
    if wraps:
        assert f"neg({n})" in ir or f", -{n})" in ir, ir
    else:
        assert ", 0), ge(" in ir, ir
    # every gathered load goes through the clamp into [0, n)
    loads = "\n".join(k.loop_ir for k in p.kernels)
    assert "min(max(" in loads, loads
    assert f", {n - 1}))" in loads or f"sub({n}, 1)))" in loads, loads
    for k in p.kernels:
        ptx = C.nvrtc_compile(k.source, k.name + ".cu", "compute_90")
        assert ".entry " + k.name in ptx
        cubin = C.nvrtc_compile(k.source, k.name + ".cu", "sm_90")
        assert isinstance(cubin, bytes) and len(cubin) > 0


@needs_nvrtc
def test_nvrtc_constant_index_has_no_check():
    x = tp.randn(5, 3)
    p = nvrtc_program(lambda x: x.index_select(0, tp.tensor([1, 4])) * 2, x)
    assert not any("index_check" in k.name for k in p.kernels)
    p = nvrtc_program(lambda x: x[tp.arange(5) - 5] * 2, x)
    assert not any("index_check" in k.name for k in p.kernels)


@needs_nvrtc
def test_nvrtc_two_index_tensors_two_checks():
    """one check per index tensor: two tensors, two checks (one kernel may
    hold both)"""
    x = tp.randn(5, 3)
    p = nvrtc_program(lambda x, i, j: x.index_select(0, i) + x.index_select(0, j),
                       x, tp.tensor([1, 2]), tp.tensor([0, 3]))
    ir = "\n".join(k.loop_ir for k in p.kernels if "index_check" in k.name)
    assert ir.count("any[bool](or(lt(") == 2, ir
