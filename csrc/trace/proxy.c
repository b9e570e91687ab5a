/* The Proxy type: stands for a tensor during tracing. Every operator,
 * method and tensorplay function applied to it records a node (and runs
 * on the sample); conversions to Python values are data gates. */
#include "trace/trace_internal.h"
#include <string.h>

PyTypeObject *StaxProxy_Type = NULL;
static PyTypeObject *ProxyMethod_Type = NULL;

static PyObject *builtin_getattr = NULL;

static int
is_tensor(PyObject *o)
{
    return StaxTensor_Type != NULL && PyObject_TypeCheck(o, StaxTensor_Type);
}

PyObject *
stax_trace_proxy_new(StaxTracer *tr, StaxNode *node)
{
    StaxProxy *p = PyObject_GC_New(StaxProxy, StaxProxy_Type);
    if (p == NULL) {
        return NULL;
    }
    p->tracer = (StaxTracer *)Py_NewRef(tr);
    p->node = (StaxNode *)Py_NewRef(node);
    PyObject_GC_Track(p);
    return (PyObject *)p;
}

static int
proxy_traverse(StaxProxy *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->tracer);
    Py_VISIT(self->node);
    return 0;
}

static int
proxy_clear(StaxProxy *self)
{
    Py_CLEAR(self->tracer);
    Py_CLEAR(self->node);
    return 0;
}

