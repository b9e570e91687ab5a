"""Collects what the fuzz run saw (strict_native fallbacks, programs eager
rejects) and prints it in pytest's terminal summary."""
import collections

from _helpers import isolate_compile_budget  # noqa: F401 (autouse fixture, applies to tests/fuzz)

SUMMARY = collections.Counter()
FALLBACK_OPS = collections.Counter()


def pytest_terminal_summary(terminalreporter):
    if not SUMMARY:
        return
    tr = terminalreporter
    tr.write_line("fuzz: " + ", ".join(f"{k}={v}" for k, v in sorted(SUMMARY.items())))
    for m, c in FALLBACK_OPS.most_common(8):
        tr.write_line(f"fuzz: strict_native fallback x{c}: {m}")
