/* Loop-IR construction helpers, the rewriter (substitution of index
 * variables = fusion by function composition), program buffers and steps,
 * and materialization of a virtual buffer into a pointwise kernel. */
#include "lower/lower_internal.h"

#include <stdlib.h>
#include <string.h>

int
lw_dtype_size(stax_dtype_t dt)
{
    static const int sz[] = {1, 1, 1, 2, 4, 8, 2, 4, 8, 2};
    _Static_assert(sizeof(sz) / sizeof(sz[0]) == STAX_NUM_DTYPES, "a size per dtype");
    return (unsigned)dt < STAX_NUM_DTYPES ? sz[dt] : 8;
}

int
lw_is_float(stax_dtype_t dt)
{
    return dt == STAX_FLOAT16 || dt == STAX_FLOAT32 || dt == STAX_FLOAT64
           || dt == STAX_BFLOAT16;
}

/* ------------------------------------------------------------ builders */
static stax_ix *
ix_new(lw_ctx *c, stax_ix_kind_t k)
{
    stax_ix *ix = stax_arena_alloc(c->arena, sizeof(stax_ix));
    if (ix != NULL) {
        ix->kind = k;
    }
    return ix;
}

const stax_ix *
lw_ix_const(lw_ctx *c, int64_t v)
{
    stax_ix *ix = ix_new(c, STAX_IX_CONST);
    if (ix) {
        ix->v = v;
    }
    return ix;
}

const stax_ix *
lw_ix_var(lw_ctx *c, int v)
{
    stax_ix *ix = ix_new(c, STAX_IX_VAR);
    if (ix) {
        ix->v = v;
    }
    return ix;
}

const stax_ix *
lw_ix_value(lw_ctx *c, const stax_lval *v)
{
    stax_ix *ix = ix_new(c, STAX_IX_VALUE);
    if (ix) {
        ix->val = v;
    }
    return ix;
}

const stax_ix *
lw_ix_bin(lw_ctx *c, stax_ix_kind_t k, const stax_ix *a, const stax_ix *b)
{
    if (a == NULL || b == NULL) {
        return NULL;
    }
    /* constant folding keeps indices affine and readable */
    if (a->kind == STAX_IX_CONST && b->kind == STAX_IX_CONST) {
        switch (k) {
        case STAX_IX_ADD: return lw_ix_const(c, a->v + b->v);
        case STAX_IX_MUL: return lw_ix_const(c, a->v * b->v);
        case STAX_IX_DIV: return lw_ix_const(c, b->v ? a->v / b->v : 0);
        case STAX_IX_MOD: return lw_ix_const(c, b->v ? a->v % b->v : 0);
        default: break;
        }
    }
    if (k == STAX_IX_ADD) {
        if (a->kind == STAX_IX_CONST && a->v == 0) {
            return b;
        }
        if (b->kind == STAX_IX_CONST && b->v == 0) {
            return a;
        }
    }
    if (k == STAX_IX_MUL) {
        if ((a->kind == STAX_IX_CONST && a->v == 0)
            || (b->kind == STAX_IX_CONST && b->v == 0)) {
            return lw_ix_const(c, 0);
        }
        if (a->kind == STAX_IX_CONST && a->v == 1) {
            return b;
        }
        if (b->kind == STAX_IX_CONST && b->v == 1) {
            return a;
        }
    }
    if ((k == STAX_IX_DIV) && b->kind == STAX_IX_CONST && b->v == 1) {
        return a;
    }
    if ((k == STAX_IX_MOD) && b->kind == STAX_IX_CONST && b->v == 1) {
        return lw_ix_const(c, 0);
    }
    stax_ix *ix = ix_new(c, k);
    if (ix) {
        ix->a = a;
        ix->b = b;
    }
    return ix;
}

