"""The persistent compile cache (docs/cache.md): content-addressed entries,
hits across processes and functions, the stats counters, cache_info and
save/load_cache_artifacts, and the faults: corrupt / truncated / foreign /
other-version entries, a directory that is a file, read-only or full, two
processes racing on one key, a relative TENSORPLAY_CACHE_DIR. Every test
uses its own directory (tmp_path); conftest.py keeps the rest of the suite
in a per-session temporary one."""
import gc
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.compiler import config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def f11(x, w):
    return (tp.relu(x + w) * 2).sum(-1)


def _want(x, w):
    return (np.maximum(x.numpy() + w.numpy(), 0) * 2).sum(-1)


@pytest.fixture
def cdir(tmp_path, monkeypatch):
    """A private cache directory for the test, cache on, `cache` logs on."""
    d = tmp_path / "cache"
    monkeypatch.setattr(config, "cache_dir", str(d))
    monkeypatch.setattr(config, "cache", True)
    monkeypatch.setattr(config, "cache_size_mb", 1024)
    _release()
    tp.compiler.set_logs(cache=True)
    yield d
    tp.compiler.set_logs(cache=False)
    _release()


def _release():
    """Drop every compiled program so its kernels leave the JIT: a later
    compile of the same kernel must go to the disk cache."""
    tp.compiler.reset()
    gc.collect()


def _entries(d):
    k = d / "kernels"
    return sorted(p for p in k.iterdir() if p.suffix == ".tpk") if k.is_dir() else []


def _compile_run(fn=f11, n=64, m=128, dtype=None):
    x = tp.randn(n, m)
    w = tp.randn(n, m)
    if dtype is not None:
        x, w = x.to(dtype), w.to(dtype)
    cf = tp.compile(fn, strict_native=True)
    y = cf(x, w)
    np.testing.assert_allclose(y.numpy(), _want(x, w), rtol=1e-5, atol=1e-4)
    return cf


def _stats(cf):
    s = cf.stats()
    return s["cache_hits"], s["cache_misses"], s["backend_compiles"]


def _cache_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "tensorplay.cache"]


# --------------------------------------------------------------- basics
def test_miss_then_hit_counts_and_entry_on_disk(cdir):
    cf = _compile_run()
    assert _stats(cf) == (0, 1, 1)
    assert len(_entries(cdir)) == 1
    src = cf.versions[0].kernels[0].source
    del cf
    _release()
    cf = _compile_run()
    assert _stats(cf) == (1, 0, 0)
    # a program built from the cache is as inspectable as a compiled one
    assert cf.versions[0].kernels[0].source == src and "define" in src
    info = tp.compiler.cache_info()
    assert info["entries"] == 1 and info["bytes"] == _entries(cdir)[0].stat().st_size
    assert info["dir"] == str(cdir) and info["enabled"]


def test_a_compile_prints_no_ir_until_the_source_is_read(cdir):
    # printing a module's IR cost 1-2.5 ms of a compile that no one read:
    # the entry holds object code only, and .source builds the IR when read
    cf = _compile_run()
    raw = _entries(cdir)[0].read_bytes()
    assert b"define " not in raw and b"target triple" not in raw
    src = cf.versions[0].kernels[0].source
    assert "define" in src and "stax_k_" in src
    assert cf.versions[0].kernels[0].source is src       # built once


def test_two_functions_that_lower_to_the_same_kernel_share_an_entry(cdir):
    def g(a, b):
        t = a + b
        return (t.relu() * 2.0).sum(dim=-1)

    cf = _compile_run(f11)
    cg = _compile_run(g)
    assert _stats(cf) == (0, 1, 1)
    assert _stats(cg) == (1, 0, 0)
    assert len(_entries(cdir)) == 1


def test_sizes_dtypes_and_codegen_knobs_are_in_the_key(cdir, monkeypatch):
    _compile_run(n=64, m=128)
    _compile_run(n=64, m=129)
    _compile_run(n=64, m=128, dtype=tp.float64)
    assert len(_entries(cdir)) == 3
    _release()
    # a code-generation knob outside the loop IR changes the key too
    monkeypatch.setenv("STAX_NO_TILE", "1")
    cf = _compile_run(n=64, m=128)
    assert _stats(cf) == (0, 1, 1)
    assert len(_entries(cdir)) == 4


