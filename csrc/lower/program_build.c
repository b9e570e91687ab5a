/* Building a CompiledProgram from a graph: the stax_backend entry point
 * (lowers the op-level graph, always, taken at the examples' values when
 * they differ from the traced ones) and lw_build_program, which lowers
 * every node (native rule, library call or fallback kernel), makes the
 * output template, finalizes (fusion, buffer plan, compile) and collects
 * the kernels' descriptions. */
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "tensor/stax_numpy.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- driver */
/* a node's opcode (the graph room's enum), or -1 for a non-node */
static int
node_opcode(PyObject *node)
{
    return StaxNode_Check(node) ? (int)((StaxNode *)node)->op : -1;
}

/* the op name of a node's target (new str) or NULL (no exception) */
static PyObject *
target_name(PyObject *node, int *is_method)
{
    PyObject *tg = PyObject_GetAttrString(node, "target");
    PyObject *r = NULL;
    *is_method = 0;
    if (tg == NULL) {
        goto done;
    }
    if (PyUnicode_Check(tg)) {
        *is_method = node_opcode(node) == STAX_NODE_CALL_METHOD;
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
    PyObject *tg = PyObject_GetAttrString(node, "target");
    PyObject *args = tg ? PyObject_GetAttrString(node, "args") : NULL;
    PyObject *r = NULL;
    if (args != NULL) {
        if (PyUnicode_Check(tg) && node_opcode(node) == STAX_NODE_CALL_METHOD) {
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

/* ops whose result's size depends on the input's values: no kernel can
 * plan their buffers (torch.compile graph-breaks at them by default) */
static int
data_dependent_size(const char *name)
{
    static const char *const names[] = {
        "nonzero", "nonzero_static", "argwhere", "unique", "unique_consecutive",
        "_unique", "_unique2", "unique_dim", "bincount", "histc", NULL};
    size_t n;
    const char *dot;
    if (name == NULL) {
        return 0;
    }
    dot = strchr(name, '.');
    n = dot != NULL ? (size_t)(dot - name) : strlen(name);
    for (int i = 0; names[i]; i++) {
        if (strlen(names[i]) == n && !strncmp(name, names[i], n)) {
            return 1;
        }
    }
    return 0;
}

static int
strict_error(PyObject *node, const char *opname, const char *why)
{
    if (why != NULL && !strcmp(why, "op without a lowering rule") && data_dependent_size(opname)) {
        why = "the size of its result depends on the input's values (a data-dependent "
              "shape: the call runs eagerly outside strict_native, as torch.compile's "
              "graph break)";
    }
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
        int opc = node_opcode(node);
        uint64_t m = 0;
        if (opc < 0) {
            goto done;
        }
        if (opc == STAX_NODE_OUTPUT) {
            PyObject *a = PyObject_GetAttrString(node, "args");
            PyObject *o = a && PyTuple_Check(a) && PyTuple_GET_SIZE(a) == 1
                          ? PyTuple_GET_ITEM(a, 0) : a;
            rgt = o ? rg_extra_map(o, masks, written, 0, &any) : NULL;
            fresht = o ? rg_extra_map(o, masks, alias, 1, &anyf) : NULL;
            Py_XDECREF(a);
            break;
        }
        if (opc == STAX_NODE_PLACEHOLDER) {
            m = 1ULL << (k < 63 ? k : 63);
            k++;
            if (PyDict_SetItem(alias, node, node) < 0 || PyList_Append(phs, node) < 0) {
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
                                        goto done;
                        }
                    }
                }
                Py_XDECREF(a);
            }
            PyErr_Clear();
        }
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

/* gm.graph.nodes as a new list, or NULL with an exception */
static PyObject *
graph_nodes(PyObject *gm)
{
    PyObject *graph = PyObject_GetAttrString(gm, "graph");
    PyObject *nl = graph ? PyObject_GetAttrString(graph, "nodes") : NULL;
    PyObject *nodes = nl ? PySequence_List(nl) : NULL;
    Py_XDECREF(graph);
    Py_XDECREF(nl);
    return nodes;
}

/* 1 when the examples are not the samples gm was traced with (another
 * size or dtype: a per-layout artifact), 0 when they are */
static int
examples_differ(PyObject *gm, PyObject *ex)
{
    PyObject *nodes = graph_nodes(gm);
    if (nodes == NULL) {
        return -1;
    }
    int k = 0, differ = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes) && !differ; i++) {
        PyObject *node = PyList_GET_ITEM(nodes, i);
        if (!StaxNode_Check(node) || ((StaxNode *)node)->op != STAX_NODE_PLACEHOLDER) {
            continue;
        }
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
    PyErr_Clear();
    Py_DECREF(nodes);
    return differ;
}

/* 1 when a call node of gm has no value (a node a pass created without
 * one): shape propagation gives it one */
static int
some_value_missing(PyObject *gm)
{
    PyObject *nodes = graph_nodes(gm);
    if (nodes == NULL) {
        return -1;
    }
    int missing = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes) && !missing; i++) {
        PyObject *node = PyList_GET_ITEM(nodes, i);
        if (StaxNode_Check(node) && ((StaxNode *)node)->op != STAX_NODE_PLACEHOLDER
            && ((StaxNode *)node)->op != STAX_NODE_OUTPUT) {
            PyObject *v = node_val(node, NULL);
            missing = v == NULL;
            Py_XDECREF(v);
        }
    }
    Py_DECREF(nodes);
    return missing;
}