static stax_lval *
lv_new(lw_ctx *c, stax_lval_kind_t k, stax_dtype_t dt)
{
    stax_lval *v = stax_arena_alloc(c->arena, sizeof(stax_lval));
    if (v) {
        v->kind = k;
        v->dtype = dt;
    }
    return v;
}

const stax_lval *
lw_const(lw_ctx *c, stax_dtype_t dt, double f)
{
    stax_lval *v = lv_new(c, STAX_LV_CONST, dt);
    if (v) {
        /* a constant of a narrower float dtype holds its rounded value (as
         * eager converts: bfloat16 through float32, float16 from the
         * double): a cast of it to a wider dtype folds to that value
         * (x.fill_(0.001) of float32 read as float64 is 0.0010000000475) */
        if (dt == STAX_FLOAT32) {
            v->f = (double)(float)f;
        }
        else if (stax_dtype_is_half_like(dt)) {
            v->f = stax_half_like_to_double(dt, stax_double_to_half_like(dt, f));
        }
        else {
            v->f = f;
        }
        if (!lw_is_float(dt)) {
            v->i = dt == STAX_BOOL ? (f != 0) : (int64_t)f;
        }
    }
    return v;
}

/* An integral constant, exact: i is its int64 bits wrapped to dt's width
 * (two's complement, as a C cast), f its value as a float operand reads it
 * (an int64 constant from a uint64 Python int keeps its positive value
 * there: int64 / 2**63 is positive in torch). A double would
 * round an int64 beyond 2^53. */
const stax_lval *
lw_const_int(lw_ctx *c, stax_dtype_t dt, int64_t i, double f)
{
    stax_lval *v;
    if (lw_is_float(dt)) {
        return lw_const(c, dt, f);
    }
    v = lv_new(c, STAX_LV_CONST, dt);
    if (v) {
        switch (dt) {
        case STAX_BOOL: i = i != 0; break;
        case STAX_UINT8: i = (uint8_t)i; break;
        case STAX_INT8: i = (int8_t)i; break;
        case STAX_INT16: i = (int16_t)i; break;
        case STAX_INT32: i = (int32_t)i; break;
        default: break;
        }
        v->i = i;
        v->f = dt == STAX_INT64 ? f : (double)i;
    }
    return v;
}

const stax_lval *
lw_load(lw_ctx *c, int pbuf, const stax_ix *ix, const stax_lval *mask)
{
    if (ix == NULL) {
        return NULL;
    }
    stax_lval *v = lv_new(c, STAX_LV_LOAD, c->pbufs[pbuf].dtype);
    if (v) {
        v->buf = pbuf;
        v->index = ix;
        v->mask = mask;
    }
    return v;
}

const stax_lval *
lw_cast(lw_ctx *c, const stax_lval *a, stax_dtype_t dt)
{
    if (a == NULL) {
        return NULL;
    }
    if (a->dtype == dt) {
        return a;
    }
    if (a->kind == STAX_LV_CONST) {
        if (!lw_is_float(a->dtype) && !lw_is_float(dt)) {
            /* integer to integer: the bits wrap, as eager's cast */
            return lw_const_int(c, dt, a->i, (double)a->i);
        }
        return lw_const(c, dt, a->f);
    }
    stax_lval *v = lv_new(c, STAX_LV_CAST, dt);
    if (v) {
        v->nargs = 1;
        v->args[0] = a;
    }
    return v;
}

const stax_lval *
lw_prim(lw_ctx *c, stax_prim_t p, stax_dtype_t dt, const stax_lval *a,
        const stax_lval *b, const stax_lval *d)
{
    int n = stax_prim_arity(p);
    if (a == NULL || (n > 1 && b == NULL) || (n > 2 && d == NULL)) {
        return NULL;
    }
    /* exact peepholes: x * 1 and x / 1 are x (also for NaN and -0.0) */
    if ((p == STAX_PRIM_MUL || p == STAX_PRIM_DIV) && b->kind == STAX_LV_CONST
        && a->dtype == dt && (lw_is_float(b->dtype) ? b->f == 1.0 : b->i == 1)) {
        return a;
    }
    if (p == STAX_PRIM_MUL && a->kind == STAX_LV_CONST && b->dtype == dt
        && (lw_is_float(a->dtype) ? a->f == 1.0 : a->i == 1)) {
        return b;
    }
    stax_lval *v = lv_new(c, STAX_LV_PRIM, dt);
    if (v) {
        v->prim = p;
        v->nargs = n;
        v->args[0] = a;
        v->args[1] = b;
        v->args[2] = d;
    }
    return v;
}

