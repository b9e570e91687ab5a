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

/* The state of one replay extraction (stax_trace_extract_replay). */
typedef struct {
    StaxTracer *tr;
    PyObject *nodes;          /* the graph's nodes, in order */
    Py_ssize_t nn, ng;        /* nodes, gates */
    PyObject *needed;         /* set: the slice */
    PyObject *touch;          /* node -> storages it reads (memo) */
    PyObject *written;        /* set: storages the slice writes */
    PyObject *env;            /* node -> its copy in g2 */
    PyObject *gate_out;       /* gate node -> the value the gate read */
    PyObject *pend;           /* written placeholders awaiting a clone */
    PyObject *g2;             /* the replay graph */
    int copies_inputs;
} replay_x;

static PyObject *
gate_node(replay_x *x, Py_ssize_t q)
{
    return PyTuple_GET_ITEM(PyList_GET_ITEM(x->tr->gates, q), 0);
}

/* 1 when a node of the slice after position i reads a storage in w */
static int
later_reads(replay_x *x, Py_ssize_t i, PyObject *w)
{
    int r = 0;
    for (Py_ssize_t j = i + 1; r == 0 && j < x->nn; j++) {
        PyObject *n = PyList_GET_ITEM(x->nodes, j), *t, *k;
        Py_ssize_t pos = 0;
        Py_hash_t h;
        r = PySet_Contains(x->needed, n);
        if (r <= 0) {
            if (r < 0) {
                return -1;
            }
            continue;
        }
        r = 0;
        t = node_touch((StaxNode *)n, x->touch);
        if (t == NULL) {
            return -1;
        }
        while (r == 0 && _PySet_NextEntry(w, &pos, &k, &h)) {
            r = PySet_Contains(t, k);
        }
        Py_DECREF(t);
    }
    return r;
}

/* the gates' slice, then every mutation a later node of it reads, with
 * what that mutation depends on, until nothing changes */
static int
slice_gates(replay_x *x)
{
    int changed = 1;
    for (Py_ssize_t i = 0; i < x->ng; i++) {
        if (close_over(x->needed, (StaxNode *)gate_node(x, i)) < 0) {
            return -1;
        }
    }
    while (changed && PyDict_GET_SIZE(x->tr->mutations) > 0) {
        changed = 0;
        for (Py_ssize_t i = 0; i < x->nn; i++) {
            PyObject *m = PyList_GET_ITEM(x->nodes, i);
            PyObject *w = PyDict_GetItemWithError(x->tr->mutations, m);
            int r = w ? PySet_Contains(x->needed, m) : 0;
            if (r != 0 || w == NULL) {
                if (r < 0 || PyErr_Occurred()) {
                    return -1;
                }
                continue;
            }
            r = later_reads(x, i, w);
            if (r < 0) {
                return -1;
            }
            if (r == 1) {
                if (close_over(x->needed, (StaxNode *)m) < 0) {
                    return -1;
                }
                changed = 1;
            }
        }
    }
    return 0;
}

