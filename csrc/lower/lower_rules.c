/* Lowering rules: one graph node -> a virtual buffer (a function from
 * indices to values) or a kernel draft.  Pointwise ops are lowered from the
 * op table's S-expression formulas; views are index maps; reductions and
 * normalizations build reduction kernels whose prologue is the (inlined)
 * body of their input.  This file holds the dispatch over op kinds, the
 * helpers the rule files share and the input-mutation copy; the rules
 * themselves live in lower_pointwise.c, lower_reduce.c, lower_view.c,
 * lower_movement.c, lower_extern.c and lower_random.c. */
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "tensor/stax_numpy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ values */
int
lw_val_info(PyObject *val, int *ndim, int64_t *sizes, int64_t *strides,
            stax_dtype_t *dt)
{
    if (StaxTensor_Type != NULL && StaxTensor_Check(val)) {
        StaxTensor *t = (StaxTensor *)val;
        *ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) {
            sizes[d] = t->sizes[d];
            strides[d] = t->strides[d];
        }
        *dt = t->dtype;
        return 1;
    }
    if (PyArray_Check(val)) {
        PyArrayObject *a = (PyArrayObject *)val;
        if (PyArray_NDIM(a) > STAX_MAX_DIMS
            || stax_dtype_from_npy(PyArray_TYPE(a), dt) < 0) {
            PyErr_Clear();
            return 0;
        }
        *ndim = PyArray_NDIM(a);
        int isz = (int)PyArray_ITEMSIZE(a);
        for (int d = 0; d < *ndim; d++) {
            sizes[d] = PyArray_DIM(a, d);
            strides[d] = PyArray_STRIDE(a, d) / isz;
            if (PyArray_STRIDE(a, d) % isz != 0 || PyArray_STRIDE(a, d) < 0) {
                return 0;
            }
        }
        return 1;
    }
    return 0;
}

static int
out_info(struct lw_node_in *in, vbuf *v)
{
    int64_t st[STAX_MAX_DIMS];
    v->kind = VB_TENSOR;
    v->pbuf = -1;
    return lw_val_info(in->val, &v->ndim, v->sizes, st, &v->dtype);
}

vbuf *
lw_vb_new(lw_ctx *c)
{
    vbuf *v = stax_arena_alloc(c->arena, sizeof(vbuf));
    if (v) {
        v->pbuf = -1;
    }
    return v;
}

/* the vbuf of a Node argument, or NULL (not a node) */
vbuf *
lw_arg_vb(struct lw_node_in *in, PyObject *o)
{
    if (!PyObject_TypeCheck(o, StaxNode_Type)) {
        return NULL;
    }
    PyObject *ix = PyDict_GetItemWithError(in->node_index, o);
    if (ix == NULL) {
        return NULL;
    }
    return in->vb_of_node[PyLong_AsLong(ix)];
}

PyObject *
lw_bound_arg(PyObject *bound, const stax_op_info *op, const char *name)
{
    int i = stax_op_param_index(op, name);
    if (i < 0 || i >= PyTuple_GET_SIZE(bound)) {
        return NULL;
    }
    return PyTuple_GET_ITEM(bound, i);
}

/* ----------------------------------------------------------- broadcast */
/* body of v, broadcast to an output of ndim dims (right aligned) */
const stax_lval *
lw_bcast(lw_ctx *c, vbuf *v, int ndim, const int64_t *sizes,
         const stax_ix *const *ovars)
{
    const stax_ix *map[STAX_MAX_DIMS];
    int off = ndim - v->ndim;
    if (off < 0) {
        PyErr_SetString(PyExc_ValueError, "broadcast to fewer dims");
        return NULL;
    }
    for (int d = 0; d < v->ndim; d++) {
        map[d] = (v->sizes[d] == 1 && sizes[off + d] != 1) ? lw_ix_const(c, 0)
                                                           : ovars[off + d];
        if (v->sizes[d] == 1) {
            map[d] = lw_ix_const(c, 0);
        }
    }
    lw_rw rw = {0};
    rw.vars = map;
    rw.nvars = v->ndim;
    const stax_lval *r = lw_rewrite(c, &rw, v->body);
    lw_rw_done(&rw);
    return r;
}

void
lw_ident_vars(lw_ctx *c, int n, const stax_ix **vars)
{
    for (int d = 0; d < n; d++) {
        vars[d] = lw_ix_var(c, d);
    }
}

