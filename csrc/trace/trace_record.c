/* Recording: node creation with run-time sampling (seed 3.3).  Every
 * recorded call's arguments are mapped to nodes (real tensors become
 * get_attr constants held by reference), the node is run on the samples
 * under no_grad, its writes to tensor arguments are noted, and a new Proxy
 * is returned. */
#include "trace/trace_internal.h"
#include "tensor/stax_numpy.h"
#include "structmember.h"
#include <string.h>

/* ------------------------------------------------------------------ */
/* recording                                                           */

/* A real tensor used by the graph becomes a get_attr constant held by
 * reference, never copied: a node whose sample run writes it is undone by
 * the write journal (isolation.c), which copies only what is written. */
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
    /* made by the traced code itself (tp.ones(3), arange(n) * 2): eager
     * makes a new one on every call, so an output that is this constant is
     * copied per call (compiler/_aliasing.py); a tensor the call found
     * (older storage) is returned as itself */
    if (n != NULL && stax_trace_is_tensor(t)
        && ((StaxTensor *)t)->storage->serial >= tr->serial0
        && PyDict_SetItemString(((StaxNode *)n)->meta, "made_in_trace", Py_True) < 0) {
        Py_CLEAR(n);
    }
    if (n == NULL || PyDict_SetItemString(((StaxNode *)n)->meta, "val", t) < 0
        || PyDict_SetItem(tr->constants, name, t) < 0
        || PyDict_SetItem(tr->const_nodes, key, n) < 0) {
        Py_XDECREF(n);
        n = NULL;
    }
    Py_DECREF(key);
    Py_DECREF(name);
    return n;
}

typedef struct {
    StaxTracer *tr;
    int mode;
    StaxNode **missing;
    int differs;          /* mode 2: some shadow value is not the sample */
} map_ctx;

static PyObject *
trace_leaf(PyObject *o, void *vctx)
{
    map_ctx *c = vctx;
    if (StaxProxy_Check(o)) {
        StaxProxy *p = (StaxProxy *)o;
        if (p->tracer != c->tr) {
            PyErr_Format(PyExc_RuntimeError,
                         "tracing: proxy %%%U belongs to another (finished "
                         "or outer) trace", p->node->name);
            return NULL;
        }
        if (c->mode == 0) {
            return Py_NewRef(p->node);
        }
        PyObject *v = PyDict_GetItemString(p->node->meta, c->mode == 2 ? "val2" : "val");
        if (c->mode == 2 && v != NULL
            && v != PyDict_GetItemString(p->node->meta, "val")) {
            c->differs = 1;
        }
        if (v == NULL) {
            if (*c->missing == NULL) {
                *c->missing = p->node;
            }
            Py_RETURN_NONE;
        }
        return Py_NewRef(v);
    }
    if (c->mode == 0 && stax_trace_is_tensor(o)) {
        return stax_trace_const_node(c->tr, o);
    }
    if (PyTuple_Check(o) && !PyTuple_CheckExact(o) && PyObject_HasAttrString(o, "_fields")) {
        /* a named tuple of proxies (return_types.kthvalue of a trace-time
         * decomposition): walked as the plain tuple of its items, as a
         * multi-output node's result is */
        PyObject *t = PySequence_Tuple(o);
        PyObject *r = t != NULL ? stax_graph_map_leaves(t, 1, trace_leaf, c) : NULL;
        Py_XDECREF(t);
        return r;
    }
    if (c->mode == 0 && (PyArray_IsScalar(o, Number) || PyArray_IsScalar(o, Bool))) {
        /* np.float64(2.0), np.int64, np.bool_: eager treats them as Python
         * scalars; the graph holds the Python value (op overloads, back
         * ends, printing read Python numbers) */
        return PyObject_CallMethod(o, "item", NULL);
    }
    return NULL;   /* no leaf: the walk goes on */
}

/* mode 0: proxies -> nodes, tensors -> get_attr constants;
 * mode 1: proxies -> sample values (*missing set to the node lacking one).
 * Exact tuples, lists, dicts and slices are walked (the graph room's walk). */
