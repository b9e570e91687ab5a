/* DecomposePass (seed §4.4, Table 4.2 in docs/transformations.md): a call
 * of a composite op whose row carries a decomposition is expanded, in the
 * Python-level graph, into primitive nodes written the way a user would
 * write them (operator.mul, Tensor.exp, tensorplay.functional.where);
 * each new node gets meta['val'] by running it on its inputs' values.
 *
 * Kept whole (numerics, or already a fused kernel): the op table's rows
 * flagged STAX_OPF_KEEP_WHOLE. */
#include "graph/passes_internal.h"

#include <string.h>

typedef struct {
    PyObject *graph;
    PyObject *before;     /* the node being expanded */
    PyObject *created;    /* list of new nodes, in order */
} p_emit_ctx;

static PyObject *
p_module_attr(stax_py_key mod, const char *name)
{
    PyObject *m = stax_py_registered(mod);
    PyObject *r = m ? PyObject_GetAttrString(m, name) : NULL;
    if (r == NULL) {
        PyErr_Clear();
    }
    return r;
}

static PyObject *
p_emit_py(const char *opname, PyObject *args, void *vctx)
{
    p_emit_ctx *c = vctx;
    const stax_op_info *op = stax_graph_p_op_by_name(opname);
    PyObject *target = NULL, *node = NULL;
    const char *opcode = "call_function";
    Py_ssize_t na = PyTuple_GET_SIZE(args);
    unsigned fl = op ? op->flags : (STAX_OPF_FUNCTION | STAX_OPF_METHOD);

    /* an op a Python operator means, with that operator's operand count:
     * operator.<fn> (the graph reads as the user would have written it) */
    if (op != NULL && (fl & STAX_OPF_OPERATOR)) {
        const stax_pyop_info *po = stax_pyop_of_op(op->id);
        if (po != NULL && po->arity == na
            && (po->flags & STAX_PYOPF_SLOT)) {
            target = Py_NewRef(stax_pyop_function(po, 0));
        }
    }
    /* a method when the op's first parameter is `self` (exp, clamp);
     * a function otherwise (where(condition, ...)) */
    if (target == NULL && (fl & STAX_OPF_METHOD) && na >= 1
        && stax_graph_p_is_node(PyTuple_GET_ITEM(args, 0))
        && (op == NULL || (stax_graph_p_schema_len(op) > 0
                           && !strcmp(stax_graph_p_schema_name(op, 0),
                                      "self")))) {
        target = PyUnicode_FromString(opname);
        opcode = "call_method";
    }
    if (target == NULL) {
        target = p_module_attr(STAX_PY_FUNCTIONAL, opname);
    }
    if (target == NULL) {
        target = p_module_attr(STAX_PY_PACKAGE, opname);
    }
    if (target == NULL) {
        PyErr_Format(PyExc_LookupError, "decomposition: no callable for %s",
                     opname);
        return NULL;
    }
    node = stax_graph_p_insert(c->graph, c->before, opcode, target, args,
                               NULL, 1);
    Py_DECREF(target);
    if (node != NULL) {
        stax_graph_p_copy_stack(node, c->before);
    }
    if (node != NULL && PyList_Append(c->created, node) < 0) {
        Py_CLEAR(node);
    }
    return node;
}

static int
p_rollback(PyObject *graph, PyObject *created)
{
    for (Py_ssize_t i = PyList_GET_SIZE(created) - 1; i >= 0; i--) {
        if (stax_graph_p_erase(graph, PyList_GET_ITEM(created, i)) < 0) {
            return -1;
        }
    }
    return 0;
}

/* A pointwise op with a formula and a float16/bfloat16 result stays whole:
 * its formula is lowered in float32 and rounded once, as torch's kernel and
 * eager compute it; its decomposition would round every step to 16 bits
 * (hardswish, mish, elu ...). */
static int
half_like_formula(const stax_op_info *info, PyObject *n)
{
    PyObject *v = stax_graph_p_val(n);
    return info->kind == STAX_OPK_POINTWISE && info->formula != NULL
           && v != NULL && StaxTensor_Check(v)
           && stax_dtype_is_half_like(((StaxTensor *)v)->dtype);
}

