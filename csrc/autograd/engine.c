/* The backward engine: from the roots' grad edges, count each node's
 * dependencies, then run nodes whose dependencies are all met (latest
 * created first, AccumulateGrad as soon as ready), summing the gradients
 * that arrive at each of a node's outputs; tensor hooks run on a node's
 * incoming gradients, leaves accumulate into .grad (backward) or are
 * captured (autograd.grad). Saved tensors are freed unless retain_graph. */
#include "autograd/autograd_internal.h"

#include <string.h>

PyObject *
stax_ag_call_method(PyObject *obj, const char *name, PyObject *arg)
{
    return arg ? PyObject_CallMethod(obj, name, "O", arg)
               : PyObject_CallMethod(obj, name, NULL);
}

static PyObject *
helper(const char *name)
{
    PyObject *fn = PyDict_GetItemString(stax_ag_helpers, name);
    if (fn == NULL) {
        PyErr_Format(PyExc_RuntimeError, "autograd helper %s not loaded",
                     name);
    }
    return fn;
}

PyObject *
stax_ag_sum_to(PyObject *g, PyObject *shape)
{
    PyObject *fn = helper("_sum_to");
    return fn ? PyObject_CallFunctionObjArgs(fn, g, shape, NULL) : NULL;
}

static PyObject *
add_grads(PyObject *a, PyObject *b)
{
    const stax_op_info *op = stax_op_by_name("add");
    PyObject *args = PyTuple_Pack(2, a, b), *r;
    if (args == NULL) {
        return NULL;
    }
    r = stax_op_call(op, args, NULL);
    Py_DECREF(args);
    return r;
}

/* shape/dtype the gradient must have at an edge */
static PyObject *
fit_grad(StaxGradNode *n, int i, PyObject *g)
{
    StaxTensor *t;
    PyObject *want = PyTuple_GET_ITEM(n->in_shapes, i), *cur, *r;
    int same;
    if (!StaxTensor_Check(g)) {
        PyErr_Format(PyExc_RuntimeError, "%s: formula for input %d gave %.80s,"
                     " not a Tensor", n->name, i, Py_TYPE(g)->tp_name);
        return NULL;
    }
    t = (StaxTensor *)g;
    cur = stax_tensor_size_object(t->ndim, t->sizes);
    if (cur == NULL) {
        return NULL;
    }
    same = PyObject_RichCompareBool(cur, want, Py_EQ);
    Py_DECREF(cur);
    if (same < 0) {
        return NULL;
    }
    Py_INCREF(g);
    if (!same) {
        r = stax_ag_sum_to(g, want);
        Py_DECREF(g);
        if (r == NULL) {
            return NULL;
        }
        g = r;
    }
    if (((StaxTensor *)g)->dtype != n->in_dtypes[i]) {
        r = PyObject_CallMethod(g, "to", "O",
                                stax_dtype_object(n->in_dtypes[i]));
        Py_DECREF(g);
        g = r;
    }
    return g;
}

/* ---- graph bookkeeping ------------------------------------------------- */

typedef struct {
    PyObject *index;     /* dict: node -> int */
    PyObject *nodes;     /* list of nodes */
    int *deps;
    char *needed;
    PyObject *buffers;   /* list (per node) of list (per output) */
    int n, cap;
} graph_t;

