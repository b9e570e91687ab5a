/* Reduction kernels: the helpers that build a kernel reducing some dims of
 * its (inlined) input, the reductions of the op table (sum, mean, amax,
 * var, argmax, ...) and the normalizations fused on them: softmax /
 * log_softmax, layer_norm and batch_norm in inference form. */
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "tensor/stax_numpy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* dims argument -> mask; None / empty list: all dims */
static int
dims_mask(PyObject *o, int n, int *mask)
{
    for (int d = 0; d < n; d++) {
        mask[d] = 0;
    }
    if (o == NULL || o == Py_None
        || ((PyList_Check(o) || PyTuple_Check(o)) && PySequence_Size(o) == 0)) {
        for (int d = 0; d < n; d++) {
            mask[d] = 1;
        }
        return 0;
    }
    if (PyLong_Check(o)) {
        int d = lw_norm_dim(PyLong_AsLongLong(o), n);
        if (d < 0) {
            return -1;
        }
        if (n) {
            mask[d] = 1;
        }
        return 0;
    }
    if (PyList_Check(o) || PyTuple_Check(o)) {
        Py_ssize_t k = PySequence_Fast_GET_SIZE(o);
        for (Py_ssize_t i = 0; i < k; i++) {
            PyObject *e = PySequence_Fast_GET_ITEM(o, i);
            if (!PyLong_Check(e)) {
                return -1;
            }
            int d = lw_norm_dim(PyLong_AsLongLong(e), n);
            if (d < 0) {
                return -1;
            }
            if (n) {
                mask[d] = 1;
            }
        }
        return 0;
    }
    return -1;
}

typedef struct {
    kdraft *k;
    const stax_ix *ivars[STAX_MAX_DIMS];   /* input dim -> loop var */
    const stax_ix *ovars_keep[STAX_MAX_DIMS]; /* keepdim output dims */
    int64_t n;                             /* reduced element count */
    const stax_ix *rlinear;                /* linear index of reduced dims */
} redk;

/* a kernel reducing the dims of `in` selected by mask */
static int
red_begin(lw_ctx *c, vbuf *in, const int *mask, const char *label, redk *r)
{
    char buf[48];
    if (in->label != NULL && in->pbuf < 0) {
        snprintf(buf, sizeof(buf), "%s_%s", in->label, label);
        label = buf;
    }
    kdraft *k = lw_new_kernel(c, label);
    if (k == NULL) {
        return -1;
    }
    int no = 0, ni = 0;
    for (int d = 0; d < in->ndim; d++) {
        if (!mask[d]) {
            k->dimv[no++] = in->sizes[d];
        }
    }
    r->n = 1;
    for (int d = 0; d < in->ndim; d++) {
        if (mask[d]) {
            k->dimv[no + ni++] = in->sizes[d];
            r->n *= in->sizes[d];
        }
    }
    k->nouter = no;
    k->ninner = ni;
    int oi = 0, ii = 0;
    r->rlinear = lw_ix_const(c, 0);
    for (int d = 0; d < in->ndim; d++) {
        if (!mask[d]) {
            r->ivars[d] = lw_ix_var(c, oi);
            r->ovars_keep[d] = r->ivars[d];
            oi++;
        }
        else {
            r->ivars[d] = lw_ix_var(c, no + ii);
            r->ovars_keep[d] = lw_ix_const(c, 0);
            r->rlinear = lw_ix_bin(c, STAX_IX_ADD,
                                   lw_ix_bin(c, STAX_IX_MUL, r->rlinear,
                                             lw_ix_const(c, in->sizes[d])),
                                   r->ivars[d]);
            ii++;
        }
    }
    r->k = k;
    return 0;
}

static const stax_lval *
red_value(lw_ctx *c, vbuf *in, redk *r)
{
    lw_rw rw = {0};
    rw.vars = r->ivars;
    rw.nvars = in->ndim;
    const stax_lval *v = lw_rewrite(c, &rw, in->body);
    lw_rw_done(&rw);
    return v;
}

int
lw_add_stage(kdraft *k, stax_stage_kind_t kind, int first, int n)
{
    if (k->nstages == LW_MAX_STAGES) {
        PyErr_SetString(PyExc_RuntimeError, "too many kernel stages");
        return -1;
    }
    k->stages[k->nstages].kind = kind;
    k->stages[k->nstages].first = first;
    k->stages[k->nstages].n = n;
    k->nstages++;
    return 0;
}

static int
add_acc(kdraft *k, stax_red_t op, stax_dtype_t dt, const stax_lval *v,
        const stax_ix *ix)
{
    if (v == NULL) {
        return -1;
    }
    if (k->naccs == LW_MAX_ACCS) {
        PyErr_SetString(PyExc_RuntimeError, "too many accumulators");
        return -1;
    }
    int i = k->naccs++;
    k->accs[i].op = op;
    k->accs[i].dtype = dt;
    k->accs[i].value = v;
    k->accs[i].index = ix;
    if (lw_add_stage(k, STAX_STAGE_REDUCE, i, 1) < 0) {
        return -1;
    }
    return i;
}

/* Mean and sum of squared deviations of a row in ONE pass over it (one
 * REDUCE stage with two sums, instead of a sum, then a second pass for
 * the deviations from the mean): shifted data, d = x - K with K the row's
 * first element (hoisted out of the loop by LLVM), a0 = sum(d), a1 =
 * sum(d*d); mean = K + a0/n and m2 = a1 - a0*a0/n, clamped at 0. The shift
 * keeps the sums small for data with a large offset (1e4 + N(0, 1)), where
 * the naive one-pass sum(x*x) - sum(x)^2/n cancels catastrophically (the
 * clamp propagates NaN: an inf in the row gives NaN, as eager); like
 * Welford's update it needs one read of the data. *mean, *m2 and *dvs
 * (x - mean, for layer_norm's output) are bodies over the kernel's vars. */
static int add_acc_same(kdraft *k, stax_red_t op, stax_dtype_t dt, const stax_lval *v,
                        const stax_ix *ix);

