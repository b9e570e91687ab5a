/* The two renderings of a graph: the human print (Listing 3.1 format) and
 * the executable Python source of forward (gm.code). */
#include "graph/graph.h"
#include <math.h>
#include <string.h>

static PyObject *builtins_str;   /* "builtins" */
static PyObject *operator_module = NULL;

static int
is_tensor(PyObject *o)
{
    return StaxTensor_Type != NULL && PyObject_TypeCheck(o, StaxTensor_Type);
}

/* ------------------------------------------------------------------ */
/* human print                                                         */

/* Append the formatting of arg (fx _format_arg) to list parts. */
static int
fmt_arg(PyObject *a, PyObject *parts)
{
    PyObject *s = NULL;
    int rc = -1;
    if (StaxNode_Check(a)) {
        s = PyUnicode_FromFormat("%%%U", ((StaxNode *)a)->name);
    }
    else if (PyTuple_Check(a) || PyList_Check(a)) {
        int tup = PyTuple_Check(a);
        Py_ssize_t n = PySequence_Fast_GET_SIZE(a);
        PyObject *o = PyUnicode_FromString(tup ? "(" : "[");
        if (o == NULL || PyList_Append(parts, o) < 0) {
            Py_XDECREF(o);
            return -1;
        }
        Py_DECREF(o);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i > 0) {
                o = PyUnicode_FromString(", ");
                if (o == NULL || PyList_Append(parts, o) < 0) {
                    Py_XDECREF(o);
                    return -1;
                }
                Py_DECREF(o);
            }
            if (fmt_arg(PySequence_Fast_GET_ITEM(a, i), parts) < 0) {
                return -1;
            }
        }
        s = PyUnicode_FromString(tup ? (n == 1 ? ",)" : ")") : "]");
    }
    else if (PyDict_Check(a)) {
        Py_ssize_t pos = 0, i = 0;
        PyObject *k, *v, *o;
        o = PyUnicode_FromString("{");
        if (o == NULL || PyList_Append(parts, o) < 0) {
            Py_XDECREF(o);
            return -1;
        }
        Py_DECREF(o);
        while (PyDict_Next(a, &pos, &k, &v)) {
            o = PyUnicode_FromFormat("%s%S: ", i++ ? ", " : "", k);
            if (o == NULL || PyList_Append(parts, o) < 0) {
                Py_XDECREF(o);
                return -1;
            }
            Py_DECREF(o);
            if (fmt_arg(v, parts) < 0) {
                return -1;
            }
        }
        s = PyUnicode_FromString("}");
    }
    else {
        s = PyObject_Str(a);
    }
    if (s != NULL && PyList_Append(parts, s) == 0) {
        rc = 0;
    }
    Py_XDECREF(s);
    return rc;
}

/* New reference: "operator.add", "tensorplay.functional.relu", "sum". */
static PyObject *
fmt_target(PyObject *t)
{
    PyObject *name = NULL, *mod = NULL, *res = NULL, *bi = NULL;
    if (PyUnicode_Check(t)) {
        return Py_NewRef(t);
    }
    name = PyObject_GetAttrString(t, "__name__");
    if (name == NULL || !PyUnicode_Check(name)) {
        PyErr_Clear();
        Py_XDECREF(name);
        return PyObject_Str(t);
    }
    /* the builtins module is in sys.modules from interpreter start */
    bi = PyImport_GetModule(builtins_str);
    if (bi != NULL) {
        PyObject *b = PyObject_GetAttr(bi, name);
        if (b == t) {
            Py_DECREF(b);
            Py_DECREF(bi);
            return name;
        }
        Py_XDECREF(b);
    }
    PyErr_Clear();
    mod = PyObject_GetAttrString(t, "__module__");
    if (mod == NULL || !PyUnicode_Check(mod)) {
        PyErr_Clear();
        Py_XDECREF(mod);
        Py_XDECREF(bi);
        return PyObject_Str(t);
    }
    if (PyUnicode_CompareWithASCIIString(mod, "_operator") == 0) {
        res = PyUnicode_FromFormat("operator.%U", name);
    }
    else {
        res = PyUnicode_FromFormat("%U.%U", mod, name);
    }
    Py_DECREF(name);
    Py_DECREF(mod);
    Py_XDECREF(bi);
    return res;
}