/* ------------------------------------------------------------- helpers */
int
lw_norm_dim(int64_t d, int n)
{
    if (n == 0) {
        return (d == 0 || d == -1) ? 0 : -1;    /* a 0-d tensor: dim 0 / -1 */
    }
    if (d < 0) {
        d += n;
    }
    return (d < 0 || d >= (n ? n : 1)) ? -1 : (int)d;
}

double
lw_num(PyObject *o, double dflt)
{
    if (o == NULL || o == Py_None) {
        return dflt;
    }
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return dflt;
    }
    return v;
}

/* the constant of dtype dt for Python number o (dflt when absent): an int
 * into an integral dtype stays exact (not through double) and wraps as
 * eager's conversion does */
const stax_lval *
lw_num_const(lw_ctx *c, stax_dtype_t dt, PyObject *o, double dflt)
{
    if (o != NULL && PyLong_Check(o) && !lw_is_float(dt)) {
        int ovf = 0;
        long long iv = PyLong_AsLongLongAndOverflow(o, &ovf);
        if (!ovf && !(iv == -1 && PyErr_Occurred())) {
            return lw_const_int(c, dt, (int64_t)iv, (double)iv);
        }
        PyErr_Clear();
    }
    return lw_const(c, dt, lw_num(o, dflt));
}

/* tril / triu: x where (col - row) <= k (tril) or >= k (triu) over the
 * last two dims, else 0 (the causal mask of attention) */
static int
lower_tri(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x, vbuf *out, int lower,
          const char **why)
{
    PyObject *k = lw_bound_arg(bound, in->op, "diagonal");
    long long kv = 0;
    if (k != NULL && k != Py_None) {
        if (!PyLong_Check(k)) {
            UNSUPPORTED("tril/triu with a diagonal that is not an int");
        }
        int ovf = 0;
        kv = PyLong_AsLongLongAndOverflow(k, &ovf);
        if (ovf || (kv == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            UNSUPPORTED("tril/triu diagonal out of range");
        }
    }
    if (x->ndim < 2 || out->ndim != x->ndim || out->dtype != x->dtype) {
        UNSUPPORTED("tril/triu of a tensor with fewer than 2 dims");
    }
    int nd = out->ndim;
    const stax_ix *d = lw_ix_bin(c, STAX_IX_ADD, lw_ix_var(c, nd - 1),
                                 lw_ix_bin(c, STAX_IX_MUL, lw_ix_var(c, nd - 2),
                                           lw_ix_const(c, -1)));
    const stax_lval *cond = lw_prim(c, lower ? STAX_PRIM_LE : STAX_PRIM_GE, STAX_BOOL,
                                    lw_index(c, d, STAX_INT64),
                                    lw_const(c, STAX_INT64, (double)kv), NULL);
    const stax_lval *xb = x->body;     /* same shape: the same loop vars */
    if (cond == NULL || xb == NULL) {
        return -1;
    }
    out->body = lw_prim(c, STAX_PRIM_WHERE, out->dtype, cond, xb,
                        lw_const(c, out->dtype, 0.0));
    return out->body ? 1 : -1;
}

typedef struct {
    unsigned char *seen;
    int count;
} new_reads_ctx;

static int
new_reads_hook(lw_rw *rw, const stax_lval *load, const stax_lval **out)
{
    new_reads_ctx *r = rw->hook_ctx;
    (void)out;
    if (!r->seen[load->buf]) {
        r->seen[load->buf] = 1;
        r->count++;
    }
    return 0;
}

/* the program buffers body loads that seen[] does not mark yet: marks
 * them and returns how many (-1 on error) */
static int
body_new_reads(lw_ctx *c, const stax_lval *body, unsigned char *seen)
{
    new_reads_ctx r = {seen, 0};
    lw_rw rw = {0};
    rw.load_hook = new_reads_hook;
    rw.hook_ctx = &r;
    const stax_lval *ok = lw_rewrite(c, &rw, body);
    lw_rw_done(&rw);
    return ok == NULL ? -1 : r.count;
}

/* A pointwise op inlines its operands' bodies: a sum of many terms (the
 * gradient of a weight used at every step of an unrolled recurrence) would
 * grow one body, and so one kernel, past the buffers code generation
 * takes. When the operands read more than half of LW_MAX_KBUFS program
 * buffers together, each unmaterialized operand becomes a buffer first. */
static int
cap_formula_reads(lw_ctx *c, struct lw_node_in *in, PyObject *bound)
{
    unsigned char *seen = NULL;
    int total = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(bound); i++) {
        vbuf *a = lw_arg_vb(in, PyTuple_GET_ITEM(bound, i));
        if (a == NULL || a->kind != VB_TENSOR || a->pbuf >= 0 || a->body == NULL) {
            continue;
        }
        if (seen == NULL && (seen = calloc((size_t)c->npbufs + 1, 1)) == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        int r = body_new_reads(c, a->body, seen);
        if (r < 0) {
            free(seen);
            return -1;
        }
        total += r;
    }
    free(seen);
    if (total <= LW_MAX_KBUFS / 2) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(bound); i++) {
        vbuf *a = lw_arg_vb(in, PyTuple_GET_ITEM(bound, i));
        if (a != NULL && a->kind == VB_TENSOR && a->pbuf < 0 && a->body != NULL
            && lw_materialize(c, a) < 0) {
            return -1;
        }
    }
    return 0;
}