PyObject *
stax_trace_map_args(StaxTracer *tr, PyObject *o, int mode, StaxNode **missing)
{
    map_ctx c = {tr, mode, missing, 0};
    return stax_graph_map_leaves(o, 1, trace_leaf, &c);
}

/* Dynamic shapes: run node n again on the shadow values of its arguments
 * (zero-filled inputs whose dynamic dims are grown, compiler/_symbolic.py)
 * and keep the result as meta['val2']; a dimension of an intermediate that
 * moves with the shadow is symbolic. A node whose arguments all have their
 * sample as shadow shares the sample; a write (in place) keeps its
 * target's shadow; a failure leaves no shadow (sizes read from it are then
 * guarded exactly). The generator is restored: the shadow draws nothing. */
static int
run_shadow(StaxTracer *tr, StaxNode *n, PyObject *args, PyObject *kwargs,
           PyObject *val)
{
    StaxNode *missing = NULL;
    map_ctx c = {tr, 2, &missing, 0};
    PyObject *va = NULL, *vk = NULL, *res = NULL, *rng = NULL;
    int rc = 0;
    if (PyDict_Contains(tr->mutations, (PyObject *)n)) {
        PyObject *a0 = PyTuple_Check(args) && PyTuple_GET_SIZE(args) > 0
                       ? PyTuple_GET_ITEM(args, 0) : NULL;
        PyObject *s = a0 != NULL && StaxProxy_Check(a0)
                      ? PyDict_GetItemString(((StaxProxy *)a0)->node->meta, "val2") : NULL;
        return s != NULL ? PyDict_SetItemString(n->meta, "val2", s) : 0;
    }
    va = stax_graph_map_leaves(args, 1, trace_leaf, &c);
    vk = va ? (kwargs ? stax_graph_map_leaves(kwargs, 1, trace_leaf, &c) : PyDict_New()) : NULL;
    if (vk == NULL) {
        rc = -1;
        goto done;
    }
    if (missing != NULL) {
        goto done;
    }
    if (!c.differs) {
        rc = PyDict_SetItemString(n->meta, "val2", val);
        goto done;
    }
    rng = stax_trace_rng_save();
    if (rng == NULL) {
        rc = -1;
        goto done;
    }
    int grad = stax_grad_enabled();
    stax_set_grad_enabled(0);
    stax_trace_sampling++;
    /* only the shadow's sizes are read: an op of the table runs in meta
     * mode (eager's checks and metadata, no elements computed) */
    if (n->op == STAX_NODE_CALL_METHOD) {
        PyObject *self = PyTuple_GET_SIZE(va) > 0 ? PyTuple_GET_ITEM(va, 0) : NULL;
        PyObject *m = self ? PyObject_GetAttr(self, n->target) : NULL;
        PyObject *rest = m ? PyTuple_GetSlice(va, 1, PY_SSIZE_T_MAX) : NULL;
        int meta = rest != NULL && stax_trace_is_tensor(self) && PyUnicode_Check(n->target)
                   && stax_ops_meta_target(_PyType_Lookup(Py_TYPE(self), n->target));
        res = rest ? (meta ? stax_ops_meta_call(m, rest, vk) : PyObject_Call(m, rest, vk)) : NULL;
        if (res == Py_NotImplemented) {
            Py_SETREF(res, PyObject_Call(m, rest, vk));
        }
        Py_XDECREF(m);
        Py_XDECREF(rest);
    }
    else if (stax_ops_meta_target(n->target)) {
        res = stax_ops_meta_call(n->target, va, vk);
        if (res == Py_NotImplemented) {
            Py_SETREF(res, PyObject_Call(n->target, va, vk));
        }
    }
    else {
        res = PyObject_Call(n->target, va, vk);
    }
    stax_trace_sampling--;
    stax_set_grad_enabled(grad);
    PyErr_Clear();
    stax_trace_rng_restore(rng);
    if (res != NULL) {
        rc = PyDict_SetItemString(n->meta, "val2", res);
    }
done:
    Py_XDECREF(va);
    Py_XDECREF(vk);
    Py_XDECREF(res);
    Py_XDECREF(rng);
    return rc;
}