static int
shifted_moments(lw_ctx *c, redk *r, vbuf *x, const int *mask, const stax_lval *xv,
                stax_dtype_t fd, const stax_lval **mean, const stax_lval **m2)
{
    const stax_lval *K = lw_const(c, fd, 0.0);
    if (r->n > 0) {
        const stax_ix *kv[STAX_MAX_DIMS];
        for (int d = 0; d < x->ndim; d++) {
            kv[d] = mask[d] ? lw_ix_const(c, 0) : r->ivars[d];
        }
        lw_rw rw = {0};
        rw.vars = kv;
        rw.nvars = x->ndim;
        K = lw_cast(c, lw_rewrite(c, &rw, x->body), fd);
        lw_rw_done(&rw);
    }
    const stax_lval *dx = lw_prim(c, STAX_PRIM_SUB, fd, xv, K, NULL);
    int a0 = add_acc(r->k, STAX_RED_SUM, fd, dx, NULL);
    int a1 = a0 < 0 ? -1 : add_acc_same(r->k, STAX_RED_SUM, fd,
                                         lw_prim(c, STAX_PRIM_MUL, fd, dx, dx, NULL), NULL);
    if (a1 < 0) {
        return -1;
    }
    const stax_lval *nn = lw_size_const(c, fd, r->n);
    const stax_lval *s0 = lw_acc(c, a0, fd);
    const stax_lval *dm = lw_prim(c, STAX_PRIM_DIV, fd, s0, nn, NULL);
    *mean = lw_prim(c, STAX_PRIM_ADD, fd, K, dm, NULL);
    *m2 = lw_prim(c, STAX_PRIM_MAXNAN, fd,
                  lw_prim(c, STAX_PRIM_SUB, fd, lw_acc(c, a1, fd),
                          lw_prim(c, STAX_PRIM_MUL, fd, s0, dm, NULL), NULL),
                  lw_const(c, fd, 0.0), NULL);
    return *mean != NULL && *m2 != NULL ? 0 : -1;
}

/* accumulators in the same REDUCE stage as the previous one */
static int
add_acc_same(kdraft *k, stax_red_t op, stax_dtype_t dt, const stax_lval *v,
             const stax_ix *ix)
{
    if (v == NULL) {
        return -1;
    }
    int i = k->naccs++;
    k->accs[i].op = op;
    k->accs[i].dtype = dt;
    k->accs[i].value = v;
    k->accs[i].index = ix;
    k->stages[k->nstages - 1].n++;
    return i;
}

/* a materialized output of a reduction kernel (OUTER store) */
static int
red_store(lw_ctx *c, redk *r, vbuf *in, const int *mask, vbuf *out,
          const stax_lval *value, int inner)
{
    int pb = lw_new_pbuf(c, PB_TEMP, out->ndim, out->sizes, out->dtype);
    if (pb < 0 || value == NULL) {
        return -1;
    }
    const stax_ix *ov[STAX_MAX_DIMS];
    if (inner) {
        /* same shape as the input: every dim */
        for (int d = 0; d < in->ndim; d++) {
            ov[d] = r->ivars[d];
        }
    }
    else if (out->ndim == in->ndim) {
        for (int d = 0; d < in->ndim; d++) {
            ov[d] = r->ovars_keep[d];
        }
    }
    else {
        int j = 0;
        for (int d = 0; d < in->ndim; d++) {
            if (!mask[d]) {
                ov[j++] = r->ivars[d];
            }
        }
        if (j != out->ndim) {
            PyErr_SetString(PyExc_ValueError, "reduction output rank mismatch");
            return -1;
        }
    }
    kdraft *k = r->k;
    if (k->nstores == LW_MAX_STORES) {
        PyErr_SetString(PyExc_RuntimeError, "too many stores");
        return -1;
    }
    int s = k->nstores++;
    k->stores[s].buf = pb;
    k->stores[s].index = lw_contig_index(c, out->ndim, out->sizes, ov);
    k->stores[s].value = lw_cast(c, value, out->dtype);
    if (lw_add_stage(k, inner ? STAX_STAGE_INNER : STAX_STAGE_OUTER, s, 1) < 0) {
        return -1;
    }
    return lw_vb_over_pbuf(c, out, pb);
}

/* float16 and bfloat16 data are accumulated in float32, as eager and
 * PyTorch do: the squared deviations of var/std/layer_norm overflow float16
 * (65504) as soon as a row's spread passes ~256, and float16 sums lose every
 * digit past 2048 (bfloat16's past 256) */
static stax_dtype_t
acc_float(stax_dtype_t dt)
{
    if (stax_dtype_is_half_like(dt)) {
        return STAX_FLOAT32;
    }
    return lw_is_float(dt) ? dt : stax_default_dtype();
}

/* ------------------------------------------------------------ reductions */
static int
tuple_out(lw_ctx *c, struct lw_node_in *in, vbuf *out, int n, vbuf **items)
{
    if (!PyTuple_Check(in->val) || PyTuple_GET_SIZE(in->val) != n) {
        PyErr_SetString(PyExc_ValueError, "multi-output node without a tuple meta['val']");
        return -1;
    }
    out->kind = VB_TUPLE;
    out->nitems = n;
    out->items = stax_arena_alloc(c->arena, sizeof(vbuf *) * (size_t)n);
    if (out->items == NULL) {
        return -1;
    }
    for (int i = 0; i < n; i++) {
        items[i] = lw_vb_new(c);
        if (items[i] == NULL) {
            return -1;
        }
        int64_t st[STAX_MAX_DIMS];
        items[i]->kind = VB_TENSOR;
        if (!lw_val_info(PyTuple_GET_ITEM(in->val, i), &items[i]->ndim,
                         items[i]->sizes, st, &items[i]->dtype)) {
            PyErr_SetString(PyExc_ValueError, "tuple item is not a tensor");
            return -1;
        }
        out->items[i] = items[i];
    }
    return 0;
}

/* var, std, var_mean, std_mean: two accumulators (sum, then the sum of
 * squared deviations from the mean) in one kernel */
