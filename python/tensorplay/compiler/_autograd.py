"""Compiled autograd (the seed's Key Point 4; docs/autograd.md).

When a compiled function is called with grad mode on and an input (or a
lifted parameter) that requires grad, its version gets a forward and a
backward program instead of one:

1. the op-level graph (``_C.make_op_graph``: functionalized, every node an
   op-table overload) is interpreted on the tracer's proxies, and walked
   backwards: each op's gradient comes from its row of
   ``csrc/autograd/derivatives.def`` (``_C._autograd_formula`` evaluates it
   exactly as the eager engine does), so one trace records the joint
   forward+backward graph ``joint(primals, tangents) -> (outputs, grads)``;
2. the front-end passes clean it (CSE finds what forward and backward
   share), and ``_C.min_cut_partition`` (csrc/graph/partition.c: Dinic's
   max-flow on a network whose node capacities are bytes) chooses the
   values the forward saves: reductions, matmuls, composites and random
   ops are computed once and saved when the backward needs them; cheap
   pointwise and view chains are recomputed in the backward;
3. the forward graph (outputs + saved values) and the backward graph
   (saved values + incoming gradients -> input gradients) are lowered by
   the same back end as any compiled function.

The outputs' grad_fn (``CompiledFunctionBackward``) holds the saved tensors
as torch's saved tensors: freed by a backward without ``retain_graph``
(a second backward raises torch's error), checked against in-place writes
(version counters), and runs the compiled backward."""
import operator

from tensorplay import _C

__all__ = ["CompiledAutograd", "build"]

_derivs = None


def _deriv_kind(op):
    global _derivs
    if _derivs is None:
        _derivs = _C._autograd_derivatives()
    row = _derivs.get(op)
    return row["kind"] if row is not None else None


class JointError(Exception):
    """The joint graph cannot be built for this function (the caller falls
    back to the eager recompute backward, or raises under strict_native)."""


class NoGradOutputs(JointError):
    """No output of the function requires grad: nothing to differentiate."""


def _is_node(x):
    return isinstance(x, _C.Node)


def _leaves(o, out):
    """Tensor-or-Node leaves of an output structure, in the order the
    driver's _flatten visits a program's outputs."""
    if _is_node(o) or isinstance(o, _C.Tensor):
        out.append(o)
    elif isinstance(o, (tuple, list)):
        for x in o:
            _leaves(x, out)
    elif isinstance(o, dict):
        for x in o.values():
            _leaves(x, out)
    return out


def _map(o, fn):
    if isinstance(o, tuple):
        return tuple(_map(x, fn) for x in o)
    if isinstance(o, list):
        return [_map(x, fn) for x in o]
    if isinstance(o, dict):
        return {k: _map(x, fn) for k, x in o.items()}
    if isinstance(o, slice):
        return slice(_map(o.start, fn), _map(o.stop, fn), _map(o.step, fn))
    return fn(o) if _is_node(o) else o


def _val(n):
    return n.meta.get("val")


def _is_float_tensor(v):
    return isinstance(v, _C.Tensor) and v.is_floating_point()


def contiguous_saved(v):
    """A saved activation as the compiled backward takes it: contiguous."""
    return v.contiguous() if isinstance(v, _C.Tensor) else v


def _nbytes(v):
    return v.numel() * v.element_size() if isinstance(v, _C.Tensor) else 0


class CompiledAutograd:
    """The two programs of one version called with grad (and what the
    partition chose). forward_graph / backward_graph: GraphModules;
    saved: [(name, shape, dtype, bytes)] of the values the forward saves
    (inputs among them cost 0 bytes: they exist anyway)."""

    def __init__(self):
        self.forward_graph = self.backward_graph = self.joint_graph = None
        self.fwd = self.bwd = None
        self.alias_fix = None    # _aliasing.OutputFix of the outputs, set by the driver
        self.saved = []
        self.saved_bytes = self.save_all_bytes = 0
        self.recomputed = []
        self.diff_pos = ()          # tensor-leaf positions of the outputs with a grad_fn
        self.grad_inputs = ()       # flat indices of the inputs that require grad
        self.grad_slots = ()        # per grad input: index in the backward's outputs or None
        self.saved_primals = ()     # flat indices of inputs the backward reads
        self.n_saved = 0            # saved values the forward returns
        self.tangent_meta = ()      # (shape, dtype) per differentiable output

    def __repr__(self):
        return (f"<CompiledAutograd: {len(self.saved)} saved, {self.saved_bytes} bytes "
                f"(save-all {self.save_all_bytes})>")


