/* Shape propagation and dynamic-mode variants: running a graph eagerly
 * over example inputs to get every node's value (when the traced meta['val']
 * sizes do not describe the examples), the same without side effects over
 * the call's real inputs, and the dynamic CompiledProgram's lookup/compile
 * of the size variant for a call's inputs. */
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "tensor/stax_numpy.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* a node's value during shape propagation (new reference) */
static PyObject *
val_of(PyObject *node, void *vals)
{
    PyObject *v = PyDict_GetItemWithError((PyObject *)vals, node);
    if (v == NULL && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_RuntimeError, "shape propagation: node used before definition");
    }
    return Py_XNewRef(v);
}

/* o with every Node replaced by its value in vals */
static PyObject *
subst_vals(PyObject *o, PyObject *vals)
{
    return stax_graph_map_arg(o, val_of, vals);
}

/* run the graph eagerly on ex: node -> value (new dict); meta_ok: values
 * only their metadata is read from (ops of the table in meta mode) */
static PyObject *
shape_prop(PyObject *gm, PyObject *ex, int meta_ok);

PyObject *
lw_shape_prop(PyObject *gm, PyObject *ex)
{
    return shape_prop(gm, ex, 0);
}

static PyObject *
shape_prop(PyObject *gm, PyObject *ex, int meta_ok)
{
    PyObject *graph = PyObject_GetAttrString(gm, "graph");
    PyObject *nl = graph ? PyObject_GetAttrString(graph, "nodes") : NULL;
    PyObject *nodes = nl ? PySequence_List(nl) : NULL;
    PyObject *vals = nodes ? PyDict_New() : NULL;
    Py_XDECREF(graph);
    Py_XDECREF(nl);
    int k = 0;
    for (Py_ssize_t i = 0; vals && i < PyList_GET_SIZE(nodes); i++) {
        PyObject *node = PyList_GET_ITEM(nodes, i);
        int o = StaxNode_Check(node) ? (int)((StaxNode *)node)->op : -1;
        PyObject *tg = o >= 0 ? PyObject_GetAttrString(node, "target") : NULL;
        PyObject *a = tg ? PyObject_GetAttrString(node, "args") : NULL;
        PyObject *kw = a ? PyObject_GetAttrString(node, "kwargs") : NULL;
        PyObject *r = NULL;
        if (o < 0) {
            PyErr_SetString(PyExc_TypeError, "shape propagation: a graph node that is not a Node");
        }
        if (kw != NULL) {
            if (o == STAX_NODE_PLACEHOLDER) {
                r = k < PyTuple_GET_SIZE(ex) ? Py_NewRef(PyTuple_GET_ITEM(ex, k)) : Py_NewRef(Py_None);
                k++;
            }
            else if (o == STAX_NODE_OUTPUT) {
                r = Py_NewRef(Py_None);
            }
            else if (o == STAX_NODE_GET_ATTR) {
                r = PyObject_GetAttr(gm, tg);
            }
            else {
                PyObject *sa = subst_vals(a, vals);
                PyObject *sk = sa ? subst_vals(kw == Py_None ? Py_None : kw, vals) : NULL;
                if (sk != NULL && sk != Py_None && !PyDict_Check(sk)) {
                    Py_CLEAR(sk);
                }
                if (sa != NULL && !PyTuple_Check(sa)) {
                    Py_SETREF(sa, PySequence_Tuple(sa));
                }
                if (sa != NULL && (sk != NULL || kw == Py_None || PyErr_Occurred() == NULL)) {
                    PyObject *kwd = (sk == NULL || sk == Py_None) ? NULL : sk;
                    /* a size variant needs the nodes' metadata, not their
                     * elements: ops of the table run in meta mode (eager's
                     * checks, shapes and strides, nothing computed) */
                    if (o == STAX_NODE_CALL_METHOD) {
                        PyObject *self = PyTuple_GET_ITEM(sa, 0);
                        PyObject *m = PyObject_GetAttr(self, tg);
                        PyObject *rest = m ? PyTuple_GetSlice(sa, 1, PyTuple_GET_SIZE(sa)) : NULL;
                        int meta = rest != NULL && meta_ok && StaxTensor_Check(self)
                                   && PyUnicode_Check(tg)
                                   && stax_ops_meta_target(_PyType_Lookup(Py_TYPE(self), tg));
                        r = rest ? (meta ? stax_ops_meta_call(m, rest, kwd)
                                         : PyObject_Call(m, rest, kwd)) : NULL;
                        if (r == Py_NotImplemented) {
                            Py_SETREF(r, PyObject_Call(m, rest, kwd));
                        }
                        Py_XDECREF(m);
                        Py_XDECREF(rest);
                    }
                    else if (meta_ok && stax_ops_meta_target(tg)) {
                        r = stax_ops_meta_call(tg, sa, kwd);
                        if (r == Py_NotImplemented) {
                            Py_SETREF(r, PyObject_Call(tg, sa, kwd));
                        }
                    }
                    else {
                        r = PyObject_Call(tg, sa, kwd);
                    }
                }
                Py_XDECREF(sa);
                Py_XDECREF(sk);
            }
        }
        Py_XDECREF(tg);
        Py_XDECREF(a);
        Py_XDECREF(kw);
        if (r == NULL || PyDict_SetItem(vals, node, r) < 0) {
            Py_XDECREF(r);
            Py_CLEAR(vals);
            break;
        }
        Py_DECREF(r);
    }
    Py_XDECREF(nodes);
    return vals;
}

