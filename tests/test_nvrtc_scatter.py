"""The scatter family on a back end with combining stores (the NVRTC back
ends: STAX_BE_ATOMIC_STORES), checked without a GPU: programs lowered as
tp.compile lowers them with every kernel handed to NVRTC
(tests/_nvrtc.py). scatter / scatter_add / scatter_reduce / index_add /
index_copy / index_fill become kernels, not the CPU's sequential ST_SCATTER
step (which a device program could not run): a range check of the index,
a copy of self, for include_self=False a kernel setting the positions the
index reaches to the combine's identity, then one thread per visited
element combining into out at its index (atomicAdd, atomicMax/Min for
integers, a compare-and-swap loop for products and float max/min, a plain
store for the "last writer" ops). Every rendered kernel compiles with
NVRTC to PTX and to a CUBIN for sm_90.

tests/gpu/test_gpu_compiled_scatter.py runs the same programs on a GPU
against CPU eager.
"""
import re

import numpy as np
import pytest

import tensorplay as tp
import tensorplay._C as C
import _scatter_cases as SC
from _nvrtc import nvrtc_program

needs_nvrtc = pytest.mark.skipif(
    not C.nvrtc_available(),
    reason="libnvrtc not found (pip install nvidia-cuda-nvrtc-cu12)")

DTYPES = [tp.float32, tp.float64, tp.int32, tp.int64]
IDX = [[0, 1, 1, 5], [4, 4, 4, 4], [2, 0, 3, 3]]


def _data(dt):
    g = tp.Generator().manual_seed(3)
    x = (tp.randn(4, 6, generator=g) * 10).to(dt)
    s = (tp.randn(3, 4, generator=g) * 10).to(dt)
    return x, tp.tensor(IDX), s


# name -> (fn, label of the combining kernel, its helper, has an init kernel)
CASES = {
    "scatter": (lambda x, i, s: x.scatter(1, i, s), "scatter_set", None, False),
    "scatter_value": (lambda x, i, s: x.scatter(1, i, 3), "scatter_set", None, False),
    "scatter_add": (lambda x, i, s: x.scatter_add(1, i, s), "scatter_add", "add", False),
    "scatter_multiply": (lambda x, i, s: x.scatter(1, i, s, reduce="multiply"),
                         "scatter_mul", "mul", False),
    "scatter_add_value": (lambda x, i, s: x.scatter(1, i, 2, reduce="add"),
                          "scatter_add", "add", False),
    "index_add": (lambda x, i, s: x.index_add(0, i[1, :3] - 1, x[:3] * 2, alpha=3),
                  "scatter_add", "add", False),
    "index_copy": (lambda x, i, s: x.index_copy(1, i[0, :2] + 2, x[:, :2] * 2),
                   "scatter_set", None, False),
    "index_fill": (lambda x, i, s: x.index_fill(1, i[2] - 3, 7), "scatter_set", None, False),
}
for _red, _lab, _fn in (("sum", "scatter_add", "add"), ("prod", "scatter_mul", "mul"),
                        ("mean", "scatter_mean", "add"), ("amax", "scatter_amax", "max"),
                        ("amin", "scatter_amin", "min")):
    for _inc in (True, False):
        CASES[f"scatter_reduce_{_red}_{_inc}"] = (
            (lambda r, inc: lambda x, i, s: x.scatter_reduce(1, i, s, r, include_self=inc))(
                _red, _inc), _lab, _fn, not _inc)

# the PTX instruction of each helper and dtype: hardware atomics where they
# exist, a compare-and-swap loop otherwise
PTX = {("add", "float32"): "atom.global.add.f32", ("add", "float64"): "atom.global.add.f64",
       ("add", "int32"): "atom.global.add.u32", ("add", "int64"): "atom.global.add.u64",
       ("max", "int32"): "atom.global.max.s32", ("max", "int64"): "atom.global.max.s64",
       ("min", "int32"): "atom.global.min.s32", ("min", "int64"): "atom.global.min.s64"}


def _ptx_op(fn, dt):
    name = str(dt).split(".")[-1]
    if (fn, name) in PTX:
        return PTX[(fn, name)]
    return "atom.global.cas.b64" if name in ("float64", "int64") else "atom.global.cas.b32"