/* gm's op-level graph at the samples ex (new reference): lowering's one
 * input. Functionalized: mutations are values, copy_ writes them back into
 * the mutated inputs; slice bounds and views' arguments follow the sizes
 * they meet, except as_strided standing for a view outside the op table,
 * which holds at ex's sizes only (stax_graph_op_graph_sample_sized).
 * Other examples than the traced samples: the graph runs on them first
 * and the op graph is taken at their values. */
static PyObject *
op_graph_at(PyObject *gm, PyObject *ex)
{
    int differ = examples_differ(gm, ex);
    PyObject *vals = NULL;
    if (differ < 0) {
        return NULL;
    }
    if (differ) {
        vals = lw_shape_prop(gm, ex);
        if (vals == NULL) {
            return NULL;
        }
    }
    PyObject *og = stax_graph_make_op_graph_at(gm, vals);
    Py_XDECREF(vals);
    return og;
}

PyObject *
stax_lower_program(PyObject *gm_in, PyObject *examples, stax_backend *be,
                   int strict, int dynamic)
{
    PyObject *ex = PySequence_Tuple(examples);
    if (ex == NULL) {
        return NULL;
    }
    PyObject *gm = op_graph_at(gm_in, ex);
    if (gm == NULL) {
        Py_DECREF(ex);
        return NULL;
    }
    return lw_program_from_op_graph(gm_in, gm, ex, be, strict, dynamic, 0, NULL);
}

PyObject *
lw_program_from_op_graph(PyObject *gm_in, PyObject *gm, PyObject *ex, stax_backend *be,
                         int strict, int dynamic, int no_random, PyObject *kcache)
{
    /* steals gm and ex */
    PyObject *vals = NULL, *r = NULL;
    int missing = some_value_missing(gm);
    int fixed = missing < 0 ? -1 : stax_graph_op_graph_sample_sized(gm);
    if (fixed < 0 || (missing && (vals = lw_shape_prop(gm, ex)) == NULL)) {
        goto done;
    }
    r = lw_build_program(gm, ex, be, strict, dynamic, vals, no_random, kcache);
    if (r != NULL && !no_random && ((Program *)r)->c.nrand > 0
        && ((Program *)r)->c.nfallbacks > 0) {
        /* a fallback kernel could draw from the generator between native
         * draws: keep eager's order by running the random ops eagerly too */
        Py_SETREF(r, lw_build_program(gm, ex, be, strict, dynamic, vals, 1, kcache));
    }
    if (r != NULL) {
        Program *p = (Program *)r;
        Py_XSETREF(p->rg_extra, rg_extra_template(gm_in));
        /* other sizes (a dynamic program's variants) take the op graph
         * again from the Python-level one when this one holds at ex's
         * sizes only */
        Py_XSETREF(p->py_gm, fixed ? Py_NewRef(gm_in) : NULL);
    }
done:
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
    int trace_dev;                       /* the placeholders' sample values: 0
                                          * none seen, 1 host, 2 cuda */
    /* attention (bs_attention): per node 0, or ATT_SCORES / ATT_PROBS /
     * ATT_ROOT of attention att_of[i] */
    signed char *att_role;
    int *att_of;
    int natt;
    struct lw_att {
        int root, z, p, x, q, kt, v, causal, phantom, safe;
        int64_t off;
    } att[16];
} lw_build;

enum { ATT_SCORES = 1, ATT_PROBS, ATT_ROOT };

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

/* ------------------------------------------------------------ attention
 * softmax(X, -1) @ v where X is a pointwise chain over the scores q @ kT
 * (scale, masked_fill / where, + mask, ...) becomes one attention kernel
 * (lower_attention.c) when neither the scores nor anything of the chain
 * nor the probabilities is read by another node (shape-only readers such as
 * ones_like(scores) excepted): with another reader (returned, saved for
 * backward, dropout between softmax and @ v) the decomposition stays. */
typedef struct {
    lw_build *b;
    int *opid;                 /* per node: op id, or -1 */
    signed char *state;        /* 0 unknown, 1 in the chain, 2 not */
    int z;
    int fail;
} att_walk;