static void
proxy_dealloc(StaxProxy *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    proxy_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *sym_value(PyObject *self);

static PyObject *
proxy_repr(StaxProxy *self)
{
    if (self->tracer != NULL && self->tracer->symenv != NULL && stax_trace_is_sym(self->node)) {
        /* str(x.shape[0]) under dynamic shapes: the size's digits, which
         * the version then depends on (specialized, as int() does) */
        PyObject *v = sym_value((PyObject *)self), *r;
        if (v == NULL) {
            return NULL;
        }
        r = PyObject_Repr(v);
        Py_DECREF(v);
        return r;
    }
    return PyUnicode_FromFormat("Proxy(%U)", self->node->name);
}

static Py_hash_t
proxy_hash(PyObject *self)
{
    StaxProxy *p = (StaxProxy *)self;
    if (p->tracer != NULL && p->tracer->symenv != NULL && stax_trace_is_sym(p->node)) {
        /* a size as a dict key (cache[x.shape[0]]): an int's hash */
        PyObject *v = sym_value(self);
        Py_hash_t hv;
        if (v == NULL) {
            return -1;
        }
        hv = PyObject_Hash(v);
        Py_DECREF(v);
        return hv;
    }
    Py_hash_t h = (Py_hash_t)((uintptr_t)self >> 4);
    return h == -1 ? -2 : h;
}

/* ------------------------------------------------------------------ */
/* deferred sample errors                                              */

/* The node whose sample error eager raises when n's is asked for: n's
 * origin, or the first node recorded before it that failed on the sample.
 * Eager stops at the first failing statement, dead or not (a failure
 * inside a try block raised at once and left no node), so a later failure
 * must not be reported in its place (the compiled call would raise the
 * wrong error, or none once the earlier call's result is dead). Borrowed. */
static StaxNode *
error_origin(StaxNode *n)
{
    PyObject *origin = PyDict_GetItemString(n->meta, "sample_error_origin");
    return (origin && StaxNode_Check(origin)) ? (StaxNode *)origin : n;
}

static StaxNode *
first_failure(StaxNode *n)
{
    StaxNode *o = error_origin(n);
    PyObject *nodes = o->graph != NULL ? o->graph->nodes : NULL;
    for (Py_ssize_t i = 0; nodes != NULL && i < PyList_GET_SIZE(nodes); i++) {
        StaxNode *m = (StaxNode *)PyList_GET_ITEM(nodes, i);
        if (m == o) {
            break;
        }
        if (PyDict_GetItemString(m->meta, "sample_error") != NULL) {
            return m;
        }
    }
    return o;
}

StaxNode *
stax_trace_first_failed(StaxGraph *g)
{
    for (Py_ssize_t i = 0; g != NULL && i < PyList_GET_SIZE(g->nodes); i++) {
        StaxNode *m = (StaxNode *)PyList_GET_ITEM(g->nodes, i);
        if (PyDict_GetItemString(m->meta, "sample_error") != NULL
            && PyDict_GetItemString(m->meta, "sample_error_origin") == NULL) {
            return m;
        }
    }
    return NULL;
}

PyObject *
stax_trace_raise_deferred(StaxNode *n)
{
    StaxNode *o = first_failure(n);
    if (o != error_origin(n)) {
        /* an earlier statement fails first: eager's error, as eager words it */
        return stax_trace_raise_original(o);
    }
    PyObject *exc = PyDict_GetItemString(o->meta, "sample_error");
    PyObject *stack = PyDict_GetItemString(o->meta, "stack");
    PyObject *msg, *etype, *inst;
    if (exc == NULL) {
        PyErr_Format(PyExc_RuntimeError,
                     "tracing: the value of node %%%U is unknown", n->name);
        return NULL;
    }
    msg = PyUnicode_FromFormat(
        "%S (tracing: the sample value of node %%%U is needed, but running "
        "it on the sample failed with %s; at %S)",
        exc, o->name, Py_TYPE(exc)->tp_name, stack ? stack : Py_None);
    if (msg == NULL) {
        return NULL;
    }
    etype = (PyObject *)Py_TYPE(exc);
    inst = PyObject_CallOneArg(etype, msg);
    if (inst == NULL || !PyExceptionInstance_Check(inst)) {
        PyErr_Clear();
        Py_XDECREF(inst);
        etype = PyExc_RuntimeError;
        inst = PyObject_CallOneArg(etype, msg);
    }
    Py_DECREF(msg);
    if (inst == NULL) {
        return NULL;
    }
    PyException_SetCause(inst, Py_NewRef(exc));
    PyErr_SetObject((PyObject *)Py_TYPE(inst), inst);
    Py_DECREF(inst);
    return NULL;
}

PyObject *
stax_trace_raise_original(StaxNode *n)
{
    StaxNode *o = first_failure(n);
    PyObject *exc = PyDict_GetItemString(o->meta, "sample_error");
    PyObject *stack = PyDict_GetItemString(o->meta, "stack");
    PyObject *note, *r;
    if (exc == NULL) {
        return stax_trace_raise_deferred(n);
    }
    Py_INCREF(exc);
    note = PyUnicode_FromFormat("(while compiling: node %%%U, at %S)", o->name,
                                stack ? stack : Py_None);
    r = note ? PyObject_CallMethod(exc, "add_note", "O", note) : NULL;
    Py_XDECREF(note);
    Py_XDECREF(r);
    PyErr_Clear();    /* the note is a courtesy: the error is what counts */
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *
stax_trace_need_val(StaxProxy *p)
{
    PyObject *v = PyDict_GetItemString(p->node->meta, "val");
    if (v != NULL) {
        return v;
    }
    return stax_trace_raise_deferred(p->node);
}

PyObject *
stax_trace_need_data(StaxProxy *p)
{
    PyObject *v = stax_trace_need_val(p);
    if (v != NULL && stax_trace_force(p->tracer, v) < 0) {
        return NULL;
    }
    return v;
}

/* ------------------------------------------------------------------ */
/* number slots                                                        */

static StaxTracer *
tracer_of(PyObject *a, PyObject *b)
{
    if (StaxProxy_Check(a)) {
        return ((StaxProxy *)a)->tracer;
    }
    if (b != NULL && StaxProxy_Check(b)) {
        return ((StaxProxy *)b)->tracer;
    }
    return NULL;
}

static PyObject *
record_fn(StaxTracer *tr, PyObject *fn, PyObject *args)
{
    if (tr == NULL || args == NULL) {
        Py_XDECREF(args);
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *r = stax_trace_record(tr, STAX_NODE_CALL_FUNCTION, fn, args,
                                    NULL);
    Py_DECREF(args);
    return r;
}

static PyObject *
binop(PyObject *a, PyObject *b, int op)
{
    if (op == STAX_PYOP_TRUEDIV && !StaxProxy_Check(a) && !StaxTensor_Check(a)
        && StaxProxy_Check(b)) {
        /* number / tensor: torch's __rtruediv__, reciprocal(b) * a (as eager) */
        PyObject *name = PyUnicode_InternFromString("reciprocal");
        PyObject *args = name ? PyTuple_Pack(1, b) : NULL;
        PyObject *rec = args ? stax_trace_record(((StaxProxy *)b)->tracer,
                                                 STAX_NODE_CALL_METHOD, name, args, NULL)
                             : NULL;
        Py_XDECREF(name);
        Py_XDECREF(args);
        if (rec == NULL || !StaxProxy_Check(rec)) {
            return rec;
        }
        PyObject *r = binop(rec, a, STAX_PYOP_MUL);
        Py_DECREF(rec);
        return r;
    }
    return record_fn(tracer_of(a, b),
                     stax_pyop_function(&stax_pyop_table[op], 0),
                     PyTuple_Pack(2, a, b));
}

static PyObject *
unop(PyObject *a, int op)
{
    return record_fn(tracer_of(a, NULL),
                     stax_pyop_function(&stax_pyop_table[op], 0),
                     PyTuple_Pack(1, a));
}

/* a += b on a Proxy records the in-place method (add_) where the op has
 * one, else a + b */
static PyObject *
inplace(PyObject *a, PyObject *b, int op)
{
    const stax_op_info *ip = stax_pyop_op(&stax_pyop_table[op], 1);
    PyObject *args, *name, *r;
    if (!StaxProxy_Check(a) || ip == NULL) {
        return binop(a, b, op);
    }
    args = PyTuple_Pack(2, a, b);
    name = PyUnicode_InternFromString(ip->name);
    if (args == NULL || name == NULL) {
        Py_XDECREF(args);
        Py_XDECREF(name);
        return NULL;
    }
    r = stax_trace_record(((StaxProxy *)a)->tracer, STAX_NODE_CALL_METHOD,
                          name, args, NULL);
    Py_DECREF(args);
    Py_DECREF(name);
    return r;
}

/* the number slots, one per Python operator row of ops.def */
#define STAX_PYOP_BIN(KEY, fn, ifn, OP, sym, NB, flags)                     \
    static PyObject *p_##KEY(PyObject *a, PyObject *b)                      \
    {                                                                       \
        return binop(a, b, STAX_PYOP_##KEY);                                \
    }                                                                       \
    static PyObject *pi_##KEY(PyObject *a, PyObject *b)                     \
    {                                                                       \
        return inplace(a, b, STAX_PYOP_##KEY);                              \
    }                                                                       \
    static PyObject *p3_##KEY(PyObject *a, PyObject *b, PyObject *m)        \
    {                                                                       \
        if (m != Py_None) {                                                 \
            Py_RETURN_NOTIMPLEMENTED;                                       \
        }                                                                   \
        return binop(a, b, STAX_PYOP_##KEY);                                \
    }                                                                       \
    static PyObject *pi3_##KEY(PyObject *a, PyObject *b, PyObject *m)       \
    {                                                                       \
        if (m != Py_None) {                                                 \
            Py_RETURN_NOTIMPLEMENTED;                                       \
        }                                                                   \
        return inplace(a, b, STAX_PYOP_##KEY);                              \
    }
#define STAX_PYOP_UN(KEY, fn, OP, sym, NB, flags)                           \
    static PyObject *p_##KEY(PyObject *a)                                   \
    {                                                                       \
        return unop(a, STAX_PYOP_##KEY);                                    \
    }
#include "ops/ops.def"

static const stax_pyop_key_t richcompare_keys[6] = {
#define STAX_PYOP_CMP(KEY, fn, OP, sym, PYCMP, flags) [PYCMP] = STAX_PYOP_##KEY,
#include "ops/ops.def"
};

static PyObject *
proxy_richcompare(PyObject *a, PyObject *b, int op)
{
    return binop(a, b, richcompare_keys[op]);
}

/* data gates ---------------------------------------------------------- */

static int
p_bool(PyObject *self)
{
    StaxProxy *p = (StaxProxy *)self;
    PyObject *v = stax_trace_need_data(p);
    int r;
    if (v == NULL) {
        return -1;
    }
    r = PyObject_IsTrue(v);
    if (r < 0) {
        return -1;
    }
    if (p->tracer->symenv != NULL && stax_trace_is_sym(p->node)) {
        /* a relation between sizes: a shape guard, not a data gate */
        PyObject *g = PyObject_CallMethod(p->tracer->symenv, "guard", "OO",
                                          PyDict_GetItemString(p->node->meta, "sym"),
                                          r ? Py_True : Py_False);
        Py_XDECREF(g);
        return g == NULL ? -1 : r;
    }
    if (stax_trace_add_gate(p->tracer, p->node, "bool",
                            r ? Py_True : Py_False) < 0) {
        return -1;
    }
    return r;
}

static PyObject *
value_gate(PyObject *self, const char *kind, PyObject *(*conv)(PyObject *))
{
    StaxProxy *p = (StaxProxy *)self;
    PyObject *v = stax_trace_need_data(p), *r;
    if (v == NULL) {
        return NULL;
    }
    r = conv(v);
    if (r == NULL) {
        return NULL;
    }
    if (p->tracer->symenv != NULL && stax_trace_is_sym(p->node)) {
        /* int(t), range(t), float(t) of a symbolic size: specialize */
        PyObject *g = PyObject_CallMethod(p->tracer->symenv, "specialize", "OO",
                                          PyDict_GetItemString(p->node->meta, "sym"), r);
        if (g == NULL) {
            Py_DECREF(r);
            return NULL;
        }
        Py_DECREF(g);
        return r;
    }
    if (stax_trace_add_gate(p->tracer, p->node, kind, r) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    return r;
}

static PyObject *
p_int(PyObject *self)
{
    return value_gate(self, "int", PyNumber_Long);
}

static PyObject *
p_float(PyObject *self)
{
    return value_gate(self, "float", PyNumber_Float);
}

static PyObject *
p_index(PyObject *self)
{
    return value_gate(self, "index", PyNumber_Index);
}

/* the int a symbolic size stands for, specialized (int(size)) */
static PyObject *
sym_value(PyObject *self)
{
    return value_gate(self, "int", PyNumber_Long);
}

static PyObject *
call_item(PyObject *v)
{
    return PyObject_CallMethod(v, "item", NULL);
}

static PyObject *
call_tolist(PyObject *v)
{
    return PyObject_CallMethod(v, "tolist", NULL);
}

static PyObject *
call_numpy(PyObject *v)
{
    PyObject *a = PyObject_CallMethod(v, "numpy", NULL), *c;
    if (a == NULL) {
        return NULL;
    }
    c = PyObject_CallMethod(a, "copy", NULL);
    Py_DECREF(a);
    return c;
}

static PyObject *
pm_item(PyObject *self, PyObject *unused)
{
    return value_gate(self, "item", call_item);
}

static PyObject *
pm_tolist(PyObject *self, PyObject *unused)
{
    return value_gate(self, "tolist", call_tolist);
}

/* p.numpy() / np.asarray(p): a value gate of kind 'tolist' (the recorded
 * outcome is the list, comparable; the caller gets a copy of the array) */
static PyObject *
pm_numpy(PyObject *self, PyObject *args, PyObject *kw)
{
    StaxProxy *p = (StaxProxy *)self;
    PyObject *v, *arr, *lst, *rg, *force = NULL;
    int grad;
    /* eager's check on the traced tensor (its sample runs without grad):
     * numpy() of a tensor that requires grad raises, unless force=True */
    if (kw != NULL) {
        force = PyDict_GetItemString(kw, "force");
    }
    if (force == NULL || !PyObject_IsTrue(force)) {
        rg = PyObject_GetAttrString(self, "requires_grad");
        grad = rg != NULL ? PyObject_IsTrue(rg) : -1;
        Py_XDECREF(rg);
        if (grad < 0) {
            return NULL;
        }
        if (grad) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Can't call numpy() on Tensor that requires grad. Use "
                            "tensor.detach().numpy() instead.");
            return NULL;
        }
    }
    v = stax_trace_need_data(p);
    if (v == NULL) {
        return NULL;
    }
    arr = call_numpy(v);
    if (arr == NULL) {
        return NULL;
    }
    lst = PyObject_CallMethod(arr, "tolist", NULL);
    if (lst == NULL || stax_trace_add_gate(p->tracer, p->node, "tolist",
                                           lst) < 0) {
        Py_XDECREF(lst);
        Py_DECREF(arr);
        return NULL;
    }
    Py_DECREF(lst);
    return arr;
}

/* sequence / mapping ---------------------------------------------------- */

static PyObject *trace_decomps;   /* dict, strong (below) */

static PyObject *
p_getitem(PyObject *self, PyObject *key)
{
    /* x[mask] with a boolean mask: a decomposition whose output size is a
     * value gate on the count (the recorded getitem has no native form) */
    PyObject *dfn = trace_decomps != NULL
                    ? PyDict_GetItemString(trace_decomps, "__getitem__") : NULL;
    if (dfn != NULL) {
        PyObject *r = PyObject_CallFunctionObjArgs(dfn, self, key, NULL);
        if (r != Py_NotImplemented) {
            return r;
        }
        Py_DECREF(r);
    }
    return binop(self, key, STAX_PYOP_GETITEM);
}

static int
p_setitem(PyObject *self, PyObject *key, PyObject *value)
{
    PyObject *args, *r;
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "a traced tensor does not support "
                        "item deletion");
        return -1;
    }
    PyObject *dfn = trace_decomps != NULL
                    ? PyDict_GetItemString(trace_decomps, "__setitem__") : NULL;
    if (dfn != NULL) {
        /* x[mask] = t: recorded as the ops of its decomposition */
        r = PyObject_CallFunctionObjArgs(dfn, self, key, value, NULL);
        if (r != Py_NotImplemented) {
            Py_XDECREF(r);
            return r != NULL ? 0 : -1;
        }
        Py_DECREF(r);
    }
    args = PyTuple_Pack(3, self, key, value);
    if (args == NULL) {
        return -1;
    }
    r = stax_trace_record(((StaxProxy *)self)->tracer,
                          STAX_NODE_CALL_FUNCTION, stax_pyop_function(&stax_pyop_table[STAX_PYOP_SETITEM], 0), args,
                          NULL);
    Py_DECREF(args);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* Node n is a call whose number of results follows one size of its input
 * (x.split(3), x.chunk(2, 1), x.unbind(0), ...): specialize that size, so
 * the version is used only where the count is the traced one. 0, or -1. */
static int
specialize_count_dim(StaxProxy *p)
{
    static const struct { const char *name; int dim_at; int dflt; } ops[] = {
        {"split", 2, 0}, {"unsafe_split", 2, 0}, {"chunk", 2, 0}, {"unsafe_chunk", 2, 0},
        {"tensor_split", 2, 0}, {"unbind", 1, 0}, {"hsplit", -1, 1}, {"vsplit", -1, 0},
        {"dsplit", -1, 2}, {NULL, 0, 0}};
    StaxNode *n = p->node;
    PyObject *name = NULL, *in, *dimo = NULL, *q = NULL, *sz = NULL, *v = NULL;
    const char *s = NULL;
    int k = -1, rc = 0;
    name = stax_trace_node_called_name(n);
    s = name != NULL ? PyUnicode_AsUTF8(name) : NULL;
    if (s == NULL) {
        PyErr_Clear();
    }
    for (int i = 0; s != NULL && ops[i].name != NULL; i++) {
        if (strcmp(s, ops[i].name) == 0) {
            k = i;
        }
    }
    Py_XDECREF(name);
    if (k < 0 || !PyTuple_Check(n->args) || PyTuple_GET_SIZE(n->args) < 1
        || !StaxNode_Check(PyTuple_GET_ITEM(n->args, 0))) {
        return 0;
    }
    in = PyTuple_GET_ITEM(n->args, 0);
    if (ops[k].dim_at == 2 && PyTuple_GET_SIZE(n->args) > 1
        && (PyList_Check(PyTuple_GET_ITEM(n->args, 1)) || PyTuple_Check(PyTuple_GET_ITEM(n->args, 1)))) {
        return 0;      /* split([2, 3]): as many pieces as sizes listed */
    }
    v = PyDict_GetItemString(((StaxNode *)in)->meta, "val");
    if (v == NULL || !is_tensor(v)) {
        return 0;
    }
    int nd = ((StaxTensor *)v)->ndim;
    long d = ops[k].dflt;
    if (ops[k].dim_at < 0) {
        d = (strcmp(ops[k].name, "hsplit") == 0 && nd == 1) ? 0 : ops[k].dflt;
    }
    else {
        if (n->kwargs != NULL && PyDict_Check(n->kwargs)) {
            dimo = PyDict_GetItemString(n->kwargs, "dim");
        }
        if (dimo == NULL && PyTuple_GET_SIZE(n->args) > ops[k].dim_at) {
            dimo = PyTuple_GET_ITEM(n->args, ops[k].dim_at);
        }
        if (dimo != NULL && PyLong_Check(dimo)) {
            d = PyLong_AsLong(dimo);
        }
    }
    if (d < 0) {
        d += nd;
    }
    if (d < 0 || d >= nd) {
        PyErr_Clear();
        return 0;
    }
    q = stax_trace_proxy_new(p->tracer, (StaxNode *)in);
    sz = q != NULL ? stax_trace_sym_dim((StaxProxy *)q, (int)d) : NULL;
    if (sz == NULL) {
        rc = -1;
    }
    else if (StaxProxy_Check(sz)) {
        PyObject *iv = PyNumber_Long(sz);       /* specializes the size */
        rc = iv != NULL ? 0 : -1;
        Py_XDECREF(iv);
    }
    Py_XDECREF(q);
    Py_XDECREF(sz);
    return rc;
}

/* number of entries along dim 0 (a shape read); -1 + error */
static Py_ssize_t
first_dim(StaxProxy *p, const char *what)
{
    PyObject *v = stax_trace_need_val(p);
    if (v == NULL) {
        return -1;
    }
    if (is_tensor(v)) {
        StaxTensor *t = (StaxTensor *)v;
        if (t->ndim == 0) {
            PyErr_Format(PyExc_TypeError, "%s a 0-d tensor", what);
            return -1;
        }
        if (stax_trace_shape_read(p->tracer, p->node, 0) < 0) {
            return -1;
        }
        return (Py_ssize_t)t->sizes[0];
    }
    if (p->tracer->symenv != NULL && specialize_count_dim(p) < 0) {
        /* x.split(3), x.unbind(0) under dynamic shapes: how many pieces
         * there are follows a size, which the version then depends on */
        return -1;
    }
    return PyObject_Length(v);
}

PyObject *
stax_trace_sym_len(PyObject *o)
{
    StaxProxy *p;
    PyObject *v;
    if (!StaxProxy_Check(o)) {
        return NULL;
    }
    p = (StaxProxy *)o;
    if (p->tracer->symenv == NULL) {
        return NULL;
    }
    v = stax_trace_need_val(p);
    if (v == NULL) {
        return NULL;
    }
    if (!is_tensor(v)) {
        return NULL;
    }
    if (((StaxTensor *)v)->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
        return NULL;
    }
    return stax_trace_sym_dim(p, 0);
}

static Py_ssize_t
p_len(PyObject *self)
{
    return first_dim((StaxProxy *)self, "len() of");
}

static PyObject *
p_iter(PyObject *self)
{
    Py_ssize_t n = first_dim((StaxProxy *)self, "iteration over");
    PyObject *lst, *it;
    if (n < 0) {
        return NULL;
    }
    lst = PyList_New(n);
    if (lst == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyLong_FromSsize_t(i);
        PyObject *e = k ? p_getitem(self, k) : NULL;
        Py_XDECREF(k);
        if (e == NULL) {
            Py_DECREF(lst);
            return NULL;
        }
        PyList_SET_ITEM(lst, i, e);
    }
    it = PyObject_GetIter(lst);
    Py_DECREF(lst);
    return it;
}

static int
p_contains(PyObject *self, PyObject *v)
{
    PyObject *r = binop(self, v, STAX_PYOP_CONTAINS);
    int b;
    if (r == NULL) {
        return -1;
    }
    b = PyObject_IsTrue(r);
    Py_DECREF(r);
    return b;
}

/* metadata (no nodes) --------------------------------------------------- */

static PyObject *
meta_attr(PyObject *self, const char *name)
{
    PyObject *v = stax_trace_need_val((StaxProxy *)self);
    return v ? PyObject_GetAttrString(v, name) : NULL;
}

/* dynamic shapes ------------------------------------------------------ */

PyObject *
stax_trace_sym_dim(StaxProxy *p, int dim)
{
    StaxTracer *tr = p->tracer;
    StaxTensor *t = (StaxTensor *)stax_trace_need_val(p);
    PyObject *idx, *e = NULL, *q = NULL, *args = NULL;
    static PyObject *size_name = NULL;
    if (t == NULL) {
        return NULL;
    }
    int64_t n = t->sizes[dim];
    idx = PyDict_GetItem(tr->ph_index, (PyObject *)p->node);
    if (idx != NULL) {
        e = PyObject_CallMethod(tr->symenv, "input_dim", "OiL", idx, dim, (long long)n);
    }
    else {
        PyObject *v2 = PyDict_GetItemString(p->node->meta, "val2");
        if (v2 != NULL && is_tensor(v2) && ((StaxTensor *)v2)->ndim == t->ndim) {
            e = PyObject_CallMethod(tr->symenv, "derived_dim", "LL", (long long)n,
                                    (long long)((StaxTensor *)v2)->sizes[dim]);
        }
        else {
            e = Py_NewRef(Py_None);
        }
    }
    if (e == NULL) {
        return NULL;
    }
    if (e == Py_None) {
        /* static or unknown: the exact size, guarded as before (a derived
         * value: every dim of the inputs upstream) */
        Py_DECREF(e);
        if (stax_trace_shape_read(tr, p->node, idx != NULL ? dim : -1) < 0) {
            return NULL;
        }
        return PyLong_FromLongLong(n);
    }
    if (PyLong_Check(e)) {
        return e;       /* does not move with any symbol: static */
    }
    if (size_name == NULL) {
        size_name = PyUnicode_InternFromString("size");
        if (size_name == NULL) {
            Py_DECREF(e);
            return NULL;
        }
    }
    args = Py_BuildValue("(Oi)", (PyObject *)p, dim);
    q = args ? stax_trace_record(tr, STAX_NODE_CALL_METHOD, size_name, args, NULL) : NULL;
    Py_XDECREF(args);
    if (q != NULL && StaxProxy_Check(q)
        && PyDict_SetItemString(((StaxProxy *)q)->node->meta, "sym", e) < 0) {
        Py_CLEAR(q);
    }
    Py_DECREF(e);
    return q;
}

/* x.shape / x.size() in dynamic mode: a Size of ints and size proxies */
static PyObject *
sym_sizes(StaxProxy *p)
{
    StaxTensor *t = (StaxTensor *)stax_trace_need_val(p);
    PyObject *lst, *r;
    if (t == NULL) {
        return NULL;
    }
    lst = PyTuple_New(t->ndim);
    if (lst == NULL) {
        return NULL;
    }
    for (int d = 0; d < t->ndim; d++) {
        PyObject *x = stax_trace_sym_dim(p, d);
        if (x == NULL) {
            Py_DECREF(lst);
            return NULL;
        }
        PyTuple_SET_ITEM(lst, d, x);
    }
    r = PyObject_CallMethod((PyObject *)t, "size", NULL);
    if (r != NULL) {
        Py_SETREF(r, PyObject_CallOneArg((PyObject *)Py_TYPE(r), lst));
    }
    Py_DECREF(lst);
    return r;
}

static PyObject *
g_shape(PyObject *self, void *c)
{
    StaxProxy *p = (StaxProxy *)self;
    if (p->tracer->symenv != NULL) {
        PyObject *v = stax_trace_need_val(p);
        if (v == NULL) {
            return NULL;
        }
        if (is_tensor(v)) {
            return sym_sizes(p);
        }
    }
    if (stax_trace_need_val(p) == NULL
        || stax_trace_shape_read(p->tracer, p->node, -1) < 0) {
        return NULL;
    }
    return meta_attr(self, "shape");
}

static PyObject *
g_dtype(PyObject *self, void *c)
{
    return meta_attr(self, "dtype");
}

static PyObject *
g_device(PyObject *self, void *c)
{
    return meta_attr(self, "device");
}

static PyObject *
g_ndim(PyObject *self, void *c)
{
    return meta_attr(self, "ndim");
}

/* metadata sigma holds (dtype, device, layout): read from the sample, no
 * node; a node would reach the back end as a non-tensor op (and, as an
 * output, as a value computed on a sample that is gone) */
static PyObject *
g_meta(PyObject *self, void *c)
{
    return meta_attr(self, (const char *)c);
}

static PyObject *
g_nbytes(PyObject *self, void *c)
{
    StaxProxy *p = (StaxProxy *)self;
    if (stax_trace_need_val(p) == NULL
        || stax_trace_shape_read(p->tracer, p->node, -1) < 0) {
        return NULL;
    }
    return meta_attr(self, "nbytes");
}

static int node_requires_grad(PyObject *o, int depth);

/* eager's flag: the sample says it for an input; a computed value's sample
 * ran without grad, so its history says it (x.requires_grad_().mul(2)) */
static PyObject *
g_requires_grad(PyObject *self, void *c)
{
    PyObject *r = meta_attr(self, "requires_grad");
    if (r == Py_False && node_requires_grad((PyObject *)((StaxProxy *)self)->node, 0)) {
        Py_SETREF(r, Py_NewRef(Py_True));
    }
    return r;
}

/* eager's is_leaf: an input's (or constant's) as its sample says; a
 * computed value is a leaf when it does not require grad (its sample ran
 * without grad and says True for every value), or when requires_grad_()
 * made it one */
static PyObject *
g_is_leaf(PyObject *self, void *c)
{
    StaxNode *n = ((StaxProxy *)self)->node;
    PyObject *rg;
    int leaf;
    if (n->op == STAX_NODE_PLACEHOLDER || n->op == STAX_NODE_GET_ATTR
        || (n->op == STAX_NODE_CALL_METHOD && PyUnicode_Check(n->target)
            && PyUnicode_CompareWithASCIIString(n->target, "requires_grad_") == 0)) {
        return meta_attr(self, "is_leaf");
    }
    rg = g_requires_grad(self, c);
    if (rg == NULL) {
        return NULL;
    }
    leaf = rg != Py_True;
    Py_DECREF(rg);
    return PyBool_FromLong(leaf);
}

/* x.grad_fn: None for a leaf (which includes every value that does not
 * require grad), as eager's; otherwise the traced attribute read */
static PyObject *
g_grad_fn(PyObject *self, void *c)
{
    PyObject *leaf = g_is_leaf(self, c);
    if (leaf == NULL) {
        return NULL;
    }
    if (leaf == Py_True) {
        Py_DECREF(leaf);
        Py_RETURN_NONE;
    }
    Py_DECREF(leaf);
    return record_fn(((StaxProxy *)self)->tracer, builtin_getattr,
                     Py_BuildValue("(Os)", self, "grad_fn"));
}

/* x.__class__: Tensor for the user's code, so that isinstance(x,
 * tp.Tensor) holds while tracing as it does eagerly (isinstance consults
 * __class__ once the real type does not match); the package's own code
 * tells a proxy from a tensor and sees the real type. type(x) stays Proxy. */
static PyObject *
g_class(PyObject *self, void *c)
{
    (void)c;
    if (StaxTensor_Type != NULL && !stax_trace_called_from_package()) {
        return Py_NewRef((PyObject *)StaxTensor_Type);
    }
    return Py_NewRef((PyObject *)Py_TYPE(self));
}

/* x.grad: the gradient the compile driver lifted for this parameter
 * (compiler/_lift.py puts its proxy in the placeholder's meta while the
 * trace runs); a traced value has none */
static PyObject *
g_grad(PyObject *self, void *c)
{
    PyObject *g = PyDict_GetItemString(((StaxProxy *)self)->node->meta, "lifted_grad");
    (void)c;
    return Py_NewRef(g != NULL ? g : Py_None);
}

static PyObject *
record_method(PyObject *self, const char *name, PyObject *extra)
{
    PyObject *nm = PyUnicode_InternFromString(name), *args, *r;
    if (nm == NULL) {
        return NULL;
    }
    if (extra == NULL) {
        args = PyTuple_Pack(1, self);
    }
    else {
        PyObject *h = PyTuple_Pack(1, self);
        args = h ? PySequence_Concat(h, extra) : NULL;
        Py_XDECREF(h);
    }
    if (args == NULL) {
        Py_DECREF(nm);
        return NULL;
    }
    r = stax_trace_record(((StaxProxy *)self)->tracer, STAX_NODE_CALL_METHOD,
                          nm, args, NULL);
    Py_DECREF(nm);
    Py_DECREF(args);
    return r;
}

static PyObject *
g_T(PyObject *self, void *c)
{
    PyObject *v = stax_trace_need_val((StaxProxy *)self), *dims, *r;
    int nd;
    if (v == NULL) {
        return NULL;
    }
    if (!is_tensor(v)) {
        return meta_attr(self, "T");
    }
    nd = ((StaxTensor *)v)->ndim;
    if (nd <= 2) {
        return record_method(self, "t", NULL);
    }
    dims = PyTuple_New(nd);
    if (dims == NULL) {
        return NULL;
    }
    for (int i = 0; i < nd; i++) {
        PyTuple_SET_ITEM(dims, i, PyLong_FromLong(nd - 1 - i));
    }
    r = record_method(self, "permute", dims);
    Py_DECREF(dims);
    return r;
}

static PyObject *
g_mT(PyObject *self, void *c)
{
    PyObject *a = Py_BuildValue("(ii)", -2, -1), *r;
    if (a == NULL) {
        return NULL;
    }
    r = record_method(self, "transpose", a);
    Py_DECREF(a);
    return r;
}

static PyObject *
g_data(PyObject *self, void *c)
{
    return record_method(self, "detach", NULL);
}

/* p.data = v: p becomes v's values, detached (eager's set_data: the
 * Python object now shows another tensor). For an intermediate that does
 * not require grad the proxy's node is rebound to a detach node of v (an
 * earlier view of p keeps the old values, as eager's). An input, a lifted
 * or held tensor (the caller's object would change) or one requiring grad
 * (it keeps its history in eager) is rebound too, for the rest of the
 * trace, and the version runs eagerly (a graph break; strict raises). */
static int
s_data(PyObject *self, PyObject *v, void *c)
{
    StaxProxy *p = (StaxProxy *)self;
    PyObject *d, *val;
    StaxNode *n = p->node;
    int brk;
    if (v == NULL) {
        PyErr_SetString(PyExc_TypeError, "can't delete data");
        return -1;
    }
    if (!StaxProxy_Check(v) && !stax_trace_is_tensor(v)) {
        PyErr_SetString(PyExc_TypeError, "data must be a Tensor");
        return -1;
    }
    val = PyDict_GetItemString(n->meta, "val");
    brk = !(n->op == STAX_NODE_CALL_FUNCTION || n->op == STAX_NODE_CALL_METHOD);
    if (brk && stax_trace_graph_break(p->tracer, "assigns the .data of a tensor it did not "
                                      "make (an input, or one it reads from outside)") < 0) {
        return -1;
    }
    if (!brk && stax_grad_enabled()
        && ((val != NULL && stax_trace_is_tensor(val) && ((StaxTensor *)val)->requires_grad)
            || node_requires_grad((PyObject *)n, 0))
        && stax_trace_graph_break(p->tracer, "assigns the .data of a tensor that requires "
                                  "grad (it keeps its history)") < 0) {
        return -1;
    }
    {
        PyObject *nm = PyUnicode_InternFromString("detach");
        PyObject *args = nm != NULL ? PyTuple_Pack(1, v) : NULL;
        d = args != NULL ? stax_trace_record(p->tracer, STAX_NODE_CALL_METHOD, nm, args, NULL)
                         : NULL;
        Py_XDECREF(nm);
        Py_XDECREF(args);
    }
    if (d == NULL) {
        return -1;
    }
    if (!StaxProxy_Check(d)) {
        Py_DECREF(d);
        PyErr_SetString(PyExc_RuntimeError, "tracing: detach gave no proxy");
        return -1;
    }
    Py_SETREF(p->node, (StaxNode *)Py_NewRef(((StaxProxy *)d)->node));
    Py_DECREF(d);
    return 0;
}

/* t.data = p with t a real tensor (one the trace holds as a constant):
 * that tensor object cannot follow a traced value; the function runs
 * eagerly (strict raises NativeCompileError naming the line) */
static PyObject *
pm_tensor_set_data(PyObject *self, PyObject *target)
{
    StaxProxy *p = (StaxProxy *)self;
    PyObject *where = stax_trace_user_stack(), *msg, *err;
    (void)target;
    if (where == NULL) {
        return NULL;
    }
    msg = PyUnicode_FromFormat("assigns a traced value to the .data of a tensor it reaches "
                               "through a path the compiler does not lift, at %S", where);
    Py_DECREF(where);
    err = msg != NULL ? PyObject_CallOneArg(PyExc_RuntimeError, msg) : NULL;
    if (err != NULL && PyObject_SetAttrString(err, "_stax_graph_break", msg) == 0) {
        PyErr_SetObject(PyExc_RuntimeError, err);
    }
    (void)p;
    Py_XDECREF(err);
    Py_XDECREF(msg);
    return NULL;
}

static PyObject *
g_node(PyObject *self, void *c)
{
    return Py_NewRef(((StaxProxy *)self)->node);
}

static PyObject *
g_tracer(PyObject *self, void *c)
{
    return Py_NewRef(((StaxProxy *)self)->tracer);
}

static PyObject *
pm_size(PyObject *self, PyObject *args)
{
    StaxProxy *p = (StaxProxy *)self;
    PyObject *d = Py_None, *v;
    if (!PyArg_ParseTuple(args, "|O:size", &d)) {
        return NULL;
    }
    v = stax_trace_need_val(p);
    if (v == NULL) {
        return NULL;
    }
    if (d == Py_None) {
        if (p->tracer->symenv != NULL && is_tensor(v)) {
            return sym_sizes(p);
        }
        if (stax_trace_shape_read(p->tracer, p->node, -1) < 0) {
            return NULL;
        }
        return PyObject_CallMethod(v, "size", NULL);
    }
    if (is_tensor(v)) {
        long dim = PyLong_AsLong(d);
        int nd = ((StaxTensor *)v)->ndim;
        if (dim == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (dim < 0) {
            dim += nd;
        }
        if (dim < 0 || dim >= nd) {
            PyErr_Format(PyExc_IndexError,
                         "Dimension out of range (expected to be in range of "
                         "[%d, %d], but got %S)", -nd, nd - 1, d);
            return NULL;
        }
        if (p->tracer->symenv != NULL) {
            return stax_trace_sym_dim(p, (int)dim);
        }
        if (stax_trace_shape_read(p->tracer, p->node, (int)dim) < 0) {
            return NULL;
        }
    }
    return PyObject_CallMethod(v, "size", "O", d);
}

static PyObject *
pm_numel(PyObject *self, PyObject *unused)
{
    StaxProxy *p = (StaxProxy *)self;
    PyObject *v = stax_trace_need_val(p);
    if (v != NULL && p->tracer->symenv != NULL && is_tensor(v)) {
        /* dynamic shapes: the product of the (symbolic) sizes, a size
         * expression rather than a guard on every dim */
        PyObject *acc = PyLong_FromLong(1);
        for (int d = 0; acc != NULL && d < ((StaxTensor *)v)->ndim; d++) {
            PyObject *x = stax_trace_sym_dim(p, d);
            if (x == NULL) {
                Py_CLEAR(acc);
                break;
            }
            Py_SETREF(acc, PyNumber_Multiply(acc, x));
            Py_DECREF(x);
        }
        return acc;
    }
    if (v == NULL
        || stax_trace_shape_read(p->tracer, p->node, -1) < 0) {
        return NULL;
    }
    return PyObject_CallMethod(stax_trace_need_val(p), "numel", NULL);
}

static PyObject *pmeth_record(PyObject *proxy, const char *name, PyObject *args,
                              PyObject *kwds);
static PyObject *pm_forward_meta(PyObject *self, PyObject *args, const char *name);

/* x.type() names the dtype (sigma holds it): the sample's answer; x.type(T)
 * converts: a node */
static PyObject *
pm_type(PyObject *self, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) == 0 && (kwds == NULL || PyDict_GET_SIZE(kwds) == 0)) {
        return pm_forward_meta(self, args, "type");
    }
    return pmeth_record(self, "type", args, kwds);
}

/* whether eager's value of node n requires grad: an input or constant that
 * does, reached through floating ops other than detach (nodes recorded under
 * no_grad end in a detach); depth-limited, unknown counts as no */
static int
node_requires_grad(PyObject *o, int depth)
{
    if (depth > 200) {
        return 0;
    }
    if (PyTuple_Check(o) || PyList_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            if (node_requires_grad(PySequence_Fast_GET_ITEM(o, i), depth + 1)) {
                return 1;
            }
        }
        return 0;
    }
    if (!StaxNode_Check(o)) {
        return 0;
    }
    StaxNode *n = (StaxNode *)o;
    PyObject *v = PyDict_GetItemString(n->meta, "val");
    if (v == NULL || !is_tensor(v)) {
        return 0;
    }
    if (n->op == STAX_NODE_PLACEHOLDER || n->op == STAX_NODE_GET_ATTR) {
        return ((StaxTensor *)v)->requires_grad;
    }
    if (PyUnicode_Check(n->target)
        && PyUnicode_CompareWithASCIIString(n->target, "requires_grad_") == 0) {
        /* x.requires_grad_() / (True): a leaf that requires grad from here */
        PyObject *flag = PyTuple_Check(n->args) && PyTuple_GET_SIZE(n->args) > 1
                         ? PyTuple_GET_ITEM(n->args, 1) : NULL;
        PyObject *kw = n->kwargs != NULL && PyDict_Check(n->kwargs)
                       ? PyDict_GetItemString(n->kwargs, "requires_grad") : NULL;
        if (kw != NULL) {
            flag = kw;
        }
        return flag == NULL || PyObject_IsTrue(flag) == 1;
    }
    stax_dtype_t dt = ((StaxTensor *)v)->dtype;
    if (!(dt == STAX_FLOAT16 || dt == STAX_BFLOAT16 || dt == STAX_FLOAT32 || dt == STAX_FLOAT64)
        || (PyUnicode_Check(n->target) && PyUnicode_CompareWithASCIIString(n->target, "detach") == 0)) {
        return 0;
    }
    return node_requires_grad(n->args, depth + 1);
}

int
stax_trace_node_requires_grad(PyObject *o)
{
    return node_requires_grad(o, 0);
}

/* y.requires_grad_(False) on a computed y: eager clears y's flag, so y and
 * the result read as y.detach() from here on (the proxy now stands for a
 * detach node). On an input, or with True, the call is recorded as is. */
static PyObject *
pm_requires_grad_(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"requires_grad", NULL};
    StaxProxy *p = (StaxProxy *)self;
    int flag = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:requires_grad_", kwlist, &flag)) {
        return NULL;
    }
    if (flag || p->node->op == STAX_NODE_PLACEHOLDER || p->node->op == STAX_NODE_GET_ATTR) {
        return pmeth_record(self, "requires_grad_", args, kwds);
    }
    if (stax_grad_enabled() && node_requires_grad((PyObject *)p->node, 0)) {
        /* eager's (torch's) error on a non-leaf that requires grad */
        PyErr_SetString(PyExc_RuntimeError,
                        "you can only change requires_grad flags of leaf variables. If you want "
                        "to use a computed variable in a subgraph that doesn't require "
                        "differentiation use var_no_grad = var.detach().");
        return NULL;
    }
    PyObject *none = PyTuple_New(0);
    PyObject *d = none ? pmeth_record(self, "detach", none, NULL) : NULL;
    Py_XDECREF(none);
    if (d == NULL) {
        return NULL;
    }
    if (!StaxProxy_Check(d)) {
        return d;
    }
    Py_SETREF(p->node, (StaxNode *)Py_NewRef(((StaxProxy *)d)->node));
    Py_DECREF(d);
    return Py_NewRef(self);
}

static PyObject *
pm_dim(PyObject *self, PyObject *unused)
{
    return meta_attr(self, "ndim");
}

/* forwarded to the sample: metadata that sigma already holds */
static PyObject *
pm_forward_meta(PyObject *self, PyObject *args, const char *name)
{
    PyObject *v = stax_trace_need_val((StaxProxy *)self), *m, *r;
    if (v == NULL) {
        return NULL;
    }
    m = PyObject_GetAttrString(v, name);
    if (m == NULL) {
        return NULL;
    }
    r = PyObject_Call(m, args, NULL);
    Py_DECREF(m);
    return r;
}

#define FWD(fname, NAME) \
    static PyObject *fname(PyObject *self, PyObject *args) \
    { return pm_forward_meta(self, args, NAME); }
FWD(pm_stride, "stride")
FWD(pm_is_contiguous, "is_contiguous")
FWD(pm_storage_offset, "storage_offset")
FWD(pm_element_size, "element_size")
FWD(pm_is_floating_point, "is_floating_point")

/* __tensor_function__ ---------------------------------------------------- */

static StaxTracer *
find_tracer(PyObject *o)
{
    if (StaxProxy_Check(o)) {
        return ((StaxProxy *)o)->tracer;
    }
    if (PyTuple_Check(o) || PyList_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            StaxTracer *t = find_tracer(PySequence_Fast_GET_ITEM(o, i));
            if (t) {
                return t;
            }
        }
    }
    else if (PyDict_Check(o)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(o, &pos, &k, &v)) {
            StaxTracer *t = find_tracer(v);
            if (t) {
                return t;
            }
        }
    }
    return NULL;
}

