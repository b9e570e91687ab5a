/* Index simplification and loop splitting of a kernel draft (CPU back
 * end), run when a kernel is finalized.
 *
 * Views, reshapes and im2col reach a flattened loop var through div/mod
 * (`x // 16`, `(x // 3) % 3`): an integer division per element in the
 * innermost loop, a gather where the memory is contiguous, and no
 * vectorization. With the loop extents known, a loop var x of extent n
 * that appears as `x // F` / `x % F` (F dividing n) is split into two
 * loops x = hi * F + lo; then interval arithmetic over the loop extents
 * drops the div/mod that became exact:
 *     (K*m + r) // K  ->  m      (K*m + r) % K  ->  r      when 0 <= r < K.
 * A split is kept only when it removes div/mod nodes; the iteration order
 * is unchanged (hi-major), so results, reduction order and argmax ties are
 * the same. Measured on the ResNet-style CNN of bench/models.py: its
 * im2col / pooling kernels ran 1.7 ms per call before, see docs/lowering.md. */
#include "lower/lower_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ intervals */
typedef struct {
    int ok;
    int64_t lo, hi;
} rng_t;

typedef struct {
    const int64_t *ext;
    int n;
    long budget;
} rctx;

static rng_t
rng_none(void)
{
    rng_t r = {0, 0, 0};
    return r;
}

static rng_t
ix_range(rctx *x, const stax_ix *ix)
{
    rng_t r = rng_none(), a, b;
    if (ix == NULL || --x->budget < 0) {
        return r;
    }
    switch (ix->kind) {
    case STAX_IX_CONST:
        r.ok = 1;
        r.lo = r.hi = ix->v;
        return r;
    case STAX_IX_VAR:
        if (ix->v < 0 || ix->v >= x->n || x->ext[ix->v] < 1) {
            return r;
        }
        r.ok = 1;
        r.lo = 0;
        r.hi = x->ext[ix->v] - 1;
        return r;
    case STAX_IX_ADD:
        a = ix_range(x, ix->a);
        b = a.ok ? ix_range(x, ix->b) : rng_none();
        if (!b.ok || __builtin_add_overflow(a.lo, b.lo, &r.lo)
            || __builtin_add_overflow(a.hi, b.hi, &r.hi)) {
            return rng_none();
        }
        r.ok = 1;
        return r;
    case STAX_IX_MUL: {
        a = ix_range(x, ix->a);
        b = a.ok ? ix_range(x, ix->b) : rng_none();
        if (!b.ok) {
            return r;
        }
        int64_t p[4];
        if (__builtin_mul_overflow(a.lo, b.lo, &p[0]) || __builtin_mul_overflow(a.lo, b.hi, &p[1])
            || __builtin_mul_overflow(a.hi, b.lo, &p[2])
            || __builtin_mul_overflow(a.hi, b.hi, &p[3])) {
            return r;
        }
        r.ok = 1;
        r.lo = r.hi = p[0];
        for (int i = 1; i < 4; i++) {
            r.lo = p[i] < r.lo ? p[i] : r.lo;
            r.hi = p[i] > r.hi ? p[i] : r.hi;
        }
        return r;
    }
    case STAX_IX_DIV:
    case STAX_IX_MOD:
        if (ix->b->kind != STAX_IX_CONST || ix->b->v < 1) {
            return r;
        }
        a = ix_range(x, ix->a);
        if (!a.ok || a.lo < 0) {
            return r;
        }
        r.ok = 1;
        if (ix->kind == STAX_IX_DIV) {
            r.lo = a.lo / ix->b->v;
            r.hi = a.hi / ix->b->v;
        }
        else if (a.hi < ix->b->v) {
            r = a;
        }
        else {
            r.lo = 0;
            r.hi = ix->b->v - 1;
        }
        return r;
    default:
        return r;
    }
}

/* ---------------------------------------------------------- simplifying */
#define MAX_TERMS 64

/* the summands of an ADD tree, constant factors distributed over sums:
 * ix = sum(coef[i] * t[i]); 0 if more than MAX_TERMS */