static int
att_node_index(lw_build *b, PyObject *o)
{
    if (StaxNode_Type == NULL || !PyObject_TypeCheck(o, StaxNode_Type)) {
        return -1;
    }
    PyObject *ix = PyDict_GetItemWithError(b->index, o);
    if (ix == NULL) {
        PyErr_Clear();
        return -1;
    }
    return (int)PyLong_AsLong(ix);
}

/* the i-th positional argument of node n, or kwargs[name] (borrowed into
 * *out, NULL when absent); the args/kwargs objects are owned by the node */
static PyObject *
att_arg(PyObject *node, int i, const char *name)
{
    PyObject *a = PyObject_GetAttrString(node, "args");
    PyObject *kw = a ? PyObject_GetAttrString(node, "kwargs") : NULL;
    PyObject *r = NULL;
    if (a != NULL && PyTuple_Check(a) && i >= 0 && i < PyTuple_GET_SIZE(a)) {
        r = PyTuple_GET_ITEM(a, i);
    }
    else if (kw != NULL && PyDict_Check(kw) && name != NULL) {
        r = PyDict_GetItemString(kw, name);
    }
    Py_XINCREF(r);
    Py_XDECREF(a);
    Py_XDECREF(kw);
    PyErr_Clear();
    return r;   /* new reference or NULL */
}

static int
att_nargs(PyObject *node, Py_ssize_t *nkw)
{
    PyObject *a = PyObject_GetAttrString(node, "args");
    PyObject *kw = a ? PyObject_GetAttrString(node, "kwargs") : NULL;
    int n = a != NULL && PyTuple_Check(a) ? (int)PyTuple_GET_SIZE(a) : -1;
    *nkw = kw != NULL && PyDict_Check(kw) ? PyDict_Size(kw) : 0;
    Py_XDECREF(a);
    Py_XDECREF(kw);
    PyErr_Clear();
    return n;
}

/* 1 if node i is in the pointwise chain that reads the scores */
static int
att_reach(att_walk *w, int i, int depth)
{
    if (i < 0 || w->fail) {
        return 0;
    }
    if (w->state[i]) {
        return w->state[i] == 1;
    }
    int id = w->opid[i];
    if (id == STAX_OP_MATMUL) {
        if (w->z >= 0 && w->z != i) {
            w->fail = 1;     /* two score matmuls: not the pattern */
            return 0;
        }
        w->z = i;
        w->state[i] = 1;
        return 1;
    }
    int r = 0;
    if (id >= 0 && stax_op_table[id].kind == STAX_OPK_POINTWISE && depth < 48) {
        PyObject *node = PyList_GET_ITEM(w->b->nodes, i);
        PyObject *a = PyObject_GetAttrString(node, "args");
        PyObject *kw = a ? PyObject_GetAttrString(node, "kwargs") : NULL;
        if (a != NULL && PyTuple_Check(a)) {
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(a); k++) {
                r |= att_reach(w, att_node_index(w->b, PyTuple_GET_ITEM(a, k)), depth + 1);
            }
        }
        if (kw != NULL && PyDict_Check(kw)) {
            PyObject *key, *val;
            Py_ssize_t pos = 0;
            while (PyDict_Next(kw, &pos, &key, &val)) {
                r |= att_reach(w, att_node_index(w->b, val), depth + 1);
            }
        }
        Py_XDECREF(a);
        Py_XDECREF(kw);
        PyErr_Clear();
    }
    w->state[i] = r ? 1 : 2;
    return r;
}

/* shape and dtype of node i's value: ndim (-1 if not a tensor) */
static int
att_shape(lw_build *b, int i, int64_t *sizes, stax_dtype_t *dt)
{
    PyObject *val = node_val(PyList_GET_ITEM(b->nodes, i), b->vals);
    int64_t st[STAX_MAX_DIMS];
    int nd = -1;
    if (val == NULL || !lw_val_info(val, &nd, sizes, st, dt)) {
        nd = -1;
    }
    Py_XDECREF(val);
    PyErr_Clear();
    return nd;
}

static int
att_same_shape(lw_build *b, int i, int nd, const int64_t *sizes, stax_dtype_t dt)
{
    int64_t s[STAX_MAX_DIMS];
    stax_dtype_t d;
    return att_shape(b, i, s, &d) == nd && d == dt
           && memcmp(s, sizes, sizeof(int64_t) * (size_t)nd) == 0;
}

/* 1 if Python number / 0-d constant node o is -inf */
static int
att_is_neg_inf(lw_build *b, PyObject *o)
{
    double v = 0.0;
    int i = att_node_index(b, o);
    if (i >= 0) {
        PyObject *val = node_val(PyList_GET_ITEM(b->nodes, i), b->vals);
        PyObject *it = val ? PyObject_CallMethod(val, "item", NULL) : NULL;
        v = it && PyFloat_Check(it) ? PyFloat_AsDouble(it) : 0.0;
        Py_XDECREF(it);
        Py_XDECREF(val);
    }
    else if (PyFloat_Check(o)) {
        v = PyFloat_AsDouble(o);
    }
    PyErr_Clear();
    return isinf(v) && v < 0;
}

