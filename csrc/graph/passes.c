/* The front-end passes of seed §4 and their fixed-point driver:
 *   NormalizeOperators, ConstFold, DecomposePass, CSE, DCE,
 *   PointwiseFusionHint
 * one round = the six in this order; rounds repeat until a round changes
 * nothing (at most max_rounds, 16 by default).
 *
 * Python: tensorplay._C.run_frontend_passes(gm, log=None, max_rounds=16,
 *                                           lint=False) -> gm */
#include "graph/passes_internal.h"

#include <string.h>

/* ---- small predicates ------------------------------------------------ */

static int
p_is_scalar(PyObject *o)
{
    return PyLong_Check(o) || PyFloat_Check(o);   /* bool is a PyLong */
}

static int
p_scalar_equals(PyObject *o, double v)
{
    if (!p_is_scalar(o)) {
        return 0;
    }
    double d = PyFloat_Check(o) ? PyFloat_AS_DOUBLE(o) : PyLong_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return d == v;
}

static const char *
p_name(PyObject *node)
{
    /* borrowed UTF-8 of node.name; the node keeps its name alive */
    PyObject *n = stax_graph_p_attr(node, "name");
    const char *s = NULL;
    if (n != NULL) {
        s = PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : NULL;
        Py_DECREF(n);
    }
    if (s == NULL) {
        PyErr_Clear();
        s = "?";
    }
    return s;
}

static PyObject *
p_args(PyObject *node)
{
    PyObject *a = stax_graph_p_attr(node, "args");
    if (a != NULL && !PyTuple_Check(a)) {
        PyObject *t = PySequence_Tuple(a);
        Py_DECREF(a);
        a = t;
    }
    return a;
}

static int
p_kwargs_empty(PyObject *node)
{
    PyObject *k = stax_graph_p_attr(node, "kwargs");
    int r;
    if (k == NULL) {
        PyErr_Clear();
        return 1;
    }
    r = (k == Py_None) || (PyDict_Check(k) && PyDict_GET_SIZE(k) == 0);
    Py_DECREF(k);
    return r;
}

/* users of node as a new list */
static PyObject *
p_users(PyObject *node)
{
    PyObject *u = stax_graph_p_attr(node, "users");
    PyObject *l = u ? PySequence_List(u) : NULL;
    Py_XDECREF(u);
    return l;
}

static int
p_used_by_output(PyObject *node)
{
    PyObject *l = p_users(node);
    int r = 0;
    if (l == NULL) {
        PyErr_Clear();
        return 1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(l) && !r; i++) {
        r = stax_graph_p_opcode(PyList_GET_ITEM(l, i)) == P_OUTPUT;
    }
    PyErr_Clear();
    Py_DECREF(l);
    return r;
}

static int
p_is_random(const p_opref *r)
{
    return r->random
        || (r->info != NULL
            && ((r->info->flags & STAX_OPF_NONDETERMINISTIC)
                || r->info->kind == STAX_OPK_RANDOM));
}

/* A value computed by a pure, non-view op: it aliases no other value. */
static int
p_is_fresh(PyObject *node)
{
    p_opref r;
    if (!stax_graph_p_is_node(node) || !stax_graph_p_node_opref(node, &r)) {
        return 0;
    }
    return r.info != NULL && !r.inplace && !r.getitem
        && r.info->kind != STAX_OPK_VIEW;
}

/* node has a user that mutates it or takes a view of it: a view op of the
 * table, or any call whose sample shares the node's sample storage (views
 * outside the table: diagonal, movedim, unfold, as_strided ...) */
static int
p_has_mutating_or_view_user(PyObject *node)
{
    PyObject *l = p_users(node);
    PyObject *vn = stax_graph_p_val(node);
    int r = 0;
    if (l == NULL) {
        PyErr_Clear();
        return 1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(l) && !r; i++) {
        PyObject *u = PyList_GET_ITEM(l, i);
        p_opref o;
        if (stax_graph_p_node_opref(u, &o)) {
            r = o.inplace || o.getitem
                || (o.info && o.info->kind == STAX_OPK_VIEW);
        }
        else {
            r = o.inplace;
        }
        if (!r && vn != NULL) {
            r = stax_graph_p_shares_storage(vn, stax_graph_p_val(u)) == 1;
        }
    }
    Py_DECREF(l);
    return r;
}

static int
p_graph_has_inplace(PyObject *nodes)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        p_opref o;
        stax_graph_p_node_opref(PyList_GET_ITEM(nodes, i), &o);
        if (o.inplace) {
            return 1;
        }
    }
    return 0;
}

/* a creation node filled with v: zeros/ones(_like) */
static int
p_is_const_tensor_node(PyObject *o, double v)
{
    if (!stax_graph_p_is_node(o)) {
        return 0;
    }
    p_opcode_t opc = stax_graph_p_opcode(o);
    if (opc == P_GET_ATTR) {
        /* a captured constant tensor: every element equal to v */
        PyObject *val = stax_graph_p_val(o), *num = PyFloat_FromDouble(v);
        PyObject *eq = NULL, *nd = NULL, *ix = NULL, *e0 = NULL, *c0 = NULL;
        /* its first element first: almost every constant is answered
         * without comparing all of it (a full-size compare of a weight
         * held by reference was O(data) on the first call) */
        nd = val && num ? PyObject_GetAttrString(val, "ndim") : NULL;
        Py_ssize_t d = nd && PyLong_Check(nd) ? PyLong_AsSsize_t(nd) : -1;
        ix = d >= 0 ? PyTuple_New(d) : NULL;
        for (Py_ssize_t i = 0; ix != NULL && i < d; i++) {
            PyTuple_SET_ITEM(ix, i, PyLong_FromLong(0));
        }
        e0 = ix ? PyObject_GetItem(val, ix) : NULL;
        c0 = e0 ? PyObject_RichCompare(e0, num, Py_EQ) : NULL;
        int first = c0 ? PyObject_IsTrue(c0) : 1;   /* empty: the full check */
        Py_XDECREF(nd);
        Py_XDECREF(ix);
        Py_XDECREF(e0);
        Py_XDECREF(c0);
        PyErr_Clear();
        if (first == 0) {
            Py_XDECREF(num);
            return 0;
        }
        eq = val && num ? PyObject_RichCompare(val, num, Py_EQ) : NULL;
        PyObject *all = eq ? PyObject_CallMethod(eq, "all", NULL) : NULL;
        int r = all ? PyObject_IsTrue(all) : 0;
        Py_XDECREF(num);
        Py_XDECREF(eq);
        Py_XDECREF(all);
        PyErr_Clear();
        return r == 1;
    }
    if (opc != P_CALL_FUNCTION) {
        PyErr_Clear();
        return 0;
    }
    PyObject *t = stax_graph_p_attr(o, "target");
    PyObject *nm = t ? PyObject_GetAttrString(t, "__name__") : NULL;
    int r = 0;
    if (nm != NULL && PyUnicode_Check(nm)) {
        const char *s = PyUnicode_AsUTF8(nm);
        /* zeros/ones (call rows), zeros_like/ones_like (op rows) */
        const stax_call_info *ci = s != NULL ? stax_call_by_name(s) : NULL;
        const stax_op_info *row = s != NULL && ci == NULL ? stax_op_row(s) : NULL;
        stax_call_key_t k = ci != NULL ? ci->key : STAX_CALL_NONE;
        stax_op_id_t id = row != NULL ? row->id : STAX_OP_NONE;
        r = v == 0.0 ? (k == STAX_CALL_ZEROS || id == STAX_OP_ZEROS_LIKE)
                     : (k == STAX_CALL_ONES || id == STAX_OP_ONES_LIKE);
    }
    PyErr_Clear();
    Py_XDECREF(t);
    Py_XDECREF(nm);
    return r;
}