static int
terms_of(const stax_ix *ix, int64_t mul, const stax_ix **t, int64_t *coef, int *n)
{
    if (ix->kind == STAX_IX_ADD) {
        return terms_of(ix->a, mul, t, coef, n) && terms_of(ix->b, mul, t, coef, n);
    }
    int64_t m2;
    if (ix->kind == STAX_IX_MUL && ix->b->kind == STAX_IX_CONST
        && !__builtin_mul_overflow(mul, ix->b->v, &m2)) {
        return terms_of(ix->a, m2, t, coef, n);
    }
    if (ix->kind == STAX_IX_MUL && ix->a->kind == STAX_IX_CONST
        && !__builtin_mul_overflow(mul, ix->a->v, &m2)) {
        return terms_of(ix->b, m2, t, coef, n);
    }
    if (*n == MAX_TERMS) {
        return 0;
    }
    if (ix->kind == STAX_IX_CONST) {
        if (__builtin_mul_overflow(mul, ix->v, &m2)) {
            return 0;
        }
        t[*n] = NULL;          /* a constant: coef holds its value */
        coef[(*n)++] = m2;
        return 1;
    }
    t[*n] = ix;
    coef[(*n)++] = mul;
    return 1;
}

static const stax_ix *
term_ix(lw_ctx *c, const stax_ix *t, int64_t coef)
{
    return t == NULL ? lw_ix_const(c, coef)
                     : lw_ix_bin(c, STAX_IX_MUL, t, lw_ix_const(c, coef));
}

const stax_ix *
lw_ix_simplify(lw_ctx *c, const stax_ix *ix, const int64_t *ext, int n)
{
    if (ix == NULL || (ix->kind != STAX_IX_DIV && ix->kind != STAX_IX_MOD)
        || ix->b->kind != STAX_IX_CONST || ix->b->v < 1) {
        return ix;
    }
    int64_t K = ix->b->v;
    const stax_ix *a = ix->a;
    /* (a // K1) // K2 = a // (K1*K2); (a % K1) % K2 = a % K2 if K2 | K1 */
    if (a->kind == ix->kind && a->b->kind == STAX_IX_CONST && a->b->v > 0) {
        int64_t k1 = a->b->v, kk;
        if (ix->kind == STAX_IX_DIV && !__builtin_mul_overflow(k1, K, &kk)) {
            return lw_ix_simplify(c, lw_ix_bin(c, STAX_IX_DIV, a->a, lw_ix_const(c, kk)), ext, n);
        }
        if (ix->kind == STAX_IX_MOD && k1 % K == 0) {
            return lw_ix_simplify(c, lw_ix_bin(c, STAX_IX_MOD, a->a, ix->b), ext, n);
        }
    }
    const stax_ix *t[MAX_TERMS];
    int64_t cf[MAX_TERMS];
    int nt = 0;
    if (!terms_of(a, 1, t, cf, &nt)) {
        return ix;
    }
    const stax_ix *q = lw_ix_const(c, 0), *r = lw_ix_const(c, 0);
    int nq = 0;
    for (int i = 0; i < nt; i++) {
        if (cf[i] % K == 0) {
            q = lw_ix_bin(c, STAX_IX_ADD, q, term_ix(c, t[i], cf[i] / K));
            nq++;
        }
        else {
            r = lw_ix_bin(c, STAX_IX_ADD, r, term_ix(c, t[i], cf[i]));
        }
    }
    if (q == NULL || r == NULL) {
        return NULL;
    }
    rctx x = {ext, n, 4096};
    rng_t rr = ix_range(&x, r);
    if (!rr.ok || rr.lo < 0) {
        return ix;
    }
    if (rr.hi < K) {
        /* floor((K*q + r) / K) = q and (K*q + r) % K = r for 0 <= r < K */
        return ix->kind == STAX_IX_DIV ? q : r;
    }
    if (nq == 0) {
        return ix;
    }
    if (ix->kind == STAX_IX_DIV) {
        return lw_ix_bin(c, STAX_IX_ADD, q, lw_ix_bin(c, STAX_IX_DIV, r, ix->b));
    }
    return lw_ix_bin(c, STAX_IX_MOD, r, ix->b);
}

