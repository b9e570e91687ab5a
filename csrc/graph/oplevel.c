/* The op-level graph (seed §4.8): make_op_graph(gm, basis=None).
 *
 * Each call node of the Python-level graph lands on an op overload of the
 * op table: a call_function node whose target is tp.ops.<name>.<overload>
 * (node.meta['op_overload'] = "name.overload"), arguments bound to the
 * op's schema (trailing defaults dropped). Placeholders are renamed
 * primals_1, primals_2, ...; in-place ops and mutated views are
 * functionalized on the way (functionalize.c); ops outside the back end's
 * basis that draw no random numbers are replaced by their decomposition
 * (decompose_table.c), recursively; an op outside the basis without a rule
 * stays (the back end makes it a fallback kernel).
 *
 * Default basis: every op with a scalar formula, every reduction, view,
 * extern, random and "other" op, and every composite op without a
 * decomposition (native_layer_norm, ...).
 *
 * This file holds the targets, emitting one op and lowering one node, and
 * make_op_graph itself; overload selection is in oplevel_overload.c,
 * indexing lowering in oplevel_index.c, the printer in oplevel_print.c. */
#include "graph/passes_internal.h"

#include <string.h>

/* ---- targets --------------------------------------------------------- */

static PyObject *
p_op_target(const char *name, const char *ovl)
{
    PyObject *ops = stax_py_registered(STAX_PY_OPS);
    PyObject *pk = ops ? PyObject_GetAttrString(ops, name) : NULL;
    PyObject *t = pk ? PyObject_GetAttrString(pk, ovl) : NULL;
    Py_XDECREF(pk);
    if (t != NULL) {
        return t;
    }
    PyErr_Clear();
    /* tp.ops not there (yet): the public function runs the same op */
    const stax_op_info *op = stax_op_row(name);
    t = op && (op->flags & STAX_OPF_FUNCTION)
            ? Py_XNewRef(stax_op_function(op)) : NULL;
    if (t == NULL) {
        PyObject *m = stax_py_registered(STAX_PY_PACKAGE);
        t = m ? PyObject_GetAttrString(m, name) : NULL;
        PyErr_Clear();
    }
    if (t == NULL) {
        PyErr_Format(PyExc_LookupError, "make_op_graph: no tp.ops.%s.%s",
                     name, ovl);
    }
    return t;
}

static int
p_meta_set(PyObject *node, const char *key, PyObject *v)
{
    return PyDict_SetItemString(((StaxNode *)node)->meta, key, v);
}

static PyObject *
p_create(p_op_ctx *c, const char *opcode, PyObject *target, PyObject *args,
         PyObject *kwargs, const char *name)
{
    PyObject *hint = PyUnicode_FromString(name), *node = NULL;
    stax_node_op_t op;
    if (hint != NULL && stax_node_op_from_name(opcode, &op) == 0) {
        node = (PyObject *)stax_graph_create_node(
            (StaxGraph *)c->graph, op, target, args, kwargs, hint);
    }
    Py_XDECREF(hint);
    if (node != NULL && c->cur_py != NULL) {
        PyObject *m = stax_graph_p_attr(c->cur_py, "meta");
        PyObject *s = m && PyDict_Check(m) ? PyDict_GetItemString(m, "stack")
                                           : NULL;
        PyObject *se = m && PyDict_Check(m)
                       ? PyDict_GetItemString(m, "sample_error") : NULL;
        PyObject *kd = m && PyDict_Check(m)
                       ? PyDict_GetItemString(m, "keep_dead") : NULL;
        if (node != NULL && kd != NULL && p_meta_set(node, "keep_dead", kd) < 0) {
            Py_CLEAR(node);
        }
        if (s != NULL && p_meta_set(node, "stack", s) < 0) {
            Py_CLEAR(node);
        }
        if (node != NULL && se != NULL
            && p_meta_set(node, "sample_error", se) < 0) {
            Py_CLEAR(node);
        }
        Py_XDECREF(m);
        PyErr_Clear();
    }
    return node;
}

/* The arguments an emitted node's sample is computed from. The op graph's
 * as_strided / as_strided_scatter offset counts from the base's first
 * element (a functional value is a fresh buffer in the program); eager's
 * counts from the storage's start, as torch's: on a base sample that is a
 * view (a slice at offset 5) the offset is shifted by the sample's own. */
static PyObject *
p_sample_args(const stax_op_info *row, PyObject *args)
{
    Py_ssize_t at = row == NULL ? -1
                    : row->id == STAX_OP_AS_STRIDED ? 3
                    : row->id == STAX_OP_AS_STRIDED_SCATTER ? 4 : -1;
    PyObject *base = at > 0 && PyTuple_GET_SIZE(args) > 0
                     ? stax_graph_p_val(PyTuple_GET_ITEM(args, 0)) : NULL;
    if (base == NULL || !StaxTensor_Check(base)) {
        return Py_NewRef(args);
    }
    PyObject *bo = PyObject_CallMethod(base, "storage_offset", NULL);
    if (bo == NULL) {
        return NULL;
    }
    PyObject *r = NULL;
    if (PyLong_Check(bo) && PyLong_AsLongLong(bo) == 0) {
        r = Py_NewRef(args);
        goto done;
    }
    r = PyTuple_New(PyTuple_GET_SIZE(args) > at ? PyTuple_GET_SIZE(args) : at + 1);
    if (r == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(r); i++) {
        PyObject *a = i < PyTuple_GET_SIZE(args) ? PyTuple_GET_ITEM(args, i) : Py_None;
        PyObject *v = i != at ? Py_NewRef(a)
                      : a == Py_None ? Py_NewRef(bo) : PyNumber_Add(a, bo);
        if (v == NULL) {
            Py_CLEAR(r);
            goto done;
        }
        PyTuple_SET_ITEM(r, i, v);
    }
done:
    Py_DECREF(bo);
    return r;
}

PyObject *
stax_graph_p_emit(p_op_ctx *c, const char *opname, const char *ovl,
                  PyObject *args, PyObject *kwargs, int mutating)
{
    PyObject *target = NULL, *node = NULL, *tag = NULL;
    const stax_op_info *row = stax_op_row(opname);
    int is_getitem = row != NULL && row->id == STAX_OP_GETITEM;
    if (is_getitem) {
        target = Py_NewRef(stax_pyop_function(
            &stax_pyop_table[STAX_PYOP_GETITEM], 0));
    }
    else {
        target = p_op_target(opname, ovl);
    }
    if (target == NULL) {
        return NULL;
    }
    node = p_create(c, "call_function", target, args, kwargs, opname);
    if (node == NULL) {
        goto done;
    }
    if (!is_getitem) {
        tag = PyUnicode_FromFormat("%s.%s", opname, ovl);
        if (tag == NULL || p_meta_set(node, "op_overload", tag) < 0) {
            Py_CLEAR(node);
            goto done;
        }
    }
    if (row != NULL && (row->id == STAX_OP_AS_STRIDED || row->id == STAX_OP_AS_STRIDED_SCATTER)
        && stax_graph_p_mark_sample_sized(node) < 0) {
        Py_CLEAR(node);
        goto done;
    }
    if (mutating) {
        PyObject *z = PyLong_FromLong(0);
        if (z == NULL || p_meta_set(node, "mutates", z) < 0) {
            Py_XDECREF(z);
            Py_CLEAR(node);
            goto done;
        }
        Py_DECREF(z);
        /* its value is the new value of args[0] */
        PyObject *v0 = PyTuple_GET_SIZE(args) > 0
                       && stax_graph_p_is_node(PyTuple_GET_ITEM(args, 0))
                       ? stax_graph_p_val(PyTuple_GET_ITEM(args, 0)) : NULL;
        if (v0 != NULL && p_meta_set(node, "val", v0) < 0) {
            Py_CLEAR(node);
        }
    }
    else {
        /* an op of the table runs through the ops room directly: its
         * tp.ops object would cross back into C from Python; an op the
         * Python-level graph holds as it is has that node's value already
         * (recomputing it would run the whole function on the samples
         * again at every compile) */
        PyObject *kv = c->known_val;
        c->known_val = NULL;
        PyObject *sargs = kv == NULL ? p_sample_args(row, args) : Py_NewRef(args);
        PyObject *val = sargs == NULL ? NULL
                        : kv != NULL ? Py_NewRef(kv)
                        : row != NULL && !is_getitem
                        ? stax_graph_p_run_op_on_vals(row, sargs, kwargs)
                        : stax_graph_p_run_on_vals(P_CALL_FUNCTION, target, sargs, kwargs);
        Py_XDECREF(sargs);
        if (val != NULL) {
            if (p_meta_set(node, "val", val) < 0) {
                Py_CLEAR(node);
            }
            Py_DECREF(val);
        }
    }
done:
    Py_XDECREF(target);
    Py_XDECREF(tag);
    return node;
}

