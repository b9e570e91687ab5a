/* Python entry points of the stand-in lowering: nvrtc_render_expr (one
 * S-expression, optionally reduced), nvrtc_render_stages (a multi-stage
 * kernel) and nvrtc_render_graph (a GraphModule: a pointwise chain,
 * optionally ending in one reduction, read through its Python API, each
 * node's formula from the op table). Each builds a spec (nvrtc_spec.h) and
 * returns the kernel record of its ONE fused kernel. */
#include "backend_nvrtc/nvrtc_spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ render_expr */

/* the zeroed spec of a hand-written kernel (render_expr, render_stages)
 * named name over the inputs in seq (a fast sequence), no reduction yet;
 * NULL with MemoryError */
static spec_t *
new_spec(const char *name, PyObject *seq)
{
    spec_t *k = PyMem_Calloc(1, sizeof(*k));
    if (k == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    snprintf(k->name, sizeof(k->name), "%s", name);
    k->reduce = -1;
    k->ninputs = (int)PySequence_Fast_GET_SIZE(seq);
    return k;
}

/* the inputs a .. h of a hand-written kernel (render_expr, render_stages):
 * each one's layout, label and load node; *nd = the largest rank */
static int
read_lettered_inputs(spec_t *k, PyObject *seq, xnode **ops, int *nd)
{
    *nd = 0;
    for (int i = 0; i < k->ninputs; i++) {
        if (stax_nvrtc_read_layout(PySequence_Fast_GET_ITEM(seq, i),
                                   &k->in[i]) < 0) {
            return -1;
        }
        snprintf(k->in[i].label, NAME_LEN, "%c", 'a' + i);
        *nd = k->in[i].ndim > *nd ? k->in[i].ndim : *nd;
        if ((ops[i] = stax_nvrtc_new_load(k, i)) == NULL) {
            return -1;
        }
    }
    return 0;
}

PyObject *
stax_nvrtc_py_render_expr(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"expr", "inputs", "reduce", "dims", "keepdim",
                             "name", "compile", NULL};
    const char *expr = NULL, *reduce = NULL, *name = "stax_kernel";
    PyObject *inputs = NULL, *dims = Py_None, *seq = NULL, *res = NULL;
    int keepdim = 0, compile = 0, nd = 0, red[STAX_MAX_DIMS] = {0};
    spec_t *k = NULL;
    xnode *ops[MAX_INPUTS];
    (void)self;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs,
                                     "sO|zOpsp:nvrtc_render_expr", kwlist,
                                     &expr, &inputs, &reduce, &dims,
                                     &keepdim, &name, &compile)) {
        return NULL;
    }
    seq = PySequence_Fast(inputs, "inputs must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    k = new_spec(name, seq);
    if (k == NULL) {
        goto done;
    }
    if (k->ninputs > 8) {
        PyErr_SetString(PyExc_ValueError, "at most 8 inputs (a .. h)");
        goto done;
    }
    if (read_lettered_inputs(k, seq, ops, &nd) < 0) {
        goto done;
    }
    k->body = stax_nvrtc_parse_formula(k, expr, ops, k->ninputs, NULL, NULL);
    if (k->body == NULL) {
        goto done;
    }
    if (reduce != NULL && stax_nvrtc_read_dims(dims, nd, red) < 0) {
        goto done;
    }
    if (stax_nvrtc_layout_kernel(k, reduce ? red : NULL, keepdim) < 0) {
        goto done;
    }
    k->out_dtype = k->body->dtype;
    if (reduce != NULL && stax_nvrtc_set_reduction(k, reduce) < 0) {
        goto done;
    }
    res = stax_nvrtc_kernel_record(k, compile);
done:
    PyMem_Free(k);
    Py_XDECREF(seq);
    return res;
}

/* ------------------------------------------------------------ stages */

/* nvrtc_render_stages(inputs, stages, dims=-1, keepdim=False,
 *                     name="stax_kernel", compile=False) -> kernel
 * A multi-stage kernel over one iteration space, in the loop IR's terms:
 *   ("reduce", op, expr)  fold expr over `dims` into the next accumulator
 *   ("inner", expr)       store expr at every point (full shape)
 *   ("outer", expr)       store expr once per outer point (reduced shape)
 * expressions: a .. h (inputs), acc0 .. (earlier reduce stages), numbers. */