static int
graph_add(graph_t *G, PyObject *node)
{
    PyObject *ix, *buf;
    StaxGradNode *nd = (StaxGradNode *)node;
    if (G->n == G->cap) {
        int nc = G->cap ? G->cap * 2 : 64;
        int *d = PyMem_Realloc(G->deps, sizeof(int) * nc);
        char *ne;
        if (d == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        G->deps = d;
        ne = PyMem_Realloc(G->needed, (size_t)nc);
        if (ne == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        G->needed = ne;
        G->cap = nc;
    }
    ix = PyLong_FromLong(G->n);
    buf = PyList_New(nd->n_out > 0 ? nd->n_out : 1);
    if (ix == NULL || buf == NULL) {
        Py_XDECREF(ix);
        Py_XDECREF(buf);
        return -1;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(buf); k++) {
        PyList_SET_ITEM(buf, k, Py_NewRef(Py_None));
    }
    if (PyDict_SetItem(G->index, node, ix) < 0
        || PyList_Append(G->nodes, node) < 0
        || PyList_Append(G->buffers, buf) < 0) {
        Py_DECREF(ix);
        Py_DECREF(buf);
        return -1;
    }
    Py_DECREF(ix);
    Py_DECREF(buf);
    G->deps[G->n] = 0;
    G->needed[G->n] = 0;
    G->n++;
    return G->n - 1;
}

static int
graph_ix(graph_t *G, PyObject *node)
{
    PyObject *ix = PyDict_GetItem(G->index, node);
    return ix ? (int)PyLong_AsLong(ix) : -1;
}

/* discover every node reachable from the roots; count dependencies */
static int
discover(graph_t *G, PyObject *roots)
{
    PyObject *stack = PyList_New(0);
    if (stack == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(roots); i++) {
        PyObject *r = PyList_GET_ITEM(roots, i);
        if (graph_ix(G, r) < 0) {
            if (graph_add(G, r) < 0 || PyList_Append(stack, r) < 0) {
                goto fail;
            }
        }
    }
    while (PyList_GET_SIZE(stack) > 0) {
        Py_ssize_t last = PyList_GET_SIZE(stack) - 1;
        StaxGradNode *nd = (StaxGradNode *)Py_NewRef(PyList_GET_ITEM(stack, last));
        PyList_SetSlice(stack, last, last + 1, NULL);
        for (int k = 0; k < nd->n_in; k++) {
            PyObject *c = nd->next[k].fn;
            int ci;
            if (c == NULL) {
                continue;
            }
            ci = graph_ix(G, c);
            if (ci < 0) {
                ci = graph_add(G, c);
                if (ci < 0 || PyList_Append(stack, c) < 0) {
                    Py_DECREF(nd);
                    goto fail;
                }
            }
            G->deps[ci]++;
        }
        Py_DECREF(nd);
    }
    Py_DECREF(stack);
    return 0;
fail:
    Py_DECREF(stack);
    return -1;
}

/* needed[i]: node i leads to a capture target (autograd.grad): nodes in
 * reverse topological order are resolved by repeated relaxation; graphs are
 * small enough for the simple fixed point. */
static void
mark_needed(graph_t *G, const char *capture)
{
    int changed = 1;
    for (int i = 0; i < G->n; i++) {
        G->needed[i] = capture[i];
    }
    while (changed) {
        changed = 0;
        for (int i = 0; i < G->n; i++) {
            StaxGradNode *nd = (StaxGradNode *)PyList_GET_ITEM(G->nodes, i);
            if (G->needed[i]) {
                continue;
            }
            for (int k = 0; k < nd->n_in; k++) {
                int ci = nd->next[k].fn ? graph_ix(G, nd->next[k].fn) : -1;
                if (ci >= 0 && G->needed[ci]) {
                    G->needed[i] = 1;
                    changed = 1;
                    break;
                }
            }
        }
    }
}

static int
buffer_add(graph_t *G, int ix, int nr, PyObject *g)
{
    PyObject *buf = PyList_GET_ITEM(G->buffers, ix);
    PyObject *cur;
    if (nr >= PyList_GET_SIZE(buf)) {
        PyErr_SetString(PyExc_RuntimeError, "autograd: bad output number");
        return -1;
    }
    cur = PyList_GET_ITEM(buf, nr);
    if (cur == Py_None) {
        return PyList_SetItem(buf, nr, Py_NewRef(g));
    }
    {
        PyObject *s = add_grads(cur, g);
        return s ? PyList_SetItem(buf, nr, s) : -1;
    }
}

static PyObject *
call_hook(PyObject *hook, PyObject *g)
{
    PyObject *r = PyObject_CallOneArg(hook, g);
    if (r == NULL) {
        return NULL;
    }
    if (r == Py_None) {
        Py_DECREF(r);
        return Py_NewRef(g);
    }
    return r;
}

/* tensor hooks registered on a non-leaf (kept on its grad_fn) */
static int
run_pre_hooks(StaxGradNode *nd, PyObject *grads, int create_graph)
{
    Py_ssize_t nh;
    if (nd->pre_hooks == NULL) {
        return 0;
    }
    nh = PyList_GET_SIZE(nd->pre_hooks);
    for (int pass = 0; pass < 2; pass++) {   /* retain_grad runs last */
        for (Py_ssize_t i = 0; i < nh && i < PyList_GET_SIZE(nd->pre_hooks); i++) {
            PyObject *e = PyList_GET_ITEM(nd->pre_hooks, i);
            int nr = (int)PyLong_AsLong(PyTuple_GET_ITEM(e, 0));
            int retain = PyObject_IsTrue(PyTuple_GET_ITEM(e, 2));
            PyObject *g;
            if (retain != pass || nr >= PyList_GET_SIZE(grads)) {
                continue;
            }
            g = PyList_GET_ITEM(grads, nr);
            if (g == Py_None) {
                continue;
            }
            if (!retain) {
                PyObject *r = call_hook(PyTuple_GET_ITEM(e, 1), g);
                if (r == NULL || PyList_SetItem(grads, nr, r) < 0) {
                    return -1;
                }
            }
            else {
                PyObject *t = PyWeakref_GetObject(PyTuple_GET_ITEM(e, 1));
                StaxTensor *tt;
                PyObject *v;
                if (t == NULL || t == Py_None) {
                    continue;
                }
                tt = (StaxTensor *)t;
                if (tt->grad == NULL) {
                    v = create_graph ? Py_NewRef(g)
                                     : PyObject_CallMethod(g, "clone", NULL);
                }
                else {
                    v = add_grads(tt->grad, g);
                }
                if (v == NULL) {
                    return -1;
                }
                Py_XSETREF(tt->grad, v);
            }
        }
    }
    return 0;
}

static int
run_leaf_hooks(StaxTensor *leaf, PyObject *grads)
{
    PyObject *g;
    if (leaf->hooks == NULL) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(leaf->hooks); i++) {
        g = PyList_GET_ITEM(grads, 0);
        if (g == Py_None) {
            return 0;
        }
        g = call_hook(PyList_GET_ITEM(leaf->hooks, i), g);
        if (g == NULL || PyList_SetItem(grads, 0, g) < 0) {
            return -1;
        }
    }
    return 0;
}

static int
accumulate(StaxTensor *leaf, PyObject *g, int create_graph)
{
    PyObject *v;
    if (leaf->grad == NULL) {
        v = create_graph ? Py_NewRef(g) : PyObject_CallMethod(g, "clone", NULL);
        if (v == NULL) {
            return -1;
        }
        leaf->grad = v;
        return 0;
    }
    if (!create_graph && !((StaxTensor *)leaf->grad)->requires_grad) {
        v = PyObject_CallMethod(leaf->grad, "add_", "O", g);
        Py_XDECREF(v);
        return v ? 0 : -1;
    }
    v = add_grads(leaf->grad, g);
    if (v == NULL) {
        return -1;
    }
    Py_XSETREF(leaf->grad, v);
    return 0;
}

static int
run_node(graph_t *G, int ix, int keep_graph, int create_graph,
         int accumulate_leaves)
{
    StaxGradNode *nd = (StaxGradNode *)PyList_GET_ITEM(G->nodes, ix);
    PyObject *grads = PyList_GET_ITEM(G->buffers, ix);
    PyObject *gin = NULL;
    int any = 0, rc = -1;
    if (run_pre_hooks(nd, grads, create_graph) < 0) {
        return -1;
    }
    if (nd->is_acc) {
        if (run_leaf_hooks((StaxTensor *)nd->variable, grads) < 0) {
            return -1;
        }
        if (accumulate_leaves && PyList_GET_ITEM(grads, 0) != Py_None) {
            return accumulate((StaxTensor *)nd->variable,
                              PyList_GET_ITEM(grads, 0), create_graph);
        }
        return 0;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(grads); k++) {
        any |= PyList_GET_ITEM(grads, k) != Py_None;
    }
    if (!any || !G->needed[ix]) {
        rc = 0;
        goto release;
    }
    if (nd->pyfn != NULL) {
        PyObject *ga = PyList_AsTuple(grads), *r;
        if (ga != NULL && nd->had_saved) {
            /* backward(saved, *grads): the saved tensors live in the node
             * (freed after backward unless retain_graph, version-checked) */
            PyObject *sv = stax_ag_saved_tuple(nd), *full = NULL;
            if (sv != NULL) {
                PyObject *head = PyTuple_Pack(1, sv);
                full = head ? PySequence_Concat(head, ga) : NULL;
                Py_XDECREF(head);
                Py_DECREF(sv);
            }
            Py_SETREF(ga, full);
        }
        r = ga ? PyObject_Call(nd->pyfn, ga, NULL) : NULL;
        Py_XDECREF(ga);
        gin = r ? PySequence_List(r) : NULL;
        Py_XDECREF(r);
        if (gin != NULL && PyList_GET_SIZE(gin) != nd->n_in) {
            PyErr_Format(PyExc_RuntimeError, "%s: the backward returned %zd "
                         "gradients for %d inputs", nd->name,
                         PyList_GET_SIZE(gin), nd->n_in);
            Py_CLEAR(gin);
        }
    }
    else {
        gin = stax_ag_apply_formula(nd, grads);
    }
    if (gin == NULL) {
        goto release;
    }
    if (nd->post_hooks != NULL) {
        for (Py_ssize_t h = 0; h < PyList_GET_SIZE(nd->post_hooks); h++) {
            PyObject *ti = PyList_AsTuple(gin), *to = PyList_AsTuple(grads);
            PyObject *r = ti && to ? PyObject_CallFunctionObjArgs(
                PyList_GET_ITEM(nd->post_hooks, h), ti, to, NULL) : NULL;
            Py_XDECREF(ti);
            Py_XDECREF(to);
            if (r == NULL) {
                goto release;
            }
            if (r != Py_None) {
                PyObject *l = PySequence_List(r);
                Py_DECREF(r);
                if (l == NULL) {
                    goto release;
                }
                Py_SETREF(gin, l);
            }
            else {
                Py_DECREF(r);
            }
        }
    }
    for (int i = 0; i < nd->n_in && i < PyList_GET_SIZE(gin); i++) {
        PyObject *g = PyList_GET_ITEM(gin, i), *fg;
        int ci;
        if (g == Py_None || nd->next[i].fn == NULL) {
            continue;
        }
        ci = graph_ix(G, nd->next[i].fn);
        if (ci < 0 || !G->needed[ci]) {
            continue;
        }
        fg = fit_grad(nd, i, g);
        if (fg == NULL) {
            goto release;
        }
        if (buffer_add(G, ci, nd->next[i].nr, fg) < 0) {
            Py_DECREF(fg);
            goto release;
        }
        Py_DECREF(fg);
    }
    rc = 0;
release:
    Py_XDECREF(gin);
    if (!keep_graph) {
        stax_ag_release(nd);
    }
    return rc;
}

static int
shapes_match(StaxTensor *a, StaxTensor *b)
{
    if (a->ndim != b->ndim) {
        return 0;
    }
    for (int i = 0; i < a->ndim; i++) {
        if (a->sizes[i] != b->sizes[i]) {
            return 0;
        }
    }
    return 1;
}

/* The engine. tensors/grad_tensors: sequences of equal length (a grad may be
 * None for a one-element output). inputs: NULL for backward() (accumulate
 * into leaves), else a sequence of tensors whose gradients are returned. */
static PyObject *
run_engine(PyObject *tensors, PyObject *grad_tensors, int keep_graph,
           int create_graph, PyObject *inputs, int allow_unused)
{
    graph_t G = {0};
    PyObject *roots = NULL, *root_grads = NULL, *root_nr = NULL;
    PyObject *captured = NULL, *result = NULL;
    stax_edge *cap_edges = NULL;
    char *capture = NULL;
    Py_ssize_t nt = PySequence_Size(tensors), ni = 0;
    int prev_grad = stax_grad_enabled();

    if (nt < 0) {
        return NULL;
    }
    G.index = PyDict_New();
    G.nodes = PyList_New(0);
    G.buffers = PyList_New(0);
    roots = PyList_New(0);
    root_grads = PyList_New(0);
    root_nr = PyList_New(0);
    if (!G.index || !G.nodes || !G.buffers || !roots || !root_grads
        || !root_nr) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < nt; i++) {
        PyObject *t = PySequence_GetItem(tensors, i);
        PyObject *g = t ? PySequence_GetItem(grad_tensors, i) : NULL;
        stax_edge e;
        int bad;
        if (g == NULL) {
            Py_XDECREF(t);
            goto done;
        }
        bad = !StaxTensor_Check(t);
        if (bad || stax_ag_grad_edge((StaxTensor *)t, &e) < 0 || e.fn == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_RuntimeError, "element %zd of tensors does "
                             "not require grad and does not have a grad_fn",
                             i);
            }
            Py_DECREF(t);
            Py_DECREF(g);
            goto done;
        }
        if (g == Py_None) {
            if (stax_tensor_numel((StaxTensor *)t) != 1) {
                PyErr_SetString(PyExc_RuntimeError,
                                "grad can be implicitly created only for "
                                "scalar outputs");
                Py_DECREF(e.fn);
                Py_DECREF(t);
                Py_DECREF(g);
                goto done;
            }
            Py_DECREF(g);
            g = PyObject_CallFunction(helper("_ones_like"), "O", t);
        }
        else if (!StaxTensor_Check(g)
                 || !shapes_match((StaxTensor *)g, (StaxTensor *)t)) {
            if (StaxTensor_Check(g)) {
                PyObject *gs = PyObject_GetAttrString(g, "shape");
                PyObject *ts = PyObject_GetAttrString(t, "shape");
                if (gs && ts) {
                    PyErr_Format(PyExc_RuntimeError, "Mismatch in shape: "
                                 "grad_output[%zd] has a shape of %R and "
                                 "output[%zd] has a shape of %R.",
                                 i, gs, i, ts);
                }
                Py_XDECREF(gs);
                Py_XDECREF(ts);
            }
            else {
                PyErr_Format(PyExc_TypeError, "grad_tensors[%zd] must be a "
                             "Tensor or None, not %.80s", i,
                             Py_TYPE(g)->tp_name);
            }
            Py_DECREF(e.fn);
            Py_DECREF(t);
            Py_DECREF(g);
            goto done;
        }
        Py_DECREF(t);
        if (g == NULL) {
            Py_DECREF(e.fn);
            goto done;
        }
        {
            PyObject *nr = PyLong_FromLong(e.nr);
            int r = nr ? PyList_Append(roots, e.fn) : -1;
            r = r < 0 ? r : PyList_Append(root_grads, g);
            r = r < 0 ? r : PyList_Append(root_nr, nr);
            Py_XDECREF(nr);
            Py_DECREF(e.fn);
            Py_DECREF(g);
            if (r < 0) {
                goto done;
            }
        }
    }
    if (discover(&G, roots) < 0) {
        goto done;
    }
    capture = PyMem_Calloc((size_t)G.n + 1, 1);
    if (capture == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (inputs != NULL) {
        ni = PySequence_Size(inputs);
        if (ni < 0) {
            goto done;
        }
        cap_edges = PyMem_Calloc((size_t)ni + 1, sizeof(stax_edge));
        captured = PyList_New(ni);
        if (cap_edges == NULL || captured == NULL) {
            goto done;
        }
        for (Py_ssize_t j = 0; j < ni; j++) {
            PyObject *x = PySequence_GetItem(inputs, j);
            int cj;
            PyList_SET_ITEM(captured, j, Py_NewRef(Py_None));
            if (x == NULL) {
                goto done;
            }
            if (!StaxTensor_Check(x) || !((StaxTensor *)x)->requires_grad) {
                PyErr_SetString(PyExc_RuntimeError, "One of the "
                                "differentiated Tensors does not require "
                                "grad");
                Py_DECREF(x);
                goto done;
            }
            if (stax_ag_grad_edge((StaxTensor *)x, &cap_edges[j]) < 0) {
                Py_DECREF(x);
                goto done;
            }
            Py_DECREF(x);
            cj = graph_ix(&G, cap_edges[j].fn);
            if (cj >= 0) {
                capture[cj] = 1;
            }
        }
        mark_needed(&G, capture);
    }
    else {
        memset(G.needed, 1, (size_t)G.n);
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(roots); i++) {
        int ix = graph_ix(&G, PyList_GET_ITEM(roots, i));
        if (buffer_add(&G, ix, (int)PyLong_AsLong(PyList_GET_ITEM(root_nr, i)),
                       PyList_GET_ITEM(root_grads, i)) < 0) {
            goto done;
        }
    }
    stax_set_grad_enabled(create_graph);
    {
        char *doneflag = PyMem_Calloc((size_t)G.n + 1, 1);
        if (doneflag == NULL) {
            PyErr_NoMemory();
            goto restore;
        }
        for (;;) {
            int best = -1;
            StaxGradNode *bn = NULL;
            for (int i = 0; i < G.n; i++) {
                StaxGradNode *nd = (StaxGradNode *)PyList_GET_ITEM(G.nodes, i);
                if (!doneflag[i] && G.deps[i] == 0
                    && (best < 0 || nd->seq > bn->seq)) {
                    best = i;
                    bn = nd;
                }
            }
            if (best < 0) {
                break;
            }
            doneflag[best] = 1;
            if (capture[best] && inputs != NULL) {
                PyObject *grads = PyList_GET_ITEM(G.buffers, best);
                if (bn->is_acc
                    && run_leaf_hooks((StaxTensor *)bn->variable, grads) < 0) {
                    PyMem_Free(doneflag);
                    goto restore;
                }
                for (Py_ssize_t j = 0; j < ni; j++) {
                    if (cap_edges[j].fn == (PyObject *)bn) {
                        PyObject *g = PyList_GET_ITEM(grads, cap_edges[j].nr);
                        PyList_SetItem(captured, j, Py_NewRef(g));
                    }
                }
            }
            if (!(bn->is_acc && inputs != NULL)
                && run_node(&G, best, keep_graph, create_graph,
                            inputs == NULL) < 0) {
                PyMem_Free(doneflag);
                goto restore;
            }
            for (int k = 0; k < bn->n_in; k++) {
                if (bn->next[k].fn != NULL) {
                    G.deps[graph_ix(&G, bn->next[k].fn)]--;
                }
            }
            /* free this node's buffer early */
            {
                PyObject *nb = PyList_New(0);
                if (nb != NULL) {
                    PyList_SetItem(G.buffers, best, nb);
                }
            }
        }
        PyMem_Free(doneflag);
    }
    if (inputs != NULL) {
        for (Py_ssize_t j = 0; j < ni; j++) {
            if (PyList_GET_ITEM(captured, j) == Py_None && !allow_unused) {
                PyErr_Format(PyExc_RuntimeError, "The differentiated Tensor "
                             "at index %zd appears to not have been used in "
                             "the graph. Set allow_unused=True if this is the "
                             "desired behavior.", j);
                goto restore;
            }
        }
        result = PyList_AsTuple(captured);
    }
    else {
        result = Py_NewRef(Py_None);
    }
restore:
    stax_set_grad_enabled(prev_grad);
done:
    if (cap_edges != NULL) {
        for (Py_ssize_t j = 0; j < ni; j++) {
            Py_XDECREF(cap_edges[j].fn);
        }
        PyMem_Free(cap_edges);
    }
    PyMem_Free(capture);
    PyMem_Free(G.deps);
    PyMem_Free(G.needed);
    Py_XDECREF(G.index);
    Py_XDECREF(G.nodes);
    Py_XDECREF(G.buffers);
    Py_XDECREF(roots);
    Py_XDECREF(root_grads);
    Py_XDECREF(root_nr);
    Py_XDECREF(captured);
    return result;
}

