"""Compiled code slicing a tuple-valued node (split/chunk/unbind results)
gets the sliced tuple, as eager: the lowering took a slice key for the
tuple's last item (cat(x.split(2)[1:]) raised, x.split(2)[:2][0] read the
wrong chunk)."""
import numpy as np

import tensorplay as tp


def _check(fn, *args):
    e = fn(*args)
    c = tp.compile(fn)(*args)
    np.testing.assert_array_equal(c.numpy(), e.numpy())


def test_cat_of_reversed_split():
    _check(lambda a: tp.cat(a.split(2)[::-1]), tp.arange(5).float())


def test_cat_of_split_tail():
    _check(lambda a: tp.cat(a.split(2)[1:]) * 2, tp.arange(7).float())


def test_item_of_sliced_chunk():
    _check(lambda a: a.chunk(3)[:2][0] + 1, tp.arange(6).float())
    _check(lambda a: a.unbind(0)[1:][-1] * 3, tp.arange(6).float().reshape(3, 2))
