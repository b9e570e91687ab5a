"""Helpers shared by test modules (pytest puts tests/ on sys.path: import
them as ``from _helpers import ...``)."""
import contextlib
import logging
import os
import subprocess
import sys

import pytest

# the public API that test_bad_input.py and test_leaks.py need
PIECES = ["where", "relu", "exp", "compile", "nn.Linear", "nn.LayerNorm", "_C.trace", "Tensor.__getitem__",
          "Tensor.sum", "Tensor.add_", "Tensor.__mul__"]


def missing_pieces(tp, need=PIECES):
    """Names of the public API in `need` that have not landed yet."""
    miss = []
    for n in need:
        o = tp
        for part in n.split("."):
            o = getattr(o, part, None)
        if o is None:
            miss.append(n)
    return miss


def skip_unless_landed(tp, need=PIECES):
    """Skip the calling test module while any of `need` is missing."""
    if missing_pieces(tp, need):
        pytest.skip(f"pieces not landed yet: {missing_pieces(tp, need)}", allow_module_level=True)


@pytest.fixture(autouse=True, scope="module")
def isolate_compile_budget():
    """These tests compile many functions: lift the process-wide
    accumulated_cache_size_limit while they run and give the compile count
    back afterwards, so later tests of other rooms see the budget they had
    (while the limit was process-wide; harmless now that it is per code object).
    Autouse: importing it into a test module or conftest applies it there."""
    try:
        from tensorplay.compiler import _driver, config
    except Exception:  # noqa: BLE001
        yield
        return
    total = getattr(_driver, "_total", {})
    saved = (config.accumulated_cache_size_limit, dict(total))
    config.accumulated_cache_size_limit = 1 << 30
    try:
        yield
    finally:
        config.accumulated_cache_size_limit = saved[0]
        total.update(saved[1])


@contextlib.contextmanager
def recompile_log(seed_lines_only=False):
    """The messages of the `recompiles` log while the block runs (logging on).
    seed_lines_only keeps the seed's `recompiling '<name>': ...` lines and
    drops the per-version detail line that follows each."""
    import tensorplay as tp
    lines = []

    class H(logging.Handler):
        def emit(self, rec):
            msg = rec.getMessage()
            if not seed_lines_only or msg.startswith("recompiling"):
                lines.append(msg)
    h, lg = H(logging.DEBUG), logging.getLogger("tensorplay.recompiles")
    lg.addHandler(h)
    tp.compiler.set_logs(recompiles=True)
    try:
        yield lines
    finally:
        tp.compiler.set_logs(recompiles=False)
        lg.removeHandler(h)


def run_python(code, timeout=300, **env):
    """Run `code` in a fresh interpreter with this environment plus `env`;
    assert it exits 0 (its output in the message otherwise) and return the
    CompletedProcess (text stdout/stderr). For what happens once per
    process: a thread's start, a fork, exit."""
    e = dict(os.environ)
    e.update(env)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=e, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def kernel_names(cf):
    """Names of the kernels of every version a compiled function holds."""
    from tensorplay.compiler._aliasing import unwrap
    names = []
    for v in cf.versions:
        p = unwrap(v.artifact)
        names += [k.name for k in (getattr(p, "kernels", None) or [])]
    return names
