/* Indexing lowering for the op-level graph (oplevel.c): x[idx] on a tensor
 * becomes a chain of select / slice / unsqueeze view ops, each registered
 * with functionalization (functionalize.c) as a view of its parent. */
#include "graph/passes_internal.h"

#include <string.h>

static Py_ssize_t
p_ndim(PyObject *v)
{
    PyObject *s = v ? PyObject_GetAttrString(v, "shape") : NULL;
    Py_ssize_t n = s ? PyObject_Length(s) : -1;
    Py_XDECREF(s);
    PyErr_Clear();
    return n;
}

static Py_ssize_t
p_dim_size(PyObject *v, Py_ssize_t d)
{
    PyObject *s = v ? PyObject_GetAttrString(v, "shape") : NULL;
    PyObject *x = s ? PySequence_GetItem(s, d) : NULL;
    Py_ssize_t n = x ? PyLong_AsSsize_t(x) : -1;
    Py_XDECREF(s);
    Py_XDECREF(x);
    PyErr_Clear();
    return n;
}

/* One bound of an index (a slice's start/stop/step, or a select's int):
 * None, an int, or a symbolic-size node whose sample is an int (x[: t - 1]
 * under dynamic shapes). *op_arg: what the op-level node takes (the node's
 * op-level value: the bound stays symbolic, so shape propagation at other
 * sizes takes the view those sizes give); *sample: its value on the
 * samples. 0, or -1 with NotImplementedError for anything else. */
static int
p_index_bound(p_op_ctx *c, PyObject *b, PyObject **op_arg, PyObject **sample)
{
    *op_arg = *sample = NULL;
    if (b == Py_None || (PyLong_Check(b) && !PyBool_Check(b))) {
        *op_arg = Py_NewRef(b);
        *sample = Py_NewRef(b);
        return 0;
    }
    PyObject *v = stax_graph_p_is_node(b) ? stax_graph_p_val(b) : NULL;
    if (v != NULL && PyLong_Check(v) && !PyBool_Check(v)) {
        *op_arg = stax_graph_fz_current(c, b);
        if (*op_arg == NULL) {
            return -1;
        }
        *sample = Py_NewRef(v);
        return 0;
    }
    PyErr_SetString(PyExc_NotImplementedError, "index bound");
    return -1;
}

/* a slice item as (start, stop, step) for the op graph and its sample
 * slice (nodes replaced by their sample ints); 0 or -1 */
static int
p_index_slice(p_op_ctx *c, PyObject *it, PyObject *parts[3], PyObject **sample)
{
    PyObject *raw[3] = {((PySliceObject *)it)->start, ((PySliceObject *)it)->stop,
                        ((PySliceObject *)it)->step};
    PyObject *samp[3] = {NULL, NULL, NULL};
    int rc = 0;
    *sample = NULL;
    for (int k = 0; k < 3; k++) {
        parts[k] = NULL;
    }
    for (int k = 0; k < 3 && rc == 0; k++) {
        rc = p_index_bound(c, raw[k], &parts[k], &samp[k]);
    }
    if (rc == 0) {
        *sample = PySlice_New(samp[0], samp[1], samp[2]);
        rc = *sample ? 0 : -1;
    }
    for (int k = 0; k < 3; k++) {
        Py_XDECREF(samp[k]);
        if (rc < 0) {
            Py_CLEAR(parts[k]);
        }
    }
    return rc;
}

/* x[a:b:s] that is x at any size: no start (or 0), no stop, no step (or
 * 1); judged on the index as written, never on the sample's size (x[:8]
 * of an 8-row sample is not x when the rows are a symbolic size) */
static int
p_slice_is_full(PyObject *it)
{
    PySliceObject *s = (PySliceObject *)it;
    int st0 = s->start == Py_None
              || (PyLong_CheckExact(s->start) && PyLong_AsLong(s->start) == 0);
    int sp1 = s->step == Py_None
              || (PyLong_CheckExact(s->step) && PyLong_AsLong(s->step) == 1);
    PyErr_Clear();
    return st0 && sp1 && s->stop == Py_None;
}

/* one view step: value = op(current(parent), *tail); registers key */
PyObject *
stax_graph_p_view_step(p_op_ctx *c, PyObject *key, PyObject *parent, const char *op,
                       const char *ovl, PyObject *tail, PyObject *view_val)
{
    PyObject *pv = stax_graph_fz_current(c, parent);
    if (pv == NULL) {
        return NULL;
    }
    PyObject *head = PyTuple_Pack(1, pv);
    PyObject *args = head ? PySequence_Concat(head, tail) : NULL;
    PyObject *v = args ? stax_graph_p_emit(c, op, ovl, args, NULL, 0) : NULL;
    Py_DECREF(pv);
    Py_XDECREF(head);
    Py_XDECREF(args);
    if (v != NULL && stax_graph_fz_view(c, key, parent, op, ovl, tail, v,
                                        view_val) < 0) {
        Py_CLEAR(v);
    }
    return v;
}

