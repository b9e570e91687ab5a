"""A broader sweep of commonly used torch functions against torch 2.13 CPU
(issue 13): names a model file uses that tensorplay lacked (meshgrid,
tensor_split, take, kron, cdist, bincount, histc, argwhere, diag_embed,
rot90, heaviside, equal, cross, mv, cartesian_prod, trapezoid,
cumulative_trapezoid, vander) with their edge cases and errors. The
divergences the sweep found in existing ones (rsub, bool arithmetic, int
pow bases, clamp of bool, softmax of integers) are cases of
test_scalar_ops_like_torch.py. Each case compares dtype, shape, values
(NaN and zero signs) or the exception type."""

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")


from _torch_outcome import outcome, same  # noqa: E402


cases = {}


def C(n, f):
    cases[n] = f


nan, inf = float("nan"), float("inf")
R = np.random.default_rng(0)
A = R.standard_normal((3, 4)).astype(np.float32)
C("meshgrid 3 xy", lambda m: m.meshgrid(m.tensor([1, 2]), m.tensor([3, 4, 5]), m.tensor([7]), indexing="xy"))
C("meshgrid 0d", lambda m: m.meshgrid(m.tensor(1), m.tensor([3, 4]), indexing="ij"))
C("meshgrid list", lambda m: m.meshgrid([m.tensor([1, 2]), m.tensor([3.])], indexing="ij"))
for ios in [1, 2, 3, 5, [1, 3], [0, 0, 2], [-1], [2, 1], [10]]:
    for d in [0, 1, -1]:
        C(f"tensor_split {ios} {d}", lambda m, ios=ios, d=d: m.tensor_split(m.tensor(A), ios, dim=d))
C("tensor_split tensor idx", lambda m: m.tensor_split(m.tensor(A), m.tensor([1, 2]), 1))
C("take neg", lambda m: m.take(m.tensor(A), m.tensor([[-1, 0], [3, 11]])))
C("take oob", lambda m: m.take(m.tensor(A), m.tensor([12])))
C("kron 3d", lambda m: m.kron(m.tensor(A).reshape(2, 3, 2), m.tensor([[1., 2], [3, 4]])))
C("kron int", lambda m: m.kron(m.tensor([1, 2]), m.tensor([3, 4])))
for p in [0, 1, 2, 3, inf, 0.5]:
    C(f"cdist p{p}", lambda m, p=p: m.cdist(m.tensor(A), m.tensor(A[:2] + 1), p=p))
C("cdist batch", lambda m: m.cdist(m.tensor(A).reshape(1, 3, 4), m.tensor(A).reshape(1, 3, 4)))
C("bincount neg", lambda m: m.bincount(m.tensor([-1, 2])))
C("bincount float", lambda m: m.bincount(m.tensor([1.0])))
C("bincount int weights", lambda m: m.bincount(m.tensor([0, 1, 1]), weights=m.tensor([1, 2, 3])))
C("bincount f64 weights", lambda m: m.bincount(m.tensor([0, 1, 1]), weights=m.tensor([1., 2, 3], dtype=m.float64)))
C("histc range", lambda m: m.histc(m.tensor([0., 1, 2, 3, 4, 5]), bins=3, min=1, max=4))
C("histc int", lambda m: m.histc(m.tensor([1, 2]), bins=3))
C("histc same", lambda m: m.histc(m.tensor([2., 2]), bins=4))
C("histc empty", lambda m: m.histc(m.zeros(0), bins=4))
for off in [0, 1, -2]:
    for d1, d2 in [(-2, -1), (0, 2), (2, 0), (1, 2)]:
        C(f"diag_embed {off} {d1} {d2}", lambda m, o=off, a=d1, b=d2: m.diag_embed(m.tensor(A[:2, :3]), o, a, b))
for k in [0, 1, 2, 3, -1, 5]:
    for dims in [(0, 1), (1, 0), (-1, 0)]:
        C(f"rot90 {k} {dims}", lambda m, k=k, dims=dims: m.rot90(m.tensor(A).reshape(3, 2, 2), k, dims))