def test_cache_off_by_config(cdir, monkeypatch):
    monkeypatch.setattr(config, "cache", False)
    cf = _compile_run()
    assert _stats(cf) == (0, 0, 1)
    assert _entries(cdir) == []
    assert tp.compiler.cache_info()["enabled"] is False


def test_cache_dir_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    old = config.cache_dir
    try:
        config.cache_dir = "rel/dir"
        assert config.cache_dir == str(tmp_path / "rel" / "dir")
        config.cache_dir = "~/x"
        assert config.cache_dir == os.path.join(os.path.expanduser("~"), "x")
        with pytest.raises(TypeError):
            config.cache_dir = ""
    finally:
        config.cache_dir = old


# --------------------------------------------------------- bad entries
def _corrupt_and_recompile(cdir, caplog, damage, expect):
    cf = _compile_run()
    (entry,) = _entries(cdir)
    good = entry.read_bytes()
    del cf
    _release()
    entry.write_bytes(damage(good))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tensorplay.cache"):
        cf = _compile_run()       # correct result (checked inside)
    assert _stats(cf) == (0, 1, 1), "a bad entry must be recompiled, never loaded"
    lines = _cache_lines(caplog)
    assert any("bad entry" in ln and expect in ln for ln in lines), lines
    # the recompiled kernel's entry replaced the bad one
    assert entry.read_bytes() == good
    del cf
    _release()
    cf = _compile_run()
    assert _stats(cf) == (1, 0, 0)


