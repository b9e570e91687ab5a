"""Collects what the fuzz run saw (strict_native fallbacks, programs eager
rejects) and prints it in pytest's terminal summary."""
import collections

import pytest

SUMMARY = collections.Counter()
FALLBACK_OPS = collections.Counter()


def pytest_terminal_summary(terminalreporter):
    if not SUMMARY:
        return
    tr = terminalreporter
    tr.write_line("fuzz: " + ", ".join(f"{k}={v}" for k, v in sorted(SUMMARY.items())))
    for m, c in FALLBACK_OPS.most_common(8):
        tr.write_line(f"fuzz: strict_native fallback x{c}: {m}")


@pytest.fixture(autouse=True, scope="module")
def _isolate_compile_budget():
    """These tests compile many functions: lift the process-wide
    accumulated_cache_size_limit while they run and give the compile count
    back afterwards, so later tests of other rooms see the budget they had
    (while the limit was process-wide; harmless now that it is per code object)."""
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
