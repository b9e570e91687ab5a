"""Free-variable lifting (seed section 2.5) and the free-variable guards of Prop. 2.1.

The function's bytecode (and the code objects nested in it) is read once, at
the first call: every ``LOAD_GLOBAL name`` and ``LOAD_DEREF name`` (a closure
cell of the function), and for a bound method or a module every load of
``self``, followed by its chain of ``LOAD_ATTR``/``LOAD_METHOD`` names,
becomes a *source*: a place the wrapper reads at every call.

A source is the tuple ``(kind, root, attrs, lifted)`` that
``tensorplay._C._guard_read_sources`` and dispatch level 1 understand:
kind 0 = a global (root the globals dict, attrs[0] the name), 1 = a closure
cell (root the cell), 2 = a fixed object (``self``); then getattr along the
rest of attrs. Each source also has a printable path (``globals['scale']``,
``closure['k']``, ``globals['cfg'].flag``, ``self.lin.weight``).

What becomes a source:
- a global or closure value that is a tensor: lifted (a leading argument);
- an ``nn.Module`` reachable as a global, a closure value or ``self``: the
  module by identity, and each of its parameters and buffers, lifted;
- any other global or closure value: its signature (numbers, strings, bools
  and None by value; functions and other objects by identity) is guarded;
  Python modules themselves are not guarded (only what is read from them);
- an attribute chain read in the bytecode (``cfg.flag``, ``math.pi``,
  ``self.eps``): the value at the end of the longest prefix that is a tensor
  (lifted) or a None/bool/int/float/str (guarded by value).
Not covered: values read by other Python functions the traced code calls
(helpers in other code objects, the bodies of library functions), items of
global containers (a global list of tensors), attributes read through
``getattr`` with a computed name.
"""
import dis
import types

__all__ = ["Plan", "analyze"]

_SCALARS = (type(None), bool, int, float, str)
_LOAD_ATTR = ("LOAD_ATTR", "LOAD_METHOD")


def _tensor_type():
    from tensorplay import _C
    return getattr(_C, "Tensor", None)


def _module_type():
    try:
        from tensorplay import nn
        return getattr(nn, "Module", None)
    except Exception:  # noqa: BLE001 - nn is another room's; absent early on
        return None


def _is_tensor(v):
    T = _tensor_type()
    return T is not None and isinstance(v, T)


def _is_module(v):
    M = _module_type()
    return M is not None and isinstance(v, M)


