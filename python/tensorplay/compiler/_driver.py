"""The compile driver: misses, compilation, versions, guards' texts, logs.

Dispatch is C (tensorplay._C.CompiledFunction, csrc/guards/dispatch.c):
level 1, and levels 2 and 3 once the lifting plan is known (``_set_plan``),
with each version registered as a ``_C._DispatchEntry`` and each key C
computed mapped to its group of versions (``_register``). C calls back
here on a true miss (``_miss``: level 3 in Python, then compile), for the
data-gate replay of a version (``_gates_hold_index``), to run a version
whose artifact depends on the layout or that runs eagerly
(``_run_index``), and for whole calls it does not take (``_dispatch``:
the first call, calls while tracing, values its key bytes cannot encode
exactly, methods compiled on a class)."""
import re
import sys
import threading
import types
import warnings
import weakref

from tensorplay import _C
from . import _logs, _symbolic
from ._config import config
from ._guards import GATE_TEXT, Guard, diff_sig
from . import _lift
from ._lift import analyze
from ._aliasing import (output_aliasing, output_fix, rebuild_named, unwrap as _unwrap_art,
                        with_named_outputs, with_view_outputs)
from . import _stores
from ._symbolic import ShapeEnv, eval_guards, compile_guards
from . import _backends, _cache

__all__ = ["Version", "Driver", "RecompileLimitError", "ConstraintViolationError", "reset"]

_SCALARS = (type(None), bool, int, float, str)
# the C back end stax_compile lowers with; when _C.stax_backend was replaced
# (a wrapper, a test's broken back end), the driver calls the replacement
_STAX_BACKEND = _C.stax_backend
_compile_lock = threading.RLock()
# compilations per code object, over every CompiledFunction wrapping it
# (closures and lambdas recreated in a loop, methods of many modules)
_code_compiles = weakref.WeakKeyDictionary()
# every live compiled function's driver (tp.compiler.reset)
_drivers = weakref.WeakSet()


def reset():
    """Forget everything compiled so far (like torch._dynamo.reset()): every
    compiled function drops its versions, artifacts, dispatch state (level 1
    disarmed, level 2 fingerprint forgotten), lifting plans, limit warnings
    and stats counters, and the per-code-object accumulated compile counts
    (config.accumulated_cache_size_limit) restart from zero. The next call
    of each compiled function traces and compiles again."""
    with _compile_lock:
        for d in list(_drivers):
            d.reset()
        _code_compiles.clear()



def _hold(args, kwargs, free, T):
    """What level 2 keeps of the last call: the fingerprint names objects by
    identity, so they must not be freed and their ids reused while it is
    armed. Tensors are held weakly (a compiled function must not keep its
    caller's inputs alive after `del x`); a dead one disarms level 2 (C
    checks them)."""
    out = []
    for o in (*args, *kwargs.values(), *free):
        if isinstance(o, T):
            try:
                out.append(weakref.ref(o))
                continue
            except TypeError:
                pass
        out.append(o)
    return tuple(out)


def _strip_samples(gm):
    """Once a version is compiled its graphs keep each node's metadata
    (shape, dtype, strides) but not its sample value: meta['val'] of a
    placeholder is a copy of the input and every other node's is a
    full-size intermediate, all kept alive as long as the version."""
    if gm is None or not hasattr(gm, "graph"):
        return
    T = _tensor_type()
    for n in gm.graph.nodes:
        meta = n.meta
        val = meta.get("val")
        if val is None:
            continue
        meta.pop("val2", None)      # the dynamic-shapes shadow value
        if isinstance(val, T):
            meta["tensor_meta"] = TensorMeta.of(val)
            del meta["val"]
        elif isinstance(val, (tuple, list)) and any(isinstance(x, T) for x in val):
            meta["tensor_meta"] = tuple(TensorMeta.of(x) if isinstance(x, T) else x
                                        for x in val)
            del meta["val"]


class TensorMeta(tuple):
    """(shape, dtype, stride, storage_offset, requires_grad) of a node's
    sample value, kept after compilation instead of the value itself."""
    __slots__ = ()

    @classmethod
    def of(cls, t):
        return cls((tuple(t.shape), t.dtype, tuple(t.stride()), t.storage_offset(),
                    bool(t.requires_grad)))

    shape = property(lambda self: self[0])
    dtype = property(lambda self: self[1])
    stride = property(lambda self: self[2])
    storage_offset = property(lambda self: self[3])
    requires_grad = property(lambda self: self[4])

    def __repr__(self):
        return f"TensorMeta(shape={self.shape}, dtype={self.dtype}, stride={self.stride})"


def _raise_sample_error(graph):
    """A call that failed on the sample (the caller's own values) fails in
    eager too, even when its result is never used (F.silu on int64): the
    compiled call raises that same error, type and message, instead of
    dropping the call with its dead result."""
    for n in graph.nodes:
        err = n.meta.get("sample_error")
        if err is not None and "sample_error_origin" not in n.meta:
            err.add_note(f"(while compiling: node %{n.name}, at {n.meta.get('stack')})")
            raise err

class _BackwardInGraph(Exception):
    """The traced function calls backward() / autograd.grad (args: the
    call's text, its source line)."""


def _check_no_backward(graph):
    for n in graph.nodes:
        if n.op == "call_method" and n.target in ("backward",):
            raise _BackwardInGraph(f"{n.args[0]}.backward()" if n.args else "backward()",
                                   n.meta.get("stack") or "?")
        if n.op == "call_function":
            t = n.target
            mod = getattr(t, "__module__", "") or ""
            if getattr(t, "__name__", "") in ("backward", "grad") and "autograd" in mod:
                raise _BackwardInGraph(f"tensorplay.autograd.{t.__name__}()",
                                       n.meta.get("stack") or "?")


class RecompileLimitError(RuntimeError):
    """A compiled function passed cache_size_limit or
    accumulated_cache_size_limit under strict_native=True."""


class ConstraintViolationError(RuntimeError):
    """A dimension marked with tp.compiler.mark_dynamic that the function
    specializes (a shape guard that fails for some of the sizes >= 2 the
    mark asks for, e.g. ``s0 == 4``): torch's ConstraintViolationError."""


def _tensor_type():
    return _C.Tensor


def _grad_mode():
    return _C._guard_grad_mode()


def _default_dtype():
    return _C._guard_default_dtype()


def _flatten(v, path, flat, paths, T):
    if isinstance(v, T):
        flat.append(v)
        paths.append(path)
    elif isinstance(v, (tuple, list)):
        for i, x in enumerate(v):
            _flatten(x, f"{path}[1][{i}]", flat, paths, T)
    elif isinstance(v, dict):
        for k, x in v.items():
            _flatten(x, f"{path}[1][{k!r}]", flat, paths, T)


def _layout(flat):
    sig = _C._guard_signature
    return tuple(sig(t, False) for t in flat)


def _run_replay(replay, flat, fork=False):
    """Run a guard replay slice on the call's tensors. fork: the slice draws
    random numbers (found when the version was built): run it on a fork of
    the default generator, so a gate on a random draw (`if tp.rand(()) >
    0.5`) sees the very numbers the artifact then draws and the caller's
    stream moves only once, as in the eager call. (Grad mode and the
    generator are process-wide: they are left alone otherwise, so threads
    calling compiled functions do not see them change.)"""
    if not fork:
        out = replay(*flat)
    else:
        from tensorplay import random as _random
        st = _random.get_rng_state()
        try:
            out = replay(*flat)
        finally:
            _random.set_rng_state(st)
    return out if isinstance(out, (tuple, list)) else (out,)


def _apply_detach_masks(out, masks, flat):
    """Outputs the compiled program marked requires_grad where eager's do
    not (a detach / no_grad block on their way): detached views."""
    rg = 0
    for i, t in enumerate(flat):
        if t.requires_grad:
            rg |= 1 << i
    if rg == 0:
        return out

    def fix(o, m):
        if isinstance(m, (tuple, list)) and isinstance(o, (tuple, list)) and len(o) == len(m):
            return type(o)(fix(x, mm) for x, mm in zip(o, m))
        if isinstance(m, dict) and isinstance(o, dict):
            return {kk: fix(x, m.get(kk)) for kk, x in o.items()}
        if isinstance(m, int) and (m & rg) == 0 and getattr(o, "requires_grad", False):
            return o.detach()
        return o
    return fix(out, masks)


class _Call:
    """The parts of one call's key that the slow path computes."""
    __slots__ = ("args", "kwargs", "free", "sig_args", "sig_kwargs", "sig_free", "effects_before_error",
                 "rho", "dtype", "flat", "paths", "gkey", "alias", "effects", "stores",
                 "n_extras", "unsafe_store", "lost_store", "seeds", "symenv", "dyn", "effect",
                 "_static", "ver", "alias_spec", "out_named")

    def sigs(self):
        """sigma of the call as keyed (a call rekeyed for a function that
        went dynamic gets it from its compile, stax_compile's rekey; a
        reader before that, the recompile log, computes it here)."""
        if self.sig_args is None:
            return _C._guard_call_key(tuple(self.args), self.kwargs, tuple(self.free),
                                      self.effect, self.dyn, self.flat)[:3]
        return self.sig_args, self.sig_kwargs, self.sig_free

    def static_sigs(self):
        """sigma of the call in its static form (sizes and strides), for the
        versions compiled before automatic dynamic keyed by rank."""
        if not getattr(self, "dyn", False):
            return self.sig_args, self.sig_kwargs, self.sig_free
        st = getattr(self, "_static", None)
        if st is None:
            st = self._static = _C._guard_call_key(tuple(self.args), self.kwargs, tuple(self.free),
                                                   self.effect, False, self.flat)[:3]
        return st


