"""In-place writes that require grad through views of tensors that did not
require grad when the view was taken (issue 13): torch's CopySlices gives
the base the history (the view knows its base, torch's _base, whether or not
autograd recorded it). Gradients and requires_grad against torch 2.13 (the
comparisons skip without torch)."""
import numpy as np
import pytest

import tensorplay as tp

try:
    import torch
except Exception:  # torch is optional
    torch = None

R = np.random.default_rng(13)
A = R.standard_normal((3, 4)).astype(np.float32)
B = R.standard_normal((3, 4)).astype(np.float32)
W = R.standard_normal((3, 4)).astype(np.float32)

# view kinds: base (3, 4) -> a view; the source is shaped like the view
VIEWS = {
    "slice": lambda t: t[1:],
    "select": lambda t: t[1],
    "transpose": lambda t: t.transpose(0, 1),
    "view": lambda t: t.view(12),
    "narrow": lambda t: t.narrow(1, 1, 2),
    "view_of_view": lambda t: t[1:][:, 1:3],
    "T": lambda t: t.T,
}

# in-place ops: (view, source) -> the write; the source requires grad
OPS = {
    "copy_": lambda v, s: v.copy_(s),
    "add_": lambda v, s: v.add_(s),
    "mul_": lambda v, s: v.mul_(s),
    "fill_": lambda v, s: v.fill_(s.sum()),
    "setitem": lambda v, s: v.__setitem__(..., s),
    "zero_then_add_": lambda v, s: v.zero_().add_(s * 2),
}


def _run(m, view, op, base_kind):
    a = m.tensor(A, requires_grad=True)
    b = m.tensor(B, requires_grad=True)
    w = m.tensor(W)
    if base_kind == "intermediate":     # made from a tensor that needs no grad
        t = m.tensor(A) * 2
    elif base_kind == "leaf":           # a leaf that needs no grad
        t = m.tensor(A).clone()
    else:                               # gets grad after the view is taken
        t = m.tensor(A) * 1
    v = view(t)
    src = view(b * 1)
    if base_kind == "later_grad":
        t.add_(a)                       # t requires grad now; v was taken before
    op(v, src)
    loss = (t * w).sum() + (v * v).sum()
    rg = (t.requires_grad, v.requires_grad, t.is_leaf)
    loss.backward()
    ga = a.grad.numpy() if a.grad is not None else None
    return rg, ga, b.grad.numpy(), t.detach().numpy()


def _outcome(m, view, op, base_kind):
    try:
        return _run(m, view, op, base_kind)
    except RuntimeError as e:
        return str(e)


@pytest.mark.skipif(torch is None, reason="needs torch")
@pytest.mark.parametrize("base_kind", ["intermediate", "leaf", "later_grad"])
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_inplace_through_view_of_base_without_grad_matches_torch(view, op, base_kind):
    got = _outcome(tp, VIEWS[view], OPS[op], base_kind)
    want = _outcome(torch, VIEWS[view], OPS[op], base_kind)
    if isinstance(want, str):
        # later_grad: torch refuses a direct in-place op on the view of what
        # was a leaf (an indexed write rebuilds the view's history instead)
        assert got == want
        return
    assert got[0] == want[0]
    if want[1] is None:
        assert got[1] is None
    else:
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[3], want[3], rtol=1e-5, atol=1e-5)


def test_the_issue_repro():
    """t = x * 2 (x needs no grad); t[1:].copy_(b[1:]) with b requiring grad:
    t requires grad, its grad_fn is CopySlices, b gets the gradient of its
    copied elements (torch: [0, 2, 3] for the weights [1, 2, 3])."""
    b = tp.tensor([4.0, 5.0, 6.0], requires_grad=True)
    t = tp.tensor([1.0, 2.0, 3.0]) * 2
    t[1:].copy_(b[1:])
    assert t.requires_grad and not t.is_leaf
    assert t.grad_fn.name() == "CopySlices"
    (t * tp.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert b.grad.tolist() == [0.0, 2.0, 3.0]


def test_untracked_view_of_leaf_that_requires_grad_later_raises_torch_error():
    x = tp.zeros(3)
    v = x[1:]
    x.requires_grad_()
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        v.copy_(tp.ones(2, requires_grad=True))


def test_no_grad_views_and_writes_record_nothing():
    b = tp.ones(2, requires_grad=True)
    t = tp.zeros(3)
    with tp.no_grad():
        t[1:].copy_(b)
    assert not t.requires_grad and t.grad_fn is None
    u = tp.zeros(3)
    u[1:].add_(1.0)                     # nothing requires grad: nothing recorded
    assert not u.requires_grad and u.grad_fn is None


READS = {
    "mul": lambda v, s: (v * 2 + s).sum(),
    "view_of_view": lambda v, s: (v[0] * s[0]).sum(),
    "setitem_row": lambda v, s: v.__setitem__(0, s[0]),
    "setitem_slice": lambda v, s: v.__setitem__(slice(None), s),
    "setitem_ellipsis": lambda v, s: v.__setitem__(..., s),
}


def _read_after_base_got_grad(m, read):
    a = m.tensor(A, requires_grad=True)
    b = m.tensor(B, requires_grad=True)
    t = m.tensor(A) * 1
    v = t[1:]                           # taken while t needs no grad
    t.mul_(a)                           # t requires grad now
    r = read(v, b[1:] * 1)
    loss = (t * m.tensor(W)).sum() + (r if r is not None else 0)
    loss.backward()
    return a.grad.numpy(), b.grad.numpy() if b.grad is not None else None


@pytest.mark.skipif(torch is None, reason="needs torch")
@pytest.mark.parametrize("read", sorted(READS))
def test_view_taken_before_its_base_required_grad_matches_torch(read):
    """torch: such a view requires grad (its base does); using it rebuilds
    its history from the base; a direct in-place op on it (v[...] = s too)
    raises as on a leaf, an indexed write v[k] = s goes through."""
    def outcome(m):
        try:
            return _read_after_base_got_grad(m, READS[read])
        except RuntimeError as e:
            return str(e)
    got, want = outcome(tp), outcome(torch)
    if isinstance(want, str):
        assert got == want
        return
    for g, w in zip(got, want):
        if w is None:
            assert g is None
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