/* ---- emitting one op (with decomposition against the basis) ---------- */

static PyObject *p_emit_op(p_op_ctx *c, const stax_op_info *op,
                           PyObject *bound);

static PyObject *
p_emit_decomp(const char *opname, PyObject *args, void *vctx)
{
    p_op_ctx *c = vctx;
    const stax_op_info *op = stax_graph_p_op_by_name(opname);
    if (op != NULL && op->id == STAX_OP_GETITEM) {
        return stax_graph_p_emit(c, op->name, "", args, NULL, 0);
    }
    if (op == NULL) {
        PyErr_Format(PyExc_LookupError, "decomposition names an unknown op "
                     "%s", opname);
        return NULL;
    }
    PyObject *bound = stax_graph_p_bind(op, args, NULL);
    if (bound == NULL) {
        return NULL;
    }
    PyObject *r = p_emit_op(c, op, bound);
    Py_DECREF(bound);
    return r;
}

static PyObject *
p_emit_op(p_op_ctx *c, const stax_op_info *op, PyObject *bound)
{
    char ovl[64];
    PyObject *args = NULL, *kw = NULL, *r = NULL;
    PyObject *kv = c->known_val;    /* for the one node below only */
    c->known_val = NULL;
    if (!stax_graph_p_in_basis(c, op) && !stax_graph_p_is_random(op) && c->depth < 64) {
        const p_sexp *t = stax_graph_p_decomp(op);
        if (t != NULL && stax_graph_p_decomp_applicable(op, t, bound)) {
            c->depth++;
            r = stax_graph_p_eval_decomp(t, op, bound, p_emit_decomp, c);
            c->depth--;
            return r;
        }
    }
    stax_graph_p_choose_overload(op, bound, ovl, sizeof(ovl));
    if (stax_graph_p_call_args(op, ovl, bound, &args, &kw) < 0) {
        return NULL;
    }
    c->known_val = kv;
    r = stax_graph_p_emit(c, op->name, ovl, args, kw, 0);
    c->known_val = NULL;
    Py_DECREF(args);
    Py_DECREF(kw);
    return r;
}

/* ---- lowering one Python-level node ---------------------------------- */

static PyObject *
p_cur_fn(PyObject *node, void *ctx)
{
    return stax_graph_fz_current((p_op_ctx *)ctx, node);
}

static int
p_is_tensor_val(PyObject *v)
{
    return v != NULL && !PyLong_Check(v) && !PyFloat_Check(v)
        && !PyTuple_Check(v) && !PyList_Check(v)
        && PyObject_HasAttrString(v, "dtype")
        && PyObject_HasAttrString(v, "shape");
}

static int
p_attr_shape_eq(PyObject *a, PyObject *b)
{
    PyObject *x = PyObject_GetAttrString(a, "shape");
    PyObject *y = x ? PyObject_GetAttrString(b, "shape") : NULL;
    PyObject *tx = y ? PySequence_Tuple(x) : NULL;
    PyObject *ty = tx ? PySequence_Tuple(y) : NULL;
    int r = ty ? PyObject_RichCompareBool(tx, ty, Py_EQ) == 1 : 0;
    Py_XDECREF(x);
    Py_XDECREF(y);
    Py_XDECREF(tx);
    Py_XDECREF(ty);
    PyErr_Clear();
    return r;
}

/* copy `src` into the shape of `like` (copy_, setitem) as a new value */
static PyObject *
p_fill_value(p_op_ctx *c, PyObject *like, PyObject *src)
{
    if (stax_graph_p_is_number(src)) {
        PyObject *args = PyTuple_Pack(2, like, src);
        PyObject *r = args ? stax_graph_p_emit(c, "full_like", "default", args,
                                               NULL, 0) : NULL;
        Py_XDECREF(args);
        return r;
    }
    PyObject *lv = stax_graph_p_is_node(like) ? stax_graph_p_val(like) : NULL;
    PyObject *sv = stax_graph_p_is_node(src) ? stax_graph_p_val(src) : NULL;
    PyObject *r;
    if (lv != NULL && sv != NULL && stax_graph_p_same_meta(lv, sv)) {
        r = Py_NewRef(src);
    }
    else if (lv == NULL) {
        /* no sample value to take the shape from: copy_ as one node that
         * records its mutated argument (copied before it runs) */
        PyObject *args = PyTuple_Pack(2, like, src);
        r = args ? stax_graph_p_emit(c, "copy_", "default", args, NULL, 1)
                 : NULL;
        Py_XDECREF(args);
        return r;
    }
    else {
        PyObject *shape = PyObject_GetAttrString(lv, "shape");
        PyObject *l = shape ? PySequence_List(shape) : NULL;
        Py_XDECREF(shape);
        if (l == NULL) {
            return NULL;
        }
        PyObject *args = PyTuple_Pack(2, src, l);
        Py_DECREF(l);
        r = args ? stax_graph_p_emit(c, "expand", "default", args, NULL, 0)
                 : NULL;
        Py_XDECREF(args);
        if (r != NULL && stax_graph_p_mark_sample_sized(r) < 0) {
            Py_CLEAR(r);
        }
        if (r != NULL && lv != NULL && sv != NULL) {
            /* dtype: the destination's */
            PyObject *dt = PyObject_GetAttrString(lv, "dtype");
            PyObject *a2 = dt ? PyTuple_Pack(1, r) : NULL;
            PyObject *kw = dt ? Py_BuildValue("{sO}", "dtype", dt) : NULL;
            PyObject *dts = PyObject_GetAttrString(sv, "dtype");
            int same = dt && dts ? PyObject_RichCompareBool(dt, dts, Py_EQ) : 1;
            PyErr_Clear();
            if (!same && a2 && kw) {
                Py_SETREF(r, stax_graph_p_emit(c, "_to_copy", "default", a2,
                                               kw, 0));
            }
            Py_XDECREF(dt);
            Py_XDECREF(dts);
            Py_XDECREF(a2);
            Py_XDECREF(kw);
        }
    }
    /* a placeholder as the new value of another input would be read after
     * its own write-back: take a copy */
    if (r != NULL && stax_graph_p_is_node(r)
        && stax_graph_p_opcode(r) == P_PLACEHOLDER) {
        PyObject *args = PyTuple_Pack(1, r);
        Py_SETREF(r, args ? stax_graph_p_emit(c, "clone", "default", args,
                                              NULL, 0) : NULL);
        Py_XDECREF(args);
    }
    PyErr_Clear();
    return r;
}

/* an in-place op without a functional twin (uniform_, random_, setitem
 * with tensor indices ...): one node that records what it mutates (the
 * back end runs it as a fallback kernel, the eager op itself, on its first
 * argument's buffer); its value is the new value. p_private_copies gives
 * it a copy of that buffer where another node still reads it. */
static PyObject *
p_emit_mutating(p_op_ctx *c, p_opref *r, PyObject *mapped, PyObject *mkw)
{
    if (r->info != NULL) {
        return stax_graph_p_emit(c, r->info->name, "default", mapped, mkw, 1);
    }
    PyObject *tg = PyUnicode_FromString(r->name);
    PyObject *node = tg ? p_create(c, "call_method", tg, mapped, mkw, r->name)
                        : NULL;
    Py_XDECREF(tg);
    if (node != NULL) {
        PyObject *z = PyLong_FromLong(0);
        PyObject *a0 = PyTuple_GET_ITEM(mapped, 0);
        PyObject *cv = stax_graph_p_is_node(a0) ? stax_graph_p_val(a0) : NULL;
        if (z == NULL || p_meta_set(node, "mutates", z) < 0
            || (cv != NULL && p_meta_set(node, "val", cv) < 0)) {
            Py_CLEAR(node);
        }
        Py_XDECREF(z);
    }
    return node;
}

/* x[idx] = v with tensor indices: x[mask] = s is masked_fill; others one
 * setitem node that records the argument it mutates */