_CASTS = ("float", "double", "half", "bfloat16", "to", "type", "contiguous", "clone")


def _is_cast(n):
    """A Tensor method the op-level graph keeps as a method: a copy or a
    dtype cast, whose gradient is the incoming one cast back."""
    return n.op == "call_method" and n.target in _CASTS


def _op_name(n):
    if n.op == "call_method":
        return n.target if _deriv_kind(n.target) is not None else None
    if n.target is operator.getitem and not isinstance(_val(n.args[0]), (tuple, list)):
        return "getitem"      # a tensor's x[[0, 1, 1]] (the op table's getitem)
    return getattr(n.target, "op_name", None)


class _RGSet(set):
    """The nodes that require grad; overwrite_only: those that do only
    because they overwrote one that does (no gradient flows through them),
    each with the flat indices of the inputs that requiring grad reached
    the overwritten value (eager gives them a zero gradient)."""

    def __init__(self):
        super().__init__()
        self.overwrite_only = {}
        self.zero_reach = {}     # every such overwrite: node -> those inputs


def _rg_inputs(n, rg, index):
    """Flat indices of the placeholders (index: node -> flat index) that
    reach n through nodes of rg."""
    seen, stack, out = set(), [n], set()
    while stack:
        m = stack.pop()
        if m in seen or m not in rg:
            continue
        seen.add(m)
        if m in index:
            out.add(index[m])
        # a chain of overwrites (copy_ then fill_) reaches what the first
        # one overwrote
        out.update(rg.zero_reach.get(m, ()))
        stack.extend(m.all_input_nodes)
    return frozenset(out)


def _requires_grad_nodes(og, flat, dead_rg=None):
    """The op-level nodes whose value requires grad in eager (a formula
    through every op from an input that requires grad; nondiff ops,
    integer and bool values cut it). dead_rg: {name: flat indices} of the
    values DCE removed that require grad (see _overwritten_rg)."""
    rg = _RGSet()
    names, index = {}, {}
    dead_rg = dead_rg or {}
    k = 0
    for n in og.graph.nodes:
        names[n.name] = n
        if n.op == "placeholder":
            index[n] = k
            t = flat[k]
            k += 1
            if t.requires_grad and t.is_floating_point():
                rg.add(n)
            continue
        if n.op not in ("call_function", "call_method"):
            continue
        _rg_node(n, rg)
        over = n.meta.get("overwrites")
        if over is not None and (names.get(over) in rg or over in dead_rg):
            # eager gives the overwritten value's inputs a zero gradient
            # whenever a gradient reaches the overwrite
            rg.zero_reach[n] = (_rg_inputs(names[over], rg, index)
                                if over in names else dead_rg[over])
        if n not in rg and over is not None and _is_float_tensor(_val(n)) \
                and (names.get(over) in rg or over in dead_rg):
            # copy_/fill_/zero_ over a value that requires grad: eager's
            # result keeps requiring grad (its gradient to the overwritten
            # value is zero), though the new value reads no such input
            # or reads it through a nondiff op (full_like)
            rg.add(n)
            rg.overwrite_only[n] = (_rg_inputs(names[over], rg, index)
                                    if over in names else dead_rg[over])
    return rg


def _overwritten_rg(og, gm, flat):
    """The names of the values a copy_/fill_/zero_ overwrote (meta
    'overwrites') that DCE removed from og and that require grad: the
    analysis runs on the op graph built again without DCE (same names)."""
    present = {n.name for n in og.graph.nodes}
    gone = {n.meta.get("overwrites") for n in og.graph.nodes} - present - {None}
    if not gone:
        return {}
    full = _C.make_op_graph(gm, keep_dead=True)
    rg = _requires_grad_nodes(full, flat)   # JointError: the eager backward
    index = {n: i for i, n in enumerate(n for n in full.graph.nodes if n.op == "placeholder")}
    return {n.name: _rg_inputs(n, rg, index) for n in rg if n.name in gone}


