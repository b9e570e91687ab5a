/* The hybrid tracer: the Tracer object, the user's source line,
 * placeholders (stand-ins: isolation.c), TraceResult and the entry points
 * tensorplay._C.trace / gate / is_tracing.  Node recording with run-time
 * sampling (seed 3.3) is in trace_record.c, data gates and shape reads in
 * trace_gates.c, side-effect isolation (3.7) in isolation.c, the guard
 * replay subgraph (Algorithm 3.1) in trace_replay.c. */
#include "trace/trace_internal.h"
#include "structmember.h"
#include <string.h>

PyTypeObject *StaxTracer_Type = NULL;
static PyTypeObject *TraceResult_Type = NULL;
/* innermost running trace of this thread: another thread's tensor code
 * (run between the tracing thread's bytecodes) is not traced */
static _Thread_local StaxTracer *current = NULL;
PyObject *stax_trace_pkg_dir = NULL;       /* ".../tensorplay/" */
static PyObject *linecache_getline = NULL;

int
stax_trace_active(void)
{
    return current != NULL;
}

int
stax_trace_is_tensor(PyObject *o)
{
    return StaxTensor_Type != NULL && PyObject_TypeCheck(o, StaxTensor_Type);
}

/* ------------------------------------------------------------------ */
/* Tracer object                                                       */

static int
tracer_traverse(StaxTracer *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->graph);
    Py_VISIT(self->gates);
    Py_VISIT(self->shape_reads);
    Py_VISIT(self->shape_seen);
    Py_VISIT(self->ph_index);
    Py_VISIT(self->const_nodes);
    Py_VISIT(self->constants);
    Py_VISIT(self->journal);
    Py_VISIT(self->journaled);
    Py_VISIT(self->unrecorded);
    Py_VISIT(self->const_written);
    Py_VISIT(self->const_read);
    Py_VISIT(self->stale_reads);
    Py_VISIT(self->out_named);
    Py_VISIT(self->graph_breaks);
    Py_VISIT(self->mutations);
    Py_VISIT(self->lazy);
    Py_VISIT(self->lazy_args);
    Py_VISIT(self->lazy_reads);
    Py_VISIT(self->lazy_error);
    Py_VISIT(self->eager_runs);
    Py_VISIT(self->grad_inside);
    Py_VISIT(self->symenv);
    return 0;
}

static int
tracer_clear(StaxTracer *self)
{
    Py_CLEAR(self->graph);
    Py_CLEAR(self->gates);
    Py_CLEAR(self->shape_reads);
    Py_CLEAR(self->shape_seen);
    Py_CLEAR(self->ph_index);
    Py_CLEAR(self->const_nodes);
    Py_CLEAR(self->constants);
    Py_CLEAR(self->journal);
    Py_CLEAR(self->journaled);
    Py_CLEAR(self->unrecorded);
    Py_CLEAR(self->const_written);
    Py_CLEAR(self->const_read);
    Py_CLEAR(self->stale_reads);
    Py_CLEAR(self->out_named);
    Py_CLEAR(self->graph_breaks);
    Py_CLEAR(self->mutations);
    Py_CLEAR(self->lazy);
    Py_CLEAR(self->lazy_args);
    Py_CLEAR(self->lazy_reads);
    Py_CLEAR(self->lazy_error);
    Py_CLEAR(self->eager_runs);
    Py_CLEAR(self->grad_inside);
    Py_CLEAR(self->symenv);
    return 0;
}

