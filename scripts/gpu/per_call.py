"""Quick GPU figures for a closing check (on a GPU machine, after
scripts/gpu/build.sh): python3 scripts/gpu/per_call.py
- `x + 1` on one element per call, back to back (median of 7 blocks of
  2000 calls, one synchronization per block), eager and compiled (CUDA
  graphs at the config's default, "auto");
- compiled softmax over 16384 rows of 16384, rows 16-byte aligned and not
  (x[:, 1:] of 16385 columns: the scalar row loop), ms per call by CUDA
  events (best of 5 rounds of 20 calls) and as a fraction of a measured
  device-to-device copy of the same bytes (read + write)."""
import os
import sys

import tensorplay as tp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from gpu import events_ms as _events_ms, wall_us  # noqa: E402  (the bench's timers)

F = tp.nn.functional


def per_call(fn):
    return wall_us(fn, tp.cuda.synchronize)


def events_ms(fn):
    return _events_ms(fn, tp.cuda.synchronize, tp.cuda.Event)


def main():
    one = tp.ones(1, device="cuda")
    c1 = tp.compile(lambda a: a + 1)
    c1(one)
    tp.cuda.finish_compiles()          # the kernel's final version
    print(f"x + 1 per call, back to back: eager {per_call(lambda: one + 1):.2f} us, "
          f"compiled {per_call(lambda: c1(one)):.2f} us")
    n = 16384
    src = tp.randn(n, n, device="cuda")
    dst = tp.empty(n, n, device="cuda")
    copy = events_ms(lambda: dst.copy_(src))
    sm = tp.compile(lambda x: F.softmax(x, -1), strict_native=True)
    wide = tp.randn(n, n + 1, device="cuda")
    for name, x in (("aligned", src), ("misaligned x[:, 1:]", wide[:, 1:])):
        sm(x)
        tp.cuda.finish_compiles()
        ms = events_ms(lambda: sm(x))
        print(f"softmax {n}x{n} {name}: {ms:.3f} ms, {copy / ms:.3f} of copy ({copy:.3f} ms)")


if __name__ == "__main__":
    main()