PyObject *
stax_nvrtc_py_render_stages(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"inputs", "stages", "dims", "keepdim", "name",
                             "compile", NULL};
    PyObject *inputs = NULL, *stages = NULL, *dims = NULL, *seq = NULL;
    PyObject *sseq = NULL, *res = NULL;
    const char *name = "stax_kernel";
    int keepdim = 0, compile = 0, nd = 0, red[STAX_MAX_DIMS] = {0};
    spec_t *k = NULL;
    xnode *ops[MAX_INPUTS];
    (void)self;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs,
                                     "OO|Opsp:nvrtc_render_stages", kwlist,
                                     &inputs, &stages, &dims, &keepdim, &name,
                                     &compile)) {
        return NULL;
    }
    seq = PySequence_Fast(inputs, "inputs must be a sequence");
    sseq = seq ? PySequence_Fast(stages, "stages must be a sequence") : NULL;
    if (sseq == NULL) {
        goto done;
    }
    k = new_spec(name, seq);
    if (k == NULL) {
        goto done;
    }
    if (k->ninputs > 8 || PySequence_Fast_GET_SIZE(sseq) > MAX_STAGES
        || PySequence_Fast_GET_SIZE(sseq) == 0) {
        PyErr_SetString(PyExc_ValueError, "1 to 8 inputs (a .. h) and 1 to 8 "
                        "stages");
        goto done;
    }
    if (read_lettered_inputs(k, seq, ops, &nd) < 0) {
        goto done;
    }
    if (dims == NULL) {
        dims = PyLong_FromLong(-1);
        if (dims == NULL) {
            goto done;
        }
    }
    else {
        Py_INCREF(dims);
    }
    if (stax_nvrtc_read_dims(dims, nd, red) < 0
        || stax_nvrtc_layout_kernel(k, red, keepdim) < 0) {
        Py_DECREF(dims);
        goto done;
    }
    Py_DECREF(dims);
    for (Py_ssize_t s = 0; s < PySequence_Fast_GET_SIZE(sseq); s++) {
        PyObject *t = PySequence_Fast_GET_ITEM(sseq, s);
        const char *kind = NULL, *op = NULL, *expr = NULL;
        xstage *xs = &k->st[k->nstages];
        if (!PyTuple_Check(t) || !PyArg_ParseTuple(t, "s|ss", &kind, &op,
                                                   &expr)) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_TypeError, "a stage is a tuple");
            }
            goto done;
        }
        if (strcmp(kind, "reduce") == 0) {
            const red_row *r = expr ? stax_nvrtc_find_reduction(op) : NULL;
            if (r == NULL || r->mean) {
                PyErr_Format(PyExc_ValueError, "stage %zd: ('reduce', op, "
                             "expr) with op in sum prod amax amin argmax "
                             "argmin any all", s);
                goto done;
            }
            xs->body = stax_nvrtc_parse_formula(k, expr, ops, k->ninputs,
                                                NULL, NULL);
            if (xs->body == NULL) {
                goto done;
            }
            xs->kind = STAX_STAGE_REDUCE;
            xs->op = (int)r->op;
            xs->dtype = stax_nvrtc_reduction_dtype(r, xs->body->dtype);
            k->nstages++;
            k->naccs++;
            continue;
        }
        if (expr != NULL || (strcmp(kind, "inner") != 0
                             && strcmp(kind, "outer") != 0)) {
            PyErr_Format(PyExc_ValueError, "stage %zd: ('reduce', op, expr), "
                         "('inner', expr) or ('outer', expr)", s);
            goto done;
        }
        xs->body = stax_nvrtc_parse_formula(k, op, ops, k->ninputs, NULL,
                                            NULL);
        if (xs->body == NULL) {
            goto done;
        }
        xs->kind = kind[0] == 'i' ? STAX_STAGE_INNER : STAX_STAGE_OUTER;
        xs->dtype = xs->body->dtype;
        k->nstages++;
    }
    res = stax_nvrtc_kernel_record(k, compile);
