/* Node: one recorded op of the autograd graph (grad_fn), and AccumulateGrad,
 * the node that adds a leaf's gradient into its .grad. A Node saves what its
 * formula reads (arguments, outputs) with their version counters; backward
 * frees them unless retain_graph. */
#include "autograd/autograd_internal.h"

#include <string.h>
#include <structmember.h>

PyTypeObject *StaxGradNode_Type;
static int64_t node_seq;

/* "log_softmax" -> "LogSoftmaxBackward0" (torch's naming) */
static void
backward_name(char *buf, size_t cap, const char *op)
{
    size_t j = 0;
    int up = 1;
    for (const char *p = op; *p && j + 10 < cap; p++) {
        if (*p == '_') {
            up = 1;
            continue;
        }
        buf[j++] = up && *p >= 'a' && *p <= 'z' ? (char)(*p - 32) : *p;
        up = 0;
    }
    snprintf(buf + j, cap - j, "Backward0");
}

StaxGradNode *
stax_ag_node_new(const char *opname, const stax_deriv *d)
{
    StaxGradNode *n = PyObject_GC_New(StaxGradNode, StaxGradNode_Type);
    if (n == NULL) {
        return NULL;
    }
    memset((char *)n + sizeof(PyObject), 0, sizeof(StaxGradNode) - sizeof(PyObject));
    n->seq = ++node_seq;
    n->deriv = d;
    if (opname != NULL) {
        backward_name(n->name, sizeof(n->name), opname);
    }
    PyObject_GC_Track((PyObject *)n);
    return n;
}

/* The leaf's AccumulateGrad, shared by every use of the leaf (cached as a
 * weak reference on the tensor: the node holds the leaf strongly). */
PyObject *
stax_ag_accumulator(StaxTensor *leaf)
{
    StaxGradNode *n;
    if (leaf->grad_acc != NULL) {
        PyObject *o = PyWeakref_GetObject(leaf->grad_acc);
        if (o != NULL && o != Py_None) {
            return Py_NewRef(o);
        }
        Py_CLEAR(leaf->grad_acc);
    }
    n = stax_ag_node_new(NULL, NULL);
    if (n == NULL) {
        return NULL;
    }
    snprintf(n->name, sizeof(n->name), "AccumulateGrad");
    n->is_acc = 1;
    n->seq = INT64_MAX;
    n->variable = Py_NewRef(leaf);
    n->n_out = 1;
    leaf->grad_acc = PyWeakref_NewRef((PyObject *)n, NULL);
    if (leaf->grad_acc == NULL) {
        Py_DECREF(n);
        return NULL;
    }
    return (PyObject *)n;
}

int
stax_ag_grad_edge(StaxTensor *t, stax_edge *e)
{
    e->fn = NULL;
    e->nr = 0;
    if (t->grad_fn != NULL) {
        e->fn = Py_NewRef(t->grad_fn);
        e->nr = t->output_nr;
    }
    else if (t->requires_grad) {
        e->fn = stax_ag_accumulator(t);
        if (e->fn == NULL) {
            return -1;
        }
    }
    return 0;
}

static PyObject *
freed_error(void)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "Trying to backward through the graph a second time (or "
                    "directly access saved tensors after they have already "
                    "been freed). Saved intermediate values of the graph are "
                    "freed when you call .backward() or autograd.grad(). "
                    "Specify retain_graph=True if you need to backward "
                    "through the graph a second time or if you need to access "
                    "saved tensors after calling backward.");
    return NULL;
}