static PyObject *
py_backward(PyObject *m, PyObject *args)
{
    PyObject *tensors, *grads;
    int keep, create;
    if (!PyArg_ParseTuple(args, "OOpp:_autograd_backward", &tensors, &grads,
                          &keep, &create)) {
        return NULL;
    }
    return run_engine(tensors, grads, keep, create, NULL, 0);
}

static PyObject *
py_grad(PyObject *m, PyObject *args)
{
    PyObject *outputs, *inputs, *grads;
    int keep, create, allow_unused;
    if (!PyArg_ParseTuple(args, "OOOppp:_autograd_grad", &outputs, &inputs,
                          &grads, &keep, &create, &allow_unused)) {
        return NULL;
    }
    return run_engine(outputs, grads, keep, create, inputs, allow_unused);
}

static PyObject *
py_tensor_hooks(PyObject *m, PyObject *t)
{
    StaxTensor *x;
    if (!StaxTensor_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "expected a Tensor");
        return NULL;
    }
    x = (StaxTensor *)t;
    if (x->hooks == NULL) {
        x->hooks = PyList_New(0);
        if (x->hooks == NULL) {
            return NULL;
        }
    }
    return Py_NewRef(x->hooks);
}

static PyObject *
py_set_retains_grad(PyObject *m, PyObject *t)
{
    if (!StaxTensor_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "expected a Tensor");
        return NULL;
    }
    ((StaxTensor *)t)->retains_grad = 1;
    Py_RETURN_NONE;
}

