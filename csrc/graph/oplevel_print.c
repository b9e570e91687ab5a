/* The op-level graph's printer: OpGraphModule, the GraphModule subclass
 * make_op_graph returns, whose str() prints the graph in the seed's style
 * (Examples 4.3, 4.4): one `name = tp.<op>.<overload>(args)` line per
 * node, then the returned values. */
#include "graph/passes_internal.h"

#include <string.h>

static PyObject *p_opgm_type = NULL;   /* OpGraphModule, made once */

/* ---- the printer ----------------------------------------------------- */

static int
p_fmt_arg(PyObject *o, PyObject *out)
{
    PyObject *s = NULL;
    int rc = -1;
    if (stax_graph_p_is_node(o)) {
        s = stax_graph_p_attr(o, "name");
    }
    else if (PyList_Check(o) || PyTuple_Check(o)) {
        int lst = PyList_Check(o);
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject *sub = PyList_New(0);
        if (sub == NULL) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (p_fmt_arg(PySequence_Fast_GET_ITEM(o, i), sub) < 0) {
                Py_DECREF(sub);
                return -1;
            }
        }
        PyObject *sep = PyUnicode_FromString(", ");
        PyObject *j = sep ? PyUnicode_Join(sep, sub) : NULL;
        Py_XDECREF(sep);
        Py_DECREF(sub);
        if (j == NULL) {
            return -1;
        }
        s = PyUnicode_FromFormat(lst ? "[%U]" : (n == 1 ? "(%U,)" : "(%U)"),
                                 j);
        Py_DECREF(j);
    }
    else {
        s = PyObject_Repr(o);
    }
    if (s != NULL) {
        rc = PyList_Append(out, s);
        Py_DECREF(s);
    }
    return rc;
}

static int
p_collect_leaves(PyObject *o, PyObject *out)
{
    if (PyList_Check(o) || PyTuple_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            if (p_collect_leaves(PySequence_Fast_GET_ITEM(o, i), out) < 0) {
                return -1;
            }
        }
        return 0;
    }
    if (PyDict_Check(o)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(o, &pos, &k, &v)) {
            if (p_collect_leaves(v, out) < 0) {
                return -1;
            }
        }
        return 0;
    }
    return PyList_Append(out, o);
}

/* "return (leaves...)" for the output node's args a; NULL with an exception */
static PyObject *
p_output_rhs(PyObject *a)
{
    PyObject *s = NULL;
    PyObject *leaves = PyList_New(0);
    int e = leaves && PyTuple_GET_SIZE(a) > 0
            ? p_collect_leaves(PyTuple_GET_ITEM(a, 0), leaves) : -1;
    PyObject *t = e == 0 ? PyList_AsTuple(leaves) : NULL;
    PyObject *txt = PyList_New(0);
    if (t && txt && p_fmt_arg(t, txt) == 0) {
        s = PyUnicode_FromFormat("return %U", PyList_GET_ITEM(txt, 0));
    }
    Py_XDECREF(leaves);
    Py_XDECREF(t);
    Py_XDECREF(txt);
    return s;
}

/* The call's operand texts, ", "-joined: positional args a, then kwargs k
 * as name=value; for a method call its first operand goes to *self_txt
 * instead (x.method(rest)). NULL on failure. */