def test_truncated_entry(cdir, caplog):
    _corrupt_and_recompile(cdir, caplog, lambda b: b[: len(b) // 2], "truncated")


def test_truncated_header(cdir, caplog):
    _corrupt_and_recompile(cdir, caplog, lambda b: b[:20], "truncated")


def test_flipped_byte_in_object_code(cdir, caplog):
    def flip(b):
        b = bytearray(b)
        b[len(b) // 2] ^= 0x40
        return bytes(b)
    _corrupt_and_recompile(cdir, caplog, flip, "checksum mismatch")


def test_entry_of_another_compiler_build(cdir, caplog):
    def other_build(b):
        b = bytearray(b)
        i = b.index(b"0.1.0+") if b"0.1.0+" in b else 32
        b[i: i + 6] = b"9.9.9+"
        return bytes(b)
    _corrupt_and_recompile(cdir, caplog, other_build, "written by compiler build")


def test_entry_of_another_format_version(cdir, caplog):
    def other_format(b):
        b = bytearray(b)
        b[8] ^= 0x7       # the u32 format version after the magic
        return bytes(b)
    _corrupt_and_recompile(cdir, caplog, other_format, "entry format")


def test_foreign_file(cdir, caplog):
    _corrupt_and_recompile(cdir, caplog, lambda b: b"#!/bin/sh\necho not an entry\n" * 10, "foreign")


def test_entry_holding_another_key(cdir, caplog):
    cf = _compile_run(m=128)
    cg = _compile_run(m=129)
    a, b = _entries(cdir)
    del cf, cg
    _release()
    a_bytes = a.read_bytes()
    a.write_bytes(b.read_bytes())     # a valid entry, under the wrong name
    b.write_bytes(a_bytes)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tensorplay.cache"):
        cf = _compile_run(m=128)
    assert _stats(cf) == (0, 1, 1)
    assert any("another key" in ln for ln in _cache_lines(caplog))


# ------------------------------------------------------ bad directories
def test_cache_dir_that_is_a_file_degrades_with_one_warning(tmp_path, monkeypatch, caplog):
    f = tmp_path / "not_a_dir"
    f.write_text("x")
    monkeypatch.setattr(config, "cache_dir", str(f))
    monkeypatch.setattr(config, "cache", True)
    _release()
    tp.compiler.set_logs(cache=True)
    try:
        with warnings.catch_warnings(record=True) as w, caplog.at_level(logging.INFO, "tensorplay.cache"):
            warnings.simplefilter("always")
            cf = _compile_run(m=128)
            cg = _compile_run(m=130)
        assert _stats(cf) == (0, 1, 1) and _stats(cg) == (0, 1, 1)
        msgs = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)
                and "compile cache" in str(x.message)]
        assert len(msgs) == 1, msgs
        assert str(f) in msgs[0]
        assert any("cannot write the cache" in ln for ln in _cache_lines(caplog))
        assert f.read_text() == "x"
    finally:
        tp.compiler.set_logs(cache=False)
        _release()


def test_read_only_cache_dir_degrades_with_one_warning(tmp_path, monkeypatch):
    d = tmp_path / "ro"
    (d / "kernels").mkdir(parents=True)
    os.chmod(d / "kernels", 0o500)
    try:
        if os.access(d / "kernels", os.W_OK):
            pytest.skip("running as root: permission bits do not stop writes (the file-as-dir "
                        "and full-disk tests cover the unwritable paths)")
        monkeypatch.setattr(config, "cache_dir", str(d))
        monkeypatch.setattr(config, "cache", True)
        _release()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            cf = _compile_run(m=128)
            cg = _compile_run(m=131)
        assert _stats(cf) == (0, 1, 1) and _stats(cg) == (0, 1, 1)
        assert len([x for x in w if "compile cache" in str(x.message)]) == 1
    finally:
        os.chmod(d / "kernels", 0o700)
        _release()


# ---------------------------------------------------------- processes
_SCRIPT = textwrap.dedent("""
    import json, os, sys, time, warnings
    import numpy as np
    import tensorplay as tp
    def f(x, w):
        return (tp.relu(x + w) * 2).sum(-1)
    x = tp.ones(64, 128); w = tp.ones(64, 128)
    go = os.environ.get("TP_TEST_GO")
    if go:
        while not os.path.exists(go):
            time.sleep(0.001)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        cf = tp.compile(f, strict_native=True)
        t0 = time.perf_counter()
        y = cf(x, w)
        t1 = time.perf_counter()
    s = cf.stats()
    print(json.dumps({"ok": bool(np.allclose(y.numpy(), 512.0)), "first_ms": (t1 - t0) * 1e3,
                      "hits": s["cache_hits"], "misses": s["cache_misses"],
                      "compiles": s["backend_compiles"], "dir": tp.compiler.config.cache_dir,
                      "warnings": [str(x.message) for x in ws]}))
""")


def _run(env_extra, cwd=None, preexec=None, script=_SCRIPT):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-c", script], env=env, cwd=cwd, capture_output=True,
                       text=True, timeout=300, preexec_fn=preexec)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def test_new_process_with_a_warm_cache_compiles_nothing(tmp_path):
    env = {"TENSORPLAY_CACHE_DIR": str(tmp_path / "c")}
    a, _ = _run(env)
    b, err = _run(dict(env, TENSORPLAY_LOGS="cache"))
    assert a["ok"] and b["ok"]
    assert (a["misses"], a["compiles"]) == (1, 1)
    assert (b["hits"], b["misses"], b["compiles"]) == (1, 0, 0)
    assert "hit " in err


_STATE = _SCRIPT + textwrap.dedent("""
    st = tp._C._llvm_state() if hasattr(tp._C, "_llvm_state") else None
    print(json.dumps({"state": st, "compiles": s["backend_compiles"], "hits": s["cache_hits"],
                      "ok": bool(np.allclose(y.numpy(), 512.0))}))
""")