int
stax_trace_is_sym(StaxNode *n)
{
    return PyDict_GetItemString(n->meta, "sym") != NULL;
}

/* Dynamic shapes: a recorded op on symbolic sizes (t + 1, c // nh, t <= 64)
 * gets the expression of its result (meta['sym']), computed by the
 * ShapeEnv from its arguments' expressions. */
static int
propagate_sym(StaxTracer *tr, StaxNode *n, PyObject *args, PyObject *kwargs)
{
    PyObject *v = PyDict_GetItemString(n->meta, "val"), *m, *r;
    int any = 0;
    if (v == NULL || !(PyLong_Check(v) || PyFloat_Check(v)) || !PyTuple_Check(args)
        || n->op != STAX_NODE_CALL_FUNCTION) {
        return 0;
    }
    m = PyTuple_New(PyTuple_GET_SIZE(args));
    if (m == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i), *e;
        if (StaxProxy_Check(a)) {
            e = PyDict_GetItemString(((StaxProxy *)a)->node->meta, "sym");
            if (e == NULL) {
                Py_DECREF(m);
                return 0;      /* a tensor or a data value: not a size */
            }
            any = 1;
        }
        else if (PyLong_Check(a) || PyFloat_Check(a)) {
            e = a;
        }
        else {
            Py_DECREF(m);
            return 0;
        }
        PyTuple_SET_ITEM(m, i, Py_NewRef(e));
    }
    if (!any) {
        Py_DECREF(m);
        return 0;
    }
    r = PyObject_CallMethod(tr->symenv, "propagate", "OOO", n->target, m,
                            kwargs ? kwargs : Py_None);
    Py_DECREF(m);
    if (r == NULL) {
        return -1;
    }
    int rc = 0;
    if (r != Py_None && !PyLong_Check(r) && !PyFloat_Check(r)) {
        rc = PyDict_SetItemString(n->meta, "sym", r);
    }
    Py_DECREF(r);
    return rc;
}

/* Append every tensor leaf of o (inside tuples, lists, dict values) to
 * the list `out`. */
static int
tensor_leaves(PyObject *o, PyObject *out)
{
    if (stax_trace_is_tensor(o)) {
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
int
stax_trace_storage_keys(PyObject *o, PyObject *set)
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

static int node_writes(StaxNode *n);

/* meta['sample_error'] of n from the error set now; 0, or -1 internal */
static int
set_sample_error(StaxNode *n)
{
    PyObject *et, *ev, *tb;
    int rc = 0;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    Py_XDECREF(tb);
    if (ev != NULL) {
        PyException_SetTraceback(ev, Py_None);
        rc = PyDict_SetItemString(n->meta, "sample_error", ev);
    }
    Py_XDECREF(et);
    Py_XDECREF(ev);
    return rc;
}

/* 1 when o holds a tensor (a constant held by reference) */
static int
has_tensor_leaf(PyObject *o)
{
    if (stax_trace_is_tensor(o)) {
        return 1;
    }
    if (PyTuple_Check(o) || PyList_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            if (has_tensor_leaf(PySequence_Fast_GET_ITEM(o, i))) {
                return 1;
            }
        }
    }
    else if (PyDict_Check(o)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(o, &pos, &k, &v)) {
            if (has_tensor_leaf(v)) {
                return 1;
            }
        }
    }
    return 0;
}

/* The name a call node calls: the method's name, or the function's
 * __name__ (operator.setitem -> "setitem"); a new reference, or NULL with
 * no exception set when the node calls nothing named. */
PyObject *
stax_trace_node_called_name(StaxNode *n)
{
    PyObject *name = NULL;
    if (n->op == STAX_NODE_CALL_METHOD && PyUnicode_Check(n->target)) {
        return Py_NewRef(n->target);
    }
    if (n->op == STAX_NODE_CALL_FUNCTION) {
        name = PyObject_GetAttrString(n->target, "__name__");
        if (name == NULL || !PyUnicode_Check(name)) {
            PyErr_Clear();
            Py_CLEAR(name);
        }
    }
    return name;
}

