/* Deferred samples: the first call costs compile time, not data time.
 *
 * Hybrid tracing needs a node's sample value only where Python asks for it
 * (a data or value gate, printing, .numpy(), an op whose eager kernel reads
 * its operands, a write); everything else needs its metadata, which the op
 * table's eager kernels give without computing (stax_ops_meta_call). Such a
 * sample is an allocated tensor with eager's shape, dtype and strides whose
 * storage is listed in tr->lazy with how to fill it; a view of it shares the
 * storage. Asking for a value fills the storages under it, running the
 * backward slice of the nodes that produce them (the slice the guard replay
 * runs, seed Algorithm 3.1), in the order they were recorded: the values are
 * eager's, bit for bit. A write to any storage first fills every deferred
 * one (a deferred node must read what its operands held when it was
 * recorded). */
#include "trace/trace_internal.h"
#include "tensor/stax_numpy.h"
#include <string.h>

static int force_key(StaxTracer *tr, PyObject *key);

/* > 0 while a deferred sample is being filled: the fill's own writes (its
 * copy into the sample, a CUDA copy announcing its write) are no writes
 * of the traced code that must fill readers first */
static int lazy_filling = 0;

static int
lazy_put(StaxTracer *tr, void *storage, PyObject *entry)
{
    PyObject *key = PyLong_FromVoidPtr(storage);
    int rc = (key == NULL || entry == NULL)
                 ? -1 : PyDict_SetItem(tr->lazy, key, entry);
    Py_XDECREF(key);
    Py_XDECREF(entry);
    return rc;
}

int
stax_trace_lazy_input(StaxTracer *tr, StaxTensor *base, StaxTensor *real,
                      int64_t lo, int64_t hi)
{
    return lazy_put(tr, base->storage,
                    Py_BuildValue("(OOLL)", base, real, (long long)lo,
                                  (long long)hi));
}

typedef struct {
    StaxTracer *tr;
    StaxNode *n;
    PyObject *inputs;
    Py_ssize_t leaf;
} result_ctx;