def test_a_warm_hit_sets_up_no_code_generator(tmp_path):
    # a hit links object code: LLVM's code generators (the O3 pipeline's
    # and the object emitter's target machines) are made on a miss only
    env = {"TENSORPLAY_CACHE_DIR": str(tmp_path / "c")}
    a, _ = _run(env, script=_STATE)
    if a["state"] is None:
        pytest.skip("built without LLVM")
    b, _ = _run(env, script=_STATE)
    st = {k: a["state"][k] for k in ("host", "jit", "codegen")}
    assert a["compiles"] == 1 and st == {"host": True, "jit": True, "codegen": True}
    # nor the JIT: the object is linked by the back end's own loader
    st = {k: b["state"][k] for k in ("host", "jit", "codegen")}
    assert b["compiles"] == 0 and st == {"host": True, "jit": False, "codegen": False}
    assert b["state"]["direct_loads"] == 1 and b["ok"]


def test_a_hit_the_direct_loader_declines_is_linked_by_the_jit(tmp_path):
    # STAX_LLVM_ORC_LOAD=1 makes the loader decline every object, as it
    # does for one of a kind it does not know: ORC links it, same result
    env = {"TENSORPLAY_CACHE_DIR": str(tmp_path / "c")}
    a, _ = _run(env, script=_STATE)
    if a["state"] is None:
        pytest.skip("built without LLVM")
    b, _ = _run(dict(env, STAX_LLVM_ORC_LOAD="1"), script=_STATE)
    assert b["ok"] and b["compiles"] == 0 and b["hits"] == 1
    assert b["state"]["jit"] and b["state"]["direct_loads"] == 0


_GPT_HIT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import tensorplay as tp
    sys.path.insert(0, os.path.join(os.environ["TP_ROOT"], "bench"))
    import cache as bc
    ns = {}
    exec(bc._CHILD.split("# the back end's share")[0], ns)
    tp.manual_seed(0)
    m = ns["GPT"]()
    idx = tp.randint(0, 256, (2, 16))
    with tp.no_grad():
        want = m(idx).numpy()
        cf = tp.compile(m, strict_native=True)
        got = cf(idx).numpy()
    s = cf.stats()
    print(json.dumps({"ok": bool(np.allclose(got, want, rtol=1e-4, atol=1e-4)),
                      "hits": s["cache_hits"], "compiles": s["backend_compiles"],
                      "state": tp._C._llvm_state() if hasattr(tp._C, "_llvm_state") else None}))
