/* Functionalization (seed §4.9), done while the op-level graph is built.
 *
 * Every tensor value of the Python-level graph has a state:
 *   a root  (a placeholder or a freshly computed value), or
 *   a view  of a parent (select, slice, transpose, ...), with the view's
 *           op and its arguments, so it can be taken again.
 * Each root has a version: the number of mutations of its storage so far.
 * A view's op-level value is cached with the version it was taken at; a
 * read after a mutation takes the view again from the parent's current
 * value. A mutation of a view v <- g(v) becomes
 *   v' = g(v);  b' = scatter(b, v')  (select_scatter, slice_scatter, the
 *   inverse view for transpose/permute/unsqueeze/reshape-like views,
 *   as_strided_scatter otherwise), up to the root, whose current value
 *   becomes the new one. At the end, each mutated placeholder gets one
 *   copy_(primals_i, current value) write-back.
 *
 * state[key] = [parent, root, opname, ovl, tail, cache, cache_ver,
 *               parent_shape, view_val] */
#include "graph/passes_internal.h"

#include <string.h>

enum {
    S_PARENT = 0, S_ROOT, S_OP, S_OVL, S_TAIL, S_CACHE, S_VER, S_PSHAPE,
    S_VVAL, S_LEN
};

static long
fz_version(p_op_ctx *c, PyObject *root)
{
    PyObject *v = PyDict_GetItemWithError(c->ver, root);
    return v ? PyLong_AsLong(v) : 0;
}

static PyObject *
fz_new_state(void)
{
    PyObject *l = PyList_New(S_LEN);
    if (l == NULL) {
        return NULL;
    }
    for (int i = 0; i < S_LEN; i++) {
        PyList_SET_ITEM(l, i, Py_NewRef(Py_None));
    }
    return l;
}

static int
fz_set(PyObject *st, int i, PyObject *v)
{
    return PyList_SetItem(st, i, Py_NewRef(v));
}

PyObject *
stax_graph_fz_resolve(p_op_ctx *c, PyObject *key)
{
    for (int guard = 0; guard < 1000; guard++) {
        PyObject *a = PyDict_GetItemWithError(c->alias, key);
        if (a == NULL) {
            break;
        }
        key = a;
    }
    return key;
}

int
stax_graph_fz_alias(p_op_ctx *c, PyObject *key, PyObject *target)
{
    target = stax_graph_fz_resolve(c, target);
    if (key == target) {
        return 0;
    }
    return PyDict_SetItem(c->alias, key, target);
}

int
stax_graph_fz_root(p_op_ctx *c, PyObject *key, PyObject *value)
{
    PyObject *st = fz_new_state(), *ver = NULL;
    int rc = -1;
    if (st == NULL) {
        return -1;
    }
    ver = PyLong_FromLong(fz_version(c, key));
    if (ver == NULL || fz_set(st, S_ROOT, key) < 0
        || fz_set(st, S_CACHE, value) < 0 || fz_set(st, S_VER, ver) < 0) {
        goto done;
    }
    rc = PyDict_SetItem(c->state, key, st);
done:
    Py_XDECREF(ver);
    Py_DECREF(st);
    return rc;
}

static PyObject *
fz_shape_of(PyObject *val)
{
    if (val == NULL || val == Py_None) {
        return Py_NewRef(Py_None);
    }
    PyObject *s = PyObject_GetAttrString(val, "shape");
    if (s == NULL) {
        PyErr_Clear();
        return Py_NewRef(Py_None);
    }
    PyObject *l = PySequence_List(s);
    Py_DECREF(s);
    if (l == NULL) {
        PyErr_Clear();
        return Py_NewRef(Py_None);
    }
    return l;
}