done:
    PyMem_Free(k);
    Py_XDECREF(seq);
    Py_XDECREF(sseq);
    return res;
}

/* ------------------------------------------------------------ graph walk */

typedef struct {
    PyObject *node;            /* borrowed (the graph holds it) */
    xnode *expr;
} env_entry;

typedef struct {
    env_entry *e;
    int n, cap;
} env_t;

static xnode *
env_get(env_t *env, PyObject *node)
{
    for (int i = 0; i < env->n; i++) {
        if (env->e[i].node == node) {
            return env->e[i].expr;
        }
    }
    return NULL;
}

static int
env_put(env_t *env, PyObject *node, xnode *x)
{
    if (env->n == env->cap) {
        int cap = env->cap ? env->cap * 2 : 64;
        env_entry *ne = PyMem_Realloc(env->e, (size_t)cap * sizeof(*ne));
        if (ne == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        env->e = ne;
        env->cap = cap;
    }
    env->e[env->n].node = node;
    env->e[env->n].expr = x;
    env->n++;
    return 0;
}

/* The op name of a call node: call_method -> target; call_function ->
 * target.__name__ (operator.add -> add, tp.ops.add.Tensor -> add). */
static int
node_op_name(PyObject *opcode, PyObject *target, char *out, size_t cap)
{
    static const char *const alias[][2] = {
        {"truediv", "div"}, {"floordiv", "floor_divide"},
        {"and_", "logical_and"}, {"or_", "logical_or"},
        {"invert", "bitwise_not"},
        {NULL, NULL},
    };
    PyObject *nm = NULL;
    const char *s;
    if (PyUnicode_CompareWithASCIIString(opcode, "call_method") == 0
        && PyUnicode_Check(target)) {
        nm = Py_NewRef(target);
    }
    else {
        nm = PyObject_GetAttrString(target, "__name__");
        if (nm == NULL) {
            PyErr_Clear();
            nm = PyObject_Str(target);
        }
    }
    if (nm == NULL || (s = PyUnicode_AsUTF8(nm)) == NULL) {
        Py_XDECREF(nm);
        return -1;
    }
    const char *dot = strrchr(s, '.');
    /* "tensorplay.ops.add.Tensor" / "add.Tensor": keep the op's name */
    if (dot != NULL) {
        const char *p = s, *prev = NULL, *q;
        while ((q = strchr(p, '.')) != NULL && q != dot) {
            prev = q;
            p = q + 1;
        }
        (void)prev;
        snprintf(out, cap, "%.*s", (int)(dot - p), p);
    }
    else {
        snprintf(out, cap, "%s", s);
    }
    Py_DECREF(nm);
    for (int i = 0; alias[i][0] != NULL; i++) {
        if (strcmp(out, alias[i][0]) == 0) {
            snprintf(out, cap, "%s", alias[i][1]);
        }
    }
    return 0;
}

/* schema-driven argument lookup: "(Tensor self, Tensor other, *, Scalar
 * alpha=1)". Returns a new reference, or NULL + no error if absent with no
 * default, or NULL + error. *found tells which. */
typedef struct {
    const char *schema;
    PyObject *args;     /* tuple */
    PyObject *kwargs;   /* dict or NULL */
    const char *opname;
} bind_ctx;

static PyObject *
bind_arg(bind_ctx *c, const char *want, int *found)
{
    const char *p = c->schema ? strchr(c->schema, '(') : NULL;
    int pos = 0, kwonly = 0;
    *found = 0;
    if (p == NULL) {
        return NULL;
    }
    p++;
    while (*p && *p != ')') {
        char item[128], nm[128], dflt[128];
        const char *end = p;
        int depth = 0;
        while (*end && (depth > 0 || (*end != ',' && *end != ')'))) {
            depth += *end == '[' || *end == '(';
            depth -= *end == ']';
            end++;
        }
        snprintf(item, sizeof(item), "%.*s", (int)(end - p), p);
        p = *end == ',' ? end + 1 : end;
        char *it = item;
        while (*it == ' ') {
            it++;
        }
        if (strcmp(it, "*") == 0) {
            kwonly = 1;
            continue;
        }
        /* "Type name=default" */
        char *eq = strchr(it, '=');
        dflt[0] = '\0';
        if (eq != NULL) {
            snprintf(dflt, sizeof(dflt), "%s", eq + 1);
            *eq = '\0';
        }
        char *sp = strrchr(it, ' ');
        snprintf(nm, sizeof(nm), "%s", sp ? sp + 1 : it);
        if (strcmp(nm, want) == 0) {
            PyObject *v = NULL;
            if (!kwonly && pos < PyTuple_GET_SIZE(c->args)) {
                v = Py_NewRef(PyTuple_GET_ITEM(c->args, pos));
            }
            else if (c->kwargs && PyDict_Check(c->kwargs)
                     && (v = PyDict_GetItemString(c->kwargs, want)) != NULL) {
                Py_INCREF(v);
            }
            else if (dflt[0] && strcmp(dflt, "None") != 0) {
                if (strcmp(dflt, "False") == 0 || strcmp(dflt, "True") == 0) {
                    v = PyBool_FromLong(dflt[0] == 'T');
                }
                else if (strpbrk(dflt, ".eE")) {
                    v = PyFloat_FromDouble(atof(dflt));
                }
                else {
                    v = PyLong_FromString(dflt, NULL, 10);
                }
            }
            *found = v != NULL;
            return v;
        }
        if (!kwonly) {
            pos++;
        }
    }
    return NULL;
}

static PyObject *
scalar_arg(void *ctx, const char *name)
{
    bind_ctx *c = ctx;
    int found = 0;
    PyObject *v = bind_arg(c, name, &found);
    if (v == NULL && !PyErr_Occurred()) {
        PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: op %s: "
                     "scalar argument '%s' missing", c->opname, name);
    }
    return v;
}