static int
p_setitem_by_tensor(p_op_ctx *c, PyObject *n, const p_opref *r, PyObject *m,
                    PyObject *args, PyObject *mapped)
{
    PyObject *idx = PyTuple_GET_ITEM(args, 1);
    PyObject *iv = stax_graph_p_is_node(idx) ? stax_graph_p_val(idx) : NULL;
    PyObject *mv = stax_graph_p_val(stax_graph_fz_resolve(c, m));
    PyObject *src = PyTuple_GET_ITEM(mapped, 2);
    PyObject *idt = iv ? PyObject_GetAttrString(iv, "dtype") : NULL;
    PyObject *bdt = NULL, *curm, *a3, *v;
    int is_mask = 0;
    if (idt != NULL) {
        bdt = Py_XNewRef(stax_dtype_object(STAX_BOOL));
        is_mask = bdt && PyObject_RichCompareBool(idt, bdt, Py_EQ) == 1
                  && mv != NULL && p_attr_shape_eq(iv, mv);
    }
    Py_XDECREF(idt);
    Py_XDECREF(bdt);
    PyErr_Clear();
    curm = stax_graph_fz_current(c, m);
    if (curm == NULL) {
        return -1;
    }
    a3 = PyTuple_Pack(3, curm, PyTuple_GET_ITEM(mapped, 1), src);
    Py_DECREF(curm);
    if (a3 == NULL) {
        return -1;
    }
    if (is_mask && stax_graph_p_is_number(src)) {
        v = stax_graph_p_emit(c, "masked_fill", "Scalar", a3, NULL, 0);
    }
    else {
        p_opref sr = *r;
        sr.info = &stax_op_table[STAX_OP_SETITEM];
        v = p_emit_mutating(c, &sr, a3, NULL);
    }
    Py_DECREF(a3);
    if (v == NULL || stax_graph_fz_assign(c, m, v) < 0) {
        Py_XDECREF(v);
        return -1;
    }
    Py_DECREF(v);
    return stax_graph_fz_root(c, n, Py_None);
}

/* the functional twin of an in-place call (add_ -> add; F.relu(x,
 * inplace=True) -> relu(x)), cast back to the mutated tensor's dtype: x.mul_(double)
 * on a float32 x computes, then rounds to float32. New reference or NULL */
static PyObject *
p_functional_twin(p_op_ctx *c, const p_opref *r, PyObject *m, PyObject *mapped,
                  PyObject *mkw)
{
    PyObject *bound = stax_graph_p_bind(r->info, mapped, PyDict_Check(mkw) ? mkw : NULL);
    PyObject *v;
    if (bound != NULL && r->inplace_arg) {
        for (int i = 0; i < stax_graph_p_schema_len(r->info); i++) {
            if (strcmp(stax_graph_p_schema_name(r->info, i), "inplace") == 0
                && i < PyTuple_GET_SIZE(bound)) {
                Py_ssize_t nbn = PyTuple_GET_SIZE(bound);
                PyObject *nb = PyTuple_New(nbn);
                if (nb == NULL) {
                    Py_DECREF(bound);
                    return NULL;
                }
                for (Py_ssize_t j = 0; j < nbn; j++) {
                    PyTuple_SET_ITEM(nb, j, Py_NewRef(j == i ? Py_False
                                                             : PyTuple_GET_ITEM(bound, j)));
                }
                Py_SETREF(bound, nb);
            }
        }
    }
    v = bound ? p_emit_op(c, r->info, bound) : NULL;
    Py_XDECREF(bound);
    PyObject *mv = stax_graph_p_val(stax_graph_fz_resolve(c, m));
    PyObject *vv = v && stax_graph_p_is_node(v) ? stax_graph_p_val(v) : NULL;
    PyObject *d1 = mv ? PyObject_GetAttrString(mv, "dtype") : NULL;
    PyObject *d2 = d1 && vv ? PyObject_GetAttrString(vv, "dtype") : NULL;
    if (d2 != NULL && PyObject_RichCompareBool(d1, d2, Py_EQ) == 0) {
        PyObject *a2 = PyTuple_Pack(1, v);
        PyObject *kw = Py_BuildValue("{sO}", "dtype", d1);
        Py_SETREF(v, a2 && kw ? stax_graph_p_emit(c, "_to_copy", "default", a2, kw, 0) : NULL);
        Py_XDECREF(a2);
        Py_XDECREF(kw);
    }
    Py_XDECREF(d1);
    Py_XDECREF(d2);
    if (v != NULL) {
        PyErr_Clear();
    }
    return v;
}

/* v, the value a copy_/fill_/zero_ writes over `old`, records old's name
 * (meta['overwrites']): eager's in-place result keeps requiring grad when
 * the tensor it overwrote did, though v does not read old (compiled
 * autograd's requires-grad analysis reads the mark) */
static int
p_mark_overwrite(PyObject *v, PyObject *old)
{
    if (!stax_graph_p_is_node(v) || !stax_graph_p_is_node(old) || v == old
        || stax_graph_p_opcode(v) == P_PLACEHOLDER) {
        return 0;
    }
    PyObject *name = PyObject_GetAttrString(old, "name");
    int rc = name ? p_meta_set(v, "overwrites", name) : -1;
    Py_XDECREF(name);
    return rc;
}

/* x.bernoulli_(p) as a value: bernoulli(x, p) for a number p (eager draws
 * zeros_like(x).bernoulli_(p): the same words), bernoulli(p expanded to x)
 * cast to x's dtype for a tensor p. NULL without an exception: no such
 * form (an explicit generator, other arguments) */
static PyObject *
p_bernoulli_value(p_op_ctx *c, PyObject *mapped, PyObject *mkw)
{
    PyObject *x = PyTuple_GET_ITEM(mapped, 0), *p = NULL, *r = NULL, *args = NULL;
    Py_ssize_t na = PyTuple_GET_SIZE(mapped);
    if (na > 2) {
        return NULL;
    }
    if (PyDict_Check(mkw)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(mkw, &pos, &k, &v)) {
            if (PyUnicode_Check(k) && PyUnicode_CompareWithASCIIString(k, "p") == 0 && na == 1) {
                p = v;
            }
            else if (!(PyUnicode_Check(k) && PyUnicode_CompareWithASCIIString(k, "generator") == 0
                       && v == Py_None)) {
                return NULL;
            }
        }
    }
    if (na == 2) {
        p = PyTuple_GET_ITEM(mapped, 1);
    }
    PyObject *xv = stax_graph_p_is_node(x) ? stax_graph_p_val(x) : NULL;
    if (xv == NULL) {
        return NULL;
    }
    if (p == NULL || PyFloat_Check(p) || (PyLong_Check(p) && !PyBool_Check(p))) {
        PyObject *pf = p ? PyNumber_Float(p) : PyFloat_FromDouble(0.5);
        args = pf ? PyTuple_Pack(2, x, pf) : NULL;
        Py_XDECREF(pf);
        r = args ? stax_graph_p_emit(c, "bernoulli", "p", args, NULL, 0) : NULL;
        Py_XDECREF(args);
        return r;
    }
    if (!stax_graph_p_is_node(p) || stax_graph_p_val(p) == NULL) {
        return NULL;
    }
    PyObject *shape = PyObject_GetAttrString(xv, "shape");
    PyObject *l = shape ? PySequence_List(shape) : NULL;
    Py_XDECREF(shape);
    args = l ? PyTuple_Pack(2, p, l) : NULL;
    Py_XDECREF(l);
    PyObject *e = args ? stax_graph_p_emit(c, "expand", "default", args, NULL, 0) : NULL;
    Py_XDECREF(args);
    args = e ? PyTuple_Pack(1, e) : NULL;
    Py_XDECREF(e);
    r = args ? stax_graph_p_emit(c, "bernoulli", "default", args, NULL, 0) : NULL;
    Py_XDECREF(args);
    PyObject *rv = r && stax_graph_p_is_node(r) ? stax_graph_p_val(r) : NULL;
    PyObject *d1 = rv ? PyObject_GetAttrString(xv, "dtype") : NULL;
    PyObject *d2 = d1 ? PyObject_GetAttrString(rv, "dtype") : NULL;
    if (d2 != NULL && PyObject_RichCompareBool(d1, d2, Py_EQ) == 0) {
        PyObject *a2 = PyTuple_Pack(1, r);
        PyObject *kw = Py_BuildValue("{sO}", "dtype", d1);
        Py_SETREF(r, a2 && kw ? stax_graph_p_emit(c, "_to_copy", "default", a2, kw, 0) : NULL);
        Py_XDECREF(a2);
        Py_XDECREF(kw);
    }
    Py_XDECREF(d1);
    Py_XDECREF(d2);
    return r;
}