int
stax_graph_fz_view(p_op_ctx *c, PyObject *key, PyObject *parent,
                   const char *opname, const char *ovl, PyObject *tail,
                   PyObject *value, PyObject *view_val)
{
    PyObject *st = NULL, *pst, *ver = NULL, *op = NULL, *ov = NULL;
    PyObject *pshape = NULL;
    int rc = -1;
    parent = stax_graph_fz_resolve(c, parent);
    pst = PyDict_GetItemWithError(c->state, parent);
    if (pst == NULL) {
        /* the parent is not a tracked tensor: the view is a root */
        return PyErr_Occurred() ? -1 : stax_graph_fz_root(c, key, value);
    }
    PyObject *root = PyList_GET_ITEM(pst, S_ROOT);
    st = fz_new_state();
    ver = PyLong_FromLong(fz_version(c, root));
    op = PyUnicode_FromString(opname);
    ov = PyUnicode_FromString(ovl);
    /* the parent's shape, from its current value's sample */
    PyObject *pcache = PyList_GET_ITEM(pst, S_CACHE);
    PyObject *pval = stax_graph_p_is_node(parent) ? stax_graph_p_val(parent)
                                                  : NULL;
    if (pval == NULL && stax_graph_p_is_node(pcache)) {
        pval = stax_graph_p_val(pcache);
    }
    pshape = fz_shape_of(pval);
    if (st == NULL || ver == NULL || op == NULL || ov == NULL
        || pshape == NULL) {
        goto done;
    }
    if (fz_set(st, S_PARENT, parent) < 0 || fz_set(st, S_ROOT, root) < 0
        || fz_set(st, S_OP, op) < 0 || fz_set(st, S_OVL, ov) < 0
        || fz_set(st, S_TAIL, tail) < 0 || fz_set(st, S_CACHE, value) < 0
        || fz_set(st, S_VER, ver) < 0 || fz_set(st, S_PSHAPE, pshape) < 0
        || fz_set(st, S_VVAL, view_val ? view_val : Py_None) < 0) {
        goto done;
    }
    rc = PyDict_SetItem(c->state, key, st);
done:
    Py_XDECREF(st);
    Py_XDECREF(ver);
    Py_XDECREF(op);
    Py_XDECREF(ov);
    Py_XDECREF(pshape);
    return rc;
}

/* take the view `st` again from the parent's value pv */
static PyObject *
fz_retake(p_op_ctx *c, PyObject *st, PyObject *pv)
{
    PyObject *tail = PyList_GET_ITEM(st, S_TAIL);
    const char *op = PyUnicode_AsUTF8(PyList_GET_ITEM(st, S_OP));
    const char *ovl = PyUnicode_AsUTF8(PyList_GET_ITEM(st, S_OVL));
    if (op == NULL || ovl == NULL) {
        return NULL;
    }
    if (stax_op_row(op) == &stax_op_table[STAX_OP_ALIAS]) {
        return Py_NewRef(pv);
    }
    Py_ssize_t n = PyTuple_Check(tail) ? PyTuple_GET_SIZE(tail) : 0;
    PyObject *args = PyTuple_New(n + 1);
    if (args == NULL) {
        return NULL;
    }
    PyTuple_SET_ITEM(args, 0, Py_NewRef(pv));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(args, i + 1, Py_NewRef(PyTuple_GET_ITEM(tail, i)));
    }
    PyObject *r = stax_graph_p_emit(c, op, ovl, args, NULL, 0);
    Py_DECREF(args);
    return r;
}

PyObject *
stax_graph_fz_current(p_op_ctx *c, PyObject *key)
{
    key = stax_graph_fz_resolve(c, key);
    PyObject *st = PyDict_GetItemWithError(c->state, key);
    if (st == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        PyErr_Format(PyExc_RuntimeError, "make_op_graph: no value for %R",
                     key);
        return NULL;
    }
    PyObject *root = PyList_GET_ITEM(st, S_ROOT);
    long v = fz_version(c, root);
    if (PyLong_AsLong(PyList_GET_ITEM(st, S_VER)) == v
        || PyList_GET_ITEM(st, S_PARENT) == Py_None) {
        return Py_NewRef(PyList_GET_ITEM(st, S_CACHE));
    }
    PyObject *pv = stax_graph_fz_current(c, PyList_GET_ITEM(st, S_PARENT));
    if (pv == NULL) {
        return NULL;
    }
    Py_INCREF(st);
    PyObject *nv = fz_retake(c, st, pv);
    PyObject *vo = PyLong_FromLong(v);
    Py_DECREF(pv);
    if (nv == NULL || vo == NULL || fz_set(st, S_CACHE, nv) < 0
        || fz_set(st, S_VER, vo) < 0) {
        Py_XDECREF(nv);
        Py_XDECREF(vo);
        Py_DECREF(st);
        return NULL;
    }
    Py_DECREF(vo);
    Py_DECREF(st);
    return nv;
}

