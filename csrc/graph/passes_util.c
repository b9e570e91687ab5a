/* Helpers shared by the graph transformations: node access and edits on
 * StaxNode/StaxGraph, op lookup in the ops room's table, schema binding,
 * running calls on sample values, and graph edits. */
#include "graph/passes_internal.h"

#include <stdarg.h>
#include <string.h>

/* The passes edit StaxGraph/StaxNode directly (graph.h's C API); the
 * Python Graph/Node objects are the same objects, seen from Python. */
int
stax_graph_p_learn_node_type(PyObject *graph)
{
    if (!StaxGraph_Check(graph)) {
        PyErr_Format(PyExc_TypeError,
                     "expected a tensorplay Graph or GraphModule, got %.100s",
                     Py_TYPE(graph)->tp_name);
        return -1;
    }
    return 0;
}

int
stax_graph_p_is_node(PyObject *o)
{
    return StaxNode_Check(o);
}

const char *
stax_graph_p_opcode_str(p_opcode_t op)
{
    return op < P_UNKNOWN ? stax_node_op_name((stax_node_op_t)op) : "?";
}

/* o.<name>; a Node's fields are read from the struct */
PyObject *
stax_graph_p_attr(PyObject *o, const char *name)
{
    if (StaxNode_Check(o)) {
        StaxNode *n = (StaxNode *)o;
        PyObject *f = !strcmp(name, "args")     ? n->args
                      : !strcmp(name, "kwargs") ? n->kwargs
                      : !strcmp(name, "target") ? n->target
                      : !strcmp(name, "meta")   ? n->meta
                      : !strcmp(name, "name")   ? n->name
                      : !strcmp(name, "users")  ? n->users : NULL;
        if (f != NULL) {
            return Py_NewRef(f);
        }
        if (!strcmp(name, "op")) {
            return PyUnicode_FromString(stax_node_op_name(n->op));
        }
    }
    return PyObject_GetAttrString(o, name);
}

_Static_assert((int)P_PLACEHOLDER == (int)STAX_NODE_PLACEHOLDER
               && (int)P_OUTPUT == (int)STAX_NODE_OUTPUT
               && (int)P_CALL_METHOD == (int)STAX_NODE_CALL_METHOD,
               "p_opcode_t follows stax_node_op_t");

p_opcode_t
stax_graph_p_opcode(PyObject *node)
{
    if (!StaxNode_Check(node)) {
        PyErr_SetString(PyExc_ValueError, "node with an unknown opcode");
        return P_UNKNOWN;
    }
    return (p_opcode_t)((StaxNode *)node)->op;
}

PyObject *
stax_graph_p_nodes(PyObject *graph)
{
    return stax_graph_node_list(graph);
}

int
stax_graph_p_users_count(PyObject *node)
{
    return (int)PyDict_GET_SIZE(((StaxNode *)node)->users);
}

PyObject *
stax_graph_p_val(PyObject *node)
{
    if (!StaxNode_Check(node)) {
        return NULL;
    }
    return PyDict_GetItemString(((StaxNode *)node)->meta, "val"); /* borrowed */
}

/* ---- op table -------------------------------------------------------- */

const stax_op_info *
stax_graph_p_op_by_name(const char *name)
{
    return stax_op_row(name);
}

