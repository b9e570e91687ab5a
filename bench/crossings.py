"""Python -> C crossings of one compile miss (issue 12 item 3).

    python bench/crossings.py [-v]

A sys.setprofile hook counts the 'c_call' events, made from Python code,
into functions of tensorplay._C (module functions and methods of _C types)
while one call of a compiled function misses and compiles. Two misses are
measured: the first call of `relu(x + w) * 2` (lifting and planning
included) and a recompile of the same function on a new shape; then a
recompile on new sizes of the same rank (automatic dynamic). -v lists
the functions called. Not a test; tests/test_crossings.py keeps the count
from growing."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import tensorplay as tp  # noqa: E402
from tensorplay import _C  # noqa: E402


def _is_c(fn):
    """A function of the extension: a module function of tensorplay._C, or
    a method of one of its types other than Tensor (tensor ops are the
    program's work, not the pipeline's)."""
    owner = getattr(fn, "__self__", None)
    if owner is _C:
        return True
    cls = getattr(fn, "__objclass__", None) or (type(owner) if owner is not None else None)
    return cls is not None and cls in _C_TYPES


_C_TYPES = {t for t in (getattr(_C, n) for n in dir(_C))
            if isinstance(t, type) and t is not _C.Tensor and not issubclass(t, BaseException)}


def count(thunk):
    """(number, names) of Python -> tensorplay._C calls while thunk runs."""
    seen = []

    def prof(frame, event, arg):
        if event == "c_call" and _is_c(arg):
            seen.append(getattr(arg, "__qualname__", None) or getattr(arg, "__name__", "?"))

    sys.setprofile(prof)
    try:
        thunk()
    finally:
        sys.setprofile(None)
    return len(seen), seen


def misses():
    def f(x, w):
        return tp.relu(x + w) * 2

    cf = tp.compile(f)
    x, w = tp.randn(8), tp.randn(8)
    first = count(lambda: cf(x, w))
    y, v = tp.randn(4, 3), tp.randn(4, 3)
    recompile = count(lambda: cf(y, v))
    assert len(cf.versions) == 2, "both calls must have compiled"
    return first, recompile


def dynamic_miss():
    """A recompile caused by sizes only: automatic dynamic shapes key the
    function by rank from then on, the call is keyed again (in C, by
    stax_compile) and compiled dynamic."""
    def f(x, w):
        return tp.relu(x + w) * 2

    cf = tp.compile(f)
    cf(tp.randn(8), tp.randn(8))
    y, v = tp.randn(9), tp.randn(9)
    got = count(lambda: cf(y, v))
    assert len(cf.versions) == 2 and cf.versions[1].dynamic, "the second call must compile dynamic"
    return got


def main():
    first, recompile = misses()
    verbose = "-v" in sys.argv
    for label, (n, names) in (("first call (miss)", first), ("recompile (miss)", recompile),
                              ("size-only recompile (automatic dynamic)", dynamic_miss())):
        print(f"{label}: {n} Python->C crossings")
        if verbose:
            for nm in names:
                print(f"    {nm}")


if __name__ == "__main__":
    main()
