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
be replayed (an argument computed inside the program) keeps the copy.

Eager's aliasing is read on the graph as traced, before the front-end
passes (output_aliasing): its samples are eager's own values. The passes
may change which value an output is (x + 0 folded to x, two equal
computations merged by CSE, a folded constant), so the graph after them
only says where the program's result might share memory that eager's
does not: such outputs are copied when they do (with_view_outputs)."""
from tensorplay import _C

__all__ = ["output_aliasing", "output_fix", "view_output_plan", "with_view_outputs"]

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

# op-table kinds whose result is a new tensor, except the names that may
# hand back their argument (contiguous, to, type_as of the same layout)
_ALLOCATING_KINDS = frozenset(("pointwise", "reduction", "other", "composite", "extern"))
_MAY_RETURN_ARG = _VIEW_OPS | frozenset(("type_as", "positive", "view_as", "reshape_as",
                                         "clone_if_needed", "requires_grad_", "retain_grad"))


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
        if first_path[n] != path:
            # the very value of an earlier output leaf: the same object
            plan.append((path, ("out", first_path[n]), ()))
            continue
        steps, cur, base, via = [], n, None, None
        try:
            for _ in range(256):
                if cur.op == "placeholder":
                    base = ("in", ph_index[cur])
                    break
                if cur is not n and first_path.get(cur, path) != path:
                    if not _is_view(cur):
                        base = ("out", first_path[cur])
                        break
                    if via is None:
                        # a view of another output, itself a view: an
                        # input is the base when the chain reaches one,
                        # else that output is
                        via = (("out", first_path[cur]), len(steps))
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
        if base is None and via is not None:
            base, steps = via[0], steps[:via[1]]
        if base is None or (base[0] == "out" and base[1] == path):
            continue
        plan.append((path, base, tuple(reversed(steps))))
    return _ordered(plan) or None


def _ordered(plan):
    """outputs regenerated from outputs after their bases"""
    done, out, rest = set(), [], list(plan)
    pending = {e[0] for e in plan}
    while rest:
        keep = []
        for e in rest:
            if e[1][0] == "in" or e[1][1] not in pending or e[1][1] in done:
                out.append(e)
                done.add(e[0])
            else:
                keep.append(e)
        if len(keep) == len(rest):      # (no cycle is possible in a DAG)
            out.extend(keep)
            break
        rest = keep
    return out


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


class AliasSpec:
    """Eager's aliasing of a traced function's outputs: plan (as
    view_output_plan) and fresh, the paths of tensor output leaves that
    share memory with no input and no other output (the ones not
    regenerated by the plan)."""
    __slots__ = ("plan", "fresh", "hidden")

    def __init__(self, plan, fresh, hidden=0):
        self.plan, self.fresh, self.hidden = plan, fresh, hidden


def _output_leaves(gm):
    outn = [n for n in gm.graph.nodes if n.op == "output"]
    if not outn:
        return None
    out = []
    _all_leaves(outn[0].args[0] if outn[0].args else None, (), out)
    return out


def _all_leaves(o, path, out):
    """(path, leaf) of every leaf, nodes and constants"""
    if isinstance(o, (tuple, list)) and not _is_node(o):
        for i, x in enumerate(o):
            _all_leaves(x, path + (i,), out)
    elif isinstance(o, dict):
        for k, x in o.items():
            _all_leaves(x, path + (k,), out)
    else:
        out.append((path, o))


def _walk_to_base(n, ph_index):
    """(base node, replay steps) of a chain of views ending at n: the base
    is where the chain stops (a value that is no view of its argument)"""
    steps, cur = [], n
    for _ in range(256):
        if cur.op not in ("call_method", "call_function") or not cur.args \
                or not _is_node(cur.args[0]) or not _is_view(cur):
            break
        if _writes_arg0(cur) or (_name(cur) not in _VIEW_OPS and _same_layout(
                cur.meta.get("val"), cur.args[0].meta.get("val"))):
            cur = cur.args[0]
            continue
        if _name(cur) not in _VIEW_OPS:
            return None
        steps.append((cur.op == "call_method", cur.target,
                      _template(tuple(cur.args[1:]), ph_index),
                      _template(dict(cur.kwargs), ph_index)))
        cur = cur.args[0]
    else:
        return None
    if cur.op not in ("call_method", "call_function"):
        return None
    return cur, tuple(reversed(steps))


def _hidden_bases(gm, leaves, planned, unplanned):
    """Outputs that are views of one intermediate no output is (v = relu(x);
    return v.t(), v[0]): that intermediate becomes a hidden output of the
    program, each such output a view of it. [(path, k, steps)], [node]"""
    ph_index = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    at = dict(leaves)
    entries, bases = [], []
    for path in unplanned:
        try:
            got = _walk_to_base(at[path], ph_index)
        except _NotReplayable:
            got = None
        if got is None:
            continue
        b, steps = got
        if b not in bases:
            bases.append(b)
        entries.append((path, bases.index(b), steps))
    used = {k for _, k, _ in entries}
    # (only bases two or more outputs view: a single view of a private
    # intermediate is already right as the program's own buffer)
    counts = {}
    for _, k, _ in entries:
        counts[k] = counts.get(k, 0) + 1
    keep = [k for k in sorted(used) if counts[k] > 1]
    remap = {k: i for i, k in enumerate(keep)}
    return ([(p, remap[k], st) for p, k, st in entries if k in remap],
            [bases[k] for k in keep])


def output_aliasing(gm, hidden_ok=False):
    """The AliasSpec of gm as traced (before the front-end passes: its
    meta['val'] samples are eager's values), or None for an odd graph.
    hidden_ok: outputs viewing one intermediate that is no output may make
    it a hidden output of gm (its output node then returns (outputs,
    hidden), AliasSpec.hidden counting them; no input requires grad)."""
    try:
        plan = view_output_plan(gm) or ()
        leaves = _output_leaves(gm)
        if leaves is None:
            return None
        planned = {e[0] for e in plan}
        T = _C.Tensor
        ph = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
        cands = []
        for path, n in leaves:
            if path in planned or not _is_node(n) or (
                    n.op == "get_attr" and not n.meta.get("made_in_trace")):
                continue        # (a tensor the call found is returned as itself)
            v = n.meta.get("val")
            if isinstance(v, T):
                cands.append((path, v))
        fresh, unplanned = [], []
        for path, v in cands:
            if _shares(v, ph):
                continue        # an alias of an input the plan cannot replay: as before
            if any(_shares(v, w) for p, w in cands if p != path):
                unplanned.append(path)
                continue
            fresh.append(path)
        hidden = []
        if unplanned and hidden_ok:
            entries, hidden = _hidden_bases(gm, leaves, planned, unplanned)
            if hidden:
                plan = tuple(plan) + tuple((p, ("hid", k), st) for p, k, st in entries)
                done = {p for p, _, _ in entries}
                rest = [(p, v) for p, v in cands if p in unplanned and p not in done]
                fresh += [p for p, v in rest if not any(_shares(v, w) for q, w in cands if q != p)]
                outn = [n for n in gm.graph.nodes if n.op == "output"][0]
                orig = outn.args[0] if outn.args else None
                outn.args = ((orig, tuple(hidden)),)
                gm.recompile()
        return AliasSpec(tuple(plan), tuple(fresh), len(hidden))
    except Exception:  # noqa: BLE001 - an odd graph: outputs as the program makes them
        return None


def _may_share(n, counts):
    """after the passes: can output node n share memory with an input or
    another output (True), or is it always a constant (\"const\")?"""
    if not _is_node(n):
        return "const" if isinstance(n, _C.Tensor) else False
    if n.op == "get_attr":
        return "const"          # the same tensor object on every call
    if counts.get(n, 0) > 1 or n.op not in ("call_function", "call_method"):
        return True
    nm = _name(n)
    if nm in _MAY_RETURN_ARG or _writes_arg0(n):
        return True
    try:
        kind = _C._op_info(nm)["kind"]
    except Exception:  # noqa: BLE001 - not an op-table op
        return True
    return kind not in _ALLOCATING_KINDS


def _fresh_checks(gm, fresh, art=None, hidden=0):
    """((path, always_copy), ...) for the outputs eager makes fresh that
    the program may not: read from a compiled program's output buffers
    (output_slots) when art has them, else from gm after the passes (art
    is gm, run eagerly); any other artifact: every fresh output"""
    if not fresh:
        return ()
    leaves = _output_leaves(gm)
    if leaves is None:
        return tuple((p, False) for p in fresh)
    slots = getattr(art, "output_slots", None) if art is not None and art is not gm else None
    if hidden:
        # (outputs, hidden bases): the outputs' part
        leaves = [(p[1:], n) for p, n in leaves if p and p[0] == 0]
        if slots is not None:
            slots = slots[0]
    if art is not None and art is not gm and slots is None:
        return tuple((p, False) for p in fresh)     # a user back end's artifact
    if slots is not None:
        return _program_checks(slots, leaves, fresh)
    at = dict(leaves)
    counts = {}
    for _, n in leaves:
        if _is_node(n):
            counts[n] = counts.get(n, 0) + 1
    out = []
    for p in fresh:
        if p not in at:
            out.append((p, False))
            continue
        m = _may_share(at[p], counts)
        if m:
            out.append((p, m == "const"))
    return tuple(out)


def _program_checks(slots, leaves, fresh):
    """_fresh_checks from a CompiledProgram's output_slots: an input or
    an eager step's result may share memory; a held constant is the same
    tensor every call; a buffer of its own shares only where one slot is
    returned at two places"""
    entries = {}
    for p, _ in leaves:
        try:
            entries[p] = _get(slots, p)
        except (IndexError, KeyError, TypeError):
            entries[p] = None
    used = {}
    for e in entries.values():
        if isinstance(e, tuple) and len(e) == 2:
            used[e[1]] = used.get(e[1], 0) + 1
    out = []
    for p in fresh:
        e = entries.get(p)
        if not (isinstance(e, tuple) and len(e) == 2):
            if isinstance(e, _C.Tensor):
                out.append((p, True))
            elif e is None or p not in entries:
                out.append((p, False))
            continue
        kind, slot = e
        if kind == "const":
            out.append((p, True))
        elif kind != "temp" or used.get(slot, 0) > 1:
            out.append((p, False))
    return tuple(out)


def _storage_id(t):
    s = getattr(t, "_storage", None)
    return id(s) if s is not None else None


class OutputFix:
    """Makes a program's outputs alias as eager's: the outputs eager makes
    fresh are copied where the program's share memory with an input or
    another output (or are a folded constant, the same tensor on every
    call); then each aliasing output is regenerated from its base."""
    __slots__ = ("plan", "checks", "hidden")

    def __init__(self, plan, checks, hidden=0):
        self.plan, self.checks, self.hidden = plan, checks, hidden

    def __call__(self, out, flat, rg_before=None):
        """rg_before: the inputs' requires_grad before a call with compiled
        autograd"""
        hid = ()
        if self.hidden:
            out, hid = out
        if self.checks:
            T = _C.Tensor
            seen = {_storage_id(t) for t in flat if isinstance(t, T)}
            for path, always in self.checks:
                v = _get(out, path)
                if not isinstance(v, T):
                    continue
                s = _storage_id(v)
                if always or s is None or s in seen:
                    v = v.clone()
                    out = _put(out, path, v)
                    s = _storage_id(v)
                seen.add(s)
        for path, base, steps in self.plan:
            v = flat[base[1]] if base[0] == "in" else (
                hid[base[1]] if base[0] == "hid" else _get(out, base[1]))
            if rg_before is not None and base[0] == "in" and not rg_before[base[1]] \
                    and getattr(_get(out, path), "requires_grad", False):
                # an input the function overwrote from values that require
                # grad (x.copy_(w * 2); return x): the program's output
                # carries that history, the input object cannot
                continue
            for is_method, target, a, k in steps:
                a, k = _fill(a, flat), _fill(k, flat)
                v = getattr(v, target)(*a, **k) if is_method else target(v, *a, **k)
            out = _put(out, path, v)
        return out


def output_fix(gm, spec=None, check_all=False, art=None):
    """The OutputFix for a program made from gm (after the passes), or None
    when its outputs already alias as eager's. spec: output_aliasing of the
    graph as traced; None reads gm itself (its samples then stand for
    eager's). art: the program (its output buffers say which outputs may
    share memory), gm itself, or None (judged on gm). check_all: the
    program is not gm's own lowering (compiled autograd's forward): every
    fresh output is checked."""
    if spec is None:
        spec = output_aliasing(gm)
    if spec is None:
        return None
    try:
        checks = _fresh_checks(gm, spec.fresh, art, spec.hidden)
    except Exception:  # noqa: BLE001 - an odd graph: check every fresh output
        checks = ()
        check_all = True
    if check_all:
        always = {p for p, a in checks if a}
        checks = tuple((p, p in always) for p in spec.fresh)
    return OutputFix(spec.plan, checks, spec.hidden) if spec.plan or checks or spec.hidden \
        else None


class _ViewOutputs:
    """The artifact, its outputs then made to alias as eager's (OutputFix)."""

    def __init__(self, art, fix):
        self._art = art
        self._fix = fix

    def __call__(self, *flat):
        return self._fix(self._art(*flat), flat)

    def __getattr__(self, name):
        return getattr(self._art, name)

    def __repr__(self):
        return repr(self._art)


def unwrap(art):
    """the back end's artifact under with_view_outputs' and
    with_named_outputs' wrappers"""
    while type(art) in (_ViewOutputs, _NamedOutputs):
        art = art._art
    return art


def rebuild_named(out, spec):
    """out with the named tuples of fn's output as traced
    (TraceResult.output_named: (type, (item specs)) for a tuple or list,
    (dict, {key: spec}) for a dict, None for a part without one) made
    again: a graph's output flattens torch.return_types.topk(values,
    indices) to a plain tuple. A part already of its type is kept."""
    if spec is None:
        return out
    typ, kids = spec
    if typ is dict:
        if not isinstance(out, dict):
            return out
        got = {k: rebuild_named(out[k], ks) for k, ks in kids.items() if k in out}
        if all(got[k] is out[k] for k in got):
            return out
        new = dict(out)
        new.update(got)
        return new
    if not isinstance(out, (tuple, list)) or len(out) != len(kids):
        return out
    items = [rebuild_named(o, k) for o, k in zip(out, kids)]
    if type(out) is typ and all(a is b for a, b in zip(items, out)):
        return out
    if typ is list or typ is tuple:
        return typ(items)
    return typ(*items)


class _NamedOutputs:
    """The artifact, the named tuples of its outputs made again
    (rebuild_named)."""

    def __init__(self, art, spec):
        self._art = art
        self._spec = spec

    def __call__(self, *flat):
        return rebuild_named(self._art(*flat), self._spec)

    def __getattr__(self, name):
        return getattr(self._art, name)

    def __repr__(self):
        return repr(self._art)


def with_named_outputs(art, spec):
    """art, wrapped so that its outputs hold fn's named tuples (spec:
    TraceResult.output_named); art itself when there are none"""
    return art if spec is None or art is None else _NamedOutputs(art, spec)


def with_view_outputs(gm, art, spec=None):
    """art, wrapped so that its outputs alias inputs and each other as
    eager's do (output_fix)."""
    fix = output_fix(gm, spec, art=art)
    return _ViewOutputs(art, fix) if fix is not None else art