/* ---- NormalizeOperators ---------------------------------------------- */

/* out-of-place (opcode, target) of an in-place call; NULL if none */
static PyObject *
p_functional_target(PyObject *node, p_opcode_t op)
{
    PyObject *t = stax_graph_p_attr(node, "target");
    PyObject *r = NULL;
    if (t == NULL) {
        return NULL;
    }
    if (op == P_CALL_METHOD && PyUnicode_Check(t)) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(t);
        if (n > 1 && PyUnicode_READ_CHAR(t, n - 1) == '_') {
            r = PyUnicode_Substring(t, 0, n - 1);
        }
    }
    else if (op == P_CALL_FUNCTION) {
        PyObject *nm = PyObject_GetAttrString(t, "__name__");
        const char *s = nm && PyUnicode_Check(nm) ? PyUnicode_AsUTF8(nm) : NULL;
        int ip = 0;
        const stax_pyop_info *po = s ? stax_pyop_by_fn(s, &ip) : NULL;
        if (po != NULL && ip) {
            r = Py_NewRef(stax_pyop_function(po, 0));   /* iadd -> add */
        }
        Py_XDECREF(nm);
    }
    Py_DECREF(t);
    PyErr_Clear();
    return r;
}

/* dropout(x, p, training=False) and dropout(x, 0, ...) are x itself (as in
 * PyTorch: the input object is returned). Any op with a `training` and a
 * `p` argument (dropout, alpha_dropout, feature_alpha_dropout, ...)
 * qualifies. Uses read x; an output use that would make a graph output
 * alias a graph input (or another output) reads clone(x) instead, made
 * just before the output node so that it sees every earlier mutation of
 * x. Returns 1 when n was removed, 0 when not, -1 on error. */
typedef struct {
    PyObject *old;
    PyObject *value;
} p_swap;

static PyObject *
p_swap_fn(PyObject *node, void *ctx)
{
    p_swap *s = ctx;
    return Py_NewRef(node == s->old ? s->value : node);
}

static int
p_inactive_dropout(p_pass_ctx *c, PyObject *n, const p_opref *r,
                   PyObject *args, PyObject *nodes)
{
    PyObject *kw = NULL, *bound = NULL, *x, *outn = NULL, *tr, *p, *cf;
    PyObject *cl = NULL, *cargs = NULL, *oargs = NULL, *nargs = NULL;
    int it = -1, ip = -1, rc = -1, ident = 0, len;
    p_swap sw;
    if (r->inplace || r->info == NULL || r->info->kind != STAX_OPK_RANDOM) {
        return 0;
    }
    len = stax_graph_p_schema_len(r->info);
    for (int i = 0; i < len; i++) {
        const char *nm = stax_graph_p_schema_name(r->info, i);
        if (nm != NULL && !strcmp(nm, "training")) {
            it = i;
        }
        else if (nm != NULL && !strcmp(nm, "p")) {
            ip = i;
        }
    }
    if (it < 0 || ip < 0) {
        return 0;
    }
    kw = stax_graph_p_attr(n, "kwargs");
    if (kw == NULL) {
        return -1;
    }
    bound = stax_graph_p_bind(r->info, args, PyDict_Check(kw) ? kw : NULL);
    if (bound == NULL || PyTuple_GET_SIZE(bound) <= (it > ip ? it : ip)) {
        PyErr_Clear();
        rc = 0;
        goto done;
    }
    x = PyTuple_GET_ITEM(bound, 0);
    tr = PyTuple_GET_ITEM(bound, it);
    p = PyTuple_GET_ITEM(bound, ip);
    if (!stax_graph_p_is_node(x)) {
        rc = 0;
        goto done;
    }
    if (tr == Py_False || (PyLong_Check(tr) && p_scalar_equals(tr, 0.0))) {
        ident = 1;      /* not training */
    }
    else if (p_scalar_equals(p, 0.0)) {
        ident = 2;      /* p == 0 */
    }
    if (!ident) {
        rc = 0;
        goto done;
    }
    if (p_used_by_output(n) && (!p_is_fresh(x) || p_used_by_output(x))) {
        for (Py_ssize_t i = PyList_GET_SIZE(nodes) - 1; i >= 0; i--) {
            if (stax_graph_p_opcode(PyList_GET_ITEM(nodes, i)) == P_OUTPUT) {
                outn = PyList_GET_ITEM(nodes, i);
                break;
            }
        }
        PyErr_Clear();
        cf = stax_op_function(&stax_op_table[STAX_OP_CLONE]);
        if (outn == NULL || cf == NULL) {
            rc = 0;
            goto done;
        }
        cargs = PyTuple_Pack(1, x);
        cl = cargs ? stax_graph_p_insert(c->graph, outn, "call_function", cf,
                                         cargs, NULL, 1) : NULL;
        if (cl == NULL || stax_graph_p_copy_stack(cl, n) < 0) {
            goto done;
        }
        sw.old = n;
        sw.value = cl;
        oargs = stax_graph_p_attr(outn, "args");
        nargs = oargs ? stax_graph_map_arg(oargs, p_swap_fn, &sw) : NULL;
        if (nargs == NULL || stax_graph_p_set_args(outn, nargs, NULL) < 0) {
            goto done;
        }
    }
    if (stax_graph_p_note(c, "eliminated %%%s = %s(%%%s) with %s (the "
                          "identity; its uses now read %%%s%s)", p_name(n),
                          r->info->name, p_name(x),
                          ident == 1 ? "training=False" : "p=0",
                          p_name(x), cl ? ", the output a copy" : "") < 0
        || stax_graph_p_replace_uses(n, x) < 0
        || stax_graph_p_erase(c->graph, n) < 0) {
        goto done;
    }
    rc = 1;
done:
    Py_XDECREF(kw);
    Py_XDECREF(bound);
    Py_XDECREF(cl);
    Py_XDECREF(cargs);
    Py_XDECREF(oargs);
    Py_XDECREF(nargs);
    return rc;
}

