"""Outputs that alias inputs (or other outputs), as torch.compile keeps them.

A back end's program returns fresh tensors. Where the traced function
returned a view of one of its inputs (``return x[0]``, ``x.t()``,
``x.view(-1)[2:]``) or a view of another of its outputs (``y = x * 2;
return y, y[1:]``), eager hands back a tensor sharing that base's storage
and version counter; writing into it writes the base. The wrapper made
here regenerates each such output after the program ran: the chain of view
ops that led from the base to the output in the traced graph runs again,
eagerly, on the real base (the input as the program left it, its
mutations written back, or the returned output). Views are found on the
trace's sample values (same storage as their argument); a step that cannot
be replayed (an argument computed inside the program) keeps the copy."""
from tensorplay import _C

__all__ = ["view_output_plan", "with_view_outputs"]

# ops whose result is a view of their first argument and that depend on
# nothing but their arguments (no generator, no grad mode): safe to rerun
_VIEW_OPS = frozenset((
    "getitem", "view", "reshape", "view_as", "reshape_as", "permute", "transpose", "t",
    "expand", "expand_as", "unsqueeze", "squeeze", "flatten", "unflatten", "narrow",
    "select", "slice", "as_strided", "split", "chunk", "unbind", "tensor_split", "detach",
    "alias", "diagonal", "movedim", "moveaxis", "swapaxes", "swapdims", "unfold",
    "contiguous", "to", "type", "float", "double", "half", "bfloat16", "int", "long",
    "short", "bool", "byte", "char", "real", "view_as_real", "split_with_sizes", "T", "mT",
    "H", "mH", "hsplit", "vsplit", "dsplit", "squeeze_", "unsqueeze_", "transpose_", "t_",
))


def _is_node(o):
    return type(o).__name__ == "Node" and hasattr(o, "op") and hasattr(o, "meta")


def _storages(v):
    if isinstance(v, (tuple, list)):
        out = []
        for x in v:
            out.extend(_storages(x))
        return out
    s = getattr(v, "_storage", None)
    return [s] if s is not None else []


def _shares(a, b):
    sa, sb = _storages(a), _storages(b)
    return any(x is y for x in sa for y in sb)


def _same_layout(a, b):
    try:
        return (tuple(a.shape) == tuple(b.shape) and a.stride() == b.stride()
                and a.storage_offset() == b.storage_offset() and a.dtype == b.dtype)
    except Exception:  # noqa: BLE001
        return False


def _name(n):
    t = n.target
    if isinstance(t, str):
        return t
    return getattr(t, "_stax_op", None) or getattr(t, "__name__", "")


def _writes_arg0(n):
    try:
        return bool(_C._graph_node_is_inplace(n))
    except Exception:  # noqa: BLE001
        nm = _name(n)
        return nm.endswith("_") and not nm.endswith("__")


class _NotReplayable(Exception):
    pass


def _template(o, ph_index):
    """args with placeholders as ('in', i); other nodes: not replayable"""
    if _is_node(o):
        if o.op == "placeholder" and o in ph_index:
            return ("__stax_in__", ph_index[o])
        raise _NotReplayable
    if isinstance(o, tuple):
        return tuple(_template(x, ph_index) for x in o)
    if isinstance(o, list):
        return [_template(x, ph_index) for x in o]
    if isinstance(o, dict):
        return {k: _template(x, ph_index) for k, x in o.items()}
    if isinstance(o, slice):
        return slice(_template(o.start, ph_index), _template(o.stop, ph_index),
                     _template(o.step, ph_index))
    return o


def _fill(t, flat):
    if isinstance(t, tuple):
        if len(t) == 2 and t[0] == "__stax_in__":
            return flat[t[1]]
        return tuple(_fill(x, flat) for x in t)
    if isinstance(t, list):
        return [_fill(x, flat) for x in t]
    if isinstance(t, dict):
        return {k: _fill(x, flat) for k, x in t.items()}
    if isinstance(t, slice):
        return slice(_fill(t.start, flat), _fill(t.stop, flat), _fill(t.step, flat))
    return t


