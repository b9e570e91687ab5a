/* The hybrid tracer: placeholders (stand-ins: isolation.c), node
 * recording with run-time sampling (seed 3.3), data gates and shape reads,
 * side-effect isolation (3.7), the guard replay subgraph (Algorithm 3.1),
 * tensorplay._C.trace / gate / is_tracing. */
#include "trace/trace_internal.h"
#include "structmember.h"
#include <string.h>

PyTypeObject *StaxTracer_Type = NULL;
static PyTypeObject *TraceResult_Type = NULL;
static StaxTracer *current = NULL;     /* innermost running trace */
PyObject *stax_trace_pkg_dir = NULL;       /* ".../tensorplay/" */
static PyObject *linecache_getline = NULL;

int
stax_trace_active(void)
{
    return current != NULL;
}

static int
is_tensor(PyObject *o)
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
    Py_VISIT(self->const_snap);
    Py_VISIT(self->mutations);
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
    Py_CLEAR(self->const_snap);
    Py_CLEAR(self->mutations);
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
    tr->const_snap = PyList_New(0);
    tr->mutations = PyDict_New();
    tr->active = 0;
    PyObject_GC_Track(tr);
    if (!tr->graph || !tr->gates || !tr->shape_reads || !tr->shape_seen
        || !tr->ph_index || !tr->const_nodes || !tr->constants || !tr->const_snap
        || !tr->mutations) {
        Py_DECREF(tr);
        return NULL;
    }
    return tr;
}

/* ------------------------------------------------------------------ */
/* user source line                                                    */

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
/* gates and shape reads                                               */

/* 1 when n depends on an input (placeholder), a constant held by reference
 * (get_attr) or a random draw; 0 when it is a function of literals only */
static int
depends_on_inputs(StaxNode *n)
{
    PyObject *seen = PySet_New(NULL), *stack = PyList_New(0);
    int res = -1;
    if (seen == NULL || stack == NULL
        || PyList_Append(stack, (PyObject *)n) < 0) {
        goto done;
    }
    res = 0;
    while (res == 0 && PyList_GET_SIZE(stack) > 0) {
        Py_ssize_t last = PyList_GET_SIZE(stack) - 1;
        StaxNode *m = (StaxNode *)Py_NewRef(PyList_GET_ITEM(stack, last));
        PyObject *mark, *ins = NULL, *k, *v;
        Py_ssize_t pos = 0;
        PyList_SetSlice(stack, last, last + 1, NULL);
        if (PySet_Contains(seen, (PyObject *)m) != 0
            || PySet_Add(seen, (PyObject *)m) < 0) {
            Py_DECREF(m);
            continue;
        }
        mark = PyDict_GetItemString(m->meta, "creation");
        if (m->op == STAX_NODE_PLACEHOLDER || m->op == STAX_NODE_GET_ATTR
            || (mark != NULL && PyUnicode_Check(mark))) {
            res = 1;
        }
        ins = PyDict_New();
        if (ins == NULL || stax_graph_collect_nodes(m->args, ins) < 0
            || stax_graph_collect_nodes(m->kwargs, ins) < 0) {
            res = -1;
        }
        while (res == 0 && PyDict_Next(ins, &pos, &k, &v)) {
            if (PyList_Append(stack, k) < 0) {
                res = -1;
            }
        }
        Py_XDECREF(ins);
        Py_DECREF(m);
    }
done:
    Py_XDECREF(seen);
    Py_XDECREF(stack);
    return res;
}

int
stax_trace_add_gate(StaxTracer *tr, StaxNode *n, const char *kind,
                    PyObject *value)
{
    PyObject *t;
    int rc = depends_on_inputs(n);
    if (rc <= 0) {
        return rc;    /* a value of literals only: no gate needed */
    }
    t = Py_BuildValue("(OsO)", n, kind, value);
    if (t == NULL) {
        return -1;
    }
    rc = PyList_Append(tr->gates, t);
    Py_DECREF(t);
    return rc;
}

static int
note_shape(StaxTracer *tr, PyObject *idx, int dim)
{
    PyObject *t = Py_BuildValue("(Oi)", idx, dim);
    int r;
    if (t == NULL) {
        return -1;
    }
    r = PySet_Contains(tr->shape_seen, t);
    if (r == 0) {
        r = PySet_Add(tr->shape_seen, t);
        if (r == 0) {
            r = PyList_Append(tr->shape_reads, t);
        }
    }
    Py_DECREF(t);
    return r < 0 ? -1 : 0;
}

static int
note_all_dims(StaxTracer *tr, StaxNode *ph, PyObject *idx)
{
    PyObject *v = PyDict_GetItemString(ph->meta, "val");
    if (v == NULL || !is_tensor(v)) {
        return 0;
    }
    for (int d = 0; d < ((StaxTensor *)v)->ndim; d++) {
        if (note_shape(tr, idx, d) < 0) {
            return -1;
        }
    }
    return 0;
}

