/* The guard replay subgraph (Algorithm 3.1): the backward slice of the
 * gate nodes, extracted from the captured graph before any DCE, with the
 * writes it depends on and clones where it would otherwise write the
 * caller's tensors. */
#include "trace/trace_internal.h"
#include "structmember.h"
#include <string.h>

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
        if (val != NULL && stax_trace_storage_keys(val, t) < 0) {
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
    if (mine == NULL || stax_trace_storage_keys(val, mine) < 0) {
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
PyObject *
stax_trace_extract_replay(StaxTracer *tr, PyObject *consts, int *copies_inputs)
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
                || !stax_trace_is_tensor(val)) {
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