/* getattr(t, 'values') on a named-tuple result (max.dim, sort, topk,
 * median.dim) -> operator.getitem(t, i): back ends see tuples. 1 when
 * rewritten, 0 when not, -1 on error. */
static int
p_namedtuple_field(p_pass_ctx *c, PyObject *n, p_opcode_t op)
{
    PyObject *t = NULL, *bi = NULL, *ga = NULL, *args = NULL, *fields = NULL;
    PyObject *gi = NULL, *nargs = NULL, *nn = NULL, *val;
    Py_ssize_t idx = -1;
    int rc = 0;
    if (op != P_CALL_FUNCTION) {
        return 0;
    }
    t = stax_graph_p_attr(n, "target");
    bi = t ? PyEval_GetBuiltins() : NULL;   /* borrowed */
    ga = bi ? Py_XNewRef(PyDict_GetItemString(bi, "getattr")) : NULL;
    if (ga == NULL || t != ga || !p_kwargs_empty(n)) {
        goto done;
    }
    args = p_args(n);
    if (args == NULL || PyTuple_GET_SIZE(args) != 2
        || !stax_graph_p_is_node(PyTuple_GET_ITEM(args, 0))
        || !PyUnicode_Check(PyTuple_GET_ITEM(args, 1))) {
        goto done;
    }
    val = stax_graph_p_val(PyTuple_GET_ITEM(args, 0));
    if (val == NULL || !PyTuple_Check(val)) {
        goto done;
    }
    fields = PyObject_GetAttrString(val, "_fields");
    if (fields == NULL || !PyTuple_Check(fields)) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); i++) {
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(fields, i),
                                          PyTuple_GET_ITEM(args, 1), Py_EQ);
        if (eq == 1) {
            idx = i;
            break;
        }
    }
    if (idx < 0 || idx >= PyTuple_GET_SIZE(val)) {
        goto done;
    }
    gi = Py_NewRef(stax_pyop_function(&stax_pyop_table[STAX_PYOP_GETITEM], 0));
    nargs = gi ? Py_BuildValue("(On)", PyTuple_GET_ITEM(args, 0), idx) : NULL;
    nn = nargs ? stax_graph_p_insert(c->graph, n, "call_function", gi, nargs,
                                     NULL, 0) : NULL;
    if (nn == NULL) {
        rc = -1;
        goto done;
    }
    {
        PyObject *meta = stax_graph_p_attr(nn, "meta");
        if (meta == NULL
            || PyMapping_SetItemString(meta, "val",
                                       PyTuple_GET_ITEM(val, idx)) < 0) {
            Py_XDECREF(meta);
            rc = -1;
            goto done;
        }
        Py_DECREF(meta);
    }
    if (stax_graph_p_copy_stack(nn, n) < 0
        || stax_graph_p_note(c, "%%%s: .%S of a named tuple -> [%zd]",
                             p_name(n), PyTuple_GET_ITEM(args, 1), idx) < 0
        || stax_graph_p_replace_uses(n, nn) < 0
        || stax_graph_p_erase(c->graph, n) < 0) {
        rc = -1;
        goto done;
    }
    rc = 1;
done:
    if (rc == 0) {
        PyErr_Clear();
    }
    Py_XDECREF(t);
    Py_XDECREF(ga);
    Py_XDECREF(args);
    Py_XDECREF(fields);
    Py_XDECREF(gi);
    Py_XDECREF(nargs);
    Py_XDECREF(nn);
    return rc;
}

/* NormalizeOperators' rules, each on one node: -1 error, 0 nothing done,
 * 1 changed. */

/* (1) scalar constants to the right of commutative ops; *args re-read */
static int
p_norm_const_right(p_pass_ctx *c, PyObject *n, p_opcode_t op, const p_opref *r,
                   PyObject **args)
{
    PyObject *a = *args, *sw;
    if (r->inplace || !(r->info->flags & STAX_OPF_COMMUTATIVE) || op != P_CALL_FUNCTION
        || PyTuple_GET_SIZE(a) != 2 || !p_kwargs_empty(n)
        || !p_is_scalar(PyTuple_GET_ITEM(a, 0))
        || !stax_graph_p_is_node(PyTuple_GET_ITEM(a, 1))) {
        return 0;
    }
    sw = PyTuple_Pack(2, PyTuple_GET_ITEM(a, 1), PyTuple_GET_ITEM(a, 0));
    if (sw == NULL || stax_graph_p_set_args(n, sw, NULL) < 0) {
        Py_XDECREF(sw);
        return -1;
    }
    if (stax_graph_p_note(c, "moved the constant %S of %%%s to the right",
                          PyTuple_GET_ITEM(sw, 1), p_name(n)) < 0) {
        Py_DECREF(sw);
        return -1;
    }
    Py_DECREF(sw);
    Py_SETREF(*args, p_args(n));
    return *args == NULL ? -1 : 1;
}

