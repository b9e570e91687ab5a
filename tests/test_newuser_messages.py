"""Messages a PyTorch user relies on: the target-size warning of the
pointwise losses (an (N, 1) output against an (N,) target broadcasts to
(N, N) silently otherwise), pointing at the user's line; torch's
BCE-with-logits size message; torch's ragged nested-list message."""
import warnings

import pytest

import tensorplay as tp
import tensorplay.nn as nn
import tensorplay.nn.functional as F


@pytest.mark.parametrize("loss", [F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.huber_loss,
                                  nn.MSELoss(), nn.L1Loss()])
def test_target_size_warning(loss):
    a, b = tp.rand(3, 1), tp.rand(3)
    with pytest.warns(UserWarning, match=r"Using a target size \(tensorplay.Size\(\[3\]\)\) that "
                                         r"is different to the input size \(tensorplay.Size\("
                                         r"\[3, 1\]\)\)") as rec:
        loss(a, b)
    assert rec[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss(a, a)


def test_bce_with_logits_size_message():
    with pytest.raises(ValueError, match=r"^Target size \(tensorplay.Size\(\[3\]\)\) must be the "
                                         r"same as input size \(tensorplay.Size\(\[3, 1\]\)\)$"):
        F.binary_cross_entropy_with_logits(tp.rand(3, 1), tp.rand(3))


@pytest.mark.parametrize("data,msg", [
    ([[1, 2], [3]], "expected sequence of length 2 at dim 1 (got 1)"),
    ([[1, 2], [3, 4, 5]], "expected sequence of length 2 at dim 1 (got 3)"),
    ([[[1], [2]], [[3], [4, 5]]], "expected sequence of length 1 at dim 2 (got 2)"),
])
def test_ragged_list_message(data, msg):
    with pytest.raises(ValueError) as ei:
        tp.tensor(data)
    assert str(ei.value) == msg
