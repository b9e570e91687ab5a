"""Inputs, execution and comparison for the differential fuzzer.

For one generated program the harness draws a plan (signatures: shapes,
dtypes, layouts, scalar values; and a call sequence over them with fresh
values, repeated same-object calls and returns to old signatures), then per
call builds two identical sets of inputs, runs the eager function (an
instrumented rendering that records data-gate outcomes and the magnitude
of float reductions) and the compiled one, and compares outputs, dtypes,
shapes, input mutations, version counters and earlier outputs (a compiled
call must never overwrite what an earlier call returned).  At the end the
number of compiles is compared with the number of distinct specialization
keys the calls had (σ from the inputs, γg from the gate outcomes).

A failure raises FuzzFailure whose message is a runnable Python repro.
"""
import collections
import math

import numpy as np

from .program import inexact_text, numel

FILLER = {"float32": 7777.0, "float64": 7777.0, "int64": 7777, "bool": True}
NP_DT = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "bool": np.bool_}
# (1 + 2**-8 and 255.5 are rounding ties of bfloat16, 3.3963e38 rounds past
# its max to inf, 1e-40 is a subnormal in float32 and bfloat16)
SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 1e-30, 1e-40, 1.0, -1.0, 3.0e38,
            1.00390625, 255.5, 3.3963e38]
TOL = {"float32": (1e-4, 1e-5), "float64": (1e-7, 1e-10)}
EPS32 = float(np.finfo(np.float32).eps)


class FuzzFailure(AssertionError):
    pass


# ------------------------------------------------------------------ API


class API:
    """The module under test.  'tensorplay' is the real target; 'torch'
    (eager only) checks that the generator emits valid PyTorch programs."""

    def __init__(self, name="tensorplay", backend=None, dynamic=False):
        self.name = name
        self.backend = backend
        self.dynamic = dynamic   # tp.compile(dynamic=True): keys by rank and stride expressions
        if name == "torch":
            import torch
            self.tp = torch
            self.native_error = None
        else:
            import tensorplay
            self.tp = tensorplay
            comp = getattr(tensorplay, "compiler", None)
            self.native_error = getattr(comp, "NativeCompileError", None) or getattr(
                tensorplay._C, "NativeCompileError", None)

    def compile(self, fn, strict):
        if self.name == "torch":
            return fn
        kw = {"backend": self.backend} if self.backend else {}
        # static keys unless asked (the compile count is checked against
        # the distinct static keys; automatic dynamic would merge sizes)
        kw["dynamic"] = bool(self.dynamic)
        return self.tp.compile(fn, strict_native=strict, **kw)

    def stats(self, cf):
        st = getattr(cf, "stats", None)
        return st() if callable(st) else None

    def is_tensor(self, x):
        return isinstance(x, self.tp.Tensor)

    # the device of the compiled call's inputs (tests/gpu/test_gpu_fuzz.py: "cuda");
    # None: the eager call's
    c_device = None

    def prepare_compiled(self, prog, ns):
        """the compiled call's namespace before f is defined in it"""

    def to_numpy(self, t):
        if hasattr(t, "detach"):
            t = t.detach()
        if getattr(t, "is_cuda", False):
            t = t.cpu()
        return np.array(t.numpy(), copy=True)

    def version(self, t):
        return getattr(t, "_version", None)

    def dtype_name(self, t):
        return str(t.dtype).split(".")[-1]


# ------------------------------------------------------------------ plan

LAYOUTS = ["contig", "T", "step", "offset", "expand"]


class ParamSig:
    __slots__ = ("shape", "dt", "layout", "k")

    def __init__(self, shape, dt, layout, k):
        self.shape, self.dt, self.layout, self.k = tuple(shape), dt, layout, k

    def code(self):
        """(array shape, code with {A} for the array) building this layout."""
        s, k, lay = list(self.shape), self.k, self.layout
        if lay == "T":
            a = s[:-2] + [s[-1], s[-2]]
            return a, "tp.from_numpy({A}).transpose(-1, -2)"
        if lay == "step":
            a = list(s)
            a[k] *= 2
            idx = ", ".join([":"] * k + ["::2"])
            return a, "tp.from_numpy({A})[" + idx + "]"
        if lay == "offset":
            a = [s[0] + 1] + s[1:]
            return a, "tp.from_numpy({A})[1:]"
        if lay == "expand":
            a = list(s)
            a[k] = 1
            return a, "tp.from_numpy({A}).expand(" + ", ".join(map(str, s)) + ")"
        return s, "tp.from_numpy({A})"

    def values(self, rng, profile):
        """(logical values, storage array) for this layout."""
        arr_shape, _ = self.code()
        gen_shape = list(self.shape)
        if self.layout == "expand":
            gen_shape[self.k] = 1
        v = _values(rng, tuple(gen_shape), self.dt, profile)
        if self.layout == "expand":
            return np.broadcast_to(v, self.shape).copy(), v
        store = np.full(arr_shape, FILLER[self.dt], dtype=NP_DT[self.dt])
        if self.layout == "T":
            store[...] = np.swapaxes(v, -1, -2)
        elif self.layout == "step":
            sl = (slice(None),) * self.k + (slice(None, None, 2),)
            store[sl] = v
        elif self.layout == "offset":
            store[1:] = v
        else:
            store[...] = v
        return v, store

    def __repr__(self):
        return f"{self.dt}{list(self.shape)}:{self.layout}"