static void
tracer_dealloc(StaxTracer *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    tracer_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
tracer_get_graph(StaxTracer *self, void *c)
{
    return Py_NewRef(self->graph ? (PyObject *)self->graph : Py_None);
}

static PyGetSetDef tracer_getset[] = {
    {"graph", (getter)tracer_get_graph, NULL, NULL, NULL},
    {NULL},
};

static PyType_Slot tracer_slots[] = {
    {Py_tp_dealloc, tracer_dealloc},
    {Py_tp_traverse, tracer_traverse},
    {Py_tp_clear, tracer_clear},
    {Py_tp_getset, tracer_getset},
    {0, NULL},
};

static PyType_Spec tracer_spec = {
    .name = "tensorplay._C.Tracer",
    .basicsize = sizeof(StaxTracer),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = tracer_slots,
};

static StaxTracer *
tracer_new(void)
{
    StaxTracer *tr = PyObject_GC_New(StaxTracer, StaxTracer_Type);
    if (tr == NULL) {
        return NULL;
    }
    tr->graph = (StaxGraph *)stax_graph_new();
    tr->gates = PyList_New(0);
    tr->shape_reads = PyList_New(0);
    tr->shape_seen = PySet_New(NULL);
    tr->ph_index = PyDict_New();
    tr->const_nodes = PyDict_New();
    tr->constants = PyDict_New();
    tr->journal = PyList_New(0);
    tr->journaled = PySet_New(NULL);
    tr->unrecorded = PyList_New(0);
    tr->const_written = PySet_New(NULL);
    tr->const_read = PyDict_New();
    tr->stale_reads = PyList_New(0);
    tr->out_named = NULL;
    tr->graph_breaks = PyList_New(0);
    tr->serial0 = stax_storage_serial_now();
    tr->unrestorable = 0;
    tr->mutations = PyDict_New();
    tr->lazy = NULL;
    tr->lazy_args = NULL;
    tr->lazy_reads = NULL;
    tr->lazy_error = NULL;
    tr->eager_runs = NULL;
    tr->grad_inside = NULL;
    tr->symenv = NULL;
    tr->active = 0;
    PyObject_GC_Track(tr);
    if (!tr->graph || !tr->gates || !tr->shape_reads || !tr->shape_seen
        || !tr->ph_index || !tr->const_nodes || !tr->constants || !tr->journal
        || !tr->journaled || !tr->unrecorded || !tr->mutations
        || !tr->const_written || !tr->const_read || !tr->stale_reads
        || !tr->graph_breaks) {
        Py_DECREF(tr);
        return NULL;
    }
    return tr;
}

/* ------------------------------------------------------------------ */
/* user source line                                                    */

int
stax_trace_frame_depth(void)
{
    int d = 0;
    PyFrameObject *f = PyEval_GetFrame();
    Py_XINCREF(f);
    while (f != NULL) {
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
        d++;
    }
    return d;
}

PyObject *
stax_trace_user_stack(void)
{
    PyFrameObject *f = PyEval_GetFrame();
    PyObject *res = NULL;
    Py_XINCREF(f);
    while (f != NULL) {
        PyCodeObject *co = PyFrame_GetCode(f);
        PyObject *fn = PyObject_GetAttrString((PyObject *)co, "co_filename");
        PyObject *name = PyObject_GetAttrString((PyObject *)co, "co_name");
        PyFrameObject *back;
        int inside = 0;
        Py_DECREF(co);
        if (fn == NULL || name == NULL) {
            Py_XDECREF(fn);
            Py_XDECREF(name);
            PyErr_Clear();
            break;
        }
        if (stax_trace_pkg_dir != NULL && PyUnicode_Check(fn)) {
            inside = PyUnicode_Tailmatch(fn, stax_trace_pkg_dir, 0, PY_SSIZE_T_MAX,
                                         -1) == 1;
        }
        if (!inside) {
            int line = PyFrame_GetLineNumber(f);
            PyObject *text = PyObject_CallFunction(linecache_getline, "Oi",
                                                   fn, line);
            PyObject *st = text ? PyObject_CallMethod(text, "strip", NULL)
                                : NULL;
            if (st == NULL) {
                PyErr_Clear();
                st = PyUnicode_FromString("");
            }
            res = PyUnicode_FromFormat("%U:%d in %U: %U", fn, line, name,
                                       st);
            Py_XDECREF(text);
            Py_XDECREF(st);
            Py_DECREF(fn);
            Py_DECREF(name);
            Py_DECREF(f);
            if (res == NULL) {
                PyErr_Clear();
            }
            break;
        }
        Py_DECREF(fn);
        Py_DECREF(name);
        back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    return res ? res : Py_NewRef(Py_None);
}

/* ------------------------------------------------------------------ */
/* placeholders                                                        */

typedef struct {
    StaxTracer *tr;
    PyObject *standin_versions;   /* list: (stand-in, version at start) */
    PyObject *extents;            /* storage key -> (lo, hi) */
    PyObject *bases;              /* storage key -> copied base tensor */
} ph_ctx;

static PyObject *
make_placeholder(ph_ctx *c, PyObject *t, PyObject *name)
{
    StaxNode *n;
    PyObject *si, *idx, *p, *e;
    n = stax_graph_create_node(c->tr->graph, STAX_NODE_PLACEHOLDER, name,
                               NULL, NULL, name);
    if (n == NULL) {
        return NULL;
    }
    Py_SETREF(n->target, Py_NewRef(n->name));
    si = stax_trace_stand_in((StaxTensor *)t, c->extents, c->bases,
                             c->tr->lazy != NULL ? c->tr : NULL);
    idx = si ? PyLong_FromSsize_t(PyDict_GET_SIZE(c->tr->ph_index)) : NULL;
    if (idx == NULL || PyDict_SetItemString(n->meta, "val", si) < 0
        || PyDict_SetItem(c->tr->ph_index, (PyObject *)n, idx) < 0) {
        goto error;
    }
    if (c->tr->symenv != NULL) {
        /* dynamic shapes: the shadow input (dynamic dims grown) */
        PyObject *sh = PyObject_CallMethod(c->tr->symenv, "placeholder", "OO", idx, si);
        int r = sh == NULL ? -1
                : PyDict_SetItemString(n->meta, "val2", sh == Py_None ? si : sh);
        Py_XDECREF(sh);
        if (r < 0) {
            goto error;
        }
    }
    e = Py_BuildValue("(OK)", si,
                      (unsigned long long)((StaxTensor *)si)->storage->version);
    if (e == NULL || PyList_Append(c->standin_versions, e) < 0) {
        Py_XDECREF(e);
        goto error;
    }
    Py_DECREF(e);
    p = stax_trace_proxy_new(c->tr, n);
    Py_DECREF(n);
    Py_DECREF(si);
    Py_DECREF(idx);
    return p;
error:
    Py_DECREF(n);
    Py_XDECREF(si);
    Py_XDECREF(idx);
    return NULL;
}

/* Replace every tensor leaf of o with a placeholder proxy; `base` names
 * the argument, leaves of a container get base_0, base_1, ... */
static PyObject *
wrap_arg(ph_ctx *c, PyObject *o, PyObject *base, Py_ssize_t *leaf,
         int top)
{
    if (stax_trace_is_tensor(o)) {
        PyObject *nm = top ? Py_NewRef(base)
                           : PyUnicode_FromFormat("%U_%zd", base, (*leaf)++);
        PyObject *r = nm ? make_placeholder(c, o, nm) : NULL;
        Py_XDECREF(nm);
        return r;
    }
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject *res = PyTuple_Check(o) ? PyTuple_New(n) : PyList_New(n);
        if (res == NULL) {
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = wrap_arg(c, PySequence_Fast_GET_ITEM(o, i), base,
                                   leaf, 0);
            if (v == NULL) {
                Py_DECREF(res);
                return NULL;
            }
            if (PyTuple_Check(res)) {
                PyTuple_SET_ITEM(res, i, v);
            }
            else {
                PyList_SET_ITEM(res, i, v);
            }
        }
        return res;
    }
    if (PyDict_CheckExact(o)) {
        PyObject *res = PyDict_New(), *k, *v;
        Py_ssize_t pos = 0;
        if (res == NULL) {
            return NULL;
        }
        while (PyDict_Next(o, &pos, &k, &v)) {
            PyObject *m = wrap_arg(c, v, base, leaf, 0);
            if (m == NULL || PyDict_SetItem(res, k, m) < 0) {
                Py_XDECREF(m);
                Py_DECREF(res);
                return NULL;
            }
            Py_DECREF(m);
        }
        return res;
    }
    return Py_NewRef(o);
}

/* New list of the positional parameter names of fn, and *varargs name */
static PyObject *inspect_signature;   /* inspect.signature, from init */

static PyObject *
param_names(PyObject *fn, PyObject **varargs)
{
    PyObject *sig = NULL, *params = NULL, *vals = NULL,
             *res = PyList_New(0), *it = NULL, *p;
    *varargs = NULL;
    if (res == NULL) {
        return NULL;
    }
    if (!PyFunction_Check(fn) && !PyMethod_Check(fn)
        && PyObject_HasAttrString(fn, "forward")) {
        /* an nn.Module: name the placeholders after forward's parameters */
        PyObject *fwd = PyObject_GetAttrString(fn, "forward");
        sig = fwd ? PyObject_CallOneArg(inspect_signature, fwd) : NULL;
        Py_XDECREF(fwd);
    }
    else {
        sig = PyObject_CallOneArg(inspect_signature, fn);
    }
    params = sig ? PyObject_GetAttrString(sig, "parameters") : NULL;
    vals = params ? PyObject_CallMethod(params, "values", NULL) : NULL;
    it = vals ? PyObject_GetIter(vals) : NULL;
    while (it && (p = PyIter_Next(it)) != NULL) {
        PyObject *kind = PyObject_GetAttrString(p, "kind");
        PyObject *name = PyObject_GetAttrString(p, "name");
        long k = kind ? PyLong_AsLong(kind) : -1;
        if (name != NULL && (k == 0 || k == 1)) {
            PyList_Append(res, name);
        }
        else if (name != NULL && k == 2 && *varargs == NULL) {
            *varargs = Py_NewRef(name);
        }
        Py_XDECREF(kind);
        Py_XDECREF(name);
        Py_DECREF(p);
    }
    PyErr_Clear();
    Py_XDECREF(sig);
    Py_XDECREF(params);
    Py_XDECREF(vals);
    Py_XDECREF(it);
    return res;
}

/* The first node feeding the output whose sample failed, or NULL. */
static StaxNode *
failed_output_input(StaxGraph *g, StaxNode *out)
{
    PyObject *live = PySet_New(NULL);
    StaxNode *bad = NULL;
    Py_ssize_t n = PyList_GET_SIZE(g->nodes);
    if (live == NULL || PySet_Add(live, (PyObject *)out) < 0) {
        Py_XDECREF(live);
        return NULL;
    }
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        StaxNode *m = (StaxNode *)PyList_GET_ITEM(g->nodes, i);
        PyObject *ins;
        if (PySet_Contains(live, (PyObject *)m) != 1) {
            continue;
        }
        if (m != out && m->op != STAX_NODE_PLACEHOLDER
            && PyDict_GetItemString(m->meta, "val") == NULL) {
            bad = m;
        }
        ins = PyDict_New();
        if (ins && stax_graph_collect_nodes(m->args, ins) == 0
            && stax_graph_collect_nodes(m->kwargs, ins) == 0) {
            PyObject *k, *v;
            Py_ssize_t pos = 0;
            while (PyDict_Next(ins, &pos, &k, &v)) {
                PySet_Add(live, k);
            }
        }
        Py_XDECREF(ins);
    }
    PyErr_Clear();
    Py_DECREF(live);
    return bad;
}

