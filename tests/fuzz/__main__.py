"""Seed sweep of the differential fuzzer, grouping failures by message.

    PYTHONPATH=python:tests python3 -m fuzz --n 500 [--seed 0] [--api torch] [--show 2]

Each failure prints its seed; rerun one with --seed S --n 1 --show 1 for the repro.
"""
import argparse
import collections
import re
import sys
import time
import traceback

from .harness import API, FuzzFailure, Runner, TorchOracle, draw_plan
from .program import RandomDrawer, generate


def run_one(api, seed, strict=True, torch=False, do_shrink=False, avoid=()):
    d = RandomDrawer(seed)
    prog = generate(d, avoid)
    plan = draw_plan(prog, d)
    r = TorchOracle(api, prog, plan) if torch else Runner(api, prog, plan, strict=strict, avoid=avoid)
    try:
        return r, r.run()
    except FuzzFailure as e:
        if not do_shrink or torch:
            raise
        from .shrink import shrink
        raise FuzzFailure(shrink(api, prog, plan, str(e))) from None


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--api", default="tensorplay")
    ap.add_argument("--show", type=int, default=1, help="repros printed per failure group")
    ap.add_argument("--nonstrict", action="store_true")
    ap.add_argument("--dynamic", action="store_true", help="tp.compile(dynamic=True)")
    ap.add_argument("--backend", default=None, help="tp.compile backend (default stax)")
    ap.add_argument("--shrink", action="store_true", help="greedily shrink each failure")
    ap.add_argument("--brief", action="store_true", help="repros without the check helper")
    ap.add_argument("--avoid", default="", help="comma list: statement kinds / checks to leave out")
    ap.add_argument("--trace", action="store_true", help="print each seed before running it (crash hunting)")
    ap.add_argument("--torch", action="store_true", help="eager tensorplay vs eager PyTorch instead")
    a = ap.parse_args(argv)
    api = API(a.api, a.backend, a.dynamic)
    if a.api == "tensorplay":   # the limit is process-wide (reported): lift it for the sweep
        api.tp.compiler.config.accumulated_cache_size_limit = 1 << 30
    groups = collections.OrderedDict()
    stats = collections.Counter()
    fallbacks = collections.Counter()
    eager_exc = collections.defaultdict(list)
    t0 = time.time()
    for seed in range(a.seed, a.seed + a.n):
        if a.trace:
            print(f"seed {seed}", file=sys.stderr, flush=True)
        try:
            r, res = run_one(api, seed, strict=not a.nonstrict, torch=a.torch, do_shrink=a.shrink,
                             avoid=a.avoid.split(",") if a.avoid else ())
            stats[res] += 1
            stats.update(r.events)
            if r.eager_exc:
                eager_exc[re.sub(r"\d+", "N", r.eager_exc)].append(seed)
            for m in r.fallback_ops:
                fallbacks[re.sub(r"\d+", "N", m)[:100]] += 1
        except FuzzFailure as e:
            msg = str(e)
            head = msg.split("\n", 1)[0]
            key = re.sub(r"call \d+ \(.*?\):", "call N:", head)
            key = re.sub(r"call \d+", "call N", key)
            key = re.sub(r"at \([^)]*\)", "at (..)", key)
            key = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "N", key)[:140]
            groups.setdefault(key, []).append((seed, len(msg), msg))
            stats["fail"] += 1
            print(f"FAIL seed {seed}: {head[:200]}", flush=True)
        except Exception:  # harness bug or a crash caught as exception
            tb = traceback.format_exc()
            key = "HARNESS " + tb.strip().splitlines()[-1][:120]
            groups.setdefault(key, []).append((seed, len(tb), tb))
            stats["harness"] += 1
    print(f"{a.n} programs in {time.time() - t0:.1f}s: {dict(stats)}")
    if fallbacks:
        print("strict_native fallbacks (NativeCompileError, first line):")
        for m, c in fallbacks.most_common(20):
            print(f"  {c:4d}  {m}")
    if eager_exc:
        print("programs rejected by eager on their first call (not checked further):")
        for m, seeds in sorted(eager_exc.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(seeds):4d}  {m}  seeds {seeds[:6]}")
    for key, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"\n=== {len(items)}x {key}\n    seeds: {[s for s, _, _ in items[:12]]}")
        for s, _, msg in sorted(items, key=lambda t: t[1])[:a.show]:
            if a.brief:
                msg = "\n".join(ln for ln in msg.split("def check(")[0].splitlines()
                                if ln.strip() and not ln.startswith(("import", "from ", "# diff")))
            print(f"--- seed {s}\n{msg}")
    return 1 if groups else 0


if __name__ == "__main__":
    sys.exit(main())