/* 1 when m's value is a root of functionalization (not a tracked view)
 * computed by a call whose sample result shares its first argument's
 * storage: a view kept as a call (diagonal of a non-contiguous tensor,
 * ...), which a write must reach but functionalization cannot express */
static int
p_opaque_view(p_op_ctx *c, PyObject *m)
{
    PyObject *mr = stax_graph_fz_resolve(c, m);
    p_opcode_t opc = stax_graph_p_opcode(mr);
    if (opc != P_CALL_FUNCTION && opc != P_CALL_METHOD) {
        PyErr_Clear();
        return 0;
    }
    int v = stax_graph_fz_is_view(c, mr);
    if (v != 0) {
        return 0;    /* a view (or an error, left set) */
    }
    PyObject *a = stax_graph_p_attr(mr, "args");
    int r = 0;
    if (a != NULL && PyTuple_Check(a) && PyTuple_GET_SIZE(a) > 0
        && stax_graph_p_is_node(PyTuple_GET_ITEM(a, 0))) {
        PyObject *x = stax_graph_fz_resolve(c, PyTuple_GET_ITEM(a, 0));
        PyObject *vx = stax_graph_p_val(x), *vm = stax_graph_p_val(mr);
        r = p_is_tensor_val(vx) && p_is_tensor_val(vm)
            && stax_graph_p_shares_storage(vm, vx) == 1;
    }
    Py_XDECREF(a);
    PyErr_Clear();
    return r;
}

static int
p_lower_inplace(p_op_ctx *c, PyObject *n, p_opref *r, PyObject *args,
                PyObject *kwargs)
{
    PyObject *m = PyTuple_GET_ITEM(args, 0), *mapped = NULL, *mkw = NULL;
    PyObject *bound = NULL, *v = NULL, *cur = NULL;
    int rc = -1;
    if (!stax_graph_p_is_node(m)) {
        PyErr_SetString(PyExc_TypeError, "in-place op on a non-tensor");
        return -1;
    }
    if (p_opaque_view(c, m)) {
        PyObject *nm = stax_graph_p_attr(stax_graph_fz_resolve(c, m), "name");
        stax_graph_fz_unsafe_raise(nm != NULL ? nm : Py_None);
        Py_XDECREF(nm);
        return -1;
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    mapped = stax_graph_map_arg(args, p_cur_fn, c);
    mkw = mapped ? stax_graph_map_arg(kwargs, p_cur_fn, c) : NULL;
    if (mkw == NULL) {
        goto done;
    }
    if (r->setitem) {
        /* x[idx] = v: a mutation of the view x[idx] */
        PyObject *key = Py_BuildValue("(Os)", n, "view");
        if (key == NULL || PyTuple_GET_SIZE(args) != 3) {
            Py_XDECREF(key);
            goto done;
        }
        if (stax_graph_p_lower_index(c, key, m, PyTuple_GET_ITEM(args, 1)) < 0) {
            Py_DECREF(key);
            if (!PyErr_ExceptionMatches(PyExc_NotImplementedError)) {
                goto done;
            }
            PyErr_Clear();
            rc = p_setitem_by_tensor(c, n, r, m, args, mapped);
            goto done;
        }
        cur = stax_graph_fz_current(c, key);
        v = cur ? p_fill_value(c, cur, PyTuple_GET_ITEM(mapped, 2)) : NULL;
        if (v != NULL && v == PyTuple_GET_ITEM(mapped, 2)
            && !(stax_graph_p_is_node(v) && stax_graph_p_opcode(v) == P_PLACEHOLDER)) {
            /* x[:] = y writes a value of its own (see copy_ below) */
            PyObject *a1 = PyTuple_Pack(1, v);
            Py_SETREF(v, a1 ? stax_graph_p_emit(c, "clone", "default", a1, NULL, 0)
                            : NULL);
            Py_XDECREF(a1);
        }
        if (v != NULL && p_mark_overwrite(v, cur) < 0) {
            Py_CLEAR(v);
        }
        if (v == NULL || stax_graph_fz_assign(c, key, v) < 0) {
            Py_DECREF(key);
            goto done;
        }
        Py_DECREF(key);
        rc = stax_graph_fz_root(c, n, Py_None);
        goto done;
    }
    if (r->info != NULL && r->info->id == STAX_OP_COPY_) {
        v = PyTuple_GET_SIZE(mapped) >= 2
            ? p_fill_value(c, PyTuple_GET_ITEM(mapped, 0),
                           PyTuple_GET_ITEM(mapped, 1)) : NULL;
        /* dst.copy_(src) leaves two tensors: returned together they are
         * two storages in eager, and dst keeps requiring grad where src
         * does not: a value of its own */
        if (v != NULL && v == PyTuple_GET_ITEM(mapped, 1)) {
            PyObject *a1 = PyTuple_Pack(1, v);
            Py_SETREF(v, a1 ? stax_graph_p_emit(c, "clone", "default", a1, NULL, 0)
                            : NULL);
            Py_XDECREF(a1);
        }
        if (v != NULL && p_mark_overwrite(v, PyTuple_GET_ITEM(mapped, 0)) < 0) {
            Py_CLEAR(v);
        }
    }
    else if (r->info != NULL && !(r->info->flags & STAX_OPF_INPLACE)) {
        /* the functional twin: add_ -> add */
        v = p_functional_twin(c, r, m, mapped, mkw);
    }
    else if (r->info == NULL && r->call != NULL && r->call->kind == STAX_CALLK_FILL) {
        /* methods of the tensor room without a row: their values */
        PyObject *fv = NULL;
        if (r->call->key == STAX_CALL_ZERO_) {
            fv = PyLong_FromLong(0);
        }
        else if (PyTuple_GET_SIZE(mapped) >= 2) {
            fv = Py_NewRef(PyTuple_GET_ITEM(mapped, 1));
        }
        else if (PyDict_Check(mkw)) {
            fv = Py_XNewRef(PyDict_GetItemString(mkw, "value"));
        }
        if (fv == NULL && !PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "fill_() missing argument 'value'");
        }
        v = fv ? p_fill_value(c, PyTuple_GET_ITEM(mapped, 0), fv) : NULL;
        Py_XDECREF(fv);
        if (v != NULL && p_mark_overwrite(v, PyTuple_GET_ITEM(mapped, 0)) < 0) {
            Py_CLEAR(v);
        }
    }
    else if (r->info == NULL && r->call != NULL && r->call->key == STAX_CALL_BERNOULLI_
             && (v = p_bernoulli_value(c, mapped, mkw)) != NULL) {
        /* x.bernoulli_(p): the value bernoulli(x, p), a fresh draw */
    }
    else {
        if (PyErr_Occurred()) {
            goto done;
        }
        /* no functional overload (uniform_, random_, ...) */
        v = p_emit_mutating(c, r, mapped, PyDict_Check(mkw) ? mkw : NULL);
    }
    if (v == NULL || stax_graph_fz_assign(c, m, v) < 0
        || stax_graph_fz_alias(c, n, m) < 0) {
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(mapped);
    Py_XDECREF(mkw);
    Py_XDECREF(bound);
    Py_XDECREF(v);
    Py_XDECREF(cur);
    return rc;
}

/* `s op x` with a Python number s on the left (1 - x, 2 / x, 2 < x):
 * commutative ops swap, comparisons flip, sub becomes rsub, the rest reads
 * s as a tensor full_like(x, s) of the result's dtype */
static PyObject *
p_scalar_first(p_op_ctx *c, PyObject *n, const stax_op_info *op,
               PyObject *mapped)
{
    static const stax_op_id_t flip[][2] = {
        {STAX_OP_LT, STAX_OP_GT}, {STAX_OP_GT, STAX_OP_LT}, {STAX_OP_LE, STAX_OP_GE},
        {STAX_OP_GE, STAX_OP_LE}, {STAX_OP_EQ, STAX_OP_EQ}, {STAX_OP_NE, STAX_OP_NE},
        {STAX_OP_SUB, STAX_OP_RSUB},
    };
    PyObject *s = PyTuple_GET_ITEM(mapped, 0), *x = PyTuple_GET_ITEM(mapped, 1);
    const stax_op_info *op2 = NULL;
    PyObject *sw = NULL, *bound = NULL, *r = NULL;
    if (op->flags & STAX_OPF_COMMUTATIVE) {
        op2 = op;
    }
    for (size_t i = 0; op2 == NULL && i < sizeof(flip) / sizeof(flip[0]); i++) {
        if (op->id == flip[i][0]) {
            op2 = &stax_op_table[flip[i][1]];
        }
    }
    if (op2 != NULL) {
        sw = PyTuple_Pack(2, x, s);
        bound = sw ? stax_graph_p_bind(op2, sw, NULL) : NULL;
        r = bound ? p_emit_op(c, op2, bound) : NULL;
        Py_XDECREF(sw);
        Py_XDECREF(bound);
        return r;
    }
    PyObject *val = stax_graph_p_val(n);
    PyObject *dt = val ? PyObject_GetAttrString(val, "dtype") : NULL;
    PyErr_Clear();
    PyObject *fa = PyTuple_Pack(2, x, s);
    PyObject *fk = dt ? Py_BuildValue("{sO}", "dtype", dt) : NULL;
    PyObject *full = fa ? stax_graph_p_emit(c, "full_like", "default", fa, fk,
                                            0) : NULL;
    Py_XDECREF(fa);
    Py_XDECREF(fk);
    Py_XDECREF(dt);
    if (full == NULL) {
        return NULL;
    }
    sw = PyTuple_Pack(2, full, x);
    Py_DECREF(full);
    bound = sw ? stax_graph_p_bind(op, sw, NULL) : NULL;
    r = bound ? p_emit_op(c, op, bound) : NULL;
    Py_XDECREF(sw);
    Py_XDECREF(bound);
    return r;
}

/* (size, stride, offset) of the sample of n inside the sample of its
 * argument x when n is a view of x (same storage) and x's sample is
 * contiguous, so the numbers hold for x's functional value too; NULL (no
 * exception) when not */
static PyObject *
p_generic_view_tail(p_op_ctx *c, PyObject *n, PyObject *x)
{
    PyObject *vn = stax_graph_p_val(n);
    PyObject *vx = stax_graph_p_val(stax_graph_fz_resolve(c, x));
    PyObject *size = NULL, *stride = NULL, *on = NULL, *ox = NULL;
    PyObject *rel = NULL, *cont = NULL, *r = NULL;
    if (!p_is_tensor_val(vn) || !p_is_tensor_val(vx)
        || stax_graph_p_shares_storage(vn, vx) != 1) {
        return NULL;
    }
    cont = PyObject_CallMethod(vx, "is_contiguous", NULL);
    if (cont == NULL || PyObject_IsTrue(cont) != 1) {
        goto done;
    }
    PyObject *sh = PyObject_GetAttrString(vn, "shape");
    size = sh ? PySequence_List(sh) : NULL;
    Py_XDECREF(sh);
    PyObject *st = size ? PyObject_CallMethod(vn, "stride", NULL) : NULL;
    stride = st ? PySequence_List(st) : NULL;
    Py_XDECREF(st);
    on = stride ? PyObject_CallMethod(vn, "storage_offset", NULL) : NULL;
    ox = on ? PyObject_CallMethod(vx, "storage_offset", NULL) : NULL;
    rel = ox ? PyNumber_Subtract(on, ox) : NULL;
    r = rel ? PyTuple_Pack(3, size, stride, rel) : NULL;
done:
    Py_XDECREF(cont);
    Py_XDECREF(size);
    Py_XDECREF(stride);
    Py_XDECREF(on);
    Py_XDECREF(ox);
    Py_XDECREF(rel);
    PyErr_Clear();
    return r;
}

/* 1 when n's sample value is base0's tensor itself (same storage, meta,
 * strides and offset): a call that returned its input */
static int
p_returned_itself(PyObject *n, PyObject *base0)
{
    PyObject *vn = stax_graph_p_val(n), *va = stax_graph_p_val(base0);
    if (stax_graph_p_shares_storage(vn, va) != 1 || !stax_graph_p_same_meta(vn, va)) {
        return 0;
    }
    PyObject *s1 = PyObject_CallMethod(vn, "stride", NULL);
    PyObject *s2 = s1 ? PyObject_CallMethod(va, "stride", NULL) : NULL;
    PyObject *o1 = s2 ? PyObject_CallMethod(vn, "storage_offset", NULL) : NULL;
    PyObject *o2 = o1 ? PyObject_CallMethod(va, "storage_offset", NULL) : NULL;
    int same = o2 && PyObject_RichCompareBool(s1, s2, Py_EQ) == 1
               && PyObject_RichCompareBool(o1, o2, Py_EQ) == 1;
    Py_XDECREF(s1);
    Py_XDECREF(s2);
    Py_XDECREF(o1);
    Py_XDECREF(o2);
    PyErr_Clear();
    return same;
}

/* the call n as it is, on the op-level arguments, with n's sample value
 * (new reference, or NULL with an exception) */
static PyObject *
p_copy_node(p_op_ctx *c, PyObject *n, p_opcode_t opc, PyObject *mapped, PyObject *mkw)
{
    PyObject *target = stax_graph_p_attr(n, "target"), *nm, *v = NULL;
    const char *s;
    if (target == NULL) {
        return NULL;
    }
    nm = stax_graph_p_attr(n, "name");
    s = nm && PyUnicode_Check(nm) ? PyUnicode_AsUTF8(nm) : "v";
    v = s ? p_create(c, stax_graph_p_opcode_str(opc), target, mapped, mkw, s) : NULL;
    Py_XDECREF(nm);
    Py_DECREF(target);
    PyObject *val = v != NULL ? stax_graph_p_val(n) : NULL;
    if (val != NULL && p_meta_set(v, "val", val) < 0) {
        Py_CLEAR(v);
    }
    return v;
}

/* a call the op table does not describe, copied as it is */
static int
p_copy_call(p_op_ctx *c, PyObject *n, p_opcode_t opc, PyObject *mapped, PyObject *mkw)
{
    PyObject *v = p_copy_node(c, n, opc, mapped, mkw);
    int rc = v != NULL ? stax_graph_fz_root(c, n, v) : -1;
    Py_XDECREF(v);
    return rc;
}

/* 1 if a node argument of a call is (or may be) a tensor, 0 when every
 * argument is a Python number (scalar arithmetic among sizes) */
static int
p_any_tensor_arg(PyObject *args, PyObject *mapped)
{
    int any_tensor = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        PyObject *ma = PyTuple_GET_ITEM(mapped, i);
        if (stax_graph_p_is_node(a)) {
            PyObject *av = stax_graph_p_val(a);
            any_tensor |= av == NULL || p_is_tensor_val(av)
                          || (stax_graph_p_is_node(ma)
                              && p_is_tensor_val(stax_graph_p_val(ma)));
        }
    }
    return any_tensor;
}

