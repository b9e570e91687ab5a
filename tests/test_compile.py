"""tp.compile entry point: decorator forms, modules, methods, back ends, failures, threads."""
import threading
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _C

BACKEND = "stax"


def test_decorator_forms():
    @tp.compile(backend=BACKEND)
    def f(x):
        return x + 1

    @tp.compile
    def g(x):
        return x * 2

    assert f(tp.ones(2)).numpy()[0] == 2
    assert f.__name__ == "f" and len(f.versions) == 1
    assert g(tp.ones(2)).numpy()[0] == 2 and len(g.versions[0].kernels) == 1


def test_eager_backend_and_registry():
    seen = {}

    @tp.compiler.register_backend("recording")
    def recording(gm, example_inputs, **options):
        seen["gm"], seen["n"], seen["opts"] = gm, len(example_inputs), options
        return gm

    assert "recording" in tp.compiler.list_backends()
    assert {"eager", "stax"} <= set(tp.compiler.list_backends())
    cf = tp.compile(lambda x, y: x + y, backend="recording")
    assert cf(tp.ones(2), tp.ones(2)).numpy()[0] == 2
    assert seen["n"] == 2 and "strict_native" in seen["opts"]
    assert cf.versions[0].graph_module is seen["gm"]


def test_trace_failure_leaves_no_entry():
    state = {"boom": True}

    def f(x):
        if state["boom"]:
            raise ValueError("boom")
        return x + 1

    cf = tp.compile(f, backend=BACKEND)
    with pytest.raises(ValueError):
        cf(tp.ones(2))
    assert len(cf.versions) == 0
    state["boom"] = False
    assert cf(tp.ones(2)).numpy()[0] == 2


def test_backend_failure_falls_back_or_raises():
    def bad(gm, example_inputs, **options):
        raise RuntimeError("no")

    cf = tp.compile(lambda x: x + 1, backend=bad)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert cf(tp.ones(2)).numpy()[0] == 2
    assert any("runs eagerly" in str(m.message) for m in w)
    assert cf.stats()["fallbacks"] == 1 and cf.versions[0].eager_fallback
    cs = tp.compile(lambda x: x + 1, backend=bad, strict_native=True)
    with pytest.raises(RuntimeError):
        cs(tp.ones(2))
    assert len(cs.versions) == 0


def test_bound_method_and_module():
    class M(tp.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = tp.nn.Parameter(tp.ones(3))
            self.scale = 2.0

        def forward(self, x):
            return x * self.w * self.scale

    m = M()
    cm = tp.compile(m, backend=BACKEND)
    x = tp.ones(3)
    with tp.no_grad():
        assert cm(x).numpy()[0] == 2
        m.w.mul_(3)
        assert cm(x).numpy()[0] == 6
        assert len(cm.versions) == 1
        m.scale = 1.0
        assert cm(x).numpy()[0] == 3
        assert len(cm.versions) == 2
        cb = tp.compile(m.forward, backend=BACKEND)
        assert cb(x).numpy()[0] == 3


def test_threads():
    cf = tp.compile(lambda x, y: x * 2 + y, backend=BACKEND)
    xs = [tp.randn(16) for _ in range(4)]
    errors = []

    def work(i):
        try:
            for _ in range(50):
                x = xs[i]
                np.testing.assert_allclose(cf(x, x).numpy(), x.numpy() * 3, rtol=1e-6)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and len(cf.versions) == 1


def test_strict_native_error_class():
    assert tp.compiler.NativeCompileError is _C.NativeCompileError


def test_env_logs_to_stderr(tmp_path):
    import os
    import subprocess
    import sys
    code = (
        "import tensorplay as tp\n"
        "cf = tp.compile(lambda x, k: x * k, backend='eager')\n"
        "x = tp.ones(2); cf(x, 2); cf(x, 3)\n"
    )
    env = dict(os.environ, TENSORPLAY_LOGS="recompiles,guards")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.path.join(root, "python")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "[tensorplay.recompiles] recompiling '<lambda>': inputs[0][1][1] == 2" in r.stderr
    assert "[tensorplay.recompiles]   failed guards by version: version 0: inputs[0][1][1] == 2" in r.stderr
    assert "[tensorplay.guards] guards of '<lambda>' version 0:" in r.stderr


def test_set_logs_rejects_unknown_topic():
    with pytest.raises(ValueError):
        tp.compiler.set_logs(nonsense=True)


def test_outputs_require_grad_only_where_eager_does():
    """Fuzz seed 888 (`output 0 requires_grad=True, eager False`): a compiled
    output requires grad exactly when the eager one does (grad mode on, a
    differentiable path from an input that requires grad)."""
    tp.manual_seed(0)
    m = tp.nn.Linear(4, 2)

    def f(x):
        return m(x.float()), ~x, x.float() * 2
    x = tp.tensor([True, False, False, True])
    e, c = f(x), tp.compile(f, backend=BACKEND)(x)
    assert [t.requires_grad for t in c] == [t.requires_grad for t in e] == [True, False, False]
    w = tp.ones(3, requires_grad=True)
    g = tp.compile(lambda w, y: (w * y, y + 1, (w > 0).float()), backend=BACKEND)
    e, c = (w * tp.ones(3), tp.ones(3) + 1, (w > 0).float()), g(w, tp.ones(3))
    assert [t.requires_grad for t in c] == [t.requires_grad for t in e] == [True, False, False]
    with tp.no_grad():
        assert not any(t.requires_grad for t in g(w, tp.ones(3)))


@pytest.mark.parametrize("backend", ["eager", BACKEND])
def test_inplace_through_noop_conversion_writes_the_input(backend):
    """Fuzz seed 527: `v = x.to(tp.float32); v.clamp_(min=2)` on a float32 x
    writes x (eager returns x itself); compiled must too."""
    m0 = tp.nn.LayerNorm(4)

    def f(x0):
        v1 = x0.to(tp.float32)
        v1.clamp_(min=2.0)
        return m0(x0)
    e, c = tp.tensor([0.5, -1.0, 3.0, 1.0]), tp.tensor([0.5, -1.0, 3.0, 1.0])
    want = f(e)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = tp.compile(f, backend=backend)(c)
    assert np.allclose(got.detach().numpy(), want.detach().numpy(), atol=1e-5)
    assert c.tolist() == e.tolist() == [2.0, 2.0, 3.0, 2.0]