static int
red_variance(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x, redk *rp,
             int *mask, vbuf *out, const stax_lval *v)
{
    stax_op_id_t id = in->op->id;
    redk *r = rp;
    double n = (double)r->n;
    stax_dtype_t fd = acc_float(x->dtype);
    double corr = 1.0;
    if (x->dtype == STAX_FLOAT32 && c->be != NULL && c->be->name != NULL
        && strcmp(c->be->name, "llvm") == 0) {
        /* torch's CPU var/std accumulate float32 in double (std of 1e30s
         * is 1.15e30, not inf or NaN; a denormal spread stays denormal),
         * as eager does; its CUDA kernels keep float */
        fd = STAX_FLOAT64;
    }
    PyObject *unb = lw_bound_arg(bound, in->op, "unbiased");
    PyObject *co = lw_bound_arg(bound, in->op, "correction");
    if (unb != NULL && unb != Py_None) {
        corr = PyObject_IsTrue(unb) ? 1.0 : 0.0;
    }
    if (co != NULL && co != Py_None) {
        corr = lw_num(co, 1.0);
    }
    const stax_lval *xv = lw_cast(c, v, fd);
    const stax_lval *mean = NULL, *m2 = NULL;
    if (shifted_moments(c, r, x, mask, xv, fd, &mean, &m2) < 0) {
        return -1;
    }
    /* divisor max(0, n - correction), as eager and PyTorch: a correction
     * of n or more gives 0/0 = NaN, never m2 / (negative) = -0 */
    const stax_lval *var = n == 0 ? lw_const(c, fd, NAN)
                           : lw_prim(c, STAX_PRIM_DIV, fd, m2,
                                     c->symbolic && r->n > 1
                                     ? lw_prim(c, STAX_PRIM_MAXNAN, fd,
                                               lw_prim(c, STAX_PRIM_SUB, fd,
                                                       lw_size_const(c, fd, r->n),
                                                       lw_const(c, fd, corr), NULL),
                                               lw_const(c, fd, 0.0), NULL)
                                     : lw_const(c, fd, n - corr > 0 ? n - corr : 0.0), NULL);
    int sd = id == STAX_OP_STD || id == STAX_OP_STD_MEAN;
    if (sd) {
        var = lw_prim(c, STAX_PRIM_SQRT, fd, var, NULL, NULL);
    }
    if (id == STAX_OP_VAR_MEAN || id == STAX_OP_STD_MEAN) {
        vbuf *items[2];
        if (tuple_out(c, in, out, 2, items) < 0) {
            return -1;
        }
        if (red_store(c, r, x, mask, items[0], var, 0) < 0) {
            return -1;
        }
        return red_store(c, r, x, mask, items[1], mean, 0);
    }
    return red_store(c, r, x, mask, out, var, 0);
}

/* logsumexp: max, then log(sum(exp(x - max))) + max */
static int
red_logsumexp(lw_ctx *c, vbuf *x, redk *rp, int *mask, vbuf *out, const stax_lval *v)
{
    redk *r = rp;
    kdraft *k = r->k;
    int a0;
    stax_dtype_t fd = acc_float(x->dtype);
    const stax_lval *xv = lw_cast(c, v, fd);
    a0 = add_acc(k, STAX_RED_MAX, fd, xv, NULL);
    if (a0 < 0) {
        return -1;
    }
    const stax_lval *m = lw_acc(c, a0, fd);
    m = lw_prim(c, STAX_PRIM_WHERE, fd, lw_prim(c, STAX_PRIM_ISINF, STAX_BOOL, m, NULL, NULL),
                lw_const(c, fd, 0.0), m);
    const stax_lval *e = lw_prim(c, STAX_PRIM_EXP, fd,
                                 lw_prim(c, STAX_PRIM_SUB, fd, xv, m, NULL), NULL, NULL);
    int a1 = add_acc(k, STAX_RED_SUM, fd, e, NULL);
    if (a1 < 0) {
        return -1;
    }
    const stax_lval *res = lw_prim(c, STAX_PRIM_ADD, fd,
                                   lw_prim(c, STAX_PRIM_LOG, fd, lw_acc(c, a1, fd), NULL, NULL),
                                   m, NULL);
    return red_store(c, r, x, mask, out, res, 0);
}

/* norm(p): max/min of |x| for p = +-inf, count for 0, sum for 1, sqrt of
 * the sum of squares for 2, else (sum |x|^p)^(1/p) */
static int
red_norm(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x, redk *rp,
         int *mask, vbuf *out, const stax_lval *v)
{
    redk *r = rp;
    kdraft *k = r->k;
    int a0;
    stax_dtype_t fd = acc_float(x->dtype);
    PyObject *po = lw_bound_arg(bound, in->op, "p");
    double p = lw_num(po, 2.0);
    const stax_lval *xv = lw_cast(c, v, fd);
    const stax_lval *ax = lw_prim(c, STAX_PRIM_ABS, fd, xv, NULL, NULL);
    const stax_lval *res;
    if (isinf(p)) {
        a0 = add_acc(k, p > 0 ? STAX_RED_MAX : STAX_RED_MIN, fd, ax, NULL);
        res = a0 < 0 ? NULL : lw_acc(c, a0, fd);
    }
    else if (p == 0) {
        a0 = add_acc(k, STAX_RED_SUM, fd, lw_cast(c, lw_cast(c, xv, STAX_BOOL), fd), NULL);
        res = a0 < 0 ? NULL : lw_acc(c, a0, fd);
    }
    else if (p == 1) {
        a0 = add_acc(k, STAX_RED_SUM, fd, ax, NULL);
        res = a0 < 0 ? NULL : lw_acc(c, a0, fd);
    }
    else if (p == 2) {
        a0 = add_acc(k, STAX_RED_SUM, fd, lw_prim(c, STAX_PRIM_MUL, fd, xv, xv, NULL), NULL);
        res = a0 < 0 ? NULL : lw_prim(c, STAX_PRIM_SQRT, fd, lw_acc(c, a0, fd), NULL, NULL);
    }
    else {
        a0 = add_acc(k, STAX_RED_SUM, fd,
                     lw_prim(c, STAX_PRIM_POW, fd, ax, lw_const(c, fd, p), NULL), NULL);
        res = a0 < 0 ? NULL : lw_prim(c, STAX_PRIM_POW, fd, lw_acc(c, a0, fd),
                                      lw_const(c, fd, 1.0 / p), NULL);
    }
    if (res == NULL) {
        return -1;
    }
    return red_store(c, r, x, mask, out, res, 0);
}