""")


def test_every_kernel_of_a_gpt_is_linked_without_the_jit(tmp_path):
    # the kernels of a whole model (layer norms, GELU, attention,
    # reductions: their objects call memset / memcpy) all take the direct
    # loader's path, and the model computes what eager does
    env = {"TENSORPLAY_CACHE_DIR": str(tmp_path / "c"), "TP_ROOT": ROOT,
           "OPENBLAS_NUM_THREADS": "1"}
    a, _ = _run(env, script=_GPT_HIT)
    if a["state"] is None:
        pytest.skip("built without LLVM")
    b, _ = _run(env, script=_GPT_HIT)
    assert a["ok"] and b["ok"] and a["compiles"] > 5
    assert b["compiles"] == 0 and b["hits"] == a["compiles"]
    assert not b["state"]["jit"] and b["state"]["direct_loads"] == b["hits"]


def test_cache_disabled_by_environment(tmp_path):
    env = {"TENSORPLAY_CACHE_DIR": str(tmp_path / "c"), "TENSORPLAY_CACHE": "0"}
    a, _ = _run(env)
    b, _ = _run(env)
    assert a["ok"] and b["compiles"] == 1 and b["hits"] == 0
    assert not (tmp_path / "c").exists()


def test_relative_cache_dir_is_resolved_against_the_working_directory(tmp_path):
    a, err = _run({"TENSORPLAY_CACHE_DIR": "rel/cache", "TENSORPLAY_LOGS": "cache"}, cwd=tmp_path)
    assert a["ok"] and a["dir"] == str(tmp_path / "rel" / "cache")
    assert "is relative: using " + str(tmp_path / "rel" / "cache") in err
    assert len(list((tmp_path / "rel" / "cache" / "kernels").glob("*.tpk"))) == 1
    b, _ = _run({"TENSORPLAY_CACHE_DIR": "rel/cache"}, cwd=tmp_path)
    assert b["compiles"] == 0 and b["hits"] == 1


def test_full_disk_degrades_with_one_warning(tmp_path):
    def small_files():
        import resource
        import signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG instead of a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))

    d = tmp_path / "c"
    a, err = _run({"TENSORPLAY_CACHE_DIR": str(d), "TENSORPLAY_LOGS": "cache",
                   "PYTHONDONTWRITEBYTECODE": "1"}, preexec=small_files)
    assert a["ok"] and a["compiles"] == 1
    assert len([w for w in a["warnings"] if "compile cache" in w]) == 1, a["warnings"]
    assert "cannot write the cache: write" in err
    # no entry and no temporary file left behind
    assert list((d / "kernels").iterdir()) == []


def test_processes_racing_on_one_key(tmp_path):
    d = tmp_path / "c"
    go = tmp_path / "go"
    env = dict(os.environ, TENSORPLAY_CACHE_DIR=str(d), TP_TEST_GO=str(go))
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    procs = [subprocess.Popen([sys.executable, "-c", _SCRIPT], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    time.sleep(0.5)
    go.write_text("go")
    outs = []
    for p in procs:
        o, e = p.communicate(timeout=300)
        assert p.returncode == 0, e
        outs.append(json.loads(o.strip().splitlines()[-1]))
    assert all(o["ok"] for o in outs)
    assert all(o["hits"] + o["misses"] == 1 for o in outs)
    ents = list((d / "kernels").iterdir())
    assert len(ents) == 1 and ents[0].suffix == ".tpk", ents    # no temporary left
    b, _ = _run({"TENSORPLAY_CACHE_DIR": str(d)})
    assert (b["hits"], b["compiles"]) == (1, 0)


# ------------------------------------------------------------ eviction
def test_least_recently_used_entries_are_evicted(cdir, monkeypatch):
    for m in (128, 129, 130):
        _compile_run(m=m)
        time.sleep(0.02)
    ents = {p.name: p.stat().st_size for p in _entries(cdir)}
    assert len(ents) == 3
    names_by_age = [p.name for p in sorted(_entries(cdir), key=lambda p: p.stat().st_mtime_ns)]
    _release()
    cf = _compile_run(m=128)               # a hit makes the oldest entry young
    assert _stats(cf)[0] == 1
    time.sleep(0.02)
    size = max(ents.values())
    monkeypatch.setattr(config, "cache_size_mb", (3.5 * size) / 2 ** 20)
    _compile_run(m=131)
    left = {p.name for p in _entries(cdir)}
    assert len(left) == 3
    assert names_by_age[0] in left                 # used recently: kept
    assert names_by_age[1] not in left             # least recently used: evicted
    assert tp.compiler.cache_info()["bytes"] <= 3.5 * size


# ------------------------------------------------------------ artifacts
def test_save_and_load_cache_artifacts(cdir, tmp_path, monkeypatch):
    assert tp.compiler.save_cache_artifacts() is None
    _compile_run(m=128)
    _compile_run(m=132)
    data, info = tp.compiler.save_cache_artifacts()
    assert isinstance(data, bytes) and info["entries"] == 2
    other = tmp_path / "other"
    monkeypatch.setattr(config, "cache_dir", str(other))
    _release()
    r = tp.compiler.load_cache_artifacts(data)
    assert r == {"loaded": 2, "rejected": 0}
    assert tp.compiler.cache_info()["entries"] == 2
    cf = _compile_run(m=132)
    assert _stats(cf) == (1, 0, 0)
    # a damaged entry inside the bytes is rejected, the others loaded
    bad = bytearray(data)
    bad[-10] ^= 0xFF
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "third"))
    assert tp.compiler.load_cache_artifacts(bytes(bad)) == {"loaded": 1, "rejected": 1}
    with pytest.raises(ValueError):
        tp.compiler.load_cache_artifacts(b"not a cache")
    with pytest.raises(ValueError):
        tp.compiler.load_cache_artifacts(data[: len(data) // 2])


def test_the_suite_never_writes_to_the_home_cache():
    # conftest.py: a per-session temporary directory, inherited by subprocesses
    home = os.path.realpath(os.path.expanduser(os.path.join("~", ".cache")))
    d = os.environ["TENSORPLAY_CACHE_DIR"]
    assert os.path.isabs(d) and not os.path.realpath(d).startswith(home + os.sep)
    assert config.cache_dir == d


_DYN = textwrap.dedent("""
    import json
    import numpy as np
    import tensorplay as tp
    def f(x):
        return tp.softmax(x * 2, -1) + x.sin()
    cf = tp.compile(f, dynamic=True)
    ok = True
    for n in (4, 6, 9):
        x = tp.randn(n, n + 3)
        ok = ok and bool(np.allclose(cf(x).numpy(), f(x).numpy(), rtol=1e-5, atol=1e-6))
    s = cf.stats()
    print(json.dumps({"ok": ok, "hits": s["cache_hits"], "misses": s["cache_misses"],
                      "compiles": s["backend_compiles"]}))