const stax_lval *
lw_acc(lw_ctx *c, int acc, stax_dtype_t dt)
{
    stax_lval *v = lv_new(c, STAX_LV_ACC, dt);
    if (v) {
        v->acc = acc;
    }
    return v;
}

const stax_lval *
lw_size_const(lw_ctx *c, stax_dtype_t dt, int64_t n)
{
    if (!c->symbolic || n == 0 || n == 1) {
        return lw_const(c, dt, (double)n);
    }
    /* an index constant: finalization turns it into a size argument */
    return lw_index(c, lw_ix_const(c, n), dt);
}

const stax_lval *
lw_index(lw_ctx *c, const stax_ix *ix, stax_dtype_t dt)
{
    if (ix == NULL) {
        return NULL;
    }
    stax_lval *v = lv_new(c, STAX_LV_INDEX, dt);
    if (v) {
        v->index = ix;
    }
    return v;
}

/* ------------------------------------------------------------- rewriter */
typedef struct {
    const void **keys;
    const void **vals;
    size_t cap, n;
} ptrmap;

static const void *
pm_get(ptrmap *m, const void *k)
{
    if (m == NULL || m->cap == 0) {
        return NULL;
    }
    size_t i = ((uintptr_t)k >> 4) & (m->cap - 1);
    while (m->keys[i] != NULL) {
        if (m->keys[i] == k) {
            return m->vals[i];
        }
        i = (i + 1) & (m->cap - 1);
    }
    return NULL;
}

static int
pm_put(ptrmap *m, const void *k, const void *v)
{
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        const void **nk = calloc(cap, sizeof(void *));
        const void **nv = calloc(cap, sizeof(void *));
        if (nk == NULL || nv == NULL) {
            free(nk);
            free(nv);
            PyErr_NoMemory();
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (m->keys[i] != NULL) {
                size_t j = ((uintptr_t)m->keys[i] >> 4) & (cap - 1);
                while (nk[j] != NULL) {
                    j = (j + 1) & (cap - 1);
                }
                nk[j] = m->keys[i];
                nv[j] = m->vals[i];
            }
        }
        free(m->keys);
        free(m->vals);
        m->keys = nk;
        m->vals = nv;
        m->cap = cap;
    }
    size_t i = ((uintptr_t)k >> 4) & (m->cap - 1);
    while (m->keys[i] != NULL && m->keys[i] != k) {
        i = (i + 1) & (m->cap - 1);
    }
    if (m->keys[i] == NULL) {
        m->n++;
    }
    m->keys[i] = k;
    m->vals[i] = v;
    return 0;
}

void
lw_rw_done(lw_rw *rw)
{
    ptrmap *m = rw->memo;
    if (m != NULL) {
        free(m->keys);
        free(m->vals);
        free(m);
        rw->memo = NULL;
    }
}

static ptrmap *
rw_memo(lw_rw *rw)
{
    if (rw->memo == NULL) {
        rw->memo = calloc(1, sizeof(ptrmap));
        if (rw->memo == NULL) {
            PyErr_NoMemory();
        }
    }
    return rw->memo;
}