static PyObject *
shape_text(StaxNode *n)
{
    PyObject *val;
    if (n->op == STAX_NODE_PLACEHOLDER || n->op == STAX_NODE_OUTPUT) {
        return PyUnicode_FromString("");
    }
    val = PyDict_GetItemString(n->meta, "val");
    if (val == NULL) {
        /* a compiled version keeps (shape, dtype, stride, ...) instead of
         * the sample value */
        PyObject *tm = PyDict_GetItemString(n->meta, "tensor_meta");
        PyObject *sh = (tm && PyTuple_Check(tm) && PyTuple_GET_SIZE(tm) == 5)
                           ? PyTuple_GET_ITEM(tm, 0) : NULL;
        if (sh != NULL && PyTuple_Check(sh)) {
            PyObject *body = PyObject_Repr(sh), *r;
            if (body == NULL) {
                return NULL;
            }
            r = PyUnicode_FromFormat(" shape=%U", body);
            Py_DECREF(body);
            return r;
        }
    }
    if (val == NULL || !is_tensor(val)) {
        return PyUnicode_FromString("");
    }
    {
        StaxTensor *t = (StaxTensor *)val;
        char buf[STAX_MAX_DIMS * 24 + 16];
        int p = snprintf(buf, sizeof buf, " shape=(");
        for (int i = 0; i < t->ndim; i++) {
            p += snprintf(buf + p, sizeof buf - p, "%s%lld", i ? ", " : "",
                          (long long)t->sizes[i]);
        }
        snprintf(buf + p, sizeof buf - p, "%s)", t->ndim == 1 ? "," : "");
        return PyUnicode_FromString(buf);
    }
}

PyObject *
stax_graph_format_node(StaxNode *n)
{
    PyObject *parts = NULL, *sep = NULL, *res = NULL, *shape = NULL,
             *tgt = NULL, *s = NULL;
    if (n->op == STAX_NODE_OUTPUT) {
        PyObject *v = PyTuple_GET_SIZE(n->args) ? PyTuple_GET_ITEM(n->args, 0)
                                                : Py_None;
        return PyUnicode_FromFormat("return %S", v);
    }
    parts = PyList_New(0);
    shape = shape_text(n);
    tgt = fmt_target(n->target);
    if (parts == NULL || shape == NULL || tgt == NULL) {
        goto done;
    }
    s = PyUnicode_FromFormat("%%%U%U : [num_users=%zd] = %s[target=%U]",
                             n->name, shape, PyDict_GET_SIZE(n->users),
                             stax_node_op_name(n->op), tgt);
    if (s == NULL || PyList_Append(parts, s) < 0) {
        goto done;
    }
    if (n->op != STAX_NODE_PLACEHOLDER && n->op != STAX_NODE_GET_ATTR) {
        PyObject *o = PyUnicode_FromString("(args = ");
        if (o == NULL || PyList_Append(parts, o) < 0) {
            Py_XDECREF(o);
            goto done;
        }
        Py_DECREF(o);
        if (fmt_arg(n->args, parts) < 0) {
            goto done;
        }
        o = PyUnicode_FromString(", kwargs = ");
        if (o == NULL || PyList_Append(parts, o) < 0) {
            Py_XDECREF(o);
            goto done;
        }
        Py_DECREF(o);
        if (fmt_arg(n->kwargs, parts) < 0) {
            goto done;
        }
        o = PyUnicode_FromString(")");
        if (o == NULL || PyList_Append(parts, o) < 0) {
            Py_XDECREF(o);
            goto done;
        }
        Py_DECREF(o);
    }
    sep = PyUnicode_FromString("");
    if (sep != NULL) {
        res = PyUnicode_Join(sep, parts);
    }
done:
    Py_XDECREF(parts);
    Py_XDECREF(sep);
    Py_XDECREF(shape);
    Py_XDECREF(tgt);
    Py_XDECREF(s);
    return res;
}

