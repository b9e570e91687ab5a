"""Symbolic sizes for dynamic shapes (seed Key Point 8).

While a version is traced with some input dimensions dynamic, a size read
of such a dimension (``x.size(1)``, ``b, t = x.size()``, ``x.shape``)
returns a proxy whose sample value is the size and whose ``meta['sym']`` is
an `Expr` over the symbols ``s0, s1, ...`` (one per distinct sample value
of the dynamic input dimensions: torch's "duck sizing"). Arithmetic on such
proxies records graph nodes (evaluated again at every new size, so the graph
is valid for every size of the class) and builds the expression beside
them; ``__bool__`` of a relation records a *shape guard* (``s1 <= 64``)
instead of a data gate, and ``int()``/``float()``/``range()`` specialize
(guard ``s1 == 5``), as torch does.

Sizes of intermediate tensors are matched to expressions by a *shadow*
trace: every recorded op also runs on zero-filled inputs whose dynamic
dimensions are the sample's plus a distinct offset per symbol; a dimension
equal in the sample and the shadow is static, one that moves with a symbol
is that symbol (or an affine form / product of two symbols); anything else
is read conservatively (exact guards on the inputs, as before).
"""
import operator

__all__ = ["Expr", "ShapeEnv", "eval_guards", "compile_guards"]

_OFFSETS = (3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73)

_BIN = {
    "add": ("+", operator.add), "sub": ("-", operator.sub), "mul": ("*", operator.mul),
    "floordiv": ("//", operator.floordiv), "mod": ("%", operator.mod),
    "truediv": ("/", operator.truediv), "pow": ("**", operator.pow),
    "lt": ("<", operator.lt), "le": ("<=", operator.le), "eq": ("==", operator.eq),
    "ne": ("!=", operator.ne), "gt": (">", operator.gt), "ge": (">=", operator.ge),
    "and": ("&", operator.and_), "or": ("|", operator.or_),
}
_PREC = {"+": 1, "-": 1, "*": 2, "//": 2, "%": 2, "/": 2, "**": 3}
_NEGATE = {"lt": "ge", "le": "gt", "eq": "ne", "ne": "eq", "gt": "le", "ge": "lt"}


class Expr:
    """An integer (or float, or bool) expression over symbolic sizes.
    Leaves: ('sym', k) the symbol s<k>; ('size', i, d) dimension d of flat
    input i (only in the duck-sizing equality guards); ('const', c)."""
    __slots__ = ("op", "args")

    def __init__(self, op, *args):
        self.op = op
        self.args = args

    # -- evaluation ------------------------------------------------------
    def evaluate(self, syms, sizes):
        """syms: symbol -> value; sizes(i, d): dimension d of flat input i."""
        op = self.op
        if op == "sym":
            return syms[self.args[0]]
        if op == "size":
            return sizes(self.args[0], self.args[1])
        if op == "neg":
            return -_ev(self.args[0], syms, sizes)
        if op == "not":
            return not _ev(self.args[0], syms, sizes)
        if op in ("min", "max"):
            f = min if op == "min" else max
            return f(_ev(a, syms, sizes) for a in self.args)
        return _BIN[op][1](_ev(self.args[0], syms, sizes), _ev(self.args[1], syms, sizes))

    def free_symbols(self, out=None):
        out = set() if out is None else out
        if self.op == "sym":
            out.add(self.args[0])
        for a in self.args:
            if isinstance(a, Expr):
                a.free_symbols(out)
        return out

    # -- printing --------------------------------------------------------
    def _fmt(self, names):
        op = self.op
        if op == "sym":
            return f"s{self.args[0]}", 9
        if op == "size":
            return names(self.args[0], self.args[1]), 9
        if op == "neg":
            s, p = _fmt(self.args[0], names)
            return "-" + (s if p >= 3 else f"({s})"), 3
        if op == "not":
            s, _ = _fmt(self.args[0], names)
            return f"not ({s})", 0
        if op in ("min", "max"):
            return f"{op}(" + ", ".join(_fmt(a, names)[0] for a in self.args) + ")", 9
        sym = _BIN[op][0]
        prec = _PREC.get(sym, 0)
        (a, pa), (b, pb) = _fmt(self.args[0], names), _fmt(self.args[1], names)
        if pa < prec:
            a = f"({a})"
        if pb <= prec and prec:
            b = f"({b})"
        return f"{a} {sym} {b}", prec

    def text(self, names=None):
        names = names or (lambda i, d: f"size(flat[{i}], {d})")
        return self._fmt(names)[0]

    def __str__(self):
        return self.text()

    __repr__ = __str__

    def __eq__(self, other):          # structural (used as dict keys)
        return isinstance(other, Expr) and self.op == other.op and self.args == other.args

    def __hash__(self):
        return hash((self.op, self.args))

    def negated(self):
        if self.op in _NEGATE:
            return Expr(_NEGATE[self.op], *self.args)
        return Expr("not", self)


