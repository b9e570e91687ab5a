/* Overload selection for the op-level graph (oplevel.c): whether an op is
 * in the back end's basis, which overload of an op a bound call lands on
 * (tensor/scalar arguments, defaults), and the positional args and kwargs
 * of the emitted call with trailing defaults dropped. */
#include "graph/passes_internal.h"

#include <string.h>

/* ---- basis, overloads, argument lists -------------------------------- */

int
stax_graph_p_in_basis(p_op_ctx *c, const stax_op_info *op)
{
    if (c->basis != NULL) {
        PyObject *s = PyUnicode_FromString(op->name);
        int r = s ? PySequence_Contains(c->basis, s) : -1;
        Py_XDECREF(s);
        if (r < 0) {
            PyErr_Clear();
            r = 0;
        }
        return r;
    }
    if (op->formula != NULL) {
        return 1;
    }
    switch (op->kind) {
    case STAX_OPK_COMPOSITE:
        return op->decomp == NULL;
    case STAX_OPK_POINTWISE:
        return op->decomp == NULL;
    default:
        return 1;
    }
}

static int
p_has_ovl(const stax_op_info *op, const char *ovl)
{
    const char *p = op->overloads ? op->overloads : "";
    size_t n = strlen(ovl);
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, ovl, n) == 0) {
            return 1;
        }
        p += len + (e ? 1 : 0);
    }
    return 0;
}

static void
p_first_ovl(const stax_op_info *op, char *buf, size_t n)
{
    const char *p = op->overloads ? op->overloads : "default";
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len >= n) {
        len = n - 1;
    }
    memcpy(buf, p, len);
    buf[len] = '\0';
    if (len == 0) {
        snprintf(buf, n, "default");
    }
}

int
stax_graph_p_is_number(PyObject *o)
{
    return PyLong_Check(o) || PyFloat_Check(o);
}

static int
p_is_tensor_type(const stax_op_info *op, int i)
{
    return strncmp(stax_graph_p_schema_type(op, i), "Tensor", 6) == 0;
}

static int
p_at_default(const stax_op_info *op, int i, PyObject *v)
{
    PyObject *d = stax_graph_p_schema_default(op, i);
    if (d == NULL) {
        return 0;
    }
    if (stax_graph_p_is_node(v)) {
        return 0;
    }
    int eq = PyObject_RichCompareBool(v, d, Py_EQ);
    if (eq < 0) {
        PyErr_Clear();
        return 0;
    }
    return eq && Py_TYPE(v) == Py_TYPE(d);
}

void
stax_graph_p_choose_overload(const stax_op_info *op, PyObject *bound, char *buf,
                             size_t n)
{
    int np = (int)PyTuple_GET_SIZE(bound), nscal = 0, ntens = 0, k = 0;
    int scal_pos[8] = {0};
    if (!strchr(op->overloads ? op->overloads : "", ',')) {
        p_first_ovl(op, buf, n);
        return;
    }
    for (int i = 0; i < np; i++) {
        if (p_is_tensor_type(op, i)) {
            int s = stax_graph_p_is_number(PyTuple_GET_ITEM(bound, i));
            if (k < 8) {
                scal_pos[k] = s;
            }
            k++;
            nscal += s;
            ntens++;
        }
    }
    if (op->id == STAX_OP_WHERE && ntens == 3) {
        const char *o = scal_pos[1] && scal_pos[2] ? "Scalar"
                        : scal_pos[1] ? "ScalarSelf"
                        : scal_pos[2] ? "ScalarOther" : "self";
        if (p_has_ovl(op, o)) {
            snprintf(buf, n, "%s", o);
            return;
        }
    }
    if (ntens >= 2 && p_has_ovl(op, "Tensor_Scalar")) {   /* pow */
        snprintf(buf, n, "%s", scal_pos[0] ? "Scalar"
                 : scal_pos[1] ? "Tensor_Scalar" : "Tensor_Tensor");
        return;
    }
    if (nscal > 0 && p_has_ovl(op, "Scalar")) {
        snprintf(buf, n, "Scalar");
        return;
    }
    if (p_has_ovl(op, "Tensor") && ntens >= 2 && nscal == 0) {
        snprintf(buf, n, "Tensor");
        return;
    }
    /* a dim argument given: the dim overload (sum.dim_IntList, mean.dim) */
    for (int i = 0; i < np; i++) {
        if (!strcmp(stax_graph_p_schema_name(op, i), "dim")
            && !p_at_default(op, i, PyTuple_GET_ITEM(bound, i))) {
            const char *p = op->overloads;
            while (*p) {
                const char *e = strchr(p, ',');
                size_t len = e ? (size_t)(e - p) : strlen(p);
                if (len >= 3 && !strncmp(p, "dim", 3) && len < n) {
                    memcpy(buf, p, len);
                    buf[len] = '\0';
                    return;
                }
                p += len + (e ? 1 : 0);
            }
        }
    }
    if (p_has_ovl(op, "default")) {
        snprintf(buf, n, "default");
        return;
    }
    if (p_has_ovl(op, "Tensor")) {
        snprintf(buf, n, "Tensor");
        return;
    }
    p_first_ovl(op, buf, n);
}

/* int[] arguments print as lists: (8,) -> [8] */
static PyObject *
p_norm_arg(const stax_op_info *op, int i, PyObject *v)
{
    const char *t = stax_graph_p_schema_type(op, i);
    if (PyTuple_Check(v) && strchr(t, '[') != NULL) {
        return PySequence_List(v);
    }
    if (PyLong_Check(v) && !PyBool_Check(v) && strstr(t, "[]") != NULL) {
        return Py_BuildValue("[O]", v);
    }
    return Py_NewRef(v);
}

/* positional args and kwargs of the call, trailing defaults dropped */
int
stax_graph_p_call_args(const stax_op_info *op, const char *ovl, PyObject *bound,
                       PyObject **pargs, PyObject **pkw)
{
    int np = (int)PyTuple_GET_SIZE(bound), last = -1;
    int all_pos = 0;
    (void)ovl;
    PyObject *l = PyList_New(0), *kw = PyDict_New();
    if (l == NULL || kw == NULL) {
        goto error;
    }
    for (int i = 0; i < np; i++) {
        if ((!stax_graph_p_schema_kwonly(op, i) || all_pos)
            && (all_pos || !p_at_default(op, i, PyTuple_GET_ITEM(bound, i)))) {
            last = i;
        }
    }
    for (int i = 0; i < np; i++) {
        PyObject *v = p_norm_arg(op, i, PyTuple_GET_ITEM(bound, i));
        int e;
        if (v == NULL) {
            goto error;
        }
        if (!stax_graph_p_schema_kwonly(op, i) || all_pos) {
            e = i <= last ? PyList_Append(l, v) : 0;
        }
        else if (!p_at_default(op, i, v)) {
            e = PyDict_SetItemString(kw, stax_graph_p_schema_name(op, i), v);
        }
        else {
            e = 0;
        }
        Py_DECREF(v);
        if (e < 0) {
            goto error;
        }
    }
    *pargs = PyList_AsTuple(l);
    Py_DECREF(l);
    if (*pargs == NULL) {
        Py_DECREF(kw);
        return -1;
    }
    *pkw = kw;
    return 0;
error:
    Py_XDECREF(l);
    Py_XDECREF(kw);
    return -1;
}