int
lw_lower_reduction(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                   vbuf *out, const char **why)
{
    stax_op_id_t id = in->op->id;
    int mask[STAX_MAX_DIMS];
    PyObject *dim = lw_bound_arg(bound, in->op, "dim");
    if ((id == STAX_OP_MAX) || (id == STAX_OP_MIN)) {
        if (dim != NULL && dim != Py_None && !PyLong_Check(dim)) {
            UNSUPPORTED("max/min with a tensor second operand");
        }
    }
    if (dims_mask(dim, x->ndim, mask) < 0) {
        UNSUPPORTED("reduction dims not understood");
    }
    if ((id == STAX_OP_ANY || id == STAX_OP_ALL) && dim != NULL
        && (PyList_Check(dim) || PyTuple_Check(dim)) && PySequence_Size(dim) == 0) {
        /* torch: any/all over an empty dim list reduce nothing (sum and
         * mean reduce everything) */
        for (int d = 0; d < x->ndim; d++) {
            mask[d] = 0;
        }
    }
    redk r;
    if (red_begin(c, x, mask, in->op->name, &r) < 0) {
        return -1;
    }
    kdraft *k = r.k;
    const stax_lval *v = red_value(c, x, &r);
    if (v == NULL) {
        return -1;
    }
    stax_dtype_t odt = out->kind == VB_TENSOR ? out->dtype : x->dtype;
    /* bfloat16 values and accumulators are float32 (the back ends keep
     * bfloat16 as bits: no arithmetic, no max/min on them); the stores
     * round the result (exact for max/min) */
    stax_dtype_t xdt = x->dtype;
    if (xdt == STAX_BFLOAT16) {
        xdt = STAX_FLOAT32;
        v = lw_cast(c, v, xdt);
    }
    if (odt == STAX_BFLOAT16) {
        odt = STAX_FLOAT32;
    }
    int a0;
    if ((id == STAX_OP_SUM) || (id == STAX_OP_MEAN)) {
        /* float16 sums and means accumulate (and divide) in float32 and
         * round once, as eager and PyTorch do */
        stax_dtype_t ad = odt == STAX_FLOAT16 ? STAX_FLOAT32 : odt;
        a0 = add_acc(k, STAX_RED_SUM, ad, lw_cast(c, v, ad), NULL);
        if (a0 < 0) {
            return -1;
        }
        const stax_lval *res = lw_acc(c, a0, ad);
        if ((id == STAX_OP_MEAN)) {
            res = lw_prim(c, STAX_PRIM_DIV, ad, res, lw_size_const(c, ad, r.n), NULL);
        }
        return red_store(c, &r, x, mask, out, res, 0);
    }
    if ((id == STAX_OP_PROD)) {
        a0 = add_acc(k, STAX_RED_PROD, odt, lw_cast(c, v, odt), NULL);
        return a0 < 0 ? -1 : red_store(c, &r, x, mask, out, lw_acc(c, a0, odt), 0);
    }
    if ((id == STAX_OP_AMAX) || (id == STAX_OP_AMIN)
        || (((id == STAX_OP_MAX) || (id == STAX_OP_MIN)) && (dim == NULL || dim == Py_None))) {
        int mx = (id == STAX_OP_AMAX) || (id == STAX_OP_MAX);
        a0 = add_acc(k, mx ? STAX_RED_MAX : STAX_RED_MIN, xdt, v, NULL);
        return a0 < 0 ? -1 : red_store(c, &r, x, mask, out, lw_acc(c, a0, xdt), 0);
    }
    if ((id == STAX_OP_MAX) || (id == STAX_OP_MIN)) {
        vbuf *items[2];
        if (tuple_out(c, in, out, 2, items) < 0) {
            return -1;
        }
        int mx = (id == STAX_OP_MAX);
        a0 = add_acc(k, mx ? STAX_RED_MAX : STAX_RED_MIN, xdt, v, NULL);
        int a1 = a0 < 0 ? -1 : add_acc_same(k, mx ? STAX_RED_ARGMAX : STAX_RED_ARGMIN,
                                            STAX_INT64, v, r.rlinear);
        if (a1 < 0) {
            return -1;
        }
        if (red_store(c, &r, x, mask, items[0], lw_acc(c, a0, xdt), 0) < 0) {
            return -1;
        }
        return red_store(c, &r, x, mask, items[1], lw_acc(c, a1, STAX_INT64), 0);
    }
    if ((id == STAX_OP_ARGMAX) || (id == STAX_OP_ARGMIN)) {
        a0 = add_acc(k, id == STAX_OP_ARGMAX ? STAX_RED_ARGMAX : STAX_RED_ARGMIN,
                     STAX_INT64, v, r.rlinear);
        return a0 < 0 ? -1 : red_store(c, &r, x, mask, out, lw_acc(c, a0, STAX_INT64), 0);
    }
    if ((id == STAX_OP_ANY) || (id == STAX_OP_ALL)) {
        a0 = add_acc(k, id == STAX_OP_ANY ? STAX_RED_ANY : STAX_RED_ALL, STAX_BOOL,
                     lw_cast(c, v, STAX_BOOL), NULL);
        return a0 < 0 ? -1 : red_store(c, &r, x, mask, out, lw_acc(c, a0, STAX_BOOL), 0);
    }
    if ((id == STAX_OP_VAR) || (id == STAX_OP_STD) || (id == STAX_OP_VAR_MEAN)
        || (id == STAX_OP_STD_MEAN)) {
        return red_variance(c, in, bound, x, &r, mask, out, v);
    }
    if (id == STAX_OP_LOGSUMEXP) {
        return red_logsumexp(c, x, &r, mask, out, v);
    }
    if (id == STAX_OP_NORM) {
        return red_norm(c, in, bound, x, &r, mask, out, v);
    }
    UNSUPPORTED("reduction without a lowering rule");
}

/* softmax / log_softmax over one dim: max, sum(exp), normalize: 1 kernel */
int
lw_lower_softmax(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                 vbuf *out, int logsm, const char **why)
{
    PyObject *dim = lw_bound_arg(bound, in->op, "dim");
    if (dim == NULL || !PyLong_Check(dim)) {
        UNSUPPORTED("softmax without an int dim");
    }
    int mask[STAX_MAX_DIMS];
    if (dims_mask(dim, x->ndim, mask) < 0) {
        UNSUPPORTED("softmax dim out of range");
    }
    redk r;
    if (red_begin(c, x, mask, logsm ? "log_softmax" : "softmax", &r) < 0) {
        return -1;
    }
    /* float16 and bfloat16 rows are computed in float32 and rounded once,
     * as eager and PyTorch do (a float16 sum of exp passes 65504 once a row
     * holds more than 65504 near-max values: 1 / inf made every output 0) */
    stax_dtype_t fd = acc_float(out->dtype);
    const stax_lval *xv = lw_cast(c, red_value(c, x, &r), fd);
    int a0 = add_acc(r.k, STAX_RED_MAX, fd, xv, NULL);
    if (a0 < 0) {
        return -1;
    }
    const stax_lval *m = lw_acc(c, a0, fd);
    /* an all -inf row: subtract 0 (gives nan like eager) */
    const stax_lval *sh = lw_prim(c, STAX_PRIM_SUB, fd, xv, m, NULL);
    const stax_lval *e = lw_prim(c, STAX_PRIM_EXP, fd, sh, NULL, NULL);
    int a1 = add_acc(r.k, STAX_RED_SUM, fd, e, NULL);
    if (a1 < 0) {
        return -1;
    }
    const stax_lval *s = lw_acc(c, a1, fd);
    const stax_lval *res;
    if (logsm) {
        res = lw_prim(c, STAX_PRIM_SUB, fd, sh,
                      lw_prim(c, STAX_PRIM_LOG, fd, s, NULL, NULL), NULL);
    }
    else {
        /* one division per row, a multiply per element */
        res = lw_prim(c, STAX_PRIM_MUL, fd, e,
                      lw_prim(c, STAX_PRIM_DIV, fd, lw_const(c, fd, 1.0), s, NULL), NULL);
        if (in->op->id == STAX_OP__SAFE_SOFTMAX) {
            /* _safe_softmax: a row of -inf (max -inf) is 0, not 0/0 */
            const stax_lval *dead = lw_prim(c, STAX_PRIM_EQ, STAX_BOOL, m,
                                            lw_const(c, fd, -INFINITY), NULL);
            res = lw_prim(c, STAX_PRIM_WHERE, fd, dead, lw_const(c, fd, 0.0), res);
        }
    }
    return red_store(c, &r, x, mask, out, res, 1);
}