def _rg_node(n, rg):
    """Adds the call node n to rg when a formula carries an input's
    requires-grad to its value."""
    if not any(i in rg for i in n.all_input_nodes):
        return
    v = _val(n)
    if n.target is operator.getitem or _is_cast(n):
        if _is_float_tensor(v):
            rg.add(n)
        return
    op = _op_name(n)
    if op is None:
        raise JointError(f"node %{n.name} calls {n.target!r}, not an op of the op table")
    kind = _deriv_kind(op)
    if kind == "nondiff":
        return
    if kind is None:
        raise JointError(f"op '{op}' has no derivative formula")
    if kind == "notimpl":
        raise NotImplementedError(f"tensorplay: the derivative for '{op}' is not implemented")
    if _is_float_tensor(v) or (isinstance(v, (tuple, list))
                               and any(_is_float_tensor(x) for x in v)):
        rg.add(n)


def _call_op(target, args, kwargs):
    """An op-level node's call on the tracer's proxies. Ops with no
    function form (slice, getitem, view, expand, ...) are called through
    their Tensor method or indexing, which the tracer records."""
    name = getattr(target, "op_name", None)
    if name is None or _has_function(name):
        return target(*args, **kwargs)
    x = args[0]
    if name == "slice":
        dim, start, end, step = (list(args[1:]) + [0, None, None, 1][len(args) - 1:])[:4]
        dim = kwargs.get("dim", dim)
        start, end, step = kwargs.get("start", start), kwargs.get("end", end), kwargs.get("step", step)
        dim = dim % x.dim()
        return x[(slice(None),) * dim + (slice(start, end, step),)]
    if name == "getitem":
        return operator.getitem(x, args[1])
    if name == "alias":
        return x.view(tuple(x.shape))
    if name == "_to_copy":
        # (an in-place op's value cast back to its tensor's dtype)
        return x.to(**kwargs, copy=True)
    meth = getattr(_C.Tensor, name, None)
    if meth is None:
        raise JointError(f"op '{name}' has no function or Tensor method to trace")
    return getattr(x, name)(*args[1:], **kwargs)


_fn_cache = {}


def _has_function(name):
    r = _fn_cache.get(name)
    if r is None:
        import tensorplay
        import tensorplay.functional as TF
        r = _fn_cache[name] = (getattr(TF, name, None) is not None
                               or getattr(tensorplay, name, None) is not None)
    return r


def _fit(g, like):
    """A gradient reduced to its operand's shape (broadcasting) and cast to
    its dtype, as the eager engine's fit_grad does."""
    from tensorplay.autograd import _helpers
    if tuple(g.shape) != tuple(like.shape):
        g = _helpers._sum_to(g, tuple(like.shape))
    if g.dtype != like.dtype:
        g = g.to(like.dtype)
    return g


def _add(a, b):
    return b if a is None else a + b