/* A 1-d tensor over a copy of t's whole storage (same dtype). */
static PyObject *
storage_clone(StaxTensor *t)
{
    int isz = stax_dtype_itemsize(t->dtype);
    int64_t n = isz > 0 ? t->storage->nbytes / isz : 0;
    StaxTensor *flat = stax_tensor_empty_on(1, &n, t->dtype,
                                            t->storage->device);
    if (flat != NULL && n > 0 && stax_tensor_is_cuda(t)) {
        int64_t one = 1;
        StaxTensor *all = stax_tensor_view(t, 1, &n, &one, 0);
        if (all == NULL || stax_tensor_copy_from(flat, (PyObject *)all) < 0) {
            Py_CLEAR(flat);
        }
        Py_XDECREF(all);
    }
    else if (flat != NULL && n > 0) {
        memcpy(flat->storage->data, t->storage->data, (size_t)(n * isz));
    }
    return (PyObject *)flat;
}

/* lw_shape_prop over the call's real inputs, without its side effects: the
 * graph may write its inputs in place (functionalized copy_ write-backs)
 * and draw random numbers, and the variant's kernels will do both again
 * when they run. So propagate over layout-preserving clones of the tensor
 * inputs (inputs sharing a storage share one clone) with the default
 * generator's state restored afterwards. */