static int
p_is_operator_fn(PyObject *target)
{
    PyObject *mod = PyObject_GetAttrString(target, "__module__");
    int r = 0;
    if (mod == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (PyUnicode_Check(mod)) {
        const char *m = PyUnicode_AsUTF8(mod);
        r = m && (strcmp(m, "_operator") == 0 || strcmp(m, "operator") == 0);
    }
    Py_DECREF(mod);
    return r;
}

/* name of an op overload object (tp.ops.add.Tensor): "add" */
static int
p_overload_name(PyObject *target, char *buf, size_t n)
{
    PyObject *nm = PyObject_GetAttrString(target, "_stax_op");
    if (nm == NULL) {
        PyErr_Clear();
        nm = PyObject_GetAttrString(target, "__name__");
    }
    if (nm == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = 0;
    if (PyUnicode_Check(nm)) {
        const char *s = PyUnicode_AsUTF8(nm);
        if (s != NULL) {
            snprintf(buf, n, "%s", s);
            char *dot = strchr(buf, '.');
            if (dot) {
                *dot = '\0';
            }
            ok = 1;
        }
    }
    PyErr_Clear();
    Py_DECREF(nm);
    return ok;
}

/* 1 if the node's call passes a true `inplace` argument (by keyword or by
 * position) to an op whose schema has one, else 0 */
static int
p_inplace_kwarg(PyObject *node, const stax_op_info *info)
{
    int k = -1, n = stax_graph_p_schema_len(info), r = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(stax_graph_p_schema_name(info, i), "inplace") == 0) {
            k = i;
        }
    }
    if (k < 0) {
        return 0;
    }
    PyObject *kw = stax_graph_p_attr(node, "kwargs");
    PyObject *a = kw ? stax_graph_p_attr(node, "args") : NULL;
    PyObject *v = NULL;
    if (kw != NULL && PyDict_Check(kw)) {
        v = PyDict_GetItemString(kw, "inplace");
    }
    if (v == NULL && a != NULL && PyTuple_Check(a) && k < PyTuple_GET_SIZE(a)
        && !stax_graph_p_schema_kwonly(info, k)) {
        v = PyTuple_GET_ITEM(a, k);
    }
    if (v != NULL && !stax_graph_p_is_node(v)) {
        r = PyObject_IsTrue(v) == 1;
    }
    Py_XDECREF(kw);
    Py_XDECREF(a);
    PyErr_Clear();
    return r;
}

int
stax_graph_node_is_inplace(PyObject *node)
{
    p_opref r;
    stax_graph_p_node_opref(node, &r);
    return r.inplace;
}

stax_node_writes_t
stax_graph_node_writes(PyObject *node)
{
    p_opref r;
    stax_graph_p_node_opref(node, &r);
    return !r.inplace     ? STAX_WRITES_NONE
           : r.setitem     ? STAX_WRITES_SETITEM
           : r.inplace_arg ? STAX_WRITES_INPLACE_ARG
                           : STAX_WRITES_INPLACE;
}

