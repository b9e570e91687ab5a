"""Writes through views outside the op table's view rows compile natively.

`v.diagonal().zero_()`, `v.unfold(1, 2, 2).add_(1)`, `v.movedim(0, 1).copy_(s)`
on an intermediate or an input are functionalized into as_strided_scatter
(csrc/graph/oplevel.c), now a masked index map in the kernel
(csrc/lower/lower_movement.c, lower_as_strided_scatter): strict_native
compiles them (issue 13: strict without holes). A view that overlaps itself
(`unfold(0, 2, 1)`) stays an eager step, named in strict's error.
Compiled vs eager, exact (the writes move values, no arithmetic differs)."""
import itertools

import pytest

import tensorplay as tp
from tensorplay.compiler import NativeCompileError

VIEWS = {
    "diagonal": lambda v: v.diagonal(),
    "diagonal_1": lambda v: v.diagonal(1),
    "diagonal_-1": lambda v: v.diagonal(-1),
    "movedim": lambda v: v.movedim(0, 1),
    "unfold": lambda v: v.unfold(1, 2, 2),
    "sliced_diagonal": lambda v: v[1:, :].diagonal(),
    "as_strided": lambda v: v.as_strided((2, 2), (5, 2), 1),
    "as_strided_tail": lambda v: v.as_strided((2,), (1,), 18),
    "as_strided_one": lambda v: v.as_strided((1, 1), (1, 1), 7),
}
WRITES = {
    "zero_": lambda w: w.zero_(),
    "add_": lambda w: w.add_(3),
    "copy_": lambda w: w.copy_(tp.arange(w.numel()).reshape(w.shape)),
}
DTYPES = [tp.float32, tp.int64, tp.float16]


@pytest.mark.parametrize("vk,wk", list(itertools.product(VIEWS, WRITES)))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_write_through_a_view_of_an_intermediate_is_native(vk, wk, dtype):
    def f(x0):
        v1 = x0 * 2
        WRITES[wk](VIEWS[vk](v1))
        return v1
    x = (tp.arange(20) - 7).reshape(4, 5).to(dtype)
    got = tp.compile(f, strict_native=True)(x.clone())
    assert tp.equal(got, f(x.clone()))


@pytest.mark.parametrize("vk", ["diagonal", "unfold", "as_strided"])
def test_write_through_a_view_of_an_input(vk):
    def f(x0):
        WRITES["add_"](VIEWS[vk](x0))
        return x0 * 1
    x = tp.randn(4, 5)
    xe, xc = x.clone(), x.clone()
    want = f(xe)
    got = tp.compile(f)(xc)
    assert tp.equal(got, want) and tp.equal(xc, xe)


def test_overlapping_view_write_runs_eagerly_and_strict_names_it():
    def f(x0):
        v1 = x0 * 2
        v1.unfold(0, 2, 1).add_(1.0)
        return v1
    x = tp.randn(4, 5)
    with pytest.warns(RuntimeWarning, match="overlapping view"):
        assert tp.equal(tp.compile(f)(x.clone()), f(x.clone()))
    with pytest.raises(NativeCompileError, match="overlapping view"):
        tp.compile(f, strict_native=True)(x.clone())


def test_new_inputs_reuse_the_kernel():
    def f(x0):
        v1 = x0 + 1
        v1.diagonal(1).fill_(-1)
        return v1
    cf = tp.compile(f, strict_native=True)
    for _ in range(3):
        x = tp.randn(6, 7)
        assert tp.equal(cf(x), f(x))


def test_write_through_a_diagonal_of_an_input_slice():
    """The input is a view at storage offset 5: the op graph's offsets count
    from its first element; eager's as_strided_scatter counted the sample's
    offset from the storage start and wrote 5 elements before the buffer
    (heap corruption, a crash at the next GC) and the answer was wrong."""
    def f(x0):
        x0.diagonal().add_(100)
        return x0 * 1
    cf = tp.compile(f)
    for _ in range(3):
        big = tp.arange(20.).reshape(4, 5)
        a, b = big.clone(), big.clone()
        want = f(a[1:])
        got = cf(b[1:])
        assert tp.equal(got, want) and tp.equal(a, b)
    import gc
    gc.collect()


@pytest.mark.parametrize("args", [((3,), (6,), 0), ((3,), (6,), 5), ((3,), (6,), None), ((2, 2), (5, 1), 6)])
def test_eager_as_strided_scatter_counts_the_offset_from_the_storage_start(args):
    """torch's: on x[1:] (offset 5) an offset of 0 writes storage elements
    0, 6, 12 — the first lies before the view and is not seen."""
    torch = pytest.importorskip("torch")
    t = torch.arange(20.).reshape(4, 5)[1:]
    want = torch.as_strided_scatter(t, torch.ones(args[0]), *args)
    x = tp.arange(20.).reshape(4, 5)[1:]
    got = tp.as_strided_scatter(x, tp.ones(args[0]), *args)
    assert got.tolist() == want.tolist()


def test_eager_as_strided_scatter_out_of_the_storage_raises():
    x = tp.arange(20.).reshape(4, 5)[1:]
    with pytest.raises(RuntimeError, match="out of bounds for storage of size 80"):
        tp.as_strided_scatter(x, tp.ones(3), (3,), (7,), 10)
    with pytest.raises(RuntimeError, match="Negative strides"):
        tp.as_strided_scatter(x, tp.ones(3), (3,), (-1,), 10)


def test_eager_as_strided_scatter_outside_a_non_contiguous_input_raises():
    x = tp.arange(20.).reshape(4, 5)[:, 1:]      # offset 1, inside the storage
    with pytest.raises(RuntimeError, match="reach outside the non-contiguous input"):
        tp.as_strided_scatter(x, tp.ones(3), (3,), (7,), 0)