def _values(rng, shape, dt, profile):
    if dt == "bool":
        return rng.random(shape) < 0.5
    if dt == "int64":
        v = rng.integers(-5, 6, size=shape)
        if profile == "special":
            m = rng.random(shape) < 0.2
            v = np.where(m, rng.choice([0, 2 ** 40, -(2 ** 40), 2 ** 62]), v)
        return v.astype(np.int64)
    scale = {"normal": 1.0, "special": 1.0, "big": 30.0, "tiny": 1e-3}[profile]
    v = rng.standard_normal(shape) * scale
    if profile == "special":
        m = rng.random(shape) < 0.25
        v = np.where(m, rng.choice(SPECIALS, size=shape), v)
    with np.errstate(over="ignore"):
        return v.astype(NP_DT[dt])


def _layouts_for(shape, mutated, d):
    r = len(shape)
    opts = ["contig"]
    if r >= 2:
        opts.append("T")
    if r >= 1:
        opts += ["step", "offset"]
        if not mutated and any(s != 1 for s in shape):
            opts.append("expand")
    lay = d.choice(opts)
    k = 0
    if lay == "step":
        k = d.int(0, r - 1)
    if lay == "expand":
        ks = [i for i, s in enumerate(shape) if s != 1]
        k = d.choice(ks)
    return lay, k


class Plan:
    def __init__(self, sigs, calls):
        self.sigs = sigs      # list of dict name -> ParamSig | python scalar
        self.calls = calls    # list of (sig index, seed, profile, same_objects)


def draw_plan(prog, d):
    tparams = [p for p in prog.params if p.kind == "tensor"]
    sparams = [p for p in prog.params if p.kind != "tensor"]

    def shapes_for(base):
        out = {}
        for p in tparams:
            drop, ones = prog.derive[p.name]
            out[p.name] = [1 if o else s for o, s in zip(ones, base[drop:])]
        return out

    def scalar_value(p):
        if p.dt == "f":
            return d.choice([2.0, 0.5, -1.0, 0.0, 3.5, float("inf")])
        return d.choice([2, 3, 0, -1, 5])

    def make(base, dts, layouts=None, scal=None):
        shapes = shapes_for(base)
        sig = {}
        for p in tparams:
            lay = layouts[p.name] if layouts else _layouts_for(shapes[p.name], p.name in prog.mutated_params, d)
            if lay[0] == "T" and len(shapes[p.name]) < 2 or lay[0] == "expand" and all(
                    s == 1 for s in shapes[p.name]) or lay[0] in ("step", "offset") and not shapes[p.name]:
                lay = ("contig", 0)
            sig[p.name] = ParamSig(shapes[p.name], dts[p.name], lay[0], lay[1])
        for p in sparams:
            sig[p.name] = scal[p.name] if scal else scalar_value(p)
        return sig

    base = list(prog.base_shape)
    dts = {p.name: p.dt for p in tparams}
    s0 = make(base, dts)
    sigs = [s0]
    for _ in range(d.int(0, 3)):
        kind = d.choice(["layout", "resize", "dtype", "scalar", "zero"])
        if kind == "layout":
            sigs.append(make(base, dts, scal={p.name: s0[p.name] for p in sparams}))
        elif kind == "resize" and base:
            nb = [s if s in (0, 1) else d.int(2, 5) for s in base]
            sigs.append(make(nb, dts, layouts={p.name: ("contig", 0) for p in tparams},
                             scal={p.name: s0[p.name] for p in sparams}))
        elif kind == "dtype":
            nd = {n: {"float32": "float64", "float64": "float32"}.get(t, t) for n, t in dts.items()}
            sigs.append(make(base, nd, layouts={p.name: (s0[p.name].layout, s0[p.name].k) for p in tparams},
                             scal={p.name: s0[p.name] for p in sparams}))
        elif kind == "scalar" and sparams:
            sigs.append(make(base, dts, layouts={p.name: (s0[p.name].layout, s0[p.name].k) for p in tparams}))
        elif kind == "zero" and base:
            nb = list(base)
            nb[d.int(0, len(nb) - 1)] = 0
            sigs.append(make(nb, dts, layouts={p.name: ("contig", 0) for p in tparams},
                             scal={p.name: s0[p.name] for p in sparams}))
    profiles = ["normal", "special", "big", "tiny"]
    calls = []
    seed = d.int(0, 2 ** 16)

    def call(i, same=False):
        calls.append((i, seed * 1000 + len(calls), d.weighted([("normal", 3), ("special", 3), ("big", 1),
                                                              ("tiny", 1)]), same))
    call(0)
    if d.bool(0.5):
        call(0, same=True)
    call(0)
    for i in range(1, len(sigs)):
        call(i)
        if d.bool(0.3):
            call(0)
    return Plan(sigs, calls)