/* ------------------------------------------------------------------ */
/* TraceResult                                                         */

typedef struct {
    PyObject_HEAD
    PyObject *graph_module;
    PyObject *gates;
    PyObject *shape_reads;
    PyObject *replay;
    PyObject *mutated_inputs;
    PyObject *constants;
    PyObject *unrecorded_writes;
    PyObject *stale_reads;
    PyObject *output_named;
    PyObject *graph_breaks;
    PyObject *eager_samples;
    PyObject *grad_enabled_at;
    int replay_copies_inputs;
    char writes_unrestorable;
    Py_ssize_t deferred_samples;
} TraceResult;

static int
tres_traverse(TraceResult *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->graph_module);
    Py_VISIT(self->gates);
    Py_VISIT(self->shape_reads);
    Py_VISIT(self->replay);
    Py_VISIT(self->mutated_inputs);
    Py_VISIT(self->constants);
    Py_VISIT(self->unrecorded_writes);
    Py_VISIT(self->stale_reads);
    Py_VISIT(self->output_named);
    Py_VISIT(self->graph_breaks);
    Py_VISIT(self->eager_samples);
    Py_VISIT(self->grad_enabled_at);
    return 0;
}

static int
tres_clear(TraceResult *self)
{
    Py_CLEAR(self->graph_module);
    Py_CLEAR(self->gates);
    Py_CLEAR(self->shape_reads);
    Py_CLEAR(self->replay);
    Py_CLEAR(self->mutated_inputs);
    Py_CLEAR(self->constants);
    Py_CLEAR(self->unrecorded_writes);
    Py_CLEAR(self->stale_reads);
    Py_CLEAR(self->output_named);
    Py_CLEAR(self->graph_breaks);
    Py_CLEAR(self->eager_samples);
    Py_CLEAR(self->grad_enabled_at);
    return 0;
}