static PyObject *
p_call_args(PyObject *n, p_opcode_t op, PyObject *a, PyObject *k,
            PyObject **self_txt)
{
    PyObject *parts = PyList_New(0);
    if (parts == NULL) {
        return NULL;
    }
    PyObject *kw = Py_NewRef(k);
    int err = 0;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(a) && !err; j++) {
        err = p_fmt_arg(PyTuple_GET_ITEM(a, j), parts) < 0;
    }
    /* add.Scalar / sub.Scalar print their full schema (self, other,
     * alpha), as the seed's Example 4.4 does */
    PyObject *meta0 = stax_graph_p_attr(n, "meta");
    PyObject *ov0 = meta0 && PyDict_Check(meta0)
                    ? PyDict_GetItemString(meta0, "op_overload") : NULL;
    const char *ovs = ov0 ? PyUnicode_AsUTF8(ov0) : NULL, *ovl = NULL;
    const stax_op_info *row = ovs ? stax_op_by_overload(ovs, &ovl) : NULL;
    if (!err && row && (row->id == STAX_OP_ADD || row->id == STAX_OP_SUB)
        && !strcmp(ovl, "Scalar")
        && PyTuple_GET_SIZE(a) == 2 && PyDict_Check(kw)) {
        PyObject *al = PyDict_GetItemString(kw, "alpha");
        PyObject *one = PyLong_FromLong(1);
        err = one == NULL || p_fmt_arg(al ? al : one, parts) < 0;
        Py_XDECREF(one);
        if (!err && al != NULL) {
            PyObject *k2 = PyDict_Copy(kw);
            err = k2 == NULL || PyDict_DelItemString(k2, "alpha") < 0;
            if (k2 != NULL) {
                Py_SETREF(kw, k2);
            }
        }
    }
    Py_XDECREF(meta0);
    PyErr_Clear();
    if (PyDict_Check(kw)) {
        PyObject *kk, *vv;
        Py_ssize_t pos = 0;
        while (!err && PyDict_Next(kw, &pos, &kk, &vv)) {
            PyObject *tmp = PyList_New(0);
            err = tmp == NULL || p_fmt_arg(vv, tmp) < 0;
            PyObject *kv = err ? NULL : PyUnicode_FromFormat(
                "%U=%U", kk, PyList_GET_ITEM(tmp, 0));
            err = err || kv == NULL || PyList_Append(parts, kv) < 0;
            Py_XDECREF(kv);
            Py_XDECREF(tmp);
        }
    }
    if (!err && op == P_CALL_METHOD && PyList_GET_SIZE(parts) > 0) {
        *self_txt = Py_NewRef(PyList_GET_ITEM(parts, 0));
        err = PyList_SetSlice(parts, 0, 1, NULL) < 0;
    }
    PyObject *sep = err ? NULL : PyUnicode_FromString(", ");
    PyObject *j = sep ? PyUnicode_Join(sep, parts) : NULL;
    Py_XDECREF(sep);
    Py_DECREF(parts);
    Py_DECREF(kw);
    return j;
}

/* The right-hand side of a call_function / call_method / get_attr node:
 * tp.<overload>(args), x.method(args), fn(args) or self.<attr> */
static PyObject *
p_call_rhs(PyObject *n, p_opcode_t op, PyObject *a, PyObject *k)
{
    PyObject *self_txt = NULL, *s = NULL;
    PyObject *j = p_call_args(n, op, a, k, &self_txt);
    if (j == NULL) {
        Py_XDECREF(self_txt);
        return NULL;
    }
    PyObject *meta = stax_graph_p_attr(n, "meta");
    PyObject *ovl = meta && PyDict_Check(meta)
                    ? PyDict_GetItemString(meta, "op_overload") : NULL;
    PyObject *target = stax_graph_p_attr(n, "target");
    if (op == P_GET_ATTR) {
        s = PyUnicode_FromFormat("self.%S", target);
    }
    else if (ovl != NULL) {
        s = PyUnicode_FromFormat("tp.%U(%U)", ovl, j);
    }
    else if (op == P_CALL_METHOD) {
        s = self_txt ? PyUnicode_FromFormat("%U.%S(%U)", self_txt, target, j)
                     : PyUnicode_FromFormat("%S(%U)", target, j);
    }
    else {
        PyObject *tn = target ? PyObject_GetAttrString(target, "__name__")
                              : NULL;
        PyErr_Clear();
        s = PyUnicode_FromFormat("%S(%U)", tn ? tn : target, j);
        Py_XDECREF(tn);
    }
    Py_XDECREF(meta);
    Py_XDECREF(target);
    Py_XDECREF(self_txt);
    Py_DECREF(j);
    return s;
}

/* "name = rhs" lines, the names padded to width (a None name: rhs alone),
 * "\n"-joined */