static PyObject *
version_error(StaxTensor *t, StaxGradNode *owner, int nr, uint64_t saved)
{
    char shape[256];
    size_t j = 0;
    shape[0] = 0;
    for (int i = 0; i < t->ndim && j + 24 < sizeof(shape); i++) {
        j += (size_t)snprintf(shape + j, sizeof(shape) - j, i ? ", %lld" : "%lld",
                              (long long)t->sizes[i]);
    }
    if (owner != NULL) {
        char nm[64];
        size_t l;
        snprintf(nm, sizeof(nm), "%s", owner->name);
        l = strlen(nm);
        if (l > 9 && strcmp(nm + l - 9, "Backward0") == 0) {
            nm[l - 9] = 0;
        }
        PyErr_Format(PyExc_RuntimeError,
                     "one of the variables needed for gradient computation "
                     "has been modified by an inplace operation: "
                     "[tensorplay.%sTensor [%s]], which is output %d of %s, "
                     "is at version %llu; expected version %llu instead. "
                     "Hint: the backtrace further above shows the operation "
                     "that failed to compute its gradient.",
                     stax_dtype_title(t->dtype), shape, nr, nm,
                     (unsigned long long)t->storage->version,
                     (unsigned long long)saved);
    }
    else {
        PyErr_Format(PyExc_RuntimeError,
                     "one of the variables needed for gradient computation "
                     "has been modified by an inplace operation: "
                     "[tensorplay.%sTensor [%s]] is at version %llu; expected "
                     "version %llu instead. Hint: the backtrace further above "
                     "shows the operation that failed to compute its "
                     "gradient.",
                     stax_dtype_title(t->dtype), shape,
                     (unsigned long long)t->storage->version,
                     (unsigned long long)saved);
    }
    return NULL;
}

PyObject *
stax_ag_unpack(StaxGradNode *n, int arg)
{
    PyObject *v;
    if (n->args == NULL) {
        return freed_error();
    }
    v = PyTuple_GET_ITEM(n->args, arg);
    if (n->freed && v == Py_None
        && PyTuple_GET_ITEM(n->shapes, arg) != Py_None) {
        return freed_error();
    }
    if (StaxTensor_Check(v)) {
        StaxTensor *t = (StaxTensor *)v;
        if (t->storage->version != n->versions[arg]) {
            StaxGradNode *g = t->grad_fn && StaxGradNode_Check(t->grad_fn)
                          ? (StaxGradNode *)t->grad_fn : NULL;
            return version_error(t, g, t->output_nr, n->versions[arg]);
        }
    }
    return Py_NewRef(v);
}

PyObject *
stax_ag_unpack_result(StaxGradNode *n, int k)
{
    PyObject *v;
    if (n->results == NULL) {
        return freed_error();
    }
    if (k >= PyTuple_GET_SIZE(n->results)) {
        PyErr_Format(PyExc_RuntimeError, "%s: formula reads output %d of %d",
                     n->name, k, (int)PyTuple_GET_SIZE(n->results));
        return NULL;
    }
    v = PyTuple_GET_ITEM(n->results, k);
    if (StaxTensor_Check(v)
        && ((StaxTensor *)v)->storage->version != n->res_versions[k]) {
        return version_error((StaxTensor *)v, n, k, n->res_versions[k]);
    }
    if (StaxTensor_Check(v) && stax_grad_enabled()
        && stax_dtype_is_floating(((StaxTensor *)v)->dtype)) {
        /* create_graph: the output as this node's output k again, so the
         * formula's use of it is differentiated too (double backward) */
        StaxTensor *s = (StaxTensor *)v;
        StaxTensor *r = stax_tensor_as_strided(s, s->ndim, s->sizes,
                                               s->strides, s->offset);
        if (r == NULL) {
            return NULL;
        }
        r->requires_grad = 1;
        r->nonleaf = 1;
        r->output_nr = k;
        Py_XSETREF(r->grad_fn, Py_NewRef(n));
        return (PyObject *)r;
    }
    return Py_NewRef(v);
}

PyObject *
stax_ag_saved_tuple(StaxGradNode *n)
{
    if (n->results == NULL) {
        return freed_error();
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(n->results); k++) {
        PyObject *v = PyTuple_GET_ITEM(n->results, k);
        if (StaxTensor_Check(v)
            && ((StaxTensor *)v)->storage->version != n->res_versions[k]) {
            StaxTensor *t = (StaxTensor *)v;
            StaxGradNode *g = t->grad_fn && StaxGradNode_Check(t->grad_fn)
                              ? (StaxGradNode *)t->grad_fn : NULL;
            return version_error(t, g, t->output_nr, n->res_versions[k]);
        }
    }
    return Py_NewRef(n->results);
}

/* Drops the saved tensors; scalar arguments stay (a formula reading only
 * them, like add's alpha, runs again as in torch). */