static void
tres_dealloc(TraceResult *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    tres_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMemberDef tres_members[] = {
    {"graph_module", T_OBJECT, offsetof(TraceResult, graph_module), READONLY,
     "the captured GraphModule"},
    {"gates", T_OBJECT, offsetof(TraceResult, gates), READONLY,
     "[(node, kind, sample value)] in encounter order"},
    {"shape_reads", T_OBJECT, offsetof(TraceResult, shape_reads), READONLY,
     "[(placeholder index, dim)]: gamma_s"},
    {"replay", T_OBJECT, offsetof(TraceResult, replay), READONLY,
     "guard replay GraphModule (Algorithm 3.1, before any DCE)"},
    {"mutated_inputs", T_OBJECT, offsetof(TraceResult, mutated_inputs),
     READONLY, "placeholder indices mutated in place"},
    {"constants", T_OBJECT, offsetof(TraceResult, constants), READONLY,
     "{get_attr name: tensor held by reference}"},
    {"replay_copies_inputs", T_BOOL, offsetof(TraceResult,
                                               replay_copies_inputs),
     READONLY, "True: the replay writes inputs that alias each other; run "
     "it on _C._trace_stand_ins(inputs) (copies keeping the aliasing)"},
    {"unrecorded_writes", T_OBJECT, offsetof(TraceResult, unrecorded_writes),
     READONLY, "[str]: the caller's tensors fn wrote in place outside the "
     "graph (eager ops on tensors it did not lift), each 'a tensor of shape "
     "... at file:line'; the trace undid them, no node replays them"},
    {"stale_reads", T_OBJECT, offsetof(TraceResult, stale_reads), READONLY,
     "[str]: the caller's tensors held as constants that fn read with an "
     "untraced (eager) op and that a recorded in-place op writes, each 'a "
     "tensor of shape ... at file:line': the value read is the trace's, "
     "stale once a call's write changes the tensor"},
    {"output_named", T_OBJECT, offsetof(TraceResult, output_named), READONLY,
     "None, or where fn's output holds named tuples (torch.return_types "
     "of topk, sort, max(dim)...): (type, (spec of each item)) for a tuple "
     "or list, (dict, {key: spec}) for a dict, None for a part without "
     "one. The graph's output flattens them to tuples; the driver rebuilds "
     "them (compiler/_aliasing.py, with_named_outputs)"},
    {"graph_breaks", T_OBJECT, offsetof(TraceResult, graph_breaks), READONLY,
     "[str]: statements of fn the compiled program cannot replay (t.data = "
     "v of an input, a lifted tensor or one requiring grad), each 'what at "
     "file:line': the version runs eagerly, as torch.compile's graph break"},
    {"writes_unrestorable", T_BOOL, offsetof(TraceResult, writes_unrestorable),
     READONLY, "True: some such write bypassed the journal and could not be "
     "undone"},
    {"deferred_samples", T_PYSSIZET, offsetof(TraceResult, deferred_samples),
     READONLY, "storages of sample values (stand-ins' copies included) that "
     "trace(lazy=True) never had to compute"},
    {"grad_enabled_at", T_OBJECT, offsetof(TraceResult, grad_enabled_at), READONLY,
     "None, or for a trace begun with grad off: 'file:line in fn: source' of the "
     "first value the function computed with grad turned on (enable_grad) that "
     "requires grad; the graph does not say which values do"},
    {"eager_samples", T_OBJECT, offsetof(TraceResult, eager_samples), READONLY,
     "trace(lazy=True): the names of the nodes whose sample was computed "
     "when they were recorded (no metadata rule, a write, a constant view), "
     "in order; () without lazy"},
    {NULL},
};

static PyType_Slot tres_slots[] = {
    {Py_tp_dealloc, tres_dealloc},
    {Py_tp_traverse, tres_traverse},
    {Py_tp_clear, tres_clear},
    {Py_tp_members, tres_members},
    {Py_tp_doc, "Result of tensorplay._C.trace."},
    {0, NULL},
};

static PyType_Spec tres_spec = {
    .name = "tensorplay._C.TraceResult",
    .basicsize = sizeof(TraceResult),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = tres_slots,
};

/* ------------------------------------------------------------------ */
/* trace()                                                             */

static PyObject *
py_trace(PyObject *mod, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fn", "args", "kwargs", "names", "lazy", "symenv", NULL};
    PyObject *fn, *a = NULL, *kw = Py_None, *names = Py_None, *symenv = Py_None;
    int lazy = 0;
    (void)mod;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OOpO:trace", kwlist, &fn,
                                     &a, &kw, &names, &lazy, &symenv)) {
        return NULL;
    }
    return stax_trace_run(fn, a, kw, names, lazy, symenv);
}

/* Stages of stax_trace_run; each returns NULL/-1 with an exception set. */

/* the placeholder name of positional argument i: names[i], else the
 * parameter's name, else <varargs>_<k> / arg_<k> (new reference) */
static PyObject *
arg_name(PyObject *names, PyObject *pnames, PyObject *varargs, Py_ssize_t i)
{
    PyObject *base;
    if (names != Py_None && PySequence_Check(names) && i < PySequence_Size(names)) {
        base = PySequence_GetItem(names, i);
        if (base != NULL && !PyUnicode_Check(base)) {
            Py_SETREF(base, PyObject_Str(base));
        }
        return base;
    }
    if (i < PyList_GET_SIZE(pnames)) {
        return Py_NewRef(PyList_GET_ITEM(pnames, i));
    }
    return PyUnicode_FromFormat("%s_%zd", varargs ? PyUnicode_AsUTF8(varargs) : "arg",
                                i - PyList_GET_SIZE(pnames));
}