/* a constant (get_attr) bool mask node i, inverted if inv, equal to
 * (j > i + off) over its last two dims (L, S), leading dims of size 1:
 * 1 and *off, or 0 (a constant never changes between calls) */
static int
att_const_causal(lw_build *b, int i, int inv, int64_t L, int64_t S, int64_t *off)
{
    PyObject *node = PyList_GET_ITEM(b->nodes, i);
    int ga = node_opcode(node) == STAX_NODE_GET_ATTR;
    PyObject *val = ga ? node_val(node, b->vals) : NULL;
    PyObject *np = val ? PyObject_CallMethod(val, "numpy", NULL) : NULL;
    PyArrayObject *a = np ? (PyArrayObject *)PyArray_FROMANY(np, NPY_BOOL, 2, STAX_MAX_DIMS,
                                                             NPY_ARRAY_CARRAY_RO)
                          : NULL;
    int rc = 0, nd = a ? PyArray_NDIM(a) : 0;
    if (a != NULL && PyArray_DIM(a, nd - 2) == L && PyArray_DIM(a, nd - 1) == S
        && PyArray_SIZE(a) == L * S) {
        const npy_bool *m = (const npy_bool *)PyArray_DATA(a);
        int64_t o = -1;
        while (o + 1 < S && !(m[o + 1] ^ inv)) {
            o++;    /* row 0 keeps j <= o */
        }
        rc = 1;
        for (int64_t r = 0; r < L && rc; r++) {
            for (int64_t c = 0; c < S && rc; c++) {
                rc = (int)(!!(m[r * S + c]) ^ inv) == (c > r + o);
            }
        }
        *off = o;
    }
    Py_XDECREF((PyObject *)a);
    Py_XDECREF(np);
    Py_XDECREF(val);
    PyErr_Clear();
    return rc;
}

/* 1 if node i is a constant (get_attr) with every element nonzero */
static int
att_const_ones(lw_build *b, int i)
{
    PyObject *node = PyList_GET_ITEM(b->nodes, i);
    int ga = node_opcode(node) == STAX_NODE_GET_ATTR;
    PyObject *val = ga ? node_val(node, b->vals) : NULL;
    PyObject *np = val ? PyObject_CallMethod(val, "numpy", NULL) : NULL;
    PyObject *all = np ? PyObject_CallMethod(np, "all", NULL) : NULL;
    int rc = all != NULL && PyObject_IsTrue(all) == 1;
    Py_XDECREF(all);
    Py_XDECREF(np);
    Py_XDECREF(val);
    PyErr_Clear();
    return rc;
}

/* the causal structure of X = where(mask, -inf, scores) /
 * masked_fill(scores, mask, -inf) with mask = logical_not(tril(ones, d))
 * (keep j <= i + d) or triu(ones, d) (keep j <= i + d - 1), ones a
 * ones_like / ones of the scores' last two sizes: 1 and *off, or 0 */
static int
att_causal(att_walk *w, int x, int nd, const int64_t *zs, int64_t *off)
{
    lw_build *b = w->b;
    PyObject *xn = PyList_GET_ITEM(b->nodes, x), *m = NULL, *f = NULL;
    int rc = 0;
    if (w->opid[x] == STAX_OP_WHERE) {
        m = att_arg(xn, 0, "condition");
        f = att_arg(xn, 1, "self");
    }
    else if (w->opid[x] == STAX_OP_MASKED_FILL) {
        m = att_arg(xn, 1, "mask");
        f = att_arg(xn, 2, "value");
    }
    int mi = m ? att_node_index(b, m) : -1;
    if (mi < 0 || f == NULL || !att_is_neg_inf(b, f)) {
        goto done;
    }
    int neg = 0, t = mi;
    if (w->opid[mi] == STAX_OP_LOGICAL_NOT) {
        PyObject *a = att_arg(PyList_GET_ITEM(b->nodes, mi), 0, "self");
        t = a ? att_node_index(b, a) : -1;
        Py_XDECREF(a);
        neg = 1;
    }
    if (t >= 0 && att_const_causal(b, t, neg, zs[nd - 2], zs[nd - 1], off)) {
        rc = 1;
        goto done;
    }
    if (t < 0 || (neg ? w->opid[t] != STAX_OP_TRIL : w->opid[t] != STAX_OP_TRIU)) {
        goto done;
    }
    PyObject *tn = PyList_GET_ITEM(b->nodes, t);
    PyObject *o = att_arg(tn, 0, "self"), *dg = att_arg(tn, 1, "diagonal");
    int oi = o ? att_node_index(b, o) : -1;
    int64_t d = dg == NULL ? 0 : PyLong_Check(dg) ? PyLong_AsLongLong(dg) : INT64_MIN;
    Py_XDECREF(o);
    Py_XDECREF(dg);
    PyErr_Clear();
    if (oi < 0 || d == INT64_MIN) {
        goto done;
    }
    int ones = w->opid[oi] == STAX_OP_ONES_LIKE || att_const_ones(b, oi);
    if (!ones && w->opid[oi] < 0) {
        int ism;
        PyObject *nm = target_name(PyList_GET_ITEM(b->nodes, oi), &ism);
        ones = nm != NULL && !ism && PyUnicode_CompareWithASCIIString(nm, "ones") == 0;
        Py_XDECREF(nm);
    }
    int64_t os[STAX_MAX_DIMS];
    stax_dtype_t odt;
    int ond = att_shape(b, oi, os, &odt);
    if (ones && ond >= 2 && ond <= nd && os[ond - 2] == zs[nd - 2] && os[ond - 1] == zs[nd - 1]) {
        *off = neg ? d : d - 1;
        rc = 1;
    }
done:
    Py_XDECREF(m);
    Py_XDECREF(f);
    PyErr_Clear();
    return rc;
}