def _ev(a, syms, sizes):
    return a.evaluate(syms, sizes) if isinstance(a, Expr) else a


def _fmt(a, names):
    if isinstance(a, Expr):
        return a._fmt(names)
    return repr(a), 9


class SymValue:
    """What traced arithmetic runs on to build an expression: operators
    return new SymValues (constants folded)."""
    __slots__ = ("e",)

    def __init__(self, e):
        self.e = e


def _unwrap(x):
    return x.e if isinstance(x, SymValue) else x


def _binop(name):
    f = _BIN[name][1]

    def fwd(a, b):
        a, b = _unwrap(a), _unwrap(b)
        if not isinstance(a, Expr) and not isinstance(b, Expr):
            return f(a, b)
        if not isinstance(a, (Expr, int, float, bool)) or not isinstance(b, (Expr, int, float, bool)):
            return NotImplemented
        # x + 0, x * 1: the same expression
        if name in ("add", "sub") and b == 0 and not isinstance(b, Expr):
            return SymValue(a)
        if name == "mul" and not isinstance(b, Expr) and b == 1:
            return SymValue(a)
        if name == "mul" and not isinstance(a, Expr) and a == 1:
            return SymValue(b)
        return SymValue(Expr(name, a, b))

    def rev(a, b):
        return fwd(b, a)
    return fwd, rev


for _n in ("add", "sub", "mul", "floordiv", "mod", "truediv", "pow", "and", "or"):
    _f, _r = _binop(_n)
    setattr(SymValue, f"__{_n}__" if _n not in ("and", "or") else f"__{_n}__", _f)
    setattr(SymValue, f"__r{_n}__", _r)
for _n in ("lt", "le", "eq", "ne", "gt", "ge"):
    setattr(SymValue, f"__{_n}__", _binop(_n)[0])
SymValue.__neg__ = lambda self: SymValue(Expr("neg", self.e))
SymValue.__pos__ = lambda self: self
SymValue.__hash__ = None


def apply(target, args, kwargs):
    """target(*args) on expressions (args: Expr or numbers): an Expr, a
    number (folded), or None when the target is not arithmetic."""
    try:
        r = target(*[SymValue(a) if isinstance(a, Expr) else a for a in args], **(kwargs or {}))
    except Exception:  # noqa: BLE001 - not an operation on sizes
        return None
    if isinstance(r, SymValue):
        return r.e
    if isinstance(r, (bool, int, float)):
        return r
    return None