C("heaviside int", lambda m: m.heaviside(m.tensor([-1, 0, 3]), m.tensor([7])))
C("heaviside mixed", lambda m: m.heaviside(m.tensor([-1., 0, 3]), m.tensor([7])))
C("heaviside nan", lambda m: m.heaviside(m.tensor([nan, 0., -0.0]), m.tensor([2.])))
C("equal shape", lambda m: m.equal(m.tensor([1, 2]), m.tensor([[1, 2]])))
C("equal nan", lambda m: m.equal(m.tensor([nan]), m.tensor([nan])))
C("cross default dim", lambda m: m.cross(m.tensor(A[:, :3]), m.tensor(A[:, 1:])))
C("cross bcast", lambda m: m.cross(m.tensor(A[:, :3]), m.tensor([1., 0, 0]), dim=1))
C("cross bad", lambda m: m.cross(m.tensor(A), m.tensor(A), dim=1))
C("mv bad", lambda m: m.mv(m.tensor(A), m.tensor(A)))
C("cartesian 3", lambda m: m.cartesian_prod(m.tensor([1, 2]), m.tensor([3]), m.tensor([4, 5])))
C("cartesian 1", lambda m: m.cartesian_prod(m.tensor([1, 2])))
C("trapz x", lambda m: m.trapezoid(m.tensor(A), m.tensor([0., 1, 3, 6])))
C("trapz dx", lambda m: m.trapezoid(m.tensor(A), dx=0.5, dim=0))
C("trapz int", lambda m: m.trapezoid(m.tensor([1, 2, 4])))
C("ctrapz x", lambda m: m.cumulative_trapezoid(m.tensor(A), m.tensor([0., 1, 3, 6])))
C("ctrapz dx", lambda m: m.cumulative_trapezoid(m.tensor(A), dx=2, dim=0))
C("vander N inc", lambda m: m.vander(m.tensor([1., 2, 3]), N=4, increasing=True))
C("vander int", lambda m: m.vander(m.tensor([1, 2, 3], dtype=m.int32)))
C("vander 0", lambda m: m.vander(m.tensor([1., 2]), N=0))
C("copysign int scalar", lambda m: m.tensor([1, -2]).copysign(-0.0))


@pytest.mark.parametrize("name", sorted(cases))
def test_matches_torch(name):
    want, got = outcome(torch, cases[name]), outcome(tp, cases[name])
    assert same(got, want), (got, want)


@pytest.mark.parametrize("name,f", [
    ("meshgrid", lambda a, b: tp.meshgrid(a[0], b[0], indexing="xy")[0] * 1),
    ("kron", lambda a, b: tp.kron(a, b)), ("cdist", lambda a, b: tp.cdist(a, b)),
    ("cross", lambda a, b: tp.cross(a[:, :3], a[:, 1:], dim=1)),
    ("diag_embed", lambda a, b: tp.diag_embed(a, 1)),
    ("tensor_split", lambda a, b: tp.tensor_split(a, 3, 1)[2] * 1),
    ("heaviside", lambda a, b: tp.heaviside(a, b[0, :1])), ("trapezoid", lambda a, b: tp.trapezoid(a)),
    ("cumulative_trapezoid", lambda a, b: tp.cumulative_trapezoid(a)),
    ("take", lambda a, b: tp.take(a, tp.tensor([0, -1]))),
    ("cartesian_prod", lambda a, b: tp.cartesian_prod(a[0], b[0])),
    ("rsub", lambda a, b: tp.rsub(a, 2.5))])
def test_compiled_strict_native(name, f):
    x, y = tp.randn(3, 4), tp.randn(2, 4)
    c = tp.compile(f, strict_native=True)(x, y)
    np.testing.assert_allclose(np.asarray(c.tolist()), np.asarray(f(x, y).tolist()), rtol=1e-5,
                               atol=1e-6)