/* 1 if node kt is k.transpose(-2, -1) (either order, negative or not):
 * the scores of attention are q @ k.transpose(-2, -1); a product with a
 * weight (softmax(relu(x @ w)) @ w2, a model's layer) is left alone */
static int
att_is_key_transpose(att_walk *w, int kt)
{
    if (w->opid[kt] != STAX_OP_TRANSPOSE) {
        return 0;
    }
    int64_t ks[STAX_MAX_DIMS];
    stax_dtype_t kd;
    int n = att_shape(w->b, kt, ks, &kd);
    PyObject *node = PyList_GET_ITEM(w->b->nodes, kt);
    PyObject *d0 = att_arg(node, 1, "dim0"), *d1 = att_arg(node, 2, "dim1");
    int64_t a = d0 && PyLong_Check(d0) ? PyLong_AsLongLong(d0) : INT64_MIN;
    int64_t c = d1 && PyLong_Check(d1) ? PyLong_AsLongLong(d1) : INT64_MIN;
    Py_XDECREF(d0);
    Py_XDECREF(d1);
    PyErr_Clear();
    if (n < 2 || a == INT64_MIN || c == INT64_MIN) {
        return 0;
    }
    a = a < 0 ? a + n : a;
    c = c < 0 ? c + n : c;
    return (a == n - 2 && c == n - 1) || (a == n - 1 && c == n - 2);
}