static xnode *
operand_expr(spec_t *k, env_t *env, PyObject *a, const char *op)
{
    xnode *x = env_get(env, a);
    if (x != NULL) {
        return x;
    }
    if (PyBool_Check(a) || PyLong_Check(a)) {
        long long v = PyLong_AsLongLong(a);
        if (v == -1 && PyErr_Occurred()) {
            return NULL;
        }
        return stax_nvrtc_new_const(k, (double)v, PyBool_Check(a) ? STAX_BOOL
                                                     : STAX_INT64);
    }
    if (PyFloat_Check(a)) {
        return stax_nvrtc_new_const(k, PyFloat_AS_DOUBLE(a), STAX_FLOAT32);
    }
    PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: op %s: operand "
                 "%R is neither a node of this kernel nor a number", op, a);
    return NULL;
}

static int
graph_kernel(spec_t *k, PyObject *gm, PyObject *inputs)
{
    PyObject *graph = NULL, *nodes = NULL, *seq = NULL, *inseq = NULL;
    PyObject *reduce_node = NULL, *reduce_dims = NULL, *out_val = NULL;
    char reduce_name[64] = "";
    int keepdim = 0, nph = 0, rc = -1, red[STAX_MAX_DIMS] = {0};
    env_t env = {NULL, 0, 0};

    graph = PyObject_HasAttrString(gm, "graph")
        ? PyObject_GetAttrString(gm, "graph") : Py_NewRef(gm);
    nodes = graph ? PyObject_GetAttrString(graph, "nodes") : NULL;
    seq = nodes ? PySequence_Fast(nodes, "graph.nodes") : NULL;
    inseq = seq ? PySequence_Fast(inputs, "example_inputs must be a "
                                  "sequence") : NULL;
    if (inseq == NULL) {
        goto done;
    }
    k->reduce = -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *n = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *opc = PyObject_GetAttrString(n, "op");
        PyObject *target = NULL, *args = NULL, *kwargs = NULL, *name = NULL;
        xnode *x = NULL;
        char opname[64];
        int bad_ = 1;

        if (opc == NULL) {
            goto done;
        }
        name = PyObject_GetAttrString(n, "name");
        target = name ? PyObject_GetAttrString(n, "target") : NULL;
        args = target ? PyObject_GetAttrString(n, "args") : NULL;
        kwargs = args ? PyObject_GetAttrString(n, "kwargs") : NULL;
        if (kwargs == NULL) {
            goto node_done;
        }
        if (reduce_node != NULL
            && PyUnicode_CompareWithASCIIString(opc, "output") != 0) {
            PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: node "
                         "%S follows the reduction; the skeleton renders one "
                         "fused loop nest ending in at most one reduction",
                         name);
            goto node_done;
        }
        if (PyUnicode_CompareWithASCIIString(opc, "placeholder") == 0) {
            if (nph >= PySequence_Fast_GET_SIZE(inseq)
                || nph >= MAX_INPUTS) {
                PyErr_Format(PyExc_ValueError, "NVRTC back end: placeholder "
                             "%S has no example input", name);
                goto node_done;
            }
            if (stax_nvrtc_read_layout(PySequence_Fast_GET_ITEM(inseq, nph),
                                       &k->in[nph]) < 0) {
                goto node_done;
            }
            stax_nvrtc_set_name(k->in[nph].label, name, "in");
            k->ninputs = nph + 1;
            x = stax_nvrtc_new_load(k, nph);
            nph++;
            if (x == NULL || env_put(&env, n, x) < 0) {
                goto node_done;
            }
        }
        else if (PyUnicode_CompareWithASCIIString(opc, "call_function") == 0
                 || PyUnicode_CompareWithASCIIString(opc, "call_method")
                    == 0) {
            const op_row *op;
            xnode *ops[4] = {NULL};
            bind_ctx bc;
            if (node_op_name(opc, target, opname, sizeof(opname)) < 0) {
                goto node_done;
            }
            op = stax_nvrtc_find_op(opname);
            bc.schema = op ? op->schema : "(Tensor self, int[]? dim=None, "
                                          "bool keepdim=False)";
            bc.args = args;
            bc.kwargs = kwargs;
            bc.opname = opname;
            if (stax_nvrtc_find_reduction(opname) != NULL
                || (op != NULL && op->kind == STAX_OPK_REDUCTION)) {
                int found = 0;
                PyObject *self_ = PyTuple_GET_SIZE(args)
                    ? PyTuple_GET_ITEM(args, 0) : NULL;
                PyObject *kd;
                if (self_ == NULL || (x = env_get(&env, self_)) == NULL) {
                    PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: "
                                 "reduction %S of a non-node", name);
                    goto node_done;
                }
                reduce_dims = bind_arg(&bc, "dim", &found);
                if (reduce_dims == NULL && PyErr_Occurred()) {
                    goto node_done;
                }
                kd = bind_arg(&bc, "keepdim", &found);
                if (kd == NULL && PyErr_Occurred()) {
                    goto node_done;
                }
                keepdim = kd != NULL && PyObject_IsTrue(kd) == 1;
                Py_XDECREF(kd);
                k->body = x;
                reduce_node = n;
                snprintf(reduce_name, sizeof(reduce_name), "%s", opname);
            }
            else if (op != NULL && op->kind == STAX_OPK_POINTWISE
                     && op->formula != NULL) {
                int nt = op->arity < 4 ? op->arity : 4;
                for (int j = 0; j < nt; j++) {
                    int found = 0;
                    static const char *const pn[] = {"self", "other", "c",
                                                     "d"};
                    PyObject *a = j < PyTuple_GET_SIZE(args)
                        ? Py_NewRef(PyTuple_GET_ITEM(args, j))
                        : bind_arg(&bc, pn[j], &found);
                    if (a == NULL) {
                        if (!PyErr_Occurred()) {
                            PyErr_Format(PyExc_NotImplementedError,
                                         "NVRTC renderer: node %S: operand %d "
                                         "missing", name, j);
                        }
                        goto node_done;
                    }
                    ops[j] = operand_expr(k, &env, a, opname);
                    Py_DECREF(a);
                    if (ops[j] == NULL) {
                        goto node_done;
                    }
                }
                x = stax_nvrtc_parse_formula(k, op->formula, ops, nt,
                                             scalar_arg, &bc);
                if (x == NULL) {
                    goto node_done;
                }
                if (env_put(&env, n, x) < 0) {
                    goto node_done;
                }
            }
            else {
                PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: "
                             "node %S: op '%s' has no pointwise formula or "
                             "reduction lowering here", name, opname);
                goto node_done;
            }
        }
        else if (PyUnicode_CompareWithASCIIString(opc, "output") == 0) {
            PyObject *v = PyTuple_GET_SIZE(args) ? PyTuple_GET_ITEM(args, 0)
                                                 : Py_None;
            if ((PyTuple_Check(v) || PyList_Check(v))
                && PySequence_Size(v) == 1) {
                v = PySequence_Fast_GET_ITEM(v, 0);
            }
            out_val = v;
            if (v != reduce_node && env_get(&env, v) == NULL) {
                PyErr_SetString(PyExc_NotImplementedError, "NVRTC renderer: "
                                "the skeleton renders graphs with exactly one "
                                "tensor output");
                goto node_done;
            }
            if (reduce_node == NULL) {
                k->body = env_get(&env, v);
            }
        }
        else {
            PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: node %S "
                         "(op %S) not supported", name, opc);
            goto node_done;
        }
        bad_ = 0;
    node_done:
        Py_XDECREF(opc);
        Py_XDECREF(name);
        Py_XDECREF(target);
        Py_XDECREF(args);
        Py_XDECREF(kwargs);
        if (bad_) {
            goto done;
        }
    }
    if (out_val == NULL || k->body == NULL) {
        PyErr_SetString(PyExc_ValueError, "NVRTC renderer: graph has no "
                        "output");
        goto done;
    }
    if (reduce_node != NULL) {
        int nd = 0;
        for (int i = 0; i < k->ninputs; i++) {
            nd = k->in[i].ndim > nd ? k->in[i].ndim : nd;
        }
        if (stax_nvrtc_read_dims(reduce_dims, nd, red) < 0
            || stax_nvrtc_layout_kernel(k, red, keepdim) < 0) {
            goto done;
        }
        if (stax_nvrtc_set_reduction(k, reduce_name) < 0) {
            goto done;
        }
    }
    else {
        if (stax_nvrtc_layout_kernel(k, NULL, 0) < 0) {
            goto done;
        }
        k->out_dtype = k->body->dtype;
    }
    rc = 0;