void
stax_ag_release(StaxGradNode *n)
{
    if (n->args != NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(n->args); i++) {
            PyObject *a = PyTuple_GET_ITEM(n->args, i);
            if (StaxTensor_Check(a) || PyList_Check(a) || PyTuple_Check(a)) {
                Py_SETREF(((PyTupleObject *)n->args)->ob_item[i],
                          Py_NewRef(Py_None));
            }
        }
    }
    n->freed = n->had_saved;
    Py_CLEAR(n->results);
    Py_CLEAR(n->kwargs);
    Py_CLEAR(n->replay);
}

PyObject *
stax_ag_replay(StaxGradNode *n, PyObject *self_value)
{
    PyObject *args = NULL, *kw = NULL, *res = NULL;
    if (n->args == NULL || n->replay == NULL) {
        return freed_error();
    }
    /* a new tuple: GetSlice of the whole tuple would return n->args itself,
     * and the saved arguments must not change */
    args = PyTuple_New(n->kwonly_from);
    kw = n->kwargs ? PyDict_Copy(n->kwargs) : PyDict_New();
    if (args == NULL || kw == NULL || n->kwonly_from < 1) {
        if (args != NULL && kw != NULL) {
            PyErr_SetString(PyExc_RuntimeError, "autograd: replay of an op without arguments");
        }
        goto done;
    }
    PyTuple_SET_ITEM(args, 0, Py_NewRef(self_value));
    for (Py_ssize_t i = 1; i < n->kwonly_from; i++) {
        PyTuple_SET_ITEM(args, i, Py_NewRef(PyTuple_GET_ITEM(n->args, i)));
    }
    for (Py_ssize_t i = n->kwonly_from; i < PyTuple_GET_SIZE(n->args); i++) {
        if (PyDict_SetItem(kw, PyTuple_GET_ITEM(n->names, i),
                           PyTuple_GET_ITEM(n->args, i)) < 0) {
            goto done;
        }
    }
    res = stax_ag_call_nograd(n->replay, args, kw);
done:
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return res;
}

/* ---- the Python face ----------------------------------------------------- */

static int
node_traverse(PyObject *self, visitproc visit, void *arg)
{
    StaxGradNode *n = (StaxGradNode *)self;
    for (int i = 0; i < n->n_in; i++) {
        Py_VISIT(n->next[i].fn);
    }
    Py_VISIT(n->variable);
    Py_VISIT(n->replay);
    Py_VISIT(n->args);
    Py_VISIT(n->kwargs);
    Py_VISIT(n->results);
    Py_VISIT(n->pre_hooks);
    Py_VISIT(n->post_hooks);
    Py_VISIT(n->pyfn);
    Py_VISIT(n->view_base);
    return 0;
}

static int
node_clear(PyObject *self)
{
    StaxGradNode *n = (StaxGradNode *)self;
    for (int i = 0; i < n->n_in; i++) {
        Py_CLEAR(n->next[i].fn);
    }
    Py_CLEAR(n->variable);
    Py_CLEAR(n->replay);
    Py_CLEAR(n->args);
    Py_CLEAR(n->kwargs);
    Py_CLEAR(n->results);
    Py_CLEAR(n->pre_hooks);
    Py_CLEAR(n->post_hooks);
    Py_CLEAR(n->pyfn);
    Py_CLEAR(n->view_base);
    return 0;
}

static void
node_dealloc(PyObject *self)
{
    StaxGradNode *n = (StaxGradNode *)self;
    PyObject_GC_UnTrack(self);
    Py_TRASHCAN_BEGIN(self, node_dealloc)
    if (n->weakreflist != NULL) {
        PyObject_ClearWeakRefs(self);
    }
    node_clear(self);
    Py_CLEAR(n->names);
    Py_CLEAR(n->shapes);
    Py_CLEAR(n->in_shapes);
    Py_CLEAR(n->out_shapes);
    PyMem_Free(n->next);
    PyMem_Free(n->in_param);
    PyMem_Free(n->in_elem);
    PyMem_Free(n->in_dtypes);
    PyMem_Free(n->out_dtypes);
    PyMem_Free(n->versions);
    PyMem_Free(n->res_versions);
    Py_TYPE(self)->tp_free(self);
    Py_TRASHCAN_END
}