/* is node r = matmul(softmax(X, -1), v) the pattern?  fills a; 1 yes */
static int
att_match(att_walk *w, int r, struct lw_att *a)
{
    lw_build *b = w->b;
    Py_ssize_t nn = PyList_GET_SIZE(b->nodes), nkw;
    PyObject *rn = PyList_GET_ITEM(b->nodes, r);
    if (att_nargs(rn, &nkw) != 2 || nkw != 0) {
        return 0;
    }
    PyObject *po = att_arg(rn, 0, NULL), *vo = att_arg(rn, 1, NULL);
    int p = po ? att_node_index(b, po) : -1, v = vo ? att_node_index(b, vo) : -1;
    Py_XDECREF(po);
    Py_XDECREF(vo);
    if (p < 0 || v < 0
        || (w->opid[p] != STAX_OP_SOFTMAX && w->opid[p] != STAX_OP__SAFE_SOFTMAX)) {
        return 0;
    }
    PyObject *pn = PyList_GET_ITEM(b->nodes, p);
    PyObject *xo = att_arg(pn, 0, "self"), *dim = att_arg(pn, 1, "dim");
    int safe = w->opid[p] == STAX_OP__SAFE_SOFTMAX;
    PyObject *dto = att_arg(pn, safe ? 2 : 3, "dtype");
    int x = xo ? att_node_index(b, xo) : -1;
    int64_t dv = dim && PyLong_Check(dim) ? PyLong_AsLongLong(dim) : INT64_MIN;
    int dtype_none = dto == NULL || dto == Py_None;
    Py_XDECREF(xo);
    Py_XDECREF(dim);
    Py_XDECREF(dto);
    PyErr_Clear();
    if (x < 0 || !dtype_none || dv == INT64_MIN) {
        return 0;
    }
    memset(w->state, 0, (size_t)nn);
    w->z = -1;
    w->fail = 0;
    if (!att_reach(w, x, 0) || w->fail || w->z < 0) {
        return 0;
    }
    int z = w->z;
    int64_t zs[STAX_MAX_DIMS], qs[STAX_MAX_DIMS], ks[STAX_MAX_DIMS], vs[STAX_MAX_DIMS],
        rs[STAX_MAX_DIMS];
    stax_dtype_t zd, qd, kd, vd, rd;
    int nd = att_shape(b, z, zs, &zd);
    if (nd < 2 || (dv != -1 && dv != nd - 1)
        || !(zd == STAX_FLOAT16 || zd == STAX_FLOAT32 || zd == STAX_FLOAT64)) {
        return 0;
    }
    PyObject *zn = PyList_GET_ITEM(b->nodes, z);
    if (att_nargs(zn, &nkw) != 2 || nkw != 0) {
        return 0;
    }
    PyObject *qo = att_arg(zn, 0, NULL), *ko = att_arg(zn, 1, NULL);
    int q = qo ? att_node_index(b, qo) : -1, kt = ko ? att_node_index(b, ko) : -1;
    Py_XDECREF(qo);
    Py_XDECREF(ko);
    if (q < 0 || kt < 0 || w->state[q] == 1 || w->state[kt] == 1 || w->state[v] == 1
        || !att_is_key_transpose(w, kt)) {
        return 0;
    }
    int qn = att_shape(b, q, qs, &qd), kn = att_shape(b, kt, ks, &kd);
    int vn = att_shape(b, v, vs, &vd), rnd = att_shape(b, r, rs, &rd);
    if (qn < 2 || kn < 2 || vn < 2 || rnd != nd || qd != zd || kd != zd || vd != zd
        || rd != zd || vs[vn - 2] != zs[nd - 1] || rs[nd - 1] != vs[vn - 1]
        || memcmp(rs, zs, sizeof(int64_t) * (size_t)(nd - 1)) != 0) {
        return 0;
    }
    for (int d = 0; d < nd; d++) {
        if (zs[d] < 1) {
            return 0;   /* empty: the decomposition's zeros / empty rows */
        }
    }
    if (qs[qn - 1] < 1 || vs[vn - 1] < 1 || qs[qn - 1] > 512 || vs[vn - 1] > 512) {
        return 0;   /* very wide heads: the kernel's tiles would not fit its stack */
    }
    /* the chain: same shape as the scores, read only inside the chain (or
     * for its shape), and X by the softmax alone, the softmax by r alone */
    for (Py_ssize_t i = 0; i < nn; i++) {
        if (w->state[i] != 1) {
            continue;
        }
        if (!att_same_shape(b, (int)i, nd, zs, zd)) {
            return 0;
        }
        PyObject *users = PyObject_GetAttrString(PyList_GET_ITEM(b->nodes, i), "users");
        if (users == NULL || !PyDict_Check(users)) {
            Py_XDECREF(users);
            PyErr_Clear();
            return 0;
        }
        PyObject *key, *val;
        Py_ssize_t pos = 0;
        int ok = 1;
        while (ok && PyDict_Next(users, &pos, &key, &val)) {
            int u = att_node_index(b, key);
            ok = u >= 0 && ((w->state[u] == 1 && u != z) || (u == p && i == x)
                            || w->opid[u] == STAX_OP_ONES_LIKE
                            || w->opid[u] == STAX_OP_ZEROS_LIKE
                            || w->opid[u] == STAX_OP_FULL_LIKE);
        }
        Py_DECREF(users);
        if (!ok) {
            return 0;
        }
    }
    PyObject *pu = PyObject_GetAttrString(pn, "users");
    int pu_ok = pu != NULL && PyDict_Check(pu) && PyDict_Size(pu) == 1;
    Py_XDECREF(pu);
    PyErr_Clear();
    if (!pu_ok) {
        return 0;
    }
    a->root = r;
    a->z = z;
    a->p = p;
    a->x = x;
    a->q = q;
    a->kt = kt;
    a->v = v;
    a->off = 0;
    a->causal = att_causal(w, x, nd, zs, &a->off);
    a->phantom = -1;
    a->safe = safe;
    return 1;
}