def _leaves(o, path, out):
    if _is_node(o):
        out.append((path, o))
    elif isinstance(o, (tuple, list)):
        for i, x in enumerate(o):
            _leaves(x, path + (i,), out)
    elif isinstance(o, dict):
        for k, x in o.items():
            _leaves(x, path + (k,), out)


def view_output_plan(gm):
    """[(path, base, steps)] for every output leaf that is a view of an
    input (base ('in', i)) or of another output (base ('out', path)); each
    step is (is_method, target, args template, kwargs template) with the
    previous value as first argument. None when no output aliases."""
    nodes = list(gm.graph.nodes)
    phs = [n for n in nodes if n.op == "placeholder"]
    ph_index = {n: i for i, n in enumerate(phs)}
    outn = [n for n in nodes if n.op == "output"]
    if not outn:
        return None
    leaves = []
    _leaves(outn[0].args[0] if outn[0].args else None, (), leaves)
    first_path = {}
    for p, n in leaves:
        first_path.setdefault(n, p)
    plan = []
    for path, n in leaves:
        steps, cur, base = [], n, None
        try:
            for _ in range(256):
                if cur.op == "placeholder":
                    base = ("in", ph_index[cur])
                    break
                if cur is not n and first_path.get(cur, path) != path and not _is_view(cur):
                    base = ("out", first_path[cur])
                    break
                if cur.op not in ("call_method", "call_function") or not cur.args \
                        or not _is_node(cur.args[0]) or not _is_view(cur):
                    break
                if _writes_arg0(cur) or (_name(cur) not in _VIEW_OPS and _same_layout(
                        cur.meta.get("val"), cur.args[0].meta.get("val"))):
                    cur = cur.args[0]          # the same tensor as its argument
                    continue
                if _name(cur) not in _VIEW_OPS:
                    break
                steps.append((cur.op == "call_method", cur.target,
                              _template(tuple(cur.args[1:]), ph_index),
                              _template(dict(cur.kwargs), ph_index)))
                cur = cur.args[0]
        except _NotReplayable:
            base = None
        if base is None or (base[0] == "out" and base[1] == path):
            continue
        plan.append((path, base, tuple(reversed(steps))))
    # outputs regenerated from outputs: their bases first
    plan.sort(key=lambda e: e[1][0] == "out")
    return plan or None


def _is_view(n):
    v = n.meta.get("val") if hasattr(n, "meta") else None
    a = n.args[0].meta.get("val") if n.args and _is_node(n.args[0]) else None
    return v is not None and a is not None and _shares(v, a)


def _get(r, path):
    for k in path:
        r = r[k]
    return r


def _put(r, path, v):
    if not path:
        return v
    k = path[0]
    if isinstance(r, tuple):
        lst = list(r)
        lst[k] = _put(lst[k], path[1:], v)
        return type(r)(lst) if type(r) is tuple else type(r)(*lst)
    if isinstance(r, list):
        r = list(r)
        r[k] = _put(r[k], path[1:], v)
        return r
    if isinstance(r, dict):
        r = dict(r)
        r[k] = _put(r[k], path[1:], v)
        return r
    return r


class _ViewOutputs:
    """The artifact, then each aliasing output regenerated from its base."""

    def __init__(self, art, plan):
        self._art = art
        self._plan = plan

    def __call__(self, *flat):
        out = self._art(*flat)
        for path, base, steps in self._plan:
            v = flat[base[1]] if base[0] == "in" else _get(out, base[1])
            for is_method, target, a, k in steps:
                a, k = _fill(a, flat), _fill(k, flat)
                v = getattr(v, target)(*a, **k) if is_method else target(v, *a, **k)
            out = _put(out, path, v)
        return out

    def __getattr__(self, name):
        return getattr(self._art, name)

    def __repr__(self):
        return repr(self._art)


def with_view_outputs(gm, art):
    """art, wrapped so that outputs aliasing inputs or outputs are views."""
    try:
        plan = view_output_plan(gm)
    except Exception:  # noqa: BLE001 - an odd graph: outputs stay copies
        plan = None
    return _ViewOutputs(art, plan) if plan else art