int
stax_trace_shape_read(StaxTracer *tr, StaxNode *n, int dim)
{
    PyObject *idx = PyDict_GetItem(tr->ph_index, (PyObject *)n);
    PyObject *seen, *stack;
    int rc = -1;
    if (idx != NULL) {
        return dim >= 0 ? note_shape(tr, idx, dim) : note_all_dims(tr, n, idx);
    }
    /* a derived value: its shape depends on every placeholder upstream
     * (conservative: all of their dims) */
    seen = PySet_New(NULL);
    stack = PyList_New(0);
    if (seen == NULL || stack == NULL || PyList_Append(stack,
                                                       (PyObject *)n) < 0) {
        goto done;
    }
    while (PyList_GET_SIZE(stack) > 0) {
        Py_ssize_t last = PyList_GET_SIZE(stack) - 1;
        StaxNode *m = (StaxNode *)Py_NewRef(PyList_GET_ITEM(stack, last));
        PyObject *ins, *k, *v;
        Py_ssize_t pos = 0;
        int r;
        if (PyList_SetSlice(stack, last, last + 1, NULL) < 0) {
            Py_DECREF(m);
            goto done;
        }
        r = PySet_Contains(seen, (PyObject *)m);
        if (r != 0 || PySet_Add(seen, (PyObject *)m) < 0) {
            Py_DECREF(m);
            if (r < 0) {
                goto done;
            }
            continue;
        }
        idx = PyDict_GetItem(tr->ph_index, (PyObject *)m);
        if (idx != NULL && note_all_dims(tr, m, idx) < 0) {
            Py_DECREF(m);
            goto done;
        }
        ins = PyDict_New();
        if (ins == NULL || stax_graph_collect_nodes(m->args, ins) < 0
            || stax_graph_collect_nodes(m->kwargs, ins) < 0) {
            Py_XDECREF(ins);
            Py_DECREF(m);
            goto done;
        }
        while (PyDict_Next(ins, &pos, &k, &v)) {
            if (PyList_Append(stack, k) < 0) {
                Py_DECREF(ins);
                Py_DECREF(m);
                goto done;
            }
        }
        Py_DECREF(ins);
        Py_DECREF(m);
    }
    rc = 0;
done:
    Py_XDECREF(seen);
    Py_XDECREF(stack);
    return rc;
}

/* ------------------------------------------------------------------ */
/* recording                                                           */

PyObject *
stax_trace_const_node(StaxTracer *tr, PyObject *t)
{
    PyObject *key = PyLong_FromVoidPtr(t), *n, *name;
    if (key == NULL) {
        return NULL;
    }
    n = PyDict_GetItemWithError(tr->const_nodes, key);
    if (n != NULL || PyErr_Occurred()) {
        Py_DECREF(key);
        return Py_XNewRef(n);
    }
    name = PyUnicode_FromFormat("_tensor_constant%zd",
                                PyDict_GET_SIZE(tr->constants));
    if (name == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    n = (PyObject *)stax_graph_create_node(tr->graph, STAX_NODE_GET_ATTR,
                                           name, NULL, NULL, NULL);
    if (n == NULL || PyDict_SetItemString(((StaxNode *)n)->meta, "val", t) < 0
        || PyDict_SetItem(tr->constants, name, t) < 0
        || PyDict_SetItem(tr->const_nodes, key, n) < 0
        || stax_trace_snapshot_add(tr->const_snap, t) < 0) {
        Py_XDECREF(n);
        n = NULL;
    }
    Py_DECREF(key);
    Py_DECREF(name);
    return n;
}

/* mode 0: proxies -> nodes, tensors -> get_attr constants;
 * mode 1: proxies -> sample values (*missing set to the node lacking one) */
static PyObject *
map_args(StaxTracer *tr, PyObject *o, int mode, StaxNode **missing)
{
    if (StaxProxy_Check(o)) {
        StaxProxy *p = (StaxProxy *)o;
        if (p->tracer != tr) {
            PyErr_Format(PyExc_RuntimeError,
                         "tracing: proxy %%%U belongs to another (finished "
                         "or outer) trace", p->node->name);
            return NULL;
        }
        if (mode == 0) {
            return Py_NewRef(p->node);
        }
        PyObject *v = PyDict_GetItemString(p->node->meta, "val");
        if (v == NULL) {
            if (*missing == NULL) {
                *missing = p->node;
            }
            Py_RETURN_NONE;
        }
        return Py_NewRef(v);
    }
    if (mode == 0 && is_tensor(o)) {
        return stax_trace_const_node(tr, o);
    }
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject *res = PyTuple_Check(o) ? PyTuple_New(n) : PyList_New(n);
        if (res == NULL) {
            return NULL;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = map_args(tr, PySequence_Fast_GET_ITEM(o, i), mode,
                                   missing);
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
            PyObject *m = map_args(tr, v, mode, missing);
            if (m == NULL || PyDict_SetItem(res, k, m) < 0) {
                Py_XDECREF(m);
                Py_DECREF(res);
                return NULL;
            }
            Py_DECREF(m);
        }
        return res;
    }
    if (PySlice_Check(o)) {
        PySliceObject *s = (PySliceObject *)o;
        PyObject *a = map_args(tr, s->start, mode, missing);
        PyObject *b = a ? map_args(tr, s->stop, mode, missing) : NULL;
        PyObject *c = b ? map_args(tr, s->step, mode, missing) : NULL;
        PyObject *r = c ? PySlice_New(a, b, c) : NULL;
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        return r;
    }
    return Py_NewRef(o);
}

/* Append every tensor leaf of o (inside tuples, lists, dict values) to
 * the list `out`. */