static PyObject *
node_repr(PyObject *self)
{
    return PyUnicode_FromFormat("<%s object at %p>", ((StaxGradNode *)self)->name,
                                self);
}

static PyObject *
node_name(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(((StaxGradNode *)self)->name);
}

static PyObject *
node_next_functions(PyObject *self, void *c)
{
    StaxGradNode *n = (StaxGradNode *)self;
    PyObject *t = PyTuple_New(n->n_in);
    if (t == NULL) {
        return NULL;
    }
    for (int i = 0; i < n->n_in; i++) {
        PyObject *e = Py_BuildValue("(Oi)", n->next[i].fn ? n->next[i].fn
                                                           : Py_None,
                                    n->next[i].nr);
        if (e == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, e);
    }
    return t;
}

static PyObject *
node_variable(PyObject *self, void *c)
{
    StaxGradNode *n = (StaxGradNode *)self;
    if (!n->is_acc) {
        PyErr_SetString(PyExc_AttributeError,
                        "only AccumulateGrad nodes have a 'variable'");
        return NULL;
    }
    return Py_NewRef(n->variable);
}

static PyObject *
hook_list(PyObject **slot)
{
    if (*slot == NULL) {
        *slot = PyList_New(0);
    }
    return *slot ? Py_NewRef(*slot) : NULL;
}

static PyObject *
node_pre_hooks(PyObject *self, void *c)
{
    return hook_list(&((StaxGradNode *)self)->pre_hooks);
}

static PyObject *
node_post_hooks(PyObject *self, void *c)
{
    return hook_list(&((StaxGradNode *)self)->post_hooks);
}

static PyObject *
node_saved_freed(PyObject *self, void *c)
{
    return PyBool_FromLong(((StaxGradNode *)self)->freed);
}

static PyObject *
node_m_replay(PyObject *self, PyObject *x)
{
    return stax_ag_replay((StaxGradNode *)self, x);
}

static PyObject *
node_seqnr(PyObject *self, void *c)
{
    return PyLong_FromLongLong(((StaxGradNode *)self)->seq);
}

static PyMethodDef node_methods[] = {
    {"name", node_name, METH_NOARGS, "the node's name: 'MulBackward0'"},
    {"_replay", node_m_replay, METH_O,
     "re-run the recorded op with its first tensor argument replaced "
     "(grad mode off)"},
    {NULL},
};

static PyGetSetDef node_getset[] = {
    {"next_functions", node_next_functions, NULL,
     "tuple of (Node or None, output_nr), one per tensor input", NULL},
    {"variable", node_variable, NULL, "AccumulateGrad: the leaf", NULL},
    {"_pre_hooks", node_pre_hooks, NULL, NULL, NULL},
    {"_post_hooks", node_post_hooks, NULL, NULL, NULL},
    {"_saved_freed", node_saved_freed, NULL, NULL, NULL},
    {"_sequence_nr", node_seqnr, NULL, NULL, NULL},
    {NULL},
};

static PyMemberDef node_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(StaxGradNode, weakreflist),
     READONLY, NULL},
    {NULL},
};

static PyType_Slot node_slots[] = {
    {Py_tp_members, node_members},
    {Py_tp_doc, "A node of the autograd graph (t.grad_fn): the backward of "
                "one recorded op, or AccumulateGrad for a leaf."},
    {Py_tp_dealloc, node_dealloc},
    {Py_tp_traverse, node_traverse},
    {Py_tp_clear, node_clear},
    {Py_tp_repr, node_repr},
    {Py_tp_methods, node_methods},
    {Py_tp_getset, node_getset},
    {0, NULL},
};

static PyType_Spec node_spec = {
    .name = "tensorplay.autograd.graph.Node",
    .basicsize = sizeof(StaxGradNode),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = node_slots,
};

int
stax_ag_node_init(PyObject *m)
{
    PyObject *tp = PyType_FromSpec(&node_spec);
    if (tp == NULL) {
        return -1;
    }
    StaxGradNode_Type = (PyTypeObject *)tp;
    return PyModule_AddObjectRef(m, "_AutogradNode", tp);
}
