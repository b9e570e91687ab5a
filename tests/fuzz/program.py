"""The program AST of the differential fuzzer, its typed random generator and
the renderer to Python source.

A program is straight-line SSA code over the public API (one op per
statement, operands are variables or Python literals) plus two kinds of data
gates: an ``if`` on an exact reduction and ``int()`` of a reduction.  The
generator tracks, per variable, the shape under the primary signature, the
dtype (PyTorch promotion rules), the storage it aliases (so in-place ops never
read the memory they write, which PyTorch rejects) and whether it may have a
zero stride (in-place writes to expanded memory are rejected too).

Every random decision goes through a ``Drawer`` whose draws shrink towards 0,
and 0 is always the simplest option, so Hypothesis shrinks a failing program
to a small one.  ``RandomDrawer`` runs the same generator from a plain seed
(the sweep in __main__.py).
"""
import math
import random
import re

# ---------------------------------------------------------------- drawers


class Drawer:
    def int(self, lo, hi):
        raise NotImplementedError

    def bool(self, p=0.5):
        """True with probability ~p; shrinks to False."""
        return self.int(0, 99) >= 100 - int(round(p * 100))

    def choice(self, seq):
        return seq[self.int(0, len(seq) - 1)]

    def weighted(self, pairs):
        """pairs: [(item, weight)], the first item is the simplest."""
        total = sum(w for _, w in pairs)
        r = self.int(0, total - 1)
        for item, w in pairs:
            if r < w:
                return item
            r -= w
        return pairs[-1][0]


class RandomDrawer(Drawer):
    def __init__(self, seed):
        self.r = random.Random(seed)

    def int(self, lo, hi):
        return self.r.randint(lo, hi)


class HypothesisDrawer(Drawer):
    def __init__(self, data):
        from hypothesis import strategies as st
        self.data = data
        self.st = st
        self._cache = {}

    def int(self, lo, hi):
        if lo == hi:
            return lo
        key = (lo, hi)
        s = self._cache.get(key)
        if s is None:
            s = self._cache[key] = self.st.integers(lo, hi)
        return self.data.draw(s)


# ---------------------------------------------------------------- types

CAT = {"bool": "b", "int64": "i", "float32": "f", "float64": "f"}
CAT_RANK = {"b": 0, "i": 1, "f": 2}
DTYPES = ("float32", "float64", "int64", "bool")


def _join(dts):
    """Promote dtypes of one priority class."""
    best = None
    for dt in dts:
        if best is None or CAT_RANK[CAT[dt]] > CAT_RANK[CAT[best]]:
            best = dt
        elif CAT[dt] == CAT[best] and dt == "float64":
            best = dt
    return best


def promote(operands):
    """PyTorch result_type. operands: list of ('dim'|'zero', dtype) or ('scalar', 'b'|'i'|'f')."""
    dims = [dt for k, dt in operands if k == "dim"]
    zeros = [dt for k, dt in operands if k == "zero"]
    scal = [c for k, c in operands if k == "scalar"]
    res = _join(dims)
    z = _join(zeros)
    if z is not None and (res is None or CAT_RANK[CAT[z]] > CAT_RANK[CAT[res]]):
        res = z
    if scal:
        c = max(scal, key=lambda c: CAT_RANK[c])
        if res is None or CAT_RANK[c] > CAT_RANK[CAT[res]]:
            res = {"b": "bool", "i": "int64", "f": "float32"}[c]
    return res


def bcast(a, b):
    out = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


class Var:
    __slots__ = ("name", "shape", "dt", "base", "zstride", "kind", "inexact", "grad")

    def __init__(self, name, shape, dt, base, zstride=False, kind="tensor"):
        self.name, self.shape, self.dt, self.base = name, tuple(shape), dt, base
        self.zstride, self.kind = zstride, kind
        self.inexact = False   # computed through a not bit-exact op (exp, float reduction, module)
        self.grad = False      # computed from a module's output (requires grad)

    @property
    def cat(self):
        return CAT[self.dt] if self.kind == "tensor" else self.dt

    def operand(self):
        """Promotion class of this variable as an operand."""
        if self.kind != "tensor":
            return ("scalar", self.dt)
        return ("dim" if self.shape else "zero", self.dt)


# ---------------------------------------------------------------- literals

FLOAT_LITS = [2.0, 0.5, -1.5, 3.0, 0.0, -0.0, 1e-30, 1e30, float("inf"), float("-inf"), float("nan"), 1e-3]

# ops whose compiled result may differ from eager's in the last bits
# (libm-style functions, divisions inside a formula, float reductions in a
# formula): their results get a tolerance, never a data gate or exact compare
INEXACT_OPS = ("exp", "tanh", "sigmoid", "sin", "cos", "tan", "log", "log1p", "log2", "expm1", "exp2",
               "erf", "erfc", "atan", "asin", "acos", "sinh", "cosh", "asinh", "atanh", "sqrt", "rsqrt",
               "reciprocal", "gelu", "silu", "softplus", "elu", "selu", "celu", "mish", "hardswish",
               "hardsigmoid", "softsign", "logsigmoid", "tanhshrink", "softmax", "log_softmax",
               "deg2rad", "atan2", "hypot", "logaddexp", "fmod", "remainder", "lerp", "addcdiv", "addcmul",
               "float_power")
_INEXACT = re.compile(r"\b(?:" + "|".join(INEXACT_OPS) + r")_?\(")


def inexact_text(text):
    return _INEXACT.search(text) is not None
INT_LITS = [2, 1, 0, -3, 7, 100]


def lit(v):
    if isinstance(v, bool):
        return repr(v)
    if isinstance(v, float):
        if math.isnan(v):
            return 'float("nan")'
        if math.isinf(v):
            return 'float("inf")' if v > 0 else 'float("-inf")'
    return repr(v)


class Scalar:
    """A Python literal operand."""

    def __init__(self, value):
        self.value = value
        self.cat = "b" if isinstance(value, bool) else "i" if isinstance(value, int) else "f"
        self.kind = "literal"
        self.shape = ()
        self.name = lit(value)
        self.base = None

    def operand(self):
        return ("scalar", self.cat)


