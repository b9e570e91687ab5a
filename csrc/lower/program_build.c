/* Building a CompiledProgram from a graph: the stax_backend entry point
 * (picks the Python-level or op-level graph, propagates shapes when the
 * examples differ from the traced ones) and lw_build_program, which lowers
 * every node (native rule, library call or fallback kernel), makes the
 * output template, finalizes (fusion, buffer plan, compile) and collects
 * the kernels' descriptions. */
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "tensor/stax_numpy.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- driver */
/* the op name of a node's target (new str) or NULL (no exception) */
static PyObject *
target_name(PyObject *node, int *is_method)
{
    PyObject *op = PyObject_GetAttrString(node, "op");
    PyObject *tg = PyObject_GetAttrString(node, "target");
    PyObject *r = NULL;
    *is_method = 0;
    if (op == NULL || tg == NULL) {
        goto done;
    }
    if (PyUnicode_Check(tg)) {
        *is_method = PyUnicode_CompareWithASCIIString(op, "call_method") == 0;
        r = Py_NewRef(tg);
        goto done;
    }
    {
        /* operator.truediv -> div, operator.iadd -> add_ (ops.def's rows) */
        int ip = 0;
        const stax_pyop_info *po = stax_pyop_for_target(tg, &ip);
        const stax_op_info *o = po ? stax_pyop_op(po, ip) : NULL;
        if (o != NULL) {
            r = PyUnicode_FromString(o->name);
            goto done;
        }
    }
    r = PyObject_GetAttrString(tg, "_stax_op");
    if (r == NULL) {
        PyErr_Clear();
        r = PyObject_GetAttrString(tg, "__name__");
    }
    if (r != NULL && !PyUnicode_Check(r)) {
        Py_CLEAR(r);
    }
done:
    PyErr_Clear();
    Py_XDECREF(op);
    Py_XDECREF(tg);
    return r;
}

/* A call node's target: its name (new str, or NULL without exception),
 * base (the op-table spelling: method aliases (ops.def's STAX_CALL rows) and
 * ".overload" resolved, "" when unknown), *op (the op table's info for base,
 * or NULL) and *call (the STAX_CALL row of a name without an op row, or
 * NULL); resolved once here, the rules switch on ids. */
static PyObject *
node_target(PyObject *node, int *is_method, char *base, size_t nbase,
            const stax_op_info **op, const stax_call_info **call)
{
    PyObject *nm = target_name(node, is_method);
    const char *opname = nm ? PyUnicode_AsUTF8(nm) : NULL;
    const stax_call_info *ci = opname ? stax_call_by_name(opname) : NULL;
    base[0] = 0;
    *call = NULL;
    if (opname == NULL) {
        PyErr_Clear();
    }
    else if (ci != NULL && ci->kind == STAX_CALLK_ALIAS) {
        snprintf(base, nbase, "%s", stax_op_table[ci->op].name);
    }
    else {
        /* "add.Tensor" (op overloads) -> "add" */
        snprintf(base, nbase, "%s", opname);
        char *dot = strchr(base, '.');
        if (dot) {
            *dot = 0;
        }
    }
    *op = base[0] ? stax_op_by_name(base) : NULL;
    if (*op == NULL) {
        *call = ci;
    }
    return nm;
}

static PyObject *
node_stack(PyObject *node)
{
    PyObject *meta = PyObject_GetAttrString(node, "meta");
    PyObject *st = meta && PyDict_Check(meta) ? PyDict_GetItemString(meta, "stack") : NULL;
    PyObject *r = st ? PyObject_Str(st) : PyUnicode_FromString("<unknown source line>");
    Py_XDECREF(meta);
    return r;
}

static PyObject *
node_val(PyObject *node, PyObject *vals)
{
    if (vals != NULL) {
        PyObject *v = PyDict_GetItemWithError(vals, node);
        PyErr_Clear();
        return Py_XNewRef(v);
    }
    PyObject *meta = PyObject_GetAttrString(node, "meta");
    PyObject *v = NULL;
    if (meta != NULL && PyDict_Check(meta)) {
        v = PyDict_GetItemString(meta, "val");
        Py_XINCREF(v);
    }
    Py_XDECREF(meta);
    PyErr_Clear();
    return v;
}

typedef struct {
    lw_ctx *c;
    vbuf **vb;
    PyObject *index;
    const char *why;
    PyObject *vals;
    int ncopy;                 /* functionalized input mutations: */
    vbuf *copy_src[64];        /* an output that is the new value of a */
    int copy_dst[64];          /* mutated input returns that input */
} tmpl_ctx;

static PyObject *node_val(PyObject *node, PyObject *vals);

static void
mark_output(tmpl_ctx *t, int pb, PyObject *val)
{
    t->c->pbufs[pb].is_output = 1;
    if (val != NULL && StaxTensor_Check(val) && ((StaxTensor *)val)->requires_grad) {
        t->c->pbufs[pb].requires_grad = 1;
    }
}

typedef struct {
    tmpl_ctx *t;
    int for_output;
} template_arg;

/* one Node of a template: its SlotRef (or constant), materializing what
 * its value needs */
static PyObject *
template_node(PyObject *o, void *ctx)
{
    tmpl_ctx *t = ((template_arg *)ctx)->t;
    int for_output = ((template_arg *)ctx)->for_output;
    PyObject *ix = PyDict_GetItemWithError(t->index, o);
    if (ix == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "stax: node used before definition");
        }
        return NULL;
    }
    vbuf *v = t->vb[PyLong_AsLong(ix)];
    if (v == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "stax: node without a value");
        return NULL;
    }
    if (for_output) {
        for (int q = 0; q < t->ncopy; q++) {
            if (t->copy_src[q] == v) {
                return lw_slotref_new(t->copy_dst[q]);
            }
        }
    }
    if (v->kind == VB_PYOBJ) {
        if (v->pbuf < 0) {
            return Py_NewRef(v->obj ? v->obj : Py_None);
        }
        if (for_output) {
            /* a non-tensor value (x.type(), x.data_ptr()) returned: its slot
             * must outlive the steps, like a tensor output's */
            mark_output(t, v->pbuf, NULL);
        }
        return lw_slotref_new(v->pbuf);
    }
    if (v->kind == VB_TUPLE) {
        PyObject *tup = PyTuple_New(v->nitems);
        for (int i = 0; tup && i < v->nitems; i++) {
            int pb = lw_materialize(t->c, v->items[i]);
            PyObject *e = pb < 0 ? NULL : lw_slotref_new(pb);
            if (e == NULL) {
                Py_CLEAR(tup);
                break;
            }
            if (for_output) {
                PyObject *nv = node_val(o, t->vals);
                PyObject *iv = nv && PyTuple_Check(nv) && i < PyTuple_GET_SIZE(nv)
                                   ? PyTuple_GET_ITEM(nv, i) : NULL;
                mark_output(t, pb, iv);
                Py_XDECREF(nv);
            }
            PyTuple_SET_ITEM(tup, i, e);
        }
        return tup;
    }
    int pb = lw_materialize(t->c, v);
    if (pb < 0) {
        return NULL;
    }
    if (for_output) {
        PyObject *nv = node_val(o, t->vals);
        mark_output(t, pb, nv);
        Py_XDECREF(nv);
    }
    return lw_slotref_new(pb);
}

