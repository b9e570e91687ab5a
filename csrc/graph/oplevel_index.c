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
        if (stax_graph_p_is_node(it) || !(PyLong_Check(it) || PySlice_Check(it)
                                          || it == Py_None
                                          || it == Py_Ellipsis)) {
            PyErr_SetString(PyExc_NotImplementedError, "tensor index");
            goto done;
        }
        nreal += PyLong_Check(it) || PySlice_Check(it);
    }
    /* the current (view) value of x while the chain is taken */
    PyObject *curval = xv;
    for (Py_ssize_t i = 0; i < nitems; i++) {
        PyObject *it = PyTuple_GET_ITEM(items, i), *tail = NULL;
        const char *op = NULL, *ovl = NULL;
        Py_ssize_t sdim = dim, slen = 0;   /* this step's dim, slice len */
        if (it == Py_Ellipsis) {
            dim += ndim - nreal;
            continue;
        }
        if (PyLong_Check(it)) {
            tail = Py_BuildValue("(nO)", dim, it);
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
            if (size < 0 || PySlice_GetIndicesEx(it, size, &st, &en, &step,
                                                 &len) < 0) {
                PyErr_Clear();
                PyErr_SetString(PyExc_NotImplementedError, "slice index");
                goto done;
            }
            if (st == 0 && en == size && step == 1) {
                dim++;
                continue;     /* a full slice: no view op */
            }
            tail = Py_BuildValue("(nnnn)", dim, st, en, step);
            slen = len;
            op = "slice";
            ovl = "Tensor";
            dim++;
        }
        if (tail == NULL) {
            goto done;
        }
        /* the last step is n itself; the ones before get their own key.
         * Later items are judged against the shape AFTER this step (a
         * select removes its dim: x[0, -2:3] slices what was dim 1). */
        int is_last = 1;
        PyObject *shp = NULL;
        {
            PyObject *s0 = curval ? PyObject_GetAttrString(curval, "shape")
                                  : NULL;
            shp = s0 ? PySequence_List(s0) : NULL;
            Py_XDECREF(s0);
            int bad = shp == NULL || sdim > PyList_GET_SIZE(shp);
            if (!bad && op[0] == 's' && op[1] == 'e') {          /* select */
                bad = sdim >= PyList_GET_SIZE(shp)
                      || PySequence_DelItem(shp, sdim) < 0;
            }
            else if (!bad && op[0] == 'u') {                     /* unsqueeze */
                PyObject *one = PyLong_FromLong(1);
                bad = one == NULL || PyList_Insert(shp, sdim, one) < 0;
                Py_XDECREF(one);
            }
            else if (!bad) {                                     /* slice */
                PyObject *l = PyLong_FromSsize_t(slen);
                bad = l == NULL || sdim >= PyList_GET_SIZE(shp)
                      || PyList_SetItem(shp, sdim, l) < 0;
            }
            if (bad) {
                PyErr_Clear();
                Py_CLEAR(shp);
            }
        }
        Py_ssize_t d2 = dim;
        for (Py_ssize_t j = i + 1; j < nitems; j++) {
            PyObject *nx = PyTuple_GET_ITEM(items, j);
            if (nx == Py_Ellipsis) {
                d2 += ndim - nreal;
                continue;
            }
            if (!PySlice_Check(nx) || shp == NULL || d2 < 0
                || d2 >= PyList_GET_SIZE(shp)) {
                is_last = 0;
                break;
            }
            Py_ssize_t sz = PyLong_AsSsize_t(PyList_GET_ITEM(shp, d2));
            Py_ssize_t a, b, s2, l2;
            /* a later full slice does not count */
            if (sz < 0 || PySlice_GetIndicesEx(nx, sz, &a, &b, &s2, &l2) < 0
                || !(a == 0 && b == sz && s2 == 1)) {
                PyErr_Clear();
                is_last = 0;
                break;
            }
            d2++;
        }
        Py_XDECREF(shp);
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