PyObject *
stax_graph_str(StaxGraph *g)
{
    PyObject *lines = PyList_New(0), *res = NULL, *sep = NULL, *o;
    if (lines == NULL) {
        return NULL;
    }
    o = PyUnicode_FromString("graph(");
    if (o == NULL || PyList_Append(lines, o) < 0) {
        Py_XDECREF(o);
        goto done;
    }
    Py_DECREF(o);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(g->nodes); i++) {
        PyObject *l = stax_graph_format_node(
            (StaxNode *)PyList_GET_ITEM(g->nodes, i));
        if (l == NULL) {
            goto done;
        }
        o = PyUnicode_FromFormat("    %U", l);
        Py_DECREF(l);
        if (o == NULL || PyList_Append(lines, o) < 0) {
            Py_XDECREF(o);
            goto done;
        }
        Py_DECREF(o);
    }
    o = PyUnicode_FromString(")");
    if (o == NULL || PyList_Append(lines, o) < 0) {
        Py_XDECREF(o);
        goto done;
    }
    Py_DECREF(o);
    sep = PyUnicode_FromString("\n");
    if (sep != NULL) {
        res = PyUnicode_Join(sep, lines);
    }
done:
    Py_XDECREF(lines);
    Py_XDECREF(sep);
    return res;
}

/* ------------------------------------------------------------------ */
/* codegen                                                             */

/* New reference: a global name bound to obj in globals. */
static PyObject *
add_const(PyObject *globals, PyObject *obj)
{
    PyObject *nm = PyUnicode_FromFormat("_stax_c%zd", PyDict_GET_SIZE(globals));
    if (nm == NULL) {
        return NULL;
    }
    if (PyDict_SetItem(globals, nm, obj) < 0) {
        Py_DECREF(nm);
        return NULL;
    }
    return nm;
}

static PyObject *arg_expr(PyObject *a, PyObject *globals);

static PyObject *
join_exprs(PyObject *seq, PyObject *globals, const char *open,
           const char *close, int trailing_comma)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *parts = PyList_New(0), *sep = NULL, *body = NULL, *res = NULL;
    if (parts == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = arg_expr(PySequence_Fast_GET_ITEM(seq, i), globals);
        if (e == NULL || PyList_Append(parts, e) < 0) {
            Py_XDECREF(e);
            goto done;
        }
        Py_DECREF(e);
    }
    sep = PyUnicode_FromString(", ");
    body = sep ? PyUnicode_Join(sep, parts) : NULL;
    if (body != NULL) {
        res = PyUnicode_FromFormat("%s%U%s%s", open, body,
                                   (trailing_comma && n == 1) ? "," : "",
                                   close);
    }
done:
    Py_XDECREF(parts);
    Py_XDECREF(sep);
    Py_XDECREF(body);
    return res;
}