/* replace Nodes by SlotRefs (materializing what a value needs) */
static PyObject *
make_template(tmpl_ctx *t, PyObject *o, int for_output)
{
    template_arg ctx = {t, for_output};
    return stax_graph_map_arg(o, template_node, &ctx);
}

static int
make_fallback(lw_ctx *c, tmpl_ctx *t, PyObject *node, PyObject *val, int is_method,
              vbuf **out)
{
    PyObject *args = PyObject_GetAttrString(node, "args");
    PyObject *kwargs = args ? PyObject_GetAttrString(node, "kwargs") : NULL;
    PyObject *target = kwargs ? PyObject_GetAttrString(node, "target") : NULL;
    PyObject *ta = NULL, *tk = NULL;
    int rc = -1;
    if (target == NULL) {
        goto done;
    }
    ta = make_template(t, args, 0);
    tk = ta ? make_template(t, kwargs == Py_None ? NULL : kwargs, 0) : NULL;
    if (ta != NULL && kwargs != NULL && tk == NULL && !PyErr_Occurred()) {
        tk = PyDict_New();
    }
    if (tk == NULL || tk == Py_None) {
        Py_XDECREF(tk);
        tk = ta ? PyDict_New() : NULL;
        if (tk == NULL) {
            goto done;
        }
    }
    if (!PyTuple_Check(ta)) {
        PyObject *x = PySequence_Tuple(ta);
        Py_SETREF(ta, x);
        if (ta == NULL) {
            goto done;
        }
    }
    step_t *s = lw_new_step(c, ST_FALLBACK);
    if (s == NULL) {
        goto done;
    }
    s->target = Py_NewRef(target);
    s->is_method = is_method;
    s->args = ta;
    s->kwargs = tk;
    ta = tk = NULL;
    s->stack = node_stack(node);
    vbuf *v = stax_arena_alloc(c->arena, sizeof(vbuf));
    if (v == NULL) {
        goto done;
    }
    v->pbuf = -1;
    int nd;
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    stax_dtype_t dt;
    int step_index = c->nsteps - 1;
    if (val != NULL && lw_val_info(val, &nd, sz, st, &dt)) {
        int pb = lw_new_pbuf(c, PB_EXTERN, nd, sz, dt);
        if (pb < 0) {
            goto done;
        }
        c->steps[step_index].out = pb;
        if (lw_vb_over_pbuf(c, v, pb) < 0) {
            goto done;
        }
    }
    else if (val != NULL && PyTuple_Check(val)) {
        int pb = lw_new_pbuf(c, PB_EXTERN, 0, sz, STAX_FLOAT32);
        if (pb < 0) {
            goto done;
        }
        c->pbufs[pb].ndim = -1;   /* an object, not a tensor */
        c->steps[step_index].out = pb;
        Py_ssize_t n = PyTuple_GET_SIZE(val);
        v->kind = VB_TUPLE;
        v->nitems = (int)n;
        v->items = stax_arena_alloc(c->arena, sizeof(vbuf *) * (size_t)(n ? n : 1));
        if (v->items == NULL) {
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            vbuf *it = stax_arena_alloc(c->arena, sizeof(vbuf));
            if (it == NULL) {
                goto done;
            }
            it->pbuf = -1;
            v->items[i] = it;
            PyObject *e = PyTuple_GET_ITEM(val, i);
            if (!lw_val_info(e, &nd, sz, st, &dt)) {
                it->kind = VB_PYOBJ;
                it->obj = e;
                continue;
            }
            int ob = lw_new_pbuf(c, PB_EXTERN, nd, sz, dt);
            step_t *x = ob < 0 ? NULL : lw_new_step(c, ST_EXTRACT);
            if (x == NULL) {
                goto done;
            }
            x->src = pb;
            x->index = i;
            x->out = ob;
            if (lw_vb_over_pbuf(c, it, ob) < 0) {
                goto done;
            }
        }
    }
    else {
        int pb = lw_new_pbuf(c, PB_EXTERN, 0, sz, STAX_FLOAT32);
        if (pb < 0) {
            goto done;
        }
        c->pbufs[pb].ndim = -1;
        c->steps[step_index].out = pb;
        v->kind = VB_PYOBJ;
        v->pbuf = pb;
    }
    c->nfallbacks++;
    *out = v;
    rc = 0;
done:
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_XDECREF(target);
    Py_XDECREF(ta);
    Py_XDECREF(tk);
    return rc;
}

/* the call as the user wrote it: "Tensor.data_ptr()", "tensorplay.rand()",
 * "Tensor.nbytes" (new str) */
static PyObject *
user_call(PyObject *node, const char *opname)
{
    PyObject *op = PyObject_GetAttrString(node, "op");
    PyObject *tg = op ? PyObject_GetAttrString(node, "target") : NULL;
    PyObject *args = tg ? PyObject_GetAttrString(node, "args") : NULL;
    PyObject *r = NULL;
    if (args != NULL) {
        if (PyUnicode_Check(tg) && PyUnicode_CompareWithASCIIString(op, "call_method") == 0) {
            r = PyUnicode_FromFormat("Tensor.%U()", tg);
        }
        else if (PyUnicode_Check(tg)) {
            r = PyUnicode_FromFormat("%U", tg);
        }
        else {
            PyObject *nm = PyObject_GetAttrString(tg, "__name__");
            PyObject *mod = nm ? PyObject_GetAttrString(tg, "__module__") : NULL;
            const stax_pyop_info *po = stax_pyop_for_target(tg, NULL);
            PyErr_Clear();
            if (nm != NULL && PyUnicode_Check(nm) && PyUnicode_CompareWithASCIIString(nm, "getattr") == 0
                && PyTuple_Check(args) && PyTuple_GET_SIZE(args) == 2) {
                r = PyUnicode_FromFormat("Tensor.%S", PyTuple_GET_ITEM(args, 1));
            }
            else if (po != NULL && po->key == STAX_PYOP_GETITEM) {
                r = PyUnicode_FromString("indexing x[...]");
            }
            else if (po != NULL && po->key == STAX_PYOP_SETITEM) {
                r = PyUnicode_FromString("index assignment x[...] = v");
            }
            else if (nm != NULL && mod != NULL && PyUnicode_Check(mod)
                     && PyUnicode_CompareWithASCIIString(mod, "_operator") == 0) {
                r = PyUnicode_FromFormat("the operator %U", nm);
            }
            else if (nm != NULL && mod != NULL && PyUnicode_Check(mod)) {
                r = PyUnicode_FromFormat("%U.%U()", mod, nm);
            }
            else if (nm != NULL) {
                r = PyUnicode_FromFormat("%U()", nm);
            }
            Py_XDECREF(nm);
            Py_XDECREF(mod);
        }
    }
    PyErr_Clear();
    Py_XDECREF(op);
    Py_XDECREF(tg);
    Py_XDECREF(args);
    return r != NULL ? r : PyUnicode_FromString(opname ? opname : "?");
}