static int
bs_attention(lw_build *b)
{
    Py_ssize_t nn = PyList_GET_SIZE(b->nodes);
    /* read per compile: bench/attention.py times the decomposition too */
    const char *offe = getenv("STAX_NO_FUSED_ATTENTION");
    int off = offe != NULL && *offe && *offe != '0';
    b->att_role = calloc((size_t)(nn ? nn : 1), 1);
    b->att_of = calloc((size_t)(nn ? nn : 1), sizeof(int));
    int *opid = malloc(sizeof(int) * (size_t)(nn ? nn : 1));
    signed char *state = calloc((size_t)(nn ? nn : 1), 1);
    if (b->att_role == NULL || b->att_of == NULL || opid == NULL || state == NULL) {
        free(opid);
        free(state);
        PyErr_NoMemory();
        return -1;
    }
    int any = 0;
    for (Py_ssize_t i = 0; i < nn; i++) {
        PyObject *node = PyList_GET_ITEM(b->nodes, i);
        PyObject *ii = PyLong_FromSsize_t(i);
        if (ii == NULL || PyDict_SetItem(b->index, node, ii) < 0) {
            Py_XDECREF(ii);
            free(opid);
            free(state);
            return -1;
        }
        Py_DECREF(ii);
        int is_method;
        char base[96];
        const stax_op_info *op = NULL;
        const stax_call_info *call = NULL;
        PyObject *nm = node_target(node, &is_method, base, sizeof(base), &op, &call);
        Py_XDECREF(nm);
        PyErr_Clear();
        opid[i] = op ? (int)op->id : -1;
        any |= opid[i] == STAX_OP_SOFTMAX || opid[i] == STAX_OP__SAFE_SOFTMAX;
    }
    att_walk w = {b, opid, state, -1, 0};
    for (Py_ssize_t i = 0; i < nn && any && !off && b->natt < 16; i++) {
        struct lw_att a;
        if (opid[i] != STAX_OP_MATMUL || !att_match(&w, (int)i, &a)) {
            continue;
        }
        if (b->att_role[a.z] || b->att_role[a.p] || b->att_role[a.root]) {
            continue;
        }
        b->att_role[a.z] = ATT_SCORES;
        b->att_role[a.p] = ATT_PROBS;
        b->att_role[a.root] = ATT_ROOT;
        b->att_of[a.z] = b->att_of[a.p] = b->att_of[a.root] = b->natt;
        b->att[b->natt++] = a;
    }
    free(opid);
    free(state);
    return 0;
}

/* a node of an attention: the scores (a load of a phantom buffer nothing
 * writes), the probabilities (read by nobody but the root) or the root
 * (the attention kernel).  0, or -1 + exception */
static int
lower_attention_node(lw_build *b, Py_ssize_t i, vbuf **v)
{
    lw_ctx *c = b->c;
    struct lw_att *a = &b->att[b->att_of[i]];
    PyObject *val = node_val(PyList_GET_ITEM(b->nodes, i), b->vals);
    vbuf *o = lw_vb_new(c);
    int64_t st[STAX_MAX_DIMS];
    if (val == NULL || o == NULL || !lw_val_info(val, &o->ndim, o->sizes, st, &o->dtype)) {
        Py_XDECREF(val);
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "attention lowering: node without a value");
        }
        return -1;
    }
    Py_DECREF(val);
    o->kind = VB_TENSOR;
    *v = o;
    switch (b->att_role[i]) {
    case ATT_SCORES:
        a->phantom = lw_new_pbuf(c, PB_TEMP, o->ndim, o->sizes, o->dtype);
        o->body = a->phantom < 0 ? NULL : lw_contig_load(c, a->phantom);
        o->label = "scores";
        return o->body ? 0 : -1;
    case ATT_PROBS:
        o->body = lw_const(c, o->dtype, 0.0);
        o->label = "probs";
        return o->body ? 0 : -1;
    default:
        break;
    }
    vbuf *q = b->vb[a->q], *kt = b->vb[a->kt], *vv = b->vb[a->v], *x = b->vb[a->x];
    if (q == NULL || kt == NULL || vv == NULL || x == NULL || q->kind != VB_TENSOR
        || kt->kind != VB_TENSOR || vv->kind != VB_TENSOR || x->kind != VB_TENSOR
        || a->phantom < 0) {
        PyErr_SetString(PyExc_RuntimeError, "attention lowering: operands not lowered");
        return -1;
    }
    return lw_lower_attention(c, q, kt, vv, x, a->phantom, a->causal, a->off, a->safe, o) < 0
           ? -1 : 0;
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

/* the device type of a tensor in val (a tensor, or a tuple/list of them)
 * that is not the program's own (cuda: be->device set; else the host), or
 * NULL. host0d: a host 0-d tensor in a device program is not foreign when
 * it was made on the host (tp.tensor(2.5) and arithmetic on such): PyTorch
 * lets 0-d CPU tensors meet CUDA tensors, and the program keeps it on the
 * device (a constant's device copy; program.c moves a fallback's there) */
static const char *
foreign_device(PyObject *val, int prog_cuda, int host0d)
{
    if (StaxTensor_Check(val)) {
        StaxTensor *t = (StaxTensor *)val;
        int cuda = stax_tensor_is_cuda(t);
        if (cuda == prog_cuda || (prog_cuda && host0d && t->ndim == 0)) {
            return NULL;
        }
        return stax_tensor_device_type(t);
    }
    if (PyArray_Check(val)) {
        return prog_cuda && !(host0d && PyArray_NDIM((PyArrayObject *)val) == 0) ? "cpu" : NULL;
    }
    if (PyTuple_Check(val) || PyList_Check(val)) {
        for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(val); k++) {
            const char *d = foreign_device(PySequence_Fast_GET_ITEM(val, k), prog_cuda, host0d);
            if (d != NULL) {
                return d;
            }
        }
    }
    return NULL;
}