/* Calls that read their first operand's elements only to copy them (views,
 * conversions, indexing): they run on a deferred first operand (its other
 * tensor operands filled), and what they copy is filled by running them
 * again once asked. */
static int
copies_first_operand(StaxNode *n)
{
    static const char *names[] = {
        "view", "reshape", "transpose", "permute", "t", "unsqueeze",
        "squeeze", "expand", "expand_as", "view_as", "reshape_as", "flatten",
        "unflatten", "split", "chunk", "narrow", "select", "movedim",
        "unbind", "contiguous", "clone", "detach", "to", "type", "float",
        "double", "half", "bfloat16", "int", "long", "short", "char", "byte",
        "bool", "cpu", "type_as", "__getitem__", "getitem", "swapaxes",
        "swapdims", "flip", "roll", "tril", "triu", NULL};
    static const char *attrs[] = {"T", "mT", "H", "mH", "data", "real",
                                  "shape", "dtype", "device", NULL};
    const char *nm = NULL;
    PyObject *name = NULL;
    int r = 0;
    if (n->op == STAX_NODE_CALL_FUNCTION) {
        const stax_op_info *op = stax_op_for_target("call_function", n->target);
        if (op != NULL && op->kind == STAX_OPK_VIEW) {
            return 1;
        }
    }
    name = stax_trace_node_called_name(n);
    if (n->op == STAX_NODE_CALL_FUNCTION && name != NULL
        && PyUnicode_CompareWithASCIIString(name, "getattr") == 0
        && PyTuple_Check(n->args) && PyTuple_GET_SIZE(n->args) == 2
        && PyUnicode_Check(PyTuple_GET_ITEM(n->args, 1))) {
        const char *a = PyUnicode_AsUTF8(PyTuple_GET_ITEM(n->args, 1));
        for (int i = 0; a != NULL && attrs[i] != NULL && !r; i++) {
            r = strcmp(a, attrs[i]) == 0;
        }
        PyErr_Clear();
        Py_DECREF(name);
        return r;
    }
    nm = name ? PyUnicode_AsUTF8(name) : NULL;
    if (nm == NULL) {
        PyErr_Clear();
    }
    else if (n->op == STAX_NODE_CALL_METHOD) {
        const stax_op_info *op = stax_op_by_name(nm);
        r = op != NULL && op->kind == STAX_OPK_VIEW && !(op->flags & STAX_OPF_INPLACE);
    }
    for (int i = 0; nm != NULL && names[i] != NULL && !r; i++) {
        r = strcmp(nm, names[i]) == 0
            && (n->op == STAX_NODE_CALL_METHOD || strcmp(nm, "getitem") == 0);
    }
    Py_XDECREF(name);
    return r;
}

/* Conversions that copy a host tensor into a new one of another dtype
 * (x.float() of a float64 x, x.to(tp.int32)) or layout (x.contiguous() of
 * a strided x): eager's result is a tensor of x's shape (contiguous, or in
 * x's layout: preserve_format), and no value can make it raise or warn, so its metadata needs no elements (the
 * audit of issue 17: the commonest sample still computed at full size).
 * New reference, or NULL without an exception when n is no such call (the
 * same dtype, or a contiguous x, gives x itself: run as before). */