/* Trace-time decompositions (torch's CompositeImplicit habit): public
 * function -> a Python callable run on the proxies instead of recording the
 * call; it records the ops it calls, or returns NotImplemented when the
 * call is recorded whole (batch_norm with training=True becomes the batch
 * statistics, the normalization and the running-statistics updates, all
 * native; with training=False it stays one node, lowered as a fused
 * kernel). Set once from Python (_C._set_trace_decomposition); a Tensor
 * method's entry is keyed by its name ("cumsum"), indexing's by
 * "__getitem__" / "__setitem__". */

PyObject *
stax_trace_set_decomposition(PyObject *self, PyObject *args)
{
    PyObject *func, *fn;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO:_set_trace_decomposition", &func, &fn)) {
        return NULL;
    }
    if (trace_decomps == NULL && (trace_decomps = PyDict_New()) == NULL) {
        return NULL;
    }
    if (fn == Py_None) {
        if (PyDict_DelItem(trace_decomps, func) < 0) {
            PyErr_Clear();
        }
        Py_RETURN_NONE;
    }
    if (PyDict_SetItem(trace_decomps, func, fn) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
pm_tensor_function(PyObject *cls, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"func", "types", "args", "kwargs", NULL};
    PyObject *func, *types, *a = NULL, *kw = NULL, *objclass, *name;
    StaxTracer *tr;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OO:__tensor_function__",
                                     kwlist, &func, &types, &a, &kw)) {
        return NULL;
    }
    if (a == NULL || a == Py_None) {
        a = PyTuple_New(0);
    }
    else {
        a = PySequence_Tuple(a);
    }
    if (a == NULL) {
        return NULL;
    }
    if (kw == Py_None) {
        kw = NULL;
    }
    tr = find_tracer(a);
    if (tr == NULL && kw != NULL) {
        tr = find_tracer(kw);
    }
    if (tr == NULL) {
        Py_DECREF(a);
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (trace_decomps != NULL) {
        PyObject *dfn = PyDict_GetItemWithError(trace_decomps, func);
        if (dfn == NULL && PyErr_Occurred()) {
            PyErr_Clear();   /* an unhashable func: no decomposition */
        }
        if (dfn != NULL) {
            PyObject *r = PyObject_Call(dfn, a, kw);
            if (r != Py_NotImplemented) {
                Py_DECREF(a);
                return r;
            }
            Py_DECREF(r);
        }
    }
    /* a Tensor method (descriptor) becomes a call_method node */
    objclass = PyObject_GetAttrString(func, "__objclass__");
    if (objclass == NULL) {
        PyErr_Clear();
    }
    else if (PyType_Check(objclass) && StaxTensor_Type != NULL
             && PyType_IsSubtype((PyTypeObject *)objclass, StaxTensor_Type)
             && PyTuple_GET_SIZE(a) >= 1) {
        name = PyObject_GetAttrString(func, "__name__");
        Py_DECREF(objclass);
        if (name == NULL) {
            Py_DECREF(a);
            return NULL;
        }
        PyObject *r = stax_trace_record(tr, STAX_NODE_CALL_METHOD, name, a,
                                        kw);
        Py_DECREF(name);
        Py_DECREF(a);
        return r;
    }
    else {
        Py_DECREF(objclass);
    }
    PyObject *r = stax_trace_record(tr, STAX_NODE_CALL_FUNCTION, func, a, kw);
    Py_DECREF(a);
    return r;
}