/* (2) identities x + 0, x - 0, x * 1, x / 1: n erased (1) */
static int
p_norm_identity(p_pass_ctx *c, PyObject *n, const p_opref *r, PyObject *args,
                int has_inplace)
{
    unsigned fl = r->info->flags;
    if (r->inplace || !(fl & (STAX_OPF_IDENTITY_0 | STAX_OPF_IDENTITY_1))
        || PyTuple_GET_SIZE(args) != 2 || !p_kwargs_empty(n)
        || !stax_graph_p_is_node(PyTuple_GET_ITEM(args, 0))) {
        return 0;
    }
    double unit = (fl & STAX_OPF_IDENTITY_0) ? 0.0 : 1.0;
    PyObject *x = PyTuple_GET_ITEM(args, 0);
    PyObject *k = PyTuple_GET_ITEM(args, 1);
    int ident = p_scalar_equals(k, unit) || p_is_const_tensor_node(k, unit);
    /* dtype and shape unchanged, judged on the sample values */
    ident = ident && stax_graph_p_same_meta(stax_graph_p_val(n), stax_graph_p_val(x));
    /* a tensor k broadcasts: at another size of a dynamic x the shapes may
     * differ or not broadcast at all, which eager raises (fuzz sweep seed
     * 400927, dynamic: x + tp.zeros(3) of a size-4 x returned x) */
    if (ident && !p_scalar_equals(k, unit) && stax_graph_p_symbolic_operand(n)) {
        ident = 0;
    }
    /* no graph output may come to alias a graph input (or x) */
    if (ident && p_used_by_output(n) && (!p_is_fresh(x) || p_used_by_output(x))) {
        ident = 0;
    }
    /* with mutation in the graph, x must stay unaliased: neither x nor n
     * (which would come to alias x) may be mutated in place or viewed
     * afterwards (seed 4.2, aliasing) */
    if (ident && has_inplace
        && (!p_is_fresh(x) || p_has_mutating_or_view_user(x)
            || p_has_mutating_or_view_user(n))) {
        ident = 0;
    }
    if (!ident) {
        return 0;
    }
    const char *nn = p_name(n), *xn = p_name(x);
    /* the Python operator's spelling (ops.def), else the name */
    const stax_pyop_info *po = stax_pyop_of_op(r->info->id);
    const char *sym = po != NULL && po->sym != NULL ? po->sym : r->info->name;
    if (stax_graph_p_note(c, "eliminated %%%s = %s %s %S (its uses now read %%%s)",
                          nn, xn, sym, k, xn) < 0
        || stax_graph_p_replace_uses(n, x) < 0
        || stax_graph_p_erase(c->graph, n) < 0) {
        return -1;
    }
    return 1;
}

/* (3) in-place -> out-of-place when nobody else sees the value */
static int
p_norm_inplace(p_pass_ctx *c, PyObject *n, p_opcode_t op, const p_opref *r,
               PyObject *args)
{
    PyObject *m, *ft, *kw, *val = NULL, *nn = NULL;
    int rc = 0;
    if (!r->inplace || r->setitem || PyTuple_GET_SIZE(args) < 1
        || !p_is_fresh(PyTuple_GET_ITEM(args, 0))
        || stax_graph_p_users_count(PyTuple_GET_ITEM(args, 0)) != 1) {
        return 0;
    }
    m = PyTuple_GET_ITEM(args, 0);
    ft = p_functional_target(n, op);
    kw = ft ? stax_graph_p_attr(n, "kwargs") : NULL;
    if (ft == NULL || kw == NULL) {
        Py_XDECREF(ft);
        PyErr_Clear();
        return 0;
    }
    val = stax_graph_p_run_on_vals(op, ft, args, kw);
    if (val != NULL && stax_graph_p_same_meta(val, stax_graph_p_val(m))) {
        nn = stax_graph_p_insert(c->graph, n, stax_graph_p_opcode_str(op), ft, args, kw, 0);
        if (nn != NULL) {
            stax_graph_p_copy_stack(nn, n);
            PyObject *meta = stax_graph_p_attr(nn, "meta");
            if (meta == NULL || PyMapping_SetItemString(meta, "val", val) < 0) {
                Py_CLEAR(nn);
            }
            Py_XDECREF(meta);
        }
        if (nn == NULL
            || stax_graph_p_note(c, "%%%s: in-place %s on a value with no other users "
                                 "-> %%%s", p_name(n), r->name, p_name(nn)) < 0
            || stax_graph_p_replace_uses(n, nn) < 0
            || stax_graph_p_erase(c->graph, n) < 0) {
            rc = -1;
        }
        else {
            rc = 1;
        }
    }
    Py_XDECREF(ft);
    Py_XDECREF(kw);
    Py_XDECREF(val);
    Py_XDECREF(nn);
    return rc;
}

static int
p_normalize(p_pass_ctx *c)
{
    PyObject *nodes = stax_graph_p_nodes(c->graph), *args = NULL;
    int changed = 0, has_inplace;
    if (nodes == NULL) {
        return -1;
    }
    has_inplace = p_graph_has_inplace(nodes);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        PyObject *n = PyList_GET_ITEM(nodes, i);
        p_opref r;
        p_opcode_t op = stax_graph_p_opcode(n);
        int g;
        if (op == P_UNKNOWN) {
            goto error;
        }
        g = p_namedtuple_field(c, n, op);
        if (g != 0) {
            if (g < 0) {
                goto error;
            }
            changed = 1;
            continue;
        }
        if (!stax_graph_p_node_opref(n, &r) || r.info == NULL) {
            continue;
        }
        Py_XSETREF(args, p_args(n));
        if (args == NULL) {
            goto error;
        }
        g = p_norm_const_right(c, n, op, &r, &args);
        if (g < 0) {
            goto error;
        }
        changed |= g;
        g = p_norm_identity(c, n, &r, args, has_inplace);
        if (g == 0) {
            /* (2b) dropout that is not training (or p == 0): the identity */
            g = p_inactive_dropout(c, n, &r, args, nodes);
        }
        if (g == 0) {
            g = p_norm_inplace(c, n, op, &r, args);
        }
        if (g < 0) {
            goto error;
        }
        changed |= g;
    }
    Py_XDECREF(args);
    Py_DECREF(nodes);
    return changed;
error:
    Py_XDECREF(args);
    Py_DECREF(nodes);
    return -1;
}

/* ---- ConstFold ------------------------------------------------------- */