def _failed_condition(g):
    """A failed guard as the condition that failed; the gate guard names the
    traced outcomes and this call's (`x == 4` reads the same way)."""
    if g.path == "gates":
        return (f"control-flow gate outcomes == {g.expected!r} "
                f"(the traced branch; this call: {g.actual!r})")
    return str(g)


class Version:
    """One specialization version: its key, guards, graphs and artifact."""

    def __init__(self, index, call, gm, artifact, ver, eager_fallback, free_paths, dynamic,
                 symenv=None):
        """ver: the key, guards and gate replay _C.stax_compile gave the
        version (csrc/guards/version.c)."""
        self.index = index
        self.graph_module = gm
        self.artifact = artifact
        self.out_named = None       # TraceResult.output_named, set by _build
        # dynamic mode over a back end whose artifacts are fixed-shape: one
        # artifact per concrete layout inside this version (same trace/graph)
        self.shape_polymorphic = (not dynamic or _unwrap_art(artifact) is gm
                                  or bool(getattr(artifact, "dynamic", False)))
        self.artifacts = {}
        if not self.shape_polymorphic:
            self.artifacts[_layout(call.flat)] = artifact
        self.replay = ver["replay"]
        self.replay_broken = ver.get("replay_got") is not None
        self.replay_copies = ver["replay_copies"]
        self.replay_random = ver["replay_random"]
        self.gate_kinds = ver["gate_kinds"]
        self.gates = ver["gates"]
        self.shape_reads = ver["shape_reads"]     # [(flat index, dim, size, path)]
        # dynamic shapes: the shape guards (relations over the symbols s<k>,
        # each read from (flat index, dim) of the call) and their texts
        self.sym_guards = tuple(symenv.guards) if symenv is not None else ()
        self.sym_sources = symenv.symbol_sources() if symenv is not None else ()
        self.sym_texts = tuple(symenv.guard_texts()) if symenv is not None else ()
        self.sym_names = tuple(f"s{k} = size({call.paths[i]}, {d})"
                               for k, (i, d) in enumerate(self.sym_sources))
        # the same guards as C dispatch checks them (None: in Python)
        self.shape_prog = (compile_guards(self.sym_guards, self.sym_sources)
                           if self.sym_guards else ())
        self.eager_fallback = eager_fallback
        self.dynamic = dynamic
        self.free_paths = free_paths
        self.sig_args, self.sig_kwargs, self.sig_free = call.sig_args, call.sig_kwargs, call.sig_free
        self.rho, self.dtype = call.rho, call.dtype
        self.gkey = call.gkey
        self.alias = call.alias
        self.alias_paths = call.paths
        self.ntensors = len(call.flat)
        self.key = ver["key"]           # (sigma, gamma_s, gamma_g, rho)
        self.guards = [Guard(p, c, e, e) for p, c, e in ver["guards"]]
        self.effects, self.effects_eager = (), False   # set by Driver._build
        self.mutates_inputs = False
        self.stores, self.n_extras = (), 0             # set by Driver._build
        self.seeds = ()
        # per output leaf, the inputs whose requires_grad reaches it past a
        # detach (None: no detach); csrc/guards/version.c
        self.detach_masks = ver["detach_masks"]
        self.autograd = None                           # set by Driver._build
        self.autograd_layouts = None   # dynamic: layout -> CompiledAutograd (or False)

    # -- inspection -------------------------------------------------------
    @property
    def op_graph(self):
        og = getattr(self.artifact, "op_graph", None)
        if og is None and self.graph_module is not None:
            og = self.__dict__.get("_op_graph")
            if og is None:
                og = self._op_graph = _C.make_op_graph(self.graph_module)
        return og

    @property
    def kernels(self):
        return list(getattr(self.artifact, "kernels", None) or [])

    # compiled autograd (a version called with grad mode on and an input
    # that requires grad): the partitioned programs; None otherwise
    @property
    def forward_graph(self):
        return self.autograd.forward_graph if self.autograd is not None else None

    @property
    def backward_graph(self):
        return self.autograd.backward_graph if self.autograd is not None else None

    @property
    def saved(self):
        """[(name, shape, dtype, bytes)]: what the forward saves for the
        backward (the min cut; inputs cost 0 bytes), [] without autograd."""
        return list(self.autograd.saved) if self.autograd is not None else []

    @property
    def fallbacks(self):
        n = getattr(self.artifact, "fallbacks", 0)
        n = n if isinstance(n, int) else 0
        return n + (1 if self.eager_fallback else 0)

    def __repr__(self):
        return (f"<Version {self.index}: {len(self.guards)} guards, "
                f"{len(self.kernels)} kernels{', eager fallback' if self.eager_fallback else ''}>")

    def shape_guards_hold(self, flat):
        return not self.sym_guards or eval_guards(self.sym_guards, self.sym_sources, flat) < 0

    def _failed_shape_guards(self, flat, out):
        """The shape guards (relations) that fail on the call, each naming
        its symbols' sources and this call's values."""
        def sizes(i, d):
            return flat[i].shape[d]
        try:
            syms = [flat[i].shape[d] for i, d in self.sym_sources]
        except (IndexError, AttributeError):
            syms = None
        for (e, exp), t in zip(self.sym_guards, self.sym_texts):
            try:
                ok = syms is not None and bool(e.evaluate(syms, sizes)) == exp
            except Exception:  # noqa: BLE001
                ok = False
            if not ok:
                used = sorted(e.free_symbols())
                where = ", ".join(f"{self.sym_names[k]} = {syms[k] if syms else '?'}" for k in used)
                out.append(Guard("shape", f"{t} ({where})" if where else t, True, False))

    def _alias_guard(self, actual):
        """The aliasing component of sigma: which tensor inputs share a
        storage (f(x, x) traces, and lowers, differently from f(x, y))."""
        if self.alias is None:
            cond = "no two tensor inputs share a storage"
        else:
            pairs = [f"{self.alias_paths[i]} shares {self.alias_paths[j]}'s storage"
                     for i, j in enumerate(self.alias) if i != j]
            cond = "aliasing: " + ", ".join(pairs)
        return Guard("aliasing", cond, self.alias, actual)

    # -- the key components that need the call's data ---------------------
    def gate_outcomes(self, flat):
        if self.replay_broken:
            # the replay slice did not give the traced outcomes on the very
            # inputs it was traced on: it cannot say what the gates read on
            # others (a gate on a tensor written before it: n.add_(1);
            # n.item()), so the version is never reused on its gates (it
            # was, whenever the replay happened to give the traced values)
            return None
        if self.replay_copies:
            flat = _C._trace_stand_ins(flat)
        return _C._guard_gate_values(self.gate_kinds,
                                     _run_replay(self.replay, flat, self.replay_random))

    def matches_data(self, call):
        """gamma_s (dynamic mode) and gamma_g, for a call whose sigma and
        rho already equal this version's."""
        for i, d, s, _ in self.shape_reads:
            if call.flat[i].shape[d] != s:
                return False
        if not self.shape_guards_hold(call.flat):
            return False
        if self.gate_kinds:
            try:
                return self.gate_outcomes(call.flat) == self.gates
            except Exception:  # noqa: BLE001 - a slice that cannot run differs
                return False
        return True

    def failed_guards(self, call):
        """The guards of this version that fail on `call`: exactly the
        components where the two keys differ (Corollary 2.1). Every
        component is evaluated, gamma_g by running this version's replay
        slice on the call's tensors (a slice that cannot run counts as
        differing)."""
        out = []
        if not self.dynamic and getattr(call, "dyn", False):
            c_args, c_kwargs, c_free = call.static_sigs()
        else:
            c_args, c_kwargs, c_free = call.sigs()
        if len(self.sig_args) != len(c_args):
            out.append(Guard("inputs[0]", f"len(inputs[0]) == {len(self.sig_args)}",
                             len(self.sig_args), len(c_args)))
        else:
            for i, (e, a) in enumerate(zip(self.sig_args, c_args)):
                diff_sig(e, a, f"inputs[0][{i}]", out)
        ke, ka = [k for k, _ in self.sig_kwargs], [k for k, _ in c_kwargs]
        if ke != ka:
            out.append(Guard("inputs[1]", f"keys(inputs[1]) == {ke!r}", ke, ka))
        else:
            for (k, e), (_, a) in zip(self.sig_kwargs, c_kwargs):
                diff_sig(e, a, f"inputs[1][{k!r}]", out)
        for p, e, a in zip(self.free_paths, self.sig_free, c_free):
            diff_sig(e, a, p, out)
        if self.alias != call.alias:
            out.append(self._alias_guard(call.alias))
        if self.rho != call.rho:
            out.append(Guard("grad_mode", f"grad_mode == {self.rho}", self.rho, call.rho))
        if self.dtype != call.dtype:
            out.append(Guard("default_dtype", f"default_dtype == {self.dtype}", self.dtype, call.dtype))
        for i, d, s, p in self.shape_reads:
            try:
                act = call.flat[i].shape[d]
            except Exception:  # noqa: BLE001
                act = None
            if act != s:
                out.append(Guard(f"size({p}, {d})", f"size({p}, {d}) == {s}", s, act))
        if self.sym_guards and len(call.flat) == self.ntensors:
            self._failed_shape_guards(call.flat, out)
        if self.gate_kinds:
            try:
                act = self.gate_outcomes(call.flat) if len(call.flat) == self.ntensors else None
            except Exception as e:  # noqa: BLE001
                act = f"replay failed: {type(e).__name__}"
            if act != self.gates:
                out.append(Guard("gates", GATE_TEXT, self.gates, act))
        return out