/* a view op of the table (or a call that aliased its input on the samples)
 * of the value x: a view step, view.default becoming reshape (a view of a
 * functional value: values, not layout); 0, or -1 with an exception */
/* the (size, stride, offset) tail of a user's as_strided(x, ...) with the
 * offset made relative to x's value: the op graph and its lowering read
 * x's values in C order, which are its storage from x's own offset only
 * when x is contiguous. Eager's offset is into the storage (None: x's
 * own), so a non-contiguous x (x.t(), a computed value's transpose) gets
 * offset -1, which lowering refuses (eager's result then, never C-order
 * values read as storage). New reference, or NULL with an exception. */
static PyObject *
p_as_strided_relative(p_op_ctx *c, PyObject *x, PyObject *tail)
{
    PyObject *vx = stax_graph_p_is_node(x) ? stax_graph_p_val(stax_graph_fz_resolve(c, x)) : NULL;
    PyObject *cont = NULL, *ox = NULL, *rel = NULL, *r = NULL;
    Py_ssize_t nt = PyTuple_GET_SIZE(tail);
    if (nt < 2) {
        Py_INCREF(tail);
        return tail;
    }
    PyObject *off = nt > 2 ? PyTuple_GET_ITEM(tail, 2) : Py_None;
    int ok = 0;
    if (p_is_tensor_val(vx) && (off == Py_None || PyLong_Check(off))) {
        cont = PyObject_CallMethod(vx, "is_contiguous", NULL);
        ox = cont != NULL ? PyObject_CallMethod(vx, "storage_offset", NULL) : NULL;
        if (ox == NULL) {
            goto done;
        }
        ok = PyObject_IsTrue(cont) == 1 && PyLong_Check(ox);
    }
    if (ok) {
        rel = off == Py_None ? PyLong_FromLong(0) : PyNumber_Subtract(off, ox);
        if (rel != NULL && PyLong_AsLongLong(rel) < 0 && !PyErr_Occurred()) {
            Py_SETREF(rel, PyLong_FromLong(-1));
        }
    }
    else if (off != Py_None && !PyLong_Check(off)) {
        Py_INCREF(tail);
        r = tail;
        goto done;
    }
    else {
        rel = PyLong_FromLong(-1);
    }
    if (rel != NULL) {
        r = PyTuple_Pack(3, PyTuple_GET_ITEM(tail, 0), PyTuple_GET_ITEM(tail, 1), rel);
    }
done:
    Py_XDECREF(cont);
    Py_XDECREF(ox);
    Py_XDECREF(rel);
    return r;
}