/* placeholders: the tensor leaves of args then kwargs, depth first; the
 * proxied arguments into *pargs / *pkw */
static int
wrap_inputs(ph_ctx *c, PyObject *fn, PyObject *targs, PyObject *tkw, PyObject *names,
            PyObject **pargs, PyObject **pkw)
{
    PyObject *varargs = NULL, *pnames = param_names(fn, &varargs);
    PyObject *k, *v;
    Py_ssize_t pos = 0, na = PyTuple_GET_SIZE(targs);
    int rc = -1;
    if (pnames == NULL || (*pargs = PyTuple_New(na)) == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        Py_ssize_t leaf = 0;
        PyObject *base = arg_name(names, pnames, varargs, i), *w;
        if (base == NULL) {
            goto done;
        }
        w = wrap_arg(c, PyTuple_GET_ITEM(targs, i), base, &leaf, 1);
        Py_DECREF(base);
        if (w == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(*pargs, i, w);
    }
    if ((*pkw = PyDict_New()) == NULL) {
        goto done;
    }
    while (PyDict_Next(tkw, &pos, &k, &v)) {
        Py_ssize_t leaf = 0;
        PyObject *w = wrap_arg(c, v, k, &leaf, 1);
        if (w == NULL || PyDict_SetItem(*pkw, k, w) < 0) {
            Py_XDECREF(w);
            goto done;
        }
        Py_DECREF(w);
    }
    rc = 0;
done:
    Py_XDECREF(pnames);
    Py_XDECREF(varargs);
    return rc;
}

/* run fn on the proxies, its side effects isolated (module state, the
 * generator, constants it wrote restored): its result, new reference */
static PyObject *
run_isolated(StaxTracer *tr, PyObject *fn, PyObject *pargs, PyObject *pkw)
{
    StaxTracer *prev = current;
    PyObject *rng = stax_trace_rng_save(), *hooks = NULL, *out = NULL;
    StaxTracer *jsaved = NULL;
    hooks = stax_trace_hooks_install(tr);
    if (hooks == NULL) {
        goto done;
    }
    current = tr;
    stax_trace_journal_begin(tr, &jsaved);
    out = PyObject_Call(fn, pargs, pkw);
    stax_trace_journal_end(tr, jsaved);
    if (tr->lazy_error != NULL) {
        /* a deferred sample the write hook had to fill failed: eager
         * raised that error where the node ran */
        Py_CLEAR(out);
        PyErr_Clear();
        PyErr_SetObject((PyObject *)Py_TYPE(tr->lazy_error), tr->lazy_error);
        Py_CLEAR(tr->lazy_error);
    }
    current = prev;
    stax_trace_hooks_remove(hooks);
    Py_CLEAR(hooks);
    if (out == NULL) {
        /* the user's exception, unchanged, unless a call before it failed
         * on the sample: eager stops there (a deferred error the trace
         * went past), so that error is the one fn raises */
        PyObject *et, *ev, *tb;
        StaxNode *first = stax_trace_first_failed(tr->graph);
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        stax_trace_rng_restore(rng);
        if (first != NULL && ev != NULL) {
            /* already that error (raised as itself, or as the cause of the
             * tracer's "value is needed" wording): keep it */
            PyObject *se = PyDict_GetItemString(first->meta, "sample_error");
            PyObject *cause = PyException_GetCause(ev);
            if (ev == se || cause == se) {
                first = NULL;
            }
            Py_XDECREF(cause);
        }
        if (first != NULL && PyErr_GivenExceptionMatches(et, PyExc_Exception)) {
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(tb);
            stax_trace_raise_original(first);
        }
        else {
            PyErr_Restore(et, ev, tb);
        }
        goto done;
    }
    stax_trace_rng_restore(rng);
    if (PyErr_Occurred()) {
        Py_CLEAR(out);
        goto done;
    }
    if (PyGen_Check(out) || PyCoro_CheckExact(out) || PyAsyncGen_CheckExact(out)) {
        PyObject *r = PyObject_CallMethod(out, "close", NULL);
        Py_XDECREF(r);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "tracing: %R returned a %s object: generator and async "
                     "functions cannot be captured as one graph", fn,
                     Py_TYPE(out)->tp_name);
        Py_CLEAR(out);
    }
done:
    current = prev;
    stax_trace_hooks_remove(hooks);
    Py_XDECREF(hooks);
    Py_XDECREF(rng);
    return out;
}

int
stax_trace_graph_break(StaxTracer *tr, const char *what)
{
    PyObject *where = stax_trace_user_stack(), *e;
    int rc;
    if (where == NULL) {
        return -1;
    }
    e = PyUnicode_FromFormat("%s at %S", what, where);
    Py_DECREF(where);
    if (e == NULL) {
        return -1;
    }
    rc = PyList_Append(tr->graph_breaks, e);
    Py_DECREF(e);
    return rc;
}