static int
result_leaf(result_ctx *c, PyObject *o)
{
    if (stax_trace_is_tensor(o)) {
        StaxTensor *t = (StaxTensor *)o;
        Py_ssize_t i = c->leaf++;
        PyObject *k = PyLong_FromVoidPtr(t->storage);
        int known;
        if (k == NULL) {
            return -1;
        }
        known = c->inputs != NULL ? PySet_Contains(c->inputs, k) : 0;
        if (known == 0) {
            known = PyDict_Contains(c->tr->lazy, k);
        }
        Py_DECREF(k);
        if (known != 0) {
            return known < 0 ? -1 : 0;
        }
        return lazy_put(c->tr, t->storage,
                        Py_BuildValue("(OnO)", c->n, i, o));
    }
    if (PyTuple_Check(o) || PyList_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            if (result_leaf(c, PySequence_Fast_GET_ITEM(o, i)) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

int
stax_trace_lazy_result(StaxTracer *tr, StaxNode *n, PyObject *val,
                       PyObject *inputs)
{
    result_ctx c = {tr, n, inputs, 0};
    return result_leaf(&c, val);
}

int
stax_trace_lazy_any(StaxTracer *tr, PyObject *o)
{
    PyObject *keys, *k;
    Py_ssize_t pos = 0;
    Py_hash_t h;
    int r = 0;
    if (tr->lazy == NULL || PyDict_GET_SIZE(tr->lazy) == 0) {
        return 0;
    }
    keys = PySet_New(NULL);
    if (keys == NULL || stax_trace_storage_keys(o, keys) < 0) {
        Py_XDECREF(keys);
        return -1;
    }
    while (r == 0 && _PySet_NextEntry(keys, &pos, &k, &h)) {
        r = PyDict_Contains(tr->lazy, k);
    }
    Py_DECREF(keys);
    return r;
}

int
stax_trace_force(StaxTracer *tr, PyObject *o)
{
    PyObject *keys, *k;
    Py_ssize_t pos = 0;
    Py_hash_t h;
    int rc = 0;
    if (o == NULL || tr->lazy == NULL || PyDict_GET_SIZE(tr->lazy) == 0) {
        return 0;
    }
    keys = PySet_New(NULL);
    if (keys == NULL || stax_trace_storage_keys(o, keys) < 0) {
        Py_XDECREF(keys);
        return -1;
    }
    while (rc == 0 && _PySet_NextEntry(keys, &pos, &k, &h)) {
        rc = force_key(tr, k);
    }
    Py_DECREF(keys);
    return rc;
}

int
stax_trace_force_all(StaxTracer *tr)
{
    while (tr->lazy != NULL && PyDict_GET_SIZE(tr->lazy) > 0) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        int rc;
        if (!PyDict_Next(tr->lazy, &pos, &k, &v)) {
            break;
        }
        Py_INCREF(k);
        rc = force_key(tr, k);
        Py_DECREF(k);
        if (rc < 0) {
            return -1;
        }
    }
    return 0;
}

/* explicit generators among a call's arguments (generator=g): up to 4,
 * their states saved before the sample run and put back after it (the
 * default generator is restored once, around the whole trace) */
typedef struct {
    int n;
    StaxGenerator *g[4];
    uint64_t seed[4], offset[4];
} gen_saves;

static void
gen_save_one(gen_saves *s, PyObject *o)
{
    if (s->n < 4 && PyObject_TypeCheck(o, StaxGenerator_Type)) {
        StaxGenerator *g = (StaxGenerator *)o;
        s->g[s->n] = g;
        s->seed[s->n] = g->seed;
        s->offset[s->n] = g->offset;
        s->n++;
    }
}

static void
gen_save(gen_saves *s, PyObject *va, PyObject *vk)
{
    s->n = 0;
    for (Py_ssize_t i = 0; va != NULL && PyTuple_Check(va) && i < PyTuple_GET_SIZE(va); i++) {
        gen_save_one(s, PyTuple_GET_ITEM(va, i));
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (vk != NULL && PyDict_Check(vk) && PyDict_Next(vk, &pos, &k, &v)) {
        gen_save_one(s, v);
    }
}

static void
gen_restore(const gen_saves *s)
{
    for (int i = s->n - 1; i >= 0; i--) {
        s->g[i]->seed = s->seed[i];
        s->g[i]->offset = s->offset[i];
    }
}

PyObject *
stax_trace_call_node(StaxNode *n, PyObject *va, PyObject *vk)
{
    PyObject *res = NULL;
    gen_saves gs;
    gen_save(&gs, va, vk);
    int grad = stax_grad_enabled();
    stax_set_grad_enabled(0);
    stax_trace_sampling++;
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
    stax_trace_sampling--;
    stax_set_grad_enabled(grad);
    gen_restore(&gs);
    return res;
}

static PyObject *
node_val(PyObject *node, void *ctx)
{
    PyObject *v = PyDict_GetItemString(((StaxNode *)node)->meta, "val");
    (void)ctx;
    if (v == NULL) {
        PyErr_Format(PyExc_RuntimeError,
                     "tracing: the sample of node %%%U is gone",
                     ((StaxNode *)node)->name);
    }
    return Py_XNewRef(v);
}

/* the leaf-th tensor leaf of o (depth first), borrowed, or NULL */
static PyObject *
nth_tensor(PyObject *o, Py_ssize_t *leaf)
{
    if (stax_trace_is_tensor(o)) {
        return (*leaf)-- == 0 ? o : NULL;
    }
    if (PyTuple_Check(o) || PyList_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            PyObject *r = nth_tensor(PySequence_Fast_GET_ITEM(o, i), leaf);
            if (r != NULL) {
                return r;
            }
        }
    }
    return NULL;
}

/* run node n on its (filled) operands and copy leaf `leaf` of the result
 * into `dst`, the sample handed out when n was recorded */
static int
fill_from_node(StaxTracer *tr, StaxNode *n, Py_ssize_t leaf, StaxTensor *dst)
{
    PyObject *va = NULL, *vk = NULL, *res = NULL, *src, *da = NULL,
             *sa = NULL, *kept;
    Py_ssize_t i = leaf;
    int rc = -1;
    kept = tr->lazy_args != NULL
               ? PyDict_GetItemWithError(tr->lazy_args, (PyObject *)n) : NULL;
    if (kept != NULL) {
        va = Py_NewRef(PyTuple_GET_ITEM(kept, 0));
        vk = Py_NewRef(PyTuple_GET_ITEM(kept, 1));
    }
    else if (!PyErr_Occurred()) {
        va = stax_graph_map_arg(n->args, node_val, NULL);
        vk = va ? (n->kwargs ? stax_graph_map_arg(n->kwargs, node_val, NULL)
                             : PyDict_New())
                : NULL;
    }
    if (vk == NULL || stax_trace_force(tr, va) < 0
        || stax_trace_force(tr, vk) < 0) {
        goto done;
    }
    res = stax_trace_call_node(n, va, vk);
    if (res == NULL) {
        goto done;
    }
    src = nth_tensor(res, &i);
    if (src == NULL || ((StaxTensor *)src)->dtype != dst->dtype
        || ((StaxTensor *)src)->ndim != dst->ndim
        || memcmp(((StaxTensor *)src)->sizes, dst->sizes,
                  sizeof(int64_t) * (size_t)dst->ndim) != 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "tracing: node %%%U gave a sample unlike its metadata "
                     "(a deferred sample must match eager's)", n->name);
        goto done;
    }
    if (stax_tensor_is_cuda(dst) || stax_tensor_is_cuda((StaxTensor *)src)) {
        /* a deferred CUDA sample (ops_func.c's meta on CUDA operands): a
         * copy on the device, which is no write of the traced code's (its
         * version stays) */
        uint64_t ver = dst->storage->version;
        int r = stax_tensor_copy_from(dst, src);
        dst->storage->version = ver;
        rc = r;
        goto done;
    }
    da = stax_tensor_as_storage_array(dst);
    sa = da ? stax_tensor_as_storage_array((StaxTensor *)src) : NULL;
    if (sa == NULL || PyArray_CopyInto((PyArrayObject *)da,
                                       (PyArrayObject *)sa) < 0) {
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(va);
    Py_XDECREF(vk);
    Py_XDECREF(res);
    Py_XDECREF(da);
    Py_XDECREF(sa);
    return rc;
}

static int
force_key(StaxTracer *tr, PyObject *key)
{
    PyObject *e = PyDict_GetItemWithError(tr->lazy, key);
    int rc = -1;
    if (e == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_INCREF(e);
    Py_INCREF(key);
    if (PyDict_DelItem(tr->lazy, key) < 0) {
        goto done;
    }
    lazy_filling++;
    if (PyTuple_GET_SIZE(e) == 4) {
        /* a stand-in: copy the input's extent (the prefix is never read) */
        StaxTensor *base = (StaxTensor *)PyTuple_GET_ITEM(e, 0);
        StaxTensor *real = (StaxTensor *)PyTuple_GET_ITEM(e, 1);
        long long lo = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 2));
        long long hi = PyLong_AsLongLong(PyTuple_GET_ITEM(e, 3));
        int isz = stax_dtype_itemsize(base->dtype);
        if (lo > 0) {
            memset(STAX_TENSOR_DATA(base), 0, (size_t)(lo * isz));
        }
        if (hi > lo) {
            memcpy(STAX_TENSOR_DATA(base) + lo * isz,
                   real->storage->data + lo * isz, (size_t)((hi - lo) * isz));
        }
        rc = 0;
    }
    else {
        rc = fill_from_node(tr, (StaxNode *)PyTuple_GET_ITEM(e, 0),
                            PyLong_AsSsize_t(PyTuple_GET_ITEM(e, 1)),
                            (StaxTensor *)PyTuple_GET_ITEM(e, 2));
    }
    lazy_filling--;
done:
    Py_DECREF(e);
    Py_DECREF(key);
    return rc;
}

/* an alias of tensor leaf o: the same storage and geometry, whatever the
 * tensor object o views later (`o.data = ...` swaps its storage) */
static PyObject *
alias_leaf(PyObject *o, void *ctx)
{
    StaxTensor *t = (StaxTensor *)o;
    (void)ctx;
    if (!stax_trace_is_tensor(o)) {
        return NULL;
    }
    return (PyObject *)stax_tensor_view(t, t->ndim, t->sizes, t->strides,
                                        t->offset);
}

int
stax_trace_lazy_reads(StaxTracer *tr, StaxNode *n, PyObject *va, PyObject *vk)
{
    PyObject *a = NULL, *k = NULL, *pair = NULL;
    int rc = -1, grad = stax_grad_enabled();
    if (tr->lazy_args == NULL || tr->lazy_reads == NULL) {
        return 0;
    }
    stax_set_grad_enabled(0);
    a = stax_graph_map_leaves(va, 1, alias_leaf, NULL);
    k = a ? stax_graph_map_leaves(vk, 1, alias_leaf, NULL) : NULL;
    stax_set_grad_enabled(grad);
    pair = k ? PyTuple_Pack(2, a, k) : NULL;
    if (pair != NULL && PyDict_SetItem(tr->lazy_args, (PyObject *)n, pair) == 0
        && stax_trace_storage_keys(va, tr->lazy_reads) == 0
        && stax_trace_storage_keys(vk, tr->lazy_reads) == 0) {
        rc = 0;
    }
    Py_XDECREF(a);
    Py_XDECREF(k);
    Py_XDECREF(pair);
    return rc;
}

void
stax_trace_lazy_before_write(StaxTracer *tr, StaxTensor *t)
{
    PyObject *key, *et, *ev, *tb;
    int has;
    if (tr == NULL || lazy_filling > 0 || tr->lazy == NULL || tr->lazy_reads == NULL
        || PySet_GET_SIZE(tr->lazy_reads) == 0 || PyDict_GET_SIZE(tr->lazy) == 0) {
        return;
    }
    PyErr_Fetch(&et, &ev, &tb);
    key = PyLong_FromVoidPtr(t->storage);
    has = key != NULL ? PySet_Contains(tr->lazy_reads, key) : -1;
    Py_XDECREF(key);
    if (has > 0) {
        /* every deferred node reads what its operands held when it was
         * recorded: fill them all before the write (the set is emptied
         * first: the fills' own writes land in new storages) */
        if (PySet_Clear(tr->lazy_reads) < 0 || stax_trace_force_all(tr) < 0) {
            has = -1;
        }
    }
    if (has < 0 && tr->lazy_error == NULL) {
        PyObject *ft, *fv, *ftb;
        PyErr_Fetch(&ft, &fv, &ftb);
        PyErr_NormalizeException(&ft, &fv, &ftb);
        if (fv != NULL && ftb != NULL) {
            PyException_SetTraceback(fv, ftb);
        }
        tr->lazy_error = fv;
        Py_XDECREF(ft);
        Py_XDECREF(ftb);
    }
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
}