/* A call whose value lives on another device than the program's (y.cpu(),
 * y.to("cpu"), x.cuda() inside the function): a program runs the kernels of
 * one device and its buffers live there, so such a value would reach a
 * kernel as a pointer of the other device (on a GPU: an illegal address
 * that poisons the CUDA context; on the host: a segfault) or come back on
 * the wrong device. The whole version is refused natively: it runs eagerly,
 * and strict_native raises this NativeCompileError naming the transfer. */
/* 1 when an argument of node (a Node, or one in a tuple/list argument)
 * has a CUDA tensor value */
static int
reads_cuda_value(lw_build *b, PyObject *o, int depth)
{
    if (StaxNode_Type != NULL && PyObject_TypeCheck(o, StaxNode_Type)) {
        PyObject *v = node_val(o, b->vals);
        int r = v != NULL && StaxTensor_Check(v) && stax_tensor_is_cuda((StaxTensor *)v);
        Py_XDECREF(v);
        return r;
    }
    if (depth < 2 && (PyTuple_Check(o) || PyList_Check(o))) {
        for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(o); k++) {
            if (reads_cuda_value(b, PySequence_Fast_GET_ITEM(o, k), depth + 1)) {
                return 1;
            }
        }
    }
    if (depth < 2 && PyDict_Check(o)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(o, &pos, &k, &v)) {
            if (reads_cuda_value(b, v, depth + 1)) {
                return 1;
            }
        }
    }
    return 0;
}

static int
refuse_foreign_device(lw_build *b, PyObject *node, const char *opname, PyObject *val)
{
    /* against the device the function was traced on (its tensor inputs'
     * samples), not the back end's: eager CUDA kernels lower a trace over
     * host stand-ins of their CUDA operands (tensorplay.cuda._eager) */
    if (b->trace_dev == 0) {
        return 0;
    }
    int prog_cuda = b->trace_dev == 2;
    int host0d = 1;
    if (prog_cuda && val != NULL) {
        /* a host 0-d value computed from a CUDA one is a transfer
         * (loss.cpu()): eager gives a CPU tensor */
        PyObject *a = PyObject_GetAttrString(node, "args");
        PyObject *kw = a ? PyObject_GetAttrString(node, "kwargs") : NULL;
        PyErr_Clear();
        host0d = !((a && reads_cuda_value(b, a, 0)) || (kw && reads_cuda_value(b, kw, 0)));
        Py_XDECREF(a);
        Py_XDECREF(kw);
    }
    const char *dev = val != NULL ? foreign_device(val, prog_cuda, host0d) : NULL;
    if (dev == NULL) {
        return 0;
    }
    PyObject *call = user_call(node, opname);
    PyObject *stack = node_stack(node);
    PyErr_Clear();
    PyErr_Format(stax_lower_NativeCompileError,
                 "%U gives a tensor on device '%s' inside a function compiled for "
                 "'%s' inputs: a native program runs the kernels of one device, "
                 "so a device transfer inside the compiled function cannot be "
                 "compiled natively (move tensors across devices outside it); at %U",
                 call ? call : Py_None, dev, prog_cuda ? "cuda" : "cpu",
                 stack ? stack : Py_None);
    Py_XDECREF(call);
    Py_XDECREF(stack);
    return -1;
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
    if (refuse_foreign_device(b, node, opname, val) < 0) {
        goto done;
    }
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
        if (b->strict || (op != NULL && (op->id == STAX_OP_AS_STRIDED
                                         || op->id == STAX_OP_AS_STRIDED_SCATTER))) {
            /* an eager as_strided(_scatter) step would count its offset
             * from the storage's start, the op graph's counts from its
             * input's first element (a fresh buffer, or an input view at an
             * offset): the whole version runs eagerly instead (the driver's
             * fallback) */
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
        int opc = node_opcode(node);
        if (opc < 0) {
            PyErr_SetString(PyExc_TypeError, "lowering: a graph node that is not a Node");
            return -1;
        }
        vbuf *v = NULL;
        int rc = 0;
        switch (opc) {
        case STAX_NODE_PLACEHOLDER:
            if (b->trace_dev == 0) {
                PyObject *pv = node_val(node, b->vals);
                if (pv != NULL && StaxTensor_Check(pv)) {
                    b->trace_dev = stax_tensor_is_cuda((StaxTensor *)pv) ? 2 : 1;
                }
                Py_XDECREF(pv);
            }
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
            rc = b->att_role != NULL && b->att_role[i] ? lower_attention_node(b, i, &v)
                                                      : lower_call(b, i, node, &v);
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
    {"attention", bs_attention},         /* softmax(q @ kT ...) @ v found */
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
    free(b.att_role);
    free(b.att_of);
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