const stax_ix *
lw_rewrite_ix(lw_ctx *c, lw_rw *rw, const stax_ix *ix)
{
    if (ix == NULL) {
        return NULL;
    }
    switch (ix->kind) {
    case STAX_IX_CONST:
    case STAX_IX_SYM:
        return ix;
    case STAX_IX_VAR:
        if (rw->vars != NULL && ix->v < rw->nvars && rw->vars[ix->v] != NULL) {
            const stax_ix *r = rw->vars[ix->v];
            /* an identity map keeps the original nodes (and so the DAG's
             * sharing: x*x + x must not triple at every level) */
            return (r->kind == STAX_IX_VAR && r->v == ix->v) ? ix : r;
        }
        return ix;
    case STAX_IX_VALUE: {
        const stax_lval *v = lw_rewrite(c, rw, ix->val);
        if (v == NULL) {
            return NULL;
        }
        return v == ix->val ? ix : lw_ix_value(c, v);
    }
    default: {
        ptrmap *m = NULL;
        if (rw->ranges != NULL) {
            /* memoized: simplification rebuilds shared nodes once */
            if ((m = rw_memo(rw)) == NULL) {
                return NULL;
            }
            const stax_ix *hit = pm_get(m, ix);
            if (hit != NULL) {
                return hit;
            }
        }
        const stax_ix *a = lw_rewrite_ix(c, rw, ix->a);
        const stax_ix *b = lw_rewrite_ix(c, rw, ix->b);
        if (a == NULL || b == NULL) {
            return NULL;
        }
        const stax_ix *r = (a == ix->a && b == ix->b) ? ix : lw_ix_bin(c, ix->kind, a, b);
        if (m != NULL && r != NULL) {
            r = lw_ix_simplify(c, r, rw->ranges, rw->nranges);
            if (r == NULL || pm_put(m, ix, r) < 0) {
                return NULL;
            }
        }
        return r;
    }
    }
}

const stax_lval *
lw_rewrite(lw_ctx *c, lw_rw *rw, const stax_lval *v)
{
    if (v == NULL) {
        return NULL;
    }
    ptrmap *m = rw_memo(rw);
    if (m == NULL) {
        return NULL;
    }
    const stax_lval *hit = pm_get(m, v);
    if (hit != NULL) {
        return hit;
    }
    const stax_lval *r = v;
    switch (v->kind) {
    case STAX_LV_CONST:
        break;
    case STAX_LV_ACC:
        if (rw->accs != NULL && v->acc < rw->naccs && rw->accs[v->acc] != NULL) {
            r = rw->accs[v->acc];
        }
        else if (rw->acc_shift) {
            r = lw_acc(c, v->acc + rw->acc_shift, v->dtype);
        }
        break;
    case STAX_LV_INDEX: {
        const stax_ix *ix = lw_rewrite_ix(c, rw, v->index);
        if (ix == NULL) {
            return NULL;
        }
        if (ix != v->index) {
            r = lw_index(c, ix, v->dtype);
        }
        break;
    }
    case STAX_LV_LOAD: {
        if (rw->load_hook != NULL) {
            const stax_lval *out = NULL;
            int h = rw->load_hook(rw, v, &out);
            if (h < 0) {
                return NULL;
            }
            if (h > 0) {
                r = out;
                break;
            }
        }
        const stax_ix *ix = lw_rewrite_ix(c, rw, v->index);
        const stax_lval *mask = v->mask ? lw_rewrite(c, rw, v->mask) : NULL;
        if (ix == NULL || (v->mask && mask == NULL)) {
            return NULL;
        }
        int buf = v->buf;
        if (rw->bufmap != NULL) {
            buf = rw->bufmap[v->buf];
        }
        if (ix != v->index || mask != v->mask || buf != v->buf) {
            stax_lval *n = lv_new(c, STAX_LV_LOAD, v->dtype);
            if (n == NULL) {
                return NULL;
            }
            n->buf = buf;
            n->index = ix;
            n->mask = mask;
            r = n;
        }
        break;
    }
    case STAX_LV_CAST:
    case STAX_LV_PRIM: {
        const stax_lval *a[3] = {NULL, NULL, NULL};
        int changed = 0;
        for (int i = 0; i < v->nargs; i++) {
            a[i] = lw_rewrite(c, rw, v->args[i]);
            if (a[i] == NULL) {
                return NULL;
            }
            changed |= a[i] != v->args[i];
        }
        if (changed) {
            stax_lval *n = lv_new(c, v->kind, v->dtype);
            if (n == NULL) {
                return NULL;
            }
            *n = *v;
            for (int i = 0; i < v->nargs; i++) {
                n->args[i] = a[i];
            }
            r = n;
        }
        break;
    }
    }
    if (r != NULL && pm_put(m, v, r) < 0) {
        return NULL;
    }
    return r;
}