int
stax_graph_p_node_opref(PyObject *node, p_opref *out)
{
    memset(out, 0, sizeof(*out));
    p_opcode_t op = stax_graph_p_opcode(node);
    if (op == P_UNKNOWN) {
        PyErr_Clear();
        return 0;
    }
    if (op != P_CALL_FUNCTION && op != P_CALL_METHOD) {
        return 0;
    }
    PyObject *target = stax_graph_p_attr(node, "target");
    if (target == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (op == P_CALL_METHOD) {
        const char *s = PyUnicode_Check(target) ? PyUnicode_AsUTF8(target) : NULL;
        if (s == NULL) {
            PyErr_Clear();
            Py_DECREF(target);
            return 0;
        }
        snprintf(out->name, sizeof(out->name), "%s", s);
    }
    else if (p_is_operator_fn(target)) {
        out->is_operator = 1;
        if (!p_overload_name(target, out->name, sizeof(out->name))) {
            Py_DECREF(target);
            return 0;
        }
        /* operator.iadd -> add_; operator.imatmul -> matmul_ (no twin:
         * an unknown in-place op below) */
        int ip = 0;
        const stax_pyop_info *po = stax_pyop_by_fn(out->name, &ip);
        if (po != NULL && po->op != STAX_OP_NONE) {
            const stax_op_info *o = &stax_op_table[po->op];
            snprintf(out->name, sizeof(out->name), "%s%s",
                     ip && o->inplace ? o->inplace : o->name,
                     ip && !o->inplace ? "_" : "");
        }
        if (po != NULL && po->key == STAX_PYOP_GETITEM) {
            out->getitem = 1;
        }
        else if (po != NULL && po->key == STAX_PYOP_SETITEM) {
            out->setitem = 1;
            out->inplace = 1;
        }
    }
    else if (!p_overload_name(target, out->name, sizeof(out->name))) {
        Py_DECREF(target);
        return 0;
    }
    Py_DECREF(target);
    if (out->getitem || out->setitem) {
        out->info = stax_graph_p_op_by_name(out->name);
        return 1;
    }
    out->call = stax_call_by_name(out->name);
    if (out->call != NULL && (out->call->kind == STAX_CALLK_RANDOM
                              || (out->call->kind == STAX_CALLK_FACTORY
                                  && out->call->op != STAX_OP_NONE))) {
        out->random = 1;   /* randint, rand (rand_like's draws), random_ */
    }
    const stax_op_info *info = stax_graph_p_op_by_name(out->name);
    if (info != NULL) {
        out->info = info;
        if ((info->flags & STAX_OPF_NONDETERMINISTIC)
            || info->kind == STAX_OPK_RANDOM) {
            out->random = 1;
        }
        if (info->flags & STAX_OPF_INPLACE) {
            out->inplace = 1;
        }
        else if (p_inplace_kwarg(node, info) == 1) {
            out->inplace = 1;   /* F.relu(x, inplace=True) writes x */
            out->inplace_arg = 1;
        }
        return 1;
    }
    /* an in-place twin without a row of its own: add_ -> add */
    info = stax_op_by_name(out->name);
    if (info != NULL && (info->flags & STAX_OPF_INPLACE)) {
        out->info = &stax_op_table[info->id];
        out->inplace = 1;
        return 1;
    }
    size_t L = strlen(out->name);
    if (L > 1 && out->name[L - 1] == '_' && out->name[L - 2] != '_') {
        out->inplace = 1;   /* unknown in-place op: still a side effect */
    }
    return 0;
}

/* ---- schema ---------------------------------------------------------- */

/* an op's schema: its row's, as the ops room parsed it (names, types,
 * keyword-only marks, defaults) */
static const stax_op_schema *
p_schema_of(const stax_op_info *op)
{
    const stax_op_info *row = stax_op_row(op->name);
    return row != NULL ? stax_ops_schema(row) : NULL;
}

int
stax_graph_p_schema_len(const stax_op_info *op)
{
    const stax_op_schema *s = p_schema_of(op);
    return s ? s->n : 0;
}

const char *
stax_graph_p_schema_name(const stax_op_info *op, int i)
{
    return p_schema_of(op)->params[i].name;
}

const char *
stax_graph_p_schema_type(const stax_op_info *op, int i)
{
    return p_schema_of(op)->params[i].type;
}

PyObject *
stax_graph_p_schema_default(const stax_op_info *op, int i)
{
    return p_schema_of(op)->params[i].dflt;
}

int
stax_graph_p_schema_kwonly(const stax_op_info *op, int i)
{
    return p_schema_of(op)->params[i].kwonly;
}

/* The eager binder's tuple (stax_op_bind: one argument binding for eager,
 * autograd, lowering and the passes); varargs packed into the list
 * parameter (x.view(3, 4)) stay a list, as a user writes the list. */
PyObject *
stax_graph_p_bind(const stax_op_info *op, PyObject *args, PyObject *kwargs)
{
    const stax_op_schema *s = p_schema_of(op);
    if (s == NULL) {
        PyErr_Format(PyExc_TypeError, "%s: no schema", op->name);
        return NULL;
    }
    PyObject *b = stax_op_bind(stax_op_row(op->name), args,
                               kwargs != NULL && PyDict_Check(kwargs) ? kwargs : NULL);
    if (b != NULL && PyTuple_GET_SIZE(args) > s->npos && s->npos >= 1) {
        PyObject *l = PySequence_List(PyTuple_GET_ITEM(b, s->npos - 1));
        if (l == NULL || PyTuple_SetItem(b, s->npos - 1, l) < 0) {
            Py_CLEAR(b);
        }
    }
    return b;
}

/* ---- values ---------------------------------------------------------- */


static PyObject *
p_val_of(PyObject *node, void *ctx)
{
    (void)ctx;
    PyObject *v = stax_graph_p_val(node);
    if (v == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_LookupError, "no val");
        }
        return NULL;
    }
    return Py_NewRef(v);
}

static int
p_has_cuda_val(PyObject *o)
{
    if (StaxTensor_Check(o)) {
        return stax_tensor_is_cuda((StaxTensor *)o);
    }
    if (PyList_Check(o) || PyTuple_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            if (p_has_cuda_val(PySequence_Fast_GET_ITEM(o, i))) {
                return 1;
            }
        }
    }
    else if (PyDict_Check(o)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(o, &pos, &k, &v)) {
            if (p_has_cuda_val(v)) {
                return 1;
            }
        }
    }
    return 0;
}

