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
- a mutable container (list, dict, set, deque) that the bytecode only
  writes through side-effect methods (``calls.append(1)``: append, extend,
  insert, add, update, clear, discard, appendleft, extendleft; no other
  load of the name, no store to it): *effect-only*. Its contents are never
  used by the trace, so they are not part of the key (Prop. 2.1 holds: a
  value the trace did not read cannot be a constant of the graph); it is
  guarded by identity. While tracing the name reads as a recorder that
  logs the calls; each call of the version replays the log on the real
  container (arguments are constants of the key: None/bool/int/float/str/
  bytes and tuples of them; a traced tensor becomes an extra output of the
  program, stored from it at every call; any other argument makes the
  version run eagerly). An item store with a constant key
  (``d['last'] = y``) counts as such a call (``__setitem__``). Any read (``len(calls)``, ``calls[-1]``,
  ``x in calls``, passing it to a function) keeps the contents in the key.
- a constant subscript of a global or closure container (``L[0]``,
  ``cfg['scale']``): an item step in the chain (``globals['L'][0]``), read
  again at every call like an attribute.
- what the user's own helper functions read (a global function or closure
  value called by the code, and the helpers it calls in turn, up to
  ``_HELPER_DEPTH`` levels): their globals and closure values, as sources
  of their own globals dict or cell; and what a method of ``self`` called
  as ``self.helper()`` reads of ``self``. While tracing, a lifted tensor
  read by a helper is swapped into the helper's own globals dict, cell or
  owner, and put back after. Library code (tensorplay, the standard
  library, numpy, torch) is not looked into.