/* ------------------------------------------------------------- affine */
static int
affine_rec(const stax_ix *ix, int nv, int64_t *coef, int64_t *cst, int64_t mul)
{
    switch (ix->kind) {
    case STAX_IX_CONST:
        *cst += mul * ix->v;
        return 1;
    case STAX_IX_VAR:
        if (ix->v >= nv) {
            return 0;
        }
        coef[ix->v] += mul;
        return 1;
    case STAX_IX_ADD:
        return affine_rec(ix->a, nv, coef, cst, mul)
               && affine_rec(ix->b, nv, coef, cst, mul);
    case STAX_IX_MUL:
        if (ix->a->kind == STAX_IX_CONST) {
            return affine_rec(ix->b, nv, coef, cst, mul * ix->a->v);
        }
        if (ix->b->kind == STAX_IX_CONST) {
            return affine_rec(ix->a, nv, coef, cst, mul * ix->b->v);
        }
        return 0;
    default:
        return 0;
    }
}

int
lw_ix_affine(const stax_ix *ix, int nv, int64_t *coef, int64_t *cst)
{
    memset(coef, 0, sizeof(int64_t) * (size_t)nv);
    *cst = 0;
    return affine_rec(ix, nv, coef, cst, 1);
}

int
lw_ix_equal(const stax_ix *a, const stax_ix *b, int nv)
{
    int64_t ca[2 * STAX_MAX_DIMS + 2], cb[2 * STAX_MAX_DIMS + 2], ka, kb;
    if (nv > 2 * STAX_MAX_DIMS + 2) {
        return 0;
    }
    if (!lw_ix_affine(a, nv, ca, &ka) || !lw_ix_affine(b, nv, cb, &kb)) {
        return 0;
    }
    return ka == kb && memcmp(ca, cb, sizeof(int64_t) * (size_t)nv) == 0;
}

/* ------------------------------------------------------ buffers, steps */
int
lw_new_pbuf(lw_ctx *c, pb_kind_t kind, int ndim, const int64_t *sizes,
            stax_dtype_t dt)
{
    if (c->npbufs == c->cappbufs) {
        int cap = c->cappbufs ? c->cappbufs * 2 : 32;
        pbuf_t *p = realloc(c->pbufs, sizeof(pbuf_t) * (size_t)cap);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->pbufs = p;
        c->cappbufs = cap;
    }
    pbuf_t *b = &c->pbufs[c->npbufs];
    memset(b, 0, sizeof(*b));
    b->kind = kind;
    b->ndim = ndim;
    b->dtype = dt;
    b->first = b->last = -1;
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        b->sizes[d] = sizes[d];
        b->strides[d] = st;
        st *= sizes[d] > 1 ? sizes[d] : 1;
    }
    return c->npbufs++;
}