static PyObject *
arg_expr(PyObject *a, PyObject *globals)
{
    if (StaxNode_Check(a)) {
        return Py_NewRef(((StaxNode *)a)->name);
    }
    if (a == Py_None || PyBool_Check(a) || PyLong_CheckExact(a)
        || PyUnicode_CheckExact(a)) {
        return PyObject_Repr(a);
    }
    if (a == Py_Ellipsis) {
        return PyUnicode_FromString("...");
    }
    if (PyFloat_CheckExact(a) && isfinite(PyFloat_AS_DOUBLE(a))) {
        return PyObject_Repr(a);
    }
    if (PyTuple_CheckExact(a)) {
        return join_exprs(a, globals, "(", ")", 1);
    }
    if (PyList_CheckExact(a)) {
        return join_exprs(a, globals, "[", "]", 0);
    }
    if (PySlice_Check(a)) {
        PySliceObject *s = (PySliceObject *)a;
        PyObject *t = PyTuple_Pack(3, s->start, s->stop, s->step), *r;
        if (t == NULL) {
            return NULL;
        }
        r = join_exprs(t, globals, "slice(", ")", 0);
        Py_DECREF(t);
        return r;
    }
    if (PyDict_CheckExact(a)) {
        PyObject *parts = PyList_New(0), *k, *v, *sep = NULL, *body = NULL,
                 *res = NULL;
        Py_ssize_t pos = 0;
        if (parts == NULL) {
            return NULL;
        }
        while (PyDict_Next(a, &pos, &k, &v)) {
            PyObject *ke = arg_expr(k, globals);
            PyObject *ve = ke ? arg_expr(v, globals) : NULL;
            PyObject *kv = ve ? PyUnicode_FromFormat("%U: %U", ke, ve) : NULL;
            Py_XDECREF(ke);
            Py_XDECREF(ve);
            if (kv == NULL || PyList_Append(parts, kv) < 0) {
                Py_XDECREF(kv);
                Py_DECREF(parts);
                return NULL;
            }
            Py_DECREF(kv);
        }
        sep = PyUnicode_FromString(", ");
        body = sep ? PyUnicode_Join(sep, parts) : NULL;
        if (body) {
            res = PyUnicode_FromFormat("{%U}", body);
        }
        Py_DECREF(parts);
        Py_XDECREF(sep);
        Py_XDECREF(body);
        return res;
    }
    return add_const(globals, a);
}

/* New reference: an expression naming target in globals. */
static PyObject *
target_expr(PyObject *t, PyObject *globals)
{
    PyObject *name = NULL, *mod = NULL, *qual = NULL, *res = NULL,
             *top = NULL, *obj = NULL, *path = NULL;
    name = PyObject_GetAttrString(t, "__name__");
    mod = name ? PyObject_GetAttrString(t, "__module__") : NULL;
    if (name == NULL || mod == NULL || !PyUnicode_Check(name)
        || !PyUnicode_Check(mod)) {
        PyErr_Clear();
        goto fallback;
    }
    if (PyUnicode_CompareWithASCIIString(mod, "_operator") == 0) {
        if (PyDict_SetItemString(globals, "operator", operator_module) < 0) {
            goto error;
        }
        res = PyUnicode_FromFormat("operator.%U", name);
        goto done;
    }
    if (PyUnicode_CompareWithASCIIString(mod, "builtins") == 0) {
        res = Py_NewRef(name);
        goto done;
    }
    qual = PyObject_GetAttrString(t, "__qualname__");
    if (qual == NULL || !PyUnicode_Check(qual)) {
        PyErr_Clear();
        Py_XSETREF(qual, Py_NewRef(name));
    }
    if (PyUnicode_FindChar(qual, '<', 0, PyUnicode_GET_LENGTH(qual), 1) >= 0) {
        goto fallback;
    }
    {
        /* walk top.sub....qual and check we land on t */
        /* t's module is loaded (t exists): look it up, never import */
        PyObject *m = PyImport_GetModule(mod), *parts, *dot;
        Py_ssize_t i;
        if (m == NULL) {
            PyErr_Clear();
            goto fallback;
        }
        Py_DECREF(m);
        path = PyUnicode_FromFormat("%U.%U", mod, qual);
        dot = PyUnicode_FromString(".");
        parts = (path && dot) ? PyUnicode_Split(path, dot, -1) : NULL;
        Py_XDECREF(dot);
        if (parts == NULL) {
            goto error;
        }
        top = PyImport_GetModule(PyList_GET_ITEM(parts, 0));
        obj = Py_XNewRef(top);
        for (i = 1; obj != NULL && i < PyList_GET_SIZE(parts); i++) {
            Py_SETREF(obj, PyObject_GetAttr(obj, PyList_GET_ITEM(parts, i)));
        }
        if (obj == t) {
            PyObject *topname = PyList_GET_ITEM(parts, 0);
            int clash = PyDict_Contains(globals, topname);
            if (clash == 0 && PyDict_SetItem(globals, topname, top) == 0) {
                res = Py_NewRef(path);
            }
            else if (clash > 0) {
                PyObject *have = PyDict_GetItem(globals, topname);
                if (have == top) {
                    res = Py_NewRef(path);
                }
            }
        }
        Py_DECREF(parts);
        PyErr_Clear();
        if (res != NULL) {
            goto done;
        }
    }
fallback:
    res = add_const(globals, t);
    goto done;
error:
    res = NULL;
done:
    Py_XDECREF(name);
    Py_XDECREF(mod);
    Py_XDECREF(qual);
    Py_XDECREF(top);
    Py_XDECREF(obj);
    Py_XDECREF(path);
    return res;
}