/* __getattr__: any other Tensor method records call_method -------------- */

typedef struct {
    PyObject_HEAD
    PyObject *proxy;
    PyObject *name;
} ProxyMethod;

static int
pmeth_traverse(ProxyMethod *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->proxy);
    Py_VISIT(self->name);
    return 0;
}

static int
pmeth_clear(ProxyMethod *self)
{
    Py_CLEAR(self->proxy);
    Py_CLEAR(self->name);
    return 0;
}

static void
pmeth_dealloc(ProxyMethod *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    pmeth_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
pmeth_call(ProxyMethod *self, PyObject *args, PyObject *kwds)
{
    PyObject *h = PyTuple_Pack(1, self->proxy), *full, *r;
    if (h == NULL) {
        return NULL;
    }
    full = PySequence_Concat(h, args);
    Py_DECREF(h);
    if (full == NULL) {
        return NULL;
    }
    /* a method's trace-time decomposition is registered under its name */
    PyObject *dfn = trace_decomps ? PyDict_GetItemWithError(trace_decomps, self->name) : NULL;
    if (dfn != NULL) {
        r = PyObject_Call(dfn, full, kwds);
        if (r != Py_NotImplemented) {
            Py_DECREF(full);
            return r;
        }
        Py_DECREF(r);
    }
    else if (PyErr_Occurred()) {
        Py_DECREF(full);
        return NULL;
    }
    r = stax_trace_record(((StaxProxy *)self->proxy)->tracer,
                          STAX_NODE_CALL_METHOD, self->name, full, kwds);
    Py_DECREF(full);
    return r;
}

static PyObject *
pmeth_record(PyObject *proxy, const char *name, PyObject *args, PyObject *kwds)
{
    PyObject *nm = PyUnicode_InternFromString(name), *h, *full, *r = NULL;
    if (nm == NULL) {
        return NULL;
    }
    h = PyTuple_Pack(1, proxy);
    full = h ? PySequence_Concat(h, args) : NULL;
    if (full != NULL) {
        r = stax_trace_record(((StaxProxy *)proxy)->tracer, STAX_NODE_CALL_METHOD,
                              nm, full, kwds);
    }
    Py_XDECREF(h);
    Py_XDECREF(full);
    Py_DECREF(nm);
    return r;
}

static PyObject *
pmeth_repr(ProxyMethod *self)
{
    return PyUnicode_FromFormat("<traced method %U of %R>", self->name,
                                self->proxy);
}

static PyType_Slot pmeth_slots[] = {
    {Py_tp_dealloc, pmeth_dealloc},
    {Py_tp_traverse, pmeth_traverse},
    {Py_tp_clear, pmeth_clear},
    {Py_tp_call, pmeth_call},
    {Py_tp_repr, pmeth_repr},
    {0, NULL},
};

static PyType_Spec pmeth_spec = {
    .name = "tensorplay._C.ProxyMethod",
    .basicsize = sizeof(ProxyMethod),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = pmeth_slots,
};

static PyObject *
proxy_getattro(PyObject *self, PyObject *name)
{
    PyObject *r = PyObject_GenericGetAttr(self, name), *v, *attr;
    const char *s;
    if (r != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError)) {
        return r;
    }
    s = PyUnicode_AsUTF8(name);
    if (s == NULL) {
        return NULL;
    }
    if (s[0] == '_' && s[1] == '_') {
        return NULL;    /* keep the AttributeError for protocols */
    }
    PyErr_Clear();
    v = PyDict_GetItemString(((StaxProxy *)self)->node->meta, "val");
    if (StaxTensor_Type == NULL || (v != NULL && is_tensor(v))
        || v == NULL) {
        attr = StaxTensor_Type
                   ? PyObject_GetAttr((PyObject *)StaxTensor_Type, name)
                   : NULL;
        if (StaxTensor_Type == NULL || attr != NULL) {
            int call = attr == NULL || PyCallable_Check(attr);
            int prop = attr != NULL && !call;
            Py_XDECREF(attr);
            if (call) {
                ProxyMethod *m = PyObject_GC_New(ProxyMethod,
                                                 ProxyMethod_Type);
                if (m == NULL) {
                    return NULL;
                }
                m->proxy = Py_NewRef(self);
                m->name = Py_NewRef(name);
                PyObject_GC_Track(m);
                return (PyObject *)m;
            }
            if (prop) {
                PyObject *args = PyTuple_Pack(2, self, name);
                return record_fn(((StaxProxy *)self)->tracer,
                                 builtin_getattr, args);
            }
        }
        PyErr_Clear();
        if (v == NULL) {
            return stax_trace_need_val((StaxProxy *)self);
        }
    }
    else if (PyObject_HasAttr(v, name)) {
        PyObject *args = PyTuple_Pack(2, self, name);
        return record_fn(((StaxProxy *)self)->tracer, builtin_getattr, args);
    }
    PyErr_Format(PyExc_AttributeError,
                 "'Tensor' object (traced as %%%U) has no attribute '%U'",
                 ((StaxProxy *)self)->node->name, name);
    return NULL;
}