static int
is_named_tuple(PyObject *o)
{
    PyObject *f;
    if (!PyTuple_Check(o) || PyTuple_CheckExact(o)) {
        return 0;
    }
    f = PyObject_GetAttrString((PyObject *)Py_TYPE(o), "_fields");
    if (f == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(f);
    return 1;
}

/* where o holds named tuples (TraceResult.output_named), new reference;
 * None for a part without one, NULL on error. The walk is the graph
 * room's (exact tuples, lists and dicts) plus named tuples. */
static PyObject *
named_spec(PyObject *o, int depth)
{
    int nt = is_named_tuple(o), any = nt;
    if (depth > 64) {
        Py_RETURN_NONE;
    }
    if (StaxProxy_Check(o)) {
        /* one node giving a named tuple (x.max(1), x.median(1)) */
        PyObject *v = PyDict_GetItemString(((StaxProxy *)o)->node->meta, "val");
        PyObject *kids;
        if (v == NULL || !is_named_tuple(v)) {
            Py_RETURN_NONE;
        }
        kids = PyTuple_New(PyTuple_GET_SIZE(v));
        for (Py_ssize_t i = 0; kids != NULL && i < PyTuple_GET_SIZE(v); i++) {
            PyTuple_SET_ITEM(kids, i, Py_NewRef(Py_None));
        }
        return kids != NULL ? Py_BuildValue("(ON)", (PyObject *)Py_TYPE(v), kids) : NULL;
    }
    if (nt || PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
        PyObject *seq = PySequence_Fast(o, "output");
        Py_ssize_t n = seq != NULL ? PySequence_Fast_GET_SIZE(seq) : 0;
        PyObject *kids = seq != NULL ? PyTuple_New(n) : NULL;
        for (Py_ssize_t i = 0; kids != NULL && i < n; i++) {
            PyObject *c = named_spec(PySequence_Fast_GET_ITEM(seq, i), depth + 1);
            if (c == NULL) {
                Py_CLEAR(kids);
                break;
            }
            any |= c != Py_None;
            PyTuple_SET_ITEM(kids, i, c);
        }
        Py_XDECREF(seq);
        if (kids == NULL) {
            return NULL;
        }
        if (!any) {
            Py_DECREF(kids);
            Py_RETURN_NONE;
        }
        return Py_BuildValue("(ON)", (PyObject *)Py_TYPE(o), kids);
    }
    if (PyDict_CheckExact(o)) {
        PyObject *d = PyDict_New(), *k, *v;
        Py_ssize_t pos = 0;
        while (d != NULL && PyDict_Next(o, &pos, &k, &v)) {
            PyObject *c = named_spec(v, depth + 1);
            if (c == NULL || (c != Py_None && PyDict_SetItem(d, k, c) < 0)) {
                Py_XDECREF(c);
                Py_CLEAR(d);
                break;
            }
            Py_DECREF(c);
        }
        if (d == NULL || PyDict_GET_SIZE(d) == 0) {
            Py_XDECREF(d);
            return d == NULL ? NULL : Py_NewRef(Py_None);
        }
        return Py_BuildValue("(ON)", (PyObject *)&PyDict_Type, d);
    }
    Py_RETURN_NONE;
}

/* the output node over fn's result; a value that failed on the sample and
 * reaches the output raises the sample's error */
static int
record_output(StaxTracer *tr, PyObject *out)
{
    PyObject *onodes = stax_trace_map_args(tr, out, 0, NULL);
    PyObject *nm = onodes ? PyUnicode_FromString("output") : NULL;
    PyObject *on = nm ? PyObject_CallMethodOneArg((PyObject *)tr->graph, nm, onodes) : NULL;
    StaxNode *bad;
    Py_XDECREF(nm);
    Py_XDECREF(onodes);
    if (on == NULL) {
        return -1;
    }
    bad = failed_output_input(tr->graph, (StaxNode *)on);
    Py_DECREF(on);
    Py_CLEAR(tr->out_named);
    tr->out_named = named_spec(out, 0);
    if (tr->out_named == NULL) {
        return -1;
    }
    if (bad != NULL) {
        stax_trace_raise_original(bad);
        return -1;
    }
    return stax_trace_demote_constants(tr);
}

/* indices of the inputs whose storage the trace wrote (version moved) */
static PyObject *
mutated_inputs(PyObject *versions)
{
    PyObject *mutated = PyList_New(0);
    for (Py_ssize_t i = 0; mutated != NULL && i < PyList_GET_SIZE(versions); i++) {
        PyObject *e = PyList_GET_ITEM(versions, i);
        StaxTensor *si = (StaxTensor *)PyTuple_GET_ITEM(e, 0);
        unsigned long long v0 = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(e, 1));
        if (si->storage->version != v0) {
            PyObject *ix = PyLong_FromSsize_t(i);
            if (ix == NULL || PyList_Append(mutated, ix) < 0) {
                Py_CLEAR(mutated);
            }
            Py_XDECREF(ix);
        }
    }
    return mutated;
}

/* the TraceResult of a finished trace */
static PyObject *
trace_result(StaxTracer *tr, PyObject *versions)
{
    PyObject *mutated = mutated_inputs(versions), *replay = NULL, *gm = NULL, *gates = NULL;
    PyObject *root = NULL, *res = NULL;
    TraceResult *tres = NULL;
    int copies_inputs = 0;
    replay = mutated ? stax_trace_extract_replay(tr, tr->constants, &copies_inputs) : NULL;
    root = replay ? Py_BuildValue("(OO)", tr->constants, tr->graph) : NULL;
    gm = root ? PyObject_Call((PyObject *)StaxGraphModule_Type, root, NULL) : NULL;
    gates = gm ? PyList_GetSlice(tr->gates, 0, PY_SSIZE_T_MAX) : NULL;
    tres = gates ? PyObject_GC_New(TraceResult, TraceResult_Type) : NULL;
    if (tres == NULL) {
        goto done;
    }
    tres->graph_module = Py_NewRef(gm);
    tres->gates = Py_NewRef(gates);
    tres->shape_reads = PyList_GetSlice(tr->shape_reads, 0, PY_SSIZE_T_MAX);
    tres->replay = Py_NewRef(replay);
    tres->mutated_inputs = Py_NewRef(mutated);
    tres->constants = PyDict_Copy(tr->constants);
    tres->replay_copies_inputs = (char)copies_inputs;
    tres->deferred_samples = tr->lazy != NULL ? PyDict_GET_SIZE(tr->lazy) : 0;
    tres->unrecorded_writes = PyList_AsTuple(tr->unrecorded);
    tres->stale_reads = PyList_AsTuple(tr->stale_reads);
    tres->output_named = Py_NewRef(tr->out_named != NULL ? tr->out_named : Py_None);
    tres->graph_breaks = PyList_AsTuple(tr->graph_breaks);
    tres->eager_samples = tr->eager_runs != NULL ? PyList_AsTuple(tr->eager_runs)
                                                 : PyTuple_New(0);
    tres->writes_unrestorable = (char)tr->unrestorable;
    tres->grad_enabled_at = Py_NewRef(tr->grad_inside != NULL ? tr->grad_inside : Py_None);
    PyObject_GC_Track(tres);
    if (tres->shape_reads == NULL || tres->constants == NULL
        || tres->unrecorded_writes == NULL || tres->stale_reads == NULL
        || tres->graph_breaks == NULL || tres->eager_samples == NULL) {
        Py_CLEAR(tres);
        goto done;
    }
    res = (PyObject *)tres;
done:
    Py_XDECREF(mutated);
    Py_XDECREF(replay);
    Py_XDECREF(root);
    Py_XDECREF(gm);
    Py_XDECREF(gates);
    return res;
}