static PyObject *
conversion_meta(StaxNode *n, PyObject *va, PyObject *vk)
{
    static const struct {
        const char *name;
        stax_dtype_t dt;
    } conv[] = {{"float", STAX_FLOAT32}, {"double", STAX_FLOAT64}, {"half", STAX_FLOAT16},
                {"int", STAX_INT32},     {"long", STAX_INT64},     {"short", STAX_INT16},
                {"char", STAX_INT8},     {"byte", STAX_UINT8},     {"bool", STAX_BOOL}};
    StaxTensor *x;
    stax_dtype_t dt;
    const char *nm;
    int found = 0;
    Py_ssize_t na = PyTuple_GET_SIZE(va);
    if (n->op != STAX_NODE_CALL_METHOD || !PyUnicode_Check(n->target) || na < 1 || na > 2
        || (vk != NULL && PyDict_GET_SIZE(vk) > 0)
        || !Py_IS_TYPE(PyTuple_GET_ITEM(va, 0), StaxTensor_Type)) {
        return NULL;
    }
    x = (StaxTensor *)PyTuple_GET_ITEM(va, 0);
    nm = PyUnicode_AsUTF8(n->target);
    if (nm == NULL || stax_tensor_is_cuda(x) || x->dtype == STAX_BFLOAT16) {
        PyErr_Clear();
        return NULL;
    }
    dt = x->dtype;
    if (na == 1 && strcmp(nm, "contiguous") == 0) {
        found = !stax_tensor_is_contiguous(x);
    }
    else if (na == 2 && strcmp(nm, "to") == 0) {
        PyObject *d = PyTuple_GET_ITEM(va, 1);
        /* to(dtype) with a tensorplay dtype object only (to(other),
         * to(device), strings: eager's own parsing) */
        found = strcmp(Py_TYPE(d)->tp_name, "tensorplay.dtype") == 0
                && stax_dtype_from_object(d, &dt) == 0 && dt != x->dtype
                && dt != STAX_BFLOAT16;
        PyErr_Clear();
    }
    else if (na == 1) {
        for (size_t i = 0; i < sizeof(conv) / sizeof(conv[0]) && !found; i++) {
            if (strcmp(nm, conv[i].name) == 0) {
                dt = conv[i].dt;
                found = dt != x->dtype;
            }
        }
    }
    if (!found) {
        return NULL;
    }
    /* eager's layout: contiguous() row-major, the casts torch's
     * preserve_format */
    return (PyObject *)stax_tensor_empty_like(
        x, dt, strcmp(nm, "contiguous") == 0 ? STAX_MF_CONTIGUOUS : STAX_MF_PRESERVE,
        STAX_DEV_CPU);
}

/* Deferred sampling of node n (trace_lazy.c): 1 when done (meta 'val'
 * holds eager's metadata, or 'sample_error' eager's error), 0 when n runs
 * on the sample now (*keep_first: its first operand may stay deferred),
 * -1 internal error. */