/* a lowering reason in the user's words (the tracer's, the op table's and
 * the lowering's vocabulary stays out of strict_native's message) */
static const char *
user_reason(const char *why)
{
    static const char *const map[][2] = {
        {"no op of the op table matches the node's target",
         "tensorplay.compile has no compiled form of this call"},
        {"node value is not a tensor", "its result is not a tensor"},
        {"op without a lowering rule", "the native back end has no kernel for this op"},
        {"node without meta['val']", "its value could not be computed while tracing"},
        {"mutation of an expanded input",
         "it writes in place into an expanded input (several elements share one memory "
         "location); clone() the input first"},
        {NULL, NULL}};
    for (int i = 0; why != NULL && map[i][0]; i++) {
        if (!strcmp(why, map[i][0])) {
            return map[i][1];
        }
    }
    return why ? why : "unsupported";
}

/* strict_native's NativeCompileError for node: `call` (stolen; may be
 * NULL) names what could not be compiled, why says why */
static int
strict_raise(PyObject *node, PyObject *call, const char *why)
{
    PyObject *stack = node_stack(node);
    PyErr_Clear();
    PyErr_Format(stax_lower_NativeCompileError,
                 "strict_native: %U cannot be compiled natively: %s; at %U",
                 call ? call : Py_None, user_reason(why), stack ? stack : Py_None);
    Py_XDECREF(call);
    Py_XDECREF(stack);
    return -1;
}

static int
strict_error(PyObject *node, const char *opname, const char *why)
{
    return strict_raise(node, user_call(node, opname), why);
}

static int64_t
val_bytes(PyObject *v)
{
    int nd;
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    stax_dtype_t dt;
    if (!lw_val_info(v, &nd, sz, st, &dt)) {
        return 0;
    }
    int64_t n = lw_dtype_size(dt);
    for (int d = 0; d < nd; d++) {
        n *= sz[d];
    }
    return n;
}

/* one output pytree of the Python-level graph, Nodes replaced: fresh = 0,
 * a written output leaf (in `sel`) -> its input mask when nonzero; fresh = 1,
 * a leaf that is not an input itself (not in `sel`) -> its input mask
 * (possibly 0); everything else None */