/* format(p, spec): formats the sample value, no gate (printing happens
 * once, at trace time; a gate would recompile on every new value) */
static PyObject *
pm_format(PyObject *self, PyObject *spec)
{
    PyObject *v, *item, *r;
    if (((StaxProxy *)self)->tracer->symenv != NULL
        && stax_trace_is_sym(((StaxProxy *)self)->node)) {
        /* f"{x.shape[0]:d}": the size's digits, specialized */
        item = sym_value(self);
        r = item != NULL ? PyObject_Format(item, spec) : NULL;
        Py_XDECREF(item);
        return r;
    }
    if (!PyUnicode_Check(spec) || PyUnicode_GET_LENGTH(spec) == 0) {
        return PyObject_Repr(self);
    }
    v = stax_trace_need_data((StaxProxy *)self);
    if (v == NULL) {
        return NULL;
    }
    item = is_tensor(v) ? PyObject_CallMethod(v, "item", NULL)
                        : Py_NewRef(v);
    if (item == NULL) {
        return NULL;
    }
    r = PyObject_Format(item, spec);
    Py_DECREF(item);
    return r;
}

/* the sample's elements, computed if deferred, with no gate: for a trace
 * decomposition that steps aside on a sample eager would reject (its own
 * runtime check covers later calls), never for a value the graph uses */