Not covered: helpers reached any other way (through a module attribute,
an object's method, a returned function), the bodies of library functions,
attributes read through ``getattr`` with a computed name. A tensor such a
path reaches is a constant of the graph held by reference; an eager write
to it is caught by the trace's write journal, and that version runs
eagerly (strict_native: an error).
"""
import collections
import dis
import sys
import types

import numpy as _np

__all__ = ["Plan", "analyze"]

# NumPy scalars too: `self.scale = np.float32(0.5)` is a constant of the trace
_SCALARS = (type(None), bool, int, float, str, _np.number, _np.bool_)
_LOAD_ATTR = ("LOAD_ATTR", "LOAD_METHOD")
_WRITE_ONLY = frozenset(("append", "extend", "insert", "add", "update", "clear", "discard",
                         "appendleft", "extendleft"))
_CONTAINERS = (list, dict, set, collections.deque)
_CONST = (type(None), bool, int, float, complex, str, bytes)
_HELPER_DEPTH = 3
# library code the analysis does not look into (its reads are not the
# user's state); a helper defined in one of these modules is opaque
_LIBRARY = frozenset(("tensorplay", "numpy", "torch", "builtins")) | frozenset(
    getattr(sys, "stdlib_module_names", ()))


def _effect_only_names(code):
    """{('global'|'closure', name)} whose every use in the bytecode (nested
    code objects included) is a call of a write-only method."""
    ok, bad = set(), set()
    for co in _code_objects(code):
        ins = list(dis.get_instructions(co))
        for i, x in enumerate(ins):
            if x.opname == "LOAD_GLOBAL":
                key = ("global", x.argval)
            elif x.opname in ("LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_CLOSURE"):
                key = ("closure", x.argval)
            elif x.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
                bad.add(("global", x.argval))
                continue
            elif x.opname in ("STORE_DEREF", "DELETE_DEREF"):
                bad.add(("closure", x.argval))
                continue
            else:
                continue
            nxt = ins[i + 1] if i + 1 < len(ins) else None
            nxt2 = ins[i + 2] if i + 2 < len(ins) else None
            if (x.opname != "LOAD_CLOSURE" and (co is code or key[0] == "global")
                    and nxt is not None and nxt.opname in _LOAD_ATTR and nxt.argval in _WRITE_ONLY):
                ok.add(key)
            elif (x.opname != "LOAD_CLOSURE" and (co is code or key[0] == "global")
                  and nxt is not None and nxt.opname == "LOAD_CONST"
                  and nxt2 is not None and nxt2.opname == "STORE_SUBSCR"):
                ok.add(key)      # d['last'] = value: a store, never a read
            else:
                bad.add(key)
    return ok - bad


def _is_proxy(v):
    from tensorplay import _C
    P = getattr(_C, "Proxy", None)
    return P is not None and isinstance(v, P)


def _replayable(v):
    """a constant of the key, or a traced tensor (made an extra output of
    the program and stored from it at every call)"""
    if isinstance(v, _CONST) or _is_proxy(v):
        return True
    if type(v) in (tuple, list):
        return all(_replayable(x) for x in v)
    return False


class _EffectRecorder:
    """Stands for an effect-only container while tracing: logs the calls
    (and item stores, ``d['last'] = y``)."""
    __slots__ = ("_log", "_index", "_type")

    def __init__(self, log, index, typ):
        self._log, self._index, self._type = log, index, typ

    def __setitem__(self, key, value):
        if not hasattr(self._type, "__setitem__"):
            raise TypeError(f"{self._type.__name__!r} object does not support item assignment")
        if not (_replayable(key) and _replayable(value)) or _is_proxy(key):
            self._log.replayable = False
        self._log.append((self._index, "__setitem__", (key, value), {}))

    def __getattr__(self, name):
        if name not in _WRITE_ONLY or not hasattr(self._type, name):
            raise AttributeError(f"{self._type.__name__!r} object has no attribute {name!r}")
        log, index = self._log, self._index

        def record(*a, **k):
            if not (all(_replayable(x) for x in a) and all(_replayable(x) for x in k.values())):
                if log.replayable:
                    log.where = _user_line(sys._getframe(1))
                    log.call = f"{self._type.__name__}.{name}"
                log.replayable = False
            log.append((index, name, a, dict(k)))
        return record


class _EffectLog(list):
    replayable = True
    where = call = None     # the first call that cannot be replayed


def _user_line(fr):
    """'file:line in fn: source' of a frame (strict_native's messages)."""
    import linecache
    co = fr.f_code
    src = linecache.getline(co.co_filename, fr.f_lineno).strip()
    return f"{co.co_filename}:{fr.f_lineno} in {co.co_name}: {src}"


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
            while j < len(ins):
                if ins[j].opname in _LOAD_ATTR:
                    attrs.append(ins[j].argval)
                    j += 1
                elif (ins[j].opname == "LOAD_CONST" and j + 1 < len(ins)
                      and ins[j + 1].opname == "BINARY_SUBSCR"
                      and type(ins[j].argval) in (int, str)):
                    # an item step: a 1-tuple, as _C's source reader takes it
                    attrs.append((ins[j].argval,))
                    j += 2
                else:
                    break
            out.setdefault((root[0], root[1], ()), None)
            if attrs:
                out.setdefault((root[0], root[1], tuple(attrs)), None)
    return list(out)


class Source:
    __slots__ = ("kind", "root", "attrs", "path", "name", "lifted", "effect_only", "helper",
                 "grad_of")

    def __init__(self, kind, root, attrs, path, name):
        self.kind, self.root, self.attrs, self.path, self.name = kind, root, attrs, path, name
        self.lifted = False
        self.effect_only = False
        self.helper = False     # read by a helper: swapped in its own place
        self.grad_of = None     # the .grad of source grad_of (an index)

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
            cur = _step(cur, a)
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
        # indices of the effect-only containers (signature: identity)
        self.effect_idx = frozenset(i for i, s in enumerate(sources) if s.effect_only)
        self.effect_tuple = tuple(sorted(self.effect_idx))
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
        log = _EffectLog()
        effects = [(i, _EffectRecorder(log, i, type(values[i]))) for i in sorted(self.effect_idx)
                   if isinstance(values[i], _CONTAINERS)]
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
            # what the lifting put where, to tell the function's own stores
            # from it when it returns: globals name -> value, closure cell
            # index -> value, restore index -> (path, value)
            gput, cput, sput = {}, {}, {}
            wrapper.lost_store = None
            try:
                # a helper's reads first, in their own places (its globals
                # dict, its cell): the target's copied globals then see them
                for p, i in zip(proxies, lifted_idx):
                    s = sources[i]
                    if not s.helper or s.grad_of is not None:
                        continue
                    if s.kind == 1 and not s.attrs:
                        restore.append((s.root, None, True, s.root.cell_contents))
                        s.root.cell_contents = p
                    else:
                        if s.kind == 0 and len(s.attrs) == 1:
                            d, name = s.root, s.attrs[0]
                        else:
                            d, name = _place(s)
                        restore.append(_swap(d, name, p))
                        if not _is_module(_owner(s)):
                            sput[len(restore) - 1] = (s.path, p)
                for i, p in effects:
                    s = sources[i]
                    if s.helper:
                        # a helper's container: its recorder in the helper's place
                        if s.kind == 0:
                            restore.append(_swap(s.root, s.attrs[0], p))
                        else:
                            restore.append((s.root, None, True, s.root.cell_contents))
                            s.root.cell_contents = p
                    elif s.kind == 0:
                        if new_globals is None:
                            new_globals = dict(target.__globals__)
                        new_globals[s.attrs[0]] = gput[s.attrs[0]] = p
                    else:
                        k = next(j for j, c in enumerate(cells) if c is s.root)
                        cells[k] = types.CellType(p)
                        cput[k] = p
                by_index = dict(zip(lifted_idx, proxies))
                for p, i in zip(proxies, lifted_idx):
                    s = sources[i]
                    if s.grad_of is not None:
                        # read as <parameter proxy>.grad (the Proxy's grad)
                        owner = by_index.get(s.grad_of)
                        if owner is not None:
                            meta = owner.node.meta
                            restore.append((meta, "lifted_grad", "lifted_grad" in meta,
                                            meta.get("lifted_grad")))
                            meta["lifted_grad"] = p
                        continue
                    if s.helper:
                        continue
                    if s.kind == 0 and len(s.attrs) == 1:
                        if new_globals is None:
                            new_globals = dict(target.__globals__)
                        new_globals[s.attrs[0]] = gput[s.attrs[0]] = p
                    elif s.kind == 1 and not s.attrs:
                        k = freevars.index(s.name)
                        cells[k] = types.CellType(p)
                        cput[k] = p
                    else:
                        restore.append(_swap(*_place(s), p))
                        if not _is_module(_owner(s)):
                            # (a module's attribute stores are logged by its
                            # __setattr__ and replayed: _stores)
                            sput[len(restore) - 1] = (s.path, p)
                fn = types.FunctionType(code, new_globals if new_globals is not None else target.__globals__,
                                        target.__name__, target.__defaults__, tuple(cells) or None)
                fn.__kwdefaults__ = target.__kwdefaults__
                if self_obj is not None and not self.self_in_args:
                    return fn(self_obj, *rest, **kw)
                return fn(*rest, **kw)
            finally:
                # a store (`global g; g = ...`, `nonlocal t; t = ...`,
                # `obj.t = ...`) into a place the lifting took over went to
                # the copied globals, the new cell or the stand-in's place:
                # nothing would make it (the restore below undoes the last)
                wrapper.lost_store = _lost_store(target, new_globals, gput, cells,
                                                 cput, restore, sput)
                for d, name, had, old in reversed(restore):
                    if name is None:
                        d.cell_contents = old       # a helper's cell
                    elif had:
                        d[name] = old
                    else:
                        d.pop(name, None)

        names = [sources[i].name for i in lifted_idx]
        wrapper.effects = log
        return wrapper, names


_GONE = object()


def _lost_store(target, new_globals, gput, cells, cput, restore, sput):
    """Where the traced function stored a value into a place the lifting
    wrapper took over (a path for the messages), or None: a name of the
    copied globals dict that no longer holds what the wrapper put there (or
    the real dict's value), a new closure cell that no longer holds its
    lifted value, a swapped place that no longer holds its stand-in."""
    if new_globals is not None:
        real = target.__globals__
        for k, v in new_globals.items():
            if v is not (gput[k] if k in gput else real.get(k, _GONE)):
                return f"globals()[{k!r}]"
    for k, put in cput.items():
        try:
            cur = cells[k].cell_contents
        except ValueError:
            cur = _GONE
        if cur is not put:
            return f"the closure variable {target.__code__.co_freevars[k]!r}"
    for i, (path, put) in sput.items():
        d, name = restore[i][0], restore[i][1]
        try:
            cur = d[name]
        except (KeyError, IndexError, TypeError):
            cur = _GONE
        if cur is not put:
            return path
    return None


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
        cur = _step(cur, a)
    return cur


def _place(s):
    """(container, key) where the end of a chain is stored: the owner's
    instance dict for an attribute, the list or dict for an item step, a
    module's parameter or buffer dict for its parameters and buffers (so
    that m.parameters(), m.buffers() and their named_ forms yield the
    lifted tensors as m.weight does)"""
    owner, last = _owner(s), s.attrs[-1]
    if type(last) is tuple:
        return owner, last[0]
    if _is_module(owner):
        for k in ("_parameters", "_buffers"):
            d = owner.__dict__.get(k)
            if isinstance(d, dict) and last in d:
                return d, last
    return owner.__dict__, last


def _swap(d, name, value):
    """d[name] = value; the entry that undoes it"""
    if isinstance(d, list):
        entry = (d, name, True, d[name])
    else:
        entry = (d, name, name in d, d.get(name))
    d[name] = value
    return entry


def _step(cur, a):
    """one step of a chain: an attribute name, or (key,) an item"""
    return cur[a[0]] if type(a) is tuple else getattr(cur, a)


def _path_step(a):
    return f"[{a[0]!r}]" if type(a) is tuple else "." + a


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
        out.append(_GradOf(s))
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


class _GradOf:
    """Placeholder in a collector's list for the .grad of a parameter or
    buffer source: kept (a Source of its own) only when the code reads an
    attribute named grad (analyze)."""
    __slots__ = ("of",)

    def __init__(self, of):
        self.of = of


def _reads_grad(codes):
    for co in codes:
        for x in dis.get_instructions(co):
            if x.opname in _LOAD_ATTR and x.argval == "grad":
                return True
    return False


def _user_function(v):
    """a plain Python function of the user's own code (not library code)"""
    if not isinstance(v, types.FunctionType):
        return False
    mod = (getattr(v, "__module__", None) or "").partition(".")[0]
    return mod not in _LIBRARY


class _Collector:
    """The sources of one plan: the target's reads, then its helpers'."""

    def __init__(self, target, self_obj):
        self.target = target
        self.self_obj = self_obj
        self.out, self.seen = [], set()
        self.visited = set()     # code objects looked into

    def add_code(self, func, self_name, helper, depth, self_place=None):
        """self_place: (kind, root, attrs, path, object) where a helper
        method's self is found (a user object's method called through a
        global or closure: h.get()); None: the plan's self"""
        code = func.__code__
        if code in self.visited:
            return
        self.visited.add(code)
        cells = dict(zip(code.co_freevars, func.__closure__ or ()))
        g = func.__globals__
        own = g is self.target.__globals__
        effect_only = _effect_only_names(code)
        helpers = []
        for kind_name, root_name, attrs in _chains(code, self_name):
            if kind_name == "global":
                if root_name not in g:
                    continue          # a builtin: not guarded
                kind, root, base_attrs = 0, g, (root_name,)
                base_path = (f"globals[{root_name!r}]" if own
                             else f"{func.__qualname__}.__globals__[{root_name!r}]")
                value = g[root_name]
            elif kind_name == "closure":
                if root_name not in cells:
                    continue
                kind, root, base_attrs = 1, cells[root_name], ()
                base_path = (f"closure[{root_name!r}]" if not helper
                             else f"{func.__qualname__}.closure[{root_name!r}]")
                try:
                    value = root.cell_contents
                except ValueError:
                    continue
            elif self_place is not None:
                kind, root, base_attrs, base_path, value = self_place
            else:
                kind, root, base_attrs, base_path, value = 2, self.self_obj, (), "self", self.self_obj
            if not attrs and kind != 2 and _user_function(value) and depth < _HELPER_DEPTH:
                helpers.append((value, None, None))
            if attrs and depth < _HELPER_DEPTH:
                # obj.helper() / obj.a.helper(): a method of a user class,
                # looked into with its self read where obj is read (so a
                # tensor it reads of self is lifted, at every call)
                cur, k = value, 0
                while True:
                    m = _bound_method_of(cur, attrs[k:])
                    if m is not None:
                        if kind == 2 and self_place is None and k == 0:
                            helpers.append(m + (None,))
                        else:
                            helpers.append(m + ((kind, root, base_attrs + attrs[:k], base_path
                                                 + "".join(_path_step(x) for x in attrs[:k]),
                                                 cur),))
                        break
                    if k + 1 >= len(attrs) or type(attrs[k]) is tuple or _is_tensor(cur):
                        break
                    try:
                        cur = _step(cur, attrs[k])
                    except Exception:  # noqa: BLE001
                        break
                    k += 1
            self.add_chain(kind, root, base_attrs, base_path, value, attrs, helper,
                           (kind_name, root_name) in effect_only, root_name)
        for h, sname, place in helpers:
            self.add_code(h, sname, True, depth + 1, place)

    def add_chain(self, kind, root, base_attrs, base_path, value, attrs, helper, effect_only,
                  name):
        out, seen = self.out, self.seen
        if not attrs:
            if kind == 2:
                if _is_module(value) and base_path not in seen:
                    seen.add(base_path)
                    _module_sources(kind, root, base_attrs, base_path, value, out, seen)
                return
            if isinstance(value, types.ModuleType) or base_path in seen:
                return
            seen.add(base_path)
            src = Source(kind, root, base_attrs, base_path, _ident(base_path if helper else name))
            src.helper = helper
            src.effect_only = effect_only and isinstance(value, _CONTAINERS)
            out.append(src)
            if _is_module(value):
                _module_sources(kind, root, base_attrs, base_path, value, out, seen)
            return
        # attribute chain: the longest prefix ending at a tensor or scalar;
        # an item step only into a list or dict (swapped in place while
        # tracing)
        cur, best = value, None
        for k, a in enumerate(attrs):
            if type(a) is tuple and not isinstance(cur, (list, dict)):
                break
            try:
                cur = _step(cur, a)
            except Exception:  # noqa: BLE001
                break
            if _is_tensor(cur) or isinstance(cur, _SCALARS):
                best = k + 1
            if callable(cur) and not _is_tensor(cur):
                break
        if best is None:
            return
        chain = attrs[:best]
        p = base_path + "".join(_path_step(x) for x in chain)
        if p in seen:
            return
        seen.add(p)
        src = Source(kind, root, base_attrs + chain, p, _ident(p))
        src.helper = helper
        out.append(src)


def _bound_method_of(obj, attrs):
    """(function, self name) of self.<attrs[0]>() when it is a method of
    obj's class in the user's code"""
    if not attrs or type(attrs[0]) is tuple or isinstance(obj, (type, types.ModuleType)) \
            or _is_tensor(obj):
        return None
    f = getattr(type(obj), attrs[0], None)
    if not _user_function(f) or not f.__code__.co_argcount:
        return None
    return f, f.__code__.co_varnames[0]


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
    col = _Collector(target, self_obj)
    col.add_code(target, self_name, False, 0)
    # p.grad of a module's parameter (m.parameters() in a grad-norm or
    # clipping loop): the gradient is read where the parameter is, at every
    # call (a tensor: lifted; None: guarded), never a constant of the trace
    grads = _reads_grad(c for code in col.visited for c in _code_objects(code))
    out = []
    for s in col.out:
        if type(s) is not _GradOf:
            out.append(s)
        elif grads and s.of in out:
            g = Source(s.of.kind, s.of.root, s.of.attrs + ("grad",), s.of.path + ".grad",
                       s.of.name + "_grad")
            g.helper = s.of.helper
            out.append(g)
    # x.grad read in the code (globals['w'].grad): the Proxy standing for
    # x gives it while tracing
    where = {(s.kind, id(s.root), s.attrs): i for i, s in enumerate(out)}
    for s in out:
        if s.attrs and s.attrs[-1] == "grad":
            s.grad_of = where.get((s.kind, id(s.root), s.attrs[:-1]))
    return Plan(fn, target, self_obj, out)