def _joint_fn(og, rg, diff_nodes, grad_inputs, n_primals, got_grad):
    """joint(*primals, *tangents) -> (outputs, grads of grad_inputs that
    get one); got_grad is filled with the flat indices that got one."""
    nodes = list(og.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    out_node = next(n for n in nodes if n.op == "output")

    def joint(*vals):
        env = {}
        owner = {}          # id(value) -> op-level node

        def load(a):
            return _map(a, lambda x: env[x])
        for i, ph in enumerate(placeholders):
            env[ph] = vals[i]
            owner[id(vals[i])] = ph
        for n in nodes:
            if n.op == "get_attr":
                env[n] = _attr(og, n.target)
                continue
            if n.op == "call_method":
                a = load(n.args)
                r = getattr(a[0], n.target)(*a[1:], **load(n.kwargs))
            elif n.op == "call_function":
                r = _call_op(n.target, load(n.args), load(n.kwargs))
            else:
                continue
            env[n] = r
            if not isinstance(r, (tuple, list)):
                owner[id(r)] = n
        out = load(out_node.args[0]) if out_node.args else None
        tangents = vals[n_primals:]
        grads, multi = {}, {}
        zero_reach = set()
        for node, t in zip(diff_nodes, tangents):
            grads[node] = _add(grads.get(node), t)
        for n in reversed(nodes):
            if n.op not in ("call_function", "call_method") or n not in rg:
                continue
            if n in rg.zero_reach and (grads.get(n) is not None or n in multi):
                zero_reach.update(rg.zero_reach[n])
            if n in rg.overwrite_only:
                grads.pop(n, None)
                continue
            if _is_cast(n):
                g = grads.pop(n, None)
                src = n.args[0]
                if g is not None and src in rg:
                    grads[src] = _add(grads.get(src), _fit(g, env[src]))
                continue
            if n.target is operator.getitem and isinstance(_val(n.args[0]), (tuple, list)):
                # an element of a multi-output op's tuple (a tensor's
                # x[[0, 1, 1]] is an indexing op: its formula, below)
                g = grads.pop(n, None)
                if g is not None:
                    parent, k = n.args
                    lst = multi.setdefault(parent, [None] * len(_val(parent)))
                    lst[k] = _add(lst[k], g)
                continue
            r = env[n]
            if isinstance(_val(n), (tuple, list)):
                # a multi-output op (its value on the proxies may be one
                # proxy standing for the tuple)
                gl = multi.pop(n, None)
                results = tuple(r[k] for k in range(len(_val(n))))
            else:
                g = grads.pop(n, None)
                gl = None if g is None else [g]
                results = (r,)
            if gl is None or all(x is None for x in gl):
                continue
            args, kwargs = load(n.args), load(n.kwargs)
            need = tuple(env[i] for i in n.all_input_nodes if i in rg)
            if n.op == "call_method":
                meth = n.target

                def replay(self, *a, **k):
                    return getattr(self, meth)(*a, **k)
            else:
                tgt = n.target

                def replay(*a, **k):
                    return _call_op(tgt, a, k)
            edges = _C._autograd_formula(_op_name(n), tuple(args), kwargs, results, gl, need,
                                         replay)
            for _ai, _ei, operand, g in edges:
                if g is None:
                    continue
                src = owner.get(id(operand))
                if src is None or src not in rg:
                    continue
                grads[src] = _add(grads.get(src), _fit(g, operand))
        out_grads = []
        for i in grad_inputs:
            g = grads.get(placeholders[i])
            if g is None and i in zero_reach:
                # reached only through a value overwritten in place
                import tensorplay as tp
                g = tp.zeros_like(vals[i])
            if g is not None:
                got_grad.append(i)
                out_grads.append(g)
        return out, tuple(out_grads)
    return joint


def _ancestors(roots, stop):
    seen, stack = set(), [r for r in roots if _is_node(r)]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in stop:
            continue
        stack.extend(n.all_input_nodes)
    return seen


def _attr(gm, target):
    o = gm
    for part in target.split("."):
        o = getattr(o, part)
    return o


def _copy_graph(src, jnodes, keep, inputs, output):
    """A new Graph: placeholders for `inputs` (joint nodes, in order), then
    the joint nodes in `keep` in their order, returning `output` (a
    structure over joint nodes)."""
    g = _C.Graph()
    env = {}
    for n in inputs:
        ph = g.placeholder(n.name)
        ph.meta.update(n.meta)
        env[n] = ph
    for n in jnodes:
        if n in keep and n not in env and n.op != "output" and n.op != "placeholder":
            c = g.node_copy(n, lambda x: env[x])
            c.meta.update(n.meta)
            env[n] = c
    g.output(_map(output, lambda x: env[x]))
    gm = _C.GraphModule(g)
    for n in jnodes:
        if n.op == "get_attr" and n in keep:
            # constants (folded tensors) the copied nodes read
            setattr(gm, n.target, _attr(src, n.target))
    return gm


def build(gm, flat, lower, name, log=None):
    """The CompiledAutograd of a traced version: gm its GraphModule after
    the front-end passes (meta['val'] samples still there), flat the call's
    tensors, lower(gm, example_inputs) -> (artifact, eager_fallback) the
    driver's back-end call. Raises JointError when the function cannot be
    differentiated as a graph."""
    import tensorplay as tp
    og = _C.make_op_graph(gm)
    rg = _requires_grad_nodes(og, flat, _overwritten_rg(og, gm, flat))
    out_node = next(n for n in og.graph.nodes if n.op == "output")
    out_struct = out_node.args[0] if out_node.args else None
    leaves = _leaves(out_struct, [])
    diff_pos = tuple(i for i, x in enumerate(leaves)
                     if _is_node(x) and x in rg and x.op != "placeholder")
    diff_nodes = [leaves[i] for i in diff_pos]
    grad_inputs = tuple(i for i, t in enumerate(flat) if t.requires_grad)
    if not diff_nodes:
        raise NoGradOutputs("no output requires grad")
    tmeta = []
    for n in diff_nodes:
        v = _val(n)
        if not isinstance(v, _C.Tensor):
            raise JointError(f"output %{n.name} has no sample")
        tmeta.append((tuple(v.shape), v.dtype))
    tangents = [tp.zeros(s, dtype=d) for s, d in tmeta]
    got = []
    joint = _joint_fn(og, rg, diff_nodes, grad_inputs, len(flat), got)
    names = [f"primals_{i + 1}" for i in range(len(flat))] + \
            [f"tangents_{i + 1}" for i in range(len(tangents))]
    with tp.no_grad():
        tr = _C.trace(joint, tuple(flat) + tuple(tangents), {}, names)
    if getattr(tr, "gates", None):
        raise JointError("the backward reads tensor values in Python (data gates)")
    jgm = tr.graph_module
    jgm = _C.run_frontend_passes(jgm) or jgm
    jnodes = list(jgm.graph.nodes)
    phs = [n for n in jnodes if n.op == "placeholder"]
    primals, tans = phs[:len(flat)], phs[len(flat):]
    jout = next(n for n in jnodes if n.op == "output").args[0]
    fwd_out, bwd_out = jout
    info = _C.min_cut_partition(jgm, primals, tans, _leaves(fwd_out, []),
                                [x for x in bwd_out if _is_node(x)])
    saved = info["saved"]
    primal_ix = {n: i for i, n in enumerate(primals)}
    saved_acts = [n for n in saved if n not in primal_ix]
    saved_prims = [n for n in saved if n in primal_ix]
    # in-place writes of inputs (copy_ into a primal: BatchNorm's running
    # statistics) have no users; the forward program does them
    writes = [n for n in jnodes if n.args and _is_node(n.args[0]) and n.args[0] in primal_ix
              and ((n.op == "call_method" and n.target == "copy_")
                   or (n.op == "call_function"
                       and getattr(n.target, "op_name", None) == "copy_"))]
    fwd_keep = _ancestors(_leaves(fwd_out, []) + saved_acts + writes, set(primals))
    fgm = _copy_graph(jgm, jnodes, fwd_keep, primals, (fwd_out, tuple(saved_acts)))
    stop = set(saved) | set(tans)
    bwd_keep = _ancestors([x for x in bwd_out if _is_node(x)], stop)
    leaked = [n for n in bwd_keep if n in primal_ix and n not in stop]
    if leaked:
        raise JointError(f"the backward reads input {leaked[0].name}, which the cut does not save")
    written = {n.args[0] for n in writes}
    if any(n in written for n in saved_prims):
        # the backward would read the input after the forward wrote it
        raise JointError("the backward reads an input that the forward writes in place")
    binputs = saved_acts + saved_prims + list(tans)
    bgm = _copy_graph(jgm, jnodes, bwd_keep, binputs, tuple(bwd_out))

    ag = CompiledAutograd()
    ag.joint_graph, ag.forward_graph, ag.backward_graph = jgm, fgm, bgm
    ag.diff_pos = diff_pos
    ag.grad_inputs = grad_inputs
    slot = {i: k for k, i in enumerate(got)}
    ag.grad_slots = tuple(slot.get(i) for i in grad_inputs)
    ag.saved_primals = tuple(primal_ix[n] for n in saved_prims)
    ag.n_saved = len(saved_acts)
    ag.tangent_meta = tuple(tmeta)
    ag.saved = [(n.name, tuple(_val(n).shape), _val(n).dtype,
                 0 if n in primal_ix else _nbytes(_val(n))) for n in saved]
    ag.saved_bytes = info["saved_bytes"]
    ag.save_all_bytes = info["save_all_bytes"]
    ag.recomputed = [n.name for n in info["recomputed"]]
    if log is not None:
        log(f"partition of '{name}': saved {len(saved)} values, {ag.saved_bytes} bytes "
            f"(save-all {ag.save_all_bytes} bytes"
            + (f", {ag.saved_bytes / ag.save_all_bytes:.2f}x" if ag.save_all_bytes else "")
            + f"); saved: " + ", ".join(f"{s[0]}{list(s[1])} {s[3]}B" for s in ag.saved)
            + "; recomputed in the backward: " + (", ".join(ag.recomputed) or "none")
            + "; never recomputed: " + (", ".join(n.name for n in info["banned"]) or "none"))
    # the backward takes the saved activations contiguous (the forward
    # program may return a saved view, a slice of a matmul, in another
    # layout than the trace's value): _run_compiled_autograd makes them so
    bex = ([contiguous_saved(_val(n)) for n in saved_acts]
           + [flat[primal_ix[n]] for n in saved_prims] + list(tangents))
    ag.fwd, fb1 = lower(fgm, list(flat))
    ag.bwd, fb2 = lower(bgm, bex)
    if fb1 or fb2:
        raise JointError("the back end could not compile the forward or backward program")
    return ag
