"""Scalar-operand edge cases against torch 2.13 CPU (issue 13): rsub of a
Python float on unsigned ints (was computed as -x + 2.5 in uint8: 257.5),
bool subtraction through rsub, bool ** bool, a Python int base of an
integer pow wrapping into the dtype (300 ** int8 is 44 ** int8), clamp of
bool by bool bounds, softmax of integers. Each case compares dtype, shape,
values or the exception type."""

import pytest

import tensorplay as tp

torch = pytest.importorskip("torch")


from _torch_outcome import outcome, same  # noqa: E402


cases = {}


def C(n, f):
    cases[n] = f


X8 = [1, 0, 3]
for dt in ["uint8", "int8", "int32", "int64"]:
    C(f"rsub {dt} float", lambda m, dt=dt: m.rsub(m.tensor(X8, dtype=getattr(m, dt)), 2.5))
    C(f"rsub {dt} alpha", lambda m, dt=dt: m.rsub(m.tensor(X8, dtype=getattr(m, dt)), 2, alpha=2))
    C(f"rsub {dt} True", lambda m, dt=dt: m.rsub(m.tensor(X8, dtype=getattr(m, dt)), True))
    C(f"sub {dt} True", lambda m, dt=dt: m.tensor(X8, dtype=getattr(m, dt)) - True)
    for base in [300, -1, 2, -129]:
        C(f"rpow {dt} {base}", lambda m, dt=dt, b=base: b ** m.tensor([1, 2], dtype=getattr(m, dt)))
for e in [True, False]:
    C(f"bool pow {e}", lambda m, e=e: m.tensor([True, False]) ** e)
C("bool pow bool tensor", lambda m: m.tensor([True, False]) ** m.tensor([True, True]))
C("bool rpow", lambda m: True ** m.tensor([True, False]))
for lo, hi in [(True, None), (None, True), (False, True), (2, None), (2.5, None), (-1, 3)]:
    C(f"clamp bool {lo} {hi}", lambda m, lo=lo, hi=hi: m.clamp(m.tensor([True, False]), lo, hi))
for fn in ["softmax", "log_softmax"]:
    C(f"{fn} int", lambda m, fn=fn: getattr(m, fn)(m.tensor([1, 2]), 0))
C("cross_entropy int", lambda m: m.nn.functional.cross_entropy(m.tensor([[1, 2]]), m.tensor([0])))


@pytest.mark.parametrize("name", sorted(cases))
def test_matches_torch(name):
    want, got = outcome(torch, cases[name]), outcome(tp, cases[name])
    assert same(got, want), (got, want)


def test_compiled_rsub_of_a_float_on_uint8():
    x = tp.tensor(X8, dtype=tp.uint8)
    assert tp.compile(lambda a: tp.rsub(a, 2.5))(x).tolist() == [1.5, 2.5, -0.5]