static int
sample_deferred(StaxTracer *tr, StaxNode *n, PyObject *args,
                PyObject *kwargs, PyObject *va, PyObject *vk, int *keep_first)
{
    PyObject *callable = NULL, *cargs = NULL, *res;
    int grad, ok;
    /* a constant held by reference may change behind the tracer: the fill
     * reads aliases of it, and a write to it fills first */
    int consts = has_tensor_leaf(args) || (kwargs != NULL && has_tensor_leaf(kwargs));
    *keep_first = 0;
    if (n->op == STAX_NODE_CALL_METHOD) {
        PyObject *self = PyTuple_GET_SIZE(va) > 0 ? PyTuple_GET_ITEM(va, 0) : NULL;
        ok = self != NULL && stax_trace_is_tensor(self) && PyUnicode_Check(n->target)
             && stax_ops_meta_target(_PyType_Lookup(Py_TYPE(self), n->target));
        if (ok) {
            callable = PyObject_GetAttr(self, n->target);
            cargs = callable ? PyTuple_GetSlice(va, 1, PY_SSIZE_T_MAX) : NULL;
            if (cargs == NULL) {
                Py_XDECREF(callable);
                return -1;
            }
        }
    }
    else {
        ok = n->op == STAX_NODE_CALL_FUNCTION && stax_ops_meta_target(n->target);
        if (ok) {
            callable = Py_NewRef(n->target);
            cargs = Py_NewRef(va);
        }
    }
    if (ok) {
        grad = stax_grad_enabled();
        stax_set_grad_enabled(0);
        res = stax_ops_meta_call(callable, cargs, vk);
        stax_set_grad_enabled(grad);
        Py_DECREF(callable);
        Py_DECREF(cargs);
        if (res == NULL) {
            return set_sample_error(n) < 0 ? -1 : 1;
        }
        if (res != Py_NotImplemented) {
            int rc = PyDict_SetItemString(n->meta, "val", res) < 0
                     || stax_trace_lazy_result(tr, n, res, NULL) < 0
                     || (consts && stax_trace_lazy_reads(tr, n, va, vk) < 0) ? -1 : 1;
            Py_DECREF(res);
            return rc;
        }
        Py_DECREF(res);
    }
    if (!consts) {
        res = conversion_meta(n, va, vk);
        if (res != NULL) {
            int rc = PyDict_SetItemString(n->meta, "val", res) < 0
                     || stax_trace_lazy_result(tr, n, res, NULL) < 0 ? -1 : 1;
            Py_DECREF(res);
            return rc;
        }
        if (PyErr_Occurred()) {
            return -1;
        }
    }
    /* run now: filling a view of a deferred operand runs the node again,
     * on its constants' values of that later time */
    *keep_first = !consts && copies_first_operand(n);
    return 0;
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
    int rc = -1, keep_first = 0, first_lazy = 0;
    va = stax_trace_map_args(tr, args, 1, &missing);
    vk = va ? (kwargs ? stax_trace_map_args(tr, kwargs, 1, &missing) : PyDict_New())
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
    if (tr->lazy != NULL) {
        if (node_writes(n)) {
            /* deferred nodes read what their operands held when recorded */
            if (stax_trace_force_all(tr) < 0) {
                goto done;
            }
        }
        else {
            int d = sample_deferred(tr, n, args, kwargs, va, vk, &keep_first);
            if (d != 0) {
                rc = d > 0 ? 0 : -1;
                goto done;
            }
            if (keep_first && PyTuple_GET_SIZE(va) > 0) {
                PyObject *rest = PyTuple_GetSlice(va, 1, PY_SSIZE_T_MAX);
                int f = rest ? stax_trace_force(tr, rest) : -1;
                Py_XDECREF(rest);
                first_lazy = f == 0 ? stax_trace_lazy_any(tr, PyTuple_GET_ITEM(va, 0)) : -1;
                if (f < 0 || first_lazy < 0 || stax_trace_force(tr, vk) < 0) {
                    goto done;
                }
            }
            else if (stax_trace_force(tr, va) < 0 || stax_trace_force(tr, vk) < 0) {
                goto done;
            }
        }
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
    if (tr->eager_runs != NULL && PyList_Append(tr->eager_runs, n->name) < 0) {
        goto done;
    }
    res = stax_trace_call_node(n, va, vk);
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
        if (rc == 0 && first_lazy) {
            /* what it copied from its deferred operand is filled by
             * running it again when asked */
            PyObject *ins = PySet_New(NULL);
            rc = ins == NULL || stax_trace_storage_keys(va, ins) < 0
                 || stax_trace_lazy_result(tr, n, res, ins) < 0 ? -1 : 0;
            Py_XDECREF(ins);
        }
    }
    else {
        rc = set_sample_error(n);
    }
done:
    Py_XDECREF(va);
    Py_XDECREF(vk);
    Py_XDECREF(res);
    Py_XDECREF(leaves);
    PyMem_Free(vers);
    return rc;
}

/* 1 when the instruction a frame is executing lies inside an entry of its
 * code's exception table (CPython 3.11+: a try block, or a with block, whose
 * handler would see an exception raised there). The table is a sequence
 * of entries (start, length, target, depth_lasti), each a varint of 6-bit
 * chunks with bit 6 the continuation flag and bit 7 marking an entry's
 * first byte; positions are in code units. */
static int
frame_in_handler(PyFrameObject *f)
{
    PyCodeObject *co = PyFrame_GetCode(f);
    PyObject *tab = co ? PyObject_GetAttrString((PyObject *)co, "co_exceptiontable")
                       : NULL;
    int lasti = PyFrame_GetLasti(f), in = 0;
    Py_XDECREF(co);
    if (tab == NULL || !PyBytes_Check(tab) || lasti < 0) {
        Py_XDECREF(tab);
        PyErr_Clear();
        return 0;
    }
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(tab);
    Py_ssize_t n = PyBytes_GET_SIZE(tab), i = 0;
    long idx = lasti / 2;
    while (i < n && !in) {
        long v[4];
        for (int k = 0; k < 4; k++) {
            long x = 0;
            unsigned char c;
            do {
                c = i < n ? b[i++] : 0;
                x = (x << 6) | (c & 63);
            } while ((c & 64) && i < n);
            v[k] = x;
        }
        in = v[0] <= idx && idx < v[0] + v[1];
    }
    Py_DECREF(tab);
    return in;
}