/* layer_norm's weight or bias w at the current point, cast to fd: w is
 * broadcast against the last nk dims, whose index variables are wv */
static const stax_lval *
trailing_operand(lw_ctx *c, const vbuf *w, int nk, const stax_ix **wv,
                 stax_dtype_t fd)
{
    lw_rw rw = {0};
    const stax_ix *map[STAX_MAX_DIMS];
    for (int d = 0; d < w->ndim; d++) {
        int od = nk - w->ndim + d;
        map[d] = w->sizes[d] == 1 || od < 0 ? lw_ix_const(c, 0) : wv[od];
    }
    rw.vars = map;
    rw.nvars = w->ndim;
    const stax_lval *v = lw_cast(c, lw_rewrite(c, &rw, w->body), fd);
    lw_rw_done(&rw);
    return v;
}

int
lw_lower_layer_norm(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                    vbuf *out, int native, const char **why)
{
    PyObject *ns = lw_bound_arg(bound, in->op, "normalized_shape");
    PyObject *wo = lw_bound_arg(bound, in->op, "weight");
    PyObject *bo = lw_bound_arg(bound, in->op, "bias");
    double eps = lw_num(lw_bound_arg(bound, in->op, "eps"), 1e-5);
    Py_ssize_t nk = ns == NULL ? -1 : (PyLong_Check(ns) ? 1 : PySequence_Size(ns));
    if (nk < 0) {
        PyErr_Clear();
        UNSUPPORTED("layer_norm normalized_shape not understood");
    }
    if (nk > x->ndim) {
        UNSUPPORTED("layer_norm normalized_shape longer than the input");
    }
    int mask[STAX_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        mask[d] = d >= x->ndim - nk;
    }
    vbuf *w = wo ? lw_arg_vb(in, wo) : NULL, *b = bo ? lw_arg_vb(in, bo) : NULL;
    if ((wo && wo != Py_None && w == NULL) || (bo && bo != Py_None && b == NULL)) {
        UNSUPPORTED("layer_norm weight/bias not a tensor");
    }
    vbuf *res = out, *items[3] = {NULL, NULL, NULL};
    if (native) {
        if (tuple_out(c, in, out, 3, items) < 0) {
            return -1;
        }
        res = items[0];
    }
    redk r;
    if (red_begin(c, x, mask, "layer_norm", &r) < 0) {
        return -1;
    }
    stax_dtype_t fd = acc_float(x->dtype);
    const stax_lval *xv = lw_cast(c, red_value(c, x, &r), fd);
    const stax_lval *mean = NULL, *m2 = NULL;
    if (shifted_moments(c, &r, x, mask, xv, fd, &mean, &m2) < 0) {
        return -1;
    }
    const stax_lval *dv = lw_prim(c, STAX_PRIM_SUB, fd, xv, mean, NULL);
    const stax_lval *var = lw_prim(c, STAX_PRIM_DIV, fd, m2, lw_size_const(c, fd, r.n), NULL);
    const stax_lval *rstd = lw_prim(c, STAX_PRIM_RSQRT, fd,
                                    lw_prim(c, STAX_PRIM_ADD, fd, var, lw_const(c, fd, eps), NULL),
                                    NULL, NULL);
    const stax_lval *y = lw_prim(c, STAX_PRIM_MUL, fd, dv, rstd, NULL);
    /* weight / bias over the normalized dims */
    const stax_ix *wv[STAX_MAX_DIMS];
    int base = x->ndim - (int)nk;
    for (int d = 0; d < nk; d++) {
        wv[d] = r.ivars[base + d];
    }
    if (w != NULL) {
        y = lw_prim(c, STAX_PRIM_MUL, fd, y, trailing_operand(c, w, (int)nk, wv, fd), NULL);
    }
    if (b != NULL) {
        y = lw_prim(c, STAX_PRIM_ADD, fd, y, trailing_operand(c, b, (int)nk, wv, fd), NULL);
    }
    if (red_store(c, &r, x, mask, res, y, 1) < 0) {
        return -1;
    }
    if (native) {
        if (red_store(c, &r, x, mask, items[1], mean, 0) < 0) {
            return -1;
        }
        return red_store(c, &r, x, mask, items[2], rstd, 0);
    }
    return 1;
}

