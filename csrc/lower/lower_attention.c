/* Attention lowering: softmax(score(q @ kT), -1) @ v as one kernel with
 * online softmax (lower.h, ATTENTION KERNELS), so the L x S scores and
 * probabilities never exist in memory.  program_build.c finds the pattern
 * in the graph (F.scaled_dot_product_attention's decomposition and the
 * hand-written formula are the same ops) and lowers the scores node to a
 * load of a phantom buffer; the pointwise chain between the scores and the
 * softmax (scale, masked_fill / where, + mask, ...) lowers as usual into a
 * body over that load, which becomes the kernel's score expression with the
 * load replaced by the dot product (acc0). */
#include "lower/lower_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int
lw_is_attention(const kdraft *k)
{
    return k != NULL && k->nstages > 0 && k->stages[0].kind == STAX_STAGE_ATTENTION;
}

/* cache sizes of this machine (bytes), with common defaults where sysconf
 * does not know */
static void
cache_sizes(int64_t *l1, int64_t *l2)
{
    static int64_t c1 = -1, c2 = -1;
    if (c1 < 0) {
        long a = -1, b = -1;
#ifdef _SC_LEVEL1_DCACHE_SIZE
        a = sysconf(_SC_LEVEL1_DCACHE_SIZE);
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
        b = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
        c1 = a >= 8192 ? a : 32768;
        c2 = b >= 65536 ? b : 1048576;
    }
    *l1 = c1;
    *l2 = c2;
}

/* Tile sizes from the caches and the head dims (seed Key Point 10: traffic
 * Theta(N^2 d^2 / M)): a tile of tile_k keys of K and V (tile_k * (E + Ev)
 * elements) stays in half of L2 while every row of the query block passes
 * over it; the block's row state (tile_q rows of Ev accumulators, m and l)
 * stays in half of L1.  Each query block reads K and V once,
 * so main memory sees L / tile_q passes over them. */
static void
choose_tiles(int64_t e, int64_t ev, int in_size, int acc_size, int64_t l_q,
             int *tile_q, int *tile_k)
{
    int64_t l1, l2;
    cache_sizes(&l1, &l2);
    int64_t tk = (l2 / 2) / ((e + ev > 0 ? e + ev : 1) * in_size);
    tk = tk > 256 ? 256 : tk < 128 ? 128 : tk;
    tk -= tk % 128;    /* the CPU micro-kernel steps over whole chunks */
    int64_t tq = (l1 / 2) / ((ev + 2) * acc_size);
    tq = tq > 64 ? 64 : tq < 1 ? 1 : tq;
    /* a short query block shrinks to the next power of two above the
     * length, not to the length itself: the tile is part of the kernel's
     * key, so a growing length (a generate loop under dynamic shapes)
     * reuses a handful of kernels instead of compiling one per length */
    while (l_q > 0 && tq / 2 >= l_q) {
        tq /= 2;
    }
    *tile_q = (int)tq;
    *tile_k = (int)tk;
}

typedef struct {
    int phantom;
    const stax_ix *ident;     /* the phantom's load index over x's vars */
    int nv;
    const stax_lval *dot;     /* what the load becomes */
    int bad;
} ph_ctx;

static int
phantom_hook(lw_rw *rw, const stax_lval *load, const stax_lval **out)
{
    ph_ctx *p = rw->hook_ctx;
    if (load->buf != p->phantom) {
        return 0;
    }
    if (load->mask != NULL || !lw_ix_equal(load->index, p->ident, p->nv)) {
        p->bad = 1;
    }
    *out = p->dot;
    return 1;
}