/* 1 when a frame of the traced code (fn and what it calls, outside the
 * tensorplay package) is inside a try or with block at this point. */
static int
user_try_active(StaxTracer *tr)
{
    int depth = stax_trace_frame_depth() - tr->entry_depth, in = 0;
    PyFrameObject *f = PyEval_GetFrame();
    Py_XINCREF(f);
    for (; f != NULL && depth > 0 && !in; depth--) {
        PyCodeObject *co = PyFrame_GetCode(f);
        PyObject *fn = PyObject_GetAttrString((PyObject *)co, "co_filename");
        int inside = 0;
        Py_DECREF(co);
        if (fn != NULL && stax_trace_pkg_dir != NULL && PyUnicode_Check(fn)) {
            inside = PyUnicode_Tailmatch(fn, stax_trace_pkg_dir, 0, PY_SSIZE_T_MAX,
                                         -1) == 1;
        }
        Py_XDECREF(fn);
        PyErr_Clear();
        if (!inside) {
            in = frame_in_handler(f);
        }
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);
    return in;
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
    name = stax_trace_node_called_name(n);
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
    na = stax_trace_map_args(tr, args, 0, NULL);
    nk = na && kwargs ? stax_trace_map_args(tr, kwargs, 0, NULL) : NULL;
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
    if (tr->symenv != NULL) {
        PyObject *v = PyDict_GetItemString(n->meta, "val");
        if ((v != NULL && run_shadow(tr, n, args, kwargs, v) < 0)
            || propagate_sym(tr, n, args, kwargs) < 0) {
            goto done;
        }
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
    if (PyDict_GetItemString(n->meta, "sample_error") != NULL
        && user_try_active(tr)) {
        /* the call fails on the sample inside a try (or with) block of the
         * traced code: eager raises here and the handler decides what
         * happens next, so raise the user's error now; no node */
        Py_INCREF(n);
        if (stax_graph_erase_node(tr->graph, n) == 0) {
            stax_trace_raise_original(n);
        }
        Py_DECREF(n);
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
    if (res != NULL && !tr->grad_at_start && tr->grad_inside == NULL && stax_grad_enabled()
        && stax_trace_node_requires_grad((PyObject *)n)) {
        /* `with tp.enable_grad():` in a function called under no_grad: this
         * value requires grad in eager, which the graph cannot say */
        tr->grad_inside = Py_NewRef(stack);
    }
    if (res != NULL && tr->grad_at_start && !stax_grad_enabled() && !node_writes(n)
        && !(PyUnicode_Check(target) && PyUnicode_CompareWithASCIIString(target, "detach") == 0)) {
        /* recorded inside `with tp.no_grad():` of a function called with
         * grad on: eager's result does not require grad; the graph says so
         * with a detach (no effect on the value) */
        PyObject *v = PyDict_GetItemString(n->meta, "val");
        if (v != NULL && stax_trace_is_tensor(v)) {
            static PyObject *detach_name = NULL;
            PyObject *a = NULL;
            if (detach_name == NULL) {
                detach_name = PyUnicode_InternFromString("detach");
            }
            a = detach_name ? PyTuple_Pack(1, res) : NULL;
            Py_SETREF(res, a ? stax_trace_record(tr, STAX_NODE_CALL_METHOD, detach_name, a, NULL)
                             : NULL);
            Py_XDECREF(a);
        }
    }
done:
    Py_XDECREF(na);
    Py_XDECREF(nk);
    Py_XDECREF(stack);
    Py_XDECREF(n);
    return res;
}