/* out->label: the ops inlined into this body, for kernel names */
static void
label_body(lw_ctx *c, struct lw_node_in *in, const stax_op_info *op,
           PyObject *bound, vbuf *out)
{
    char lab[48] = "";
    size_t n = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(bound); i++) {
        vbuf *a = lw_arg_vb(in, PyTuple_GET_ITEM(bound, i));
        if (a != NULL && a->kind == VB_TENSOR && a->pbuf < 0 && a->label != NULL
            && strstr(lab, a->label) == NULL) {
            n += (size_t)snprintf(lab + n, sizeof(lab) > n ? sizeof(lab) - n : 0,
                                  "%s%s", n ? "_" : "", a->label);
            if (n >= sizeof(lab)) {
                n = sizeof(lab) - 1;
            }
        }
    }
    if (op->kind != STAX_OPK_VIEW && n + strlen(op->name) + 2 < sizeof(lab)) {
        snprintf(lab + n, sizeof(lab) - n, "%s%s", n ? "_" : "", op->name);
    }
    char *l = stax_arena_alloc(c->arena, strlen(lab) + 1);
    if (l != NULL) {
        memcpy(l, lab, strlen(lab) + 1);
        out->label = l[0] ? l : NULL;
    }
}

/* getitem of a tuple-valued node (max.dim, split ...): its item; else the
 * view's index map */