static PyObject *
py_retains_grad(PyObject *m, PyObject *t)
{
    if (!StaxTensor_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "expected a Tensor");
        return NULL;
    }
    return PyBool_FromLong(((StaxTensor *)t)->retains_grad);
}

static PyObject *
py_set_helpers(PyObject *m, PyObject *d)
{
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "expected a dict");
        return NULL;
    }
    Py_XSETREF(stax_ag_helpers, Py_NewRef(d));
    Py_RETURN_NONE;
}

static PyObject *
py_set_grad_fn(PyObject *m, PyObject *args)
{
    /* tensorplay.compile's eager fallback hands results through untouched;
     * this is for tests that build graphs by hand */
    StaxTensor *t;
    PyObject *fn;
    int nr;
    if (!PyArg_ParseTuple(args, "O!Oi", StaxTensor_Type, &t, &fn, &nr)) {
        return NULL;
    }
    if (fn != Py_None && !StaxGradNode_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "expected a Node or None");
        return NULL;
    }
    Py_XSETREF(t->grad_fn, fn == Py_None ? NULL : Py_NewRef(fn));
    t->output_nr = nr;
    Py_RETURN_NONE;
}

/* the Python face's Tensor methods (backward, register_hook, ...): the
 * Tensor type is immutable from Python */