PyObject *
stax_trace_run(PyObject *fn, PyObject *a, PyObject *kw, PyObject *names, int lazy,
               PyObject *symenv)
{
    PyObject *targs = NULL, *tkw = NULL, *pargs = NULL, *pkw = NULL,
             *out = NULL, *res = NULL, *versions = NULL, *extents = NULL,
             *bases = NULL;
    StaxTracer *tr = NULL, *prev = current;
    ph_ctx c;
    kw = kw != NULL ? kw : Py_None;
    names = names != NULL ? names : Py_None;
    if (StaxTensor_Type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "trace: no Tensor type");
        return NULL;
    }
    targs = PySequence_Tuple(a);
    if (targs == NULL) {
        return NULL;
    }
    tkw = kw == Py_None ? PyDict_New() : PyDict_Copy(kw);
    tr = tracer_new();
    versions = PyList_New(0);
    if (tkw == NULL || tr == NULL || versions == NULL
        || (lazy && ((tr->lazy = PyDict_New()) == NULL
                     || (tr->lazy_args = PyDict_New()) == NULL
                     || (tr->lazy_reads = PySet_New(NULL)) == NULL
                     || (tr->eager_runs = PyList_New(0)) == NULL))) {
        goto done;
    }
    if (symenv != NULL && symenv != Py_None) {
        tr->symenv = Py_NewRef(symenv);
    }
    c.tr = tr;
    c.standin_versions = versions;
    c.extents = extents = PyDict_New();
    c.bases = bases = PyDict_New();
    if (extents == NULL || bases == NULL
        || stax_trace_collect_extents(targs, extents) < 0
        || stax_trace_collect_extents(tkw, extents) < 0) {
        goto done;
    }
    tr->active = 1;
    tr->entry_depth = stax_trace_frame_depth();
    tr->grad_at_start = stax_grad_enabled();
    if (wrap_inputs(&c, fn, targs, tkw, names, &pargs, &pkw) < 0) {
        goto done;
    }
    out = run_isolated(tr, fn, pargs, pkw);
    if (out == NULL || record_output(tr, out) < 0) {
        goto done;
    }
    res = trace_result(tr, versions);
done:
    current = prev;
    if (tr != NULL) {
        tr->active = 0;
    }
    if (res == NULL && tr != NULL && tr->unrecorded != NULL && tr->journaled != NULL
        && (PyList_GET_SIZE(tr->unrecorded) > 0 || PySet_GET_SIZE(tr->journaled) > 0
            || PyDict_GET_SIZE(tr->mutations) > 0)
        && PyErr_Occurred()) {
        /* fn wrote the caller's tensors before the error (eagerly, or a
         * recorded in-place op on a lifted global or an input, sampled):
         * the journal undid that, so the driver's eager call makes the
         * writes and raises after them, as eager does */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        if (ev != NULL && PyObject_SetAttrString(ev, "_stax_unrecorded_writes", Py_True) < 0) {
            PyErr_Clear();
        }
        PyErr_Restore(et, ev, tb);
    }
    Py_XDECREF(targs);
    Py_XDECREF(tkw);
    Py_XDECREF(pargs);
    Py_XDECREF(pkw);
    Py_XDECREF(out);
    Py_XDECREF(versions);
    Py_XDECREF(extents);
    Py_XDECREF(bases);
    Py_XDECREF(tr);
    return res;
}

static PyObject *
py_gate(PyObject *mod, PyObject *v)
{
    if (StaxProxy_Check(v)) {
        StaxProxy *p = (StaxProxy *)v;
        /* the value stays a tensor of the graph: no data gate, no node */
        return stax_trace_proxy_new(p->tracer, p->node);
    }
    return Py_NewRef(v);
}

static PyObject *
py_is_tracing(PyObject *mod, PyObject *unused)
{
    return PyBool_FromLong(current != NULL);
}

/* _trace_stand_ins(tensors) -> list: layout-keeping copies of the tensors
 * (the stand-ins of tracing), tensors that share a storage sharing one
 * copied storage; used to run a guard replay that writes aliased inputs. */