/* the inverse permutation of dims (a list/tuple of ints) */
static PyObject *
fz_inverse_perm(PyObject *dims)
{
    PyObject *d = PySequence_Fast(dims, "permute dims");
    if (d == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(d);
    PyObject *inv = PyList_New(n);
    if (inv == NULL) {
        Py_DECREF(d);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyList_SET_ITEM(inv, i, Py_NewRef(Py_None));
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long k = PyLong_AsLong(PySequence_Fast_GET_ITEM(d, i));
        if (k < 0) {
            k += n;
        }
        if (k < 0 || k >= n) {
            PyErr_SetString(PyExc_ValueError, "bad permutation");
            Py_DECREF(d);
            Py_DECREF(inv);
            return NULL;
        }
        PyList_SetItem(inv, k, PyLong_FromSsize_t(i));
    }
    Py_DECREF(d);
    return inv;
}

/* the error of a write functionalization cannot express and the
 * Python-level graph would lose (it writes a copy of the view): a subclass
 * of RuntimeError, created once */
static PyObject *
fz_unsafe_exc(void)
{
    static PyObject *exc = NULL;
    if (exc == NULL) {
        exc = PyErr_NewException("tensorplay._C.UnsafeViewWriteError",
                                 PyExc_RuntimeError, NULL);
    }
    return exc;
}

int
stax_graph_fz_unsafe_write(void)
{
    PyObject *exc = fz_unsafe_exc();
    return exc != NULL && PyErr_ExceptionMatches(exc);
}

int
stax_graph_fz_unsafe_raise(PyObject *what)
{
    PyObject *exc = fz_unsafe_exc();
    if (exc != NULL) {
        PyErr_Format(exc, "functionalization: an in-place write through %%%S, "
                     "a view of its argument that functionalization does "
                     "not track (the write would go to a copy)", what);
    }
    return -1;
}

int
stax_graph_fz_is_view(p_op_ctx *c, PyObject *key)
{
    PyObject *st = PyDict_GetItemWithError(c->state, stax_graph_fz_resolve(c, key));
    if (st == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    return PyList_GET_ITEM(st, S_PARENT) != Py_None;
}

/* b' = scatter(pv, v) for the view `st` of its parent */
static PyObject *
fz_scatter(p_op_ctx *c, PyObject *st, PyObject *pv, PyObject *v)
{
    const char *op = PyUnicode_AsUTF8(PyList_GET_ITEM(st, S_OP));
    PyObject *tail = PyList_GET_ITEM(st, S_TAIL);
    PyObject *args = NULL, *r = NULL, *extra = NULL;
    if (op == NULL) {
        return NULL;
    }
    /* the view step's op (a row of the op table: view steps are recorded
     * under their row's name), by id */
    const stax_op_info *vi = stax_op_row(op);
    stax_op_id_t id = vi != NULL ? vi->id : STAX_OP_NONE;
    if (id == STAX_OP_ALIAS) {
        return Py_NewRef(v);
    }
    if (id == STAX_OP_SELECT || id == STAX_OP_SLICE) {
        /* select_scatter(b, v, dim, index), slice_scatter(b, v, dim, ...) */
        PyObject *head = PyTuple_Pack(2, pv, v);
        args = head ? PySequence_Concat(head, tail) : NULL;
        Py_XDECREF(head);
        if (args != NULL) {
            r = stax_graph_p_emit(c, id == STAX_OP_SELECT ? "select_scatter"
                                                          : "slice_scatter",
                                  "default", args, NULL, 0);
        }
    }
    else if (id == STAX_OP_NARROW) {
        PyObject *dim = PyTuple_GET_ITEM(tail, 0);
        PyObject *start = PyTuple_GET_ITEM(tail, 1);
        PyObject *end = PyNumber_Add(start, PyTuple_GET_ITEM(tail, 2));
        PyObject *one = PyLong_FromLong(1);
        args = end && one ? PyTuple_Pack(6, pv, v, dim, start, end, one) : NULL;
        Py_XDECREF(end);
        Py_XDECREF(one);
        if (args != NULL) {
            r = stax_graph_p_emit(c, "slice_scatter", "default", args, NULL, 0);
        }
    }
    else if (id == STAX_OP_TRANSPOSE) {
        PyObject *head = PyTuple_Pack(1, v);
        args = head ? PySequence_Concat(head, tail) : NULL;
        Py_XDECREF(head);
        if (args != NULL) {
            r = stax_graph_p_emit(c, "transpose", "int", args, NULL, 0);
        }
    }
    else if (id == STAX_OP_AS_STRIDED && PyTuple_Check(tail)
             && PyTuple_GET_SIZE(tail) == 3) {
        /* (size, stride, offset) relative to the parent's value */
        PyObject *head = PyTuple_Pack(2, pv, v);
        args = head ? PySequence_Concat(head, tail) : NULL;
        Py_XDECREF(head);
        if (args != NULL) {
            r = stax_graph_p_emit(c, "as_strided_scatter", "default", args,
                                  NULL, 0);
        }
    }
    else if (id == STAX_OP_T) {
        args = PyTuple_Pack(1, v);
        if (args != NULL) {
            r = stax_graph_p_emit(c, "t", "default", args, NULL, 0);
        }
    }
    else if (id == STAX_OP_PERMUTE) {
        extra = fz_inverse_perm(PyTuple_GET_ITEM(tail, 0));
        args = extra ? PyTuple_Pack(2, v, extra) : NULL;
        if (args != NULL) {
            r = stax_graph_p_emit(c, "permute", "default", args, NULL, 0);
        }
    }
    else if (id == STAX_OP_UNSQUEEZE) {
        args = PyTuple_Pack(2, v, PyTuple_GET_ITEM(tail, 0));
        if (args != NULL) {
            r = stax_graph_p_emit(c, "squeeze", "dim", args, NULL, 0);
        }
    }
    else if ((id == STAX_OP_SQUEEZE || id == STAX_OP_VIEW || id == STAX_OP_RESHAPE
              || id == STAX_OP_FLATTEN || id == STAX_OP_UNFLATTEN)
             && PyList_GET_ITEM(st, S_PSHAPE) != Py_None) {
        args = PyTuple_Pack(2, v, PyList_GET_ITEM(st, S_PSHAPE));
        if (args != NULL) {
            r = stax_graph_p_emit(c, "reshape", "default", args, NULL, 0);
        }
    }
    else {
        /* general strided scatter: the view's sizes, strides and offset */
        PyObject *vv = PyList_GET_ITEM(st, S_VVAL);
        PyObject *size = NULL, *stride = NULL, *off = NULL;
        if (vv == Py_None) {
            PyErr_Format(PyExc_NotImplementedError, "functionalization: "
                         "no scatter inverse for a mutated %s view", op);
            return NULL;
        }
        size = fz_shape_of(vv);
        stride = PyObject_CallMethod(vv, "stride", NULL);
        off = stride ? PyObject_CallMethod(vv, "storage_offset", NULL) : NULL;
        if (stride != NULL && !PyList_Check(stride)) {
            Py_SETREF(stride, PySequence_List(stride));
        }
        /* an expanded view (a stride 0 over a size > 1) has no strided
         * scatter inverse: its elements share memory, so the scatter would
         * write each parent element once per copy and the last copy (not
         * the one written through) would win */
        for (Py_ssize_t i = 0; size != NULL && stride != NULL
                               && i < PyList_GET_SIZE(stride)
                               && i < PySequence_Size(size); i++) {
            PyObject *sz = PySequence_GetItem(size, i);
            long n = sz ? PyLong_AsLong(sz) : -1;
            long st_i = PyLong_AsLong(PyList_GET_ITEM(stride, i));
            Py_XDECREF(sz);
            if (PyErr_Occurred()) {
                Py_CLEAR(stride);
                break;
            }
            if (n > 1 && st_i == 0) {
                PyObject *exc = fz_unsafe_exc();
                if (exc != NULL) {
                    PyErr_Format(exc, "functionalization: no scatter "
                                 "inverse for an in-place write through the "
                                 "view %s (its elements share memory: "
                                 "stride 0)", op);
                }
                Py_CLEAR(stride);
                break;
            }
        }
        args = off && stride && size ? PyTuple_Pack(5, pv, v, size, stride,
                                                    off) : NULL;
        Py_XDECREF(size);
        Py_XDECREF(stride);
        Py_XDECREF(off);
        if (args != NULL) {
            r = stax_graph_p_emit(c, "as_strided_scatter", "default", args,
                                  NULL, 0);
        }
    }
    Py_XDECREF(args);
    Py_XDECREF(extra);
    return r;
}

int
stax_graph_fz_assign(p_op_ctx *c, PyObject *key, PyObject *value)
{
    key = stax_graph_fz_resolve(c, key);
    PyObject *st = PyDict_GetItemWithError(c->state, key);
    if (st == NULL) {
        if (PyErr_Occurred()) {
            return -1;
        }
        return stax_graph_fz_root(c, key, value);
    }
    Py_INCREF(st);
    PyObject *root = PyList_GET_ITEM(st, S_ROOT);
    PyObject *parent = PyList_GET_ITEM(st, S_PARENT);
    int rc = -1;
    if (parent == Py_None) {
        PyObject *nv = PyLong_FromLong(fz_version(c, root) + 1);
        if (nv == NULL || PyDict_SetItem(c->ver, root, nv) < 0) {
            Py_XDECREF(nv);
            goto done;
        }
        Py_DECREF(nv);
    }
    else {
        PyObject *pv = stax_graph_fz_current(c, parent);
        PyObject *nb = pv ? fz_scatter(c, st, pv, value) : NULL;
        Py_XDECREF(pv);
        if (nb == NULL) {
            goto done;
        }
        rc = stax_graph_fz_assign(c, parent, nb);
        Py_DECREF(nb);
        if (rc < 0) {
            goto done;
        }
        rc = -1;
    }
    PyObject *vo = PyLong_FromLong(fz_version(c, root));
    if (vo == NULL || fz_set(st, S_CACHE, value) < 0
        || fz_set(st, S_VER, vo) < 0) {
        Py_XDECREF(vo);
        goto done;
    }
    Py_DECREF(vo);
    rc = 0;
done:
    Py_DECREF(st);
    return rc;
}

int
stax_graph_fz_writeback(p_op_ctx *c)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(c->placeholders); i++) {
        PyObject *pair = PyList_GET_ITEM(c->placeholders, i);
        PyObject *key = PyTuple_GET_ITEM(pair, 0);
        PyObject *ph = PyTuple_GET_ITEM(pair, 1);
        if (fz_version(c, key) == 0) {
            if (PyErr_Occurred()) {
                return -1;
            }
            continue;
        }
        PyObject *cur = stax_graph_fz_current(c, key);
        if (cur == NULL) {
            return -1;
        }
        PyObject *args = PyTuple_Pack(2, ph, cur);
        PyObject *r = args ? stax_graph_p_emit(c, "copy_", "default", args,
                                               NULL, 1) : NULL;
        Py_XDECREF(args);
        /* the write-back stands for the user's last in-place write: its
         * source line (strict_native's messages name it) */
        if (r != NULL && stax_graph_p_is_node(cur) && stax_graph_p_copy_stack(r, cur) < 0) {
            Py_CLEAR(r);
        }
        Py_DECREF(cur);
        if (r == NULL) {
            return -1;
        }
        Py_DECREF(r);
    }
    return 0;
}