done:
    PyMem_Free(env.e);
    Py_XDECREF(reduce_dims);
    Py_XDECREF(graph);
    Py_XDECREF(nodes);
    Py_XDECREF(seq);
    Py_XDECREF(inseq);
    return rc;
}

/* nvrtc_render_graph(gm, example_inputs, name=None) -> [kernel, ...] */
PyObject *
stax_nvrtc_py_render_graph(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"gm", "example_inputs", "name", "compile", NULL};
    int compile = 0;
    PyObject *gm = NULL, *inputs = NULL, *obj = NULL, *res = NULL;
    const char *name = NULL;
    spec_t *k = NULL;
    (void)self;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|zp:nvrtc_render_graph",
                                     kwlist, &gm, &inputs, &name, &compile)) {
        return NULL;
    }
    k = PyMem_Calloc(1, sizeof(*k));
    if (k == NULL) {
        return PyErr_NoMemory();
    }
    if (graph_kernel(k, gm, inputs) < 0) {
        goto done;
    }
    snprintf(k->name, sizeof(k->name), "%s", name ? name
             : (k->reduce >= 0 ? "stax_red_fused_0" : "stax_pw_fused_0"));
    obj = stax_nvrtc_kernel_record(k, compile);
    if (obj != NULL) {
        res = PyList_New(1);
        if (res != NULL) {
            PyList_SET_ITEM(res, 0, obj);
            obj = NULL;
        }
    }
done:
    Py_XDECREF(obj);
    PyMem_Free(k);
    return res;
}