def _code_objects(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _code_objects(c)


def _chains(code, self_name):
    """Ordered unique (root_kind, root_name, attrs) read in the bytecode."""
    out = {}
    for co in _code_objects(code):
        ins = list(dis.get_instructions(co))
        for i, x in enumerate(ins):
            if x.opname == "LOAD_GLOBAL":
                root = ("global", x.argval)
            elif x.opname in ("LOAD_DEREF", "LOAD_CLASSDEREF") and co is code:
                root = ("closure", x.argval)
            elif x.opname == "LOAD_FAST" and co is code and self_name and x.argval == self_name:
                root = ("self", self_name)
            else:
                continue
            attrs = []
            j = i + 1
            while j < len(ins) and ins[j].opname in _LOAD_ATTR:
                attrs.append(ins[j].argval)
                j += 1
            out.setdefault((root[0], root[1], ()), None)
            if attrs:
                out.setdefault((root[0], root[1], tuple(attrs)), None)
    return list(out)


class Source:
    __slots__ = ("kind", "root", "attrs", "path", "name", "lifted")

    def __init__(self, kind, root, attrs, path, name):
        self.kind, self.root, self.attrs, self.path, self.name = kind, root, attrs, path, name
        self.lifted = False

    def read(self):
        if self.kind == 0:
            cur = self.root[self.attrs[0]]
            rest = self.attrs[1:]
        elif self.kind == 1:
            cur = self.root.cell_contents
            rest = self.attrs
        else:
            cur = self.root
            rest = self.attrs
        for a in rest:
            cur = getattr(cur, a)
        return cur

    def as_tuple(self, lifted):
        return (self.kind, self.root, self.attrs, bool(lifted))


class Plan:
    """The sources of one compiled function, fixed at its first call.

    target: the function whose bytecode is traced (a plain function);
    self_obj: the bound ``self`` (bound method or module) or None."""

    def __init__(self, fn, target, self_obj, sources):
        self.fn = fn
        self.target = target
        self.self_obj = self_obj
        self.sources = sources
        self.paths = tuple(s.path for s in sources)
        self.self_in_args = False   # a method compiled on the class: self is args[0]

    def tuples(self, values):
        """The source tuples for _C (lifted = currently a tensor)."""
        return tuple(s.as_tuple(_is_tensor(v)) for s, v in zip(self.sources, values))

    def read_tuples(self):
        rt = self.__dict__.get("_read_tuples")
        if rt is None:
            rt = self._read_tuples = tuple(s.as_tuple(False) for s in self.sources)
        return rt

    # -- the traced wrapper ---------------------------------------------
    def make_wrapper(self, values):
        """A function f'(*lifted, *args, **kwargs) running the target with
        the lifted tensors (proxies, while tracing) swapped into their
        places: a copied globals dict, new closure cells, and temporary
        instance attributes on objects (modules) for attribute chains."""
        lifted_idx = [i for i, v in enumerate(values) if _is_tensor(v)]
        target, self_obj = self.target, self.self_obj
        if target is None:
            return self.fn, []
        code = target.__code__
        freevars = code.co_freevars
        sources = self.sources

        def wrapper(*a, **kw):
            n = len(lifted_idx)
            proxies, rest = a[:n], a[n:]
            new_globals = None
            cells = list(target.__closure__ or ())
            restore = []
            try:
                for p, i in zip(proxies, lifted_idx):
                    s = sources[i]
                    if s.kind == 0 and len(s.attrs) == 1:
                        if new_globals is None:
                            new_globals = dict(target.__globals__)
                        new_globals[s.attrs[0]] = p
                    elif s.kind == 1 and not s.attrs:
                        k = freevars.index(s.name)
                        cells[k] = types.CellType(p)
                    else:
                        owner = _owner(s)
                        name = s.attrs[-1]
                        d = owner.__dict__
                        restore.append((d, name, name in d, d.get(name)))
                        d[name] = p
                fn = types.FunctionType(code, new_globals if new_globals is not None else target.__globals__,
                                        target.__name__, target.__defaults__, tuple(cells) or None)
                fn.__kwdefaults__ = target.__kwdefaults__
                if self_obj is not None and not self.self_in_args:
                    return fn(self_obj, *rest, **kw)
                return fn(*rest, **kw)
            finally:
                for d, name, had, old in reversed(restore):
                    if had:
                        d[name] = old
                    else:
                        d.pop(name, None)

        names = [sources[i].name for i in lifted_idx]
        return wrapper, names


def _owner(s):
    if s.kind == 0:
        cur = s.root[s.attrs[0]]
        rest = s.attrs[1:-1]
    elif s.kind == 1:
        cur = s.root.cell_contents
        rest = s.attrs[:-1]
    else:
        cur = s.root
        rest = s.attrs[:-1]
    for a in rest:
        cur = getattr(cur, a)
    return cur


def _ident(path):
    out = []
    for ch in path:
        out.append(ch if ch.isalnum() or ch == "_" else "_")
    name = "".join(out)
    while "__" in name:
        name = name.replace("__", "_")
    return name.strip("_") or "free"


def _module_sources(kind, root, attrs, path, mod, out, seen):
    """A module's parameters and buffers, lifted through attribute chains."""
    named = []
    for meth in ("named_parameters", "named_buffers"):
        f = getattr(mod, meth, None)
        if f is None:
            continue
        try:
            named.extend(f())
        except Exception:  # noqa: BLE001
            continue
    for qual, t in named:
        parts = tuple(qual.split("."))
        p = path + "".join("." + x for x in parts)
        if p in seen:
            continue
        seen.add(p)
        s = Source(kind, root, attrs + parts, p, _ident(p.replace("globals", "").replace("closure", "")))
        out.append(s)
    # scalar state of every submodule (training, eps, p, ...)
    mods = [((), mod)]
    nm = getattr(mod, "named_modules", None)
    if nm is not None:
        try:
            mods = [(tuple(q.split(".")) if q else (), m) for q, m in nm()]
        except Exception:  # noqa: BLE001
            pass
    for q, m in mods:
        for k, v in sorted(vars(m).items()):
            if k.startswith("__") or not isinstance(v, _SCALARS):
                continue
            p = path + "".join("." + x for x in q + (k,))
            if p in seen:
                continue
            seen.add(p)
            out.append(Source(kind, root, attrs + q + (k,), p, _ident(p)))


def analyze(fn, self_arg=None):
    """Build the Plan of a function, bound method or nn.Module.

    self_arg: for a function compiled on a class (``@tp.compile`` on
    ``forward``) called with a module as its first argument, that module:
    it is treated as ``self`` of a bound method, but stays in the arguments."""
    self_obj = None
    target = fn
    if self_arg is not None:
        plan = analyze(types.MethodType(fn, self_arg))
        plan.fn = fn
        plan.self_in_args = True
        return plan
    if _is_module(fn):
        self_obj = fn
        target = type(fn).forward
    elif isinstance(fn, types.MethodType):
        self_obj = fn.__self__
        target = fn.__func__
    if not isinstance(target, types.FunctionType):
        # builtins, C functions, callables without bytecode: nothing to lift
        return Plan(fn, None, None, [])
    code = target.__code__
    self_name = code.co_varnames[0] if self_obj is not None and code.co_argcount else None
    cells = dict(zip(code.co_freevars, target.__closure__ or ()))
    g = target.__globals__
    out, seen = [], set()
    for kind_name, root_name, attrs in _chains(code, self_name):
        if kind_name == "global":
            if root_name not in g:
                continue          # a builtin: not guarded
            kind, root, base_attrs = 0, g, (root_name,)
            base_path = f"globals[{root_name!r}]"
            value = g[root_name]
        elif kind_name == "closure":
            if root_name not in cells:
                continue
            kind, root, base_attrs = 1, cells[root_name], ()
            base_path = f"closure[{root_name!r}]"
            try:
                value = root.cell_contents
            except ValueError:
                continue
        else:
            kind, root, base_attrs, base_path, value = 2, self_obj, (), "self", self_obj
        if not attrs:
            if kind == 2:
                if _is_module(value) and base_path not in seen:
                    seen.add(base_path)
                    _module_sources(kind, root, base_attrs, base_path, value, out, seen)
                continue
            if isinstance(value, types.ModuleType) or base_path in seen:
                continue
            seen.add(base_path)
            out.append(Source(kind, root, base_attrs, base_path, _ident(root_name)))
            if _is_module(value):
                _module_sources(kind, root, base_attrs, base_path, value, out, seen)
            continue
        # attribute chain: the longest prefix ending at a tensor or scalar
        cur, best = value, None
        for k, a in enumerate(attrs):
            try:
                cur = getattr(cur, a)
            except Exception:  # noqa: BLE001
                break
            if _is_tensor(cur) or isinstance(cur, _SCALARS):
                best = k + 1
            if callable(cur) and not _is_tensor(cur):
                break
        if best is None:
            continue
        chain = attrs[:best]
        p = base_path + "".join("." + x for x in chain)
        if p in seen:
            continue
        seen.add(p)
        out.append(Source(kind, root, base_attrs + chain, p, _ident(p)))
    return Plan(fn, target, self_obj, out)