/* New reference or NULL without exception when not an infix operator
 * (the spelling is the Python operator rows' symbol, ops.def). */
static PyObject *
infix_expr(StaxNode *n, PyObject *globals)
{
    Py_ssize_t na = PyTuple_GET_SIZE(n->args);
    int ip = 0;
    const stax_pyop_info *po;
    PyObject *a = NULL, *b = NULL, *r = NULL;
    if (PyDict_GET_SIZE(n->kwargs) != 0) {
        return NULL;
    }
    po = stax_pyop_for_target(n->target, &ip);
    if (po == NULL || ip || po->arity != na
        || (po->sym == NULL && po->key != STAX_PYOP_GETITEM)) {
        return NULL;
    }
    a = arg_expr(PyTuple_GET_ITEM(n->args, 0), globals);
    if (a == NULL) {
        return NULL;
    }
    if (na == 1) {
        r = PyUnicode_FromFormat("%s%U", po->sym, a);
    }
    else {
        b = arg_expr(PyTuple_GET_ITEM(n->args, 1), globals);
        if (b != NULL) {
            r = po->key == STAX_PYOP_GETITEM
                    ? PyUnicode_FromFormat("%U[%U]", a, b)
                    : PyUnicode_FromFormat("%U %s %U", a, po->sym, b);
        }
    }
    Py_DECREF(a);
    Py_XDECREF(b);
    return r;
}

/* New reference: "a, b, k=v" for a call. skip: leading args to drop. */
static PyObject *
call_args(StaxNode *n, Py_ssize_t skip, PyObject *globals)
{
    PyObject *parts = PyList_New(0), *sep = NULL, *res = NULL, *k, *v;
    Py_ssize_t pos = 0;
    if (parts == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = skip; i < PyTuple_GET_SIZE(n->args); i++) {
        PyObject *e = arg_expr(PyTuple_GET_ITEM(n->args, i), globals);
        if (e == NULL || PyList_Append(parts, e) < 0) {
            Py_XDECREF(e);
            goto done;
        }
        Py_DECREF(e);
    }
    while (PyDict_Next(n->kwargs, &pos, &k, &v)) {
        PyObject *e = arg_expr(v, globals), *kv;
        if (e == NULL) {
            goto done;
        }
        if (PyUnicode_Check(k) && PyUnicode_IsIdentifier(k)) {
            kv = PyUnicode_FromFormat("%U=%U", k, e);
        }
        else {
            kv = PyUnicode_FromFormat("**{%R: %U}", k, e);
        }
        Py_DECREF(e);
        if (kv == NULL || PyList_Append(parts, kv) < 0) {
            Py_XDECREF(kv);
            goto done;
        }
        Py_DECREF(kv);
    }
    sep = PyUnicode_FromString(", ");
    if (sep) {
        res = PyUnicode_Join(sep, parts);
    }
done:
    Py_XDECREF(parts);
    Py_XDECREF(sep);
    return res;
}