static PyObject *
rg_extra_map(PyObject *o, PyObject *masks, PyObject *sel, int fresh, int *any)
{
    if (StaxNode_Type != NULL && PyObject_TypeCheck(o, StaxNode_Type)) {
        int in = (PyDict_Check(sel) ? PyDict_Contains(sel, o) : PySet_Contains(sel, o)) == 1;
        PyObject *m = in != fresh ? PyDict_GetItemWithError(masks, o) : NULL;
        if (m != NULL && (fresh || PyObject_IsTrue(m) == 1)) {
            *any = 1;
            return Py_NewRef(m);
        }
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (PyTuple_Check(o) || PyList_Check(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject *r = PyTuple_Check(o) ? PyTuple_New(n) : PyList_New(n);
        for (Py_ssize_t k = 0; r != NULL && k < n; k++) {
            PyObject *e = rg_extra_map(PySequence_Fast_GET_ITEM(o, k), masks,
                                       sel, fresh, any);
            if (e == NULL) {
                Py_CLEAR(r);
                break;
            }
            if (PyTuple_Check(r)) {
                PyTuple_SET_ITEM(r, k, e);
            }
            else {
                PyList_SET_ITEM(r, k, e);
            }
        }
        return r;
    }
    if (PyDict_Check(o)) {
        PyObject *r = PyDict_New(), *k, *v;
        Py_ssize_t pos = 0;
        while (r != NULL && PyDict_Next(o, &pos, &k, &v)) {
            PyObject *e = rg_extra_map(v, masks, sel, fresh, any);
            if (e == NULL || PyDict_SetItem(r, k, e) < 0) {
                Py_CLEAR(r);
            }
            Py_XDECREF(e);
        }
        return r;
    }
    Py_RETURN_NONE;
}

/* an in-place write of node into ph (a placeholder, or the root of a
 * chain of in-place nodes) with operands' mask m. Eager: the target now
 * requires grad when the write's operands do (ops' inplace_requires_grad);
 * later readers of it see that */
static int
rg_note_write(PyObject *node, PyObject *ph, uint64_t m, PyObject *masks,
              PyObject *roots, PyObject *alias, PyObject *phs, uint64_t *mutm,
              int *anym)
{
    Py_ssize_t pk = PyDict_Contains(alias, ph) == 1 ? PySequence_Index(phs, ph) : -1;
    PyObject *pm = PyDict_GetItemWithError(masks, ph);
    uint64_t cur = pm ? PyLong_AsUnsignedLongLong(pm) : 0;
    PyObject *nm2 = PyLong_FromUnsignedLongLong(cur | m);
    if (nm2 == NULL || PyDict_SetItem(masks, ph, nm2) < 0
        || PyDict_SetItem(roots, node, ph) < 0
        || (pk >= 0 && PyDict_SetItem(alias, node, ph) < 0)) {
        Py_XDECREF(nm2);
        return -1;
    }
    Py_DECREF(nm2);
    if (pk >= 0 && pk < 64) {
        mutm[pk] |= m | cur;
        *anym = 1;
    }
    return 0;
}

/* new reference: the rg_extra of the Python-level graph gm (see program.c:
 * rg_extra_apply), or NULL (none, no exception). Per node the mask of the
 * inputs its value comes from (0 for detach and non-floating values); an
 * in-place node adds its mask to the input it writes (through a chain of
 * in-place nodes: `alias`), so later readers of that input see it. */
static PyObject *
rg_extra_template(PyObject *gm)
{
    PyObject *g = PyObject_GetAttrString(gm, "graph");
    PyObject *l = g ? PyObject_GetAttrString(g, "nodes") : NULL;
    PyObject *nodes = l ? PySequence_List(l) : NULL;
    PyObject *masks = PyDict_New(), *written = PySet_New(NULL), *r = NULL;
    PyObject *alias = PyDict_New();          /* node -> the placeholder it is */
    PyObject *roots = PyDict_New();          /* in-place node -> its target */
    PyObject *phs = PyList_New(0);
    PyObject *rgt = NULL, *fresht = NULL, *mut = NULL;
    uint64_t mutm[64] = {0};
    int k = 0, any = 0, anyf = 0, anym = 0;
    Py_XDECREF(g);
    Py_XDECREF(l);
    for (Py_ssize_t i = 0; nodes && masks && written && alias && roots && phs
                           && i < PyList_GET_SIZE(nodes); i++) {
        PyObject *node = PyList_GET_ITEM(nodes, i);
        PyObject *op = PyObject_GetAttrString(node, "op");
        const char *opc = op ? PyUnicode_AsUTF8(op) : NULL;
        uint64_t m = 0;
        if (opc == NULL) {
            Py_XDECREF(op);
            goto done;
        }
        if (!strcmp(opc, "output")) {
            PyObject *a = PyObject_GetAttrString(node, "args");
            PyObject *o = a && PyTuple_Check(a) && PyTuple_GET_SIZE(a) == 1
                          ? PyTuple_GET_ITEM(a, 0) : a;
            rgt = o ? rg_extra_map(o, masks, written, 0, &any) : NULL;
            fresht = o ? rg_extra_map(o, masks, alias, 1, &anyf) : NULL;
            Py_XDECREF(a);
            Py_DECREF(op);
            break;
        }
        if (!strcmp(opc, "placeholder")) {
            m = 1ULL << (k < 63 ? k : 63);
            k++;
            if (PyDict_SetItem(alias, node, node) < 0 || PyList_Append(phs, node) < 0) {
                Py_DECREF(op);
                goto done;
            }
        }
        else {
            PyObject *ins = PyObject_GetAttrString(node, "all_input_nodes");
            PyObject *il = ins ? PySequence_List(ins) : NULL;
            Py_XDECREF(ins);
            int reads_written = 0;
            for (Py_ssize_t j = 0; il && j < PyList_GET_SIZE(il); j++) {
                PyObject *mm = PyDict_GetItemWithError(masks, PyList_GET_ITEM(il, j));
                m |= mm ? PyLong_AsUnsignedLongLong(mm) : 0;
                reads_written |= PySet_Contains(written, PyList_GET_ITEM(il, j)) == 1;
            }
            Py_XDECREF(il);
            /* a value computed from a tensor written in place (relu(v) after
             * v[:] = x) requires grad as that tensor does in eager: from its
             * creation, which the op graph's value (the write's) forgot */
            if (reads_written && PySet_Add(written, node) < 0) {
                Py_DECREF(op);
                goto done;
            }
            const stax_op_info *info;
            const stax_call_info *call;
            char base[96];
            int im = 0;
            Py_XDECREF(node_target(node, &im, base, sizeof(base), &info, &call));
            PyObject *val = node_val(node, NULL);
            if ((info != NULL && stax_op_nondiff(info))
                || (val != NULL && StaxTensor_Check(val)
                    && !lw_is_float(((StaxTensor *)val)->dtype))) {
                m = 0;   /* eager: the result never requires grad */
            }
            Py_XDECREF(val);
            /* a functional op's inplace=True (relu(v, inplace=True)) writes
             * v from v alone: nothing v's mask does not already hold */
            stax_node_writes_t w = stax_graph_node_writes(node);
            int inpl = w == STAX_WRITES_INPLACE;
            if (inpl || w == STAX_WRITES_SETITEM) {
                PyObject *a = PyObject_GetAttrString(node, "args");
                if (a && PyTuple_Check(a) && PyTuple_GET_SIZE(a) > 0) {
                    PyObject *a0 = PyTuple_GET_ITEM(a, 0);
                    PyObject *ph = NULL;
                    PySet_Add(written, a0);
                    if (inpl && StaxNode_Type != NULL
                        && PyObject_TypeCheck(a0, StaxNode_Type)) {
                        ph = PyDict_GetItemWithError(roots, a0);
                        ph = ph != NULL ? ph : a0;
                    }
                    if (ph != NULL) {
                        if (rg_note_write(node, ph, m, masks, roots, alias, phs,
                                          mutm, &anym) < 0) {
                            Py_DECREF(a);
                            Py_DECREF(op);
                            goto done;
                        }
                    }
                }
                Py_XDECREF(a);
            }
            PyErr_Clear();
        }
        Py_DECREF(op);
        PyObject *pm = PyLong_FromUnsignedLongLong(m);
        if (pm == NULL || PyDict_SetItem(masks, node, pm) < 0) {
            Py_XDECREF(pm);
            goto done;
        }
        Py_DECREF(pm);
    }
    if (anym && k > 0) {
        mut = PyTuple_New(k < 64 ? k : 64);
        for (int q = 0; mut != NULL && q < PyTuple_GET_SIZE(mut); q++) {
            PyObject *e = PyLong_FromUnsignedLongLong(mutm[q]);
            if (e == NULL) {
                Py_CLEAR(mut);
                break;
            }
            PyTuple_SET_ITEM(mut, q, e);
        }
    }
    if ((any && rgt) || (anyf && fresht) || mut) {
        r = PyTuple_Pack(3, any && rgt ? rgt : Py_None,
                         anyf && fresht ? fresht : Py_None,
                         mut ? mut : Py_None);
    }
done:
    Py_XDECREF(nodes);
    Py_XDECREF(masks);
    Py_XDECREF(written);
    Py_XDECREF(alias);
    Py_XDECREF(roots);
    Py_XDECREF(phs);
    Py_XDECREF(rgt);
    Py_XDECREF(fresht);
    Py_XDECREF(mut);
    PyErr_Clear();
    return r;
}

PyObject *
lw_stax_backend_fn(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    (void)mod;
    PyObject *gm = NULL, *examples = NULL;
    if (!PyArg_ParseTuple(args, "OO:stax_backend", &gm, &examples)) {
        return NULL;
    }
    return stax_lower_stax_backend(gm, examples, kwargs);
}

PyObject *
stax_lower_stax_backend(PyObject *gm, PyObject *examples, PyObject *kwargs)
{
    int strict = 0, dynamic = 0;
    if (kwargs != NULL && kwargs != Py_None) {
        PyObject *s = PyDict_GetItemString(kwargs, "strict_native");
        if (s != NULL && (strict = PyObject_IsTrue(s)) < 0) {
            return NULL;
        }
        s = PyDict_GetItemString(kwargs, "dynamic");
        if (s != NULL && (dynamic = PyObject_IsTrue(s)) < 0) {
            return NULL;
        }
    }
    const char *device = stax_lower_inputs_device(examples);
    stax_backend *be = device ? stax_lower_backend_for_device(device) : NULL;
    if (be == NULL) {
        return NULL;
    }
    return stax_lower_program(gm, examples, be, strict, dynamic);
}

PyObject *
stax_lower_program(PyObject *gm, PyObject *examples, stax_backend *be,
                   int strict, int dynamic)
{
    PyObject *ex = PySequence_Tuple(examples);
    if (ex == NULL) {
        return NULL;
    }
    /* a graph that mutates (in-place ops) is lowered from its op-level
     * graph, where functionalization turned mutations into values and
     * copy_ into the mutated inputs; others from the Python-level graph
     * (same semantics, no pass cost on the first call) */
    PyObject *gm_in = gm;
    gm = NULL;
    {
        PyObject *g0 = PyObject_GetAttrString(gm_in, "graph");
        PyObject *l0 = g0 ? PyObject_GetAttrString(g0, "nodes") : NULL;
        PyObject *n0 = l0 ? PySequence_List(l0) : NULL;
        Py_XDECREF(g0);
        Py_XDECREF(l0);
        /* a write (the graph room knows which calls write: in-place
         * twins, setitem, inplace=True) needs the functionalized graph */
        int mut = 0;
        for (Py_ssize_t i = 0; n0 && i < PyList_GET_SIZE(n0) && !mut; i++) {
            mut = stax_graph_node_is_inplace(PyList_GET_ITEM(n0, i));
        }
        Py_XDECREF(n0);
        PyErr_Clear();
        if (mut) {
            gm = stax_graph_make_op_graph(gm_in, NULL);
            if (gm == NULL) {
                PyErr_Clear();
            }
        }
        if (gm == NULL) {
            gm = Py_NewRef(gm_in);
        }
    }
    /* the graph's meta['val'] describe the traced sizes: other example
     * sizes (a per-layout artifact) need their own values */
    PyObject *vals = NULL;
    PyObject *graph = PyObject_GetAttrString(gm, "graph");
    PyObject *nl = graph ? PyObject_GetAttrString(graph, "nodes") : NULL;
    PyObject *nodes = nl ? PySequence_List(nl) : NULL;
    Py_XDECREF(graph);
    Py_XDECREF(nl);
    if (nodes == NULL) {
        Py_DECREF(ex);
        Py_DECREF(gm);
        return NULL;
    }
    int k = 0, differ = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes) && !differ; i++) {
        PyObject *node = PyList_GET_ITEM(nodes, i);
        PyObject *op = PyObject_GetAttrString(node, "op");
        if (op != NULL && PyUnicode_CompareWithASCIIString(op, "placeholder") == 0) {
            PyObject *v = node_val(node, NULL);
            int n1, n2;
            int64_t s1[STAX_MAX_DIMS], s2[STAX_MAX_DIMS], t1[STAX_MAX_DIMS], t2[STAX_MAX_DIMS];
            stax_dtype_t d1, d2;
            if (v != NULL && k < PyTuple_GET_SIZE(ex)
                && lw_val_info(v, &n1, s1, t1, &d1)
                && lw_val_info(PyTuple_GET_ITEM(ex, k), &n2, s2, t2, &d2)) {
                differ = n1 != n2 || d1 != d2
                         || memcmp(s1, s2, sizeof(int64_t) * (size_t)n1) != 0;
            }
            Py_XDECREF(v);
            k++;
        }
        else if (op != NULL && PyUnicode_CompareWithASCIIString(op, "output") != 0) {
            /* nodes a pass created without a value: propagate shapes */
            PyObject *v = node_val(node, NULL);
            differ |= v == NULL;
            Py_XDECREF(v);
        }
        Py_XDECREF(op);
    }
    PyErr_Clear();
    Py_DECREF(nodes);
    if (differ) {
        vals = lw_shape_prop(gm, ex);
        if (vals == NULL) {
            Py_DECREF(ex);
            Py_DECREF(gm);
            return NULL;
        }
    }
    PyObject *r = lw_build_program(gm, ex, be, strict, dynamic, vals, 0, NULL);
    if (r != NULL && ((Program *)r)->c.nrand > 0 && ((Program *)r)->c.nfallbacks > 0) {
        /* a fallback kernel could draw from the generator between native
         * draws: keep eager's order by running the random ops eagerly too */
        Py_SETREF(r, lw_build_program(gm, ex, be, strict, dynamic, vals, 1, NULL));
    }
    if (r != NULL && gm != gm_in) {
        Py_XSETREF(((Program *)r)->op_graph, Py_NewRef(gm));
        Py_XSETREF(((Program *)r)->rg_extra, rg_extra_template(gm_in));
    }
    Py_XDECREF(vals);
    Py_DECREF(ex);
    Py_DECREF(gm);
    return r;
}