static int
tensor_leaves(PyObject *o, PyObject *out)
{
    if (is_tensor(o)) {
        return PyList_Append(out, o);
    }
    if (PyTuple_Check(o) || PyList_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            if (tensor_leaves(PySequence_Fast_GET_ITEM(o, i), out) < 0) {
                return -1;
            }
        }
    }
    else if (PyDict_Check(o)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(o, &pos, &k, &v)) {
            if (tensor_leaves(v, out) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* Add the address of the storage of every tensor leaf of o to `set`. */
static int
storage_keys(PyObject *o, PyObject *set)
{
    PyObject *leaves = PyList_New(0);
    int rc = leaves ? tensor_leaves(o, leaves) : -1;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(leaves); i++) {
        StaxTensor *t = (StaxTensor *)PyList_GET_ITEM(leaves, i);
        PyObject *k = PyLong_FromVoidPtr(t->storage);
        rc = (k != NULL && PySet_Add(set, k) == 0) ? 0 : -1;
        Py_XDECREF(k);
    }
    Py_XDECREF(leaves);
    return rc;
}

/* Run the node on the sample under no_grad; fills meta 'val' or
 * 'sample_error'. 0 ok (even when the sample failed), -1 internal error. */
static int
run_sample(StaxTracer *tr, StaxNode *n, PyObject *args, PyObject *kwargs)
{
    StaxNode *missing = NULL;
    PyObject *va = NULL, *vk = NULL, *res = NULL, *leaves = NULL;
    uint64_t *vers = NULL;
    Py_ssize_t nl = 0;
    int grad, rc = -1;
    va = map_args(tr, args, 1, &missing);
    vk = va ? (kwargs ? map_args(tr, kwargs, 1, &missing) : PyDict_New())
            : NULL;
    if (vk == NULL) {
        goto done;
    }
    if (missing != NULL) {
        PyObject *o = PyDict_GetItemString(missing->meta,
                                           "sample_error_origin");
        rc = PyDict_SetItemString(n->meta, "sample_error_origin",
                                  o ? o : (PyObject *)missing);
        goto done;
    }
    /* the versions of every tensor argument's storage: a node whose run
     * moves one wrote it (in place, setitem, copy_, out=, through a view) */
    leaves = PyList_New(0);
    if (leaves == NULL || tensor_leaves(va, leaves) < 0
        || tensor_leaves(vk, leaves) < 0) {
        goto done;
    }
    nl = PyList_GET_SIZE(leaves);
    vers = PyMem_Malloc(sizeof(uint64_t) * (size_t)(nl > 0 ? nl : 1));
    if (vers == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nl; i++) {
        vers[i] = ((StaxTensor *)PyList_GET_ITEM(leaves, i))->storage->version;
    }
    grad = stax_grad_enabled();
    stax_set_grad_enabled(0);
    if (n->op == STAX_NODE_CALL_METHOD) {
        PyObject *m = NULL, *rest = NULL;
        if (PyTuple_GET_SIZE(va) < 1) {
            PyErr_SetString(PyExc_TypeError, "method call without self");
        }
        else {
            m = PyObject_GetAttr(PyTuple_GET_ITEM(va, 0), n->target);
            rest = m ? PyTuple_GetSlice(va, 1, PY_SSIZE_T_MAX) : NULL;
            res = rest ? PyObject_Call(m, rest, vk) : NULL;
        }
        Py_XDECREF(m);
        Py_XDECREF(rest);
    }
    else {
        res = PyObject_Call(n->target, va, vk);
    }
    stax_set_grad_enabled(grad);
    if (nl > 0) {
        PyObject *et, *ev, *tb, *wrote = PySet_New(NULL);
        int bad = wrote == NULL;
        PyErr_Fetch(&et, &ev, &tb);
        for (Py_ssize_t i = 0; !bad && i < nl; i++) {
            StaxTensor *t = (StaxTensor *)PyList_GET_ITEM(leaves, i);
            if (t->storage->version != vers[i]) {
                PyObject *k = PyLong_FromVoidPtr(t->storage);
                bad = k == NULL || PySet_Add(wrote, k) < 0;
                Py_XDECREF(k);
            }
        }
        if (!bad && PySet_GET_SIZE(wrote) > 0) {
            PyObject *fs = PyFrozenSet_New(wrote);
            bad = fs == NULL
                  || PyDict_SetItem(tr->mutations, (PyObject *)n, fs) < 0;
            Py_XDECREF(fs);
        }
        Py_XDECREF(wrote);
        if (bad) {
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(tb);
            Py_XDECREF(res);
            res = NULL;
            goto done;
        }
        PyErr_Restore(et, ev, tb);
    }
    if (res != NULL) {
        rc = PyDict_SetItemString(n->meta, "val", res);
    }
    else {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        Py_XDECREF(tb);
        if (ev != NULL) {
            PyException_SetTraceback(ev, Py_None);
            rc = PyDict_SetItemString(n->meta, "sample_error", ev);
        }
        else {
            rc = 0;
        }
        Py_XDECREF(et);
        Py_XDECREF(ev);
    }
done:
    Py_XDECREF(va);
    Py_XDECREF(vk);
    Py_XDECREF(res);
    Py_XDECREF(leaves);
    PyMem_Free(vers);
    return rc;
}

/* 1 when n is a conversion method whose sample run returned its own
 * argument object (a no-op: same dtype, device, layout) and wrote nothing. */
static int
returns_self(StaxTracer *tr, StaxNode *n, PyObject *args)
{
    static const char *names[] = {
        "to", "type", "float", "double", "half", "bfloat16", "int", "long",
        "short", "char", "byte", "bool", "contiguous", "cpu", "type_as", NULL};
    PyObject *p, *v, *pv;
    const char *t;
    if (n->op != STAX_NODE_CALL_METHOD || !PyUnicode_Check(n->target)
        || !PyTuple_Check(args) || PyTuple_GET_SIZE(args) < 1) {
        return 0;
    }
    p = PyTuple_GET_ITEM(args, 0);
    if (!StaxProxy_Check(p) || ((StaxProxy *)p)->tracer != tr) {
        return 0;
    }
    t = PyUnicode_AsUTF8(n->target);
    if (t == NULL) {
        PyErr_Clear();
        return 0;
    }
    for (int i = 0; names[i] != NULL; i++) {
        if (strcmp(t, names[i]) == 0) {
            v = PyDict_GetItemString(n->meta, "val");
            pv = PyDict_GetItemString(((StaxProxy *)p)->node->meta, "val");
            return v != NULL && v == pv
                   && PyDict_GetItem(tr->mutations, (PyObject *)n) == NULL;
        }
    }
    return 0;
}

/* 1 when node n writes a tensor argument: an in-place method (x.add_(y),
 * x += y), a trailing-underscore function, setitem, or an out= call. */
static int
node_writes(StaxNode *n)
{
    const char *nm = NULL;
    PyObject *name = NULL;
    int r = 0;
    if (n->kwargs != NULL && PyDict_Check(n->kwargs)
        && PyDict_GetItemString(n->kwargs, "out") != NULL) {
        return 1;
    }
    if (n->op == STAX_NODE_CALL_METHOD && PyUnicode_Check(n->target)) {
        name = Py_NewRef(n->target);
    }
    else if (n->op == STAX_NODE_CALL_FUNCTION) {
        name = PyObject_GetAttrString(n->target, "__name__");
        if (name == NULL || !PyUnicode_Check(name)) {
            PyErr_Clear();
            Py_CLEAR(name);
        }
    }
    nm = name ? PyUnicode_AsUTF8(name) : NULL;
    if (nm == NULL) {
        PyErr_Clear();
    }
    else {
        size_t len = strlen(nm);
        r = !strcmp(nm, "setitem") || !strcmp(nm, "__setitem__")
            || (len > 1 && nm[0] != '_' && nm[len - 1] == '_'
                && strcmp(nm, "and_") && strcmp(nm, "or_")
                && strcmp(nm, "not_") && strcmp(nm, "is_"));
    }
    Py_XDECREF(name);
    return r;
}

PyObject *
stax_trace_record(StaxTracer *tr, stax_node_op_t op, PyObject *target,
                  PyObject *args, PyObject *kwargs)
{
    PyObject *na = NULL, *nk = NULL, *stack = NULL, *res = NULL;
    StaxNode *n = NULL;
    if (!tr->active) {
        PyErr_SetString(PyExc_RuntimeError,
                        "tracing: a proxy was used after its trace ended "
                        "(a traced tensor escaped the traced function)");
        return NULL;
    }
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) == 0) {
        kwargs = NULL;
    }
    na = map_args(tr, args, 0, NULL);
    nk = na && kwargs ? map_args(tr, kwargs, 0, NULL) : NULL;
    if (na == NULL || (kwargs && nk == NULL)) {
        goto done;
    }
    n = stax_graph_create_node(tr->graph, op, target, na, nk, NULL);
    if (n == NULL) {
        goto done;
    }
    stack = stax_trace_user_stack();
    if (stack == NULL || PyDict_SetItemString(n->meta, "stack", stack) < 0) {
        goto done;
    }
    if (run_sample(tr, n, args, kwargs) < 0) {
        goto done;
    }
    if (PyDict_GetItemString(n->meta, "val") == NULL && node_writes(n)) {
        /* a write that raised on the sample (x.add_(y) whose broadcast
         * would resize x): eager raises here, and later reads of the
         * target would see a value the graph cannot give. Raise the
         * user's error now, as eager does (try/except in fn sees it). */
        PyObject *se = PyDict_GetItemString(n->meta, "sample_error");
        /* the write did not happen: no node (fn may catch the error) */
        if (stax_graph_erase_node(tr->graph, n) < 0) {
            goto done;
        }
        if (se != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(se), se);
        }
        else {
            stax_trace_raise_deferred(n);
        }
        goto done;
    }
    if (returns_self(tr, n, args)) {
        /* x.to(x.dtype), x.float() on float32, x.contiguous() on a
         * contiguous x: eager returns x itself, so later writes through
         * the result are writes to x. The result IS the argument (sound:
         * dtype and layout are in the signature): no node. */
        if (stax_graph_erase_node(tr->graph, n) < 0) {
            goto done;
        }
        res = Py_NewRef(PyTuple_GET_ITEM(args, 0));
        goto done;
    }
    res = stax_trace_proxy_new(tr, n);