@needs_nvrtc
@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_scatter_family_lowers_to_atomic_kernels_that_compile(case, dt):
    fn, label, helper, init = CASES[case]
    p = nvrtc_program(fn, *_data(dt))
    # kernels only: no sequential host step
    assert all(s.startswith("kernel ") for s in p.steps), p.steps
    names = [k.name for k in p.kernels]
    pat = re.compile(r"scatter_(self|init|set|add|mul|mean|amax|amin)\b")
    order = [pat.search(n).group(0) for n in names if pat.search(n)]
    want = ["scatter_self"] + (["scatter_init"] if init else []) + [label]
    assert order == want, names
    k = [k for k in p.kernels if label in k.name][-1]
    if helper is None:
        assert "stax_atomic" not in k.source.split('extern "C"')[1]
        assert " = " in k.loop_ir and "atomic" not in k.loop_ir
    else:
        body = k.source.split('extern "C"')[1]
        assert f"stax_atomic_{helper}(&buf" in body
        sym = {"add": "atomic+=", "mul": "atomic*=", "max": "atomic max=",
               "min": "atomic min="}[helper]
        assert sym in k.loop_ir
        ptx = C.nvrtc_compile(k.source, k.name + ".cu", "compute_90")
        assert _ptx_op(helper, dt) in ptx
    for kk in p.kernels:
        cubin = C.nvrtc_compile(kk.source, kk.name + ".cu", "sm_90")
        assert isinstance(cubin, bytes) and len(cubin) > 0


@needs_nvrtc
def test_scatter_index_is_clamped_and_range_checked():
    """every store stays in bounds (the index clamped into [0, n)); a check
    kernel flags an index out of range (the program's runtime check, whose
    rerun raises eager's error)"""
    x, i, s = _data(tp.float32)
    p = nvrtc_program(lambda x, i, s: x.scatter_add(1, i, s), x, i, s)
    check = [k for k in p.kernels if "index_check" in k.name]
    assert len(check) == 1
    assert "ge(buf0[" in check[0].loop_ir and ", 6)" in check[0].loop_ir
    k = [k for k in p.kernels if "scatter_add" in k.name][0]
    assert "int(min(max(buf" in k.loop_ir and ", 0), 5))]" in k.loop_ir


@needs_nvrtc
def test_scatter_kernels_keep_their_order_and_fuse_with_nothing():
    """out's buffer is written by three kernels in turn: a consumer of the
    result runs after the combining kernel (never merged into the copy of
    self, which would read out before the atomics), and self's producer is
    inlined into the copy"""
    x, i, s = _data(tp.float32)
    p = nvrtc_program(lambda x, i, s: (x * 2 + 1).scatter_reduce(1, i, s, "amax",
                                                            include_self=False).exp() + x,
                 x, i, s)
    names = [k.name for k in p.kernels]
    pos = {w: next(j for j, n in enumerate(names) if w in n)
           for w in ("scatter_self", "scatter_init", "scatter_amax")}
    assert pos["scatter_self"] < pos["scatter_init"] < pos["scatter_amax"] == len(names) - 2, names
    copy = p.kernels[pos["scatter_self"]].loop_ir
    assert "mul(" in copy or "fma(" in copy, copy          # x * 2 + 1 computed there
    assert "exp(" in p.kernels[-1].loop_ir


@needs_nvrtc
def test_scatter_mean_divides_by_the_counts_where_read():
    x, i, s = _data(tp.float32)
    p = nvrtc_program(lambda x, i, s: x.scatter_reduce(1, i, s, "mean", include_self=False), x, i, s)
    k = [k for k in p.kernels if "scatter_mean" in k.name][0]
    assert k.loop_ir.count("atomic+=") == 2        # the sums and the counts
    last = p.kernels[-1].loop_ir
    assert "div(" in last and "max(" in last, last
    x, i, s = _data(tp.int64)
    p = nvrtc_program(lambda x, i, s: x.scatter_reduce(1, i, s, "mean"), x, i, s)
    assert "floordiv(" in p.kernels[-1].loop_ir


@needs_nvrtc
@pytest.mark.parametrize("shape,dim", [((5, 4, 3), 0), ((5, 4, 3), 1), ((5, 4, 3), -1)])
def test_scatter_3d_dims_compile(shape, dim):
    x = tp.randn(*shape)
    n = shape[dim]
    ish = list(shape)
    ish[dim] = 7
    ish[(dim + 1) % 3] -= 1                      # an index smaller than self off dim
    i = tp.randint(0, n, tuple(ish))
    s = tp.randn(*ish)
    p = nvrtc_program(lambda x, i, s: x.scatter_reduce(dim, i, s, "sum", include_self=False),
                 x, i, s)
    assert all(st.startswith("kernel ") for st in p.steps)
    for k in p.kernels:
        C.nvrtc_compile(k.source, k.name + ".cu", "sm_90")


def test_cpu_scatter_step_checks_its_index_at_run_time():
    """the CPU's sequential step takes the index as it is (no gather through
    arange): the lowering's check reruns an out-of-range call eagerly"""
    cf = tp.compile(lambda x, i, s: x.index_add(0, i, s), strict_native=True)
    x, s = tp.zeros(4, 2), tp.ones(3, 2)
    assert cf(x, tp.tensor([0, 3, 3]), s).tolist() == [[1, 1], [0, 0], [0, 0], [2, 2]]
    steps = cf.versions[0].artifact.steps
    assert "scatter" in steps and not any("index_select" in st for st in steps), steps
    with pytest.raises(IndexError) as e:
        cf(x, tp.tensor([0, 4, 1]), s)
    with pytest.raises(IndexError) as e2:
        x.index_add(0, tp.tensor([0, 4, 1]), s)
    assert str(e.value) == str(e2.value)


