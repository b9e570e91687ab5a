"""flip / roll / repeat under tp.compile (users helper, session 6): native
(fallback kernels before: Swin's shifted windows roll, test-time
augmentation flips, `x.repeat(1, n, 1)` everywhere), values and gradients
as torch's, eager's errors; where(condition) alone is nonzero(as_tuple=True)
(strict named a schema mismatch); flip(x, ()) flips nothing (eager flipped
every dim)."""
import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

A = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
CASES = {
    "flip0": lambda L, x: x.flip(0), "flip02": lambda L, x: x.flip(0, 2),
    "flip_list": lambda L, x: L.flip(x, [1, -1]), "flip_kw": lambda L, x: x.flip(dims=(1,)),
    "flip_none": lambda L, x: L.flip(x, ()),
    "roll_flat": lambda L, x: x.roll(1), "roll_flat_neg": lambda L, x: L.roll(x, -5),
    "roll_dim": lambda L, x: x.roll(2, 1), "roll_two": lambda L, x: L.roll(x, (1, -3), (0, 2)),
    "roll_kw": lambda L, x: x.roll(shifts=(3,), dims=(-1,)),
    "roll_full": lambda L, x: x.roll(4, -1),
    "repeat": lambda L, x: x.repeat(2, 1, 1), "repeat_more": lambda L, x: x.repeat(1, 2, 1, 3),
    "repeat_tuple": lambda L, x: x.repeat((2, 1, 2)), "repeat_zero": lambda L, x: x.repeat(0, 1, 1),
    "repeat_vec": lambda L, x: x[0, 0].repeat(2, 2),
    "swin_shift": lambda L, x: L.roll(x.reshape(1, 2, 3, 4), shifts=(-1, -2), dims=(2, 3)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_native_like_torch_with_grad(name):
    f = CASES[name]
    tx = torch.tensor(A, requires_grad=True)
    ref = f(torch, tx)
    (ref * ref).sum().backward()
    np.testing.assert_array_equal(f(tp, tp.tensor(A)).numpy(), ref.detach().numpy())
    x = tp.tensor(A, requires_grad=True)
    cf = tp.compile(lambda t: f(tp, t), strict_native=True)
    out = cf(x)
    np.testing.assert_array_equal(out.detach().numpy(), ref.detach().numpy())
    (out * out).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    assert cf.stats()["fallbacks"] == 0


@pytest.mark.parametrize("f", [lambda x: x.flip(0, 0), lambda x: x.flip(5),
                               lambda x: x.roll((1, 2), (0,)), lambda x: x.repeat(2)],
                         ids=["flip_dup", "flip_range", "roll_align", "repeat_short"])
def test_errors_compiled_as_eager(f):
    with pytest.raises(Exception) as ee:
        f(tp.tensor(A))
    with pytest.raises(type(ee.value)) as ce:
        tp.compile(f)(tp.tensor(A))
    assert str(ce.value) == str(ee.value)


def test_where_condition_only_is_nonzero():
    m = tp.tensor([[0, 1], [1, 1]])
    ref = torch.where(torch.tensor([[0, 1], [1, 1]]))
    for r in (tp.where(m), tp.compile(lambda c: tp.where(c))(m)):
        assert len(r) == 2
        for a, b in zip(r, ref):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(tp.compiler.NativeCompileError, match="nonzero"):
        tp.compile(lambda c: tp.where(c), strict_native=True)(m)
    cf = tp.compile(lambda c, x: tp.where(c > 0, x, 0.0), strict_native=True)
    np.testing.assert_array_equal(cf(m, tp.ones(2, 2)).numpy(), [[0., 1.], [1., 1.]])