static PyObject *
node_stmt(StaxNode *n, PyObject *globals)
{
    PyObject *rhs = NULL, *a = NULL, *res = NULL;
    switch (n->op) {
    case STAX_NODE_GET_ATTR:
        rhs = PyUnicode_FromFormat("self.%S", n->target);
        break;
    case STAX_NODE_CALL_FUNCTION: {
        PyObject *t;
        rhs = infix_expr(n, globals);
        if (rhs != NULL || PyErr_Occurred()) {
            break;
        }
        t = target_expr(n->target, globals);
        a = t ? call_args(n, 0, globals) : NULL;
        rhs = a ? PyUnicode_FromFormat("%U(%U)", t, a) : NULL;
        Py_XDECREF(t);
        break;
    }
    case STAX_NODE_CALL_METHOD: {
        PyObject *self_e;
        if (PyTuple_GET_SIZE(n->args) < 1 || !PyUnicode_Check(n->target)) {
            PyErr_Format(PyExc_RuntimeError,
                         "codegen: call_method node %S needs a str target "
                         "and a self argument", n->name);
            return NULL;
        }
        self_e = arg_expr(PyTuple_GET_ITEM(n->args, 0), globals);
        a = self_e ? call_args(n, 1, globals) : NULL;
        rhs = a ? PyUnicode_FromFormat("%U.%U(%U)", self_e, n->target, a)
                : NULL;
        Py_XDECREF(self_e);
        break;
    }
    case STAX_NODE_CALL_MODULE:
        a = call_args(n, 0, globals);
        rhs = a ? PyUnicode_FromFormat("self.%S(%U)", n->target, a) : NULL;
        break;
    case STAX_NODE_OUTPUT: {
        PyObject *v = PyTuple_GET_SIZE(n->args) ? PyTuple_GET_ITEM(n->args, 0)
                                                : Py_None;
        PyObject *e = arg_expr(v, globals);
        res = e ? PyUnicode_FromFormat("    return %U\n", e) : NULL;
        Py_XDECREF(e);
        return res;
    }
    default:
        return PyUnicode_FromString("");
    }
    if (rhs != NULL) {
        res = PyUnicode_FromFormat("    %U = %U\n", n->name, rhs);
    }
    Py_XDECREF(rhs);
    Py_XDECREF(a);
    return res;
}

PyObject *
stax_graph_codegen(StaxGraph *g, PyObject *globals)
{
    PyObject *params = PyList_New(0), *body = PyList_New(0), *sep = NULL,
             *empty = NULL, *ps = NULL, *bs = NULL, *res = NULL, *self_s;
    int has_output = 0;
    if (params == NULL || body == NULL) {
        goto done;
    }
    self_s = PyUnicode_FromString("self");
    if (self_s == NULL || PyList_Append(params, self_s) < 0) {
        Py_XDECREF(self_s);
        goto done;
    }
    Py_DECREF(self_s);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(g->nodes); i++) {
        StaxNode *n = (StaxNode *)PyList_GET_ITEM(g->nodes, i);
        if (n->op == STAX_NODE_PLACEHOLDER) {
            if (PyList_Append(params, n->name) < 0) {
                goto done;
            }
            continue;
        }
        if (n->op == STAX_NODE_OUTPUT) {
            has_output = 1;
        }
        PyObject *st = node_stmt(n, globals);
        if (st == NULL || PyList_Append(body, st) < 0) {
            Py_XDECREF(st);
            goto done;
        }
        Py_DECREF(st);
    }
    if (!has_output) {
        PyObject *st = PyUnicode_FromString("    return None\n");
        if (st == NULL || PyList_Append(body, st) < 0) {
            Py_XDECREF(st);
            goto done;
        }
        Py_DECREF(st);
    }
    sep = PyUnicode_FromString(", ");
    empty = PyUnicode_FromString("");
    if (sep == NULL || empty == NULL) {
        goto done;
    }
    ps = PyUnicode_Join(sep, params);
    bs = ps ? PyUnicode_Join(empty, body) : NULL;
    if (bs != NULL) {
        res = PyUnicode_FromFormat("def forward(%U):\n%U", ps, bs);
    }
done:
    Py_XDECREF(params);
    Py_XDECREF(body);
    Py_XDECREF(sep);
    Py_XDECREF(empty);
    Py_XDECREF(ps);
    Py_XDECREF(bs);
    return res;
}

int
stax_graph_print_init(PyObject *m)
{
    (void)m;
    operator_module = PyImport_ImportModule("operator");
    builtins_str = PyUnicode_InternFromString("builtins");
    return operator_module && builtins_str ? 0 : -1;
}