int
stax_graph_p_decompose_pass(p_pass_ctx *c)
{
    PyObject *nodes = stax_graph_p_nodes(c->graph);
    PyObject *done = PyDict_New();    /* op name -> list of node names */
    int changed = 0, total_new = 0;
    if (nodes == NULL || done == NULL) {
        goto error;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
        PyObject *n = PyList_GET_ITEM(nodes, i);
        p_opref r;
        if (!stax_graph_p_node_opref(n, &r) || r.info == NULL || r.inplace
            || r.getitem || stax_graph_p_is_random(r.info)
            || (r.info->flags & STAX_OPF_KEEP_WHOLE)
            || half_like_formula(r.info, n)) {
            continue;
        }
        const p_sexp *t = stax_graph_p_decomp(r.info);
        if (t == NULL) {
            continue;
        }
        p_opcode_t opc = stax_graph_p_opcode(n);
        PyObject *args = stax_graph_p_attr(n, "args");
        PyObject *kw = args ? stax_graph_p_attr(n, "kwargs") : NULL;
        PyObject *bound = NULL, *res = NULL;
        if (kw == NULL) {
            Py_XDECREF(args);
            goto error;
        }
        (void)opc;
        PyObject *targs = PySequence_Tuple(args);
        bound = targs ? stax_graph_p_bind(r.info, targs,
                                          kw == Py_None ? NULL : kw) : NULL;
        Py_XDECREF(targs);
        Py_DECREF(args);
        Py_DECREF(kw);
        if (bound == NULL || !stax_graph_p_decomp_applicable(r.info, t, bound)) {
            PyErr_Clear();
            Py_XDECREF(bound);
            continue;
        }
        p_emit_ctx ec = {c->graph, n, PyList_New(0)};
        if (ec.created == NULL) {
            Py_DECREF(bound);
            goto error;
        }
        res = stax_graph_p_eval_decomp(t, r.info, bound, p_emit_py, &ec);
        Py_DECREF(bound);
        /* the expansion must keep dtype and shape (judged on vals) */
        PyObject *vn = stax_graph_p_val(n);
        if (res != NULL && vn != NULL) {
            PyObject *vr = stax_graph_p_is_node(res) ? stax_graph_p_val(res)
                                                     : NULL;
            if (vr == NULL || !stax_graph_p_same_meta(vn, vr)) {
                Py_CLEAR(res);
            }
        }
        if (res == NULL) {
            PyErr_Clear();
            if (p_rollback(c->graph, ec.created) < 0) {
                Py_DECREF(ec.created);
                goto error;
            }
            Py_DECREF(ec.created);
            continue;
        }
        PyObject *nm = stax_graph_p_attr(n, "name");
        PyObject *lst = NULL;
        if (nm == NULL) {
            Py_DECREF(res);
            Py_DECREF(ec.created);
            goto error;
        }
        lst = PyDict_GetItemString(done, r.info->name);
        if (lst == NULL) {
            lst = PyList_New(0);
            if (lst == NULL || PyDict_SetItemString(done, r.info->name, lst) < 0) {
                Py_XDECREF(lst);
                Py_DECREF(nm);
                Py_DECREF(res);
                Py_DECREF(ec.created);
                goto error;
            }
            Py_DECREF(lst);
        }
        total_new += (int)PyList_GET_SIZE(ec.created);
        /* the expansion's result takes over n's sample itself: a view of n
         * (n.t()) shares n's sample storage, and functionalization tells a
         * view (a write through it reaches n) from a copy by that sharing;
         * the freshly computed sample is another storage, and a
         * `v.t().zero_()` would write a copy */
        if (vn != NULL && StaxNode_Check(res)
            && PySequence_Contains(ec.created, res) == 1
            && PyDict_SetItemString(((StaxNode *)res)->meta, "val", vn) < 0) {
            Py_DECREF(nm);
            Py_DECREF(res);
            Py_DECREF(ec.created);
            goto error;
        }
        if (PyList_Append(lst, nm) < 0
            || stax_graph_p_replace_uses(n, res) < 0
            || stax_graph_p_erase(c->graph, n) < 0) {
            Py_DECREF(nm);
            Py_DECREF(res);
            Py_DECREF(ec.created);
            goto error;
        }
        Py_DECREF(nm);
        Py_DECREF(res);
        Py_DECREF(ec.created);
        changed = 1;
    }
    if (changed) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(done, &pos, &k, &v)) {
            PyObject *sep = PyUnicode_FromString(", %");
            PyObject *j = sep ? PyUnicode_Join(sep, v) : NULL;
            Py_XDECREF(sep);
            if (j == NULL
                || stax_graph_p_note(c, "expanded %zd %U (%%%U)",
                                     PyList_GET_SIZE(v), k, j) < 0) {
                Py_XDECREF(j);
                goto error;
            }
            Py_DECREF(j);
        }
        if (stax_graph_p_note(c, "%d primitive nodes", total_new) < 0) {
            goto error;
        }
    }
    Py_DECREF(nodes);
    Py_DECREF(done);
    return changed;
error:
    Py_XDECREF(nodes);
    Py_XDECREF(done);
    return -1;
}