/* the storages the slice writes */
static int
collect_written(replay_x *x)
{
    for (Py_ssize_t i = 0; i < x->nn; i++) {
        PyObject *m = PyList_GET_ITEM(x->nodes, i), *w, *k;
        Py_ssize_t pos = 0;
        Py_hash_t h;
        w = PyDict_GetItemWithError(x->tr->mutations, m);
        if (w == NULL) {
            if (PyErr_Occurred()) {
                return -1;
            }
            continue;
        }
        if (PySet_Contains(x->needed, m) != 1) {
            continue;
        }
        while (_PySet_NextEntry(w, &pos, &k, &h)) {
            if (PySet_Add(x->written, k) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* placeholders viewing one written storage (f(x, x), f(x, x.t())):
 * separate clones would lose the aliasing, so the caller runs the replay
 * on copies of all inputs that keep it (_trace_stand_ins) */
static int
aliased_written_inputs(replay_x *x)
{
    PyObject *seen;
    x->copies_inputs = 0;
    if (PySet_GET_SIZE(x->written) == 0) {
        return 0;
    }
    seen = PySet_New(NULL);
    if (seen == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < x->nn && !x->copies_inputs; i++) {
        StaxNode *n = (StaxNode *)PyList_GET_ITEM(x->nodes, i);
        PyObject *val = PyDict_GetItemString(n->meta, "val"), *k;
        int r;
        if (n->op != STAX_NODE_PLACEHOLDER || val == NULL || !stax_trace_is_tensor(val)) {
            continue;
        }
        k = PyLong_FromVoidPtr(((StaxTensor *)val)->storage);
        r = k ? PySet_Contains(x->written, k) : -1;
        if (r == 1) {
            r = PySet_Contains(seen, k);
            if (r == 1) {
                x->copies_inputs = 1;
            }
            else if (r == 0) {
                r = PySet_Add(seen, k);
            }
        }
        Py_XDECREF(k);
        if (r < 0) {
            Py_DECREF(seen);
            return -1;
        }
    }
    Py_DECREF(seen);
    return 0;
}

/* clones of the written placeholders, after all of them: the slice then
 * writes the clones; a gate that read such an input keeps a clone of its
 * value before the writes */
static int
clone_pending_inputs(replay_x *x)
{
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(x->pend); j++) {
        PyObject *p = PyList_GET_ITEM(x->pend, j);
        PyObject *cl = PyDict_GetItem(x->env, p);
        if (x->copies_inputs) {
            Py_INCREF(cl);      /* the inputs are copies already */
        }
        else {
            cl = append_clone(x->g2, cl);
            if (cl == NULL || PyDict_SetItem(x->env, p, cl) < 0) {
                Py_XDECREF(cl);
                return -1;
            }
        }
        Py_DECREF(cl);
        for (Py_ssize_t q = 0; q < x->ng; q++) {
            if (gate_node(x, q) == p && PyDict_GetItem(x->gate_out, p) == NULL) {
                /* the gate read the input before the writes */
                PyObject *c2 = append_clone(x->g2, cl);
                if (c2 == NULL || PyDict_SetItem(x->gate_out, p, c2) < 0) {
                    Py_XDECREF(c2);
                    return -1;
                }
                Py_DECREF(c2);
            }
        }
    }
    return PyList_SetSlice(x->pend, 0, PY_SSIZE_T_MAX, NULL);
}

/* node n of the slice (or a placeholder) copied into g2 */
static int
copy_slice_node(replay_x *x, StaxNode *n)
{
    PyObject *c;
    int wr, isgate = 0;
    if (n->op != STAX_NODE_PLACEHOLDER && clone_pending_inputs(x) < 0) {
        return -1;
    }
    c = PyObject_CallMethod(x->g2, "node_copy", "OO", n, x->env);
    if (c == NULL || PyDict_SetItem(x->env, (PyObject *)n, c) < 0) {
        Py_XDECREF(c);
        return -1;
    }
    Py_DECREF(c);
    wr = val_meets(n, x->written);
    if (wr < 0) {
        return -1;
    }
    if (wr && n->op == STAX_NODE_PLACEHOLDER) {
        return PyList_Append(x->pend, (PyObject *)n);
    }
    for (Py_ssize_t j = 0; j < x->ng; j++) {
        isgate |= gate_node(x, j) == (PyObject *)n;
    }
    if (wr && (n->op == STAX_NODE_GET_ATTR || isgate)) {
        /* a constant the slice writes: write a copy; a gate value a
         * later mutation overwrites: keep it as the gate read it */
        PyObject *cl = append_clone(x->g2, c);
        if (cl == NULL
            || PyDict_SetItem(n->op == STAX_NODE_GET_ATTR ? x->env : x->gate_out,
                              (PyObject *)n, cl) < 0) {
            Py_XDECREF(cl);
            return -1;
        }
        Py_DECREF(cl);
    }
    return 0;
}

/* g2 with the slice copied in order and the gate values as its output */
static int
build_replay_graph(replay_x *x)
{
    PyObject *outs, *nm, *o;
    x->g2 = stax_graph_new();
    if (x->g2 == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < x->nn; i++) {
        StaxNode *n = (StaxNode *)PyList_GET_ITEM(x->nodes, i);
        int r = PySet_Contains(x->needed, (PyObject *)n);
        if (r < 0) {
            return -1;
        }
        if ((n->op == STAX_NODE_PLACEHOLDER || r) && copy_slice_node(x, n) < 0) {
            return -1;
        }
    }
    outs = PyTuple_New(x->ng);
    if (outs == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < x->ng; i++) {
        PyObject *g = gate_node(x, i);
        PyObject *c = PyDict_GetItem(x->gate_out, g);
        if (c == NULL) {
            c = PyDict_GetItem(x->env, g);
        }
        PyTuple_SET_ITEM(outs, i, Py_NewRef(c ? c : Py_None));
    }
    nm = PyUnicode_FromString("output");
    o = nm ? PyObject_CallMethodOneArg(x->g2, nm, outs) : NULL;
    Py_XDECREF(nm);
    Py_DECREF(outs);
    if (o == NULL) {
        return -1;
    }
    Py_DECREF(o);
    return 0;
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
    replay_x x = {tr, NULL, 0, PyList_GET_SIZE(tr->gates), PySet_New(NULL),
                  PyDict_New(), PySet_New(NULL), PyDict_New(), PyDict_New(),
                  PyList_New(0), NULL, 0};
    PyObject *root = NULL, *res = NULL;
    if (x.needed == NULL || x.env == NULL || x.touch == NULL || x.written == NULL
        || x.gate_out == NULL || x.pend == NULL) {
        goto done;
    }
    x.nodes = stax_graph_node_list((PyObject *)tr->graph);
    if (x.nodes == NULL) {
        goto done;
    }
    x.nn = PyList_GET_SIZE(x.nodes);
    if (slice_gates(&x) < 0 || collect_written(&x) < 0
        || aliased_written_inputs(&x) < 0 || build_replay_graph(&x) < 0) {
        goto done;
    }
    *copies_inputs = x.copies_inputs;
    root = Py_BuildValue("(OO)", consts, x.g2);
    res = root ? PyObject_Call((PyObject *)StaxGraphModule_Type, root, NULL) : NULL;
done:
    Py_XDECREF(x.needed);
    Py_XDECREF(x.env);
    Py_XDECREF(x.touch);
    Py_XDECREF(x.written);
    Py_XDECREF(x.gate_out);
    Py_XDECREF(x.pend);
    Py_XDECREF(x.g2);
    Py_XDECREF(x.nodes);
    Py_XDECREF(root);
    return res;
}