# ------------------------------------------------------------------ execution


class Recorder:
    def __init__(self, api):
        self.api = api
        self.reset()

    def reset(self):
        self.gates = []
        self.red = 0.0      # max over float reductions of n * max|finite input|
        self.red_n = 1

    def gate(self, v):
        self.gates.append(v)
        return v

    def reduce(self, src, out, amp=None):
        api = self.api
        try:
            a = api.to_numpy(src).astype(np.float64)
            o = api.to_numpy(out) if api.is_tensor(out) else np.asarray(out)
        except Exception:
            return out
        fin = np.abs(a[np.isfinite(a)])
        s = float(fin.max()) if fin.size else 0.0
        n = max(1, a.size // max(1, o.size)) if amp is None else amp
        self.red = max(self.red, n * max(s, s * s))
        self.red_n = max(self.red_n, n)
        return out


def array_literal(a):
    if a.size > 4096:
        return f"BIG_ARRAY_{a.dtype.name}_{'x'.join(map(str, a.shape))}  # rerun the sweep seed (python3 -m fuzz --avoid big)"
    def rec(x):
        if isinstance(x, list):
            return "[" + ", ".join(rec(y) for y in x) + "]"
        if isinstance(x, float):
            if math.isnan(x):
                return "nan"
            if math.isinf(x):
                return "inf" if x > 0 else "-inf"
        return repr(x)
    body = rec(a.tolist()) if a.ndim else rec(a.tolist())
    return f"np.array({body}, dtype=np.{a.dtype.name}).reshape({tuple(a.shape)})"


class Inputs:
    """Builds the argument list of one call (two identical copies)."""

    def __init__(self, api, prog, sig, seed, profile):
        self.api, self.prog, self.sig = api, prog, sig
        rng = np.random.default_rng(seed)
        self.stores = {}
        self.logical = {}
        for p in prog.params:
            if p.kind == "tensor":
                self.logical[p.name], self.stores[p.name] = sig[p.name].values(rng, profile)

    def build(self, device=None):
        """the arguments; device: their storages there (same layouts)"""
        tp = self.api.tp
        out = []
        for p in self.prog.params:
            if p.kind != "tensor":
                out.append(self.sig[p.name])
                continue
            _, code = self.sig[p.name].code()
            base = "tp.from_numpy(_A)" + (f".to({device!r})" if device else "")
            out.append(eval(code.replace("tp.from_numpy({A})", base).replace("{A}", "_A"),
                            {"tp": tp, "_A": self.stores[p.name].copy()}))
        return out

    def source(self, fname):
        lines = [f"def {fname}():"]
        args = []
        for p in self.prog.params:
            if p.kind != "tensor":
                args.append(repr(self.sig[p.name]) if not isinstance(self.sig[p.name], float) or math.isfinite(
                    self.sig[p.name]) else f"float('{self.sig[p.name]}')")
                continue
            _, code = self.sig[p.name].code()
            lines.append(f"    {p.name} = " + code.replace("{A}", array_literal(self.stores[p.name])))
            args.append(p.name)
        lines.append(f"    return [{', '.join(args)}]")
        return "\n".join(lines) + "\n"


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _canon_strides(shape, stride):
    """Strides as sigma keys them: a size-1 dim's stride addresses nothing,
    so it is the row-major stride over its inner neighbour (signature.c)."""
    out, inner = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        if shape[d] == 1:
            out[d] = inner
        else:
            out[d] = stride[d]
            inner = stride[d] * shape[d]
    return tuple(out)


def _signature_key(api, args):
    key = []
    for a in args:
        if api.is_tensor(a):
            # requires_grad is keyed (torch's guards too): an eager in-place
            # op of a grad-requiring value makes an input require grad
            key.append(("T", tuple(a.shape), api.dtype_name(a),
                        _canon_strides(tuple(a.shape), tuple(a.stride())),
                        bool(getattr(a, "requires_grad", False))))
        else:
            key.append((type(a).__name__, repr(a)))
    return tuple(key)


class Runner:
    def __init__(self, api, prog, plan, strict=True, check_compiles=True, avoid=()):
        self.api, self.prog, self.plan = api, prog, plan
        self.avoid = set(avoid)   # checks left out while their bug is open
        self.exact = "exact" not in self.avoid and prog.bit_exact()
        src = prog.fn_source()
        self.has_f32 = bool(prog.modules) or inexact_text(src) or any(w in src for w in ("float32", ".float()",
                                                                                       "/")) or any(
            sig[p.name].dt == "float32" for sig in plan.sigs for p in prog.params if p.kind == "tensor")
        # a libm-style function of a float16/bfloat16 value: computed in
        # float32 and rounded once, eager and compiled alike, but a 1-ulp
        # float32 difference may round to neighbouring 16-bit values
        self.lowp_inexact = inexact_text(src) and ("float16" in src or "bfloat16" in src)
        self.strict = strict
        self.check_compiles = check_compiles
        self.events = collections.Counter()   # fallbacks etc. for the summary
        self.fallback_ops = []
        self.eager_exc = None

    # -- repro
    def repro(self, upto, msg):
        lines = ["# differential fuzz repro: eager vs tp.compile", "import numpy as np",
                 "from numpy import nan, inf", "import tensorplay as tp", "", self.prog.setup_source(),
                 self.prog.fn_source(), ""]
        mk = {}
        for j, (si, seed, prof, same) in enumerate(self.plan.calls[:upto + 1]):
            if not same and (si, seed) not in mk:
                name = f"inputs_{len(mk)}"
                mk[(si, seed)] = name
                lines.append(Inputs(self.api, self.prog, self.plan.sigs[si], seed, prof).source(name))
        lines += [_CHECK_SRC, f"cf = tp.compile(f, strict_native={self.strict}, dynamic={bool(self.api.dynamic)})"]
        for j, (si, seed, prof, same) in enumerate(self.plan.calls[:upto + 1]):
            if not same:
                lines.append(f"e, c = {mk[(si, seed)]}(), {mk[(si, seed)]}()")
            lines.append(f"check(f(*e), cf(*c), 'call {j}'); check(e, c, 'inputs after call {j}')")
        lines.append("print('ok: no difference (flaky?)')")
        return "\n".join(lines) + f"\n# failure: {msg}\n"

    def fail(self, j, msg):
        raise FuzzFailure(msg + "\n\n" + self.repro(j, msg))

    # -- run
    def run(self):
        api, prog, tp = self.api, self.prog, self.api.tp
        rec = Recorder(api)
        ns = {"tp": tp, "np": np, "_gate": rec.gate, "_red": rec.reduce}
        exec(prog.setup_source(), ns)
        exec(prog.fn_source(instrument=True, name="f_inst"), ns)
        # the compiled function stores into containers of its own
        ns_c = dict(ns)
        if getattr(prog, "stores", False):
            ns_c["_store"], ns_c["_log"] = {}, []
        api.prepare_compiled(prog, ns_c)
        exec(prog.fn_source(), ns_c)
        f, f_inst = ns_c["f"], ns["f_inst"]
        cf = api.compile(f, self.strict)
        strict = self.strict
        keys = []
        raised = False
        e_args = c_args = None
        prev = None   # (compiled outputs, their numpy copies) of the previous call
        for j, (si, seed, prof, same) in enumerate(self.plan.calls):
            sig = self.plan.sigs[si]
            if not same or e_args is None:
                inp = Inputs(api, prog, sig, seed, prof)
                e_args, c_args = inp.build(), inp.build(api.c_device)
            ev0 = [api.version(a) if api.is_tensor(a) else None for a in e_args]
            cv0 = [api.version(a) if api.is_tensor(a) else None for a in c_args]
            key0 = _signature_key(api, e_args)    # before the call may write its inputs
            rec.reset()
            exc_e = exc_c = None
            try:
                with np.errstate(all="ignore"):
                    out_e = f_inst(*e_args)
            except Exception as ex:  # noqa: BLE001
                exc_e = ex
            try:
                with np.errstate(all="ignore"):
                    out_c = cf(*c_args)
            except Exception as ex:  # noqa: BLE001
                exc_c = ex
                if strict and self.api.native_error and isinstance(ex, self.api.native_error):
                    # not every op is in the basis yet: record and go on non-strict
                    self.events["strict_fallback"] += 1
                    self.fallback_ops.append(str(ex).splitlines()[0][:160])
                    strict = False
                    self.check_compiles = self.check_compiles and j == 0
                    cf = api.compile(f, False)
                    c_args = inp.build(api.c_device) if not same else c_args
                    exc_c = None
                    try:
                        with np.errstate(all="ignore"):
                            out_c = cf(*c_args)
                    except Exception as ex2:  # noqa: BLE001
                        exc_c = ex2
            if exc_e is not None or exc_c is not None:
                raised = True
                if exc_e is None and api.c_device and self.eager_on_device_raises(prog, ns, inp, exc_c):
                    # the program itself mixes devices (a tensor it makes
                    # lands on the CPU, its inputs on the device): eager on
                    # the compiled call's device raises the same, as torch
                    self.events["device_raises"] += 1
                    if j == 0:
                        self.eager_exc = f"on {api.c_device}: {type(exc_c).__name__}: {str(exc_c)[:150]}"
                        return "device-raises"
                    continue
                if exc_e is None:
                    self.fail(j, f"call {j} ({_sigtxt(sig)}): compiled raised {type(exc_c).__name__}: "
                                 f"{str(exc_c)[:300]}; eager returned normally")
                if exc_c is None and "in-place operation on a view of a tensor that requires grad " \
                        "is not supported yet" in str(exc_e):
                    # eager autograd's documented gap (torch computes this; the
                    # compiled call does too): reported, not a compiled bug
                    self.events["eager_inplace_view_of_grad_unsupported"] += 1
                    if j == 0:
                        return "eager-raises"
                    continue
                if exc_c is None:
                    self.fail(j, f"call {j} ({_sigtxt(sig)}): eager raised {type(exc_e).__name__}: "
                                 f"{str(exc_e)[:200]}; compiled returned a value")
                # an error raised by dead code (its result unused) is still
                # raised, and with two failing statements the first one's
                # (torch.compile's semantics: the compiled call raises as eager)
                if type(exc_e) is not type(exc_c) and not isinstance(exc_c, type(exc_e)):
                    self.fail(j, f"call {j}: eager raised {type(exc_e).__name__} ({str(exc_e)[:120]}) but "
                                 f"compiled raised {type(exc_c).__name__} ({str(exc_c)[:200]})")
                if j == 0:
                    self.eager_exc = f"{type(exc_e).__name__}: {str(exc_e)[:150]}"
                    return "eager-raises"
                continue
            keys.append((key0, tuple(rec.gates)))
            self.compare(j, sig, out_e, out_c, rec)
            if getattr(prog, "stores", False):
                self.compare_stores(j, ns, ns_c, rec)
            self.compare_aliasing(j, out_e, out_c, e_args, c_args, rec)
            # inputs after the call: mutations and version counters
            for k, (a, b) in enumerate(zip(e_args, c_args)):
                if not api.is_tensor(a):
                    continue
                self.compare_tensor(j, f"input {prog.params[k].name} after the call", api.to_numpy(a),
                                    api.to_numpy(b), api.dtype_name(a), api.dtype_name(b), rec)
                de = api.version(a) != ev0[k]
                dc = api.version(b) != cv0[k]
                if de != dc:
                    self.fail(j, f"call {j}: version counter of input {prog.params[k].name} "
                                 f"{'bumped' if dc else 'not bumped'} by the compiled call "
                                 f"(eager: {ev0[k]} -> {api.version(a)}, compiled: {cv0[k]} -> {api.version(b)})")
            # outputs of the previous compiled call are untouched
            if prev is not None and not same:
                for k, (t, copy) in enumerate(prev):
                    if copy is not None and not np.array_equal(api.to_numpy(t), copy, equal_nan=copy.dtype.kind == "f"):
                        self.fail(j, f"call {j} overwrote output {k} of the previous compiled call "
                                     f"(compiled results must not alias across calls)")
            c_outs = _flat(out_c)
            prev = [(t, api.to_numpy(t) if api.is_tensor(t) else None) for t in c_outs]
            # only keep outputs that do not alias an input (an input may legally change)
            prev = [(t, c) for t, c in prev if not any(t is a for a in c_args)]
        st = api.stats(cf)
        if st is not None:
            self.events["fallback_kernels"] += int(st.get("fallbacks", 0) or 0)
            for lv in ("hits_level1", "hits_level2", "hits_level3"):
                self.events[lv] += int(st.get(lv, 0) or 0)
            self.events["calls"] += len(self.plan.calls)
        if st is not None and self.check_compiles and not raised and not api.dynamic:
            want = len(set(keys))
            got = st.get("compiles")
            if want <= 8 and got is not None:
                self.events["compile_count_checked"] += 1
            if want <= 8 and got is not None and got != want:
                self.fail(len(self.plan.calls) - 1,
                          f"cf.stats()['compiles'] == {got} but the calls had {want} distinct specialization keys "
                          f"(signature + gate outcomes): {_keys_txt(keys)}")
        return "ok"

    def eager_on_device_raises(self, prog, ns, inp, exc_c):
        """whether the eager call on fresh inputs on the compiled call's
        device raises an exception of exc_c's type (eager on the CPU is the
        reference for values, eager on the device for whether a call raises:
        a tensor the function makes with no device= meets device inputs)"""
        api = self.api
        ns_d = dict(ns)
        if getattr(prog, "stores", False):
            ns_d["_store"], ns_d["_log"] = {}, []
        api.prepare_compiled(prog, ns_d)        # the modules on the device too
        exec(prog.fn_source(instrument=True, name="f_inst"), ns_d)
        try:
            with np.errstate(all="ignore"):
                ns_d["f_inst"](*inp.build(api.c_device))
        except Exception as ex:  # noqa: BLE001
            return type(ex) is type(exc_c) or isinstance(exc_c, type(ex))
        return False

    def compare_stores(self, j, ns_e, ns_c, rec):
        """the Python containers the program stores tensors into hold the
        same values after the compiled call as after the eager one"""
        api = self.api
        se, sc = ns_e["_store"], ns_c["_store"]
        if sorted(se) != sorted(sc):
            self.fail(j, f"call {j}: stored keys {sorted(sc)} (compiled) != {sorted(se)} (eager)")
        le, lc = ns_e["_log"], ns_c["_log"]
        if len(le) != len(lc):
            self.fail(j, f"call {j}: {len(lc)} values appended (compiled) != {len(le)} (eager)")
        pairs = [(f"_store[{k!r}]", se[k], sc[k]) for k in sorted(se)]
        pairs += [(f"_log[{i}]", a, b) for i, (a, b) in enumerate(zip(le, lc))]
        for what, a, b in pairs:
            if not api.is_tensor(b):
                self.fail(j, f"call {j}: {what} holds a {type(b).__name__} after the compiled call, "
                             "not a tensor")
            self.compare_tensor(j, what, api.to_numpy(a), api.to_numpy(b), api.dtype_name(a),
                                api.dtype_name(b), rec)

    def compare_aliasing(self, j, out_e, out_c, e_args, c_args, rec):
        """an output that is a view of an input in eager is one compiled
        (same storage) and a write through it reaches the input alike; two
        outputs share a storage compiled exactly when they do in eager; an
        output of fresh memory (a view of no input) is the caller's own: a
        write into it reaches no other output and no later call"""
        api = self.api
        oe, oc = _flat(out_e), _flat(out_c)
        for k in range(len(oe)):
            for m in range(k + 1, min(len(oe), len(oc))):
                a, b, x, y = oe[k], oc[k], oe[m], oc[m]
                if not all(api.is_tensor(t) and hasattr(t, "_storage") for t in (a, b, x, y)):
                    continue
                ae, ac = a._storage is x._storage, b._storage is y._storage
                if ae != ac:
                    self.fail(j, f"call {j}: outputs {k} and {m} {'share' if ae else 'do not share'} "
                                 f"memory in eager but {'do' if ac else 'do not'} compiled")
        self.write_fresh_outputs(j, oe, oc, e_args, rec)
        for k, (a, b) in enumerate(zip(oe, oc)):
            if not (api.is_tensor(a) and api.is_tensor(b)) or not hasattr(a, "_storage"):
                continue
            for i, (x, y) in enumerate(zip(e_args, c_args)):
                if not api.is_tensor(x):
                    continue
                ae, ac = a._storage is x._storage, b._storage is y._storage
                if ae != ac:
                    self.fail(j, f"call {j}: output {k} {'is' if ae else 'is not'} a view of input "
                                 f"{self.prog.params[i].name} in eager but "
                                 f"{'is' if ac else 'is not'} compiled")
        for k, (a, b) in enumerate(zip(oe, oc)):
            if not (api.is_tensor(a) and api.is_tensor(b)) or not hasattr(a, "_storage"):
                continue
            if not any(api.is_tensor(x) and a._storage is x._storage for x in e_args):
                continue
            if api.dtype_name(a) == "bool" or any(st == 0 and n > 1 for st, n in zip(a.stride(), a.shape)):
                continue
            if any(a._storage is o._storage for o in oe[:k]):
                continue      # written through an earlier output already
            a.add_(1)
            b.add_(1)
            for i, (x, y) in enumerate(zip(e_args, c_args)):
                if api.is_tensor(x):
                    self.compare_tensor(j, f"input {self.prog.params[i].name} after writing through "
                                           f"output {k}", api.to_numpy(x), api.to_numpy(y),
                                        api.dtype_name(x), api.dtype_name(y), rec)

    def write_fresh_outputs(self, j, oe, oc, e_args, rec):
        """write into each output that is a view of no input, eager and
        compiled alike; the outputs must still agree (a compiled output
        sharing memory eager's does not changes with it), and the next
        call's compare sees a constant the program hands out on every call"""
        api = self.api
        wrote = False
        for k, (a, b) in enumerate(zip(oe, oc)):
            if not (api.is_tensor(a) and api.is_tensor(b)) or not hasattr(a, "_storage"):
                continue
            if any(api.is_tensor(x) and a._storage is x._storage for x in e_args):
                continue
            if api.dtype_name(a) == "bool" or any(st == 0 and n > 1 for st, n in zip(a.stride(), a.shape)) \
                    or any(st == 0 and n > 1 for st, n in zip(b.stride(), b.shape)):
                continue
            if any(api.is_tensor(o) and a._storage is o._storage for o in oe[:k]):
                continue      # written through an earlier output already
            with api.tp.no_grad():
                a.add_(1)
                b.add_(1)
            wrote = True
        if wrote:
            for k, (a, b) in enumerate(zip(oe, oc)):
                if api.is_tensor(a) and api.is_tensor(b):
                    self.compare_tensor(j, f"output {k} after writing into the outputs of fresh memory",
                                        api.to_numpy(a), api.to_numpy(b), api.dtype_name(a),
                                        api.dtype_name(b), rec)

    # -- comparison
    def compare(self, j, sig, out_e, out_c, rec):
        api = self.api
        fe, fc = _flat(out_e), _flat(out_c)
        if isinstance(out_e, tuple) != isinstance(out_c, tuple) or len(fe) != len(fc):
            self.fail(j, f"call {j}: output structure differs: eager {type(out_e).__name__}[{len(fe)}], "
                         f"compiled {type(out_c).__name__}[{len(fc)}]")
        for k, (a, b) in enumerate(zip(fe, fc)):
            if api.is_tensor(a):
                if not api.is_tensor(b):
                    self.fail(j, f"call {j}: output {k} is a {type(b).__name__}, eager gives a Tensor")
                if tuple(a.shape) != tuple(b.shape):
                    self.fail(j, f"call {j}: output {k} shape {tuple(b.shape)}, eager {tuple(a.shape)}")
                ra, rb = getattr(a, "requires_grad", None), getattr(b, "requires_grad", None)
                if ra != rb and "requires_grad" not in self.avoid:
                    self.fail(j, f"call {j}: output {k} requires_grad={rb}, eager {ra}")
                self.compare_tensor(j, f"output {k}", api.to_numpy(a), api.to_numpy(b), api.dtype_name(a),
                                    api.dtype_name(b), rec)
            else:
                if type(a) is not type(b) or a != b:
                    self.fail(j, f"call {j}: output {k} is {b!r} ({type(b).__name__}), eager {a!r}")

    def compare_tensor(self, j, what, a, b, dta, dtb, rec):
        if dta != dtb:
            self.fail(j, f"call {j}: {what} dtype {dtb}, eager {dta}")
        if a.shape != b.shape:
            self.fail(j, f"call {j}: {what} shape {b.shape}, eager {a.shape}")
        if a.dtype.kind in "biu":
            if not np.array_equal(a, b):
                idx = np.argwhere(a != b)[0]
                self.fail(j, f"call {j}: {what} differs at {tuple(idx)}: eager {a[tuple(idx)]!r}, "
                             f"compiled {b[tuple(idx)]!r}")
            return
        rtol, atol = TOL.get(dta, (1e-4, 1e-5))
        if dta == "float64" and self.has_f32:
            rtol, atol = TOL["float32"]   # float32 values promoted into a float64 result
        if self.exact and rec is not None:
            rtol, atol = 0.0, 0.0   # documented bit-exact ops only (±0 still compare equal)
        if self.lowp_inexact:
            rtol, atol = max(rtol, 2e-2), max(atol, 1e-4)
        strict_special = True
        if rec is not None and rec.red > 0:
            rtol += 4 * rec.red_n * EPS32
            atol += 8 * EPS32 * rec.red
            strict_special = rec.red < 1e35
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        na, nb = np.isnan(a64), np.isnan(b64)
        if strict_special and not np.array_equal(na, nb):
            idx = tuple(np.argwhere(na != nb)[0])
            self.fail(j, f"call {j}: {what} NaN positions differ at {idx}: eager {a[idx]!r}, compiled {b[idx]!r}")
        ok = na | nb
        ia = np.isinf(a64) & ~ok
        if strict_special:
            bad = ia & (a64 != b64)
            if bad.any():
                idx = tuple(np.argwhere(bad)[0])
                self.fail(j, f"call {j}: {what} differs at {idx}: eager {a[idx]!r}, compiled {b[idx]!r}")
        with np.errstate(all="ignore"):
            err = np.abs(a64 - b64)
            lim = atol + rtol * np.abs(a64)
        bad = ~ok & ~ia & ~(err <= lim)
        if bad.any():
            idx = tuple(np.argwhere(bad)[0])
            self.fail(j, f"call {j}: {what} differs at {idx}: eager {a[idx]!r}, compiled {b[idx]!r} "
                         f"(|diff| {err[idx]:.3g} > {lim[idx]:.3g}; rtol {rtol:.2g} atol {atol:.2g})")


def _sigtxt(sig):
    return ", ".join(f"{k}={v!r}" for k, v in sig.items())


def _keys_txt(keys):
    seen = []
    for k in keys:
        if k not in seen:
            seen.append(k)
    return "; ".join(f"[{i}] {k}" for i, k in enumerate(seen))[:1500]


_CHECK_SRC = '''
def check(e, c, what):
    """Compare eager (e) and compiled (c) results the way the fuzzer does."""
    if isinstance(e, (tuple, list)):
        assert isinstance(c, (tuple, list)) and len(e) == len(c), (what, e, c)
        for i, (a, b) in enumerate(zip(e, c)):
            check(a, b, f"{what}[{i}]")
        return
    if not isinstance(e, tp.Tensor):
        assert type(e) is type(c) and e == c, (what, e, c)
        return
    assert isinstance(c, tp.Tensor), (what, type(c))
    assert e.dtype == c.dtype and tuple(e.shape) == tuple(c.shape), (what, e.dtype, c.dtype, e.shape, c.shape)
    a, b = e.detach().numpy(), c.detach().numpy()
    if a.dtype.kind == "f":
        ok = np.isclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)
    else:
        ok = a == b
    assert np.all(ok), f"{what}: eager\\n{a}\\ncompiled\\n{b}"
'''


# ------------------------------------------------------------------ eager vs PyTorch


class TorchOracle(Runner):
    """Eager tensorplay against eager PyTorch on the same program and inputs
    (the reference the eager library promises: issue 3).  Module weights are
    copied from the tensorplay modules into the torch ones."""

    def __init__(self, api, prog, plan):
        super().__init__(api, prog, plan, strict=False, check_compiles=False)
        self.exact = False   # PyTorch itself is not bit-exact with NumPy (e.g. 3.0 / x is 3 * reciprocal(x))
        self.tapi = API("torch")

    def repro(self, upto, msg):
        si, seed, prof, _ = self.plan.calls[upto]
        inp = Inputs(self.api, self.prog, self.plan.sigs[si], seed, prof)
        lines = ["# eager tensorplay vs eager PyTorch repro", "import numpy as np", "from numpy import nan, inf",
                 "import torch", "import tensorplay", "", "def run(tp):",
                 "    " + self.prog.setup_source().replace("\n", "\n    "),
                 "    " + self.prog.fn_source().replace("\n", "\n    "),
                 "    " + inp.source("inputs").replace("\n", "\n    "),
                 "    return f(*inputs())", "",
                 "print(run(tensorplay))", "print(run(torch))  # note: module weights differ unless copied"]
        return "\n".join(lines) + f"\n# failure: {msg}\n"

    def run(self):
        import warnings
        api, tapi, prog = self.api, self.tapi, self.prog
        ns_a = {"tp": api.tp, "np": np}
        ns_b = {"tp": tapi.tp, "np": np}
        exec(prog.setup_source(), ns_a)
        exec(prog.setup_source(), ns_b)
        for name, _ in prog.modules:
            for pn in ("weight", "bias"):
                pa = getattr(ns_a[name], pn, None)
                if pa is not None:
                    getattr(ns_b[name], pn).data = tapi.tp.from_numpy(api.to_numpy(pa))
        rec = Recorder(api)
        ns_a.update(_gate=rec.gate, _red=rec.reduce)
        exec(prog.fn_source(instrument=True), ns_a)
        exec(prog.fn_source(), ns_b)
        done = set()
        for j, (si, seed, prof, same) in enumerate(self.plan.calls):
            if same or (si, seed) in done:
                continue
            done.add((si, seed))
            inp = Inputs(api, prog, self.plan.sigs[si], seed, prof)
            a_args = inp.build()
            inp.api = tapi
            b_args = inp.build()
            inp.api = api
            exc_a = exc_b = None
            rec.reset()
            if prog.modules:
                rec.red, rec.red_n = max(rec.red, 1e3), max(rec.red_n, 8)   # matmul / layer_norm reductions
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                try:
                    out_a = ns_a["f"](*a_args)
                except Exception as e:  # noqa: BLE001
                    exc_a = e
                try:
                    out_b = ns_b["f"](*b_args)
                except Exception as e:  # noqa: BLE001
                    exc_b = e
            if exc_a is not None or exc_b is not None:
                if exc_b is None:
                    self.fail(j, f"tensorplay raised {type(exc_a).__name__}: {str(exc_a)[:200]}; PyTorch accepts")
                if exc_a is None:
                    self.fail(j, f"PyTorch raised {type(exc_b).__name__}: {str(exc_b)[:150]}; tensorplay returned")
                if j == 0:
                    return "both-raise"
                continue
            fa, fb = _flat(out_a), _flat(out_b)
            if len(fa) != len(fb):
                self.fail(j, "output structure differs")
            for k, (a, b) in enumerate(zip(fa, fb)):
                if api.is_tensor(a):
                    if not tapi.is_tensor(b):
                        self.fail(j, f"output {k}: tensorplay gives a Tensor, PyTorch {type(b).__name__}")
                    self.compare_tensor(j, f"output {k} (tensorplay vs torch)", tapi.to_numpy(b), api.to_numpy(a),
                                        tapi.dtype_name(b), api.dtype_name(a), rec)
                elif a != b and not (a != a and b != b):
                    self.fail(j, f"output {k}: tensorplay {a!r}, PyTorch {b!r}")
            for k, p in enumerate(prog.params):
                if p.kind == "tensor":
                    self.compare_tensor(j, f"input {p.name} after the call (tensorplay vs torch)",
                                        tapi.to_numpy(b_args[k]), api.to_numpy(a_args[k]),
                                        tapi.dtype_name(b_args[k]), api.dtype_name(a_args[k]), None)
        return "ok"