PyObject *
stax_trace_stand_ins(PyObject *seq)
{
    PyObject *fast = PySequence_Fast(seq, "_trace_stand_ins expects a sequence");
    PyObject *ext = PyDict_New(), *bases = PyDict_New(), *res = NULL;
    Py_ssize_t n;
    if (fast == NULL || ext == NULL || bases == NULL) {
        goto done;
    }
    n = PySequence_Fast_GET_SIZE(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (stax_trace_collect_extents(PySequence_Fast_GET_ITEM(fast, i),
                                       ext) < 0) {
            goto done;
        }
    }
    res = PyList_New(n);
    for (Py_ssize_t i = 0; res != NULL && i < n; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(fast, i);
        PyObject *si = stax_trace_is_tensor(t)
            ? stax_trace_stand_in((StaxTensor *)t, ext, bases, NULL)
            : Py_NewRef(t);
        if (si == NULL) {
            Py_CLEAR(res);
            break;
        }
        PyList_SET_ITEM(res, i, si);
    }
done:
    Py_XDECREF(fast);
    Py_XDECREF(ext);
    Py_XDECREF(bases);
    return res;
}

static PyObject *
py_stand_ins(PyObject *mod, PyObject *seq)
{
    (void)mod;
    return stax_trace_stand_ins(seq);
}

static PyObject *
py_snapshot_bytes(PyObject *mod, PyObject *noargs)
{
    (void)mod;
    (void)noargs;
    return PyLong_FromUnsignedLongLong(stax_trace_snapshot_bytes());
}

/* _trace_external(t) -> t, or its proxy: t wraps memory that exists
 * outside the trace (tp.from_numpy(arr), tp.as_tensor(arr) without a copy),
 * which the user may write between calls. While this thread traces, its
 * proxy is t held by reference (a get_attr), so what the function computes
 * from it is recorded and reads the memory on every call (it ran at trace
 * time, and its result was a stale constant of the version). */
static PyObject *
py_trace_external(PyObject *mod, PyObject *t)
{
    PyObject *node, *p;
    (void)mod;
    if (current == NULL || !current->active || stax_trace_sampling > 0
        || !stax_trace_is_tensor(t)) {
        return Py_NewRef(t);    /* (a recorded op's own run: the real tensor) */
    }
    node = stax_trace_const_node(current, t);
    if (node == NULL) {
        return NULL;
    }
    p = stax_trace_proxy_new(current, (StaxNode *)node);
    Py_DECREF(node);
    return p;
}

static PyMethodDef trace_functions[] = {
    {"_trace_external", (PyCFunction)py_trace_external, METH_O,
     "_trace_external(t) -> t, or while tracing the proxy of t held by reference "
     "(memory that exists outside the trace: tp.from_numpy)"},
    {"_trace_stand_ins", (PyCFunction)py_stand_ins, METH_O,
     "_trace_stand_ins(tensors) -> copies keeping layout and aliasing"},
    {"trace", (PyCFunction)(void (*)(void))py_trace,
     METH_VARARGS | METH_KEYWORDS,
     "trace(fn, args, kwargs=None, names=None, lazy=False) -> TraceResult\n\n"
     "lazy=True defers the nodes' sample values: meta['val'] then holds\n"
     "eager's shape, dtype and strides, its elements computed only where\n"
     "the traced code asked for them (gates, printing, writes, ops that\n"
     "read values)."},
    {"gate", (PyCFunction)py_gate, METH_O,
     "gate(v): keep a 0-d tensor value dynamic (no specialization)."},
    {"is_tracing", (PyCFunction)py_is_tracing, METH_NOARGS, NULL},
    {"_trace_snapshot_bytes", (PyCFunction)py_snapshot_bytes, METH_NOARGS,
     "bytes of tensors this process's traces copied to undo their writes"},
    {"_set_trace_decomposition", (PyCFunction)stax_trace_set_decomposition, METH_VARARGS,
     "_set_trace_decomposition(func, fn|None): run fn on the proxies instead of "
     "recording func (fn may return NotImplemented)"},
    {NULL},
};

int
stax_trace_tracer_init(PyObject *m)
{
    PyObject *lc, *file;
    StaxTracer_Type = (PyTypeObject *)PyType_FromSpec(&tracer_spec);
    TraceResult_Type = (PyTypeObject *)PyType_FromSpec(&tres_spec);
    if (StaxTracer_Type == NULL || TraceResult_Type == NULL
        || stax_trace_isolation_init(m) < 0) {
        return -1;
    }
    lc = PyImport_ImportModule("linecache");
    if (lc == NULL) {
        return -1;
    }
    linecache_getline = PyObject_GetAttrString(lc, "getline");
    Py_DECREF(lc);
    if (linecache_getline == NULL) {
        return -1;
    }
    lc = PyImport_ImportModule("inspect");
    if (lc == NULL) {
        return -1;
    }
    inspect_signature = PyObject_GetAttrString(lc, "signature");
    Py_DECREF(lc);
    if (inspect_signature == NULL) {
        return -1;
    }
    file = PyModule_GetFilenameObject(m);
    if (file == NULL) {
        PyErr_Clear();
    }
    else {
        PyObject *osp = PyImport_ImportModule("os.path");
        PyObject *d = osp ? PyObject_CallMethod(osp, "dirname", "O", file)
                          : NULL;
        Py_XDECREF(osp);
        Py_DECREF(file);
        if (d == NULL) {
            return -1;
        }
        stax_trace_pkg_dir = PyUnicode_FromFormat("%U/", d);
        Py_DECREF(d);
        if (stax_trace_pkg_dir == NULL) {
            return -1;
        }
    }
    if (PyModule_AddObjectRef(m, "TraceResult",
                              (PyObject *)TraceResult_Type) < 0
        || PyModule_AddObjectRef(m, "Tracer", (PyObject *)StaxTracer_Type) < 0
        || PyModule_AddFunctions(m, trace_functions) < 0) {
        return -1;
    }
    return 0;
}