static int
lower_view_rule(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                vbuf **out, const char **why)
{
    if (x->kind == VB_TUPLE && in->op->id == STAX_OP_GETITEM) {
        PyObject *i = lw_bound_arg(bound, in->op, "index");
        if (i == NULL || !PyLong_Check(i)) {
            /* a slice of the tuple (split(2)[1:]) is a tuple, not its last
             * item: left to eager */
            *why = "getitem of a tuple with a non-integer index";
            return 0;
        }
        Py_ssize_t k = PyLong_AsSsize_t(i);
        if (k == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (k < 0) {
            k += x->nitems;
        }
        if (k < 0 || k >= x->nitems) {
            *why = "getitem of a tuple";
            return 0;
        }
        *out = x->items[k];
        return 1;
    }
    if (x->kind == VB_TENSOR) {
        return lw_lower_view(c, in, bound, x, *out, why);
    }
    *why = "view of a non-tensor";
    return 0;
}

/* ------------------------------------------------------------- dispatch */
int
lw_lower_node(lw_ctx *c, struct lw_node_in *in, vbuf **outp, const char **why)
{
    const stax_op_info *op = in->op;
    PyObject *bound = NULL;
    int rc = 0;
    vbuf *out = lw_vb_new(c);
    if (out == NULL) {
        return -1;
    }
    if (op == NULL) {
        UNSUPPORTED("no op of the op table matches the node's target");
    }
    if ((op->flags & STAX_OPF_INPLACE) && stax_op_lower[op->id] != STAX_LOWER_RANDOM) {
        /* (uniform_/normal_ stay in-place nodes; their value is a fresh
         * draw of the operand's shape, lowered as one) */
        UNSUPPORTED("in-place op (functionalization did not remove it)");
    }
    bound = stax_op_bind(op, in->args, in->kwargs);
    if (bound == NULL) {
        PyErr_Clear();
        UNSUPPORTED("arguments do not match the op's schema");
    }
    if (!PyTuple_Check(in->val)) {
        if (!out_info(in, out)) {
            Py_DECREF(bound);
            UNSUPPORTED("node value is not a tensor");
        }
    }
    vbuf *x = PyTuple_GET_SIZE(bound) > 0 ? lw_arg_vb(in, PyTuple_GET_ITEM(bound, 0)) : NULL;
    if (x != NULL && x->kind != VB_TENSOR && op->id != STAX_OP_GETITEM) {
        Py_DECREF(bound);
        UNSUPPORTED("operand is not a lowered tensor");
    }
    stax_op_id_t id = op->id;
    stax_lower_rule_t rule = stax_op_lower[id];
    if (x == NULL && (rule == STAX_LOWER_REDUCTION || rule == STAX_LOWER_SOFTMAX
                      || rule == STAX_LOWER_LAYER_NORM || rule == STAX_LOWER_BATCH_NORM
                      || rule == STAX_LOWER_VIEW
                      || (rule == STAX_LOWER_NONE && op->kind == STAX_OPK_COMPOSITE))) {
        *why = op->kind == STAX_OPK_REDUCTION ? "reduction of a non-tensor"
               : op->kind == STAX_OPK_VIEW    ? "view of a non-tensor"
                                              : "composite of a non-tensor";
        rule = (stax_lower_rule_t)-1;
    }
    /* the normalizations' templates compute in floating point only; eager
     * raises for integer inputs (torch's NotImplementedError), so a version
     * reaching here with one must not be lowered */
    if ((rule == STAX_LOWER_SOFTMAX || rule == STAX_LOWER_LAYER_NORM
         || rule == STAX_LOWER_BATCH_NORM)
        && !lw_is_float(x->dtype)) {
        *why = "normalization of an integer or bool tensor";
        rule = (stax_lower_rule_t)-1;
    }
    switch ((int)rule) {
    case -1:
        break;
    case STAX_LOWER_NONE:
        *why = op->kind == STAX_OPK_POINTWISE ? "pointwise op without a formula"
               : op->kind == STAX_OPK_COMPOSITE
                   ? "composite op not decomposed and without a fused lowering"
                   : "op without a lowering rule";
        break;
    case STAX_LOWER_FORMULA:
        if (cap_formula_reads(c, in, bound) < 0) {
            rc = -1;
            break;
        }
        rc = lw_lower_formula(c, in, bound, out, why);
        break;
    case STAX_LOWER_CAST:
        out->body = x ? lw_cast(c, x->body, out->dtype) : NULL;
        rc = out->body ? 1 : 0;
        if (!rc) {
            *why = "copy of a non-tensor";
        }
        break;
    case STAX_LOWER_REDUCTION:
        rc = lw_lower_reduction(c, in, bound, x, out, why);
        rc = rc < 0 ? -1 : (*why && rc == 0 ? 0 : 1);
        break;
    case STAX_LOWER_SOFTMAX:
        rc = lw_lower_softmax(c, in, bound, x, out, id == STAX_OP_LOG_SOFTMAX, why);
        rc = rc < 0 ? -1 : (*why ? 0 : 1);
        break;
    case STAX_LOWER_LAYER_NORM:
        rc = lw_lower_layer_norm(c, in, bound, x, out, id == STAX_OP_NATIVE_LAYER_NORM, why);
        rc = rc < 0 ? -1 : (*why ? 0 : 1);
        break;
    case STAX_LOWER_BATCH_NORM:
        rc = lw_lower_batch_norm(c, in, bound, x, out, why);
        break;
    case STAX_LOWER_VIEW:
        rc = lower_view_rule(c, in, bound, x, &out, why);
        break;
    case STAX_LOWER_MATMUL:
        rc = lw_lower_matmul(c, in, bound, out, why);
        break;
    case STAX_LOWER_CAT:
        rc = lw_lower_cat(c, in, bound, out, id == STAX_OP_STACK, why);
        break;
    case STAX_LOWER_GATHER:
        rc = lw_lower_gather(c, in, bound, out, why);
        break;
    case STAX_LOWER_FILL_LIKE: {
        out->body = id == STAX_OP_ZEROS_LIKE  ? lw_const(c, out->dtype, 0.0)
                    : id == STAX_OP_ONES_LIKE ? lw_const(c, out->dtype, 1.0)
                    : lw_num_const(c, out->dtype, lw_bound_arg(bound, op, "fill_value"), 0.0);
        rc = out->body ? 1 : -1;
        break;
    }
    case STAX_LOWER_PAD:
    case STAX_LOWER_SCATTER:
    case STAX_LOWER_TRI:
    case STAX_LOWER_ONE_HOT:
    case STAX_LOWER_UNFOLD:
        if (x == NULL) {
            *why = "op without a lowering rule";
        }
        else if (rule == STAX_LOWER_ONE_HOT) {
            rc = lw_lower_one_hot(c, in, bound, x, out, why);
        }
        else if (rule == STAX_LOWER_UNFOLD) {
            rc = lw_lower_unfold(c, in, bound, x, out, why);
        }
        else if (rule == STAX_LOWER_PAD) {
            rc = lw_lower_pad(c, in, bound, x, out, why);
        }
        else if (rule == STAX_LOWER_SCATTER) {
            rc = lw_lower_scatter(c, in, bound, x, out, why);
        }
        else {
            rc = lower_tri(c, in, bound, x, out, id == STAX_OP_TRIL, why);
        }
        break;
    case STAX_LOWER_RANDOM:
        rc = lw_lower_random(c, in, bound, x, out, why);
        break;
    default:
        *why = "op without a lowering rule";
        break;
    }
    if (rc == 1 && out->kind == VB_TENSOR && out->label == NULL) {
        label_body(c, in, op, bound, out);
    }
    Py_DECREF(bound);
    if (rc == 1) {
        if (out->kind == VB_TENSOR && out->body == NULL && out->pbuf < 0) {
            if (!PyErr_Occurred()) {
                *why = "lowering produced no value";
                return 0;
            }
            return -1;
        }
        *outp = out;
    }
    return rc;
}

/* ------------------------------------------------------ input mutation */
typedef struct {
    int buf;
    int hit;
} reads_buf_ctx;

static int
reads_buf_hook(lw_rw *rw, const stax_lval *load, const stax_lval **out)
{
    reads_buf_ctx *r = rw->hook_ctx;
    (void)out;
    if (load->buf == r->buf) {
        r->hit = 1;
    }
    return 0;
}

static int
body_reads(lw_ctx *c, const stax_lval *body, int buf)
{
    reads_buf_ctx r = {buf, 0};
    lw_rw rw = {0};
    rw.load_hook = reads_buf_hook;
    rw.hook_ctx = &r;
    const stax_lval *x = lw_rewrite(c, &rw, body);
    lw_rw_done(&rw);
    return x == NULL ? -1 : r.hit;
}

int
lw_body_reads(lw_ctx *c, const stax_lval *body, int buf)
{
    return body_reads(c, body, buf);
}

int
lw_lower_copy_into(lw_ctx *c, vbuf *dest, vbuf *src)
{
    if (dest->kind != VB_TENSOR || src->kind != VB_TENSOR || dest->pbuf < 0) {
        return 0;
    }
    /* an input, or a host constant the program holds by reference (the
     * caller's tensor: a device program holds a copy, written eagerly) */
    if (c->pbufs[dest->pbuf].kind != PB_INPUT
        && (c->pbufs[dest->pbuf].kind != PB_CONST || c->be->device != NULL)) {
        return 0;
    }
    pbuf_t *pb = &c->pbufs[dest->pbuf];
    for (int d = 0; d < pb->ndim; d++) {
        if (pb->strides[d] == 0 && pb->sizes[d] > 1) {
            return 0;    /* an expanded input: not writable elementwise */
        }
    }
    int r = body_reads(c, src->body, dest->pbuf);
    if (r < 0) {
        return -1;
    }
    if (r > 0 && lw_materialize(c, src) < 0) {
        return -1;
    }
    pb = &c->pbufs[dest->pbuf];    /* materializing may have grown (moved) c->pbufs */
    kdraft *k = lw_new_kernel(c, "copy_");
    if (k == NULL) {
        return -1;
    }
    const stax_ix *ov[STAX_MAX_DIMS];
    lw_ident_vars(c, dest->ndim, ov);
    k->nouter = dest->ndim;
    for (int d = 0; d < dest->ndim; d++) {
        k->dimv[d] = dest->sizes[d];
    }
    const stax_lval *v = lw_bcast(c, src, dest->ndim, dest->sizes, ov);
    const stax_ix *ix = lw_ix_const(c, 0);
    for (int d = dest->ndim - 1; d >= 0; d--) {
        if (pb->sizes[d] != 1) {
            ix = lw_ix_bin(c, STAX_IX_ADD,
                           lw_ix_bin(c, STAX_IX_MUL, ov[d], lw_ix_const(c, pb->strides[d])), ix);
        }
    }
    if (v == NULL || ix == NULL) {
        return -1;
    }
    k->nstores = 1;
    k->stores[0].buf = dest->pbuf;
    k->stores[0].index = ix;
    k->stores[0].value = lw_cast(c, v, pb->dtype);
    return lw_add_stage(k, STAX_STAGE_OUTER, 0, 1) < 0 ? -1 : 1;
}