/* batch_norm in inference form (running statistics): pointwise */
int
lw_lower_batch_norm(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                    vbuf *out, const char **why)
{
    PyObject *tr = lw_bound_arg(bound, in->op, "training");
    if (tr == NULL || PyObject_IsTrue(tr)) {
        UNSUPPORTED("batch_norm in training mode (updates running statistics)");
    }
    vbuf *rm = lw_arg_vb(in, lw_bound_arg(bound, in->op, "running_mean"));
    vbuf *rv = lw_arg_vb(in, lw_bound_arg(bound, in->op, "running_var"));
    PyObject *wo = lw_bound_arg(bound, in->op, "weight"), *bo = lw_bound_arg(bound, in->op, "bias");
    vbuf *w = wo ? lw_arg_vb(in, wo) : NULL, *b = bo ? lw_arg_vb(in, bo) : NULL;
    if (rm == NULL || rv == NULL || x->ndim < 2) {
        UNSUPPORTED("batch_norm without running statistics");
    }
    double eps = lw_num(lw_bound_arg(bound, in->op, "eps"), 1e-5);
    stax_dtype_t fd = out->dtype;
    const stax_ix *ov[STAX_MAX_DIMS];
    lw_ident_vars(c, x->ndim, ov);
    const stax_ix *cv[1] = {ov[1]};
    const stax_lval *xv = lw_cast(c, x->body, fd);
    lw_rw rw = {0};
    rw.vars = cv;
    rw.nvars = 1;
    const stax_lval *m = lw_cast(c, lw_rewrite(c, &rw, rm->body), fd);
    const stax_lval *va = lw_cast(c, lw_rewrite(c, &rw, rv->body), fd);
    const stax_lval *y = lw_prim(c, STAX_PRIM_MUL, fd, lw_prim(c, STAX_PRIM_SUB, fd, xv, m, NULL),
                                 lw_prim(c, STAX_PRIM_RSQRT, fd,
                                         lw_prim(c, STAX_PRIM_ADD, fd, va, lw_const(c, fd, eps), NULL),
                                         NULL, NULL), NULL);
    if (w != NULL) {
        y = lw_prim(c, STAX_PRIM_MUL, fd, y, lw_cast(c, lw_rewrite(c, &rw, w->body), fd), NULL);
    }
    if (b != NULL) {
        y = lw_prim(c, STAX_PRIM_ADD, fd, y, lw_cast(c, lw_rewrite(c, &rw, b->body), fd), NULL);
    }
    lw_rw_done(&rw);
    out->body = y;
    return y ? 1 : -1;
}

static int
is_int_division(const stax_lval *v)
{
    return v->kind == STAX_LV_PRIM && v->nargs == 2
           && (v->prim == STAX_PRIM_DIV || v->prim == STAX_PRIM_FLOORDIV
               || v->prim == STAX_PRIM_REMAINDER || v->prim == STAX_PRIM_FMOD)
           && !lw_is_float(v->args[1]->dtype) && v->args[1]->dtype != STAX_BOOL;
}

/* the integer divisions of a body, outermost first; divisions inside one
 * belong to an earlier node (already checked). Bodies are DAGs (a value
 * read twice is one shared subtree): each subtree is visited once. */
#define FD_SLOTS 8192
typedef struct {
    const stax_lval **seen;     /* open addressing, FD_SLOTS */
    int nseen;
    int over;                   /* too many distinct subtrees */
} fd_ctx;

static void
find_divisions(fd_ctx *f, const stax_lval *v, const stax_lval **out, int *n, int cap)
{
    if (v == NULL || *n >= cap || f->over) {
        return;
    }
    size_t h = ((uintptr_t)v >> 4) & (FD_SLOTS - 1);
    while (f->seen[h] != NULL) {
        if (f->seen[h] == v) {
            return;
        }
        h = (h + 1) & (FD_SLOTS - 1);
    }
    if (++f->nseen > FD_SLOTS / 2) {
        f->over = 1;
        return;
    }
    f->seen[h] = v;
    if (is_int_division(v)) {
        out[(*n)++] = v->args[1];
        return;
    }
    if (v->kind == STAX_LV_PRIM || v->kind == STAX_LV_CAST) {
        for (int i = 0; i < v->nargs; i++) {
            find_divisions(f, v->args[i], out, n, cap);
        }
    }
}

/* a 0-d bool buffer any(bad) over v's shape (bad: a body over v's vars),
 * read by the program after its last step */
static int
add_check(lw_ctx *c, const vbuf *v, const stax_lval *bad, int kind)
{
    if (c->nzchecks == (int)(sizeof(c->zchecks) / sizeof(c->zchecks[0]))) {
        PyErr_SetString(PyExc_RuntimeError, "stax: too many runtime checks (integer divisions, "
                        "gathered indices) in one program");
        return -1;
    }
    vbuf in = *v;
    in.pbuf = -1;
    in.label = NULL;
    in.body = bad;
    int mask[STAX_MAX_DIMS];
    for (int d = 0; d < in.ndim; d++) {
        mask[d] = 1;
    }
    redk r;
    if (red_begin(c, &in, mask, kind == LW_CHECK_ZERO ? "zero_divisor" : "index_check", &r) < 0) {
        return -1;
    }
    const stax_lval *x = red_value(c, &in, &r);
    int a0 = x ? add_acc(r.k, STAX_RED_ANY, STAX_BOOL, x, NULL) : -1;
    vbuf out;
    memset(&out, 0, sizeof(out));
    out.kind = VB_TENSOR;
    out.ndim = 0;
    out.dtype = STAX_BOOL;
    out.pbuf = -1;
    if (a0 < 0 || red_store(c, &r, &in, mask, &out, lw_acc(c, a0, STAX_BOOL), 0) < 0) {
        return -1;
    }
    c->pbufs[out.pbuf].is_output = 1;   /* read after the last step */
    c->zkind[c->nzchecks] = kind;
    c->zidx[c->nzchecks] = NULL;      /* index_check fills in its index */
    c->zchecks[c->nzchecks++] = out.pbuf;
    return 0;
}