PyObject *
lw_shape_prop_isolated(PyObject *gm, PyObject *ex, int meta_ok, int real_inputs)
{
    Py_ssize_t n = PyTuple_GET_SIZE(ex);
    PyObject *cex = PyTuple_New(n);
    PyObject *clones = PyDict_New();   /* storage -> flat clone tensor */
    PyObject *state = PyObject_CallMethod((PyObject *)stax_default_generator(),
                                          "get_state", NULL);
    PyObject *vals = NULL;
    if (cex == NULL || clones == NULL || state == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(ex, i);
        PyObject *c = NULL;
        if (StaxTensor_Check(a)) {
            StaxTensor *t = (StaxTensor *)a;
            PyObject *key = (PyObject *)t->storage;
            PyObject *flat = PyDict_GetItemWithError(clones, key); /* borrowed */
            if (flat == NULL && PyErr_Occurred()) {
                goto done;
            }
            if (flat == NULL) {
                PyObject *f = storage_clone(t);
                if (f == NULL || PyDict_SetItem(clones, key, f) < 0) {
                    Py_XDECREF(f);
                    goto done;
                }
                Py_DECREF(f);
                flat = f;
            }
            c = (PyObject *)stax_tensor_as_strided((StaxTensor *)flat, t->ndim,
                                                   t->sizes, t->strides,
                                                   t->offset);
        }
        else {
            c = Py_NewRef(a);
        }
        if (c == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(cex, i, c);
    }
    vals = shape_prop(gm, cex, meta_ok);
    if (vals != NULL && real_inputs) {
        /* placeholders keep the real inputs (their layout is the same) */
        PyObject *graph = PyObject_GetAttrString(gm, "graph");
        PyObject *nl = graph ? PyObject_GetAttrString(graph, "nodes") : NULL;
        PyObject *nodes = nl ? PySequence_List(nl) : NULL;
        Py_XDECREF(graph);
        Py_XDECREF(nl);
        Py_ssize_t k = 0;
        for (Py_ssize_t i = 0; nodes && i < PyList_GET_SIZE(nodes); i++) {
            StaxNode *node = (StaxNode *)PyList_GET_ITEM(nodes, i);
            if (node->op == STAX_NODE_PLACEHOLDER && k < n) {
                if (PyDict_SetItem(vals, (PyObject *)node,
                                   PyTuple_GET_ITEM(ex, k++)) < 0) {
                    Py_CLEAR(vals);
                    break;
                }
            }
        }
        if (nodes == NULL) {
            Py_CLEAR(vals);
        }
        Py_XDECREF(nodes);
    }
done:
    if (state != NULL) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *r = PyObject_CallMethod(
            (PyObject *)stax_default_generator(), "set_state", "(O)", state);
        if (r == NULL) {
            Py_CLEAR(vals);
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(tb);
        }
        else {
            Py_DECREF(r);
            PyErr_Restore(et, ev, tb);
        }
    }
    Py_XDECREF(state);
    Py_XDECREF(clones);
    Py_XDECREF(cex);
    return vals;
}

/* dynamic mode: the variant compiled for these inputs' sizes (borrowed) */
Program *
lw_find_variant(Program *p, PyObject *const *args, Py_ssize_t nargs)
{
    if (p->variants != NULL) {
        for (Py_ssize_t v = 0; v < PyList_GET_SIZE(p->variants); v++) {
            Program *q = (Program *)PyList_GET_ITEM(p->variants, v);
            int ok = 1;
            for (int i = 0; i < nargs && ok; i++) {
                ok = lw_input_ok(q, i, args[i]) == 0;
            }
            if (ok) {
                return q;
            }
        }
    }
    else {
        p->variants = PyList_New(0);
        if (p->variants == NULL) {
            return NULL;
        }
    }
    PyObject *ex = PyTuple_New(nargs);
    if (ex == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyTuple_SET_ITEM(ex, i, Py_NewRef(args[i]));
    }
    PyObject *q = NULL;
    if (p->py_gm != NULL) {
        /* p's op graph holds at its samples' sizes only: take it again
         * from the Python-level graph at these, on clones (the graph may
         * write its inputs), placeholders included: a view's value must
         * share its input's storage to be taken as one */
        PyObject *vals = lw_shape_prop_isolated(p->py_gm, ex, 0, 0);
        PyObject *og = vals ? stax_graph_make_op_graph_at(p->py_gm, vals) : NULL;
        Py_XDECREF(vals);
        q = og ? lw_program_from_op_graph(p->py_gm, og, Py_NewRef(ex), p->c.be, p->strict, 0,
                                          p->c.no_random, p->kcache) : NULL;
    }
    else {
        PyObject *vals = lw_shape_prop_isolated(p->gm, ex, 1, 1);
        q = vals ? lw_build_program(p->gm, ex, p->c.be, p->strict, 0, vals,
                                    p->c.no_random, p->kcache) : NULL;
        Py_XDECREF(vals);
        if (q != NULL) {
            Py_XSETREF(((Program *)q)->rg_extra, Py_XNewRef(p->rg_extra));
        }
    }
    Py_DECREF(ex);
    if (q == NULL) {
        return NULL;
    }
    ((Program *)q)->cg_mode = p->cg_mode;   /* its own graph, p's mode */
    if (PyList_GET_SIZE(p->variants) >= 64) {
        PySequence_DelItem(p->variants, 0);
    }
    int rc = PyList_Append(p->variants, q);
    Py_DECREF(q);
    return rc < 0 ? NULL : (Program *)q;
}