/* ------------------------------------------------------ the draft's exprs */
static int
rewrite_draft(lw_ctx *c, kdraft *d, const stax_ix *const *vars, int nvars, const int64_t *ext,
              int next, kdraft *out)
{
    lw_rw rw = {0};
    rw.vars = vars;
    rw.nvars = nvars;
    rw.ranges = ext;
    rw.nranges = next;
    *out = *d;
    for (int i = 0; i < d->naccs; i++) {
        out->accs[i].value = lw_rewrite(c, &rw, d->accs[i].value);
        if (d->accs[i].index != NULL) {
            out->accs[i].index = lw_rewrite_ix(c, &rw, d->accs[i].index);
        }
        if (out->accs[i].value == NULL || (d->accs[i].index && out->accs[i].index == NULL)) {
            lw_rw_done(&rw);
            return -1;
        }
    }
    for (int i = 0; i < d->nstores; i++) {
        out->stores[i].index = lw_rewrite_ix(c, &rw, d->stores[i].index);
        out->stores[i].value = lw_rewrite(c, &rw, d->stores[i].value);
        if (out->stores[i].index == NULL || out->stores[i].value == NULL) {
            lw_rw_done(&rw);
            return -1;
        }
    }
    lw_rw_done(&rw);
    return 0;
}

/* walk the distinct nodes of the draft: count div/mod nodes and collect
 * split candidates (var, factor) from `var * c` summands of their operands */
typedef struct {
    const void **seen;
    size_t cap, n;
    int ndivmod;
    int ncand;
    int cand_var[32];
    int64_t cand_f[32];
    const kdraft *d;
    int err;
} walk_t;

static int
seen_add(walk_t *w, const void *p)
{
    if ((w->n + 1) * 2 > w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 256;
        const void **k = calloc(cap, sizeof(void *));
        if (k == NULL) {
            w->err = 1;
            return 0;
        }
        for (size_t i = 0; i < w->cap; i++) {
            if (w->seen[i] != NULL) {
                size_t j = ((uintptr_t)w->seen[i] >> 4) & (cap - 1);
                while (k[j] != NULL) {
                    j = (j + 1) & (cap - 1);
                }
                k[j] = w->seen[i];
            }
        }
        free(w->seen);
        w->seen = k;
        w->cap = cap;
    }
    size_t j = ((uintptr_t)p >> 4) & (w->cap - 1);
    while (w->seen[j] != NULL) {
        if (w->seen[j] == p) {
            return 0;
        }
        j = (j + 1) & (w->cap - 1);
    }
    w->seen[j] = p;
    w->n++;
    return 1;
}