static int
p_table_view(p_op_ctx *c, PyObject *n, const stax_op_info *info, PyObject *x,
             PyObject *bound)
{
    char ovl[64];
    PyObject *cargs = NULL, *ckw = NULL;
    stax_graph_p_choose_overload(info, bound, ovl, sizeof(ovl));
    if (stax_graph_p_call_args(info, ovl, bound, &cargs, &ckw) < 0) {
        return -1;
    }
    PyObject *tail = PyTuple_GetSlice(cargs, 1, PyTuple_GET_SIZE(cargs));
    Py_DECREF(cargs);
    Py_DECREF(ckw);
    if (tail == NULL) {
        return -1;
    }
    if (info->id == STAX_OP_AS_STRIDED) {
        PyObject *rt = p_as_strided_relative(c, x, tail);
        Py_DECREF(tail);
        if (rt == NULL) {
            return -1;
        }
        tail = rt;
    }
    const char *vname = info->name;
    if (info->id == STAX_OP_VIEW && !strcmp(ovl, "default")) {
        vname = "reshape";
    }
    PyObject *v = stax_graph_p_view_step(c, n, x, vname, ovl, tail, stax_graph_p_val(n));
    Py_DECREF(tail);
    if (v == NULL) {
        return -1;
    }
    Py_DECREF(v);
    return 0;
}

static int
p_lower_call(p_op_ctx *c, PyObject *n, p_opcode_t opc)
{
    PyObject *args = NULL, *kwargs = NULL, *mapped = NULL, *mkw = NULL;
    PyObject *bound = NULL, *v = NULL;
    p_opref r;
    int rc = -1, known = stax_graph_p_node_opref(n, &r);
    PyObject *a0 = stax_graph_p_attr(n, "args");
    args = a0 ? PySequence_Tuple(a0) : NULL;
    Py_XDECREF(a0);
    kwargs = args ? stax_graph_p_attr(n, "kwargs") : NULL;
    if (kwargs == NULL) {
        goto done;
    }
    if (r.inplace && PyTuple_GET_SIZE(args) > 0) {
        rc = p_lower_inplace(c, n, &r, args, kwargs);
        goto done;
    }
    if (r.getitem && PyTuple_GET_SIZE(args) == 2) {
        PyObject *x = PyTuple_GET_ITEM(args, 0);
        PyObject *xv = stax_graph_p_is_node(x)
                       ? stax_graph_p_val(stax_graph_fz_resolve(c, x)) : NULL;
        if (p_is_tensor_val(xv)) {
            rc = stax_graph_p_lower_index(c, n, x, PyTuple_GET_ITEM(args, 1));
            if (rc == 0 || !PyErr_ExceptionMatches(PyExc_NotImplementedError)) {
                goto done;
            }
            PyErr_Clear();
            /* advanced indexing: index.Tensor would go here; keep getitem */
        }
        known = 0;
    }
    /* x.contiguous(), x.float(), x.to(x.dtype) that returned x itself: the
     * same value (an alias), no node */
    if (PyTuple_GET_SIZE(args) > 0
        && stax_graph_p_is_node(PyTuple_GET_ITEM(args, 0))
        && !(known && r.info != NULL && r.info->kind == STAX_OPK_VIEW)) {
        PyObject *base0 = stax_graph_fz_resolve(c, PyTuple_GET_ITEM(args, 0));
        if (p_returned_itself(n, base0)) {
            rc = stax_graph_fz_alias(c, n, base0);
            goto done;
        }
    }
    mapped = stax_graph_map_arg(args, p_cur_fn, c);
    mkw = mapped ? stax_graph_map_arg(kwargs, p_cur_fn, c) : NULL;
    if (mkw == NULL) {
        goto done;
    }
    if (known && r.info != NULL) {
        bound = stax_graph_p_bind(r.info, mapped, PyDict_Check(mkw) ? mkw : NULL);
        if (bound == NULL) {
            /* a call the schema does not describe: copied as it is */
            PyErr_Clear();
            known = 0;
        }
    }
    if (known && r.info != NULL) {
        /* scalar arithmetic among Python numbers stays as it is */
        int any_tensor = p_any_tensor_arg(args, mapped);
        /* does the result share the input's storage (on the samples)? a
         * view op that copied (reshape of a non-contiguous tensor) is a
         * fresh value; contiguous()/to() that returned the input is an
         * alias */
        int alias = -1;
        if (PyTuple_GET_SIZE(args) > 0
            && stax_graph_p_is_node(PyTuple_GET_ITEM(args, 0))) {
            alias = stax_graph_p_shares_storage(
                stax_graph_p_val(n),
                stax_graph_p_val(stax_graph_fz_resolve(
                    c, PyTuple_GET_ITEM(args, 0))));
        }
        if (((r.info->kind == STAX_OPK_VIEW && alias != 0) || alias == 1)
            && PyTuple_GET_SIZE(mapped) > 0
            && stax_graph_p_is_node(PyTuple_GET_ITEM(args, 0))) {
            rc = p_table_view(c, n, r.info, PyTuple_GET_ITEM(args, 0), bound);
            goto done;
        }
        if (any_tensor && r.is_operator && PyTuple_GET_SIZE(mapped) == 2
            && stax_graph_p_is_number(PyTuple_GET_ITEM(mapped, 0))
            && stax_graph_p_is_node(PyTuple_GET_ITEM(mapped, 1))
            && r.info->id != STAX_OP_POW) {
            v = p_scalar_first(c, n, r.info, mapped);
            rc = v ? stax_graph_fz_root(c, n, v) : -1;
            goto done;
        }
        if (any_tensor || !r.is_operator) {
            /* n is this one op: its traced value is the op node's (a
             * random op's too: emitting draws again and then puts the
             * generator back) */
            PyObject *nv = stax_graph_p_val(n);
            c->known_val = nv != NULL && p_is_tensor_val(nv) ? nv : NULL;
            v = p_emit_op(c, r.info, bound);
            c->known_val = NULL;
            if (v == NULL) {
                goto done;
            }
            rc = stax_graph_fz_root(c, n, v);
            goto done;
        }
    }
    /* a view outside the table (diagonal, movedim, unfold ...): on the
     * samples it shares the argument's storage; a write through it must
     * reach the argument, so it is taken as as_strided of the argument */
    if (PyTuple_GET_SIZE(args) > 0
        && stax_graph_p_is_node(PyTuple_GET_ITEM(args, 0))) {
        PyObject *tail = p_generic_view_tail(c, n, PyTuple_GET_ITEM(args, 0));
        if (tail == NULL && PyErr_Occurred()) {
            goto done;
        }
        if (tail != NULL && r.call != NULL && r.call->kind == STAX_CALLK_VIEW) {
            /* a view lowering maps by its own arguments (diagonal,
             * movedim): the call itself, whose sizes follow its input's
             * (a sample's as_strided would fix them); functionalization
             * takes it again, or scatters a write through it, as the
             * as_strided it is on the samples */
            v = p_copy_node(c, n, opc, mapped, mkw);
            rc = v != NULL ? stax_graph_fz_view(c, n, PyTuple_GET_ITEM(args, 0), "as_strided",
                                                "default", tail, v, stax_graph_p_val(n))
                           : -1;
            Py_DECREF(tail);
            goto done;
        }
        if (tail != NULL) {
            v = stax_graph_p_view_step(c, n, PyTuple_GET_ITEM(args, 0),
                                       "as_strided", "default", tail,
                                       stax_graph_p_val(n));
            Py_DECREF(tail);
            rc = v ? 0 : -1;
            goto done;
        }
    }
    /* not an op of the table (or scalar arithmetic): copied as it is */
    rc = p_copy_call(c, n, opc, mapped, mkw);
done:
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_XDECREF(mapped);
    Py_XDECREF(mkw);
    Py_XDECREF(bound);
    Py_XDECREF(v);
    return rc;
}