int
lw_zero_check(lw_ctx *c, const stax_op_info *op, vbuf *v)
{
    int is_div = op != NULL && (op->id == STAX_OP_FLOOR_DIVIDE || op->id == STAX_OP_REMAINDER
                                || op->id == STAX_OP_FMOD || op->id == STAX_OP_DIV);
    if (!is_div || v == NULL || v->kind != VB_TENSOR || v->body == NULL
        || lw_is_float(v->dtype) || v->dtype == STAX_BOOL) {
        return 0;
    }
    /* torch raises for an integer division by zero on the CPU only (CUDA
     * kernels give an unspecified value): GPU back ends need no check */
    if (c->be != NULL && (c->be->caps & STAX_BE_NO_ZERO_DIV_CHECK)) {
        return 0;
    }
    const stax_lval *divs[8];
    int nd = 0;
    fd_ctx f = {PyMem_Calloc(FD_SLOTS, sizeof(const stax_lval *)), 0, 0};
    if (f.seen == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    find_divisions(&f, v->body, divs, &nd, 8);
    PyMem_Free(f.seen);
    if (f.over) {
        PyErr_SetString(PyExc_RuntimeError,
                        "stax: integer division in a body too large to check for zero divisors");
        return -1;
    }
    for (int i = 0; i < nd; i++) {
        if (divs[i]->kind == STAX_LV_CONST && divs[i]->i != 0) {
            continue;
        }
        if (c->nzchecks == (int)(sizeof(c->zchecks) / sizeof(c->zchecks[0]))) {
            PyErr_SetString(PyExc_RuntimeError, "stax: too many integer divisions to check");
            return -1;
        }
        const stax_lval *bad = lw_prim(c, STAX_PRIM_EQ, STAX_BOOL, divs[i],
                                       lw_const(c, divs[i]->dtype, 0.0), NULL);
        if (bad == NULL || add_check(c, v, bad, LW_CHECK_ZERO) < 0) {
            return -1;
        }
    }
    return 0;
}

static int index_check(lw_ctx *c, vbuf *idx, int wrap, int64_t n, int kind, int store);

int
lw_index_check(lw_ctx *c, vbuf *idx, int64_t n, int kind)
{
    return index_check(c, idx, 0, n, kind, 0);
}

int
lw_index_check_wrap(lw_ctx *c, vbuf *idx, int64_t n, int kind)
{
    return index_check(c, idx, 1, n, kind, 0);
}

int
lw_index_check_store(lw_ctx *c, vbuf *idx, int64_t n, int kind)
{
    return index_check(c, idx, 0, n, kind, 1);
}

/* Index values a program fixes when it is compiled: a range [lo, hi] of
 * an integer body over the index's loop variables (extents: its sizes),
 * from the body alone: constants, a constant tensor the program holds (a
 * host tensor: its values' range), loop variables (arange, lowered in the
 * program), and +, -, *, fma, neg, min, max (clamp), where and integer
 * casts of those; anything else (an input's values) is unbounded.  When
 * the range lies inside the index's bounds the run-time check is decided
 * now: a compiled backward gathers each view's gradient through constant
 * maps (autograd's _pick), and checking them at run time cost a check
 * buffer each (an unrolled loop of views ran out of them).
 * Bounded ends stay within +-VR_LIM; VR_INF stands for an unbounded end.
 * Arithmetic whose result leaves +-VR_LIM (it might wrap) is unbounded at
 * both ends; min, max and where keep a bounded end (they cannot wrap). */
#define VR_LIM ((int64_t)1 << 40)
#define VR_INF ((int64_t)1 << 62)

typedef struct {
    lw_ctx *c;
    const int64_t *sizes;
    int ndim;
    int budget;                 /* nodes left to visit (the body is a DAG) */
} vr_ctx;

static void vr_lval(vr_ctx *v, const stax_lval *b, int64_t *lo, int64_t *hi);

static void
vr_full(int64_t *lo, int64_t *hi)
{
    *lo = -VR_INF;
    *hi = VR_INF;
}

/* the result of arithmetic: exact within +-VR_LIM, else unbounded */
static void
vr_arith(__int128 lo, __int128 hi, int64_t *olo, int64_t *ohi)
{
    if (lo < -(__int128)VR_LIM || hi > (__int128)VR_LIM) {
        vr_full(olo, ohi);
        return;
    }
    *olo = (int64_t)lo;
    *ohi = (int64_t)hi;
}

/* [min, max] of the four products of two ranges */
static void
vr_mul(int64_t alo, int64_t ahi, int64_t blo, int64_t bhi, int64_t *lo, int64_t *hi)
{
    __int128 p[4] = {(__int128)alo * blo, (__int128)alo * bhi, (__int128)ahi * blo,
                     (__int128)ahi * bhi};
    __int128 l = p[0], h = p[0];
    for (int q = 1; q < 4; q++) {
        l = p[q] < l ? p[q] : l;
        h = p[q] > h ? p[q] : h;
    }
    vr_arith(l, h, lo, hi);
}

static void
vr_ix(vr_ctx *v, const stax_ix *x, int64_t *lo, int64_t *hi)
{
    int64_t alo, ahi, blo, bhi;
    vr_full(lo, hi);
    if (x == NULL || --v->budget < 0) {
        return;
    }
    switch (x->kind) {
    case STAX_IX_CONST:
        vr_arith(x->v, x->v, lo, hi);
        return;
    case STAX_IX_VAR:
        if (x->v >= 0 && x->v < v->ndim) {
            vr_arith(0, v->sizes[x->v] > 0 ? v->sizes[x->v] - 1 : 0, lo, hi);
        }
        return;
    case STAX_IX_ADD:
    case STAX_IX_MUL:
    case STAX_IX_DIV:
    case STAX_IX_MOD:
        vr_ix(v, x->a, &alo, &ahi);
        vr_ix(v, x->b, &blo, &bhi);
        if (x->kind == STAX_IX_ADD) {
            vr_arith((__int128)alo + blo, (__int128)ahi + bhi, lo, hi);
        }
        else if (x->kind == STAX_IX_MUL) {
            vr_mul(alo, ahi, blo, bhi, lo, hi);
        }
        else if (alo < 0 || blo <= 0 || ahi >= VR_INF || bhi >= VR_INF) {
            return;
        }
        else if (x->kind == STAX_IX_DIV) {
            vr_arith(alo / bhi, ahi / blo, lo, hi);
        }
        else {
            vr_arith(0, ahi < bhi - 1 ? ahi : bhi - 1, lo, hi);
        }
        return;
    case STAX_IX_VALUE:
        vr_lval(v, x->val, lo, hi);
        return;
    default:
        return;
    }
}

/* the values of a constant integer tensor the program holds */
static void
vr_const_tensor(vr_ctx *v, const stax_lval *b, int64_t *lo, int64_t *hi)
{
    vr_full(lo, hi);
    if (b->buf < 0 || b->buf >= v->c->npbufs) {
        return;
    }
    const pbuf_t *pb = &v->c->pbufs[b->buf];
    if (pb->kind != PB_CONST || pb->obj == NULL || !StaxTensor_Check(pb->obj)) {
        return;
    }
    const StaxTensor *t = (const StaxTensor *)pb->obj;
    if (stax_tensor_is_cuda(t) || (t->dtype != STAX_INT64 && t->dtype != STAX_INT32)) {
        return;
    }
    int64_t total = 1;
    for (int d = 0; d < t->ndim; d++) {
        total *= t->sizes[d];
    }
    const char *base = STAX_TENSOR_DATA(t);
    int64_t pos[STAX_MAX_DIMS] = {0};
    int64_t l = b->mask != NULL ? 0 : INT64_MAX;      /* a masked load yields 0 */
    int64_t h = b->mask != NULL ? 0 : INT64_MIN;
    for (int64_t e = 0; e < total; e++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) {
            off += pos[d] * t->strides[d];
        }
        int64_t x = t->dtype == STAX_INT64 ? ((const int64_t *)base)[off]
                                           : (int64_t)((const int32_t *)base)[off];
        l = x < l ? x : l;
        h = x > h ? x : h;
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++pos[d] < t->sizes[d]) {
                break;
            }
            pos[d] = 0;
        }
    }
    if (l > h) {
        l = h = 0;                                    /* no elements */
    }
    vr_arith(l, h, lo, hi);
}