/* An op of the table on CUDA values: its metadata only (the tracer's
 * deferred samples, stax_ops_meta_call), as the trace itself does; the
 * op-level graph needs no element of a value, and computing one on the
 * device built and ran an eager NVRTC kernel (the native_layer_norm that
 * layer_norm decomposes into: 2.3 s of a 16384^2 first call). Where the
 * metadata rules need values, the op runs as before. */
static PyObject *
run_op_on_vals(const stax_op_info *info, PyObject *a, PyObject *k)
{
    PyObject *fn = stax_op_function(info), *r;
    if (fn != NULL && (p_has_cuda_val(a) || (k != NULL && p_has_cuda_val(k)))) {
        /* these values feed the op graph, never autograd; the metadata path
         * declines under grad mode, which made layer_norm's decomposition
         * build an eager CUDA kernel over a host stand-in (as the tracer) */
        int grad = stax_grad_enabled();
        stax_set_grad_enabled(0);
        r = stax_ops_meta_call(fn, a, k);
        stax_set_grad_enabled(grad);
        if (r != NULL && r != Py_NotImplemented) {
            return r;
        }
        if (r == NULL) {
            PyErr_Clear();
        }
        Py_XDECREF(r);
    }
    return stax_op_call(info, a, k);
}

static PyObject *
run_on_vals(p_opcode_t op, const stax_op_info *info, PyObject *target,
            PyObject *args, PyObject *kwargs)
{
    PyObject *a = NULL, *k = NULL, *r = NULL, *fn = NULL, *rest = NULL;
    a = stax_graph_map_arg(args, p_val_of, NULL);
    if (a == NULL) {
        goto done;
    }
    if (kwargs != NULL && kwargs != Py_None) {
        k = stax_graph_map_arg(kwargs, p_val_of, NULL);
        if (k == NULL) {
            goto done;
        }
    }
    if (op == P_CALL_FUNCTION && info != NULL) {
        r = run_op_on_vals(info, a, k);
    }
    else if (op == P_CALL_FUNCTION) {
        r = PyObject_Call(target, a, k);
    }
    else if (op == P_CALL_METHOD && PyTuple_GET_SIZE(a) > 0) {
        fn = PyObject_GetAttr(PyTuple_GET_ITEM(a, 0), target);
        rest = fn ? PyTuple_GetSlice(a, 1, PyTuple_GET_SIZE(a)) : NULL;
        r = rest ? PyObject_Call(fn, rest, k) : NULL;
    }
done:
    if (r == NULL) {
        PyErr_Clear();
    }
    Py_XDECREF(a);
    Py_XDECREF(k);
    Py_XDECREF(fn);
    Py_XDECREF(rest);
    return r;
}

PyObject *
stax_graph_p_run_on_vals(p_opcode_t op, PyObject *target, PyObject *args,
                         PyObject *kwargs)
{
    return run_on_vals(op, NULL, target, args, kwargs);
}

PyObject *
stax_graph_p_run_op_on_vals(const stax_op_info *op, PyObject *args,
                            PyObject *kwargs)
{
    return run_on_vals(P_CALL_FUNCTION, op, NULL, args, kwargs);
}

static int
p_attr_eq(PyObject *a, PyObject *b, const char *name)
{
    PyObject *x = PyObject_GetAttrString(a, name);
    PyObject *y = x ? PyObject_GetAttrString(b, name) : NULL;
    int r = 0;
    if (x && y) {
        if (strcmp(name, "shape") == 0) {
            PyObject *tx = PySequence_Tuple(x), *ty = PySequence_Tuple(y);
            r = (tx && ty) ? PyObject_RichCompareBool(tx, ty, Py_EQ) : -1;
            Py_XDECREF(tx);
            Py_XDECREF(ty);
        }
        else {
            r = PyObject_RichCompareBool(x, y, Py_EQ);
        }
    }
    Py_XDECREF(x);
    Py_XDECREF(y);
    if (r < 0 || PyErr_Occurred()) {
        PyErr_Clear();
        r = 0;
    }
    return r;
}