/* ---- make_op_graph --------------------------------------------------- */

/* 1 if `user` writes its first argument back into the input or constant
 * `ph` (the write-back copy_ of functionalization) */
static int
p_is_writeback_of(PyObject *user, PyObject *ph)
{
    PyObject *m = stax_graph_p_attr(user, "meta");
    PyObject *ov = m && PyDict_Check(m) ? PyDict_GetItemString(m, "op_overload")
                                        : NULL;
    const char *tag = ov != NULL && PyUnicode_Check(ov) ? PyUnicode_AsUTF8(ov) : NULL;
    const char *ovl = NULL;
    const stax_op_info *row = tag ? stax_op_by_overload(tag, &ovl) : NULL;
    int r = row != NULL && row->id == STAX_OP_COPY_ && !strcmp(ovl, "default");
    Py_XDECREF(m);
    if (r) {
        PyObject *a = stax_graph_p_attr(user, "args");
        r = a && PyTuple_Check(a) && PyTuple_GET_SIZE(a) >= 1
            && PyTuple_GET_ITEM(a, 0) == ph
            && (stax_graph_p_opcode(ph) == P_PLACEHOLDER
                || stax_graph_p_opcode(ph) == P_GET_ATTR);
        Py_XDECREF(a);
    }
    PyErr_Clear();
    return r;
}

/* A node that mutates its first argument's buffer (a fallback kernel)
 * must not change a value another node still reads, nor an input before
 * its write-back: such an argument is cloned first (the clone is the
 * buffer the op writes). */
static int
p_private_copies(PyObject *graph)
{
    PyObject *nodes = stax_graph_p_nodes(graph);
    PyObject *target = NULL;
    int rc = -1;
    if (nodes == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        PyObject *n = PyList_GET_ITEM(nodes, i);
        PyObject *meta = stax_graph_p_attr(n, "meta");
        int mut = meta && PyDict_Check(meta)
                  && PyDict_GetItemString(meta, "mutates") != NULL;
        Py_XDECREF(meta);
        PyObject *args = mut ? stax_graph_p_attr(n, "args") : NULL;
        PyErr_Clear();
        if (args == NULL || !PyTuple_Check(args) || PyTuple_GET_SIZE(args) < 1
            || !stax_graph_p_is_node(PyTuple_GET_ITEM(args, 0))
            || p_is_writeback_of(n, PyTuple_GET_ITEM(args, 0))) {
            Py_XDECREF(args);
            continue;
        }
        PyObject *a0 = PyTuple_GET_ITEM(args, 0);
        PyObject *users = stax_graph_p_attr(a0, "users");
        PyObject *ul = users ? PySequence_List(users) : NULL;
        Py_XDECREF(users);
        if (ul == NULL) {
            Py_DECREF(args);
            goto done;
        }
        int other = 0;
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(ul); k++) {
            PyObject *u = PyList_GET_ITEM(ul, k);
            other |= u != n && !p_is_writeback_of(u, a0);
        }
        Py_DECREF(ul);
        if (!other) {
            Py_DECREF(args);
            continue;
        }
        if (target == NULL && (target = p_op_target("clone", "default")) == NULL) {
            Py_DECREF(args);
            goto done;
        }
        PyObject *ca = PyTuple_Pack(1, a0);
        PyObject *cl = ca ? stax_graph_p_insert(graph, n, "call_function",
                                                target, ca, NULL, 0) : NULL;
        Py_XDECREF(ca);
        PyObject *tag = cl ? PyUnicode_FromString("clone.default") : NULL;
        PyObject *v0 = stax_graph_p_val(a0);
        int e = tag == NULL || p_meta_set(cl, "op_overload", tag) < 0
                || (v0 != NULL && p_meta_set(cl, "val", v0) < 0)
                || stax_graph_p_copy_stack(cl, n) < 0;
        Py_XDECREF(tag);
        PyObject *na = e ? NULL : PyTuple_GetSlice(args, 1, PyTuple_GET_SIZE(args));
        PyObject *head = na ? PyTuple_Pack(1, cl) : NULL;
        PyObject *full = head ? PySequence_Concat(head, na) : NULL;
        Py_XDECREF(na);
        Py_XDECREF(head);
        Py_XDECREF(cl);
        Py_DECREF(args);
        if (full == NULL || stax_graph_p_set_args(n, full, NULL) < 0) {
            Py_XDECREF(full);
            goto done;
        }
        Py_DECREF(full);
    }
    rc = 0;
done:
    Py_XDECREF(target);
    Py_DECREF(nodes);
    return rc;
}

/* views taken but never read, values superseded by a scatter: dead code
 * of the op graph (mutating nodes and placeholders stay) */
static int
p_op_dce(PyObject *graph)
{
    PyObject *nodes = stax_graph_p_nodes(graph);
    if (nodes == NULL) {
        return -1;
    }
    for (Py_ssize_t i = PyList_GET_SIZE(nodes) - 1; i >= 0; i--) {
        PyObject *n = PyList_GET_ITEM(nodes, i);
        p_opcode_t op = stax_graph_p_opcode(n);
        if (op != P_CALL_FUNCTION) {
            PyErr_Clear();
            continue;
        }
        PyObject *meta = stax_graph_p_attr(n, "meta");
        int keep = meta == NULL || !PyDict_Check(meta)
                   || PyDict_GetItemString(meta, "mutates") != NULL
                   || PyDict_GetItemString(meta, "sample_error") != NULL
                   || PyDict_GetItemString(meta, "keep_dead") != NULL;
        Py_XDECREF(meta);
        PyErr_Clear();
        p_opref r;
        stax_graph_p_node_opref(n, &r);
        keep |= r.inplace || r.random || stax_graph_p_may_raise(n);
        if (keep || stax_graph_p_users_count(n) != 0) {
            continue;
        }
        if (stax_graph_p_erase(graph, n) < 0) {
            Py_DECREF(nodes);
            return -1;
        }
    }
    Py_DECREF(nodes);
    return 0;
}

static PyObject *op_graph_build(PyObject *gm, PyObject *basis, int keep_dead);

PyObject *
stax_graph_p_make_op_graph(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"gm", "basis", "keep_dead", NULL};
    PyObject *gm = NULL, *basis = Py_None;
    int keep_dead = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|Op:make_op_graph", kwlist,
                                     &gm, &basis, &keep_dead)) {
        return NULL;
    }
    return op_graph_build(gm, basis, keep_dead);
}

/* the op names of a basis (an iterable of names; "add.Tensor" counts as
 * "add") as a frozenset; new reference or NULL */
static PyObject *
basis_names(PyObject *basis)
{
    PyObject *names = PyList_New(0), *res = NULL, *x;
    PyObject *it = names ? PyObject_GetIter(basis) : NULL;
    if (it == NULL) {
        goto done;
    }
    while ((x = PyIter_Next(it)) != NULL) {
        PyObject *parts = PyUnicode_Check(x)
                          ? PyUnicode_Split(x, PyUnicode_FromString("."), 1)
                          : NULL;
        int e = parts ? PyList_Append(names, PyList_GET_ITEM(parts, 0)) : -1;
        Py_XDECREF(parts);
        Py_DECREF(x);
        if (e < 0) {
            goto done;
        }
    }
    if (!PyErr_Occurred()) {
        res = PyFrozenSet_New(names);
    }
done:
    Py_XDECREF(it);
    Py_XDECREF(names);
    return res;
}

/* a placeholder of the Python-level graph: primals_<k> */
static int
op_placeholder(p_op_ctx *c, PyObject *n, int k)
{
    char name[32];
    PyObject *ph, *val, *pair;
    int rc = -1;
    snprintf(name, sizeof(name), "primals_%d", k);
    ph = PyObject_CallMethod(c->graph, "placeholder", "s", name);
    if (ph == NULL) {
        return -1;
    }
    val = stax_graph_p_val(n);
    pair = PyTuple_Pack(2, n, ph);
    if (pair != NULL && (val == NULL || p_meta_set(ph, "val", val) == 0)
        && PyList_Append(c->placeholders, pair) == 0
        && stax_graph_fz_root(c, n, ph) == 0) {
        rc = 0;
    }
    Py_XDECREF(pair);
    Py_DECREF(ph);
    return rc;
}

