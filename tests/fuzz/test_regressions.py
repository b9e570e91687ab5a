"""Minimal repros of the bugs the differential fuzzer found, one test each.

A test marked xfail(strict=True) is an open bug reported to its room; when the
room fixes it the test XPASSes, fails the suite, and the mark is removed."""
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
if not hasattr(tp, "compile") or not hasattr(tp, "where"):
    pytest.skip("pieces not landed yet", allow_module_level=True)

BACKENDS = ["eager", "stax"]


def _compile(fn, backend):
    return tp.compile(fn, backend=backend)


def _run_isolated(code):
    """Run code in a fresh interpreter: returns (returncode, output)."""
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    src = "import sys; sys.path.insert(0, %r)\nimport tensorplay as tp\n" % os.path.join(root, "python")
    p = subprocess.run([sys.executable, "-c", src + textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout + p.stderr


# ------------------------------------------------------------------ crashes (eager)

CRASHERS = [
    # ops: in-place op on a 0-d tensor whose other operand has a wider dtype
    ("inplace-0d-promoting-other", "a = tp.ones(()); a.add_(tp.ones((), dtype=tp.float64)); print(a)"),
    ("inplace-0d-promoting-mul", "a = tp.ones(()); a.mul_(tp.ones((), dtype=tp.float64)); print(a)"),
]


@pytest.mark.xfail(strict=True, reason="bug (ops): segfault in in-place op on 0-d tensor with wider-dtype other")
@pytest.mark.parametrize("code", [c for _, c in CRASHERS], ids=[i for i, _ in CRASHERS])
def test_no_crash(code):
    rc, out = _run_isolated(code)
    assert rc == 0, f"rc={rc} (negative = killed by a signal)\n{out[-2000:]}"


# ------------------------------------------------------------------ wrong results


@pytest.mark.xfail(strict=True, reason="bug (trace/guards): guard replay ignores in-place ops before a gate: wrong branch")
@pytest.mark.parametrize("backend", BACKENDS)
def test_gate_after_inplace_mutation_of_input(backend):
    """A data gate that reads an input after an in-place op on it: the guard
    replay must see the mutated value, else a new input silently takes the
    branch of the old version."""
    def f(x):
        x.neg_()
        if x.sum() > 0:
            return x + 100
        return x - 100
    cf = _compile(f, backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for v in (1.0, -1.0):
            want = f(tp.ones(3) * v).tolist()
            got = cf(tp.ones(3) * v).tolist()
            assert got == want, (v, got, want)


@pytest.mark.xfail(strict=True, reason="bug (passes): x - 0 -> x rewrite aliases a tensor later mutated in place")
@pytest.mark.parametrize("backend", BACKENDS)
def test_identity_rewrite_then_inplace(backend):
    """`b = a - 0` is a new tensor: rewriting it to `a` and then running
    `b.clamp_()` mutates `a` (seed §4.2, aliasing)."""
    def f(x):
        a = x * 100
        b = a - 0
        b.clamp_(min=0)
        return a
    cf = _compile(f, backend)
    x = -tp.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cf(x).tolist() == f(x).tolist() == [-100.0, -100.0]


@pytest.mark.xfail(strict=True, reason="bug (trace/guards): replay ignores in-place ops: recompiles on every new tensor")
@pytest.mark.parametrize("backend", BACKENDS)
def test_gate_after_inplace_no_extra_recompiles(backend):
    """Same program family: an in-place op before the gate also makes every
    call with a new tensor recompile (the replay sees the unmutated input)."""
    def f(x):
        x.clamp_(min=0.5)
        if (x < 0.0).any():
            return x - 1
        return x * 3
    cf = _compile(f, backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for v in (1.0, -1.0, -2.0):
            x = tp.ones(4) * v
            assert np.allclose(cf(x).numpy(), f(tp.ones(4) * v).numpy())
    assert cf.stats()["compiles"] == 1, cf.stats()
