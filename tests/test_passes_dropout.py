"""NormalizeOperators: dropout that does not train (training=False, or
p == 0) is the identity and leaves the graph (no random op, no fallback);
the compiled output aliases the input exactly as eager's (torch's dropout
returns its input object: so does the compiled call, issue 13).
getattr(t, 'values') of a named-tuple result becomes t[0]."""
import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn as nn
import tensorplay.nn.functional as F
from tensorplay import _C as C
from tensorplay.compiler import NativeCompileError


def _x():
    return tp.tensor(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4))


def _targets(gm):
    return [getattr(n.target, "__name__", n.target) for n in gm.graph.nodes
            if n.op in ("call_function", "call_method")]


def test_eval_module_dropout_is_not_a_fallback():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).eval()
    x = _x()
    cf = tp.compile(m)
    y = cf(x)
    np.testing.assert_allclose(y.detach().numpy(), m(x).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    assert cf.stats()["fallbacks"] == 0
    assert "dropout" not in _targets(cf.versions[0].graph_module)


def test_functional_dropout_training_false_strict_native():
    x = _x()
    cf = tp.compile(lambda x: F.dropout(x, 0.5, training=False) * 2,
                    strict_native=True)
    np.testing.assert_allclose(cf(x).numpy(), x.numpy() * 2)
    assert cf.stats()["fallbacks"] == 0


@pytest.mark.parametrize("call", [
    lambda x: F.dropout(x, 0.5, False),
    lambda x: F.dropout(x, 0.0, True),
    lambda x: F.dropout(x, 0.0),
    lambda x: F.alpha_dropout(x, 0.5),
    lambda x: F.feature_alpha_dropout(x, 0.5, training=False),
])
def test_identity_dropout_output_aliases_input_as_eager(call):
    x = _x()
    before = x.numpy().copy()
    assert call(x) is x             # eager (and torch) return the input itself
    cf = tp.compile(call, strict_native=True)
    y = cf(x)
    assert cf.stats()["fallbacks"] == 0
    np.testing.assert_array_equal(y.numpy(), before)
    assert y is x
    y.add_(1)                       # the input itself: written as eager writes it
    np.testing.assert_array_equal(x.numpy(), before + 1)
    z = cf(x)
    assert z is x


def test_identity_inplace_dropout_output_is_the_input():
    # F.dropout(x, training=False, inplace=True) returns x in eager, and
    # torch.compile returns x too (an output aliasing an input stays an
    # alias, issue 13): a write through the output reaches the input
    x = _x()
    before = x.numpy().copy()
    cf = tp.compile(lambda x: F.dropout(x, p=0.3, training=False, inplace=True),
                    strict_native=True)
    y = cf(x)
    assert cf.stats()["fallbacks"] == 0
    np.testing.assert_array_equal(y.numpy(), before)
    assert y is x
    y.add_(1)
    np.testing.assert_array_equal(x.numpy(), before + 1)


def test_identity_dropout_of_a_view_output_is_a_view():
    # eager and torch.compile: dropout2d(training=False) returns its input,
    # so x.unsqueeze(0) -> dropout2d -> squeeze(0) is a view of x
    x = _x()
    before = x.numpy().copy()
    cf = tp.compile(lambda x: F.dropout2d(x.unsqueeze(0), 0.5, training=False).squeeze(0),
                    strict_native=True)
    y = cf(x)
    assert cf.stats()["fallbacks"] == 0
    np.testing.assert_array_equal(y.numpy(), before)
    assert y._storage is x._storage
    y.add_(1)
    np.testing.assert_array_equal(x.numpy(), before + 1)


def test_identity_dropout_keeps_eager_aliasing_with_mutation():
    def f(x):
        y = F.dropout(x, 0.5, training=False)   # y is x (as in PyTorch)
        y.add_(1)
        return y * 2

    x1, x2 = _x(), _x()
    want = f(x1)
    cf = tp.compile(f)
    got = cf(x2)
    np.testing.assert_allclose(got.numpy(), want.numpy())
    np.testing.assert_allclose(x2.numpy(), x1.numpy())     # x mutated too


def test_eval_modules_of_every_dropout_kind():
    for mod in (nn.Dropout(0.2), nn.AlphaDropout(0.2), nn.Dropout1d(0.2),
                nn.FeatureAlphaDropout(0.2)):
        m = nn.Sequential(nn.Linear(4, 4), mod).eval()
        x = _x()
        cf = tp.compile(m)
        np.testing.assert_allclose(cf(x).detach().numpy(),
                                   m(x).detach().numpy(), rtol=1e-5, atol=1e-6)
        assert cf.stats()["fallbacks"] == 0, type(mod).__name__


def test_training_dropout_stays_random():
    x = _x()
    tr = C.trace(lambda x: F.dropout(x, 0.5, training=True) * 2, (x,))
    gm = C.run_frontend_passes(tr.graph_module) or tr.graph_module
    assert "dropout" in _targets(gm)
    m = nn.Sequential(nn.Dropout(0.5))          # training mode
    tr = C.trace(m, (x,))
    gm = C.run_frontend_passes(tr.graph_module) or tr.graph_module
    assert "dropout" in _targets(gm)
    y = tp.compile(lambda x: F.dropout(x, 0.5, training=True))(tp.ones(4000))
    y = y.numpy()
    assert set(np.unique(y)) <= {0.0, 2.0}
    assert 1000 < int((y == 0).sum()) < 3000       # still random


def test_strict_native_error_type_is_importable():
    assert issubclass(NativeCompileError, Exception)


def test_pass_log_names_the_elimination():
    x = _x()
    tr = C.trace(lambda x: F.dropout(x, 0.5, training=False) + 1, (x,))
    lines = []
    gm = C.run_frontend_passes(tr.graph_module, log=lines.append) \
        or tr.graph_module
    assert "dropout" not in _targets(gm)
    assert any("NormalizeOperators" in s and "dropout" in s for s in lines), lines
    np.testing.assert_allclose(gm(x).numpy(), x.numpy() + 1)


def test_named_tuple_fields_become_getitem():
    x = _x()
    for f in (lambda x: x.max(1).values * 2 + x.min(1).indices,
              lambda x: x.sort(dim=1, descending=True).values + 1,
              lambda x: x.topk(2).indices * 1,
              lambda x: x.median(0).values * 3):
        cf = tp.compile(f)
        np.testing.assert_allclose(cf(x).numpy(), f(x).numpy())
    tr = C.trace(lambda x: x.max(1).values * 2, (x,))
    gm = C.run_frontend_passes(tr.graph_module) or tr.graph_module
    assert "getattr" not in _targets(gm)