class ShapeEnv:
    """The symbols of one trace and the shape guards it records.

    dyn: per flat input index, the set of its dynamic dimensions (True: all).
    Dimensions of size 0 or 1 are never symbolic (torch specializes them)."""

    def __init__(self, dyn, paths):
        self.dyn = dyn
        self.paths = paths
        self.symbols = []          # k -> (flat, dim, sample value, shadow value)
        self.by_value = {}         # sample value -> k (duck sizing)
        self.dims = {}             # (flat, dim) -> k
        self.guards = []           # [(Expr relation, expected bool)]
        self._guard_set = set()
        self.used = set()          # symbols read at Python level

    # -- from the tracer (C) ---------------------------------------------
    def placeholder(self, i, t):
        """A placeholder's shadow value: zeros with each dynamic dimension
        grown by its symbol's offset (None: nothing dynamic, the shadow is
        the sample itself)."""
        dyn = self.dyn.get(i)
        if not dyn:
            return None
        shape = list(t.shape)
        moved = False
        for d, n in enumerate(shape):
            if n < 2 or (dyn is not True and d not in dyn):
                continue
            k = self.by_value.get(n)
            if k is None:
                k = len(self.symbols)
                if k >= len(_OFFSETS):
                    continue
                self.by_value[n] = k
                self.symbols.append((i, d, n, n + _OFFSETS[k]))
            elif self.symbols[k][:2] != (i, d):
                # duck sizing: equal sample sizes are one symbol, guarded
                self._add(Expr("eq", Expr("size", i, d), Expr("sym", k)), True)
            self.dims[(i, d)] = k
            shape[d] = self.symbols[k][3]
            moved = True
        if not moved:
            return None
        import tensorplay as tp
        z = tp.zeros(*shape, dtype=t.dtype)
        # the shadow keeps the sample's dimension order in memory (views
        # that need a layout behave the same)
        strides = t.stride()
        order = sorted(range(len(shape)), key=lambda d: (-strides[d], d))
        if order != list(range(len(shape))):
            inv = [0] * len(order)
            for j, d in enumerate(order):
                inv[d] = j
            z = tp.zeros(*[shape[d] for d in order], dtype=t.dtype).permute(*inv)
        return z

    def input_dim(self, i, d, n):
        """A read of dimension d of placeholder i: its symbol, or None
        (static: the caller guards the exact size)."""
        k = self.dims.get((i, d))
        if k is None:
            return None
        if k not in self.used:
            self.used.add(k)
            self._add(Expr("ge", Expr("sym", k), 2), True)
        return Expr("sym", k)

    def derived_dim(self, n, n2):
        """A read of a dimension of an intermediate tensor: n in the sample,
        n2 in the shadow. An int (static), an Expr, or None (unknown)."""
        if n == n2:
            return n
        cands = []
        for k, (_, _, v, v2) in enumerate(self.symbols):
            dv = v2 - v
            if (n2 - n) % dv == 0:
                a = (n2 - n) // dv
                b = n - a * v
                if a != 0 and abs(a) <= 2:
                    cands.append((k, None, a, b))
        for k, (_, _, v, v2) in enumerate(self.symbols):
            for j in range(k, len(self.symbols)):
                w, w2 = self.symbols[j][2], self.symbols[j][3]
                if v * w == n and v2 * w2 == n2:
                    cands.append((k, j, 1, 0))
        if len(cands) != 1:
            return None
        k, j, a, b = cands[0]
        e = Expr("sym", k)
        if j is not None:
            e = Expr("mul", e, Expr("sym", j))
        if a != 1:
            e = Expr("mul", a, e)
        if b:
            e = Expr("add", e, b)
        for s in e.free_symbols():
            if s not in self.used:
                self.used.add(s)
                self._add(Expr("ge", Expr("sym", s), 2), True)
        return e

    def guard(self, e, value):
        """bool() of a relation: a shape guard."""
        if isinstance(e, Expr):
            self._add(e, bool(value))

    def specialize(self, e, value):
        """int()/float()/index() of a symbolic size: guard its value."""
        if isinstance(e, Expr):
            self._add(Expr("eq", e, value), True)

    def propagate(self, target, args, kwargs):
        return apply(target, args, kwargs)

    # -- after the trace ---------------------------------------------------
    def _add(self, e, expected):
        key = (e, expected)
        if key not in self._guard_set:
            self._guard_set.add(key)
            self.guards.append(key)

    def symbol_sources(self):
        """k -> (flat index, dim) the symbol is read from at dispatch."""
        return tuple((i, d) for i, d, _, _ in self.symbols)

    def names(self):
        paths = self.paths
        return lambda i, d: f"size({paths[i]}, {d})" if i < len(paths) else f"size(flat[{i}], {d})"

    def guard_texts(self):
        nm = self.names()
        return [(e if exp else e.negated()).text(nm) for e, exp in self.guards]