static PyObject *
pm_sample_data(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return Py_XNewRef(stax_trace_need_data((StaxProxy *)self));
}

static PyMethodDef proxy_methods[] = {
    {"__format__", (PyCFunction)pm_format, METH_O, NULL},
    {"_sample_data", (PyCFunction)pm_sample_data, METH_NOARGS,
     "the sample tensor, computed if deferred, with no gate (not recorded)"},
    {"__tensor_function__", (PyCFunction)(void (*)(void))pm_tensor_function,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "Record a tensorplay function called with a proxy argument."},
    {"size", (PyCFunction)pm_size, METH_VARARGS, "sample shape (a shape read)"},
    {"numel", (PyCFunction)pm_numel, METH_NOARGS, NULL},
    {"nelement", (PyCFunction)pm_numel, METH_NOARGS, NULL},
    {"dim", (PyCFunction)pm_dim, METH_NOARGS, NULL},
    {"requires_grad_", (PyCFunction)(void (*)(void))pm_requires_grad_,
     METH_VARARGS | METH_KEYWORDS, "requires_grad_(False): the value from here on is detached"},
    {"type", (PyCFunction)(void (*)(void))pm_type, METH_VARARGS | METH_KEYWORDS,
     "x.type(): the dtype's name (no node); x.type(dtype): a conversion"},
    {"ndimension", (PyCFunction)pm_dim, METH_NOARGS, NULL},
    {"item", (PyCFunction)pm_item, METH_NOARGS, "value gate 'item'"},
    {"__tensor_set_data__", (PyCFunction)pm_tensor_set_data, METH_O,
     "t.data = proxy (the tensor room's set_data): raises (a graph break)"},
    {"tolist", (PyCFunction)pm_tolist, METH_NOARGS, "value gate 'tolist'"},
    {"numpy", (PyCFunction)(void (*)(void))pm_numpy,
     METH_VARARGS | METH_KEYWORDS, "value gate 'tolist' (a copy)"},
    {"__array__", (PyCFunction)(void (*)(void))pm_numpy,
     METH_VARARGS | METH_KEYWORDS, NULL},
    {"stride", (PyCFunction)pm_stride, METH_VARARGS, NULL},
    {"is_contiguous", (PyCFunction)pm_is_contiguous, METH_VARARGS, NULL},
    {"storage_offset", (PyCFunction)pm_storage_offset, METH_VARARGS, NULL},
    {"element_size", (PyCFunction)pm_element_size, METH_VARARGS, NULL},
    {"is_floating_point", (PyCFunction)pm_is_floating_point, METH_VARARGS,
     NULL},
    {NULL},
};