def _only_diff_require_grad(out, diff, given):
    """Outputs that eager's autograd does not reach (a detach, a no_grad
    block, a nondiff op on the way) do not require grad: detached aliases
    of the program's outputs. diff: tensor-leaf positions that do."""
    T = _tensor_type()
    k = [0]

    def fix(o):
        if isinstance(o, T):
            i = k[0]
            k[0] += 1
            if i not in diff and o.requires_grad and id(o) not in given:
                return o.detach()
            return o
        if isinstance(o, (tuple, list)):
            return type(o)(fix(x) for x in o)
        if isinstance(o, dict):
            return {kk: fix(x) for kk, x in o.items()}
        return o
    return fix(out)


class _ForwardOnly:
    """The artifact of a version with compiled autograd, called without
    grad: its forward program's outputs (the saved values dropped)."""

    def __init__(self, ag):
        self.autograd = ag

    def __call__(self, *flat):
        out = self.autograd.fwd(*flat)[0]
        fix = getattr(self.autograd, "alias_fix", None)
        return fix(out, flat) if fix is not None else out

    @property
    def kernels(self):
        ag = self.autograd
        return (list(getattr(ag.fwd, "kernels", None) or [])
                + list(getattr(ag.bwd, "kernels", None) or []))

    @property
    def op_graph(self):
        return getattr(self.autograd.fwd, "op_graph", None)

    @property
    def fallbacks(self):
        n = 0
        for a in (self.autograd.fwd, self.autograd.bwd):
            k = getattr(a, "fallbacks", 0)
            n += k if isinstance(k, int) else 0
        return n