int
stax_graph_p_same_meta(PyObject *a, PyObject *b)
{
    if (a == NULL || b == NULL) {
        return 0;
    }
    return p_attr_eq(a, b, "dtype") && p_attr_eq(a, b, "shape");
}

/* ---- edits ----------------------------------------------------------- */

PyObject *
stax_graph_p_insert(PyObject *graph, PyObject *before, const char *opcode,
                    PyObject *target, PyObject *args, PyObject *kwargs,
                    int compute_val)
{
    StaxNode *node;
    stax_node_op_t op;
    if (!StaxGraph_Check(graph)
        || (before != NULL && !StaxNode_Check(before))) {
        PyErr_SetString(PyExc_TypeError, "insert: expected a Graph and a Node");
        return NULL;
    }
    if (stax_node_op_from_name(opcode, &op) < 0) {
        return NULL;
    }
    node = stax_graph_insert_before((StaxGraph *)graph, (StaxNode *)before,
                                    op, target, args, kwargs, NULL);
    if (node != NULL && compute_val) {
        PyObject *val = stax_graph_p_run_on_vals(
            op == STAX_NODE_CALL_METHOD ? P_CALL_METHOD : P_CALL_FUNCTION,
            target, node->args, node->kwargs);
        if (val != NULL) {
            if (PyDict_SetItemString(node->meta, "val", val) < 0) {
                PyErr_Clear();
            }
            Py_DECREF(val);
        }
    }
    return (PyObject *)node;
}

int
stax_graph_p_set_args(PyObject *node, PyObject *args, PyObject *kwargs)
{
    return stax_node_set_args((StaxNode *)node, args, kwargs);
}

int
stax_graph_p_replace_uses(PyObject *node, PyObject *value)
{
    return stax_node_replace_all_uses_with((StaxNode *)node, value);
}

int
stax_graph_p_erase(PyObject *graph, PyObject *node)
{
    if (!StaxGraph_Check(graph) || !StaxNode_Check(node)) {
        PyErr_SetString(PyExc_TypeError, "erase_node expects a Node");
        return -1;
    }
    return stax_graph_erase_node((StaxGraph *)graph, (StaxNode *)node);
}

int
stax_graph_p_copy_stack(PyObject *dst, PyObject *src)
{
    PyObject *st = PyDict_GetItemString(((StaxNode *)src)->meta, "stack");
    if (st != NULL
        && PyDict_SetItemString(((StaxNode *)dst)->meta, "stack", st) < 0) {
        PyErr_Clear();
    }
    return 0;
}

int
stax_graph_p_note(p_pass_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *s = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (s == NULL) {
        return -1;
    }
    int r = PyList_Append(c->msg, s);
    Py_DECREF(s);
    return r;
}

/* 1 when a node of o (nested in tuples, lists, dicts) has an integer
 * tensor value (bool excluded: a mask never indexes out of range) */
static int
p_has_int_tensor(PyObject *o, int depth)
{
    if (depth > 8) {
        return 0;
    }
    if (stax_graph_p_is_node(o)) {
        PyObject *v = stax_graph_p_val(o);
        return v != NULL && StaxTensor_Check(v)
               && stax_dtype_is_integral(((StaxTensor *)v)->dtype);
    }
    if (PyTuple_Check(o) || PyList_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            if (p_has_int_tensor(PySequence_Fast_GET_ITEM(o, i), depth + 1)) {
                return 1;
            }
        }
    }
    else if (PyDict_Check(o)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(o, &pos, &k, &v)) {
            if (p_has_int_tensor(v, depth + 1)) {
                return 1;
            }
        }
    }
    return 0;
}