static PyGetSetDef proxy_getset[] = {
    {"shape", g_shape, NULL, "sample shape (a shape read)", NULL},
    {"dtype", g_dtype, NULL, NULL, NULL},
    {"device", g_device, NULL, NULL, NULL},
    {"ndim", g_ndim, NULL, NULL, NULL},
    {"requires_grad", g_requires_grad, NULL, NULL, NULL},
    {"nbytes", g_nbytes, NULL, "sample size in bytes (a shape read)", NULL},
    {"itemsize", g_meta, NULL, NULL, "itemsize"},
    {"is_cuda", g_meta, NULL, NULL, "is_cuda"},
    {"is_cpu", g_meta, NULL, NULL, "is_cpu"},
    {"is_meta", g_meta, NULL, NULL, "is_meta"},
    {"is_sparse", g_meta, NULL, NULL, "is_sparse"},
    {"is_quantized", g_meta, NULL, NULL, "is_quantized"},
    {"is_leaf", g_is_leaf, NULL, NULL, NULL},
    {"grad_fn", g_grad_fn, NULL, NULL, NULL},
    {"__class__", g_class, NULL, NULL, NULL},
    {"grad", g_grad, NULL, NULL, NULL},
    {"T", g_T, NULL, NULL, NULL},
    {"mT", g_mT, NULL, NULL, NULL},
    {"data", g_data, s_data, NULL, NULL},
    {"node", g_node, NULL, "the graph node", NULL},
    {"tracer", g_tracer, NULL, NULL, NULL},
    {NULL},
};