""")


def test_dynamic_kernels_are_cached_across_processes(tmp_path):
    # size-generic kernels (sizes as kernel arguments) key on their structure
    env = {"TENSORPLAY_CACHE_DIR": str(tmp_path / "c")}
    a, _ = _run(env, script=_DYN)
    b, _ = _run(env, script=_DYN)
    assert a["ok"] and b["ok"]
    assert a["compiles"] >= 1 and a["hits"] == 0
    assert b["compiles"] == 0 and b["hits"] == a["misses"]


# ------------------------------------------------------ the size index
def test_stores_update_the_size_index_instead_of_scanning(cdir):
    """Issue 17 item 3: a store adds its bytes to dir/kernels.bytes; the
    directory is scanned only when there is no index (or on eviction)."""
    scans0 = tp.compiler.cache_info()["store_scans"]
    _compile_run(m=128)
    assert tp.compiler.cache_info()["store_scans"] == scans0 + 1     # no index yet
    idx = cdir / "kernels.bytes"
    assert int(idx.read_text()) == tp.compiler.cache_info()["bytes"]
    _compile_run(m=133)
    _compile_run(m=134)
    info = tp.compiler.cache_info()
    assert info["store_scans"] == scans0 + 1
    assert int(idx.read_text()) == info["bytes"] and info["entries"] == 3
    idx.write_text("not a number")     # a damaged index: this process's own view rewrites it
    _compile_run(m=135)
    info = tp.compiler.cache_info()
    assert info["store_scans"] == scans0 + 1
    assert int(idx.read_text()) == info["bytes"]


_NVRTC = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, TESTS)
    import tensorplay as tp
    from _nvrtc import nvrtc_compile
    def f(x, w):
        return (tp.relu(x + w) * 2).sum(-1)
    _, progs = nvrtc_compile(f, tp.ones(64, 128), tp.ones(64, 128))
    h, m, c = tp.compiler._cache.counters()
    ks = [k for p in progs for k in p.kernels]
    print(json.dumps({"hits": h, "misses": m, "compiles": c,
                      "ptx": [k.ptx if hasattr(k, "ptx") else None for k in ks],
                      "source": [k.source for k in ks]}))
""")


@pytest.mark.skipif(not tp._C.nvrtc_available(), reason="libnvrtc not found")
def test_nvrtc_kernels_are_cached_across_processes(tmp_path):
    # the NVRTC back end's object (PTX here, the device's CUBIN for CUDA
    # tensors: tests/gpu/test_gpu_cache.py) is stored and loaded like LLVM's
    env = {"TENSORPLAY_CACHE_DIR": str(tmp_path / "c")}
    script = f"TESTS = {os.path.dirname(os.path.abspath(__file__))!r}\n" + _NVRTC
    a, _ = _run(env, script=script)
    b, err = _run(dict(env, TENSORPLAY_LOGS="cache"), script=script)
    assert a["misses"] >= 1 and a["compiles"] == a["misses"]
    assert (b["hits"], b["misses"], b["compiles"]) == (a["misses"], 0, 0)
    assert "hit " in err and b["source"] == a["source"]