_PROBES = tuple(range(2, 130)) + (1000, 4097, 65537, 2 ** 20 + 1, 2 ** 31 - 1)


def constraint_violations(guards, marked, names):
    """Guards on one symbolic size that some size of its dynamic range (>=
    2) fails: the dims the user asked to be dynamic (marked: the symbols of
    tp.compiler.mark_dynamic) but the function specialized. A list of
    (symbol, guard text, constant or None): the constant when the guard
    pins the size (s0 == 4), as torch's ConstraintViolationError says."""
    out = []
    for e, expected in guards:
        free = e.free_symbols()
        if len(free) != 1:
            continue
        (k,) = free
        if k not in marked:
            continue
        g = e if expected else e.negated()

        def holds(n):
            try:
                return bool(g.evaluate({k: n}, lambda i, d: 0))
            except (ArithmeticError, ValueError):
                return False
        if all(holds(n) for n in _PROBES):
            continue
        const = None
        if g.op == "eq":
            a, b = g.args
            if isinstance(a, Expr) and a.op == "sym" and not isinstance(b, Expr):
                const = b
            elif isinstance(b, Expr) and b.op == "sym" and not isinstance(a, Expr):
                const = a
        out.append((k, g.text(names), const))
    return out


def eval_guards(guards, sources, flat):
    """The first guard (index) that fails on the call's tensors, or -1."""
    def sizes(i, d):
        return flat[i].shape[d]
    try:
        syms = [flat[i].shape[d] for i, d in sources]
    except (IndexError, AttributeError):
        return 0
    for j, (e, exp) in enumerate(guards):
        try:
            ok = bool(e.evaluate(syms, sizes)) == exp
        except Exception:  # noqa: BLE001 - a guard that cannot be evaluated fails
            ok = False
        if not ok:
            return j
    return -1


_OPS = {"add": 2, "sub": 3, "mul": 4, "floordiv": 5, "mod": 6, "eq": 7, "ne": 8, "lt": 9,
        "le": 10, "gt": 11, "ge": 12, "min": 13, "max": 14, "and": 15, "or": 16}


def compile_guards(guards, sources):
    """The shape guards as the stack program C dispatch evaluates
    (csrc/guards/dispatch.c, shape_prog_holds): a flat tuple of (op, a, b)
    triples, or None when a guard needs Python (floats, true division)."""
    out = []

    def emit(e):
        if isinstance(e, bool) or (isinstance(e, int) and -(1 << 62) < e < (1 << 62)):
            out.extend((1, int(e), 0))
            return True
        if not isinstance(e, Expr):
            return False
        if e.op == "sym":
            i, d = sources[e.args[0]]
            out.extend((0, i, d))
            return True
        if e.op == "size":
            out.extend((0, e.args[0], e.args[1]))
            return True
        if e.op in ("neg", "not"):
            if not emit(e.args[0]):
                return False
            out.extend((17 if e.op == "neg" else 18, 0, 0))
            return True
        code = _OPS.get(e.op)
        if code is None or len(e.args) < 2:
            return False
        if not emit(e.args[0]):
            return False
        for a in e.args[1:]:
            if not emit(a):
                return False
            out.extend((code, 0, 0))
        return True

    for e, exp in guards:
        if not emit(e):
            return None
        out.extend((19, int(bool(exp)), 0))
    return tuple(out)