step_t *
lw_new_step(lw_ctx *c, step_kind_t kind)
{
    if (c->nsteps == c->capsteps) {
        int cap = c->capsteps ? c->capsteps * 2 : 16;
        step_t *s = realloc(c->steps, sizeof(step_t) * (size_t)cap);
        if (s == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        c->steps = s;
        c->capsteps = cap;
    }
    step_t *s = &c->steps[c->nsteps++];
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    s->out = s->a = s->b = s->src = -1;
    return s;
}

kdraft *
lw_new_kernel(lw_ctx *c, const char *label)
{
    kdraft *k = stax_arena_alloc(c->arena, sizeof(kdraft));
    if (k == NULL) {
        return NULL;
    }
    step_t *s = lw_new_step(c, ST_KERNEL);
    if (s == NULL) {
        return NULL;
    }
    k->alive = 1;
    snprintf(k->label, sizeof(k->label), "%s", label);
    s->draft = k;
    return k;
}

const stax_ix *
lw_contig_index(lw_ctx *c, int ndim, const int64_t *sizes,
                const stax_ix *const *ix)
{
    const stax_ix *r = lw_ix_const(c, 0);
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (sizes[d] != 1) {
            r = lw_ix_bin(c, STAX_IX_ADD,
                          lw_ix_bin(c, STAX_IX_MUL, ix[d], lw_ix_const(c, st)), r);
        }
        st *= sizes[d];
    }
    return r;
}

/* load of a program buffer over its own dims, with its strides */
const stax_lval *
lw_contig_load(lw_ctx *c, int pbuf)
{
    pbuf_t *b = &c->pbufs[pbuf];
    const stax_ix *r = lw_ix_const(c, 0);
    for (int d = b->ndim - 1; d >= 0; d--) {
        if (b->sizes[d] != 1 && b->strides[d] != 0) {
            r = lw_ix_bin(c, STAX_IX_ADD,
                          lw_ix_bin(c, STAX_IX_MUL, lw_ix_var(c, d),
                                    lw_ix_const(c, b->strides[d])), r);
        }
    }
    return lw_load(c, pbuf, r, NULL);
}

int
lw_vb_over_pbuf(lw_ctx *c, vbuf *v, int pb)
{
    const pbuf_t *b = &c->pbufs[pb];
    v->kind = VB_TENSOR;
    v->ndim = b->ndim;
    memcpy(v->sizes, b->sizes, sizeof(int64_t) * (size_t)b->ndim);
    v->dtype = b->dtype;
    v->pbuf = pb;
    v->body = lw_contig_load(c, pb);
    return v->body != NULL ? 0 : -1;
}

kdraft *
lw_new_pointwise_kernel(lw_ctx *c, const char *label, int ndim, const int64_t *sizes,
                        const stax_ix **vars)
{
    kdraft *k = lw_new_kernel(c, label);
    if (k == NULL) {
        return NULL;
    }
    k->nouter = ndim;
    k->ninner = 0;
    for (int d = 0; d < ndim; d++) {
        k->dimv[d] = sizes[d];
        vars[d] = lw_ix_var(c, d);
    }
    k->nstages = 1;
    k->stages[0].kind = STAX_STAGE_OUTER;
    k->stages[0].first = 0;
    k->stages[0].n = 1;
    k->nstores = 1;
    return k;
}

int
lw_materialize(lw_ctx *c, vbuf *v)
{
    if (v->pbuf >= 0) {
        return v->pbuf;
    }
    if (v->kind != VB_TENSOR) {
        PyErr_SetString(PyExc_TypeError, "materialize: not a tensor value");
        return -1;
    }
    int pb = lw_new_pbuf(c, PB_TEMP, v->ndim, v->sizes, v->dtype);
    if (pb < 0) {
        return -1;
    }
    const stax_ix *vars[STAX_MAX_DIMS];
    kdraft *k = lw_new_pointwise_kernel(c, v->label ? v->label : "pointwise", v->ndim, v->sizes,
                                        vars);
    if (k == NULL) {
        return -1;
    }
    k->stores[0].buf = pb;
    k->stores[0].index = lw_contig_index(c, v->ndim, v->sizes, vars);
    k->stores[0].value = v->body;
    if (k->stores[0].index == NULL) {
        return -1;
    }
    return lw_vb_over_pbuf(c, v, pb) < 0 ? -1 : pb;
}