static int
p_is_const_leaf(PyObject *o, int allow_seq)
{
    if (o == Py_None || PyLong_Check(o) || PyFloat_Check(o)
        || PyUnicode_Check(o) || o == Py_Ellipsis) {
        return 1;
    }
    if (PySlice_Check(o)) {
        PySliceObject *s = (PySliceObject *)o;
        return p_is_const_leaf(s->start, 0) && p_is_const_leaf(s->stop, 0)
            && p_is_const_leaf(s->step, 0);
    }
    if (allow_seq && (PyTuple_Check(o) || PyList_Check(o))) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            if (!p_is_const_leaf(PySequence_Fast_GET_ITEM(o, i), 0)) {
                return 0;
            }
        }
        return 1;
    }
    return 0;
}

static int
p_constfold(p_pass_ctx *c)
{
    PyObject *nodes = stax_graph_p_nodes(c->graph);
    int changed = 0;
    if (nodes == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        PyObject *n = PyList_GET_ITEM(nodes, i);
        p_opref r;
        if (stax_graph_p_opcode(n) != P_CALL_FUNCTION) {
            PyErr_Clear();
            continue;
        }
        if (!stax_graph_p_node_opref(n, &r) && !r.is_operator) {
            continue;
        }
        if (!r.is_operator || !p_kwargs_empty(n)) {
            continue;
        }
        PyObject *t = stax_graph_p_attr(n, "target");
        PyObject *nm = t ? PyObject_GetAttrString(t, "__name__") : NULL;
        const char *s = nm && PyUnicode_Check(nm) ? PyUnicode_AsUTF8(nm) : NULL;
        int ip = 0;
        const stax_pyop_info *po = s ? stax_pyop_by_fn(s, &ip) : NULL;
        int ok = po != NULL && !ip && (po->flags & STAX_PYOPF_FOLD);
        int is_getitem = po != NULL && po->key == STAX_PYOP_GETITEM;
        Py_XDECREF(nm);
        PyObject *args = ok ? p_args(n) : NULL;
        if (args == NULL) {
            PyErr_Clear();
            Py_XDECREF(t);
            continue;
        }
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(args) && ok; k++) {
            PyObject *a = PyTuple_GET_ITEM(args, k);
            ok = is_getitem ? p_is_const_leaf(a, 1)
                            : (p_is_scalar(a) && !PyUnicode_Check(a));
        }
        PyObject *v = ok ? PyObject_Call(t, args, NULL) : NULL;
        if (v == NULL) {
            PyErr_Clear();
        }
        else if (!p_is_const_leaf(v, 1)
                 || (PyLong_Check(v) && _PyLong_NumBits(v) > 63)) {
            Py_CLEAR(v);
            PyErr_Clear();
        }
        if (v != NULL) {
            if (stax_graph_p_note(c, "folded %%%s -> %R", p_name(n), v) < 0
                || stax_graph_p_replace_uses(n, v) < 0
                || stax_graph_p_erase(c->graph, n) < 0) {
                Py_DECREF(v);
                Py_DECREF(args);
                Py_XDECREF(t);
                Py_DECREF(nodes);
                return -1;
            }
            changed = 1;
            Py_DECREF(v);
        }
        Py_DECREF(args);
        Py_XDECREF(t);
    }
    Py_DECREF(nodes);
    return changed;
}

/* ---- CSE ------------------------------------------------------------- */

static PyObject *
p_key(PyObject *o)
{
    if (stax_graph_p_is_node(o)) {
        return Py_BuildValue("(sN)", "n", PyLong_FromVoidPtr(o));
    }
    if (PyBool_Check(o)) {
        return Py_BuildValue("(sO)", "b", o);
    }
    if (PyLong_Check(o)) {
        return Py_BuildValue("(sO)", "i", o);
    }
    if (PyFloat_Check(o)) {
        return Py_BuildValue("(sN)", "f", PyObject_Repr(o));
    }
    if (PyUnicode_Check(o)) {
        return Py_BuildValue("(sO)", "s", o);
    }
    if (o == Py_None || o == Py_Ellipsis) {
        return Py_BuildValue("(sO)", "c", o);
    }
    if (PyTuple_Check(o) || PyList_Check(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject *t = PyTuple_New(n + 1);
        if (t == NULL) {
            return NULL;
        }
        PyTuple_SET_ITEM(t, 0, PyUnicode_FromString(PyTuple_Check(o) ? "t" : "l"));
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *k = p_key(PySequence_Fast_GET_ITEM(o, i));
            if (k == NULL) {
                Py_DECREF(t);
                return NULL;
            }
            PyTuple_SET_ITEM(t, i + 1, k);
        }
        return t;
    }
    if (PyDict_Check(o)) {
        PyObject *l = PyList_New(0), *k, *v;
        Py_ssize_t pos = 0;
        if (l == NULL) {
            return NULL;
        }
        while (PyDict_Next(o, &pos, &k, &v)) {
            PyObject *kv = p_key(v);
            PyObject *it = kv ? PyTuple_Pack(2, k, kv) : NULL;
            Py_XDECREF(kv);
            if (it == NULL || PyList_Append(l, it) < 0) {
                Py_XDECREF(it);
                Py_DECREF(l);
                return NULL;
            }
            Py_DECREF(it);
        }
        PyObject *r = PyList_AsTuple(l);
        Py_DECREF(l);
        return r ? Py_BuildValue("(sN)", "d", r) : NULL;
    }
    if (PySlice_Check(o)) {
        PySliceObject *s = (PySliceObject *)o;
        return Py_BuildValue("(sNNN)", "sl", p_key(s->start), p_key(s->stop),
                             p_key(s->step));
    }
    return Py_BuildValue("(sN)", "o", PyLong_FromVoidPtr(o));
}

/* renamed[name of n] = name of rep, n merged into rep */
static int
p_cse_rename(PyObject *renamed, PyObject *n, PyObject *rep)
{
    PyObject *a = stax_graph_p_attr(n, "name");
    PyObject *b = a ? stax_graph_p_attr(rep, "name") : NULL;
    int rc = b ? PyDict_SetItem(renamed, a, b) : -1;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return rc;
}

/* meta['overwrites'] (the value a copy_/fill_ wrote over, by name: see
 * oplevel.c) follows a merged node to the node it was merged into */
