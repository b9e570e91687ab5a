"""One compile miss is one C call for the pipeline (issue 12 item 3):
_C.stax_compile runs trace -> the driver's prepare step -> front-end passes
-> Stax lowering, so a miss no longer crosses into C once per stage (it did
7 times on a recompile: _guard_call_key, Generator.get_state, trace,
run_frontend_passes, _cache_counters, stax_backend, _cache_counters)."""
import os
import sys

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _C

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from crossings import count, dynamic_miss, misses  # noqa: E402


def test_a_recompile_crosses_into_c_three_times():
    first, recompile = misses()
    n, names = recompile
    assert names.count("stax_compile") == 1
    for stage in ("trace", "run_frontend_passes", "stax_backend", "_cache_counters"):
        assert stage not in names
    assert n <= 3, names
    assert first[1].count("stax_compile") == 1


def test_an_automatic_dynamic_recompile_keys_the_call_in_c():
    # the call keyed statically is keyed again by rank inside stax_compile
    # (rekey), not by a _guard_call_key call from the Python driver
    n, names = dynamic_miss()
    assert "_guard_call_key" not in names, names
    assert names.count("stax_compile") == 1


def test_a_rekeyed_version_serves_other_sizes():
    def f(x, w):
        return tp.relu(x + w) * 2
    cf = tp.compile(f)
    for n in (8, 9, 12, 5):
        x, w = tp.randn(n), tp.randn(n)
        np.testing.assert_allclose(cf(x, w).numpy(), f(x, w).numpy(), rtol=1e-6)
    assert len(cf.versions) == 2 and cf.versions[1].dynamic
    v = cf.versions[1]
    assert v.gkey[0] == cf.versions[1].sig_args and v.sig_args is not None


def test_stax_compile_runs_the_pipeline_and_returns_one_artifact():
    x = tp.randn(3, 4)

    def f(a):
        return tp.relu(a + 1) * 2

    seen = []

    def prepare(tr):
        seen.append(tr)
        return True
    tr, gm, art, err, counts = _C.stax_compile(f, (x,), None, None, [x], prepare, None, {})
    assert seen == [tr] and err is None and len(counts) == 3
    assert gm is tr.graph_module
    out = art(x)
    out = out[0] if isinstance(out, (tuple, list)) else out
    np.testing.assert_allclose(out.numpy(), f(x).numpy(), rtol=1e-6)
    # prepare's false result skips lowering; lower=None leaves it to the caller
    assert _C.stax_compile(f, (x,), None, None, [x], lambda tr: False, None, {})[2] is None
    assert _C.stax_compile(f, (x,), None, None, [x])[2] is None


def test_stax_compile_returns_the_lowering_error_and_raises_the_trace_error():
    x = tp.randn(4)

    def bad(a):
        return tp.nonzero(a > 0)
    _, _, art, err, _ = _C.stax_compile(bad, (x,), None, None, [x], None, None,
                                        {"strict_native": True})
    assert art is None and isinstance(err, _C.NativeCompileError)

    def raises(a):
        raise ValueError("in the traced function")
    with pytest.raises(ValueError, match="in the traced function"):
        _C.stax_compile(raises, (x,), None, None, [x], None, None, {})
    # the prepare step's exception propagates, lowering is not reached
    with pytest.raises(KeyError):
        _C.stax_compile(lambda a: a + 1, (x,), None, None, [x],
                        lambda tr: {}["nope"], None, {})


def test_count_sees_c_calls():
    n, names = count(lambda: _C.is_tracing())
    assert n == 1 and names == ["is_tracing"]