int
stax_graph_p_may_raise(PyObject *node)
{
    p_opref r;
    PyObject *args = NULL, *kwargs = NULL, *val;
    int res = 0, from = 0;
    if (!stax_graph_p_node_opref(node, &r) || r.info == NULL) {
        return 0;
    }
    switch (r.info->id) {
    case STAX_OP_FLOOR_DIVIDE:
    case STAX_OP_REMAINDER:
    case STAX_OP_FMOD:
    case STAX_OP_DIV:
        /* torch raises for an integer division by zero (on the CPU) */
        val = stax_graph_p_val(node);
        return val != NULL && StaxTensor_Check(val)
               && stax_dtype_is_integral(((StaxTensor *)val)->dtype);
    case STAX_OP_GETITEM:
    case STAX_OP_INDEX_SELECT:
    case STAX_OP_GATHER:
    case STAX_OP_INDEX_ADD:
    case STAX_OP_INDEX_COPY:
    case STAX_OP_INDEX_FILL:
    case STAX_OP_SCATTER:
    case STAX_OP_SCATTER_ADD:
    case STAX_OP_SCATTER_REDUCE:
    case STAX_OP_CROSS_ENTROPY:
    case STAX_OP_NLL_LOSS:
        from = 1;   /* the index (target) operands: not the first */
        break;
    case STAX_OP_EMBEDDING:
    case STAX_OP_ONE_HOT:
    case STAX_OP_REPEAT_INTERLEAVE:
        break;      /* the first operand holds the indices (counts) */
    default:
        return 0;
    }
    args = stax_graph_p_attr(node, "args");
    kwargs = args ? stax_graph_p_attr(node, "kwargs") : NULL;
    if (args != NULL && PyTuple_Check(args)) {
        for (Py_ssize_t i = from; i < PyTuple_GET_SIZE(args) && !res; i++) {
            res = p_has_int_tensor(PyTuple_GET_ITEM(args, i), 0);
        }
    }
    if (!res && kwargs != NULL) {
        res = p_has_int_tensor(kwargs, 0);
    }
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    PyErr_Clear();
    return res;
}

/* 1 when a node of o (nested) has a tensor sample whose shadow value
 * (meta['val2'], dynamic shapes) has other sizes */
static int
p_has_symbolic_tensor(PyObject *o, int depth)
{
    if (depth > 8) {
        return 0;
    }
    if (stax_graph_p_is_node(o)) {
        PyObject *m = stax_graph_p_attr(o, "meta");
        PyObject *v = m && PyDict_Check(m) ? PyDict_GetItemString(m, "val") : NULL;
        PyObject *v2 = m && PyDict_Check(m) ? PyDict_GetItemString(m, "val2") : NULL;
        int r = v != NULL && v2 != NULL && StaxTensor_Check(v) && StaxTensor_Check(v2)
                && (((StaxTensor *)v)->ndim != ((StaxTensor *)v2)->ndim
                    || memcmp(((StaxTensor *)v)->sizes, ((StaxTensor *)v2)->sizes,
                              sizeof(int64_t) * (size_t)((StaxTensor *)v)->ndim) != 0);
        Py_XDECREF(m);
        PyErr_Clear();
        return r;
    }
    if (PyTuple_Check(o) || PyList_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            if (p_has_symbolic_tensor(PySequence_Fast_GET_ITEM(o, i), depth + 1)) {
                return 1;
            }
        }
    }
    else if (PyDict_Check(o)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(o, &pos, &k, &v)) {
            if (p_has_symbolic_tensor(v, depth + 1)) {
                return 1;
            }
        }
    }
    return 0;
}

int
stax_graph_p_symbolic_operand(PyObject *node)
{
    PyObject *args = stax_graph_p_attr(node, "args");
    PyObject *kwargs = args ? stax_graph_p_attr(node, "kwargs") : NULL;
    int r = (args != NULL && p_has_symbolic_tensor(args, 0))
            || (kwargs != NULL && p_has_symbolic_tensor(kwargs, 0));
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    PyErr_Clear();
    return r;
}

/* 1 if the two sample tensors share storage, 0 if not, -1 unknown */
int
stax_graph_p_shares_storage(PyObject *a, PyObject *b)
{
    if (a == NULL || b == NULL) {
        return -1;
    }
    PyObject *sa = PyObject_GetAttrString(a, "_storage");
    PyObject *sb = sa ? PyObject_GetAttrString(b, "_storage") : NULL;
    int r = (sa && sb) ? (sa == sb) : -1;
    Py_XDECREF(sa);
    Py_XDECREF(sb);
    PyErr_Clear();
    return r;
}
