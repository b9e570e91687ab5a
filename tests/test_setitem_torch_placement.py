"""Eager setitem places values where torch does for every mix of ints,
slices, None, Ellipsis and integer/bool tensor indices: torch applies the
ints of an advanced key as selects first (x[0, :, i] = v writes the
(3, len(i)) block that x[0, :, i] reads), where NumPy would count the int
as an advanced index and move the broadcast dims first. getitem and
setitem (with broadcasting values) are compared with torch over a
randomized set of keys."""
import random

import numpy as np
import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")

SHAPE = (3, 4, 5, 2)


def test_int_slice_tensor_setitem_regression():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x, t = tp.tensor(a), torch.tensor(a)
    v = np.arange(6, dtype=np.float32).reshape(3, 2) + 100
    x[0, :, tp.tensor([1, 2])] = tp.tensor(v)
    t[0, :, torch.tensor([1, 2])] = torch.tensor(v)
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    x[1, :, [3, 0]] = 7.0
    t[1, :, [3, 0]] = 7.0
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    assert x._version > 0


def _random_key(rng):
    """a key of ints, slices, None, Ellipsis and index tensors for SHAPE, as
    (tensorplay key, torch key)"""
    dims = list(range(len(SHAPE)))
    parts = []
    d = 0
    used_ellipsis = False
    n = rng.randint(1, len(SHAPE))
    while d < len(SHAPE) and len(parts) < n + 2:
        kind = rng.choice(["int", "slice", "none", "tensor", "tensor", "ellipsis", "bool"])
        size = SHAPE[d]
        if kind == "int":
            parts.append(("int", rng.randrange(-size, size)))
            d += 1
        elif kind == "slice":
            start = rng.choice([None, rng.randrange(0, size)])
            stop = rng.choice([None, rng.randrange(0, size + 1)])
            parts.append(("slice", slice(start, stop, rng.choice([None, 1, 2]))))
            d += 1
        elif kind == "none":
            parts.append(("none", None))
        elif kind == "ellipsis" and not used_ellipsis:
            used_ellipsis = True
            rest = rng.randint(0, len(SHAPE) - d)
            parts.append(("ellipsis", Ellipsis))
            d = len(SHAPE) - rest
            dims = dims  # later parts index the trailing `rest` dims
        elif kind == "bool":
            parts.append(("bool", [rng.random() < 0.5 for _ in range(size)]))
            d += 1
        else:
            shape = rng.choice([(2,), (1,), (2, 1), (3,)])
            idx = np.array([rng.randrange(-size, size) for _ in range(int(np.prod(shape)))])
            parts.append(("tensor", idx.reshape(shape)))
            d += 1
    kt, kq = [], []
    for kind, v in parts:
        if kind in ("tensor", "bool"):
            kt.append(tp.tensor(np.asarray(v).tolist(), dtype=tp.int64 if kind == "tensor"
                                else tp.bool))
            kq.append(torch.tensor(np.asarray(v)))
        else:
            kt.append(v)
            kq.append(v)
    return tuple(kt), tuple(kq)


def _tp_value(v):
    """the value as a tensorplay tensor of v's exact shape (tolist() would
    lose the trailing dims of an empty array)"""
    return tp.tensor(np.ascontiguousarray(v)) if v.ndim else float(v)


def test_random_keys_getitem_and_setitem_match_torch():
    rng = random.Random(1234)
    a = np.arange(int(np.prod(SHAPE)), dtype=np.float32).reshape(SHAPE)
    checked = set_checked = 0
    for _ in range(600):
        kt, kq = _random_key(rng)
        t = torch.tensor(a)
        try:
            want = t[kq]
        except (IndexError, RuntimeError):
            continue
        x = tp.tensor(a)
        if want.numel() == 0:
            # torch checks index bounds per element written, so an
            # out-of-bounds index with an empty result passes there; it is
            # an error here (as in NumPy): such keys are not compared
            try:
                x[kt]
            except IndexError as e:
                assert "out of bounds" in str(e)
                continue
        got = x[kt]
        assert tuple(got.shape) == tuple(want.shape), (kq, got.shape, want.shape)
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=str(kq))
        # a value of the full result shape, and one broadcast from its last dim
        vals = [np.arange(want.numel(), dtype=np.float32).reshape(tuple(want.shape)) + 1000]
        if want.dim() >= 1:
            vals.append(np.arange(want.shape[-1], dtype=np.float32) - 50)
        vals.append(np.float32(-3.0))
        for v in vals:
            x, t = tp.tensor(a), torch.tensor(a)
            try:
                t[kq] = torch.tensor(v)
            except (IndexError, RuntimeError):
                # torch refuses this write (e.g. a value that does not
                # broadcast to the index result); tensorplay must refuse too
                with pytest.raises((IndexError, RuntimeError, ValueError)):
                    x[kt] = _tp_value(v)
                continue
            x[kt] = _tp_value(v)
            np.testing.assert_array_equal(x.numpy(), t.numpy(), err_msg=f"{kq} = {v.shape}")
            set_checked += 1
        checked += 1
    assert checked > 200
    assert set_checked > 400


def test_empty_ellipsis_keeps_advanced_indices_adjacent():
    # the Ellipsis stands for no dims: torch keeps the advanced dims in
    # place (NumPy would move them first)
    a = np.arange(3 * 4 * 5 * 2, dtype=np.float32).reshape(SHAPE)
    i, j, m = [2, -1, 3], [-2], [False, True]
    x, t = tp.tensor(a), torch.tensor(a)
    kt = (slice(None, 2), tp.tensor(i), tp.tensor(j), Ellipsis, tp.tensor(m))
    kq = (slice(None, 2), torch.tensor(i), torch.tensor(j), Ellipsis, torch.tensor(m))
    assert tuple(x[kt].shape) == tuple(t[kq].shape) == (2, 3)
    np.testing.assert_array_equal(x[kt].numpy(), t[kq].numpy())
    v = np.arange(6, dtype=np.float32).reshape(2, 3)
    x[kt] = tp.tensor(v)
    t[kq] = torch.tensor(v)
    np.testing.assert_array_equal(x.numpy(), t.numpy())
