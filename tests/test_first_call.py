"""What a first call pays besides tracing (issue 17, the cold first call at
O(compile)): the LLVM code of a static kernel's long innermost loop has a
constant trip count (no vector epilogue or scalar remainder to optimize and
compile), and the page faults of a new process's fresh output blocks are
taken by a helper thread while the back end compiles."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorplay as tp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def chain(x, w):
    y = x * w + 1.0
    y = tp.tanh(y) * 0.5 + x
    return y * y + x


def _chain_np(x, w):
    y = x * w + 1.0
    y = np.tanh(y) * 0.5 + x
    return y * y + x


def _kernel(cf):
    (k,) = cf.versions[0].kernels
    return k


def test_static_long_inner_loop_has_a_constant_trip_count():
    x, w = tp.randn(8, 1024), tp.randn(8, 1024)
    cf = tp.compile(chain, strict_native=True)
    np.testing.assert_allclose(cf(x, w).numpy(), _chain_np(x.numpy(), w.numpy()), rtol=1e-5,
                               atol=1e-5)
    k = _kernel(cf)
    assert "in range(1024)" in k.loop_ir, k.loop_ir
    if k.source and "vector.body" in k.source:
        # 1024 iterations are whole vectors: no epilogue loop is generated
        assert "vec.epilog" not in k.source
        assert k.source.count("llvm.loop") <= 2 * k.source.count("vector.body")


def test_short_or_dynamic_inner_loops_keep_a_size_argument():
    # a constant 16 would be unrolled before the vectorizer sees it
    cf = tp.compile(chain, strict_native=True)
    x, w = tp.randn(8, 16), tp.randn(8, 16)
    np.testing.assert_allclose(cf(x, w).numpy(), _chain_np(x.numpy(), w.numpy()), rtol=1e-5,
                               atol=1e-5)
    assert "in range(16)" not in _kernel(cf).loop_ir
    cd = tp.compile(chain, strict_native=True, dynamic=True)
    x, w = tp.randn(8, 1024), tp.randn(8, 1024)
    np.testing.assert_allclose(cd(x, w).numpy(), _chain_np(x.numpy(), w.numpy()), rtol=1e-5,
                               atol=1e-5)
    assert "in range(1024)" not in _kernel(cd).loop_ir


def test_odd_long_inner_loop_is_exact():
    # 1000 and 257 are not whole vectors: the remainder still runs
    for m in (1000, 257):
        x, w = tp.randn(3, m), tp.randn(3, m)
        cf = tp.compile(chain, strict_native=True)
        np.testing.assert_allclose(cf(x, w).numpy(), _chain_np(x.numpy(), w.numpy()),
                                   rtol=1e-5, atol=1e-5)
        assert f"in range({m})" in _kernel(cf).loop_ir


_PREFAULT = textwrap.dedent("""
    import json, numpy as np, tensorplay as tp
    def chain(x, w):
        y = x * w + 1.0
        y = tp.tanh(y) * 0.5 + x
        return y * y + x
    x, w = tp.randn(1024, 2048), tp.randn(1024, 2048)
    with tp.no_grad():
        cf = tp.compile(chain, strict_native=True)
        before = tp._C._prefault_pages()
        r = cf(x, w)
        first = tp._C._prefault_pages()
        r2 = cf(x, w)
    a, b = x.numpy(), w.numpy()
    y = a * b + 1.0
    y = np.tanh(y) * 0.5 + a
    want = y * y + a
    print(json.dumps({"before": before, "first": first, "again": tp._C._prefault_pages(),
                      "ok": bool(np.allclose(r.numpy(), want, rtol=1e-5, atol=1e-5))
                            and bool(np.allclose(r2.numpy(), want, rtol=1e-5, atol=1e-5)),
                      "distinct": r.numpy().ctypes.data != r2.numpy().ctypes.data}))
""")


def _run(script, env_extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not hasattr(tp._C, "_prefault_pages"), reason="no prefaulting")
def test_first_run_output_pages_are_touched_while_compiling(tmp_path):
    # a new process, cache off: the compile is long enough for the helper
    # to touch the 8 MiB output (2048 pages); its block serves the first
    # run, the second run gets another block (the first result is alive)
    a = _run(_PREFAULT, {"TENSORPLAY_CACHE": "0"})
    assert a["ok"] and a["distinct"]
    assert a["before"] == 0 and a["first"] > 0
    assert a["again"] == a["first"]        # a compiled call prefaults nothing
    b = _run(_PREFAULT, {"TENSORPLAY_CACHE": "0", "STAX_NO_PREFAULT": "1"})
    assert b["ok"] and b["first"] == 0


_FORK = textwrap.dedent("""
    import json, os, numpy as np, tensorplay as tp
    def chain(x, w):
        y = x * w + 1.0
        y = tp.tanh(y) * 0.5 + x
        return y * y + x
    def check(tag, rows):
        # a compile in this process: its helper prefaults (a size the pool
        # holds no block of), its result is right
        x, w = tp.randn(rows, 2048), tp.randn(rows, 2048)
        with tp.no_grad():
            before = tp._C._prefault_pages()
            r = tp.compile(chain, strict_native=True)(x, w)
        a, b = x.numpy(), w.numpy()
        y = np.tanh(a * b + 1.0) * 0.5 + a
        return {tag + "_ok": bool(np.allclose(r.numpy(), y * y + a, rtol=1e-5, atol=1e-5)),
                tag + "_pages": tp._C._prefault_pages() - before}
    out = {}
    if MODE == "during":
        # the helper runs (as while a compile waits for it) when fork() comes
        out["running"] = tp._C._prefault_helper(256 << 20)
    else:
        out.update(check("parent", 1024))
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        res = {"child_running": tp._C._prefault_helper(-1)}
        tp._C._prefault_helper(0)      # no thread to join in the child
        res.update(check("child", 1536))
        os.write(wfd, json.dumps(res).encode())
        os._exit(0)
    os.close(wfd)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    _, status = os.waitpid(pid, 0)
    out.update(json.loads(data or b"{}"))
    out["child_status"] = status
    out["parent_running_after"] = tp._C._prefault_helper(0)
    out.update(check("parent2", 2048))
    print(json.dumps(out))
""")


@pytest.mark.skipif(not hasattr(tp._C, "_prefault_helper") or not hasattr(os, "fork"),
                    reason="no prefaulting or no fork")
@pytest.mark.parametrize("mode", ["during", "after"])
def test_fork_during_or_after_a_compile_leaves_a_working_child(mode):
    # fork() while the prefault helper runs: the child has no helper thread,
    # its state is cleared (pthread_atfork), so it neither joins a thread it
    # does not have nor stays without prefaulting; the parent's helper is
    # stopped and its block pooled as usual
    a = _run(f"MODE = {mode!r}\n" + _FORK, {"TENSORPLAY_CACHE": "0"})
    assert a["child_status"] == 0
    if mode == "during":
        assert a["running"] is True
    assert a["child_running"] is False
    assert a["child_ok"] and a["child_pages"] > 0
    assert a["parent_running_after"] is False
    assert a["parent2_ok"] and a["parent2_pages"] > 0
