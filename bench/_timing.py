"""Timing helpers shared by every benchmark in bench/: medians of repeated
calls after warm-up, the streaming-copy bandwidth reference, the CPU model."""
import os
import platform
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def median_time(fn, reps=7, inner=1, warm=2):
    """Median seconds per call of fn over `reps` timings of `inner` calls each."""
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        ts.append((time.perf_counter() - t) / inner)
    return statistics.median(ts)


def cpu_median(fn, reps=5, warm=2):
    """Median CPU seconds (process time: all threads) per call of fn: on a loaded
    machine wall time also measures the other processes' share of the cores,
    CPU time only this call's work."""
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t = time.process_time()
        fn()
        ts.append(time.process_time() - t)
    return statistics.median(ts)


def stream_gbs():
    """GB/s (bytes read + written) of bench/stream.c on every core, best of 10."""
    exe = os.path.join(HERE, "results", "stream")
    if not os.path.exists(exe):
        os.makedirs(os.path.dirname(exe), exist_ok=True)
        subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", os.path.join(HERE, "stream.c"),
                        "-o", exe], check=True)
    return float(subprocess.run([exe], capture_output=True, text=True, check=True).stdout)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def fmt_cell(v):
    """One table cell: '-' for a missing value, 3 significant digits for a float."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.0f}"
    return str(v)


def print_markdown_table(rows, cols):
    """rows (dicts) as a Markdown table with the columns cols, in that order."""
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(fmt_cell(r.get(c)) for c in cols) + " |")