static int
p_cse_fix_marks(PyObject *nodes, PyObject *renamed)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        PyObject *meta = stax_graph_p_attr(PyList_GET_ITEM(nodes, i), "meta");
        if (meta == NULL) {
            return -1;
        }
        PyObject *old = PyDict_Check(meta) ? PyDict_GetItemString(meta, "overwrites") : NULL;
        PyObject *nw = old ? PyDict_GetItemWithError(renamed, old) : NULL;
        if (nw != NULL && PyDict_SetItemString(meta, "overwrites", nw) < 0) {
            Py_DECREF(meta);
            return -1;
        }
        Py_DECREF(meta);
        if (PyErr_Occurred()) {
            return -1;
        }
    }
    return 0;
}

int
stax_graph_p_cse(p_pass_ctx *c)
{
    PyObject *nodes = stax_graph_p_nodes(c->graph), *table = NULL;
    int changed = 0, has_inplace, merged = 0;
    PyObject *names = PyList_New(0), *renamed = PyDict_New();
    if (nodes == NULL || names == NULL || renamed == NULL) {
        goto error;
    }
    has_inplace = p_graph_has_inplace(nodes);
    table = PyDict_New();
    if (table == NULL) {
        goto error;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        PyObject *n = PyList_GET_ITEM(nodes, i);
        p_opref r;
        p_opcode_t op = stax_graph_p_opcode(n);
        if (op == P_UNKNOWN) {
            goto error;
        }
        if (op != P_CALL_FUNCTION && op != P_CALL_METHOD) {
            continue;
        }
        int known = stax_graph_p_node_opref(n, &r);
        if (r.inplace) {
            PyDict_Clear(table);     /* a mutation: values before differ */
            continue;
        }
        if (!known && !r.is_operator) {
            continue;
        }
        if (p_is_random(&r)) {
            continue;
        }
        if (has_inplace && p_has_mutating_or_view_user(n)) {
            continue;
        }
        PyObject *t = stax_graph_p_attr(n, "target");
        PyObject *a = t ? stax_graph_p_attr(n, "args") : NULL;
        PyObject *k = a ? stax_graph_p_attr(n, "kwargs") : NULL;
        PyObject *key = NULL;
        if (k != NULL) {
            PyObject *tk = PyUnicode_Check(t) ? Py_NewRef(t)
                                              : PyLong_FromVoidPtr(t);
            key = Py_BuildValue("(sNNN)", stax_graph_p_opcode_str(op), tk,
                                p_key(a), p_key(k));
        }
        Py_XDECREF(t);
        Py_XDECREF(a);
        Py_XDECREF(k);
        if (key == NULL) {
            goto error;
        }
        PyObject *rep = PyDict_GetItemWithError(table, key);
        if (rep == NULL && PyErr_Occurred()) {
            Py_DECREF(key);
            goto error;
        }
        if (rep == NULL) {
            int e = PyDict_SetItem(table, key, n);
            Py_DECREF(key);
            if (e < 0) {
                goto error;
            }
            continue;
        }
        Py_DECREF(key);
        PyObject *s = PyUnicode_FromFormat("%%%s -> %%%s", p_name(n),
                                           p_name(rep));
        if (s == NULL || PyList_Append(names, s) < 0) {
            Py_XDECREF(s);
            goto error;
        }
        Py_DECREF(s);
        if (stax_graph_p_replace_uses(n, rep) < 0
            || p_cse_rename(renamed, n, rep) < 0
            || stax_graph_p_erase(c->graph, n) < 0) {
            goto error;
        }
        changed = 1;
        merged++;
    }
    if (changed && p_cse_fix_marks(nodes, renamed) < 0) {
        goto error;
    }
    if (changed) {
        PyObject *sep = PyUnicode_FromString(", ");
        PyObject *j = sep ? PyUnicode_Join(sep, names) : NULL;
        Py_XDECREF(sep);
        if (j == NULL || stax_graph_p_note(c, "merged %d node%s (%U)", merged,
                                           merged == 1 ? "" : "s", j) < 0) {
            Py_XDECREF(j);
            goto error;
        }
        Py_DECREF(j);
    }
    Py_DECREF(table);
    Py_DECREF(nodes);
    Py_DECREF(names);
    Py_DECREF(renamed);
    return changed;
error:
    Py_XDECREF(table);
    Py_XDECREF(nodes);
    Py_XDECREF(names);
    Py_XDECREF(renamed);
    return -1;
}

/* ---- DCE ------------------------------------------------------------- */

static int
p_has_meta(PyObject *node, const char *key)
{
    PyObject *meta = stax_graph_p_attr(node, "meta");
    int r = meta != NULL && PyDict_Check(meta)
            && PyDict_GetItemString(meta, key) != NULL;
    Py_XDECREF(meta);
    PyErr_Clear();
    return r;
}

static int
p_dce(p_pass_ctx *c)
{
    PyObject *nodes = stax_graph_p_nodes(c->graph);
    PyObject *names = PyList_New(0);
    int changed = 0;
    if (nodes == NULL || names == NULL) {
        goto error;
    }
    for (Py_ssize_t i = PyList_GET_SIZE(nodes) - 1; i >= 0; i--) {
        PyObject *n = PyList_GET_ITEM(nodes, i);
        p_opref r;
        p_opcode_t op = stax_graph_p_opcode(n);
        if (op == P_UNKNOWN) {
            goto error;
        }
        if (op == P_PLACEHOLDER || op == P_OUTPUT || op == P_CALL_MODULE) {
            continue;
        }
        stax_graph_p_node_opref(n, &r);
        if (r.inplace || p_is_random(&r)) {
            continue;    /* side effects: a mutation, the RNG stream */
        }
        if (p_has_meta(n, "sample_error") || stax_graph_p_may_raise(n)) {
            continue;    /* it raises (or may, on other values): eager too */
        }
        int sym = stax_graph_p_symbolic_operand(n);
        if (sym) {
            /* it may raise at another size of its class (a view, an
             * index): the op graph keeps it for shape propagation */
            PyObject *meta = stax_graph_p_attr(n, "meta");
            int bad = meta == NULL || !PyDict_Check(meta)
                      || PyDict_SetItemString(meta, "keep_dead", Py_True) < 0;
            Py_XDECREF(meta);
            if (bad) {
                goto error;
            }
            continue;
        }
        int nu = stax_graph_p_users_count(n);
        if (nu < 0) {
            goto error;
        }
        if (nu > 0) {
            continue;
        }
        PyObject *s = PyUnicode_FromFormat("%%%s", p_name(n));
        if (s == NULL || PyList_Append(names, s) < 0) {
            Py_XDECREF(s);
            goto error;
        }
        Py_DECREF(s);
        if (stax_graph_p_erase(c->graph, n) < 0) {
            goto error;
        }
        changed = 1;
    }
    if (changed) {
        PyObject *sep = PyUnicode_FromString(", ");
        PyList_Reverse(names);
        PyObject *j = sep ? PyUnicode_Join(sep, names) : NULL;
        Py_XDECREF(sep);
        if (j == NULL
            || stax_graph_p_note(c, "removed %zd dead node%s (%U)",
                                 PyList_GET_SIZE(names),
                                 PyList_GET_SIZE(names) == 1 ? "" : "s",
                                 j) < 0) {
            Py_XDECREF(j);
            goto error;
        }
        Py_DECREF(j);
    }
    Py_DECREF(nodes);
    Py_DECREF(names);
    return changed;
error:
    Py_XDECREF(nodes);
    Py_XDECREF(names);
    return -1;
}

