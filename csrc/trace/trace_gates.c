/* Data gates and shape reads (seed 3.3): a Python-level read of a traced
 * value (bool(), int(), .item(), ...) is a gate recorded with its sample
 * value when it depends on an input; a read of an input's size records the
 * (placeholder, dim) pair the guards must check. */
#include "trace/trace_internal.h"
#include "structmember.h"
#include <string.h>

/* ------------------------------------------------------------------ */
/* gates and shape reads                                               */

/* 1 when n depends on an input (placeholder), a constant held by reference
 * (get_attr) or a random draw; 0 when it is a function of literals only */
static int writes_meet(StaxTracer *tr, StaxNode *m, PyObject *writes, StaxNode *n);

static int
depends_on_inputs(StaxTracer *tr, StaxNode *n)
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
        /* a write into m's storage (t = tp.zeros(()); t.add_(x.sum())):
         * what it wrote is part of m's value too */
        pos = 0;
        while (res == 0 && PyDict_Next(tr->mutations, &pos, &k, &v)) {
            int meets = k != (PyObject *)m ? writes_meet(tr, (StaxNode *)k, v, m) : 0;
            if (meets < 0 || (meets && PyList_Append(stack, k) < 0)) {
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

/* 1 when the storages in `writes` (a mutation node m's, tr->mutations)
 * meet those of node n's sample value */
static int
writes_meet(StaxTracer *tr, StaxNode *m, PyObject *writes, StaxNode *n)
{
    PyObject *val = PyDict_GetItemString(n->meta, "val"), *mine, *k;
    Py_ssize_t pos = 0;
    Py_hash_t h;
    int r = 0;
    (void)tr;
    (void)m;
    if (val == NULL) {
        return 0;
    }
    mine = PySet_New(NULL);
    if (mine == NULL || stax_trace_storage_keys(val, mine) < 0) {
        Py_XDECREF(mine);
        return -1;
    }
    while (r == 0 && _PySet_NextEntry(writes, &pos, &k, &h)) {
        r = PySet_Contains(mine, k);
    }
    Py_DECREF(mine);
    return r;
}

/* 1 when a node recorded after n wrote n's storage: a gate reading n now
 * reads the written value, not the one n had when it was recorded
 * (v = y[0]; y.mul_(2); v.item()) */
static int
written_since(StaxTracer *tr, StaxNode *n)
{
    PyObject *nodes = tr->graph->nodes;
    if (PyDict_GET_SIZE(tr->mutations) == 0) {
        return 0;
    }
    for (Py_ssize_t i = PyList_GET_SIZE(nodes) - 1; i >= 0; i--) {
        PyObject *m = PyList_GET_ITEM(nodes, i), *w;
        int r;
        if (m == (PyObject *)n) {
            return 0;
        }
        w = PyDict_GetItemWithError(tr->mutations, m);
        if (w == NULL) {
            if (PyErr_Occurred()) {
                return -1;
            }
            continue;
        }
        r = writes_meet(tr, (StaxNode *)m, w, n);
        if (r != 0) {
            return r;
        }
    }
    return 0;
}

int
stax_trace_add_gate(StaxTracer *tr, StaxNode *n, const char *kind,
                    PyObject *value)
{
    PyObject *t, *read = NULL;
    int rc = written_since(tr, n);
    if (rc < 0) {
        return -1;
    }
    if (rc) {
        /* the gate reads n as it is now: a clone recorded here is what
         * the replay must compute (after the writes, which the replay's
         * slice then takes in since a later node of it reads them) */
        PyObject *p = stax_trace_proxy_new(tr, n), *args;
        args = p != NULL ? PyTuple_Pack(1, p) : NULL;
        Py_XDECREF(p);
        t = args != NULL ? PyUnicode_FromString("clone") : NULL;
        read = t != NULL ? stax_trace_record(tr, STAX_NODE_CALL_METHOD, t, args, NULL)
                         : NULL;
        Py_XDECREF(t);
        Py_XDECREF(args);
        if (read == NULL) {
            return -1;
        }
        n = ((StaxProxy *)read)->node;
    }
    rc = depends_on_inputs(tr, n);
    if (rc <= 0) {
        Py_XDECREF(read);
        return rc;    /* a value of literals only: no gate needed */
    }
    t = Py_BuildValue("(OsO)", n, kind, value);
    Py_XDECREF(read);
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
    if (v == NULL || !stax_trace_is_tensor(v)) {
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