static PyObject *
py_install(PyObject *m, PyObject *d)
{
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "expected a dict");
        return NULL;
    }
    while (PyDict_Next(d, &pos, &k, &v)) {
        if (PyDict_SetItem(StaxTensor_Type->tp_dict, k, v) < 0) {
            return NULL;
        }
    }
    PyType_Modified(StaxTensor_Type);
    Py_RETURN_NONE;
}

static PyObject *
py_derivatives(PyObject *m, PyObject *unused)
{
    return stax_ag_derivatives_dict();
}

/* _autograd_attach(outputs, inputs, backward, name, saved=None): one node
 * whose backward is a Python callable, backward(*grads of outputs) -> grads
 * of inputs (None: no gradient); it becomes the outputs' grad_fn. With
 * saved (a sequence of tensors), the node holds them as torch's saved
 * tensors (freed by a backward without retain_graph, checked against their
 * versions) and the backward is called backward(saved, *grads). */
static PyObject *
py_attach(PyObject *m, PyObject *args)
{
    PyObject *outs, *ins, *fn, *o = NULL, *i = NULL;
    const char *name;
    StaxGradNode *n = NULL;
    Py_ssize_t no, ni;
    PyObject *saved = Py_None;
    if (!PyArg_ParseTuple(args, "OOOs|O:_autograd_attach", &outs, &ins, &fn,
                          &name, &saved)) {
        return NULL;
    }
    o = PySequence_Tuple(outs);
    i = PySequence_Tuple(ins);
    if (o == NULL || i == NULL) {
        goto fail;
    }
    no = PyTuple_GET_SIZE(o);
    ni = PyTuple_GET_SIZE(i);
    for (Py_ssize_t k = 0; k < no + ni; k++) {
        PyObject *t = k < no ? PyTuple_GET_ITEM(o, k)
                             : PyTuple_GET_ITEM(i, k - no);
        if (!StaxTensor_Check(t)) {
            PyErr_SetString(PyExc_TypeError, "_autograd_attach: tensors only");
            goto fail;
        }
    }
    n = stax_ag_node_new(NULL, NULL);
    if (n == NULL) {
        goto fail;
    }
    snprintf(n->name, sizeof(n->name), "%s", name);
    n->pyfn = Py_NewRef(fn);
    n->n_in = (int)ni;
    n->next = PyMem_Calloc((size_t)ni + 1, sizeof(stax_edge));
    n->in_param = PyMem_Calloc((size_t)ni + 1, sizeof(int));
    n->in_elem = PyMem_Calloc((size_t)ni + 1, sizeof(int));
    n->in_dtypes = PyMem_Calloc((size_t)ni + 1, sizeof(stax_dtype_t));
    n->in_shapes = PyTuple_New(ni);
    n->out_dtypes = PyMem_Calloc((size_t)no + 1, sizeof(stax_dtype_t));
    n->out_shapes = PyTuple_New(no);
    if (!n->next || !n->in_param || !n->in_elem || !n->in_dtypes
        || !n->in_shapes || !n->out_dtypes || !n->out_shapes) {
        goto fail;
    }
    for (Py_ssize_t k = 0; k < ni; k++) {
        StaxTensor *t = (StaxTensor *)PyTuple_GET_ITEM(i, k);
        PyObject *sh = stax_tensor_size_object(t->ndim, t->sizes);
        if (sh == NULL) {
            goto fail;
        }
        PyTuple_SET_ITEM(n->in_shapes, k, sh);
        n->in_param[k] = (int)k;
        n->in_elem[k] = -1;
        n->in_dtypes[k] = t->dtype;
        if (stax_ag_grad_edge(t, &n->next[k]) < 0) {
            goto fail;
        }
    }
    n->n_out = (int)no;
    for (Py_ssize_t k = 0; k < no; k++) {
        StaxTensor *t = (StaxTensor *)PyTuple_GET_ITEM(o, k);
        PyObject *sh = stax_tensor_size_object(t->ndim, t->sizes);
        if (sh == NULL) {
            goto fail;
        }
        PyTuple_SET_ITEM(n->out_shapes, k, sh);
        n->out_dtypes[k] = t->dtype;
    }
    if (saved != Py_None) {
        n->results = PySequence_Tuple(saved);
        if (n->results == NULL) {
            goto fail;
        }
        n->res_versions = PyMem_Calloc(
            (size_t)PyTuple_GET_SIZE(n->results) + 1, sizeof(uint64_t));
        if (n->res_versions == NULL) {
            goto fail;
        }
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(n->results); k++) {
            PyObject *v = PyTuple_GET_ITEM(n->results, k);
            if (StaxTensor_Check(v)) {
                n->res_versions[k] = ((StaxTensor *)v)->storage->version;
            }
        }
        n->had_saved = 1;
    }
    for (Py_ssize_t k = 0; k < no; k++) {
        StaxTensor *t = (StaxTensor *)PyTuple_GET_ITEM(o, k);
        t->requires_grad = 1;
        t->nonleaf = 1;
        t->output_nr = (int)k;
        Py_XSETREF(t->grad_fn, Py_NewRef(n));
    }
    Py_DECREF(o);
    Py_DECREF(i);
    return (PyObject *)n;
