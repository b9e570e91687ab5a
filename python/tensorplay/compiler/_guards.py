"""Guards as the projection of the specialization key (Definition 2.3).

A key is kappa = (sigma, gamma_s, gamma_g, rho) where sigma covers the
arguments (``inputs[0]`` positional, ``inputs[1]`` keyword, by name) and the
free variables (``globals['x']``, ``closure['k']``, ``self.w``), and rho the
grad mode (with the default dtype beside it). A guard is one component:
its path in that structure, its condition text, the expected value (from the
version's key) and the actual value (from the call's key). A version's
guards are written in C with its key (csrc/guards/version.c, inside
_C.stax_compile); ``diff_sig`` returns exactly the components where two keys
differ (Corollary 2.1), for the recompile log."""

import numpy as _np

from tensorplay import _C

__all__ = ["Guard", "diff_sig", "GATE_TEXT"]

GATE_TEXT = _C._guard_gate_text    # one text: csrc/guards/guards.h
_SCALARS = (type(None), bool, int, float, str)


class Guard:
    __slots__ = ("path", "condition", "expected", "actual")

    def __init__(self, path, condition, expected, actual=None):
        self.path, self.condition, self.expected, self.actual = path, condition, expected, actual

    @property
    def ok(self):
        return _same(self.expected, self.actual)

    def __str__(self):
        return self.condition

    def __repr__(self):
        return f"Guard({self.condition!r}, expected={self.expected!r}, actual={self.actual!r})"


def _same(a, b):
    if type(a) is type(b) and _is_value(type(a)) and a != a and b != b:
        return True    # NaN: the same value for a guard
    return type(a) is type(b) and bool(a == b)


def _is_value(t):
    """Scalars guarded by value: Python's and NumPy's (np.float64(2.0), np.int64, np.bool_)."""
    return t in _SCALARS or (isinstance(t, type) and issubclass(t, (_np.number, _np.bool_)))


def _tname(t):
    return getattr(t, "__name__", str(t))


def _is_tsig(s):
    return isinstance(s, tuple) and len(s) == 7 and s[0] == "tensor"


def _type_of(s):
    return s[1] if _is_tsig(s) else s[0]


_TFIELDS = ((3, "dtype"), (4, "device"), (5, "requires_grad"), (6, "strides"))


def diff_sig(e, a, p, out):
    """Append a Guard (expected from e, actual from a) for every differing component."""
    te, ta = _type_of(e), _type_of(a)
    if te is not ta or _is_tsig(e) != _is_tsig(a):
        out.append(Guard(p, f"type({p}) is {_tname(te)}", _tname(te), _tname(ta)))
        return
    if _is_tsig(e):
        se, sa = e[2], a[2]
        if isinstance(se, int):            # dynamic: the rank only
            if se != sa:
                out.append(Guard(f"{p}[2]", f"{p}[2] == {se}", se, sa))
        elif len(se) != len(sa):
            out.append(Guard(f"{p}[2]", f"len({p}[2]) == {len(se)}", len(se), len(sa)))
        else:
            for i, (x, y) in enumerate(zip(se, sa)):
                if x != y:
                    out.append(Guard(f"{p}[2][{i}]", f"{p}[2][{i}] == {x}", x, y))
        for k, _ in _TFIELDS:
            if e[k] != a[k]:
                out.append(Guard(f"{p}[{k}]", f"{p}[{k}] == {e[k]!r}", e[k], a[k]))
        return
    if _is_value(te):
        if not _same(e[1], a[1]):
            out.append(Guard(f"{p}[1]", f"{p}[1] == {e[1]!r}", e[1], a[1]))
        return
    if isinstance(e[1], tuple) and issubclass(te, (tuple, list)):
        if len(e[1]) != len(a[1]):
            out.append(Guard(f"{p}[1]", f"len({p}[1]) == {len(e[1])}", len(e[1]), len(a[1])))
            return
        for i, (x, y) in enumerate(zip(e[1], a[1])):
            diff_sig(x, y, f"{p}[1][{i}]", out)
        return
    if isinstance(e[1], tuple) and issubclass(te, dict):
        ke, ka = [k for k, _ in e[1]], [k for k, _ in a[1]]
        if ke != ka:
            out.append(Guard(f"{p}[1]", f"keys({p}[1]) == {ke!r}", ke, ka))
            return
        for (k, x), (_, y) in zip(e[1], a[1]):
            diff_sig(x, y, f"{p}[1][{k!r}]", out)
        return
    if e[1] != a[1]:
        out.append(Guard(f"{p}[1]", _id_text(p, e[1]), e[1], a[1]))


def _id_text(p, v):
    """The identity guard's condition (v: the id an object signature holds)."""
    return f"{p}[1] == id {v:#x}" if isinstance(v, int) else f"{p}[1] == {v!r}"