class Driver:
    """Python side of one compiled function."""

    def __init__(self, fn, backend, dynamic, strict_native, options, name):
        from ._backends import lookup_backend
        self.fn = fn
        self.backend_name = backend if isinstance(backend, str) else getattr(backend, "__name__", "custom")
        self.backend = lookup_backend(backend)
        # dynamic: None automatic (static until a recompile caused only by
        # sizes), True every input dim symbolic, False always static.
        # self.dynamic: tensors keyed by rank (sigma's dynamic form)
        self._dynamic_arg = dynamic
        self.dynamic = bool(dynamic)
        self._auto_dims = {}   # path -> dims made symbolic by automatic dynamic
        self.strict_native = bool(strict_native)
        self.options = dict(options or {})
        self.name = name or getattr(fn, "__name__", None) or type(fn).__name__
        self.versions = []
        self._groups = {}
        self._plan = None
        co = getattr(fn, "__code__", None)
        self._self_plans = ({} if isinstance(fn, types.FunctionType) and co.co_argcount
                            and co.co_varnames[0] == "self" else None)
        self._cf = None
        self._egroups = {}    # gkey -> [_C._DispatchEntry], parallel to _groups
        self._limit_warned = False
        self._eager_only = None      # why every call runs eagerly (backward() inside)
        self._replay_warned = False
        self.compiles = 0
        self.hits_level2 = 0
        self.hits_level3 = 0
        self.eager_calls = 0
        self._cache_counts = [0, 0, 0]   # cache_hits, cache_misses, backend_compiles
        _drivers.add(self)

    def reset(self):
        """Back to the state of a new compiled function (tp.compiler.reset)."""
        with _compile_lock:
            self.versions = []
            self._groups = {}
            self._egroups = {}
            self._plan = None
            self.dynamic = bool(self._dynamic_arg)
            self._auto_dims = {}
            if self._self_plans is not None:
                self._self_plans = {}
            self._limit_warned = False
            self._eager_only = None
            self._replay_warned = False
            self.compiles = self.hits_level2 = self.hits_level3 = self.eager_calls = 0
            self._cache_counts = [0, 0, 0]
            cf = self._cf() if self._cf is not None else None
            if cf is not None:
                cf._reset()

    def bind(self, cf):
        self._cf = weakref.ref(cf)

    def stats(self, calls=0, hits_level1=0, hits_level2=0, hits_level3=0):
        """Counters; the hits of levels 2/3 taken in C are passed in."""
        return {
            "calls": calls,
            "compiles": self.compiles,
            "versions": len(self.versions),
            "hits_level1": hits_level1,
            "hits_level2": self.hits_level2 + hits_level2,
            "hits_level3": self.hits_level3 + hits_level3,
            "fallbacks": sum(v.fallbacks for v in self.versions) + self.eager_calls,
            "eager_calls": self.eager_calls,
            "artifacts": sum(len(v.artifacts) or 1 for v in self.versions),
            # persistent compile cache (docs/cache.md): kernels found there,
            # kernels not found, kernels the back end compiled
            "cache_hits": self._cache_counts[0],
            "cache_misses": self._cache_counts[1],
            "backend_compiles": self._cache_counts[2],
        }

    # -- the slow path ------------------------------------------------------
    def _plan_now(self, args):
        if self._self_plans is not None and args and _lift._is_module(args[0]):
            ent = self._self_plans.get(id(args[0]))
            if ent is None or ent[0]() is not args[0]:
                with _compile_lock:
                    ent = (weakref.ref(args[0]), analyze(self.fn, self_arg=args[0]))
                    self._self_plans[id(args[0])] = ent
            return ent[1]
        if self._plan is None:
            with _compile_lock:
                if self._plan is None:
                    self._plan = analyze(self.fn)
        return self._plan

    def _code_key(self):
        fn = self.fn
        if _lift._is_module(fn):
            fn = type(fn).forward
        fn = getattr(fn, "__func__", fn)
        return getattr(fn, "__code__", self)

    def _accumulated(self):
        return _code_compiles.get(self._code_key(), 0)

    @staticmethod
    def _needs_autograd(args, kwargs, free):
        T = _tensor_type()
        flat = [x for x in free if isinstance(x, T)]
        _flatten(args, "", flat, [], T)
        _flatten(kwargs, "", flat, [], T)
        return any(x.requires_grad for x in flat)

    def _run_autograd(self, v, flat, args, kwargs, plan, free):
        """Grad mode on and an input or lifted parameter requires grad.
        A version with compiled autograd runs its forward program and gives
        the outputs one grad_fn running the backward program
        (_run_compiled_autograd). Otherwise (a back end other than stax,
        dynamic=True, detach, side effects: Driver._autograd_blocker) the
        compiled forward runs and the outputs' CompiledFunctionBackward
        recomputes the function eagerly from the same inputs (and random
        state) and differentiates that. A version that writes its inputs or
        has side effects cannot be recomputed: the call runs eagerly
        instead. Under strict_native both eager paths raise
        NativeCompileError (docs/autograd.md)."""
        if v.autograd is not None:
            return rebuild_named(self._run_compiled_autograd(v.autograd, flat, args, kwargs),
                                 v.out_named)
        if v.autograd_layouts is not None:
            ag = self._layout_autograd(v, flat, args, kwargs, plan, free)
            if ag is not None:
                return rebuild_named(self._run_compiled_autograd(ag, flat, args, kwargs),
                                     v.out_named)
        if v.effects or v.effects_eager or v.mutates_inputs or v.n_extras:
            if self.strict_native:
                raise _C.NativeCompileError(
                    f"tensorplay.compile: '{self.name}' writes its inputs or has side effects and "
                    "was called with grad mode on and an input that requires grad; its backward "
                    "cannot be compiled, so this call would run eagerly")
            return self._eager(args, kwargs)
        out = self._run(v, flat, args, kwargs, plan, free)
        cf = self._cf() if self._cf is not None else None
        if cf is not None:
            cf._clear_level1()       # every call must come back here
        T = _tensor_type()
        outs = []
        _flatten(out, "", outs, [], T)
        given = {id(x) for x in flat}
        pos = [i for i, o in enumerate(outs)
               if o.requires_grad and o.grad_fn is None and id(o) not in given]
        if not pos:
            return out
        ins = [x for x in flat if x.requires_grad]
        eager = self._eager_backward(args, kwargs, pos, ins)
        name, strict = self.name, self.strict_native

        def backward(*grads):
            if strict:
                raise _C.NativeCompileError(
                    f"tensorplay.compile: the backward of '{name}' would run eagerly (its "
                    "version has no compiled autograd)")
            return eager(*grads)

        _C._autograd_attach([outs[i] for i in pos], ins, backward, "CompiledFunctionBackward")
        return out

    def _autograd_blocker(self, call, tr, gm):
        """Why this version cannot get compiled autograd (None: it can)."""
        if self.backend_name != "stax":
            return f"back end {self.backend_name!r} (compiled autograd lowers with 'stax')"
        mut = getattr(tr, "mutated_inputs", None)
        # (buffers written in place, BatchNorm's running statistics: the
        # forward program writes them; an input that requires grad and is
        # written in place has no compiled backward)
        if mut and any(i >= len(call.flat) or call.flat[i].requires_grad for i in mut):
            return "it writes its inputs in place"
        if call.effects or call.n_extras or call.unsafe_store is not None:
            return "it has side effects outside the graph"
        if call.seeds:
            return "it calls tp.manual_seed"
        return None

    def _autograd_wanted(self, call, tr):
        """Will _build_autograd try to build this version's programs?"""
        return (bool(call.rho) and any(t.requires_grad for t in call.flat)
                and self._autograd_blocker(call, tr, None) is None)

    def _build_autograd(self, call, tr, gm, static=False):
        """The compiled forward + backward of a version called with grad
        mode on and an input that requires grad (compiler/_autograd.py), or
        None: the version then runs its forward compiled and an eager
        recompute backward (strict_native: an error instead)."""
        if not call.rho or not any(t.requires_grad for t in call.flat):
            return None
        from . import _autograd
        why = self._autograd_blocker(call, tr, gm)
        if why is None:
            log = None
            if _logs.enabled("partition"):
                lg = _logs.logger("partition")
                log = lg.info
            try:
                lower = (lambda g, ex: self._lower(g, ex, static=True)) if static else self._lower
                ag = _autograd.build(gm, call.flat, lower, self.name, log)
                # its forward program comes from the joint graph: every
                # output is brought to eager's aliasing after it ran
                spec = getattr(call, "alias_spec", None)
                ag.alias_fix = output_fix(gm, spec, check_all=True)
                # outputs viewing one intermediate: gm also returns it (a
                # hidden output, _aliasing); a create_graph backward
                # recomputes gm itself, which gives its gradient's place
                ag.recompute = gm if spec is not None and spec.hidden else None
                return ag
            except (_C.NativeCompileError, _autograd.NoGradOutputs) as e:
                if isinstance(e, _autograd.NoGradOutputs):
                    return None          # the forward alone: nothing to differentiate
                raise
            except Exception as e:  # noqa: BLE001 - reported below
                why = f"{type(e).__name__}: {e}"
        if self.strict_native and self.backend_name == "stax":
            raise _C.NativeCompileError(
                f"strict_native: the backward of '{self.name}' cannot be compiled ({why}); "
                "it would run eagerly")
        if config.warn_on_fallback and self.backend_name == "stax":
            warnings.warn(f"tensorplay.compile: the backward of '{self.name}' is not compiled "
                          f"({why}); it recomputes the function eagerly", RuntimeWarning,
                          stacklevel=6)
        return None

    def _layout_autograd(self, v, flat, args, kwargs, plan, free):
        """A dynamic version's compiled autograd for this call's layout:
        the joint graph is traced at concrete shapes (its formulas read
        them), so a static retrace per layout, as _artifact does for
        fixed-shape back ends. None: it cannot be built (warned once)."""
        def build(c):
            c.rho = True
            tr, gm, _ = self._trace(c, plan)
            return self._build_autograd(c, tr, gm, static=True) or False
        return self._per_layout(v.autograd_layouts, flat, args, kwargs, free, build) or None

    def _run_compiled_autograd(self, ag, flat, args, kwargs):
        """The forward program, then one grad_fn (CompiledFunctionBackward)
        holding the saved tensors and running the backward program."""
        cf = self._cf() if self._cf is not None else None
        if cf is not None:
            cf._clear_level1()       # every call must come back here
        rg_before = [t.requires_grad for t in flat]
        out, saved = ag.fwd(*flat)
        T = _tensor_type()
        outs = []
        _flatten(out, "", outs, [], T)
        diff = [outs[p] for p in ag.diff_pos]
        if len(ag.diff_pos) != len(outs) and any(o.requires_grad for o in outs):
            out = _only_diff_require_grad(out, set(ag.diff_pos), {id(x) for x in flat})
        ins = [flat[i] for i in ag.grad_inputs]
        held = {id(o) for o in outs}
        from ._autograd import contiguous_saved
        saved = [contiguous_saved(s.detach() if id(s) in held or s.requires_grad else s)
                 for s in saved]
        saved += [flat[i].detach() for i in ag.saved_primals]
        gm = getattr(ag, "recompute", None)
        eager = self._eager_backward(args, kwargs, range(len(outs)), ins,
                                     None if gm is None else (lambda: gm(*flat)))
        strict, name = self.strict_native, self.name
        tmeta, slots, bwd = ag.tangent_meta, ag.grad_slots, ag.bwd
        diff_pos = ag.diff_pos

        def backward(saved, *grads):
            import tensorplay as _tp
            if _tp.is_grad_enabled():
                # create_graph=True: the compiled backward is not itself
                # differentiable; eager recompute gives the graph
                if strict:
                    raise _C.NativeCompileError(
                        f"strict_native: backward(create_graph=True) through compiled '{name}' "
                        "runs its backward eagerly (the compiled backward is not differentiable)")
                full = [None] * len(outs)
                for p, g in zip(diff_pos, grads):
                    full[p] = g
                return eager(*full)
            gs = [(_tp.zeros(s, dtype=d) if g is None else g.contiguous())
                  for (s, d), g in zip(tmeta, grads)]
            res = bwd(*saved, *gs)
            return [None if k is None else res[k] for k in slots]

        _C._autograd_attach(diff, ins, backward, "CompiledFunctionBackward", saved)
        fix = getattr(ag, "alias_fix", None)
        return fix(out, flat, rg_before) if fix is not None else out

    def _eager_backward(self, args, kwargs, pos, ins, recompute=None):
        """backward(*grads of outputs pos) that recomputes the function
        eagerly from the same inputs and random state and differentiates
        that (create_graph=True, versions without compiled autograd).
        recompute: () -> the outputs, instead of the function (the graph,
        when its outputs hold hidden intermediates)."""
        from tensorplay import random as _random
        rng = _random.get_rng_state()
        versions = [x._version for x in ins]
        fn, name = self._eager_fn(), self.name
        pos = list(pos)
        T = _tensor_type()

        def backward(*grads):
            for x, ver in zip(ins, versions):
                if x._version != ver:
                    raise RuntimeError(
                        "one of the variables needed for gradient computation has been "
                        f"modified by an inplace operation: an input of compiled '{name}' is at "
                        f"version {x._version}; expected version {ver} instead.")
            import tensorplay as _tp
            create = _tp.is_grad_enabled()
            now = _random.get_rng_state()
            _random.set_rng_state(rng)
            try:
                with _tp.enable_grad():
                    eo = fn(*args, **kwargs) if recompute is None else recompute()
            finally:
                _random.set_rng_state(now)
            eflat = []
            _flatten(eo, "", eflat, [], T)
            pairs = [(eflat[i], g) for i, g in zip(pos, grads)
                     if g is not None and eflat[i].requires_grad]
            if not pairs:
                return [None] * len(ins)
            return _tp.autograd.grad([e for e, _ in pairs], ins, [g for _, g in pairs],
                                     allow_unused=True, create_graph=create)
        return backward

    def _fn_line(self):
        fn = self.fn
        if _lift._is_module(fn):
            fn = type(fn).forward
        co = getattr(getattr(fn, "__func__", fn), "__code__", None)
        return f"{co.co_filename}:{co.co_firstlineno} in {co.co_name}" if co else "<unknown>"

    def _eager_fn(self):
        """What runs the function eagerly: a module's forward (its hooks
        run around the compiled call, in Module.__call__, and a module
        compiled in place would come back here through __call__)."""
        fn = self.fn
        return fn.forward if _lift._is_module(fn) else fn

    def _assign_line(self, where):
        """The source line of the function's assignment to `where` (a path
        of _lift._lost_store: globals()['g'], the closure variable 't',
        self.t): its STORE_GLOBAL / STORE_DEREF / STORE_ATTR of that name;
        else the function's first line."""
        import dis
        import re
        fn = self.fn
        if _lift._is_module(fn):
            fn = type(fn).forward
        co = getattr(getattr(fn, "__func__", fn), "__code__", None)
        m = re.search(r"(?:\['([^']*)'\]|'([^']*)'|\.(\w+))$", where)
        if co is None or m is None:
            return self._fn_line()
        name = next(g for g in m.groups() if g is not None)
        ops = {"STORE_GLOBAL", "STORE_DEREF", "STORE_ATTR", "STORE_NAME"}
        for x in dis.get_instructions(co):
            if x.opname in ops and x.argval == name and x.positions.lineno:
                import linecache
                src = linecache.getline(co.co_filename, x.positions.lineno).strip()
                return f"{co.co_filename}:{x.positions.lineno} in {co.co_name}: {src}"
        return self._fn_line()

    def _store_line(self, where):
        """The source line of the store that left a traced tensor at `where`
        (a path as _stores.find_proxy writes it: globals['d']['k'],
        self.cache.x): the function's STORE_SUBSCR / STORE_ATTR whose
        container is loaded by the path's second-to-last name; else the
        function's first line."""
        import dis
        import re
        fn = self.fn
        if _lift._is_module(fn):
            fn = type(fn).forward
        co = getattr(getattr(fn, "__func__", fn), "__code__", None)
        parts = re.findall(r"\[('(?:[^'\\]|\\.)*'|[^\]]*)\]|\.(\w+)", where)
        names = [(a[1:-1] if a.startswith("'") else a) if a else b for a, b in parts]
        if co is None or len(names) < 1:
            return self._fn_line()
        last = names[-1]
        owner = names[-2] if len(names) >= 2 else None
        attr = where.endswith("." + last)
        ins = list(dis.get_instructions(co))
        for i, x in enumerate(ins):
            if attr and x.opname == "STORE_ATTR" and x.argval == last:
                prev = ins[i - 1] if i else None
                if owner is None or prev is None or prev.argval == owner or "self" == prev.argval:
                    return f"{co.co_filename}:{x.positions.lineno} in {co.co_name}"
            if not attr and x.opname == "STORE_SUBSCR":
                near = [y.argval for y in ins[max(0, i - 3):i]]
                if owner in near:
                    return f"{co.co_filename}:{x.positions.lineno} in {co.co_name}"
        return self._fn_line()

    def _eager(self, args, kwargs):
        self.eager_calls += 1
        return self._eager_fn()(*args, **kwargs)

    def _dispatch(self, *args, **kwargs):
        """A whole call in Python (those C dispatch does not take)."""
        if _C.is_tracing():
            # called from inside another function being traced: inline it
            return self._eager_fn()(*args, **kwargs)
        from tensorplay import amp as _amp
        if _amp.autocast_active():
            # compiled programs have no autocast casts: eager runs them
            msg = (f"tensorplay.compile: '{self.name}' was called inside an enabled "
                   "tp.autocast region; its compiled programs do not cast, so the call runs "
                   "eagerly")
            if self.strict_native:
                raise _C.NativeCompileError("strict_native: " + msg)
            if config.warn_on_fallback and not getattr(self, "_autocast_warned", False):
                self._autocast_warned = True
                warnings.warn(msg, RuntimeWarning, stacklevel=3)
            return self._eager(args, kwargs)
        plan = self._plan_now(args)
        try:
            free = _C._guard_read_sources(plan.read_tuples())
        except Exception:  # noqa: BLE001 - a name gone: let Python raise
            return self._eager(args, kwargs)
        if kwargs:
            kwargs = dict(sorted(kwargs.items()))
        cf = self._cf() if self._cf is not None else None
        key = sig = None
        if cf is not None and self._self_plans is None:
            # from now on C reads the free variables and does levels 2/3;
            # C keys the call (bytes for its level 3, tuples for the driver's)
            cf._set_plan(plan.read_tuples(), plan.effect_tuple, self.dynamic)
            keyed = cf._key(args, kwargs, free)
            if keyed is not None:
                key, sig = keyed
        rho = _grad_mode()
        need_grad = rho and self._needs_autograd(args, kwargs, free)
        dtype = _default_dtype()
        fp = _C._guard_fingerprint((args, kwargs, free, rho, dtype))
        T = _tensor_type()
        last = cf._get_last() if cf is not None else None
        if last is not None and last[0] == fp and last[1].index < len(self.versions):
            v = self.versions[last[1].index]
            flat = [x for x in free if isinstance(x, T)]
            _flatten(args, "", flat, [], T)
            _flatten(kwargs, "", flat, [], T)
            # the fingerprint covers the arguments' identity and version,
            # not what the gates read beyond them (constants held by
            # reference, random draws): with data gates, replay them
            if not v.gate_kinds or self._gates_hold(v, flat):
                self.hits_level2 += 1
                if need_grad:
                    return self._run_autograd(v, flat, args, kwargs, plan, free)
                return self._run(v, flat, args, kwargs, plan, free)
        call = self._make_call(args, kwargs, free, rho, dtype, plan, T, sig)
        try:
            v = self._resolve(call, plan)
        except Exception:
            return self._eager_after_failed_trace(call, args, kwargs)
        if v is None:
            return self._eager(args, kwargs)
        if cf is not None:
            cf._set_last(fp, v._entry, _hold(args, kwargs, free, _tensor_type()))
            if key is not None:
                cf._register(key, self._egroups[call.gkey])
        if _grad_mode() and self._needs_autograd(args, kwargs, free):
            return self._run_autograd(v, call.flat, args, kwargs, plan, free)
        return self._run(v, call.flat, args, kwargs, plan, free)

    def _miss(self, args, kwargs, free, fp, key, rho, dtype, sig=None):
        """From C: levels 1-3 missed there (kwargs sorted by name; free the
        values C read; fp the call's fingerprint; key the C key bytes, or
        None when the call's values cannot be encoded exactly; rho, dtype
        as keyed; sig the call's key as tuples, keyed in C: sig_args,
        sig_kwargs, sig_free, aliasing, dynamic). Level 3 with the tuple
        keys, else compile. Returns
        (entry, group): C remembers the call for level 2, maps key to the
        version's group and runs it; or (None, result) when the call ran
        eagerly (past a limit)."""
        plan = self._plan_now(args)
        call = self._make_call(args, kwargs, free, rho, dtype, plan, _tensor_type(), sig)
        try:
            v = self._resolve(call, plan)
        except Exception:
            return None, self._eager_after_failed_trace(call, args, kwargs)
        if v is None:
            return None, self._eager(args, kwargs)
        return v._entry, self._egroups[call.gkey]

    def _eager_after_failed_trace(self, call, args, kwargs):
        """Called inside the except block of a failed compile. Eager makes its
        side effects (stores into globals, module attributes) before it raises;
        trace isolation rolled the traced ones back, so when the failed trace
        had recorded any, the call runs eagerly and raises there, after them.
        Otherwise (or when eager returns under strict) the compile's error stands."""
        brk = getattr(sys.exc_info()[1], "_stax_graph_break", None)
        if brk is not None:
            # t.data = traced value on a tensor the trace holds: the
            # function runs eagerly from now on (strict: an error)
            msg = f"tensorplay.compile: '{self.name}' {brk}"
            if self.strict_native:
                raise _C.NativeCompileError("strict_native: " + msg) from None
            if config.warn_on_fallback:
                warnings.warn(msg + "; it runs eagerly", RuntimeWarning, stacklevel=4)
            self._eager_only = msg
            return self._eager(args, kwargs)
        if not getattr(call, "effects_before_error", False):
            raise
        try:
            out = self._eager(args, kwargs)
        except Exception as e:  # noqa: BLE001 - eager's own error, as eager raises it
            raise e from None
        if self.strict_native:
            raise
        return out

    def _resolve(self, call, plan):
        """The version for call: a level-3 hit, else compiled (None: past a
        limit, or a function that runs eagerly: backward() inside)."""
        if self._eager_only is not None:
            return None
        v = self._lookup(call)
        if v is not None:
            self.hits_level3 += 1
            return v
        with _compile_lock:
            if getattr(call, "dyn", False) != self.dynamic:
                # another thread turned the function dynamic after this call
                # was keyed: key it again, or its version would carry a static
                # sigma under a dynamic flag
                self._rekey(call, plan)
            v = self._lookup(call)
            if v is None:
                v = self._compile(call, plan)
        return v

    def _gates_hold_index(self, index, flat):
        """From C: do version `index`'s data gates hold on the call's tensors?"""
        return self._gates_hold(self.versions[index], flat)

    def _run_index(self, index, flat, args, kwargs, free):
        """From C: run version `index` (one whose artifact depends on the
        layout, or that runs eagerly)."""
        return self._run(self.versions[index], flat, args, kwargs, self._plan_now(args), free)

    @staticmethod
    def _gates_hold(v, flat):
        if not v.shape_guards_hold(flat):
            return False
        if not v.gate_kinds:
            return True
        try:
            return v.gate_outcomes(flat) == v.gates
        except Exception:  # noqa: BLE001 - a slice that cannot run differs
            return False

    @staticmethod
    def _per_layout(cache, flat, args, kwargs, free, build):
        """cache[layout of flat], built once (under the compile lock) by
        build(call) for a _Call of these inputs."""
        lay = _layout(flat)
        got = cache.get(lay)
        if got is None:
            with _compile_lock:
                got = cache.get(lay)
                if got is None:
                    c = _Call()
                    c.args, c.kwargs, c.free, c.flat = args, kwargs, free, flat
                    got = cache[lay] = build(c)
        return got

    def _artifact(self, v, flat, args, kwargs, plan, free):
        if v.shape_polymorphic:
            return v.artifact

        def build(c):
            # fixed-shape back ends read sizes from the graph's sample
            # values: retrace for this layout (same key, same guards)
            _, gm, lowered = self._trace(c, plan, lower=True)
            return self._lower(gm, flat, lowered, spec=getattr(c, "alias_spec", None))[0]
        return self._per_layout(v.artifacts, flat, args, kwargs, free, build)

    def _run(self, v, flat, args, kwargs, plan, free):
        if v.effects_eager:
            return self._eager(args, kwargs)
        if not v.n_extras:
            for i, name, a, k in v.effects:     # the traced calls' side effects
                getattr(free[i], name)(*a, **k)
        if v.seeds:
            from tensorplay import random as _random
            for s in v.seeds:
                _random.default_generator.manual_seed(s)
        art = self._artifact(v, flat, args, kwargs, plan, free)
        rerun = False
        try:
            out = art(*flat)
        except (RuntimeError, IndexError) as e:
            # a runtime check failed (integer division by zero, an index out
            # of range): the program undid its writes, the call runs eagerly
            # and raises eager's error after eager's writes (effects made
            # before the program cannot be undone: its own error stands)
            if not getattr(e, "_stax_rerun", False) or (v.effects and not v.n_extras):
                raise
            rerun = True
        if rerun:
            return self._eager(args, kwargs)
        if v.n_extras:
            # traced values stored into Python state: the program's extra
            # outputs, stored where the eager call stores them, in order
            out, extras = out
            for i, name, a, k in v.effects:
                getattr(free[i], name)(*_stores.fill(a, extras), **_stores.fill(k, extras))
            for root, name, t in v.stores:
                if root[0] == "self":
                    obj = args[0] if plan.self_in_args else plan.self_obj
                    for part in (root[1].split(".") if root[1] else ()):
                        obj = getattr(obj, part)
                else:
                    obj = root[1]
                setattr(obj, name, _stores.fill(t, extras))
        if v.detach_masks is not None:
            out = _apply_detach_masks(out, v.detach_masks, flat)
        cf = self._cf() if self._cf is not None else None
        if cf is not None:
            if (not v.gate_kinds and not kwargs and not v.effects and not v.n_extras
                    and v.detach_masks is None and not v.seeds
                    and all(type(a) in _SCALARS or isinstance(a, _tensor_type()) for a in args)
                    and all(not isinstance(x, (list, dict, tuple)) for x in free)):
                cf._set_level1(with_named_outputs(art, v.out_named), tuple(args),
                               plan.tuples(free), tuple(free))
            else:
                cf._clear_level1()
        # (torch.return_types of topk, sort, max(dim)... as eager's)
        return rebuild_named(out, v.out_named)

    def _make_call(self, args, kwargs, free, rho, dtype, plan, T, sig=None):
        c = _Call()
        c.args, c.kwargs, c.free = args, kwargs, free
        c.rho, c.dtype = rho, dtype
        flat, paths = [], []
        for p, x in zip(plan.paths, free):
            if isinstance(x, T):
                flat.append(x)
                paths.append(p)
        for i, a in enumerate(args):
            _flatten(a, f"inputs[0][{i}]", flat, paths, T)
        for k, a in kwargs.items():
            _flatten(a, f"inputs[1][{k!r}]", flat, paths, T)
        c.flat, c.paths = flat, paths
        # an effect-only container (only appended to, never read: _lift):
        # its identity, not its contents
        if sig is not None and sig[4] == self.dynamic:
            c.sig_args, c.sig_kwargs, c.sig_free, c.alias = sig[:4]
        else:
            c.sig_args, c.sig_kwargs, c.sig_free, c.alias = _C._guard_call_key(
                tuple(args), kwargs, tuple(free), plan.effect_tuple, self.dynamic, flat)
        c.gkey = (c.sig_args, c.sig_kwargs, c.sig_free, rho, dtype, c.alias)
        c.dyn, c.effect = self.dynamic, plan.effect_tuple
        return c

    def _lookup(self, call):
        for v in tuple(self._groups.get(call.gkey, ())):
            if v.matches_data(call):
                return v
        return None

    # -- a miss ---------------------------------------------------------------
    def _compile(self, call, plan):
        over = (len(self.versions) >= config.cache_size_limit
                or self._accumulated() >= config.accumulated_cache_size_limit)
        if over:
            if self._limit_warned and not self.strict_native:
                return None
            which = ("cache_size_limit" if len(self.versions) >= config.cache_size_limit
                     else "accumulated_cache_size_limit")
            last = "; ".join(str(g) for g in self.versions[-1].failed_guards(call)) if self.versions else ""
            msg = (f"tensorplay.compile: '{self.name}' hit config.{which} "
                   f"({getattr(config, which)}); last failed guards: {last or '(none)'}")
            if self.strict_native:
                raise RecompileLimitError(msg)
            self._limit_warned = True
            warnings.warn(msg + "; calls that miss run eagerly from now on", RuntimeWarning,
                          stacklevel=4)
            return None
        if self._dynamic_arg is not False and not self.dynamic and any(
                getattr(t, "_tp_dynamic_dims", None) for t in call.flat):
            # tp.compiler.mark_dynamic on an input: keyed by rank from now on
            self._go_dynamic(call, plan)
        if self.versions and self._dynamic_arg is None and config.automatic_dynamic_shapes:
            self._automatic_dynamic(call, plan)
        if self.versions and _logs.enabled("recompiles"):
            # the seed's line (Example 3.2 prints it exactly), then the same guards
            # per version, the gate read as the failed condition
            failed = [(v, v.failed_guards(call)) for v in self.versions]
            log = _logs.logger("recompiles")
            log.info(f"recompiling '{self.name}': "
                     + "; ".join(str(g) for _, gs in failed for g in gs))
            log.info("  failed guards by version: " + "; ".join(
                f"version {v.index}: " + ", ".join(_failed_condition(g) for g in gs)
                for v, gs in failed))
        try:
            v = self._build(call, plan)
        except _BackwardInGraph as e:
            if len(e.args) > 2 and e.args[2] == "custom":
                msg = (f"tensorplay.compile: '{self.name}' calls the autograd.Function "
                       f"{e.args[0]}; its backward is the user's code, which a compiled "
                       "backward (derived from forward's ops) would not call")
            else:
                msg = (f"tensorplay.compile: '{self.name}' calls {e.args[0]} at {e.args[1]}; a "
                       "backward cannot be traced into a compiled program (the compiled backward "
                       "belongs to the grad_fn of the compiled function's outputs). Compile the "
                       "loss function instead and call backward() and the optimizer outside it: "
                       "loss = tp.compile(loss_fn)(x, y); loss.backward(); "
                       "tp.compile(opt.step)() (docs/autograd.md, 'Compiled training')")
            if self.strict_native:
                raise _C.NativeCompileError("strict_native: " + msg) from None
            if config.warn_on_fallback:
                warnings.warn(msg + "; it runs eagerly", RuntimeWarning, stacklevel=5)
            self._eager_only = msg
            return None
        self._check_constraints(call, v)
        v._entry = _C._DispatchEntry(
            v.index, (with_named_outputs(v.artifact, v.out_named)
                      if v.shape_polymorphic and not v.effects_eager
                      and not v.n_extras and not v.seeds and v.detach_masks is None else None),
            tuple((i, d, s) for i, d, s, _ in v.shape_reads),
            bool(v.gate_kinds) or (bool(v.sym_guards) and v.shape_prog is None), v.effects,
            v.shape_prog or ())
        self.versions.append(v)
        self._groups.setdefault(call.gkey, []).append(v)
        self._egroups.setdefault(call.gkey, []).append(v._entry)
        self.compiles += 1
        k = self._code_key()
        _code_compiles[k] = _code_compiles.get(k, 0) + 1
        return v

    def _check_constraints(self, call, v):
        """Raise ConstraintViolationError when a dim the caller marked with
        tp.compiler.mark_dynamic got a guard that some size of its range
        fails (torch: "Constraints violated")."""
        srcs = getattr(v, "sym_sources", None) or ()
        marked = {k for k, (i, d) in enumerate(srcs)
                  if i < len(call.flat)
                  and d in (getattr(call.flat[i], "_tp_dynamic_dims", None) or ())}
        if not marked or not getattr(v, "sym_guards", None):
            return
        paths = call.paths

        def names(i, d):
            return f"size({paths[i]}, {d})" if i < len(paths) else f"size(flat[{i}], {d})"
        bad = _symbolic.constraint_violations(
            v.sym_guards, marked,
            lambda i, d: names(i, d))
        if not bad:
            return
        lines = []
        for k, text, const in bad:
            i, d = srcs[k]
            who = names(i, d)
            text = re.sub(rf"\bs{k}\b", who, text)
            if const is not None:
                lines.append(f"  - You marked {who} as dynamic but your code specialized it to "
                             f"be a constant ({const}). If you're using mark_dynamic, either "
                             f"remove it or leave the dim to automatic dynamic shapes.")
            else:
                lines.append(f"  - Not all values of {who} in the specified range (>= 2) "
                             f"satisfy the generated guard {text}.")
        who = ", ".join(dict.fromkeys(names(*srcs[k]) for k, _, _ in bad))
        raise ConstraintViolationError(f"Constraints violated ({who})! In '{self.name}':\n"
                                       + "\n".join(lines))

    def _dyn_map(self, call):
        """flat index -> the set of its dims traced symbolically: every dim
        of an argument under dynamic=True (parameters and other free tensors
        stay static, as torch's), the dims automatic dynamic marked, those
        of tp.compiler.mark_dynamic, less those of mark_static."""
        out = {}
        for i, (t, p) in enumerate(zip(call.flat, call.paths)):
            dims = set()
            if self._dynamic_arg is True and p.startswith("inputs["):
                dims = set(range(t.ndim))
            dims |= self._auto_dims.get(p, set())
            dims |= set(getattr(t, "_tp_dynamic_dims", None) or ())
            dims -= set(getattr(t, "_tp_static_dims", None) or ())
            if dims:
                out[i] = dims
        return out

    def _automatic_dynamic(self, call, plan):
        """torch's automatic dynamic: when the call differs from a version
        only in sizes (and the strides that follow them) of some tensors,
        or in exact size guards, those dims become symbolic and the
        function is keyed by rank from now on (one more version, then no
        recompiles while the sizes grow)."""
        changed = {}
        for v in self.versions:
            fails = v.failed_guards(call)
            if not fails:
                continue
            dims, ok = {}, True
            for g in fails:
                p = g.path
                if p.startswith("size(") and p.endswith(")"):
                    path, _, d = p[5:-1].rpartition(", ")
                    dims.setdefault(path, set()).add(int(d))
                elif p.endswith("]") and "[2][" in p and p.rsplit("[2][", 1)[1][:-1].isdigit():
                    path, d = p.rsplit("[2][", 1)
                    dims.setdefault(path, set()).add(int(d[:-1]))
                elif p.endswith("[6]"):
                    continue        # strides of a resized tensor
                else:
                    ok = False
                    break
            if ok and dims:
                for path, ds in dims.items():
                    changed.setdefault(path, set()).update(ds)
        if not changed or all(ds <= self._auto_dims.get(p, set()) for p, ds in changed.items()):
            return
        for path, ds in changed.items():
            self._auto_dims.setdefault(path, set()).update(ds)
        if not self.dynamic:
            self._go_dynamic(call, plan)
        if _logs.enabled("dynamic"):
            _logs.logger("dynamic").info(
                f"'{self.name}': automatic dynamic shapes: " + ", ".join(
                    f"size({p}, {d})" for p, ds in changed.items() for d in sorted(ds))
                + " symbolic from now on")

    def _go_dynamic(self, call, plan):
        """Key tensors by rank from now on (C dispatch too) and key `call` so."""
        self.dynamic = True
        cf = self._cf() if self._cf is not None else None
        if cf is not None and self._self_plans is None:
            cf._set_plan(plan.read_tuples(), plan.effect_tuple, True)
        self._rekey(call, plan)

    def _rekey(self, call, plan):
        """call's sigma again, in the dynamic form (the same _Call object):
        its compile computes it in C (stax_compile's rekey) and _trace
        stores it; until then the call matches no version."""
        call.sig_args = call.sig_kwargs = call.sig_free = call.gkey = None
        call.dyn, call.effect = self.dynamic, plan.effect_tuple

    def _trace(self, call, plan, lower=False, prepare=None, key=False):
        """lift -> one _C.stax_compile (csrc/guards/driver.c): trace, this
        driver's bookkeeping of the Python state the trace touched, the
        front-end passes and, when lower and the back end is Stax's, the
        lowering. prepare(tr) -> bool (may skip lowering) runs after the
        bookkeeping. Returns (TraceResult, GraphModule after the passes,
        lowered): lowered is (artifact, error, cache counter deltas) when C
        lowered, else None (another back end: _lower calls it)."""
        wrapper, free_names = plan.make_wrapper(call.free)
        target = plan.target
        names = list(free_names) if target is not None else None
        if target is not None:
            co = target.__code__
            params = list(co.co_varnames[:co.co_argcount])
            if plan.self_obj is not None and not plan.self_in_args:
                params = params[1:]
            for i in range(len(call.args)):
                names.append(params[i] if i < len(params) else f"arg{i}")
        lifted = tuple(x for x in call.free if isinstance(x, _tensor_type()))
        from tensorplay.nn import modules as _nnm
        from tensorplay import random as _random
        slog = _stores.StoreLog()
        prev, _nnm._store_log = _nnm._store_log, slog
        seeds = _random._trace_seeds
        sprev = getattr(seeds, "log", None), getattr(seeds, "state0", None)
        seeds.log = []      # stax_compile sets seeds.state0
        from tensorplay.autograd import function as _agf
        fprev = getattr(_agf._trace_log, "log", None)
        _agf._trace_log.log = []
        env = None
        if self.dynamic and getattr(call, "paths", None) is not None:
            dyn = self._dyn_map(call)
            env = ShapeEnv(dyn, call.paths) if dyn else None
        call.symenv = env
        tracing = [True]

        def restore():
            # the trace is over: Python state back as the call found it
            if tracing[0]:
                tracing[0] = False
                _nnm._store_log = prev
                slog.undo()
                call.seeds = seeds.log
                seeds.log, seeds.state0 = sprev
                _agf._trace_log.log = fprev

        def after_trace(tr):
            try:
                custom = _agf._trace_log.log
                if custom:
                    raise _BackwardInGraph(f"{custom[0]}.apply() with an input requiring grad",
                                           None, "custom")
                _check_no_backward(tr.graph_module.graph)
                _raise_sample_error(tr.graph_module.graph)
            except BaseException:
                # (an eager write the journal undid: eager makes it, then raises)
                call.effects_before_error = bool(slog.entries or getattr(wrapper, "effects", None)
                                                 or getattr(tr, "unrecorded_writes", None))
                raise
            finally:
                restore()
            call.effects = getattr(wrapper, "effects", None)
            call.out_named = getattr(tr, "output_named", None)
            call.lost_store = getattr(wrapper, "lost_store", None)
            self._collect_stores(call, plan, tr, slog)
            # eager's aliasing of the outputs, read before the passes
            # change which value each output is (_aliasing)
            # (an intermediate two outputs view becomes a hidden output
            # when no autograd reads the output structure)
            call.alias_spec = output_aliasing(
                tr.graph_module, hidden_ok=True)
            return prepare(tr) if prepare is not None else True

        passes_log = None
        if _logs.enabled("passes"):
            lg = _logs.logger("passes")
            passes_log = lambda line: lg.info(f"'{self.name}': {line}")  # noqa: E731
        opts = None
        if lower and self.backend is _backends.stax and _C.stax_backend is _STAX_BACKEND:
            _cache.sync()
            opts = self._backend_options()
        # key: the call's key components; stax_compile keys the new version
        # (sigma, gamma_s, gamma_g after its replay check, rho) and writes its
        # guards (csrc/guards/version.c)
        # (a call rekeyed for a function that went dynamic: its sigma and
        # aliasing are computed there, rekey)
        ckey = rekey = None
        stale = key and call.sig_args is None
        if key:
            sig = ((), (), ()) if stale else (call.sig_args, call.sig_kwargs, call.sig_free)
            ckey = sig + (call.alias, call.rho, call.dtype, tuple(call.paths), tuple(plan.paths),
                          self.dynamic)
        if stale:
            rekey = (tuple(call.args), call.kwargs, tuple(call.free), plan.effect_tuple)
        try:
            got = _C.stax_compile(
                wrapper, lifted + tuple(call.args), dict(call.kwargs), names, list(call.flat),
                after_trace, passes_log, opts,
                lazy=config.lazy_samples and self.backend_name in ("stax", "eager"),
                symenv=env, key=ckey, seeds=seeds, rekey=rekey)
            tr, gm, art, err, counts = got[:5]
            call.ver = got[5] if key else None
            if stale:
                sigma = call.ver["key"][0]
                call.sig_args, call.sig_kwargs, call.sig_free = sigma[:3]
                call.alias = sigma[3] if len(sigma) > 3 else None
                call.gkey = (call.sig_args, call.sig_kwargs, call.sig_free, call.rho, call.dtype,
                             call.alias)
        except BaseException:
            if tracing[0]:      # the trace itself failed
                call.effects_before_error = bool(
                    slog.entries or getattr(wrapper, "effects", None)
                    or getattr(sys.exc_info()[1], "_stax_unrecorded_writes", False))
            raise
        finally:
            restore()
        if _logs.enabled("graph"):
            _logs.logger("graph").info(f"graph of '{self.name}' (version {len(self.versions)}):\n{gm.graph}")
        lowered = (art, err, counts) if art is not None or err is not None else None
        return tr, gm, lowered

    def _collect_stores(self, call, plan, tr, slog):
        """Traced values stored into Python state (_stores): the effect
        log's and the modules' stores become templates over extra outputs of
        the graph; a traced value left anywhere else makes the version run
        eagerly (strict: NativeCompileError)."""
        extras = []
        eff = call.effects
        if eff is not None:
            new = _lift._EffectLog((i, name, _stores.extract(a, extras),
                                    _stores.extract(k, extras)) for i, name, a, k in eff)
            new.replayable = eff.replayable
            new.where, new.call = eff.where, eff.call
            call.effects = new
        stores = []
        self_obj = plan.self_obj
        quals = {}
        if self_obj is not None and _lift._is_module(self_obj):
            try:
                quals = {id(m): q for q, m in self_obj.named_modules()}
            except Exception:  # noqa: BLE001
                quals = {}
        for mod, name, value in slog.entries:
            q = quals.get(id(mod))
            root = ("self", q) if q is not None else ("obj", mod)
            stores.append((root, name, _stores.extract(value, extras)))
        call.stores = tuple(stores)
        call.n_extras = len(extras)
        roots = [(p, v) for p, v, s in zip(plan.paths, call.free, plan.sources)
                 if not s.effect_only and not isinstance(v, (_tensor_type(),) + _SCALARS)]
        if self_obj is not None:
            roots.append(("self", self_obj))
        call.unsafe_store = _stores.find_proxy(roots)
        if extras:
            gm = tr.graph_module
            nodes = list(gm.graph.nodes)
            outn = [n for n in nodes if n.op == "output"][0]
            orig = outn.args[0] if outn.args else None
            live = set(nodes)
            # a creation the trace turned into a constant (tp.ones(3)
            # stored): its proxy's node left the graph for a get_attr
            # holding the same value
            consts = {id(n.meta.get("val")): n for n in nodes if n.op == "get_attr"}

            def node_of(p):
                n = p.node
                return n if n in live else consts.get(id(n.meta.get("val")), n)
            outn.args = ((orig, tuple(node_of(p) for p in extras)),)
            gm.recompile()

    def _backend_options(self, static=False):
        opts = dict(self.options)
        opts["strict_native"] = self.strict_native
        if self.dynamic and self.backend_name == "stax" and not static:
            # one artifact per version serves every size of the class: its
            # kernels take sizes, strides and numel constants as arguments
            opts.setdefault("dynamic", True)
        return opts

    def _lower(self, gm, flat, lowered=None, static=False, spec=None):
        """backend(gm, example_inputs, **options) -> (artifact, eager_fallback);
        lowered: what _C.stax_compile's lowering gave, (artifact, error,
        cache counter deltas), or None to call the back end here. spec:
        the outputs' aliasing as traced (_aliasing.output_aliasing); the
        artifact (or gm, run eagerly) is wrapped to follow it."""
        before = _C._cache_counters() if lowered is None else None
        try:
            if lowered is None:
                art = self.backend(gm, list(flat), **self._backend_options(static))
            elif lowered[1] is not None:
                raise lowered[1]
            else:
                art = lowered[0]
        except Exception as e:  # noqa: BLE001
            if self.strict_native:
                if isinstance(e, _C.NativeCompileError) or self.backend_name != "stax":
                    raise
                # a failure of the native back end itself (LLVM, NVRTC):
                # strict's error, carrying the back end's log
                raise _C.NativeCompileError(
                    f"strict_native: back end {self.backend_name!r} failed on '{self.name}': "
                    f"{type(e).__name__}: {e}") from e
            if config.warn_on_fallback:
                warnings.warn(f"tensorplay.compile: back end {self.backend_name!r} failed on "
                              f"'{self.name}' ({type(e).__name__}: {e}); this version runs eagerly",
                              RuntimeWarning, stacklevel=6)
            return with_view_outputs(gm, gm, spec), True
        finally:
            if lowered is None:
                after = _C._cache_counters()
                lowered = (None, None, tuple(a - b for a, b in zip(after, before)))
            for i in range(3):
                self._cache_counts[i] += lowered[2][i]
        cg = getattr(self, "cuda_graphs", None)
        if cg is not None and isinstance(art, _C.CompiledProgram):
            art.cuda_graphs = cg       # tp.compile(mode=...): its own CUDA graph mode
        if not callable(art):
            raise TypeError(f"tensorplay.compile: back end {self.backend_name!r} returned "
                            f"{type(art).__name__!s}, not a callable; a back end is "
                            "backend(gm, example_inputs, **options) -> callable")
        return with_view_outputs(gm, art, spec), False

    def _aliased_writes(self, gm, tr, spec=None):
        """Tensor inputs that share a storage, one of them written in place
        (f(x, x) with `a.add_(1); return b * 2`): back ends lower each input
        as its own buffer, so a read through one alias would miss a write
        through another. This version runs its GraphModule eagerly (exact
        eager semantics); under strict_native it is an error."""
        msg = (f"tensorplay.compile: '{self.name}' was called with tensor inputs that share a "
               f"storage and writes input(s) {list(tr.mutated_inputs)} in place; back end "
               f"{self.backend_name!r} cannot lower writes through aliased inputs")
        if self.strict_native:
            raise _C.NativeCompileError(msg)
        if config.warn_on_fallback:
            warnings.warn(msg + "; this version runs eagerly", RuntimeWarning, stacklevel=6)
        return with_view_outputs(gm, gm, spec), True

    def _build(self, call, plan):
        def aliased(tr):
            # tensor inputs sharing a storage, one written in place: not
            # lowered (_aliased_writes)
            return (call.alias is not None and getattr(tr, "mutated_inputs", None)
                    and self.backend_name != "eager")

        def lowers(tr):
            # a version with compiled autograd lowers its forward and
            # backward programs instead (_build_autograd)
            return not aliased(tr) and not (not self.dynamic and self._autograd_wanted(call, tr))

        tr, gm, lowered = self._trace(call, plan, lower=True, prepare=lowers, key=True)
        ver = call.ver
        replay = ver["replay"]
        if ver["replay_got"] is not None and not self._replay_warned:
            # the replay slice does not reproduce the traced gate outcomes on
            # the very inputs it was traced on: this version's gate guard can
            # never hold (every later call recompiles): say so once
            self._replay_warned = True
            warnings.warn(f"tensorplay.compile: the guard replay subgraph of '{self.name}' gives "
                          f"{ver['replay_got']!r} on the traced inputs, not the traced gate outcomes "
                          f"{ver['gates']!r}; versions of this function cannot be reused on data gates",
                          RuntimeWarning, stacklevel=5)
        ag = None
        if aliased(tr):
            artifact, eager_fallback = self._aliased_writes(gm, tr, getattr(call, "alias_spec", None))
        else:
            # a dynamic version's backward: per concrete layout, at its
            # first call with grad (_layout_autograd)
            ag = self._build_autograd(call, tr, gm) if not self.dynamic else None
            if ag is not None:
                artifact, eager_fallback = _ForwardOnly(ag), False
            else:
                artifact, eager_fallback = self._lower(gm, call.flat, lowered,
                                                            spec=getattr(call, "alias_spec", None))
        v = Version(len(self.versions), call, gm, artifact, ver, eager_fallback, plan.paths,
                    self.dynamic, getattr(call, "symenv", None))
        v.out_named = getattr(call, "out_named", None)
        spec = getattr(call, "alias_spec", None)
        if spec is not None and spec.hidden and isinstance(v.detach_masks, (tuple, list)):
            v.detach_masks = v.detach_masks[0]      # the outputs', not the hidden bases
        v.autograd = ag
        if (self.dynamic and call.rho and any(t.requires_grad for t in call.flat)
                and self._autograd_blocker(call, tr, gm) is None):
            v.autograd_layouts = {}
        if ag is not None and self.backend_name in ("stax", "eager"):
            for g in (ag.joint_graph, ag.forward_graph, ag.backward_graph):
                _strip_samples(g)
        # calls on effect-only containers, replayed by every call of v; a
        # call with a non-constant argument (a traced tensor): v runs eagerly
        if self.backend_name in ("stax", "eager"):
            # (a user back end was handed gm and may keep using its samples)
            _strip_samples(gm)
            for g in (getattr(artifact, "graph_module", None),
                      getattr(artifact, "op_graph", None),
                      replay if hasattr(replay, "graph") else None):
                if g is not gm:
                    _strip_samples(g)
        eff = getattr(call, "effects", None)
        v.effects = tuple(eff or ())
        v.mutates_inputs = bool(getattr(tr, "mutated_inputs", None))
        v.effects_eager = eff is not None and not eff.replayable
        if v.effects_eager and self.strict_native:
            raise _C.NativeCompileError(
                f"strict_native: '{self.name}' passes a value that cannot be replayed to "
                f"{eff.call or 'a container outside the function'}(...) at "
                f"{eff.where or self._fn_line()}; that call cannot be compiled (the function "
                "would run eagerly on every call)")
        v.stores, v.n_extras = call.stores, call.n_extras
        def run_eagerly(msg, strict_msg=None):
            # a version whose program cannot make what eager makes: strict
            # refuses; otherwise every call runs eagerly (torch.compile's
            # graph break), with a warning
            if self.strict_native:
                raise _C.NativeCompileError(strict_msg if strict_msg is not None
                                            else "strict_native: " + msg)
            if config.warn_on_fallback:
                warnings.warn(msg + "; this version runs eagerly", RuntimeWarning, stacklevel=6)
            v.effects_eager = True

        written = getattr(tr, "unrecorded_writes", ())
        if written:
            # an eager in-place op on a tensor the function reaches without
            # lifting it (not an argument, global, closure value or module
            # attribute of its own code): no node of the graph replays it,
            # so a compiled call would lose the write. The trace undid it
            # (its write journal); every call runs eagerly, as torch.compile
            # does at a graph break, and strict_native refuses
            msg = (f"tensorplay.compile: '{self.name}' writes {written[0]} in place outside the "
                   "graph (a tensor it reaches through a path the compiler does not lift)")
            if getattr(tr, "writes_unrestorable", False):
                msg += "; the trace could not undo that write"
            run_eagerly(msg)
        breaks = getattr(tr, "graph_breaks", ())
        if breaks and not v.effects_eager:
            # a statement the program cannot replay (t.data = v of an
            # input): every call runs eagerly, as torch.compile's graph break
            msg = f"tensorplay.compile: '{self.name}' {breaks[0]}"
            run_eagerly(msg)
        stale = getattr(tr, "stale_reads", ())
        if stale and not v.effects_eager:
            # an eager op read a tensor held as a constant (reached through
            # a path the compiler does not lift) that a recorded in-place op
            # of the graph writes: the program makes the write on every
            # call, but what the eager op computed from the tensor is a
            # constant of the trace, stale from the next call on. Eager
            # reads the new value: the version runs eagerly (strict refuses)
            msg = (f"tensorplay.compile: '{self.name}' reads {stale[0]} with an op outside the "
                   "graph, and the graph writes that tensor in place (a tensor it reaches "
                   "through a path the compiler does not lift: the value read would be the "
                   "trace's on every call)")
            run_eagerly(msg)
        grad_at = getattr(tr, "grad_enabled_at", None)
        if grad_at is not None:
            # `with tp.enable_grad():` inside a call made under no_grad:
            # eager's values made there require grad and carry a graph,
            # which a version compiled for grad off does not build
            msg = (f"tensorplay.compile: '{self.name}' turns grad mode on inside a call made "
                   "with grad off and computes a value that requires grad")
            run_eagerly(msg, f"strict_native: {msg}; at {grad_at}")
        lost = getattr(call, "lost_store", None)
        if lost is not None:
            # `global g; g = ...` (or nonlocal, or obj.t = ...) where the
            # lifting put a stand-in: the trace's store went to its copy;
            # every call runs eagerly and makes it, as torch.compile does
            # at a graph break
            msg = (f"tensorplay.compile: '{self.name}' assigns {lost}, a place the compiler "
                   "swaps its lifted values into while tracing; the compiled program cannot "
                   "make that assignment")
            run_eagerly(msg, "strict_native: " + msg + f"; at {self._assign_line(lost)}")
        if call.unsafe_store is not None:
            where = call.unsafe_store
            msg = (f"tensorplay.compile: '{self.name}' stores a traced tensor into {where}, "
                   "which cannot be replayed after the compiled program (the function also "
                   "reads that container, or it is an attribute of a plain object)")
            run_eagerly(msg, msg + f"; at {self._store_line(where)}")
        # tp.manual_seed inside the function: every call reseeds, as eager
        # does; the compiled program then draws from the new stream. A seed
        # after a random draw of the same call cannot be replayed before the
        # program: that version runs eagerly (strict: an error)
        seeds = getattr(call, "seeds", None) or []
        v.seeds = tuple(s for s, _ in seeds)
        if any(moved for _, moved in seeds):
            if self.strict_native:
                raise _C.NativeCompileError(
                    f"strict_native: '{self.name}' calls tp.manual_seed after drawing random "
                    "numbers; compiled random ops draw before the function's own reseed")
            v.effects_eager = True
        if _logs.enabled("guards"):
            _logs.logger("guards").info(f"guards of '{self.name}' version {v.index}: "
                                        + "; ".join(str(g) for g in v.guards))
        if _logs.enabled("kernels"):
            for k in v.kernels:
                _logs.logger("kernels").info(f"kernel {getattr(k, 'name', '?')} of '{self.name}':\n"
                                             f"{getattr(k, 'source', '')}")
        return v