int
lw_lower_attention(lw_ctx *c, vbuf *q, vbuf *kt, vbuf *v, vbuf *x, int phantom,
                   int causal, int64_t causal_off, int zero_empty, vbuf *out)
{
    int nd = x->ndim, nbd = nd - 2;
    if (nd < 2 || out->ndim != nd || q->ndim < 2 || kt->ndim < 2 || v->ndim < 2) {
        PyErr_SetString(PyExc_RuntimeError, "attention lowering: operand ranks");
        return -1;
    }
    int64_t L = x->sizes[nd - 2], S = x->sizes[nd - 1];
    int64_t E = q->sizes[q->ndim - 1], Ev = v->sizes[v->ndim - 1];
    stax_dtype_t dt = out->dtype;
    stax_dtype_t adt = dt == STAX_FLOAT64 ? STAX_FLOAT64 : STAX_FLOAT32;
    int64_t nb = 1;
    for (int d = 0; d < nbd; d++) {
        nb *= x->sizes[d];
    }
    /* the batch dims' vars from the flat batch index x0 */
    const stax_ix *bv[STAX_MAX_DIMS + 2];
    const stax_ix *b0 = lw_ix_var(c, 0);
    int64_t inner = 1;
    for (int d = nbd - 1; d >= 0; d--) {
        const stax_ix *t = inner == 1 ? b0 : lw_ix_bin(c, STAX_IX_DIV, b0, lw_ix_const(c, inner));
        bv[d] = d == 0 ? t : lw_ix_bin(c, STAX_IX_MOD, t, lw_ix_const(c, x->sizes[d]));
        inner *= x->sizes[d];
    }
    const stax_ix *vi = lw_ix_var(c, 1), *vj = lw_ix_var(c, 2), *vc = lw_ix_var(c, 3),
                  *ve = lw_ix_var(c, 4);
    int64_t qs[STAX_MAX_DIMS], ks[STAX_MAX_DIMS], vs[STAX_MAX_DIMS], os[STAX_MAX_DIMS];
    const stax_ix *qv[STAX_MAX_DIMS], *kv[STAX_MAX_DIMS], *vv[STAX_MAX_DIMS],
        *ov[STAX_MAX_DIMS];
    for (int d = 0; d < nbd; d++) {
        qs[d] = ks[d] = vs[d] = os[d] = x->sizes[d];
        qv[d] = kv[d] = vv[d] = ov[d] = bv[d];
    }
    qs[nbd] = L, qs[nbd + 1] = E, qv[nbd] = vi, qv[nbd + 1] = vc;
    ks[nbd] = E, ks[nbd + 1] = S, kv[nbd] = vc, kv[nbd + 1] = vj;
    vs[nbd] = S, vs[nbd + 1] = Ev, vv[nbd] = vj, vv[nbd + 1] = ve;
    os[nbd] = L, os[nbd + 1] = Ev, ov[nbd] = vi, ov[nbd + 1] = ve;
    const stax_lval *ql = lw_cast(c, lw_bcast(c, q, nd, qs, qv), adt);
    const stax_lval *kl = lw_cast(c, lw_bcast(c, kt, nd, ks, kv), adt);
    const stax_lval *vl = lw_cast(c, lw_bcast(c, v, nd, vs, vv), adt);
    const stax_lval *dot = lw_prim(c, STAX_PRIM_MUL, adt, ql, kl, NULL);
    if (dot == NULL || vl == NULL) {
        return -1;
    }
    /* the score: x's body over (batch vars, i, j), the scores' load
     * replaced by acc0 in the scores' dtype (eager rounds q @ kT to it) */
    const stax_ix *xv[STAX_MAX_DIMS], *idv[STAX_MAX_DIMS];
    for (int d = 0; d < nbd; d++) {
        xv[d] = bv[d];
    }
    xv[nbd] = vi;
    xv[nbd + 1] = vj;
    lw_ident_vars(c, nd, idv);
    ph_ctx pc = {phantom, lw_contig_index(c, nd, c->pbufs[phantom].sizes, idv), nd,
                 lw_cast(c, lw_acc(c, 0, adt), c->pbufs[phantom].dtype), 0};
    lw_rw rw = {0};
    rw.vars = xv;
    rw.nvars = nd;
    rw.load_hook = phantom_hook;
    rw.hook_ctx = &pc;
    const stax_lval *score = pc.dot ? lw_rewrite(c, &rw, x->body) : NULL;
    lw_rw_done(&rw);
    if (score == NULL) {
        return -1;
    }
    if (pc.bad) {
        PyErr_SetString(PyExc_RuntimeError, "attention lowering: the scores are "
                        "read at another index than their own");
        return -1;
    }
    score = lw_cast(c, score, adt);
    int po = lw_new_pbuf(c, PB_TEMP, nd, out->sizes, dt);
    kdraft *k = po < 0 ? NULL : lw_new_kernel(c, "attention");
    if (k == NULL || score == NULL) {
        return -1;
    }
    k->nouter = 2;
    k->ninner = 3;
    k->dimv[0] = nb;
    k->dimv[1] = L;
    k->dimv[2] = S;
    k->dimv[3] = E;
    k->dimv[4] = Ev;
    k->naccs = 3;
    k->accs[0].op = STAX_RED_SUM;
    k->accs[0].dtype = adt;
    k->accs[0].value = dot;
    k->accs[1].op = STAX_RED_MAX;
    k->accs[1].dtype = adt;
    k->accs[1].value = score;
    if (causal) {
        k->accs[1].index = lw_ix_bin(c, STAX_IX_ADD, vi, lw_ix_const(c, causal_off));
    }
    k->accs[2].op = STAX_RED_SUM;
    k->accs[2].dtype = adt;
    k->accs[2].value = vl;
    k->nstores = 1;
    k->stores[0].buf = po;
    k->stores[0].index = lw_contig_index(c, nd, os, ov);
    k->stores[0].value = lw_cast(c, lw_prim(c, STAX_PRIM_DIV, adt, lw_acc(c, 2, adt),
                                            lw_acc(c, 1, adt), NULL), dt);
    if (k->stores[0].index == NULL || k->stores[0].value == NULL) {
        return -1;
    }
    int tq, tk;
    choose_tiles(E, Ev, lw_dtype_size(dt), lw_dtype_size(adt), L, &tq, &tk);
    k->nstages = 2;
    k->stages[0].kind = STAX_STAGE_ATTENTION;
    k->stages[0].first = 0;
    k->stages[0].n = 3;
    k->stages[0].tile_q = tq;
    k->stages[0].tile_k = tk;
    k->stages[0].zero_empty = zero_empty;
    k->stages[1].kind = STAX_STAGE_OUTER;
    k->stages[1].first = 0;
    k->stages[1].n = 1;
    out->pbuf = po;
    out->body = lw_contig_load(c, po);
    out->label = "attention";
    return out->body ? 1 : -1;
}