# ---------------------------------------------------------------- statements


class Stmt:
    mutates = None  # base id written in place

    def lines(self, instrument):
        raise NotImplementedError


class Assign(Stmt):
    def __init__(self, name, expr, red_src=None, red_amp=None):
        self.name, self.expr, self.red_src, self.red_amp = name, expr, red_src, red_amp

    def lines(self, instrument):
        if instrument and self.red_src:
            amp = "" if self.red_amp is None else f", {self.red_amp}"
            return [f"{self.name} = _red({self.red_src}, {self.expr}{amp})"]
        return [f"{self.name} = {self.expr}"]


class Line(Stmt):
    """An in-place statement (method call or item assignment)."""

    def __init__(self, text, mutates):
        self.text, self.mutates = text, mutates

    def lines(self, instrument):
        return [self.text]


class If(Stmt):
    def __init__(self, cond, then, other):
        self.cond, self.then, self.other = cond, then, other

    def lines(self, instrument):
        c = f"_gate(bool({self.cond}))" if instrument else self.cond
        out = [f"if {c}:"]
        out += ["    " + ln for s in self.then for ln in s.lines(instrument)] or ["    pass"]
        out.append("else:")
        out += ["    " + ln for s in self.other for ln in s.lines(instrument)] or ["    pass"]
        return out


class IntGate(Stmt):
    def __init__(self, name, expr):
        self.name, self.expr = name, expr

    def lines(self, instrument):
        if instrument:
            return [f"{self.name} = _gate(int({self.expr}))"]
        return [f"{self.name} = int({self.expr})"]


class Program:
    def __init__(self, params, body, ret, modules, mutated_params):
        self.params = params          # list of Var (tensor) or Var(kind='scalar')
        self.body = body
        self.ret = ret                # list of names
        self.modules = modules        # list of (name, ctor source)
        self.mutated_params = mutated_params

    def fn_source(self, instrument=False, name="f"):
        args = ", ".join(p.name for p in self.params)
        out = [f"def {name}({args}):"]
        for s in self.body:
            out += ["    " + ln for ln in s.lines(instrument)]
        r = ", ".join(self.ret)
        out.append(f"    return {r}" + ("," if len(self.ret) == 1 and self.multi else ""))
        return "\n".join(out) + "\n"

    multi = False

    def setup_source(self):
        lines = []
        if getattr(self, "stores", False):
            # Python containers the program stores traced tensors into
            lines += ["_store = {}", "_log = []"]
        if self.modules:
            lines.append("tp.manual_seed(0)")
            for name, ctor in self.modules:
                lines.append(f"{name} = {ctor}")
        return "\n".join(lines) + ("\n" if lines else "")

    def bit_exact(self):
        """Only ops the lowering documents as bit-exact (docs/lowering.md):
        no transcendental functions, float reductions or modules."""
        src = self.fn_source()
        if self.modules or inexact_text(src):
            return False

        def walk(stmts):
            for st in stmts:
                if isinstance(st, Assign) and st.red_src:
                    return False
                if isinstance(st, If) and not (walk(st.then) and walk(st.other)):
                    return False
            return True
        return walk(self.body)

    def uses(self, what):
        return what in self.fn_source()

    def __repr__(self):
        return self.setup_source() + self.fn_source()


# ---------------------------------------------------------------- generator


import re as _re
_NAMES = _re.compile(r"\b[vxsnm]\d+\b")


def _slice_len(d, sl):
    return len(range(d)[sl])