static PyObject *
p_align_lines(PyObject *names, PyObject *rhs, Py_ssize_t width)
{
    PyObject *res = NULL;
    PyObject *lines = PyList_New(0);
    if (lines == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(names); i++) {
        PyObject *nm = PyList_GET_ITEM(names, i), *line;
        if (nm == Py_None) {
            line = Py_NewRef(PyList_GET_ITEM(rhs, i));
        }
        else {
            PyObject *sp = PyUnicode_FromString(" ");
            PyObject *pad = sp ? PySequence_Repeat(sp, width -
                                                   PyUnicode_GET_LENGTH(nm))
                               : NULL;
            Py_XDECREF(sp);
            line = pad ? PyUnicode_FromFormat("%U%U = %U", nm, pad,
                                              PyList_GET_ITEM(rhs, i)) : NULL;
            Py_XDECREF(pad);
        }
        if (line == NULL || PyList_Append(lines, line) < 0) {
            Py_XDECREF(line);
            goto done;
        }
        Py_DECREF(line);
    }
    PyObject *sep = PyUnicode_FromString("\n");
    res = sep ? PyUnicode_Join(sep, lines) : NULL;
    Py_XDECREF(sep);
done:
    Py_DECREF(lines);
    return res;
}

static PyObject *
p_op_graph_str(PyObject *module, PyObject *gm)
{
    PyObject *graph = NULL, *nodes = NULL, *names = NULL;
    PyObject *rhs = NULL, *res = NULL;
    Py_ssize_t width = 0;
    (void)module;
    graph = PyObject_GetAttrString(gm, "graph");
    if (graph == NULL || stax_graph_p_learn_node_type(graph) < 0) {
        goto done;
    }
    nodes = stax_graph_p_nodes(graph);
    names = PyList_New(0);
    rhs = PyList_New(0);
    if (nodes == NULL || names == NULL || rhs == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        PyObject *n = PyList_GET_ITEM(nodes, i), *s = NULL;
        p_opcode_t op = stax_graph_p_opcode(n);
        PyObject *a = stax_graph_p_attr(n, "args");
        PyObject *k = a ? stax_graph_p_attr(n, "kwargs") : NULL;
        if (k == NULL) {
            Py_XDECREF(a);
            goto done;
        }
        if (op == P_OUTPUT) {
            s = p_output_rhs(a);
            Py_DECREF(a);
            Py_DECREF(k);
            if (s == NULL || PyList_Append(names, Py_None) < 0
                || PyList_Append(rhs, s) < 0) {
                Py_XDECREF(s);
                goto done;
            }
            Py_DECREF(s);
            continue;
        }
        if (op != P_CALL_FUNCTION && op != P_CALL_METHOD
            && op != P_GET_ATTR) {
            PyErr_Clear();
            Py_DECREF(a);
            Py_DECREF(k);
            continue;
        }
        s = p_call_rhs(n, op, a, k);
        Py_DECREF(a);
        Py_DECREF(k);
        if (s == NULL) {
            goto done;
        }
        PyObject *nm = stax_graph_p_attr(n, "name");
        if (nm == NULL || PyList_Append(names, nm) < 0
            || PyList_Append(rhs, s) < 0) {
            Py_DECREF(s);
            Py_XDECREF(nm);
            goto done;
        }
        if (PyUnicode_GET_LENGTH(nm) > width) {
            width = PyUnicode_GET_LENGTH(nm);
        }
        Py_DECREF(s);
        Py_DECREF(nm);
    }
    res = p_align_lines(names, rhs, width);
done:
    Py_XDECREF(graph);
    Py_XDECREF(nodes);
    Py_XDECREF(names);
    Py_XDECREF(rhs);
    return res;
}

static PyMethodDef p_str_def = {
    "__str__", (PyCFunction)p_op_graph_str, METH_O,
    "The op-level graph in the seed's style (Examples 4.3, 4.4)."};

PyObject *
stax_graph_p_opgm(void)
{
    PyObject *base = NULL, *fn = NULL, *meth = NULL, *ns = NULL;
    if (p_opgm_type != NULL) {
        return p_opgm_type;
    }
    base = Py_NewRef((PyObject *)StaxGraphModule_Type);
    fn = PyCFunction_New(&p_str_def, NULL);
    meth = fn ? PyInstanceMethod_New(fn) : NULL;
    ns = meth ? Py_BuildValue("{sOsOss}", "__str__", meth, "__repr__", meth,
                              "__module__", "tensorplay._C") : NULL;
    if (ns != NULL) {
        p_opgm_type = PyObject_CallFunction((PyObject *)&PyType_Type, "s(O)O",
                                            "OpGraphModule", base, ns);
    }
    Py_XDECREF(base);
    Py_XDECREF(fn);
    Py_XDECREF(meth);
    Py_XDECREF(ns);
    return p_opgm_type;   /* borrowed (kept for the process) */
}