done:
    Py_XDECREF(na);
    Py_XDECREF(nk);
    Py_XDECREF(stack);
    Py_XDECREF(n);
    return res;
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
    si = stax_trace_stand_in((StaxTensor *)t, c->extents, c->bases);
    idx = si ? PyLong_FromSsize_t(PyDict_GET_SIZE(c->tr->ph_index)) : NULL;
    if (idx == NULL || PyDict_SetItemString(n->meta, "val", si) < 0
        || PyDict_SetItem(c->tr->ph_index, (PyObject *)n, idx) < 0) {
        goto error;
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
    if (is_tensor(o)) {
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
static PyObject *
param_names(PyObject *fn, PyObject **varargs)
{
    PyObject *insp = NULL, *sig = NULL, *params = NULL, *vals = NULL,
             *res = PyList_New(0), *it = NULL, *p;
    *varargs = NULL;
    if (res == NULL) {
        return NULL;
    }
    insp = PyImport_ImportModule("inspect");
    if (!PyFunction_Check(fn) && !PyMethod_Check(fn)
        && PyObject_HasAttrString(fn, "forward")) {
        /* an nn.Module: name the placeholders after forward's parameters */
        PyObject *fwd = PyObject_GetAttrString(fn, "forward");
        sig = insp && fwd ? PyObject_CallMethod(insp, "signature", "O", fwd)
                          : NULL;
        Py_XDECREF(fwd);
    }
    else {
        sig = insp ? PyObject_CallMethod(insp, "signature", "O", fn) : NULL;
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
    Py_XDECREF(insp);
    Py_XDECREF(sig);
    Py_XDECREF(params);
    Py_XDECREF(vals);
    Py_XDECREF(it);
    return res;
}

/* ------------------------------------------------------------------ */
/* replay (Algorithm 3.1)                                              */

/* Add n and every node it depends on to `needed`. */
static int
close_over(PyObject *needed, StaxNode *start)
{
    PyObject *pending = PyList_New(0);
    int r = (pending != NULL
             && PyList_Append(pending, (PyObject *)start) == 0) ? 0 : -1;
    while (r == 0 && PyList_GET_SIZE(pending) > 0) {
        Py_ssize_t last = PyList_GET_SIZE(pending) - 1;
        StaxNode *n = (StaxNode *)Py_NewRef(PyList_GET_ITEM(pending, last));
        PyList_SetSlice(pending, last, last + 1, NULL);
        r = PySet_Contains(needed, (PyObject *)n);
        if (r == 0) {
            PyObject *ins = PyDict_New(), *k, *v;
            Py_ssize_t pos = 0;
            r = (ins && PySet_Add(needed, (PyObject *)n) == 0
                 && stax_graph_collect_nodes(n->args, ins) == 0
                 && stax_graph_collect_nodes(n->kwargs, ins) == 0) ? 0 : -1;
            while (r == 0 && PyDict_Next(ins, &pos, &k, &v)) {
                r = PyList_Append(pending, k);
            }
            Py_XDECREF(ins);
        }
        else if (r == 1) {
            r = 0;
        }
        Py_DECREF(n);
    }
    Py_XDECREF(pending);
    return r;
}

/* New reference: the storages node n's run reads or makes (its sample
 * value and the sample values of its inputs), cached in `cache`. */
static PyObject *
node_touch(StaxNode *n, PyObject *cache)
{
    PyObject *t = PyDict_GetItemWithError(cache, (PyObject *)n), *ins = NULL,
             *k, *v;
    Py_ssize_t pos = 0;
    if (t != NULL || PyErr_Occurred()) {
        return Py_XNewRef(t);
    }
    t = PySet_New(NULL);
    ins = PyDict_New();
    if (t == NULL || ins == NULL
        || stax_graph_collect_nodes(n->args, ins) < 0
        || stax_graph_collect_nodes(n->kwargs, ins) < 0
        || PyDict_SetItem(ins, (PyObject *)n, Py_None) < 0) {
        goto error;
    }
    while (PyDict_Next(ins, &pos, &k, &v)) {
        PyObject *val = PyDict_GetItemString(((StaxNode *)k)->meta, "val");
        if (val != NULL && storage_keys(val, t) < 0) {
            goto error;
        }
    }
    Py_DECREF(ins);
    if (PyDict_SetItem(cache, (PyObject *)n, t) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return t;
error:
    Py_XDECREF(t);
    Py_XDECREF(ins);
    return NULL;
}

/* 1 when the storages of n's sample value meet `set`. */
static int
val_meets(StaxNode *n, PyObject *set)
{
    PyObject *val = PyDict_GetItemString(n->meta, "val"), *mine, *k;
    int r = 0;
    if (val == NULL || PySet_GET_SIZE(set) == 0) {
        return 0;
    }
    mine = PySet_New(NULL);
    if (mine == NULL || storage_keys(val, mine) < 0) {
        Py_XDECREF(mine);
        return -1;
    }
    {
        PyObject *it = PyObject_GetIter(mine);
        while (r == 0 && it != NULL && (k = PyIter_Next(it)) != NULL) {
            r = PySet_Contains(set, k);
            Py_DECREF(k);
        }
        Py_XDECREF(it);
        if (it == NULL || PyErr_Occurred()) {
            r = -1;
        }
    }
    Py_DECREF(mine);
    return r;
}

/* New reference: a `clone` call of node c appended to g2. */
static PyObject *
append_clone(PyObject *g2, PyObject *c)
{
    return PyObject_CallMethod(g2, "call_method", "s(O)", "clone", c);
}

/* Algorithm 3.1: the backward slice of the gate nodes, taken before any
 * DCE, plus the mutations it depends on. A node that wrote (in place,
 * setitem, copy_, through a view) a storage that a later node of the slice
 * reads joins the slice with everything it depends on, until nothing
 * changes; so `x.add_(1); if x.sum() > 0:` replays add_ before sum. The
 * slice must not write the caller's tensors: an input (placeholder or
 * constant) whose storage the slice writes is cloned first, and a gate
 * value that a later mutation of the slice overwrites is cloned where the
 * gate read it. Same placeholders as the graph; output = the gate values
 * in encounter order. */
static PyObject *
extract_replay(StaxTracer *tr, PyObject *consts, int *copies_inputs)
{
    PyObject *needed = PySet_New(NULL), *env = PyDict_New(),
             *touch = PyDict_New(), *written = PySet_New(NULL),
             *gate_out = PyDict_New(), *pend = PyList_New(0), *g2 = NULL,
             *outs = NULL, *res = NULL, *nodes = NULL, *root = NULL;
    Py_ssize_t ng = PyList_GET_SIZE(tr->gates), nn;
    int changed = 1;
    if (needed == NULL || env == NULL || touch == NULL || written == NULL
        || gate_out == NULL || pend == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < ng; i++) {
        if (close_over(needed, (StaxNode *)PyTuple_GET_ITEM(
                           PyList_GET_ITEM(tr->gates, i), 0)) < 0) {
            goto done;
        }
    }
    nodes = stax_graph_node_list((PyObject *)tr->graph);
    if (nodes == NULL) {
        goto done;
    }
    nn = PyList_GET_SIZE(nodes);
    while (changed && PyDict_GET_SIZE(tr->mutations) > 0) {
        changed = 0;
        for (Py_ssize_t i = 0; i < nn; i++) {
            PyObject *m = PyList_GET_ITEM(nodes, i);
            PyObject *w = PyDict_GetItemWithError(tr->mutations, m);
            int r = w ? PySet_Contains(needed, m) : 0;
            if (r != 0) {
                if (r < 0 || PyErr_Occurred()) {
                    goto done;
                }
                continue;
            }
            if (w == NULL) {
                if (PyErr_Occurred()) {
                    goto done;
                }
                continue;
            }
            /* a later node of the slice reading a storage m wrote */
            for (Py_ssize_t j = i + 1; r == 0 && j < nn; j++) {
                PyObject *n = PyList_GET_ITEM(nodes, j), *t, *k;
                Py_ssize_t pos = 0;
                Py_hash_t h;
                r = PySet_Contains(needed, n);
                if (r <= 0) {
                    if (r < 0) {
                        goto done;
                    }
                    continue;
                }
                r = 0;
                t = node_touch((StaxNode *)n, touch);
                if (t == NULL) {
                    goto done;
                }
                while (r == 0 && _PySet_NextEntry(w, &pos, &k, &h)) {
                    r = PySet_Contains(t, k);
                }
                Py_DECREF(t);
                if (r < 0) {
                    goto done;
                }
            }
            if (r == 1) {
                if (close_over(needed, (StaxNode *)m) < 0) {
                    goto done;
                }
                changed = 1;
            }
        }
    }
    /* the storages the slice writes */
    for (Py_ssize_t i = 0; i < nn; i++) {
        PyObject *m = PyList_GET_ITEM(nodes, i), *w, *k;
        Py_ssize_t pos = 0;
        Py_hash_t h;
        w = PyDict_GetItemWithError(tr->mutations, m);
        if (w == NULL) {
            if (PyErr_Occurred()) {
                goto done;
            }
            continue;
        }
        if (PySet_Contains(needed, m) != 1) {
            continue;
        }
        while (_PySet_NextEntry(w, &pos, &k, &h)) {
            if (PySet_Add(written, k) < 0) {
                goto done;
            }
        }
    }
    /* placeholders viewing one written storage (f(x, x), f(x, x.t())):
     * separate clones would lose the aliasing, so the caller runs the
     * replay on copies of all inputs that keep it (_trace_stand_ins) */
    *copies_inputs = 0;
    if (PySet_GET_SIZE(written) > 0) {
        PyObject *seen = PySet_New(NULL);
        if (seen == NULL) {
            goto done;
        }
        for (Py_ssize_t i = 0; i < nn && !*copies_inputs; i++) {
            StaxNode *n = (StaxNode *)PyList_GET_ITEM(nodes, i);
            PyObject *val = PyDict_GetItemString(n->meta, "val"), *k;
            int r;
            if (n->op != STAX_NODE_PLACEHOLDER || val == NULL
                || !is_tensor(val)) {
                continue;
            }
            k = PyLong_FromVoidPtr(((StaxTensor *)val)->storage);
            r = k ? PySet_Contains(written, k) : -1;
            if (r == 1) {
                r = PySet_Contains(seen, k);
                if (r == 1) {
                    *copies_inputs = 1;
                }
                else if (r == 0) {
                    r = PySet_Add(seen, k);
                }
            }
            Py_XDECREF(k);
            if (r < 0) {
                Py_DECREF(seen);
                goto done;
            }
        }
        Py_DECREF(seen);
    }
    g2 = stax_graph_new();
    if (g2 == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < nn; i++) {
        StaxNode *n = (StaxNode *)PyList_GET_ITEM(nodes, i);
        PyObject *c;
        int r = PySet_Contains(needed, (PyObject *)n), wr, isgate = 0;
        if (r < 0) {
            goto done;
        }
        if (n->op != STAX_NODE_PLACEHOLDER && !r) {
            continue;
        }
        if (n->op != STAX_NODE_PLACEHOLDER) {
            /* clones of the written placeholders come after all of them */
            for (Py_ssize_t j = 0; j < PyList_GET_SIZE(pend); j++) {
                PyObject *p = PyList_GET_ITEM(pend, j);
                PyObject *cl = PyDict_GetItem(env, p);
                if (*copies_inputs) {
                    Py_INCREF(cl);      /* the inputs are copies already */
                }
                else {
                    cl = append_clone(g2, cl);
                    if (cl == NULL || PyDict_SetItem(env, p, cl) < 0) {
                        Py_XDECREF(cl);
                        goto done;
                    }
                }
                Py_DECREF(cl);
                for (Py_ssize_t q = 0; q < ng; q++) {
                    if (PyTuple_GET_ITEM(PyList_GET_ITEM(tr->gates, q), 0)
                        == p && PyDict_GetItem(gate_out, p) == NULL) {
                        /* the gate read the input before the writes */
                        PyObject *c2 = append_clone(g2, cl);
                        if (c2 == NULL
                            || PyDict_SetItem(gate_out, p, c2) < 0) {
                            Py_XDECREF(c2);
                            goto done;
                        }
                        Py_DECREF(c2);
                    }
                }
            }
            if (PyList_SetSlice(pend, 0, PY_SSIZE_T_MAX, NULL) < 0) {
                goto done;
            }
        }
        c = PyObject_CallMethod(g2, "node_copy", "OO", n, env);
        if (c == NULL || PyDict_SetItem(env, (PyObject *)n, c) < 0) {
            Py_XDECREF(c);
            goto done;
        }
        Py_DECREF(c);
        wr = val_meets(n, written);
        if (wr < 0) {
            goto done;
        }
        if (wr && n->op == STAX_NODE_PLACEHOLDER) {
            if (PyList_Append(pend, (PyObject *)n) < 0) {
                goto done;
            }
            continue;
        }
        for (Py_ssize_t j = 0; j < ng; j++) {
            if (PyTuple_GET_ITEM(PyList_GET_ITEM(tr->gates, j), 0)
                == (PyObject *)n) {
                isgate = 1;
            }
        }
        if (wr && (n->op == STAX_NODE_GET_ATTR || isgate)) {
            /* a constant the slice writes: write a copy; a gate value a
             * later mutation overwrites: keep it as the gate read it */
            PyObject *cl = append_clone(g2, c);
            if (cl == NULL
                || PyDict_SetItem(n->op == STAX_NODE_GET_ATTR ? env : gate_out,
                                  (PyObject *)n, cl) < 0) {
                Py_XDECREF(cl);
                goto done;
            }
            Py_DECREF(cl);
        }
    }
    outs = PyTuple_New(ng);
    if (outs == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < ng; i++) {
        PyObject *g = PyTuple_GET_ITEM(PyList_GET_ITEM(tr->gates, i), 0);
        PyObject *c = PyDict_GetItem(gate_out, g);
        if (c == NULL) {
            c = PyDict_GetItem(env, g);
        }
        PyTuple_SET_ITEM(outs, i, Py_NewRef(c ? c : Py_None));
    }
    {
        PyObject *nm = PyUnicode_FromString("output");
        PyObject *o = nm ? PyObject_CallMethodOneArg(g2, nm, outs) : NULL;
        Py_XDECREF(nm);
        if (o == NULL) {
            goto done;
        }
        Py_DECREF(o);
    }
    root = Py_BuildValue("(OO)", consts, g2);
    res = root ? PyObject_Call((PyObject *)StaxGraphModule_Type, root, NULL)
               : NULL;
done:
    Py_XDECREF(needed);
    Py_XDECREF(env);
    Py_XDECREF(touch);
    Py_XDECREF(written);
    Py_XDECREF(gate_out);
    Py_XDECREF(pend);
    Py_XDECREF(g2);
    Py_XDECREF(outs);
    Py_XDECREF(nodes);
    Py_XDECREF(root);
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
    int replay_copies_inputs;
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
    static char *kwlist[] = {"fn", "args", "kwargs", "names", NULL};
    PyObject *fn, *a = NULL, *kw = Py_None, *names = Py_None;
    PyObject *targs = NULL, *tkw = NULL, *pargs = NULL, *pkw = NULL,
             *pnames = NULL, *varargs = NULL, *rng = NULL, *snap = NULL,
             *out = NULL, *onodes = NULL, *res = NULL, *versions = NULL,
             *mutated = NULL, *gm = NULL, *replay = NULL, *gates = NULL,
             *hooks = NULL, *extents = NULL, *bases = NULL;
    StaxTracer *tr = NULL, *prev = current;
    TraceResult *tres = NULL;
    int copies_inputs = 0;
    ph_ctx c;
    Py_ssize_t na;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OO:trace", kwlist, &fn,
                                     &a, &kw, &names)) {
        return NULL;
    }
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
    if (tkw == NULL || tr == NULL || versions == NULL) {
        goto done;
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
    /* placeholders: tensor leaves of args then kwargs, depth first */
    pnames = param_names(fn, &varargs);
    if (pnames == NULL) {
        goto done;
    }
    na = PyTuple_GET_SIZE(targs);
    pargs = PyTuple_New(na);
    if (pargs == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < na; i++) {
        PyObject *base = NULL, *w;
        Py_ssize_t leaf = 0;
        if (names != Py_None && PySequence_Check(names)
            && i < PySequence_Size(names)) {
            base = PySequence_GetItem(names, i);
            if (base != NULL && !PyUnicode_Check(base)) {
                Py_SETREF(base, PyObject_Str(base));
            }
        }
        else if (i < PyList_GET_SIZE(pnames)) {
            base = Py_NewRef(PyList_GET_ITEM(pnames, i));
        }
        else {
            base = PyUnicode_FromFormat("%s_%zd",
                                        varargs ? PyUnicode_AsUTF8(varargs)
                                                : "arg",
                                        i - PyList_GET_SIZE(pnames));
        }
        if (base == NULL) {
            goto done;
        }
        w = wrap_arg(&c, PyTuple_GET_ITEM(targs, i), base, &leaf, 1);
        Py_DECREF(base);
        if (w == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(pargs, i, w);
    }
    pkw = PyDict_New();
    if (pkw == NULL) {
        goto done;
    }
    {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(tkw, &pos, &k, &v)) {
            Py_ssize_t leaf = 0;
            PyObject *w = wrap_arg(&c, v, k, &leaf, 1);
            if (w == NULL || PyDict_SetItem(pkw, k, w) < 0) {
                Py_XDECREF(w);
                goto done;
            }
            Py_DECREF(w);
        }
    }
    /* isolate side effects, run fn on the proxies */
    rng = stax_trace_rng_save();
    snap = stax_trace_module_snapshot(fn);
    if (snap == NULL) {
        goto done;
    }
    hooks = stax_trace_hooks_install(tr);
    if (hooks == NULL) {
        goto done;
    }
    current = tr;
    out = PyObject_Call(fn, pargs, pkw);
    current = prev;
    stax_trace_hooks_remove(hooks);
    Py_CLEAR(hooks);
    stax_trace_snapshot_restore(snap);
    stax_trace_snapshot_restore(tr->const_snap);
    if (out == NULL) {
        /* the user's exception, unchanged */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        stax_trace_rng_restore(rng);
        PyErr_Restore(et, ev, tb);
        goto done;
    }
    stax_trace_rng_restore(rng);
    if (PyErr_Occurred()) {
        goto done;
    }
    if (PyGen_Check(out) || PyCoro_CheckExact(out)
        || PyAsyncGen_CheckExact(out)) {
        PyObject *r = PyObject_CallMethod(out, "close", NULL);
        Py_XDECREF(r);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "tracing: %R returned a %s object: generator and async "
                     "functions cannot be captured as one graph", fn,
                     Py_TYPE(out)->tp_name);
        goto done;
    }
    onodes = map_args(tr, out, 0, NULL);
    if (onodes == NULL) {
        goto done;
    }
    {
        PyObject *nm = PyUnicode_FromString("output");
        PyObject *on = nm ? PyObject_CallMethodOneArg((PyObject *)tr->graph,
                                                      nm, onodes)
                          : NULL;
        Py_XDECREF(nm);
        StaxNode *bad;
        if (on == NULL) {
            goto done;
        }
        bad = failed_output_input(tr->graph, (StaxNode *)on);
        Py_DECREF(on);
        if (bad != NULL) {
            stax_trace_raise_deferred(bad);
            goto done;
        }
    }
    if (stax_trace_demote_constants(tr) < 0) {
        goto done;
    }
    mutated = PyList_New(0);
    if (mutated == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(versions); i++) {
        PyObject *e = PyList_GET_ITEM(versions, i);
        StaxTensor *si = (StaxTensor *)PyTuple_GET_ITEM(e, 0);
        unsigned long long v0 = PyLong_AsUnsignedLongLong(
            PyTuple_GET_ITEM(e, 1));
        if (si->storage->version != v0) {
            PyObject *ix = PyLong_FromSsize_t(i);
            if (ix == NULL || PyList_Append(mutated, ix) < 0) {
                Py_XDECREF(ix);
                goto done;
            }
            Py_DECREF(ix);
        }
    }
    replay = extract_replay(tr, tr->constants, &copies_inputs);
    if (replay == NULL) {
        goto done;
    }
    {
        PyObject *root = Py_BuildValue("(OO)", tr->constants, tr->graph);
        gm = root ? PyObject_Call((PyObject *)StaxGraphModule_Type, root,
                                  NULL)
                  : NULL;
        Py_XDECREF(root);
        if (gm == NULL) {
            goto done;
        }
    }
    gates = PyList_GetSlice(tr->gates, 0, PY_SSIZE_T_MAX);
    tres = PyObject_GC_New(TraceResult, TraceResult_Type);
    if (gates == NULL || tres == NULL) {
        goto done;
    }
    tres->graph_module = Py_NewRef(gm);
    tres->gates = Py_NewRef(gates);
    tres->shape_reads = PyList_GetSlice(tr->shape_reads, 0, PY_SSIZE_T_MAX);
    tres->replay = Py_NewRef(replay);
    tres->mutated_inputs = Py_NewRef(mutated);
    tres->constants = PyDict_Copy(tr->constants);
    tres->replay_copies_inputs = (char)copies_inputs;
    PyObject_GC_Track(tres);
    if (tres->shape_reads == NULL || tres->constants == NULL) {
        Py_CLEAR(tres);
        goto done;
    }
    res = (PyObject *)tres;
done:
    current = prev;
    if (tr != NULL) {
        tr->active = 0;
    }
    Py_XDECREF(targs);
    Py_XDECREF(tkw);
    Py_XDECREF(pargs);
    Py_XDECREF(pkw);
    Py_XDECREF(pnames);
    Py_XDECREF(varargs);
    Py_XDECREF(rng);
    Py_XDECREF(snap);
    Py_XDECREF(out);
    Py_XDECREF(onodes);
    Py_XDECREF(versions);
    Py_XDECREF(mutated);
    Py_XDECREF(gm);
    Py_XDECREF(replay);
    Py_XDECREF(gates);
    stax_trace_hooks_remove(hooks);
    Py_XDECREF(hooks);
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
static PyObject *
py_stand_ins(PyObject *mod, PyObject *seq)
{
    PyObject *fast = PySequence_Fast(seq, "_trace_stand_ins expects a sequence");
    PyObject *ext = PyDict_New(), *bases = PyDict_New(), *res = NULL;
    Py_ssize_t n;
    (void)mod;
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
        PyObject *si = is_tensor(t)
            ? stax_trace_stand_in((StaxTensor *)t, ext, bases)
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

static PyMethodDef trace_functions[] = {
    {"_trace_stand_ins", (PyCFunction)py_stand_ins, METH_O,
     "_trace_stand_ins(tensors) -> copies keeping layout and aliasing"},
    {"trace", (PyCFunction)(void (*)(void))py_trace,
     METH_VARARGS | METH_KEYWORDS,
     "trace(fn, args, kwargs=None, names=None) -> TraceResult"},
    {"gate", (PyCFunction)py_gate, METH_O,
     "gate(v): keep a 0-d tensor value dynamic (no specialization)."},
    {"is_tracing", (PyCFunction)py_is_tracing, METH_NOARGS, NULL},
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
