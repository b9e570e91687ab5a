"""A data gate on a tensor the function wrote in place before reading it
(`n.add_(1); x * n.item()`, a module's counter buffer) gave the first
call's value again on the second call: the guard replay slice reads the
gate's node as it was before the write (it warned that its versions
'cannot be reused on data gates'), and on the second call it happened to
give the traced outcome, so the version was reused. A version whose replay
does not reproduce its traced gates is never reused on them."""
import warnings

import tensorplay as tp


def _f(x, n):
    n.add_(1)
    return x * n.item()


def test_item_of_an_input_written_before_it():
    c = tp.compile(_f)
    n1, n2 = tp.zeros(()), tp.zeros(())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(4):
            assert c(tp.ones(2), n1).tolist() == _f(tp.ones(2), n2).tolist(), i
            assert n1.item() == n2.item()


class _Counter(tp.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("n", tp.zeros(()))

    def forward(self, x):
        self.n.add_(1)
        return x * self.n.item()


def test_item_of_a_buffer_written_before_it():
    m, ref = _Counter(), _Counter()
    c = tp.compile(m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(4):
            assert c(tp.ones(2)).tolist() == ref(tp.ones(2)).tolist(), i