fail:
    Py_XDECREF(n);
    Py_XDECREF(o);
    Py_XDECREF(i);
    return NULL;
}

static PyMethodDef engine_methods[] = {
    {"_autograd_attach", py_attach, METH_VARARGS,
     "_autograd_attach(outputs, inputs, backward, name) -> Node"},
    {"_autograd_derivatives", py_derivatives, METH_NOARGS,
     "the derivative column of csrc/ops/ops.def"},
    {"_autograd_install_tensor_methods", py_install, METH_O, NULL},
    {"_autograd_backward", py_backward, METH_VARARGS,
     "_autograd_backward(tensors, grad_tensors, retain_graph, create_graph)"},
    {"_autograd_grad", py_grad, METH_VARARGS,
     "_autograd_grad(outputs, inputs, grad_outputs, retain_graph, "
     "create_graph, allow_unused) -> tuple of gradients"},
    {"_autograd_tensor_hooks", py_tensor_hooks, METH_O,
     "the list of a leaf's tensor hooks"},
    {"_autograd_set_retains_grad", py_set_retains_grad, METH_O, NULL},
    {"_autograd_retains_grad", py_retains_grad, METH_O, NULL},
    {"_autograd_set_helpers", py_set_helpers, METH_O,
     "the formula helpers (tensorplay/autograd/_helpers.py)"},
    {"_autograd_set_grad_fn", py_set_grad_fn, METH_VARARGS, NULL},
    {NULL},
};

int
stax_ag_engine_init(PyObject *m)
{
    stax_ag_helpers = PyDict_New();
    if (stax_ag_helpers == NULL) {
        return -1;
    }
    return PyModule_AddFunctions(m, engine_methods);
}