static int
op_get_attr(p_op_ctx *c, PyObject *n)
{
    PyObject *t = stax_graph_p_attr(n, "target");
    PyObject *e = t ? PyTuple_New(0) : NULL;
    PyObject *nn = e ? p_create(c, "get_attr", t, e, NULL, PyUnicode_AsUTF8(t)) : NULL;
    PyObject *val;
    int rc = -1;
    Py_XDECREF(t);
    Py_XDECREF(e);
    val = nn ? stax_graph_p_val(n) : NULL;
    /* a constant held by reference (a tensor the trace met that was not
     * lifted: in a dict, a list) is written back like a placeholder when
     * the function writes it in place */
    PyObject *pair = nn ? PyTuple_Pack(2, n, nn) : NULL;
    if (pair != NULL && (val == NULL || p_meta_set(nn, "val", val) == 0)
        && PyList_Append(c->placeholders, pair) == 0
        && stax_graph_fz_root(c, n, nn) == 0) {
        rc = 0;
    }
    Py_XDECREF(pair);
    Py_XDECREF(nn);
    return rc;
}

/* write-backs, the output, value numbering of identical decomposition
 * subchains, DCE, and the op-level GraphModule (new reference) */
static PyObject *
op_finish(p_op_ctx *c, PyObject *gm, PyObject *outv)
{
    PyObject *tp, *res;
    p_pass_ctx pc = {0};
    int e;
    c->cur_py = NULL;
    if (stax_graph_fz_writeback(c) < 0) {
        return NULL;
    }
    if (outv != NULL) {
        PyObject *o = PyTuple_GET_SIZE(outv) > 0 ? PyTuple_GET_ITEM(outv, 0) : Py_None;
        PyObject *r = PyObject_CallMethod(c->graph, "output", "(O)", o);
        if (r == NULL) {
            return NULL;
        }
        Py_DECREF(r);
    }
    pc.graph = c->graph;
    pc.msg = PyList_New(0);
    e = pc.msg ? stax_graph_p_cse(&pc) : -1;
    Py_XDECREF(pc.msg);
    if (e < 0 || (!c->keep_dead && p_op_dce(c->graph) < 0)
        || p_private_copies(c->graph) < 0) {
        return NULL;
    }
    tp = stax_graph_p_opgm();
    res = tp ? PyObject_CallFunction(tp, "OO", gm, c->graph) : NULL;
    if (res == NULL && tp != NULL) {
        PyErr_Clear();
        res = PyObject_CallFunction(tp, "O", c->graph);
    }
    return res;
}

PyObject *
stax_graph_make_op_graph(PyObject *gm, PyObject *basis)
{
    return op_graph_build(gm, basis, 0);
}

int
stax_graph_p_mark_sample_sized(PyObject *node)
{
    return p_meta_set(node, "sample_sized", Py_True);
}

PyObject *
stax_graph_make_op_graph_at(PyObject *gm, PyObject *vals)
{
    if (vals == NULL || vals == Py_None) {
        return op_graph_build(gm, NULL, 0);
    }
    /* the build reads every node's sample from meta['val']: those of vals
     * stand in for it while the op graph is built, then the traced ones
     * are put back */
    PyObject *graph = PyObject_GetAttrString(gm, "graph");
    PyObject *nodes = graph ? stax_graph_p_nodes(graph) : NULL;
    PyObject *saved = nodes ? PyList_New(0) : NULL;   /* (meta, old val or None) */
    PyObject *res = NULL;
    Py_XDECREF(graph);
    for (Py_ssize_t i = 0; saved != NULL && i < PyList_GET_SIZE(nodes); i++) {
        PyObject *n = PyList_GET_ITEM(nodes, i);
        PyObject *v = PyDict_GetItemWithError(vals, n);
        if (v == NULL || !StaxNode_Check(n)) {
            if (PyErr_Occurred()) {
                goto restore;
            }
            continue;
        }
        PyObject *meta = ((StaxNode *)n)->meta;
        PyObject *old = PyDict_GetItemString(meta, "val");
        PyObject *pair = PyTuple_Pack(2, meta, old ? old : Py_None);
        if (pair == NULL || PyList_Append(saved, pair) < 0
            || PyDict_SetItemString(meta, "val", v) < 0) {
            Py_XDECREF(pair);
            goto restore;
        }
        Py_DECREF(pair);
    }
    if (saved != NULL) {
        res = op_graph_build(gm, NULL, 0);
    }
restore:
    for (Py_ssize_t i = 0; saved != NULL && i < PyList_GET_SIZE(saved); i++) {
        PyObject *pair = PyList_GET_ITEM(saved, i);
        PyObject *meta = PyTuple_GET_ITEM(pair, 0), *old = PyTuple_GET_ITEM(pair, 1);
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (old == Py_None ? PyDict_DelItemString(meta, "val") : PyDict_SetItemString(meta, "val", old)) {
            PyErr_Clear();
        }
        PyErr_Restore(et, ev, tb);
    }
    Py_XDECREF(saved);
    Py_XDECREF(nodes);
    return res;
}

int
stax_graph_op_graph_sample_sized(PyObject *og)
{
    PyObject *graph = PyObject_GetAttrString(og, "graph");
    PyObject *nodes = graph ? stax_graph_p_nodes(graph) : NULL;
    int r = nodes != NULL ? 0 : -1;
    Py_XDECREF(graph);
    for (Py_ssize_t i = 0; nodes != NULL && i < PyList_GET_SIZE(nodes) && !r; i++) {
        PyObject *n = PyList_GET_ITEM(nodes, i);
        r = StaxNode_Check(n) && PyDict_GetItemString(((StaxNode *)n)->meta, "sample_sized") != NULL;
    }
    Py_XDECREF(nodes);
    return r;
}

static PyObject *
op_graph_build(PyObject *gm, PyObject *basis, int keep_dead)
{
    PyObject *graph = NULL, *nodes = NULL;
    PyObject *res = NULL, *outv = NULL;
    p_op_ctx c = {0};
    int nph = 0;
    /* emitting a random op runs it on the samples: the op graph is built
     * at compile time and must leave the generator where it was */
    StaxGenerator *gen = stax_default_generator();
    uint64_t gen_seed = gen ? gen->seed : 0, gen_off = gen ? gen->offset : 0;
    graph = PyObject_GetAttrString(gm, "graph");
    if (graph == NULL || stax_graph_p_learn_node_type(graph) < 0) {
        goto done;
    }
    nodes = stax_graph_p_nodes(graph);
    c.graph = stax_graph_new();
    c.state = PyDict_New();
    c.ver = PyDict_New();
    c.alias = PyDict_New();
    c.placeholders = PyList_New(0);
    if (nodes == NULL || c.graph == NULL || !c.state || !c.ver || !c.alias
        || !c.placeholders) {
        goto done;
    }
    c.keep_dead = keep_dead;
    if (basis != NULL && basis != Py_None && (c.basis = basis_names(basis)) == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        PyObject *n = PyList_GET_ITEM(nodes, i);
        p_opcode_t op = stax_graph_p_opcode(n);
        int rc;
        c.cur_py = n;
        switch (op) {
        case P_UNKNOWN:
            goto done;
        case P_PLACEHOLDER:
            rc = op_placeholder(&c, n, ++nph);
            break;
        case P_OUTPUT: {
            PyObject *a = stax_graph_p_attr(n, "args");
            outv = a ? stax_graph_map_arg(a, p_cur_fn, &c) : NULL;
            Py_XDECREF(a);
            rc = outv == NULL ? -1 : 0;
            break;
        }
        case P_GET_ATTR:
            rc = op_get_attr(&c, n);
            break;
        default:
            rc = p_lower_call(&c, n, op);
            break;
        }
        if (rc < 0) {
            goto done;
        }
    }
    res = op_finish(&c, gm, outv);
done:
    if (gen != NULL) {
        gen->seed = gen_seed;
        gen->offset = gen_off;
    }
    Py_XDECREF(graph);
    Py_XDECREF(nodes);
    Py_XDECREF(outv);
    Py_XDECREF(c.graph);
    Py_XDECREF(c.basis);
    Py_XDECREF(c.state);
    Py_XDECREF(c.ver);
    Py_XDECREF(c.alias);
    Py_XDECREF(c.placeholders);
    return res;
}