/* ---- PointwiseFusionHint --------------------------------------------- */

static Py_ssize_t
p_find(Py_ssize_t *parent, Py_ssize_t x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];   /* path halving */
        x = parent[x];
    }
    return x;
}

static void
p_union(Py_ssize_t *parent, int *rank, Py_ssize_t a, Py_ssize_t b)
{
    a = p_find(parent, a);
    b = p_find(parent, b);
    if (a == b) {
        return;
    }
    if (rank[a] < rank[b]) {
        Py_ssize_t t = a;
        a = b;
        b = t;
    }
    parent[b] = a;
    if (rank[a] == rank[b]) {
        rank[a]++;
    }
}

static int
p_set_meta(PyObject *node, const char *key, PyObject *v, int *changed)
{
    PyObject *meta = stax_graph_p_attr(node, "meta");
    int rc = -1;
    if (meta == NULL) {
        return -1;
    }
    PyObject *k = PyUnicode_FromString(key);
    if (k == NULL) {
        goto done;
    }
    PyObject *old = PyDict_Check(meta) ? PyDict_GetItemWithError(meta, k) : NULL;
    if (PyErr_Occurred()) {
        Py_DECREF(k);
        goto done;
    }
    if (v == NULL) {
        if (old != NULL) {
            *changed = 1;
            rc = PyDict_DelItem(meta, k);
        }
        else {
            rc = 0;
        }
    }
    else {
        int same = old != NULL ? PyObject_RichCompareBool(old, v, Py_EQ) : 0;
        if (same < 0) {
            PyErr_Clear();
            same = 0;
        }
        if (!same) {
            *changed = 1;
            rc = PyObject_SetItem(meta, k, v);
        }
        else {
            rc = 0;
        }
    }
    Py_DECREF(k);
done:
    Py_DECREF(meta);
    return rc;
}

static int
p_hint(p_pass_ctx *c)
{
    PyObject *nodes = stax_graph_p_nodes(c->graph), *index = NULL;
    Py_ssize_t n = 0, *parent = NULL, *region = NULL;
    int *rank = NULL, *pw = NULL, changed = 0, nreg = 0, npw = 0;
    PyObject *kind = PyUnicode_FromString("pointwise");
    if (nodes == NULL || kind == NULL) {
        goto error;
    }
    n = PyList_GET_SIZE(nodes);
    parent = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    region = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    rank = PyMem_Calloc(n + 1, sizeof(int));
    pw = PyMem_Calloc(n + 1, sizeof(int));
    index = PyDict_New();
    if (!parent || !region || !rank || !pw || !index) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *nd = PyList_GET_ITEM(nodes, i);
        p_opref r;
        parent[i] = i;
        region[i] = -1;
        if (stax_graph_p_node_opref(nd, &r) && r.info && !r.inplace
            && !r.getitem && r.info->kind == STAX_OPK_POINTWISE) {
            pw[i] = 1;
            npw++;
        }
        PyObject *ix = PyLong_FromSsize_t(i);
        if (ix == NULL || PyDict_SetItem(index, nd, ix) < 0) {
            Py_XDECREF(ix);
            goto error;
        }
        Py_DECREF(ix);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!pw[i]) {
            continue;
        }
        PyObject *ins = PyObject_GetAttrString(PyList_GET_ITEM(nodes, i),
                                               "all_input_nodes");
        PyObject *l = ins ? PySequence_List(ins) : NULL;
        Py_XDECREF(ins);
        if (l == NULL) {
            goto error;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(l); k++) {
            PyObject *ix = PyDict_GetItemWithError(index, PyList_GET_ITEM(l, k));
            if (ix != NULL) {
                Py_ssize_t j = PyLong_AsSsize_t(ix);
                if (pw[j]) {
                    p_union(parent, rank, i, j);
                }
            }
        }
        Py_DECREF(l);
        if (PyErr_Occurred()) {
            goto error;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *nd = PyList_GET_ITEM(nodes, i);
        if (!pw[i]) {
            if (p_set_meta(nd, "region", NULL, &changed) < 0
                || p_set_meta(nd, "region_kind", NULL, &changed) < 0) {
                goto error;
            }
            continue;
        }
        Py_ssize_t root = p_find(parent, i);
        if (region[root] < 0) {
            region[root] = nreg++;
        }
        PyObject *rid = PyLong_FromSsize_t(region[root]);
        int e = rid ? p_set_meta(nd, "region", rid, &changed) : -1;
        Py_XDECREF(rid);
        if (e < 0 || p_set_meta(nd, "region_kind", kind, &changed) < 0) {
            goto error;
        }
    }
    if (changed && stax_graph_p_note(c, "marked %d pointwise region%s "
                                     "(%d node%s)", nreg, nreg == 1 ? "" : "s",
                                     npw, npw == 1 ? "" : "s") < 0) {
        goto error;
    }
    PyMem_Free(parent);
    PyMem_Free(region);
    PyMem_Free(rank);
    PyMem_Free(pw);
    Py_DECREF(index);
    Py_DECREF(nodes);
    Py_DECREF(kind);
    return changed;