static PyType_Slot proxy_slots[] = {
    {Py_tp_dealloc, proxy_dealloc},
    {Py_tp_traverse, proxy_traverse},
    {Py_tp_clear, proxy_clear},
    {Py_tp_repr, proxy_repr},
    {Py_tp_hash, proxy_hash},
    {Py_tp_richcompare, proxy_richcompare},
    {Py_tp_getattro, proxy_getattro},
    {Py_tp_iter, p_iter},
    {Py_tp_methods, proxy_methods},
    {Py_tp_getset, proxy_getset},
#define NB_SLOT(NB, f, f3)                                                  \
    _Generic(((PyNumberMethods *)0)->nb_##NB, ternaryfunc: (void *)f3,      \
             default: (void *)f)
#define STAX_PYOP_BIN(KEY, fn, ifn, OP, sym, NB, flags)                     \
    {Py_nb_##NB, NB_SLOT(NB, p_##KEY, p3_##KEY)},                          \
    {Py_nb_inplace_##NB, NB_SLOT(inplace_##NB, pi_##KEY, pi3_##KEY)},
#define STAX_PYOP_UN(KEY, fn, OP, sym, NB, flags) {Py_nb_##NB, p_##KEY},
#include "ops/ops.def"
#undef NB_SLOT
    {Py_nb_bool, p_bool},
    {Py_nb_int, p_int},
    {Py_nb_float, p_float},
    {Py_nb_index, p_index},
    {Py_mp_subscript, p_getitem},
    {Py_mp_ass_subscript, p_setitem},
    {Py_mp_length, p_len},
    {Py_sq_length, p_len},
    {Py_sq_contains, p_contains},
    {Py_tp_doc, "A traced tensor: records every operation into a graph."},
    {0, NULL},
};

static PyType_Spec proxy_spec = {
    .name = "tensorplay._C.Proxy",
    .basicsize = sizeof(StaxProxy),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = proxy_slots,
};

int
stax_trace_proxy_init(PyObject *m)
{
    PyObject *bi;
    bi = PyImport_ImportModule("builtins");
    if (bi == NULL) {
        return -1;
    }
    builtin_getattr = PyObject_GetAttrString(bi, "getattr");
    Py_DECREF(bi);
    if (builtin_getattr == NULL) {
        return -1;
    }
    StaxProxy_Type = (PyTypeObject *)PyType_FromSpec(&proxy_spec);
    ProxyMethod_Type = (PyTypeObject *)PyType_FromSpec(&pmeth_spec);
    if (StaxProxy_Type == NULL || ProxyMethod_Type == NULL) {
        return -1;
    }
    return PyModule_AddObjectRef(m, "Proxy", (PyObject *)StaxProxy_Type);
}
