"""Traced tensors stored into Python state, replayed after every call.

Eager ``d['last'] = x * 3``, ``lst.append(y)`` or ``self.attn = p`` leave a
tensor in Python state; a trace would leave a Proxy there, and the compiled
program would never store anything again. As torch.compile does, the
stores are recorded while tracing as side effects, the stored values
become extra outputs of the program, and each call stores the real
tensors where eager would have:

- calls on effect-only containers (``_lift``: globals and closure values
  that the function only writes through ``append``/``update``/... or
  ``c[k] = v`` with a constant key) are logged by their recorder;
- attribute stores on modules (``self.attn = p``, buffers assigned or
  updated in place) are logged by ``nn.Module.__setattr__`` while
  ``tensorplay.nn.modules._store_log`` is set, and undone after the trace.

A traced value that still sits in Python state after the trace (a store
into a container the function also reads, an attribute of a plain object)
cannot be replayed safely: that version runs eagerly, and under
strict_native the compile raises NativeCompileError."""
from tensorplay import _C

__all__ = ["StoreLog", "extract", "fill", "find_proxy"]

_MARK = "__stax_extra__"


def _is_proxy(v):
    P = getattr(_C, "Proxy", None)
    return P is not None and isinstance(v, P)


class StoreLog:
    """Attribute stores of traced values on modules during one trace."""

    def __init__(self):
        self.entries = []     # (module, name, value)
        self._undo = []       # (module, snapshot of the name's places)

    def record(self, mod, name, value):
        d = mod.__dict__
        snap = [(d, name in d, d.get(name))]
        for k in ("_parameters", "_buffers", "_modules"):
            sub = d.get(k)
            if isinstance(sub, dict):
                snap.append((sub, name in sub, sub.get(name)))
        self._undo.append((name, snap))
        self.entries.append((mod, name, value))

    def undo(self):
        for name, snap in reversed(self._undo):
            for dct, had, old in snap:
                if had and _is_proxy(old):
                    # a lifted tensor's stand-in that the lifting wrapper
                    # put there: the wrapper takes it away itself
                    continue
                if had:
                    dct[name] = old
                else:
                    dct.pop(name, None)
        self._undo = []


def holds_proxy(v, depth=0):
    if _is_proxy(v):
        return True
    if depth < 4 and isinstance(v, (tuple, list)):
        return any(holds_proxy(x, depth + 1) for x in v)
    if depth < 4 and isinstance(v, dict):
        return any(holds_proxy(x, depth + 1) for x in v.values())
    return False


def extract(v, extras):
    """v with every Proxy replaced by a marker; the proxies appended to
    extras (each becomes an extra output of the program)"""
    if _is_proxy(v):
        extras.append(v)
        return (_MARK, len(extras) - 1)
    if type(v) is tuple:
        return tuple(extract(x, extras) for x in v)
    if type(v) is list:
        return [extract(x, extras) for x in v]
    if type(v) is dict:
        return {k: extract(x, extras) for k, x in v.items()}
    return v


def fill(t, values):
    """the template t with its markers replaced by values[i]"""
    if type(t) is tuple:
        if len(t) == 2 and t[0] == _MARK:
            return values[t[1]]
        return tuple(fill(x, values) for x in t)
    if type(t) is list:
        return [fill(x, values) for x in t]
    if type(t) is dict:
        return {k: fill(x, values) for k, x in t.items()}
    return t


def find_proxy(roots, limit=4096):
    """A description of where a Proxy sits in Python state reachable from
    roots [(path, object)] (containers, modules and plain objects, a few
    levels deep), or None."""
    seen = set()
    todo = [(p, o, 0) for p, o in roots]
    n = 0
    while todo and n < limit:
        path, o, depth = todo.pop()
        n += 1
        if _is_proxy(o):
            return path
        if id(o) in seen or depth > 4:
            continue
        seen.add(id(o))
        if isinstance(o, dict):
            for k, v in list(o.items()):
                todo.append((f"{path}[{k!r}]", v, depth + 1))
        elif isinstance(o, (list, tuple, set, frozenset)):
            for i, v in enumerate(list(o)):
                todo.append((f"{path}[{i}]", v, depth + 1))
        elif hasattr(o, "__dict__") and not isinstance(o, type) \
                and type(o).__module__ not in ("builtins",) and not callable(o) \
                or _is_module_obj(o):
            d = getattr(o, "__dict__", None)
            if isinstance(d, dict):
                for k, v in list(d.items()):
                    if k.startswith("__"):
                        continue
                    if k in ("_parameters", "_buffers", "_modules") and isinstance(v, dict):
                        for kk, vv in v.items():
                            todo.append((f"{path}.{kk}", vv, depth + 1))
                    else:
                        todo.append((f"{path}.{k}", v, depth + 1))
    return None


def _is_module_obj(o):
    try:
        from tensorplay import nn
        return isinstance(o, nn.Module)
    except Exception:  # noqa: BLE001
        return False