static int64_t
gcd64(int64_t a, int64_t b)
{
    a = a < 0 ? -a : a;
    b = b < 0 ? -b : b;
    while (b != 0) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static void
add_candidate(walk_t *w, int var, int64_t coef, int64_t K)
{
    int nv = w->d->nouter + w->d->ninner;
    if (var < 0 || var >= nv || coef == 0) {
        return;
    }
    int64_t F = K / gcd64(coef, K), n = w->d->dimv[var];
    if (F <= 1 || F >= n || n % F != 0) {
        return;
    }
    /* dim 0 is the parallel dim: keep enough chunks for the thread pool */
    if (var == 0 && n / F < 8) {
        return;
    }
    for (int i = 0; i < w->ncand; i++) {
        if (w->cand_var[i] == var && w->cand_f[i] == F) {
            return;
        }
    }
    if (w->ncand < 32) {
        w->cand_var[w->ncand] = var;
        w->cand_f[w->ncand++] = F;
    }
}

static void walk_lval(walk_t *w, const stax_lval *v);

static void
walk_ix(walk_t *w, const stax_ix *ix)
{
    if (ix == NULL || w->err || !seen_add(w, ix)) {
        return;
    }
    switch (ix->kind) {
    case STAX_IX_DIV:
    case STAX_IX_MOD:
        w->ndivmod++;
        if (ix->b->kind == STAX_IX_CONST && ix->b->v > 1) {
            const stax_ix *t[MAX_TERMS];
            int64_t cf[MAX_TERMS];
            int nt = 0;
            if (terms_of(ix->a, 1, t, cf, &nt)) {
                for (int i = 0; i < nt; i++) {
                    if (t[i] != NULL && t[i]->kind == STAX_IX_VAR) {
                        add_candidate(w, (int)t[i]->v, cf[i], ix->b->v);
                    }
                }
            }
        }
        /* fall through */
    case STAX_IX_ADD:
    case STAX_IX_MUL:
        walk_ix(w, ix->a);
        walk_ix(w, ix->b);
        break;
    case STAX_IX_VALUE:
        walk_lval(w, ix->val);
        break;
    default:
        break;
    }
}

static void
walk_lval(walk_t *w, const stax_lval *v)
{
    if (v == NULL || w->err || !seen_add(w, v)) {
        return;
    }
    for (int i = 0; i < v->nargs && i < 3; i++) {
        walk_lval(w, v->args[i]);
    }
    if (v->kind == STAX_LV_LOAD || v->kind == STAX_LV_INDEX) {
        walk_ix(w, v->index);
    }
    if (v->kind == STAX_LV_LOAD) {
        walk_lval(w, v->mask);
    }
}

static int
walk_draft(const kdraft *d, walk_t *w)
{
    memset(w, 0, sizeof(*w));
    w->d = d;
    for (int i = 0; i < d->naccs; i++) {
        walk_lval(w, d->accs[i].value);
        walk_ix(w, d->accs[i].index);
    }
    for (int i = 0; i < d->nstores; i++) {
        walk_ix(w, d->stores[i].index);
        walk_lval(w, d->stores[i].value);
    }
    free(w->seen);
    w->seen = NULL;
    if (w->err) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* the draft with loop var v split into (v, v+1) = (x / F, x % F) */
static int
split_draft(lw_ctx *c, kdraft *d, int v, int64_t F, kdraft *out)
{
    int nv = d->nouter + d->ninner;
    const stax_ix *vars[2 * STAX_MAX_DIMS];
    int64_t ext[2 * STAX_MAX_DIMS];
    for (int j = 0; j < nv; j++) {
        if (j < v) {
            vars[j] = lw_ix_var(c, j);
            ext[j] = d->dimv[j];
        }
        else if (j == v) {
            vars[j] = lw_ix_bin(c, STAX_IX_ADD,
                                lw_ix_bin(c, STAX_IX_MUL, lw_ix_var(c, j), lw_ix_const(c, F)),
                                lw_ix_var(c, j + 1));
            ext[j] = d->dimv[j] / F;
            ext[j + 1] = F;
        }
        else {
            vars[j] = lw_ix_var(c, j + 1);
            ext[j + 1] = d->dimv[j];
        }
        if (vars[j] == NULL) {
            return -1;
        }
    }
    if (rewrite_draft(c, d, vars, nv, ext, nv + 1, out) < 0) {
        return -1;
    }
    memcpy(out->dimv, ext, sizeof(int64_t) * (size_t)(nv + 1));
    if (v < d->nouter) {
        out->nouter++;
    }
    else {
        out->ninner++;
    }
    return 0;
}

int
lw_split_loops(lw_ctx *c, kdraft *d)
{
    int nv = d->nouter + d->ninner;
    /* symbolic (dynamic) kernels are shared across sizes: a split that
     * holds for these extents need not hold for the others */
    if (nv == 0 || c->symbolic || c->be == NULL || c->be->device != NULL) {
        return 0;
    }
    /* an attention kernel's loop vars are fixed (batch, query row, key,
     * head dims: lower.h, ATTENTION KERNELS); splitting its flat batch var
     * by the head count left a kernel the back ends reject */
    if (lw_is_attention(d)) {
        return 0;
    }
    /* the arrays of a draft are inline: work on copies */
    kdraft *cur = malloc(sizeof(kdraft)), *nxt = malloc(sizeof(kdraft));
    int rc = -1;
    if (cur == NULL || nxt == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (rewrite_draft(c, d, NULL, 0, d->dimv, nv, cur) < 0) {
        goto done;
    }
    walk_t w;
    if (walk_draft(cur, &w) < 0) {
        goto done;
    }
    int tried_var[64];
    int64_t tried_f[64];
    int ntried = 0;
    for (int round = 0; round < 16 && w.ndivmod > 0; round++) {
        int v = -1;
        int64_t F = 0;
        for (int i = 0; i < w.ncand && v < 0; i++) {
            int dup = 0;
            for (int j = 0; j < ntried; j++) {
                dup |= tried_var[j] == w.cand_var[i] && tried_f[j] == w.cand_f[i];
            }
            if (!dup) {
                v = w.cand_var[i];
                F = w.cand_f[i];
            }
        }
        if (v < 0 || cur->nouter + cur->ninner + 1 > 2 * STAX_MAX_DIMS || ntried == 64) {
            break;
        }
        tried_var[ntried] = v;
        tried_f[ntried++] = F;
        walk_t w2;
        if (split_draft(c, cur, v, F, nxt) < 0 || walk_draft(nxt, &w2) < 0) {
            goto done;
        }
        if (w2.ndivmod < w.ndivmod) {
            kdraft *t = cur;
            cur = nxt;
            nxt = t;
            w = w2;
            /* var numbers moved: earlier failures may now succeed */
            ntried = 0;
        }
    }
    *d = *cur;
    rc = 0;
done:
    free(cur);
    free(nxt);
    return rc;
}

/* ------------------------------------------------- small reductions */
#define UNROLL_MAX_ELEMS 16

int
lw_unroll_small_reductions(lw_ctx *c, kdraft *d)
{
    /* a reduction loop over 4 elements (a 2x2 max pool) per output runs
     * scalar, its trip count unknown to LLVM; unrolled into the outer
     * loops' body it vectorizes across outputs. max/min only: the fold
     * order does not change their value, NaN propagating as the loop does */
    if (d->ninner == 0 || d->naccs == 0 || c->symbolic || c->be == NULL
        || c->be->device != NULL) {
        return 0;
    }
    int64_t n = 1;
    for (int i = d->nouter; i < d->nouter + d->ninner; i++) {
        n *= d->dimv[i];
        if (d->dimv[i] < 1 || n > UNROLL_MAX_ELEMS) {
            return 0;
        }
    }
    for (int i = 0; i < d->naccs; i++) {
        if ((d->accs[i].op != STAX_RED_MAX && d->accs[i].op != STAX_RED_MIN)
            || !lw_is_float(d->accs[i].dtype) || d->accs[i].value == NULL
            || d->accs[i].value->dtype != d->accs[i].dtype) {
            return 0;
        }
    }
    for (int i = 0; i < d->nstages; i++) {
        if (d->stages[i].kind == STAX_STAGE_INNER) {
            return 0;
        }
    }
    const stax_lval **acc = calloc((size_t)d->naccs, sizeof(*acc));
    if (acc == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int rc = -1;
    const stax_ix *vars[2 * STAX_MAX_DIMS];
    for (int i = 0; i < d->nouter; i++) {
        vars[i] = lw_ix_var(c, i);
    }
    /* accumulators in stage order: a later one may read an earlier one */
    for (int a = 0; a < d->naccs; a++) {
        const stax_lval *e = NULL;
        for (int64_t flat = 0; flat < n; flat++) {
            int64_t rest = flat;
            for (int i = d->nouter + d->ninner - 1; i >= d->nouter; i--) {
                vars[i] = lw_ix_const(c, rest % d->dimv[i]);
                rest /= d->dimv[i];
            }
            lw_rw rw = {0};
            rw.vars = vars;
            rw.nvars = d->nouter + d->ninner;
            rw.accs = acc;
            rw.naccs = d->naccs;
            const stax_lval *v = lw_rewrite(c, &rw, d->accs[a].value);
            lw_rw_done(&rw);
            if (v == NULL) {
                goto done;
            }
            e = e == NULL ? v
                : lw_prim(c, d->accs[a].op == STAX_RED_MAX ? STAX_PRIM_MAXNAN : STAX_PRIM_MINNAN,
                          d->accs[a].dtype, e, v, NULL);
            if (e == NULL) {
                goto done;
            }
        }
        acc[a] = e;
    }
    lw_rw rw = {0};
    rw.accs = acc;
    rw.naccs = d->naccs;
    for (int i = 0; i < d->nstores; i++) {
        d->stores[i].value = lw_rewrite(c, &rw, d->stores[i].value);
        if (d->stores[i].value == NULL) {
            lw_rw_done(&rw);
            goto done;
        }
    }
    lw_rw_done(&rw);
    int ns = 0;
    for (int i = 0; i < d->nstages; i++) {
        if (d->stages[i].kind != STAX_STAGE_REDUCE) {
            d->stages[ns++] = d->stages[i];
        }
    }
    d->nstages = ns;
    d->naccs = 0;
    d->ninner = 0;
    rc = 0;
done:
    free(acc);
    return rc;
}