/* Dynamic shapes: a node computing a symbolic size (x.size(1), t - 1,
 * b * t; compiler/_symbolic.py) from tensors' sizes and other such nodes
 * is a constant of the program: its value in vals (each size variant is
 * lowered for its own sizes, and in symbolic lowering the constants
 * become size arguments). 1: *out is that constant, 0: not such a node. */
static int
sym_node_const(lw_ctx *c, PyObject *node, const stax_call_info *call, PyObject *val, vbuf **vb,
               PyObject *index, vbuf **out)
{
    if (val == NULL || !(PyLong_CheckExact(val) || PyFloat_CheckExact(val) || PyBool_Check(val))) {
        return 0;
    }
    PyObject *tg = PyObject_GetAttrString(node, "target");
    int ip = 0;
    int is_size = tg != NULL && PyUnicode_Check(tg) && call != NULL && call->key == STAX_CALL_SIZE;
    int is_op = tg != NULL && !PyUnicode_Check(tg) && stax_pyop_for_target(tg, &ip) != NULL;
    Py_XDECREF(tg);
    PyErr_Clear();
    if (!is_size && !is_op) {
        return 0;
    }
    PyObject *args = PyObject_GetAttrString(node, "args");
    if (args == NULL || !PyTuple_Check(args)) {
        Py_XDECREF(args);
        PyErr_Clear();
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        if (!PyObject_TypeCheck(a, StaxNode_Type)) {
            continue;
        }
        PyObject *ix = PyDict_GetItem(index, a);
        vbuf *v = ix ? vb[PyLong_AsLong(ix)] : NULL;
        int ok = v != NULL && (is_size ? (i == 0 && v->kind == VB_TENSOR)
                                       : (v->kind == VB_PYOBJ && v->pbuf < 0));
        if (!ok) {
            Py_DECREF(args);
            return 0;
        }
    }
    Py_DECREF(args);
    if (c->symvals == NULL && (c->symvals = PyList_New(0)) == NULL) {
        return -1;
    }
    vbuf *v = lw_vb_new(c);
    if (v == NULL || PyList_Append(c->symvals, val) < 0) {
        return -1;
    }
    v->kind = VB_PYOBJ;
    v->pbuf = -1;
    v->obj = val;
    *out = v;
    return 1;
}

typedef struct {
    vbuf **vb;
    PyObject *index;
} symsub_ctx;

static PyObject *
symsub_node(PyObject *node, void *vctx)
{
    symsub_ctx *sc = vctx;
    PyObject *ix = PyDict_GetItem(sc->index, node);
    vbuf *v = ix ? sc->vb[PyLong_AsLong(ix)] : NULL;
    if (v != NULL && v->kind == VB_PYOBJ && v->pbuf < 0 && v->obj != NULL
        && (PyLong_Check(v->obj) || PyFloat_Check(v->obj))) {
        return Py_NewRef(v->obj);
    }
    return Py_NewRef(node);
}

/* node args with the symbolic-size nodes replaced by their values (the
 * rules read ints where the user passed t or t - 1) */
static PyObject *
subst_sym_args(PyObject *o, vbuf **vb, PyObject *index)
{
    symsub_ctx sc = {vb, index};
    if (o == NULL || o == Py_None) {
        return Py_XNewRef(o);
    }
    return stax_graph_map_arg(o, symsub_node, &sc);
}


/* ------------------------------------------------------------ stages */
/* lw_build_program runs these stages in order over one build state, like
 * the pass pipeline: each returns 0, or -1 with an exception set. */