class Gen:
    def __init__(self, d: Drawer, avoid=()):
        self.d = d
        self.avoid = set(avoid)   # statement kinds / features left out (known open bugs)
        self.vars = []          # tensors
        self.ints = []          # int scalars from gates and params
        self.floats = []        # float scalar params
        self.body = []
        self.modules = []
        self.n = 0
        self.mutated = set()
        self.base_counter = 0
        self.derive = {}

    # ---- helpers
    def fresh(self):
        self.n += 1
        return f"v{self.n}"

    def new_base(self):
        self.base_counter += 1
        return f"#{self.base_counter}"

    def pick(self, pred=lambda v: True):
        cands = [v for v in self.vars if pred(v)]
        if not cands:
            return None
        # recent variables first (index 0 = most recent)
        return cands[len(cands) - 1 - self.d.int(0, len(cands) - 1)]

    def scalar(self, cat):
        d = self.d
        if cat == "f":
            if self.floats and d.bool(0.2):
                return d.choice(self.floats)
            if self.ints and d.bool(0.15):
                return d.choice(self.ints)
            return Scalar(d.choice(FLOAT_LITS))
        if cat == "i":
            if self.ints and d.bool(0.3):
                return d.choice(self.ints)
            return Scalar(d.choice(INT_LITS))
        return Scalar(d.bool())

    def is_inexact(self, text):
        """Does an expression read a value that compiled code may round differently?"""
        if inexact_text(text):
            return True
        byname = {v.name: v for v in self.vars}
        return any(byname[n].inexact for n in _NAMES.findall(text) if n in byname)

    def add(self, expr, shape, dt, base=None, zstride=False, red_src=None, red_amp=None):
        name = self.fresh()
        self.body.append(Assign(name, expr, red_src, red_amp))
        v = Var(name, shape, dt, base or self.new_base(), zstride)
        v.inexact = red_src is not None or self.is_inexact(expr)
        byname = {u.name: u for u in self.vars}
        v.grad = any(byname[n].grad for n in _NAMES.findall(expr) if n in byname)
        self.vars.append(v)
        return v

    def taint_base(self, base, text):
        """An in-place write of an inexact value: every alias of the storage is inexact."""
        if self.is_inexact(text):
            for v in self.vars:
                if v.base == base:
                    v.inexact = True

    # ---- params
    def params(self):
        d = self.d
        rank = d.weighted([(2, 4), (1, 3), (0, 1), (3, 2)])
        base = []
        for _ in range(rank):
            base.append(d.weighted([(3, 3), (4, 3), (1, 1), (2, 2), (5, 2), (0, 1)]))
        if "big" in self.avoid and rank >= 2:   # sweep option: kernels over the thread pool
            base[-1], base[-2] = d.choice([129, 256, 1000]), d.choice([64, 65, 100])
        ps = []
        for i in range(d.int(1, 3)):
            drop = d.int(0, rank) if d.bool(0.3) else 0
            ones = [s != 0 and d.bool(0.15) for s in base[drop:]]
            shape = [1 if o else s for o, s in zip(ones, base[drop:])]
            self.derive[f"x{i}"] = (drop, ones)
            dt = d.weighted([("float32", 8), ("int64", 2), ("float64", 1), ("bool", 1)])
            v = Var(f"x{i}", shape, dt, f"x{i}")
            ps.append(v)
            self.vars.append(v)
        if d.bool(0.25):
            kind = d.choice(["f", "i"])
            s = Var("s0", (), kind, None, kind="scalar")
            ps.append(s)
            (self.floats if kind == "f" else self.ints).append(s)
        self.base_shape = tuple(base)
        return ps

    # ---- statement kinds; each returns True when it emitted something
    def st_unary(self):
        d = self.d
        v = self.pick()
        op = d.choice(["relu", "exp", "tanh", "sigmoid", "neg", "abs", "Frelu", "mrelu", "invert"])
        if v.cat == "b" and op in ("relu", "neg", "abs", "Frelu", "mrelu"):
            op = "invert"
        if op == "invert" and v.cat == "f":
            op = "neg"
        if op in ("exp", "tanh", "sigmoid"):
            dt = v.dt if v.cat == "f" else "float32"
            form = d.choice([f"tp.{op}({v.name})", f"{v.name}.{op}()"])
        elif op == "relu":
            dt, form = v.dt, f"tp.relu({v.name})"
        elif op == "Frelu":
            dt, form = v.dt, f"tp.nn.functional.relu({v.name})"
        elif op == "mrelu":
            dt, form = v.dt, f"{v.name}.relu()"
        elif op == "neg":
            dt, form = v.dt, d.choice([f"-{v.name}", f"tp.neg({v.name})"])
        elif op == "abs":
            dt, form = v.dt, f"{v.name}.abs()"
        else:
            dt, form = v.dt, f"~{v.name}"
        self.add(form, v.shape, dt)
        return True

    def operand_pair(self, allow_scalar=True):
        d = self.d
        a = self.pick()
        if allow_scalar and d.bool(0.4):
            cat = d.weighted([(a.cat if a.cat != "b" else "i", 3), ("f", 2), ("i", 1)])
            b = self.scalar(cat)
        else:
            b = self.pick(lambda v: bcast(v.shape, a.shape) is not None)
        if d.bool(0.3):
            a, b = b, a
        return a, b

    def st_binary(self):
        d = self.d
        a, b = self.operand_pair()
        if "identity_then_inplace" in self.avoid:
            for o in (a, b):
                if isinstance(o, Scalar) and o.value in (0, 1) and not (o.value != o.value):
                    o.value, o.name = 2, "2"   # keep clear of x+0 / x*1 rewrites (open bug)
        op = d.choice(["+", "*", "-", "/", "maximum", "minimum", "add", "mul", "sub"])
        if a.kind != "tensor" and b.kind != "tensor":
            return False
        if op in ("maximum", "minimum") and (a.kind != "tensor" or b.kind != "tensor"):
            op = "+"
        if op in ("-", "sub") and a.cat == "b" and b.cat == "b":
            op = "+"
        if op in ("-", "sub") and "b" in (a.cat, b.cat):
            op = "*"  # PyTorch rejects subtraction with a bool tensor
        shape = bcast(a.shape, b.shape)
        dt = promote([a.operand(), b.operand()])
        if op == "/":
            dt = dt if CAT[dt] == "f" else "float32"
        sym = {"+": "+", "*": "*", "-": "-", "/": "/"}
        if op in sym:
            form = f"({a.name} {op} {b.name})"
        elif op in ("add", "mul", "sub"):
            if a.kind != "tensor":
                form = f"tp.{op}({b.name}, {a.name})"
            elif d.bool(0.5):
                form = f"{a.name}.{op}({b.name})"
            else:
                form = f"tp.{op}({a.name}, {b.name})"
        else:
            form = f"tp.{op}({a.name}, {b.name})"
        self.add(form, shape, dt)
        return True

    def st_compare(self):
        d = self.d
        a, b = self.operand_pair()
        if a.kind != "tensor" and b.kind != "tensor":
            return False
        if any(getattr(o, "inexact", False) for o in (a, b)):
            return False   # a comparison may flip on a 1-ulp difference
        op = d.choice([">", "<", "==", "!=", ">=", "<="])
        if a.kind != "tensor":  # keep the tensor on the left for readability
            a, b = b, a
            op = {">": "<", "<": ">", ">=": "<=", "<=": ">="}.get(op, op)
        self.add(f"({a.name} {op} {b.name})", bcast(a.shape, b.shape), "bool")
        return True

    def st_logic(self):
        a = self.pick(lambda v: v.cat == "b")
        if a is None:
            return False
        b = self.pick(lambda v: v.cat == "b" and bcast(v.shape, a.shape) is not None)
        op = self.d.choice(["&", "|"])
        self.add(f"({a.name} {op} {b.name})", bcast(a.shape, b.shape), "bool")
        return True

    def st_where(self):
        d = self.d
        c = self.pick(lambda v: v.cat == "b" and not v.inexact)
        if c is None:
            x = self.pick(lambda v: v.cat != "b" and not v.inexact)
            if x is None:
                return False
            cond = f"({x.name} > {self.scalar(x.cat).name if x.cat == 'i' else '0.0'})"
            cshape = x.shape
        else:
            cond, cshape = c.name, c.shape
        a = self.pick(lambda v: bcast(v.shape, cshape) is not None)
        if d.bool(0.5):
            b = self.scalar(a.cat if a.cat != "b" else "f")
        else:
            b = self.pick(lambda v: bcast(bcast(v.shape, cshape) or (), a.shape) is not None
                          and bcast(v.shape, cshape) is not None)
            if b is None:
                b = self.scalar("f")
        shape = bcast(bcast(cshape, a.shape), b.shape)
        if shape is None:
            return False
        dt = promote([a.operand(), b.operand()])
        self.add(f"tp.where({cond}, {a.name}, {b.name})", shape, dt)
        return True

    def st_clamp(self):
        d = self.d
        v = self.pick(lambda v: v.cat != "b")
        if v is None:
            return False
        lo = self.scalar(v.cat) if d.bool(0.8) else None
        hi = self.scalar(v.cat) if (lo is None or d.bool(0.6)) else None
        if lo is not None and hi is not None and d.bool(0.8):
            if isinstance(lo, Scalar) and isinstance(hi, Scalar) and lo.value == lo.value and hi.value == hi.value:
                if lo.value > hi.value:
                    lo, hi = hi, lo
        ops = [("scalar", lo.cat)] if lo is not None else []
        ops += [("scalar", hi.cat)] if hi is not None else []
        dt = promote([v.operand()] + ops)
        kw = []
        if lo is not None:
            kw.append(f"min={lo.name}")
        if hi is not None:
            kw.append(f"max={hi.name}")
        form = d.choice([f"tp.clamp({v.name}, {', '.join(kw)})", f"{v.name}.clamp({', '.join(kw)})"])
        self.add(form, v.shape, dt)
        return True

    def reduce_dims(self, v, allow_none=True):
        d = self.d
        r = len(v.shape)
        if allow_none and d.bool(0.25):
            return None
        if r == 0:
            return d.choice([0, -1])
        if d.bool(0.7) or r == 1:
            k = d.int(0, r - 1)
            return k - r if d.bool(0.3) else k
        ks = sorted(set(d.int(0, r - 1) for _ in range(d.int(1, r))))
        return tuple(ks)

    def st_reduce(self):
        d = self.d
        op = d.choice(["sum", "amax", "mean", "amin", "var"])
        if op in self.avoid:
            op = "sum"
        if op in ("mean", "var"):
            v = self.pick(lambda v: v.cat == "f")
        elif op in ("amax", "amin"):
            v = self.pick(lambda v: v.cat != "b")
        else:
            v = self.pick()
        if v is None:
            return False
        dims = self.reduce_dims(v, allow_none=True)
        r = len(v.shape)
        if dims is None:
            red = list(range(r))
        elif isinstance(dims, int):
            red = [dims % r] if r else []
        else:
            red = [k % r for k in dims]
        if op in ("amax", "amin") and any(v.shape[k] == 0 for k in red):
            return False
        keep = dims is not None and d.bool(0.4)
        if dims is None:
            args, shape = "", ()
        else:
            args = f"{dims}" if not keep else f"{dims}, keepdim=True"
            if d.bool(0.3):
                args = f"dim={dims}" + (", keepdim=True" if keep else "")
            shape = tuple((1 if keep else None) if k in red else s for k, s in enumerate(v.shape))
            shape = tuple(s for s in shape if s is not None)
        if op == "sum":
            dt = v.dt if v.cat == "f" else "int64"
        else:
            dt = v.dt
        form = f"{v.name}.{op}({args})" if d.bool(0.7) else f"tp.{op}({v.name}{', ' + args if args else ''})"
        red_src = v.name if v.cat == "f" and op in ("sum", "mean", "var") else None
        self.add(form, shape, dt, red_src=red_src)
        return True

    def st_view(self):
        d = self.d
        v = self.pick()
        r = len(v.shape)
        kind = d.choice(["slice", "transpose", "unsqueeze", "reshape", "expand", "permute", "t", "contiguous"])
        if kind in ("transpose", "permute") and r < 2:
            kind = "unsqueeze"
        if kind == "t" and r > 2:
            kind = "transpose"
        if kind == "slice" and r == 0:
            kind = "unsqueeze"
        zs = v.zstride
        if kind == "transpose":
            a, b = d.int(-r, r - 1), d.int(-r, r - 1)
            shape = list(v.shape)
            shape[a], shape[b] = shape[b], shape[a]
            form = d.choice([f"{v.name}.transpose({a}, {b})", f"tp.transpose({v.name}, {a}, {b})"])
        elif kind == "t":
            shape = list(reversed(v.shape))
            form = f"{v.name}.t()"
        elif kind == "permute":
            perm = list(range(r))
            for i in range(r - 1, 0, -1):
                j = d.int(0, i)
                perm[i], perm[j] = perm[j], perm[i]
            shape = [v.shape[p] for p in perm]
            form = f"{v.name}.permute({', '.join(map(str, perm))})"
        elif kind == "unsqueeze":
            k = d.int(-(r + 1), r)
            shape = list(v.shape)
            shape.insert(k % (r + 1), 1)
            form = f"{v.name}.unsqueeze({k})"
        elif kind == "contiguous":
            shape = v.shape
            form = f"{v.name}.contiguous()"
        elif kind == "expand":
            tgt, shape = [], []
            if d.bool(0.3):
                n = d.int(1, 3)
                tgt.append(str(n))
                shape.append(n)
            for s in v.shape:
                if s == 1 and d.bool(0.7):
                    n = d.int(0, 3) if d.bool(0.1) else d.int(2, 3)
                    tgt.append(str(n))
                    shape.append(n)
                else:
                    tgt.append("-1")
                    shape.append(s)
            if not tgt:
                tgt = ["2"]
                shape = [2]
            form = f"{v.name}.expand({', '.join(tgt)})"
            zs = True
        elif kind == "reshape":
            n = numel(v.shape)
            if n == 0:
                shape = d.choice([[0], [2, 0], [0, 3]])
                tgt = [str(s) for s in shape]
            else:
                shape = []
                rest = n
                for _ in range(d.int(0, 2)):
                    divs = [k for k in range(1, rest + 1) if rest % k == 0]
                    k = d.choice(divs)
                    shape.append(k)
                    rest //= k
                shape.append(rest)
                tgt = [str(s) for s in shape]
                if d.bool(0.5):
                    tgt[d.int(0, len(tgt) - 1)] = "-1"
            # .view needs a viewable layout: take it of a contiguous() copy
            form = d.choice([f"{v.name}.reshape({', '.join(tgt)})", f"{v.name}.contiguous().view({', '.join(tgt)})"])
        else:  # slice
            idx, shape = [], []
            dims = list(v.shape)
            if d.bool(0.2) and r >= 2:
                idx.append("...")
                keep = dims[:r - 1]
                shape.extend(keep)
                dims = dims[r - 1:]
            for s in dims:
                k = d.weighted([("full", 2), ("slice", 4), ("int", 2), ("none", 1)])
                if k == "none":
                    idx.append("None")
                    shape.append(1)
                    k = "full"
                if k == "int" and s > 0:
                    i = d.int(-s, s - 1)
                    idx.append(str(i))
                    continue
                if k == "full" or (k == "int" and s == 0):
                    idx.append(":")
                    shape.append(s)
                    continue
                start = d.choice([None, 0, 1, -1, -2, 2, s + 1])
                stop = d.choice([None, s, -1, 1, 2, 3, -s - 1])
                step = d.choice([None, 2, 1, 3])
                sl = slice(start, stop, step)
                txt = ("" if start is None else str(start)) + ":" + ("" if stop is None else str(stop))
                if step is not None:
                    txt += ":" + str(step)
                idx.append(txt)
                shape.append(_slice_len(s, sl))
            if not idx:
                return False
            form = f"{v.name}[{', '.join(idx)}]"
        self.add(form, tuple(shape), v.dt, base=v.base, zstride=zs)
        return True

    def st_cast(self):
        d = self.d
        v = self.pick()
        choices = {"b": ["int64", "float32", "float64"], "i": ["float32", "float64", "bool"],
                   "f": ["float64", "float32", "bool"]}[v.cat]
        dt = d.choice(choices)
        if dt == "bool" and v.inexact:
            dt = choices[0]
        form = d.weighted([(f"{v.name}.to(tp.{dt})", 3),
                           ({"float32": f"{v.name}.float()", "float64": f"{v.name}.double()",
                             "int64": f"{v.name}.long()", "bool": f"{v.name}.bool()"}[dt], 2)])
        base = v.base if dt == v.dt else None
        self.add(form, v.shape, dt, base=base, zstride=v.zstride and dt == v.dt)
        return True

    def st_module(self):
        d = self.d
        v = self.pick(lambda v: len(v.shape) >= 1 and v.shape[-1] >= 1)
        if v is None:
            return False
        k = v.shape[-1]
        name = f"m{len(self.modules)}"
        # always .float(): other signatures may make v float64 (PyTorch rejects mixed dtypes; bug 21)
        x = f"{v.name}.float()"
        if d.bool(0.5):
            out = d.int(1, 4)
            bias = d.bool(0.8)
            self.modules.append((name, f"tp.nn.Linear({k}, {out}{'' if bias else ', bias=False'})"))
            shape = v.shape[:-1] + (out,)
        else:
            self.modules.append((name, f"tp.nn.LayerNorm({k})"))
            shape = v.shape
        # tolerance: a reduction of length k; layer_norm divides by sqrt(var + 1e-5) >= 1/316
        amp = k if "Linear" in self.modules[-1][1] else k * 317
        self.add(f"{name}({x})", shape, "float32", red_src=x, red_amp=amp)
        self.vars[-1].grad = True
        return True

    def inplace_target(self):
        if "inplace_grad_view" in self.avoid:     # open: autograd refuses it in eager
            return self.pick(lambda v: not v.zstride and v.cat != "b" and not v.grad)
        return self.pick(lambda v: not v.zstride and v.cat != "b")

    def st_inplace(self):
        d = self.d
        t = self.inplace_target()
        if t is None:
            return False
        kind = d.choice(["binary", "setitem", "unary", "clamp", "viewop", "copy", "zero", "fill", "functional"])
        if kind == "functional":
            # torch.nn.functional's inplace=True: a write of the input
            if t.cat == "f":
                fn = d.choice(["relu", "leaky_relu", "hardtanh", "elu", "relu6", "celu", "selu", "silu",
                               "hardswish", "hardsigmoid", "threshold"])
            else:
                fn = "relu"
            args = {"leaky_relu": ", negative_slope=0.1", "hardtanh": ", min_val=-0.5, max_val=0.5",
                    "elu": ", alpha=0.5", "threshold": ", 0.1, 20.0"}.get(fn, "")
            line = f"tp.nn.functional.{fn}({t.name}{args}, inplace=True)"
            if d.bool(0.5):
                self.body.append(Line(line, t.base))
            else:   # the call returns its input
                name = self.fresh()
                self.body.append(Assign(name, line))
                nv = Var(name, t.shape, t.dt, t.base)
                nv.inexact, nv.grad = t.inexact, t.grad
                self.vars.append(nv)
            self.mutated.add(t.base)
            self.taint_base(t.base, line)
            return True
        tgt = t.name
        tshape = t.shape
        if kind in ("zero", "fill") and len(t.shape) >= 2 and d.bool(0.5):
            # a write through a transpose / narrow / select view
            form = d.choice(["t", "narrow", "select"])
            if form == "t":
                view = f"{t.name}.transpose(0, 1)"
            elif form == "narrow" and t.shape[0] > 0:
                view = f"{t.name}.narrow(0, {d.int(0, t.shape[0] - 1)}, 1)"
            elif t.shape[-1] > 0:
                view = f"{t.name}.select(-1, {d.int(0, t.shape[-1] - 1)})"
            else:
                view = f"{t.name}.transpose(0, 1)"
            kind = kind + "_view"
        if kind in ("setitem", "viewop", "zero", "fill") and len(t.shape) >= 1:
            # an index that keeps a view (slices only)
            idx, shape = [], []
            for s in t.shape:
                if d.bool(0.5):
                    start, step = d.choice([0, 1, None]), d.choice([None, 2])
                    txt = ("" if start is None else str(start)) + ":" + ("" if step is None else f":{step}")
                    idx.append(txt)
                    shape.append(_slice_len(s, slice(start, None, step)))
                elif d.bool(0.3) and s > 0:
                    i = d.int(-s, s - 1)
                    idx.append(str(i))
                else:
                    idx.append(":")
                    shape.append(s)
            view = f"{t.name}[{', '.join(idx)}]"
            tshape = tuple(shape)
        elif not kind.endswith("_view"):
            view = tgt
            if kind == "setitem":
                kind = "binary"
        if kind in ("zero", "zero_view"):
            self.body.append(Line(f"{view}.zero_()", t.base))
        elif kind in ("fill", "fill_view"):
            self.body.append(Line(f"{view}.fill_({self.scalar(t.cat).name})", t.base))
        elif kind == "setitem":
            if d.bool(0.6):
                val = self.scalar(t.cat)
            else:
                val = self.pick(lambda v: v.base != t.base and bcast(v.shape, tshape) == tshape
                                and CAT_RANK[v.cat] <= CAT_RANK[t.cat])
                if val is None:
                    val = self.scalar(t.cat)
            self.body.append(Line(f"{view} = {val.name}", t.base))
        elif kind == "clamp":
            lo = self.scalar(t.cat)
            self.body.append(Line(f"{view}.clamp_(min={lo.name})", t.base))
        elif kind == "unary":
            op = d.choice(["relu_", "neg_"] + (["exp_", "tanh_", "sigmoid_"] if t.cat == "f" else []))
            self.body.append(Line(f"{view}.{op}()", t.base))
        elif kind == "copy":
            src = self.pick(lambda v: v.base != t.base and bcast(v.shape, tshape) == tshape)
            if src is None:
                return False
            self.body.append(Line(f"{view}.copy_({src.name})", t.base))
        else:
            op = d.choice(["add_", "mul_", "sub_"] + (["div_"] if t.cat == "f" else []))
            if d.bool(0.5):
                val = self.scalar(t.cat)
            else:
                val = self.pick(lambda v: v.base != t.base and bcast(v.shape, tshape) == tshape
                                and CAT_RANK[v.cat] <= CAT_RANK[t.cat])
                if val is None:
                    val = self.scalar(t.cat)
            if op == "sub_" and val.cat == "b":
                op = "add_"
            self.body.append(Line(f"{view}.{op}({val.name})", t.base))
        self.mutated.add(t.base)
        self.taint_base(t.base, self.body[-1].text)
        return True

    def st_if(self):
        d = self.d
        if "inplace_then_gate" in self.avoid and self.mutated:
            return False
        a = self.pick(lambda v: v.cat != "b" and not v.inexact)
        if a is None:
            return False
        form = d.choice(["count", "amax", "any"])
        if form == "amax" and numel(a.shape) == 0:
            form = "count"
        c = self.scalar(a.cat).name if a.cat == "i" else lit(d.choice([0.0, 0.5, -1.0]))
        if form == "count":
            cond = f"({a.name} > {c}).sum() > {d.int(0, 3)}"
        elif form == "amax":
            cond = f"{a.name}.amax() > {c}"
        else:
            cond = f"({a.name} < {c}).any()"
        b = self.pick(lambda v: v.cat != "b")
        name = self.fresh()
        c1, c2 = self.scalar(b.cat), self.scalar(b.cat)
        then = [Assign(name, f"{b.name} + {c1.name}")]
        other = [Assign(name, f"{b.name} * {c2.name}")]
        dt = promote([b.operand(), c1.operand(), c2.operand()])
        self.body.append(If(cond, then, other))
        nv = Var(name, b.shape, dt, self.new_base())
        nv.inexact = b.inexact
        self.vars.append(nv)
        return True

    def st_intgate(self):
        d = self.d
        if "inplace_then_gate" in self.avoid and self.mutated:
            return False
        a = self.pick(lambda v: v.cat != "b" and not v.inexact)
        if a is None:
            return False
        if a.cat == "i" and numel(a.shape) > 0 and d.bool(0.5):
            expr = f"{a.name}.amax()"
        elif a.cat == "f" and numel(a.shape) > 0 and d.bool(0.15):
            expr = f"{a.name}.amax()"  # NaN/inf raise in int(): eager and compiled must agree
        else:
            expr = f"({a.name} > {lit(0 if a.cat == 'i' else 0.0)}).sum()"
        name = f"n{len(self.ints)}"
        self.body.append(IntGate(name, expr))
        self.ints.append(Var(name, (), "i", None, kind="scalar"))
        return True

    # ---- narrow dtypes (issue 13): float16, bfloat16, int8, int32 operands
    def st_lowp(self):
        """A detour through a narrow dtype and back: cast, one op there,
        cast to a dtype the generator tracks. float16 and bfloat16 ops
        compute in float32 and round once to nearest even (eager and
        compiled alike, bit-exact for + - * / and the piecewise-linear ops;
        the casts in overflow to inf, keep NaN and subnormals); int8/int32
        wrap around. Floats never go to an integer dtype (NaN/inf/
        out-of-range conversions are unspecified)."""
        d = self.d
        nd = d.choice(["float16", "bfloat16", "int8", "int32"])
        half = nd in ("float16", "bfloat16")
        if half:
            v = self.pick()
        else:
            v = self.pick(lambda u: u.cat != "f")
        if v is None:
            return False
        w = self.pick(lambda u: bcast(u.shape, v.shape) is not None
                      and (half or u.cat != "f"))
        h, g = f"{v.name}.to(tp.{nd})", f"{w.name}.to(tp.{nd})"
        shape = bcast(v.shape, w.shape)
        if half:
            op = d.choice(["add", "mul", "div", "relu", "abs", "neg", "max", "where", "floor",
                           "clamp", "round1", "scalar"] + (["math"] * 4 if "lowp_math" not in self.avoid else []))
            if op == "math":
                # computed in float32 and rounded once (torch's opmath); the
                # harness compares programs with these at 16-bit tolerance
                fn = d.choice(["tanh", "exp", "expm1", "log1p", "sigmoid", "sinh", "cosh", "atan", "tan",
                               "erf", "erfc", "asin", "acos", "sqrt", "sin", "nn.functional.gelu",
                               "nn.functional.silu", "nn.functional.softplus", "nn.functional.mish",
                               "nn.functional.elu", "nn.functional.selu", "nn.functional.celu"])
                form = f"tp.{fn}({h})"
            form = {"add": f"({h} + {g})", "mul": f"({h} * {g})", "div": f"({h} / {g})",
                    "relu": f"tp.relu({h})", "abs": f"{h}.abs()", "neg": f"(-{h})",
                    "max": f"tp.maximum({h}, {g})",
                    "where": f"tp.where({h} > 0, {h}, {g})", "floor": f"{h}.floor()",
                    "clamp": f"tp.clamp({h}, min=-1.5, max=2.0)",
                    "round1": f"tp.round({h}, decimals=1)",
                    "scalar": f"({h} * 0.1 + 3)"}.get(op, form if op == "math" else None)
            back = v.dt if v.cat == "f" else "float32"
        else:
            op = d.choice(["add", "mul", "sub", "max", "abs", "neg", "and", "xor", "lt", "scalar"])
            if "b" in (v.cat, w.cat) and op in ("sub", "neg", "abs"):
                op = "add"
            form = {"add": f"({h} + {g})", "mul": f"({h} * {g})", "sub": f"({h} - {g})",
                    "max": f"tp.maximum({h}, {g})", "abs": f"{h}.abs()", "neg": f"(-{h})",
                    "and": f"({h} & {g})", "xor": f"({h} ^ {g})", "lt": f"({h} < {g})",
                    "scalar": f"({h} * 3 + 100)"}[op]
            back = "bool" if op == "lt" else "int64"
        if op in ("relu", "abs", "neg", "floor", "clamp", "round1", "scalar", "math"):
            shape = v.shape
        self.add(f"{form}.to(tp.{back})", shape, back)
        return True

    def st_math(self):
        """The rest of the elementwise math (issue 13: every (op, dtype) pair
        the lowering accepts computes in a supported precision): libm-style
        functions (integer and bool operands promote to float32, as torch),
        the torch.nn.functional activations with their keywords, the
        rounding ops, and binary float functions."""
        d = self.d
        kind = d.choice(["tp", "F", "round", "binary", "softmax"])
        if kind == "tp":
            v = self.pick()
            op = d.choice(["exp", "sin", "cos", "tan", "log", "log1p", "log2", "expm1", "exp2", "erf", "erfc",
                           "atan", "asin", "acos", "sinh", "cosh", "asinh", "atanh", "sqrt", "rsqrt", "sigmoid",
                           "tanh", "reciprocal", "deg2rad"])
            dt = v.dt if v.cat == "f" else "float32"
            form = d.choice([f"tp.{op}({v.name})", f"{v.name}.{op}()"])
            self.add(form, v.shape, dt)
            return True
        if kind == "round":
            # an inexact value (x - tanh(x) one ulp either side of an integer)
            # would make floor/ceil/round/sign differ by a whole unit: not a bug
            v = self.pick(lambda u: u.cat != "b" and not u.inexact)
            if v is None:
                return False
            ops = ["floor", "ceil", "trunc", "round", "sign", "square", "abs"] + (["frac"] if v.cat == "f" else [])
            op = d.choice(ops)
            self.add(d.choice([f"tp.{op}({v.name})", f"{v.name}.{op}()"]), v.shape, v.dt)
            return True
        v = self.pick(lambda u: u.cat == "f")
        if v is None:
            return False
        if kind == "softmax":
            if not v.shape:
                return False
            k = d.int(-len(v.shape), len(v.shape) - 1)
            op = d.choice(["softmax", "log_softmax"])
            form = d.choice([f"tp.nn.functional.{op}({v.name}, dim={k})", f"{v.name}.{op}({k})"])
            self.add(form, v.shape, v.dt)
            return True
        if kind == "binary":
            w = self.pick(lambda u: u.cat != "b" and bcast(u.shape, v.shape) is not None)
            op = d.choice(["atan2", "hypot", "fmod", "remainder", "copysign", "logaddexp", "lerp",
                           "addcdiv", "addcmul", "float_power"])
            if op == "lerp":
                if w.dt != v.dt:   # torch: lerp's operands of one dtype
                    return False
                form = f"tp.lerp({v.name}, {w.name}, {d.choice(['0.25', '0.75', '1.5'])})"
            elif op in ("addcdiv", "addcmul"):
                if w.dt != v.dt:
                    return False
                form = f"tp.{op}({v.name}, {w.name}, {v.name}, value={d.choice(['0.5', '-2', '1'])})"
            elif op == "float_power":
                form = f"tp.float_power({v.name}, {d.choice(['2', '0.5', '-1', '3.0'])})"
                self.add(form, v.shape, "float64")
                return True
            else:
                form = f"tp.{op}({v.name}, {w.name})"
            shape = bcast(v.shape, w.shape)
            dt = promote([v.operand(), w.operand()])
            self.add(form, shape, dt)
            return True
        op = d.choice(["gelu", "gelu_tanh", "silu", "softplus", "softplus_kw", "elu", "elu_kw", "mish", "selu",
                       "celu", "hardswish", "hardsigmoid", "relu6", "softsign", "logsigmoid", "tanhshrink",
                       "softshrink", "hardshrink"])
        F = "tp.nn.functional"
        form = {"gelu_tanh": f"{F}.gelu({v.name}, approximate='tanh')",
                "softplus_kw": f"{F}.softplus({v.name}, beta=2.0, threshold=5.0)",
                "elu_kw": f"{F}.elu({v.name}, alpha=0.5)",
                "celu": f"{F}.celu({v.name}, alpha=2.0)",
                "softshrink": f"{F}.softshrink({v.name}, lambd=0.3)",
                "hardshrink": f"{F}.hardshrink({v.name}, lambd=0.3)"}.get(op, f"{F}.{op}({v.name})")
        self.add(form, v.shape, v.dt)
        return True

    def st_kwargs(self):
        """Ops called with keyword arguments: each must reach the compiled
        graph with its meaning (alpha=, min=, negative_slope=, decimals=,
        rounding_mode=, nan=/posinf=/neginf=)."""
        d = self.d
        v = self.pick(lambda u: u.cat == "f")
        if v is None:
            return False
        w = self.pick(lambda u: u.cat == "f" and bcast(u.shape, v.shape) is not None)
        shape = bcast(v.shape, w.shape)
        op = d.choice(["add_alpha", "sub_alpha", "clamp_min", "clamp_max", "leaky", "hardtanh",
                       "round", "div_floor", "div_trunc", "nan_to_num"])
        form = {"add_alpha": f"tp.add({v.name}, {w.name}, alpha=2)",
                "sub_alpha": f"tp.sub({v.name}, {w.name}, alpha=3)",
                "clamp_min": f"tp.clamp({v.name}, min=-0.5)",
                "clamp_max": f"{v.name}.clamp(max=0.25)",
                "leaky": f"tp.nn.functional.leaky_relu({v.name}, negative_slope=0.2)",
                "hardtanh": f"tp.nn.functional.hardtanh({v.name}, min_val=-0.5, max_val=0.75)",
                "round": f"tp.round({v.name}, decimals={d.choice([1, 2, -1])})",
                "div_floor": f"tp.div({v.name}, {w.name}, rounding_mode='floor')",
                "div_trunc": f"tp.div({v.name}, {w.name}, rounding_mode='trunc')",
                "nan_to_num": f"tp.nan_to_num({v.name}, nan=0.5, posinf=2.0, neginf=-2.0)"}[op]
        if op not in ("add_alpha", "sub_alpha", "div_floor", "div_trunc"):
            shape = v.shape
        dt = v.dt if shape == v.shape and op not in ("add_alpha", "sub_alpha", "div_floor",
                                                      "div_trunc") else _join([v.dt, w.dt])
        if op in ("add_alpha", "sub_alpha", "div_floor", "div_trunc"):
            dt = promote([v.operand(), w.operand()])
        self.add(form, shape, dt)
        return True

    def st_store(self):
        """a traced tensor stored into a Python container (eager leaves
        the tensor there; so must the compiled call)"""
        d = self.d
        v = self.pick()
        if v is None:
            return False
        if d.bool(0.5):
            self.body.append(Line(f"_store['k{d.int(0, 2)}'] = {v.name}", None))
        else:
            self.body.append(Line(f"_log.append({v.name})", None))
        self.stores = True
        return True

    def st_ident(self):
        """an identity the passes may fold (x + 0, x * 1, x / 1, clone):
        eager makes a new tensor, so must the compiled call (its output,
        and views of it, must not come back as the input's memory)"""
        d = self.d
        v = self.pick()
        if v.cat == "b":
            form = f"{v.name}.clone()"
        else:
            zero, one = ("0", "1") if v.cat == "i" else (d.choice(["0", "0.0"]), d.choice(["1", "1.0"]))
            forms = [f"({v.name} + {zero})", f"({v.name} - {zero})", f"({v.name} * {one})",
                     f"({one} * {v.name})", f"{v.name}.add({zero})", f"tp.mul({v.name}, {one})",
                     f"{v.name}.clone()"]
            if v.cat == "f":
                forms.append(f"({v.name} / 1)")
            form = d.choice(forms)
        self.add(form, v.shape, v.dt if not ("0.0" in form or "1.0" in form) or v.cat == "f"
                 else "float32")
        return True

    def st_dup(self):
        """an earlier assignment again: CSE may merge the two; eager's are
        two tensors (or two views of one base)"""
        d = self.d
        byname = {v.name: v for v in self.vars}
        cands = [a for a in self.body if isinstance(a, Assign) and a.red_src is None
                 and a.name in byname]
        if not cands:
            return False
        a = cands[d.int(0, len(cands) - 1)]
        v = byname[a.name]
        shared = any(u is not v and u.base == v.base for u in self.vars)
        w = self.add(a.expr, v.shape, v.dt, base=v.base if shared else None, zstride=v.zstride)
        w.inexact = w.inexact or v.inexact
        return True

    def st_const(self):
        """a tensor made inside the function from constants: a new one on
        every eager call, never a constant the compiled call hands out again"""
        d = self.d
        shape = self.base_shape[d.int(0, len(self.base_shape)):]
        sh = ", ".join(map(str, shape))
        form, dt = d.choice([(f"tp.ones({sh or '()'})", "float32"),
                             (f"tp.zeros({sh or '()'}, dtype=tp.int64)", "int64"),
                             (f"tp.full(({sh}{',' if len(shape) == 1 else ''}), 2.0)", "float32")])
        self.add(form, shape, dt)
        return True

    KINDS = [("unary", 10), ("binary", 14), ("reduce", 8), ("view", 9), ("inplace", 6), ("compare", 4),
             ("where", 4), ("clamp", 3), ("cast", 3), ("if", 3), ("intgate", 2), ("module", 2), ("logic", 1),
             ("lowp", 6), ("kwargs", 6), ("store", 2), ("ident", 5), ("dup", 4), ("const", 3), ("math", 8)]

    def program(self):
        d = self.d
        params = self.params()
        nst = d.int(1, 7)
        tries = 0
        while len(self.body) < nst and tries < 4 * nst:
            tries += 1
            kind = d.weighted(self.KINDS)
            if kind in self.avoid:
                continue
            getattr(self, "st_" + kind)()
        if not [v for v in self.vars if v.base and not v.base.startswith("x")] and not self.mutated:
            self.st_unary()
        # returns: the last variable plus up to two others; maybe an int gate value
        locals_ = [v for v in self.vars if not (v.name.startswith("x"))] or self.vars
        ret = [locals_[-1].name]
        for _ in range(d.int(0, 2)):
            v = self.pick()
            if v.name not in ret:
                ret.append(v.name)
        if self.ints and d.bool(0.2):
            s = d.choice(self.ints)
            if s.name not in ret:
                ret.append(s.name)
        mutated_params = sorted(p.name for p in params if p.kind == "tensor" and p.base in self.mutated)
        prog = Program(params, self.body, ret, self.modules, mutated_params)
        prog.stores = getattr(self, "stores", False)
        prog.base_shape = self.base_shape
        prog.derive = self.derive
        return prog


def generate(d: Drawer, avoid=()):
    return Gen(d, avoid).program()