/* x[idx] on a tensor: a chain of select / slice / unsqueeze views */
int
stax_graph_p_lower_index(p_op_ctx *c, PyObject *n, PyObject *x, PyObject *idx)
{
    PyObject *xv = stax_graph_p_val(stax_graph_fz_resolve(c, x));
    PyObject *items = PyTuple_Check(idx) ? Py_NewRef(idx)
                                         : PyTuple_Pack(1, idx);
    PyObject *parent = Py_NewRef(x), *last = NULL;
    Py_ssize_t ndim = p_ndim(xv), nitems, dim = 0, nreal = 0;
    int rc = -1;
    if (items == NULL) {
        goto done;
    }
    nitems = PyTuple_GET_SIZE(items);
    for (Py_ssize_t i = 0; i < nitems; i++) {
        PyObject *it = PyTuple_GET_ITEM(items, i);
        /* an int node (x[t - 1]) selects; a tensor index is advanced */
        PyObject *iv = stax_graph_p_is_node(it) ? stax_graph_p_val(it) : NULL;
        int int_node = iv != NULL && PyLong_Check(iv) && !PyBool_Check(iv);
        if ((stax_graph_p_is_node(it) && !int_node)
            || !(int_node || PyLong_Check(it) || PySlice_Check(it) || it == Py_None
                 || it == Py_Ellipsis)) {
            PyErr_SetString(PyExc_NotImplementedError, "tensor index");
            goto done;
        }
        nreal += int_node || PyLong_Check(it) || PySlice_Check(it);
    }
    /* the current (view) value of x while the chain is taken */
    PyObject *curval = xv;
    for (Py_ssize_t i = 0; i < nitems; i++) {
        PyObject *it = PyTuple_GET_ITEM(items, i), *tail = NULL;
        const char *op = NULL, *ovl = NULL;
        if (it == Py_Ellipsis) {
            dim += ndim - nreal;
            continue;
        }
        if (!PySlice_Check(it) && it != Py_None) {
            PyObject *ia = NULL, *isamp = NULL;
            if (p_index_bound(c, it, &ia, &isamp) < 0) {
                goto done;
            }
            tail = Py_BuildValue("(nN)", dim, ia);
            Py_DECREF(isamp);
            op = "select";
            ovl = "int";
        }
        else if (it == Py_None) {
            tail = Py_BuildValue("(n)", dim);
            op = "unsqueeze";
            ovl = "default";
            dim++;
        }
        else {
            Py_ssize_t size = p_dim_size(curval, dim), st, en, step, len;
            PyObject *parts[3], *samp = NULL;
            if (p_slice_is_full(it)) {
                dim++;
                continue;     /* a full slice: no view op */
            }
            if (p_index_slice(c, it, parts, &samp) < 0) {
                goto done;
            }
            int bad = size < 0 || PySlice_GetIndicesEx(samp, size, &st, &en, &step, &len) < 0;
            Py_DECREF(samp);
            if (bad) {
                for (int k = 0; k < 3; k++) {
                    Py_DECREF(parts[k]);
                }
                PyErr_Clear();
                PyErr_SetString(PyExc_NotImplementedError, "slice index");
                goto done;
            }
            /* the bounds as written (None, negative, a size node): the
             * slice op normalizes them against the size it meets */
            if (parts[0] == Py_None) {
                Py_SETREF(parts[0], PyLong_FromLong(0));
            }
            if (parts[2] == Py_None) {
                Py_SETREF(parts[2], PyLong_FromLong(1));
            }
            tail = parts[0] && parts[2] ? Py_BuildValue("(nOOO)", dim, parts[0], parts[1],
                                                        parts[2]) : NULL;
            for (int k = 0; k < 3; k++) {
                Py_XDECREF(parts[k]);
            }
            op = "slice";
            ovl = "Tensor";
            dim++;
        }
        if (tail == NULL) {
            goto done;
        }
        /* the last step is n itself; the ones before get their own key
         * (trailing full slices take no step) */
        int is_last = 1;
        for (Py_ssize_t j = i + 1; j < nitems && is_last; j++) {
            PyObject *nx = PyTuple_GET_ITEM(items, j);
            is_last = nx == Py_Ellipsis || (PySlice_Check(nx) && p_slice_is_full(nx));
        }
        PyObject *key = is_last ? Py_NewRef(n)
                                : Py_BuildValue("(On)", n, i);
        Py_XSETREF(last, key ? stax_graph_p_view_step(c, key, parent, op, ovl, tail,
                                                      is_last ? stax_graph_p_val(n)
                                                   : NULL) : NULL);
        Py_DECREF(tail);
        if (last == NULL) {
            Py_XDECREF(key);
            goto done;
        }
        curval = stax_graph_p_val(last);
        Py_SETREF(parent, key);
        if (is_last) {
            break;
        }
    }
    if (last == NULL || parent != n) {
        /* no view op at all (x[...], x[:]) or trailing full slices */
        if (stax_graph_fz_alias(c, n, parent) < 0) {
            goto done;
        }
    }
    rc = 0;
done:
    Py_XDECREF(items);
    Py_XDECREF(parent);
    Py_XDECREF(last);
    return rc;
}