typedef struct {
    PyObject *gm, *ex, *vals, *kcache;   /* borrowed (ex: owned by caller) */
    stax_backend *be;
    int strict, dynamic, no_random;
    PyObject *graph, *nodes, *index;     /* owned */
    Program *p;                          /* owned until returned */
    lw_ctx *c;
    vbuf **vb;                           /* per node, malloc'd */
    tmpl_ctx tc;
    int copy_nodes[64], ncopies;         /* copy_ into a placeholder / constant */
    PyObject *output_t;                  /* owned until moved to p */
    int nph;                             /* placeholders seen */
} lw_build;

/* the Program object, its lowering context and the per-input arrays */
static int
bs_setup(lw_build *b)
{
    PyObject *nl;
    b->graph = PyObject_GetAttrString(b->gm, "graph");
    nl = b->graph ? PyObject_GetAttrString(b->graph, "nodes") : NULL;
    b->nodes = nl ? PySequence_List(nl) : NULL;
    Py_XDECREF(nl);
    b->index = b->nodes ? PyDict_New() : NULL;
    if (b->index == NULL) {
        return -1;
    }
    Program *p = b->p = PyObject_GC_New(Program, lw_program_type);
    if (p == NULL) {
        return -1;
    }
    memset(((char *)p) + sizeof(PyObject), 0, sizeof(Program) - sizeof(PyObject));
    p->vectorcall = lw_program_vectorcall;
    p->out_single = -1;
    p->gm = Py_NewRef(b->gm);
    p->dynamic = b->dynamic;
    p->strict = b->strict;
    lw_ctx *c = b->c = &p->c;
    c->arena = stax_arena_new();
    c->be = b->be;
    c->strict = b->strict;
    c->no_random = b->no_random;
    static int force_symbolic = -1;
    if (force_symbolic < 0) {
        /* testing knob: lower static programs symbolically too */
        force_symbolic = getenv("STAX_SYMBOLIC") != NULL;
    }
    if ((b->dynamic || force_symbolic) && b->kcache == NULL) {
        /* the first size of the class: its kernels start the cache that
         * the variants (other sizes) share */
        p->kcache = PyDict_New();
        if (p->kcache == NULL) {
            return -1;
        }
        b->kcache = p->kcache;
    }
    else if (b->kcache != NULL) {
        p->kcache = Py_NewRef(b->kcache);
    }
    c->symbolic = b->kcache != NULL;
    c->kcache = b->kcache;
    if (c->arena == NULL) {
        return -1;
    }
    Py_ssize_t nn = PyList_GET_SIZE(b->nodes);
    b->vb = calloc((size_t)(nn ? nn : 1), sizeof(vbuf *));
    Py_ssize_t nin = PyTuple_GET_SIZE(b->ex);
    p->in_sizes = calloc((size_t)(nin ? nin : 1) * 2 * STAX_MAX_DIMS, sizeof(int64_t));
    p->in_ndim = calloc((size_t)(nin ? nin : 1), sizeof(int));
    p->in_dtype = calloc((size_t)(nin ? nin : 1), sizeof(stax_dtype_t));
    if (b->vb == NULL || p->in_sizes == NULL || p->in_ndim == NULL || p->in_dtype == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->ninputs = (int)nin;
    for (Py_ssize_t i = 0; i < nin; i++) {
        p->in_ndim[i] = -1;
        if (PyArray_Check(PyTuple_GET_ITEM(b->ex, i))) {
            c->numpy_io = 1;
        }
    }
    tmpl_ctx tc = {c, b->vb, b->index, NULL, b->vals, 0, {NULL}, {0}};
    b->tc = tc;
    return 0;
}

/* a tensor (or any object) the program reads: an input buffer (PB_INPUT,
 * input k) or a constant (PB_CONST, obj stolen) */
static vbuf *
source_vbuf(lw_build *b, PyObject *val, int kind, int k, PyObject *obj)
{
    lw_ctx *c = b->c;
    vbuf *v = stax_arena_alloc(c->arena, sizeof(vbuf));
    int nd, pb;
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    stax_dtype_t dt;
    if (v == NULL) {
        Py_XDECREF(obj);
        return NULL;
    }
    if (lw_val_info(val, &nd, sz, st, &dt)) {
        pb = lw_new_pbuf(c, kind, nd, sz, dt);
        if (pb < 0) {
            Py_XDECREF(obj);
            return NULL;
        }
        memcpy(c->pbufs[pb].strides, st, sizeof(int64_t) * (size_t)nd);
        if (kind == PB_INPUT) {
            Program *p = b->p;
            c->pbufs[pb].input = k;
            p->in_ndim[k] = nd;
            p->in_dtype[k] = dt;
            memcpy(p->in_sizes + (size_t)k * 2 * STAX_MAX_DIMS, sz, sizeof(int64_t) * (size_t)nd);
            memcpy(p->in_sizes + (size_t)k * 2 * STAX_MAX_DIMS + STAX_MAX_DIMS, st,
                   sizeof(int64_t) * (size_t)nd);
            p->lower_bound += val_bytes(val);
        }
        else {
            c->pbufs[pb].obj = obj;
        }
        return lw_vb_over_pbuf(c, v, pb) < 0 ? NULL : v;
    }
    pb = lw_new_pbuf(c, kind, 0, sz, STAX_FLOAT32);
    if (pb < 0) {
        Py_XDECREF(obj);
        return NULL;
    }
    if (kind == PB_INPUT) {
        c->pbufs[pb].input = k;
    }
    else {
        c->pbufs[pb].obj = obj;
    }
    c->pbufs[pb].ndim = -1;
    v->kind = VB_PYOBJ;
    v->pbuf = pb;
    return v;
}

static vbuf *
lower_placeholder(lw_build *b)
{
    int k = b->nph++;
    if (k >= PyTuple_GET_SIZE(b->ex)) {
        PyErr_SetString(PyExc_TypeError, "stax_backend: fewer example inputs than placeholders");
        return NULL;
    }
    return source_vbuf(b, PyTuple_GET_ITEM(b->ex, k), PB_INPUT, k, NULL);
}

static vbuf *
lower_get_attr(lw_build *b, PyObject *node)
{
    PyObject *tg = PyObject_GetAttrString(node, "target");
    PyObject *obj = Py_NewRef(b->gm);
    if (tg != NULL && PyUnicode_Check(tg)) {
        PyObject *parts = PyUnicode_Split(tg, PyUnicode_FromString("."), -1);
        for (Py_ssize_t q = 0; parts && obj && q < PyList_GET_SIZE(parts); q++) {
            Py_SETREF(obj, PyObject_GetAttr(obj, PyList_GET_ITEM(parts, q)));
        }
        Py_XDECREF(parts);
    }
    Py_XDECREF(tg);
    if (obj == NULL) {
        return NULL;
    }
    if (b->c->be->device != NULL && StaxTensor_Check(obj)
        && !stax_tensor_is_cuda((StaxTensor *)obj)) {
        /* a host constant of a device program: its kernels read device
         * memory, so the program keeps a device copy */
        Py_SETREF(obj, (PyObject *)stax_tensor_to_device((StaxTensor *)obj, STAX_DEV_CUDA));
        if (obj == NULL) {
            return NULL;
        }
    }
    return source_vbuf(b, obj, PB_CONST, -1, obj);
}

/* 0 with *out the output node's value template set; -1 on error */
static int
lower_output(lw_build *b, PyObject *node)
{
    PyObject *a = PyObject_GetAttrString(node, "args");
    if (a == NULL) {
        return -1;
    }
    PyObject *o = PyTuple_Check(a) && PyTuple_GET_SIZE(a) == 1 ? PyTuple_GET_ITEM(a, 0) : a;
    Py_XSETREF(b->output_t, make_template(&b->tc, o, 1));
    Py_DECREF(a);
    return b->output_t == NULL ? -1 : 0;
}

/* copy_(input, src) of functionalization: recorded to run after every
 * reader of the old value; 1 when taken (*v = the source's value) */
static int
take_input_copy(lw_build *b, Py_ssize_t i, PyObject *node, vbuf **v)
{
    PyObject *ca = PyObject_GetAttrString(node, "args");
    vbuf *dv = NULL, *sv = NULL;
    if (b->ncopies >= 64) {
        Py_XDECREF(ca);
        PyErr_Clear();
        return 0;
    }
    if (ca != NULL && PyTuple_Check(ca) && PyTuple_GET_SIZE(ca) >= 2) {
        PyObject *i0 = PyDict_GetItem(b->index, PyTuple_GET_ITEM(ca, 0));
        PyObject *i1 = PyDict_GetItem(b->index, PyTuple_GET_ITEM(ca, 1));
        dv = i0 ? b->vb[PyLong_AsLong(i0)] : NULL;
        sv = i1 ? b->vb[PyLong_AsLong(i1)] : NULL;
    }
    Py_XDECREF(ca);
    PyErr_Clear();
    /* into an input, or a host constant held by reference (a tensor the
     * trace met that was not lifted: the caller's own tensor) */
    if (dv != NULL && sv != NULL && dv->kind == VB_TENSOR && sv->kind == VB_TENSOR
        && dv->pbuf >= 0 && (b->c->pbufs[dv->pbuf].kind == PB_INPUT
                             || (b->c->pbufs[dv->pbuf].kind == PB_CONST
                                 && b->c->be->device == NULL))) {
        b->tc.copy_src[b->tc.ncopy] = sv;
        b->tc.copy_dst[b->tc.ncopy] = dv->pbuf;
        b->tc.ncopy++;
        b->copy_nodes[b->ncopies++] = (int)i;
        *v = sv;
        return 1;
    }
    return 0;
}

/* the lowering rule of a call node: rc 1 lowered (*v), 0 not (*why) */
static int
lower_rule(lw_build *b, PyObject *node, const char *base, const stax_op_info *op,
           const stax_call_info *call, PyObject *val, vbuf **v, const char **why)
{
    lw_ctx *c = b->c;
    PyObject *nargs0 = PyObject_GetAttrString(node, "args");
    PyObject *nkw0 = nargs0 ? PyObject_GetAttrString(node, "kwargs") : NULL;
    PyObject *nargs = nkw0 ? subst_sym_args(nargs0, b->vb, b->index) : NULL;
    PyObject *nkw = nargs ? subst_sym_args(nkw0, b->vb, b->index) : NULL;
    PyObject *kw = nkw == Py_None ? NULL : nkw;
    Py_XDECREF(nargs0);
    Py_XDECREF(nkw0);
    int rc = 0;
    if (nargs == NULL || nkw == NULL) {
        PyErr_Clear();
        *why = "node without args";
    }
    else if (val == NULL) {
        *why = "node without meta['val']";
    }
    else if (op == NULL && call != NULL && call->kind == STAX_CALLK_FACTORY) {
        rc = lw_lower_factory(c, call, nargs, kw, val, v, why);
        if (rc < 0) {
            PyErr_Clear();
            *why = "lowering of a factory failed";
            rc = 0;
        }
    }
    else if (op == NULL && call != NULL && call->kind == STAX_CALLK_VIEW) {
        struct lw_node_in in = {base, NULL, node, nargs, kw, val, b->vb, b->index};
        rc = lw_lower_extra_view(c, call, &in, v, why);
        if (rc < 0) {
            PyErr_Clear();
            *why = "lowering of a view failed";
            rc = 0;
        }
    }
    else if (op == NULL) {
        *why = "no op of the op table matches the node's target";
    }
    else {
        struct lw_node_in in = {base, op, node, nargs, kw, val, b->vb, b->index};
        rc = lw_lower_node(c, &in, v, why);
        if (rc > 0 && lw_zero_check(c, op, *v) < 0) {
            rc = -1;
        }
        if (rc < 0) {
            /* an internal lowering problem: report, then fall back */
            PyObject *et, *ev, *etb;
            PyErr_Fetch(&et, &ev, &etb);
            PyObject *msg = ev ? PyObject_Str(ev) : NULL;
            static char buf[256];
            snprintf(buf, sizeof(buf), "lowering failed: %s",
                     msg ? PyUnicode_AsUTF8(msg) : "?");
            PyErr_Clear();
            Py_XDECREF(msg);
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(etb);
            *why = buf;
            rc = 0;
        }
    }
    Py_XDECREF(nargs);
    Py_XDECREF(nkw);
    return rc;
}

/* a call node: its op's rule, else (not strict) an eager fallback step */
static int
lower_call(lw_build *b, Py_ssize_t i, PyObject *node, vbuf **v)
{
    int is_method = 0, rc = -1;
    char base[96];
    const stax_op_info *op;
    const stax_call_info *call;
    PyObject *nm = node_target(node, &is_method, base, sizeof(base), &op, &call), *val = NULL;
    const char *opname = nm ? PyUnicode_AsUTF8(nm) : NULL;
    const char *why = NULL;
    if (op != NULL && op->id == STAX_OP_COPY_ && take_input_copy(b, i, node, v)) {
        rc = 0;
        goto done;
    }
    val = node_val(node, b->vals);
    switch (sym_node_const(b->c, node, call, val, b->vb, b->index, v)) {
    case -1:
        goto done;
    case 1:
        rc = 0;      /* a symbolic size: a constant of the program */
        goto done;
    default:
        break;
    }
    if (lower_rule(b, node, base, op, call, val, v, &why) == 0) {
        if (b->strict) {
            strict_error(node, opname ? opname : "?", why ? why : "unsupported");
            goto done;
        }
        if (make_fallback(b->c, &b->tc, node, val, is_method, v) < 0) {
            goto done;
        }
    }
    rc = 0;
done:
    Py_XDECREF(val);
    Py_XDECREF(nm);
    return rc;
}

/* every node, in order, to a virtual buffer */
static int
bs_lower_nodes(lw_build *b)
{
    Py_ssize_t nn = PyList_GET_SIZE(b->nodes);
    for (Py_ssize_t i = 0; i < nn; i++) {
        PyObject *node = PyList_GET_ITEM(b->nodes, i);
        PyObject *ii = PyLong_FromSsize_t(i);
        if (ii == NULL || PyDict_SetItem(b->index, node, ii) < 0) {
            Py_XDECREF(ii);
            return -1;
        }
        Py_DECREF(ii);
        PyObject *ops = PyObject_GetAttrString(node, "op");
        stax_node_op_t opc;
        const char *s = ops ? PyUnicode_AsUTF8(ops) : NULL;
        int bad = s == NULL || stax_node_op_from_name(s, &opc) < 0;
        Py_XDECREF(ops);
        if (bad) {
            return -1;
        }
        vbuf *v = NULL;
        int rc = 0;
        switch (opc) {
        case STAX_NODE_PLACEHOLDER:
            v = lower_placeholder(b);
            rc = v == NULL ? -1 : 0;
            break;
        case STAX_NODE_GET_ATTR:
            v = lower_get_attr(b, node);
            rc = v == NULL ? -1 : 0;
            break;
        case STAX_NODE_OUTPUT:
            rc = lower_output(b, node);
            break;
        default:
            rc = lower_call(b, i, node, &v);
            break;
        }
        if (rc < 0) {
            return -1;
        }
        b->vb[i] = v;
    }
    if (b->output_t == NULL) {
        b->output_t = Py_NewRef(Py_None);
    }
    return 0;
}

static vbuf *
copy_arg(lw_build *b, int q, int which)
{
    PyObject *ca = PyObject_GetAttrString(PyList_GET_ITEM(b->nodes, b->copy_nodes[q]), "args");
    vbuf *v;
    if (ca == NULL) {
        return NULL;
    }
    v = b->vb[PyLong_AsLong(PyDict_GetItem(b->index, PyTuple_GET_ITEM(ca, which)))];
    Py_DECREF(ca);
    return v;
}

/* functionalized input mutations, after every reader of the old values: a
 * copy's source that reads an input another copy writes is materialized
 * before any input is written */
static int
bs_input_copies(lw_build *b)
{
    lw_ctx *c = b->c;
    for (int q = 0; q < b->ncopies; q++) {
        vbuf *sv = copy_arg(b, q, 1);
        if (sv == NULL) {
            return -1;
        }
        for (int r = 0; r < b->ncopies && sv->pbuf < 0; r++) {
            vbuf *dv = copy_arg(b, r, 0);
            if (dv == NULL) {
                return -1;
            }
            int hit = r == q ? 0 : lw_body_reads(c, sv->body, dv->pbuf);
            if (hit < 0 || (hit > 0 && lw_materialize(c, sv) < 0)) {
                return -1;
            }
        }
    }
    for (int q = 0; q < b->ncopies; q++) {
        PyObject *node = PyList_GET_ITEM(b->nodes, b->copy_nodes[q]);
        vbuf *dv = copy_arg(b, q, 0), *sv = dv ? copy_arg(b, q, 1) : NULL;
        if (sv == NULL) {
            return -1;
        }
        int rc = lw_lower_copy_into(c, dv, sv);
        if (rc < 0) {
            return -1;
        }
        if (rc == 0) {
            vbuf *fv = NULL;
            if (b->strict) {
                strict_raise(node, PyUnicode_FromString("an in-place write to an input"),
                             "mutation of an expanded input");
                return -1;
            }
            if (make_fallback(c, &b->tc, node, NULL, 0, &fv) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* the output template, the output buffers, and the kernels compiled */
static int
bs_finalize(lw_build *b)
{
    Program *p = b->p;
    lw_ctx *c = b->c;
    p->out_template = b->output_t;
    b->output_t = NULL;
    if (stax_lower_slotref_index(p->out_template) >= 0) {
        p->out_single = stax_lower_slotref_index(p->out_template);
    }
    int outs[256], nouts = 0;
    for (int k = 0; k < c->npbufs && nouts < 256; k++) {
        if (c->pbufs[k].is_output) {
            outs[nouts++] = k;
            if (c->pbufs[k].ndim >= 0) {
                pbuf_t *pb = &c->pbufs[k];
                int64_t n = lw_dtype_size(pb->dtype);
                for (int d = 0; d < pb->ndim; d++) {
                    n *= pb->sizes[d];
                }
                p->lower_bound += n;
            }
        }
    }
    return lw_finalize(c, outs, nouts);
}

/* Program.kernels: name, back-end source, loop IR and bytes of each */
static int
bs_kernel_infos(lw_build *b)
{
    Program *p = b->p;
    lw_ctx *c = b->c;
    p->kernels = PyList_New(0);
    if (p->kernels == NULL) {
        return -1;
    }
    for (int i = 0; i < c->nsteps; i++) {
        step_t *s = &c->steps[i];
        if (s->kind != ST_KERNEL) {
            continue;
        }
        PyObject *ki = PyStructSequence_New(lw_kernel_info_type);
        PyObject *lir = stax_lower_kernel_str(s->k);
        if (ki == NULL || lir == NULL) {
            Py_XDECREF(ki);
            Py_XDECREF(lir);
            return -1;
        }
        PyStructSequence_SET_ITEM(ki, 0, PyUnicode_FromString(s->k->name));
        PyStructSequence_SET_ITEM(ki, 1, Py_NewRef(s->source ? s->source : Py_None));
        PyStructSequence_SET_ITEM(ki, 2, lir);
        PyStructSequence_SET_ITEM(ki, 3, PyLong_FromLongLong(s->k->bytes_read));
        PyStructSequence_SET_ITEM(ki, 4, PyLong_FromLongLong(s->k->bytes_written));
        int rc = PyList_Append(p->kernels, ki);
        Py_DECREF(ki);
        if (rc < 0) {
            return -1;
        }
    }
    return 0;
}

static const struct {
    const char *name;
    int (*run)(lw_build *b);
} build_stages[] = {
    {"setup", bs_setup},                 /* Program, context, inputs */
    {"lower nodes", bs_lower_nodes},     /* node -> virtual buffer */
    {"input copies", bs_input_copies},   /* functionalized mutations */
    {"finalize", bs_finalize},           /* outputs, fusion, kernels */
    {"kernel infos", bs_kernel_infos},   /* Program.kernels */
};

PyObject *
lw_build_program(PyObject *gm, PyObject *ex, stax_backend *be, int strict, int dynamic,
                 PyObject *vals, int no_random, PyObject *kcache)
{
    lw_build b;
    PyObject *res = NULL;
    memset(&b, 0, sizeof(b));
    b.gm = gm;
    b.ex = ex;
    b.vals = vals;
    b.kcache = kcache;
    b.be = be;
    b.strict = strict;
    b.dynamic = dynamic;
    b.no_random = no_random;
    for (size_t k = 0; k < sizeof(build_stages) / sizeof(build_stages[0]); k++) {
        if (build_stages[k].run(&b) < 0) {
            goto done;
        }
    }
    PyObject_GC_Track(b.p);
    res = (PyObject *)b.p;
    b.p = NULL;
done:
    free(b.vb);
    Py_XDECREF(b.graph);
    Py_XDECREF(b.nodes);
    Py_XDECREF(b.index);
    Py_XDECREF(b.output_t);
    if (b.p != NULL) {
        if (b.p->kernels == NULL) {
            b.p->kernels = PyList_New(0);
        }
        Py_DECREF(b.p);
    }
    return res;
}