static void
vr_lval(vr_ctx *v, const stax_lval *b, int64_t *lo, int64_t *hi)
{
    int64_t alo, ahi, blo, bhi, clo, chi;
    vr_full(lo, hi);
    if (b == NULL || --v->budget < 0 || lw_is_float(b->dtype)) {
        return;
    }
    if (b->dtype == STAX_BOOL) {
        *lo = 0;
        *hi = 1;
        return;
    }
    if (b->dtype != STAX_INT64 && b->dtype != STAX_INT32) {
        return;                                       /* narrow integers wrap */
    }
    switch (b->kind) {
    case STAX_LV_CONST:
        vr_arith(b->i, b->i, lo, hi);
        break;
    case STAX_LV_LOAD:
        vr_const_tensor(v, b, lo, hi);
        break;
    case STAX_LV_INDEX:
        vr_ix(v, b->index, lo, hi);
        break;
    case STAX_LV_CAST:
        vr_lval(v, b->args[0], lo, hi);
        break;
    case STAX_LV_PRIM:
        if (b->nargs < 1) {
            return;
        }
        vr_lval(v, b->args[0], &alo, &ahi);
        if (b->nargs > 1) {
            vr_lval(v, b->args[1], &blo, &bhi);
        }
        switch (b->prim) {
        case STAX_PRIM_NEG:
            vr_arith(-(__int128)ahi, -(__int128)alo, lo, hi);
            break;
        case STAX_PRIM_ADD:
            vr_arith((__int128)alo + blo, (__int128)ahi + bhi, lo, hi);
            break;
        case STAX_PRIM_SUB:
            vr_arith((__int128)alo - bhi, (__int128)ahi - blo, lo, hi);
            break;
        case STAX_PRIM_MUL:
            vr_mul(alo, ahi, blo, bhi, lo, hi);
            break;
        case STAX_PRIM_FMA:                           /* a * b + c (sub with alpha) */
            vr_mul(alo, ahi, blo, bhi, &alo, &ahi);
            vr_lval(v, b->args[2], &clo, &chi);
            vr_arith((__int128)alo + clo, (__int128)ahi + chi, lo, hi);
            break;
        case STAX_PRIM_MIN:
        case STAX_PRIM_MINNAN:                        /* integers: min (clamp) */
            *lo = alo < blo ? alo : blo;
            *hi = ahi < bhi ? ahi : bhi;
            break;
        case STAX_PRIM_MAX:
        case STAX_PRIM_MAXNAN:
            *lo = alo > blo ? alo : blo;
            *hi = ahi > bhi ? ahi : bhi;
            break;
        case STAX_PRIM_WHERE:
            vr_lval(v, b->args[2], &clo, &chi);
            *lo = blo < clo ? blo : clo;
            *hi = bhi > chi ? bhi : chi;
            break;
        default:
            return;
        }
        break;
    default:
        return;
    }
    /* an int32 result outside int32 wraps */
    if (b->dtype == STAX_INT32 && (*lo < INT32_MIN || *hi > INT32_MAX)) {
        vr_full(lo, hi);
    }
}

/* 1 when every value of idx lies in [lo, n), as far as its body tells */
static int
const_index_in_range(lw_ctx *c, const vbuf *idx, int64_t lo, int64_t n)
{
    vr_ctx v = {c, idx->sizes, idx->ndim, 256};
    int64_t a, b;
    for (int d = 0; d < idx->ndim; d++) {
        if (idx->sizes[d] == 0) {
            return 1;                                 /* no index at all */
        }
    }
    vr_lval(&v, idx->body, &a, &b);
    return v.budget >= 0 && a >= lo && b < n;
}

static int
index_check(lw_ctx *c, vbuf *idx, int wrap, int64_t n, int kind, int store)
{
    if (idx == NULL || idx->kind != VB_TENSOR || idx->body == NULL) {
        return 0;
    }
    /* static sizes only: a symbolic program's kernels serve other sizes */
    if (!c->symbolic && const_index_in_range(c, idx, wrap ? -n : 0, n)) {
        return 0;
    }
    /* a back end whose loads raise on the device needs no check (none
     * does: lower.h); a store's clamped index would write another
     * element: checked */
    if (!store && c->be != NULL && (c->be->caps & STAX_BE_DEVICE_INDEX_CHECK)) {
        return 0;
    }
    /* one check per index tensor, bound and kind, however many loads use it */
    for (int q = 0; q < c->nzchecks; q++) {
        if (c->zidx[q] == idx->body && c->zkind[q] == kind && c->zn[q] == n
            && c->zwrap[q] == wrap && c->zndim[q] == idx->ndim
            && memcmp(c->zsizes[q], idx->sizes, sizeof(int64_t) * idx->ndim) == 0) {
            return 0;
        }
    }
    const stax_lval *iv = lw_cast(c, idx->body, STAX_INT64);
    const stax_lval *nn = lw_size_const(c, STAX_INT64, n);
    const stax_lval *bad = iv && nn
        ? lw_prim(c, STAX_PRIM_OR, STAX_BOOL,
                  lw_prim(c, STAX_PRIM_LT, STAX_BOOL, iv,
                          wrap ? lw_prim(c, STAX_PRIM_NEG, STAX_INT64, nn, NULL, NULL)
                               : lw_const(c, STAX_INT64, 0), NULL),
                  lw_prim(c, STAX_PRIM_GE, STAX_BOOL, iv, nn, NULL), NULL)
        : NULL;
    if (bad == NULL || add_check(c, idx, bad, kind) < 0) {
        return -1;
    }
    int q = c->nzchecks - 1;
    c->zidx[q] = idx->body;
    c->zn[q] = n;
    c->zwrap[q] = wrap;
    c->zndim[q] = idx->ndim;
    memcpy(c->zsizes[q], idx->sizes, sizeof(int64_t) * idx->ndim);
    return 0;
}