# ---------------------------------------------- the GPU test's cases on the CPU
# tests/gpu/test_gpu_compiled_scatter.py compares compiled CUDA with CPU
# eager through tests/_scatter_cases.py; here the same cases compiled on the
# CPU (the sequential step) go through the same checks, so that the cases
# and the checks are known good before a GPU runs them.

@pytest.mark.parametrize("dt", SC.DTYPES)
@pytest.mark.parametrize("mode", sorted(SC.MODES))
def test_gpu_cases_compiled_on_cpu_pass_their_checks(mode, dt):
    fn, x, i, s, visited = SC.case(mode, dt, (4, 5, 6), 1)
    cf = tp.compile(fn, strict_native=True)
    got = cf(x, i, s)
    SC.check(mode, got, fn(x, i, s), x, i, s, visited)
    assert "scatter" in cf.versions[0].artifact.steps


@pytest.mark.parametrize("shape,dim", SC.SHAPES, ids=str)
@pytest.mark.parametrize("mode", ["scatter", "index_add_alpha", "index_fill",
                                  "scatter_reduce_mean_False"])
def test_gpu_case_shapes_on_cpu(mode, shape, dim):
    fn, x, i, s, visited = SC.case(mode, "float64", shape, dim)
    got = tp.compile(fn, strict_native=True)(x, i, s)
    SC.check(mode, got, fn(x, i, s), x, i, s, visited)
    fn, x, i, s, visited = SC.case(mode, "float64", shape, dim, unique=True)
    got = tp.compile(fn, strict_native=True)(x, i, s)
    assert np.array_equal(got.numpy(), fn(x, i, s).numpy(), equal_nan=True)


def test_gpu_case_checks_catch_wrong_results():
    """the checks fail on a wrong answer (a position off by one ulp, a
    value nobody wrote)"""
    fn, x, i, s, visited = SC.case("scatter_add", "float32", (6, 9), 1)
    want = fn(x, i, s)
    bad = want.clone()
    bad[0, 0] += 1e-3
    with pytest.raises(AssertionError):
        SC.check("scatter_add", bad, want, x, i, s, visited)
    fn, x, i, s, visited = SC.case("scatter", "int64", (6, 9), 1)
    want = fn(x, i, s)
    bad = want.clone()
    bad[0, 0] = 100
    with pytest.raises(AssertionError):
        SC.check("scatter", bad, want, x, i, s, visited)


@needs_nvrtc
def test_combine_is_part_of_the_compile_cache_key():
    """amax and amin kernels differ only in their stores' combine: the
    second is compiled, not loaded as the first's object code"""
    if not tp.compiler.cache_info()["enabled"]:
        pytest.skip("the persistent compile cache is off")
    g = tp.Generator().manual_seed(5)
    x, s = tp.randn(7, 13, generator=g), tp.randn(7, 5, generator=g)
    i = tp.randint(0, 13, (7, 5), generator=g)
    nvrtc_program(lambda x, i, s: x.scatter_reduce(1, i, s, "amax"), x, i, s)
    before = C._cache_counters()
    nvrtc_program(lambda x, i, s: x.scatter_reduce(1, i, s, "amin"), x, i, s)
    hits, misses, compiles = (a - b for a, b in zip(C._cache_counters(), before))
    assert compiles == 1 and hits >= 2, (hits, misses, compiles)


def test_eager_cuda_kernel_check_failure_raises_eagers_error_from_the_host(monkeypatch):
    """an eager CUDA op's generated kernel whose run-time check fails (an
    index out of range) is run again on the host, quietly, which raises
    eager's error (no warning, no fallback counted, also under strict)"""
    from tensorplay.cuda import _eager

    class Prog:
        def __call__(self, *ts):
            e = IndexError("index out of range in self")
            e._stax_rerun = True
            raise e

    def spec(v, tensors):
        if isinstance(v, tp.Tensor):
            tensors.append(v)
            return ("T", tuple(v.shape))
        return (type(v).__name__, v)

    monkeypatch.setattr(_eager, "_spec", spec)
    monkeypatch.setattr(_eager, "_build", lambda *a: Prog())
    monkeypatch.setattr(_eager, "_kernels", {})
    monkeypatch.setattr(_eager, "_strict", [True])
    x, i, s = tp.zeros(3), tp.tensor([0, 5]), tp.ones(2)
    before = dict(_eager.host_fallbacks())
    with pytest.raises(RuntimeError) as host:
        x.scatter_add(0, i, s)
    with pytest.raises(RuntimeError) as got:
        _eager._kernel("scatter_add", tp.Tensor.scatter_add, (x, 0, i, s), {}, False)
    assert str(got.value) == str(host.value)
    assert _eager.host_fallbacks() == before