error:
    PyMem_Free(parent);
    PyMem_Free(region);
    PyMem_Free(rank);
    PyMem_Free(pw);
    Py_XDECREF(index);
    Py_XDECREF(nodes);
    Py_XDECREF(kind);
    return -1;
}

/* ---- the driver ------------------------------------------------------ */

typedef int (*p_pass_fn)(p_pass_ctx *);

static const struct {
    const char *name;
    p_pass_fn fn;
} p_pipeline[] = {
    {"NormalizeOperators", p_normalize},
    {"ConstFold", p_constfold},
    {"DecomposePass", stax_graph_p_decompose_pass},
    {"CSE", stax_graph_p_cse},
    {"DCE", p_dce},
    {"PointwiseFusionHint", p_hint},
};
#define P_NPASSES ((int)(sizeof(p_pipeline) / sizeof(p_pipeline[0])))

static int
p_log(PyObject *log, PyObject *line)
{
    if (log == NULL || log == Py_None) {
        return 0;
    }
    PyObject *r = PyObject_CallOneArg(log, line);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

static PyObject *
p_run_frontend_passes(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"gm", "log", "max_rounds", "lint", NULL};
    PyObject *gm = NULL, *log = Py_None;
    int max_rounds = 16, lint = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|Oip:run_frontend_passes",
                                     kwlist, &gm, &log, &max_rounds, &lint)) {
        return NULL;
    }
    return stax_graph_run_frontend_passes(gm, log, max_rounds, lint);
}

PyObject *
stax_graph_run_frontend_passes(PyObject *gm, PyObject *log, int max_rounds,
                               int lint)
{
    PyObject *graph = NULL;
    p_pass_ctx c = {0};
    if (log == NULL) {
        log = Py_None;
    }
    graph = PyObject_GetAttrString(gm, "graph");
    if (graph == NULL) {
        PyErr_Clear();
        graph = Py_NewRef(gm);   /* a bare Graph is accepted too */
    }
    if (stax_graph_p_learn_node_type(graph) < 0) {
        goto error;
    }
    c.gm = gm;
    c.graph = graph;
    for (int round = 1; round <= max_rounds; round++) {
        int any = 0;
        c.round = round;
        for (int p = 0; p < P_NPASSES; p++) {
            c.msg = PyList_New(0);
            if (c.msg == NULL) {
                goto error;
            }
            int r = p_pipeline[p].fn(&c);
            if (r < 0) {
                goto error;
            }
            if (lint) {
                if (stax_graph_lint((StaxGraph *)graph) < 0) {
                    PyObject *t, *v, *tb;
                    PyErr_Fetch(&t, &v, &tb);
                    PyErr_Format(PyExc_RuntimeError, "graph lint failed after "
                                 "%s (round %d): %S", p_pipeline[p].name,
                                 round, v ? v : Py_None);
                    Py_XDECREF(t);
                    Py_XDECREF(v);
                    Py_XDECREF(tb);
                    goto error;
                }
            }
            if (r > 0) {
                any = 1;
                PyObject *sep = PyUnicode_FromString("; ");
                PyObject *j = sep ? PyUnicode_Join(sep, c.msg) : NULL;
                PyObject *line = j ? PyUnicode_FromFormat("[round %d] %s: %U",
                                                          round,
                                                          p_pipeline[p].name,
                                                          j) : NULL;
                Py_XDECREF(sep);
                Py_XDECREF(j);
                if (line == NULL || p_log(log, line) < 0) {
                    Py_XDECREF(line);
                    goto error;
                }
                Py_DECREF(line);
            }
            Py_CLEAR(c.msg);
        }
        if (!any || round == max_rounds) {
            PyObject *line = PyUnicode_FromFormat(
                any ? "[round %d] stopped at the round limit"
                    : "[round %d] no change", round);
            if (line == NULL || p_log(log, line) < 0) {
                Py_XDECREF(line);
                goto error;
            }
            Py_DECREF(line);
            break;
        }
    }
    if (graph != gm && PyObject_HasAttrString(gm, "recompile")) {
        PyObject *r = PyObject_CallMethod(gm, "recompile", NULL);
        if (r == NULL) {
            goto error;
        }
        Py_DECREF(r);
    }
    Py_DECREF(graph);
    return Py_NewRef(gm);
error:
    Py_XDECREF(c.msg);
    Py_XDECREF(graph);
    return NULL;
}

static PyObject *
p_node_is_inplace_py(PyObject *self, PyObject *node)
{
    (void)self;
    return PyBool_FromLong(stax_graph_node_is_inplace(node));
}

static PyMethodDef p_methods[] = {
    {"_graph_node_is_inplace", p_node_is_inplace_py, METH_O,
     "_graph_node_is_inplace(node) -> bool: the node writes its first\n"
     "argument (add_, setitem, F.relu(x, inplace=True), ...)."},
    {"run_frontend_passes", (PyCFunction)(void (*)(void))p_run_frontend_passes,
     METH_VARARGS | METH_KEYWORDS,
     "run_frontend_passes(gm, log=None, max_rounds=16, lint=False) -> gm\n"
     "NormalizeOperators, ConstFold, DecomposePass, CSE, DCE and\n"
     "PointwiseFusionHint, in rounds, to a fixed point (in place)."},
    {"make_op_graph", (PyCFunction)(void (*)(void))stax_graph_p_make_op_graph,
     METH_VARARGS | METH_KEYWORDS,
     "make_op_graph(gm, basis=None, keep_dead=False) -> GraphModule\n"
     "The op-level graph: every node a tp.ops.<name>.<overload> call,\n"
     "functionalized and decomposed against the basis. keep_dead: no DCE\n"
     "(values a copy_/fill_ overwrote stay, for autograd's analysis)."},
    {"_check_decompositions", stax_graph_p_check_decompositions_py,
     METH_VARARGS,
     "_check_decompositions(rules=None): the Prop. 4.3 check run at import\n"
     "(no parse errors, no cycles) on the op table or on {name: rule}."},
    {NULL, NULL, 0, NULL},
};

int
stax_graph_passes_init(PyObject *m)
{
    if (stax_graph_p_decomp_check_cycles() < 0) {
        return -1;
    }
    return PyModule_AddFunctions(m, p_methods);
}
