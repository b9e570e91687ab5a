/* Fusion and scheduling over kernel drafts, then finalization.
 *
 * Pointwise producers are already inlined into their consumers during
 * lowering (function composition).  Here, kernels that share an iteration
 * space are merged greedily in schedule order: a later kernel C joins an
 * earlier kernel P when C's loop nest equals P's (same outer dims, and
 * either the same inner dims or none), every value C reads from P is read at
 * the index P stored it at (so it becomes P's accumulator expression, kept
 * in registers), and everything else C reads already exists at P's position
 * (the schedule stays acyclic).  Candidates are ranked by the bytes the
 * merge saves (buffers no longer written and read back, shared inputs read
 * once).  Stores nobody reads any more are dropped.  This turns softmax or
 * layer_norm written as separate reductions and pointwise ops into one
 * kernel, and fuses pointwise epilogues into reductions.
 *
 * Then: the buffer plan (allocate at first write, release after last
 * read), kernel buffers and size arguments, and compilation by the back
 * end. */
#include "lower/lower_internal.h"

#include <stdlib.h>
#include <string.h>

/* a buffer the program writes in place (an input, or a constant held by
 * reference), or one that several kernels write in turn (pbuf_t.ordered):
 * its stores are effects, never dead, and keep their place */
static int
written_in_place(const lw_ctx *c, int b)
{
    return c->pbufs[b].kind == PB_INPUT || c->pbufs[b].kind == PB_CONST
           || c->pbufs[b].ordered;
}

/* ------------------------------------------------------ load collection */
typedef struct {
    unsigned char *read;     /* per program buffer */
    int64_t bytes;
} reads_ctx;

static int
collect_hook(lw_rw *rw, const stax_lval *load, const stax_lval **out)
{
    reads_ctx *r = rw->hook_ctx;
    r->read[load->buf] = 1;
    (void)out;
    return 0;
}

static int
kernel_reads(lw_ctx *c, kdraft *k, unsigned char *read)
{
    reads_ctx r = {read, 0};
    lw_rw rw = {0};
    rw.load_hook = collect_hook;
    rw.hook_ctx = &r;
    for (int i = 0; i < k->naccs; i++) {
        if (lw_rewrite(c, &rw, k->accs[i].value) == NULL
            || (k->accs[i].index && lw_rewrite_ix(c, &rw, k->accs[i].index) == NULL)) {
            lw_rw_done(&rw);
            return -1;
        }
    }
    for (int i = 0; i < k->nstores; i++) {
        if (lw_rewrite(c, &rw, k->stores[i].value) == NULL
            || lw_rewrite_ix(c, &rw, k->stores[i].index) == NULL) {
            lw_rw_done(&rw);
            return -1;
        }
    }
    lw_rw_done(&rw);
    return 0;
}

static int
step_reads(lw_ctx *c, step_t *s, unsigned char *read);

static int
slotrefs_reads(PyObject *o, unsigned char *read, int n)
{
    if (PyTuple_Check(o) || PyList_Check(o)) {
        Py_ssize_t k = PySequence_Fast_GET_SIZE(o);
        for (Py_ssize_t i = 0; i < k; i++) {
            slotrefs_reads(PySequence_Fast_GET_ITEM(o, i), read, n);
        }
    }
    else if (PyDict_Check(o)) {
        PyObject *key, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(o, &pos, &key, &v)) {
            slotrefs_reads(v, read, n);
        }
    }
    else if (PyObject_TypeCheck(o, &PyCapsule_Type)) {
        /* unused */
    }
    else {
        extern int stax_lower_slotref_index(PyObject *o);
        int i = stax_lower_slotref_index(o);
        if (i >= 0 && i < n) {
            read[i] = 1;
        }
    }
    return 0;
}

static int
step_reads(lw_ctx *c, step_t *s, unsigned char *read)
{
    switch (s->kind) {
    case ST_KERNEL:
        return s->draft && s->draft->alive ? kernel_reads(c, s->draft, read) : 0;
    case ST_MATMUL:
        read[s->a] = read[s->b] = 1;
        return 0;
    case ST_FALLBACK:
        if (s->args) {
            slotrefs_reads(s->args, read, c->npbufs);
        }
        if (s->kwargs) {
            slotrefs_reads(s->kwargs, read, c->npbufs);
        }
        return 0;
    case ST_EXTRACT:
        read[s->src] = 1;
        return 0;
    case ST_SCATTER:
        read[s->a] = read[s->scat.index] = 1;
        if (s->scat.src >= 0) {
            read[s->scat.src] = 1;
        }
        return 0;
    }
    return 0;
}

static void
step_writes(step_t *s, unsigned char *w)
{
    if (s->kind == ST_KERNEL) {
        if (s->draft && s->draft->alive) {
            for (int i = 0; i < s->draft->nstores; i++) {
                w[s->draft->stores[i].buf] = 1;
            }
        }
    }
    else if (s->out >= 0) {
        w[s->out] = 1;
    }
}

/* ---------------------------------------------------------------- merge */
typedef struct {
    lw_ctx *c;
    kdraft *p;
    int fail;
    int nv;
    unsigned char *pwrites;
} merge_ctx;

static int
merge_hook(lw_rw *rw, const stax_lval *load, const stax_lval **out)
{
    merge_ctx *m = rw->hook_ctx;
    if (!m->pwrites[load->buf]) {
        return 0;
    }
    kdraft *p = m->p;
    for (int s = 0; s < p->nstages; s++) {
        stax_stage *st = &p->stages[s];
        for (int i = st->first; i < st->first + st->n; i++) {
            if (st->kind == STAX_STAGE_REDUCE) {
                break;
            }
            if (p->stores[i].buf == load->buf) {
                if (st->kind == STAX_STAGE_OUTER && load->mask == NULL
                    && p->stores[i].combine == STAX_COMBINE_NONE
                    && lw_ix_equal(load->index, p->stores[i].index, m->nv)) {
                    *out = lw_cast(m->c, p->stores[i].value, load->dtype);
                    return *out ? 1 : -1;
                }
                m->fail = 1;
                *out = load;
                return 1;
            }
        }
    }
    m->fail = 1;
    *out = load;
    return 1;
}

static int
dims_eq(const int64_t *a, const int64_t *b, int n)
{
    return memcmp(a, b, sizeof(int64_t) * (size_t)n) == 0;
}

/* how C's loop nest sits in P's: 0 no, 1 same (reduction C or pointwise at
 * the outer level), 2 pointwise C over outer+inner (an INNER stage) */
static int
nest_fit(kdraft *p, kdraft *c)
{
    /* an attention kernel has its own schedule (query blocks): nothing
     * joins it */
    if (lw_is_attention(p) || lw_is_attention(c)) {
        return 0;
    }
    /* a REDUCE stage of a kernel without inner dims folds once: it must not
     * move under inner loops */
    if (c->ninner == 0 && p->ninner > 0) {
        for (int s = 0; s < c->nstages; s++) {
            if (c->stages[s].kind == STAX_STAGE_REDUCE) {
                return 0;
            }
        }
    }
    if (c->nouter == p->nouter && dims_eq(c->dimv, p->dimv, p->nouter)) {
        if (c->ninner == 0) {
            return 1;
        }
        if (c->ninner == p->ninner
            && dims_eq(c->dimv + c->nouter, p->dimv + p->nouter, p->ninner)) {
            return 1;
        }
        return 0;
    }
    if (c->ninner == 0 && p->ninner > 0 && c->nouter == p->nouter + p->ninner
        && dims_eq(c->dimv, p->dimv, c->nouter)) {
        return 2;
    }
    return 0;
}

/* try to merge step ci into step pi; 1 merged, 0 not, -1 error */
static int
try_merge(lw_ctx *c, int pi, int ci, unsigned char *avail)
{
    kdraft *p = c->steps[pi].draft, *k = c->steps[ci].draft;
    int fit = nest_fit(p, k);
    if (!fit) {
        return 0;
    }
    /* writes into inputs and constants (functionalized mutation) keep
     * their place */
    for (int i = 0; i < p->nstores; i++) {
        if (written_in_place(c, p->stores[i].buf)) {
            return 0;
        }
    }
    for (int i = 0; i < k->nstores; i++) {
        if (written_in_place(c, k->stores[i].buf)) {
            return 0;
        }
    }
    if (p->naccs + k->naccs > LW_MAX_ACCS || p->nstores + k->nstores > LW_MAX_STORES
        || p->nstages + k->nstages > LW_MAX_STAGES) {
        return 0;
    }
    int n = c->npbufs;
    unsigned char *pw = calloc((size_t)n, 1), *kr = calloc((size_t)n, 1);
    if (pw == NULL || kr == NULL) {
        free(pw);
        free(kr);
        PyErr_NoMemory();
        return -1;
    }
    step_writes(&c->steps[pi], pw);
    if (kernel_reads(c, k, kr) < 0) {
        free(pw);
        free(kr);
        return -1;
    }
    int ok = 1, shares = 0;
    for (int b = 0; b < n && ok; b++) {
        if (kr[b] && !pw[b] && !avail[b]) {
            ok = 0;    /* produced between P and C */
        }
        shares |= kr[b];
    }
    (void)shares;
    if (ok) {
        /* the merged kernel's buffers, at most: P's and C's reads of
         * buffers P does not write, and both kernels' writes (a long
         * chain of pointwise steps, an unrolled recurrence's backward,
         * would otherwise grow one kernel past what code generation
         * takes) */
        unsigned char *pr = calloc((size_t)n, 1), *kw = calloc((size_t)n, 1);
        if (pr == NULL || kw == NULL || kernel_reads(c, p, pr) < 0) {
            free(pr);
            free(kw);
            free(pw);
            free(kr);
            if (!PyErr_Occurred()) {
                PyErr_NoMemory();
            }
            return -1;
        }
        step_writes(&c->steps[ci], kw);
        int nb = 0;
        for (int b = 0; b < n; b++) {
            nb += pw[b] || kw[b] || pr[b] || kr[b];
        }
        free(pr);
        free(kw);
        ok = nb <= LW_MAX_KBUFS;
    }
    if (!ok) {
        free(pw);
        free(kr);
        return 0;
    }
    merge_ctx m = {c, p, 0, p->nouter + p->ninner, pw};
    lw_rw rw = {0};
    rw.load_hook = merge_hook;
    rw.hook_ctx = &m;
    rw.acc_shift = p->naccs;
    stax_lacc accs[LW_MAX_ACCS];
    stax_lstore stores[LW_MAX_STORES];
    for (int i = 0; i < k->naccs && !m.fail; i++) {
        accs[i] = k->accs[i];
        accs[i].value = lw_rewrite(c, &rw, k->accs[i].value);
        if (accs[i].value == NULL) {
            goto error;
        }
    }
    for (int i = 0; i < k->nstores && !m.fail; i++) {
        stores[i] = k->stores[i];
        stores[i].value = lw_rewrite(c, &rw, k->stores[i].value);
        if (stores[i].value == NULL) {
            goto error;
        }
    }
    lw_rw_done(&rw);
    free(pw);
    free(kr);
    if (m.fail) {
        return 0;
    }
    int a0 = p->naccs, s0 = p->nstores;
    for (int i = 0; i < k->naccs; i++) {
        p->accs[p->naccs++] = accs[i];
    }
    for (int i = 0; i < k->nstores; i++) {
        p->stores[p->nstores++] = stores[i];
    }
    for (int s = 0; s < k->nstages; s++) {
        stax_stage st = k->stages[s];
        st.first += st.kind == STAX_STAGE_REDUCE ? a0 : s0;
        if (fit == 2 && st.kind == STAX_STAGE_OUTER) {
            st.kind = STAX_STAGE_INNER;
        }
        p->stages[p->nstages++] = st;
    }
    size_t l = strlen(p->label);
    if (l + strlen(k->label) + 2 < sizeof(p->label)) {
        snprintf(p->label + l, sizeof(p->label) - l, "_%s", k->label);
    }
    k->alive = 0;
    return 1;
error:
    lw_rw_done(&rw);
    free(pw);
    free(kr);
    return -1;
}

/* drop stores whose buffer nobody reads and that is not an output */
static int
drop_dead_stores(lw_ctx *c)
{
    int n = c->npbufs;
    unsigned char *read = calloc((size_t)n, 1);
    if (read == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int s = 0; s < c->nsteps; s++) {
        if (step_reads(c, &c->steps[s], read) < 0) {
            free(read);
            return -1;
        }
    }
    for (int s = 0; s < c->nsteps; s++) {
        kdraft *k = c->steps[s].draft;
        if (c->steps[s].kind != ST_KERNEL || !k->alive) {
            continue;
        }
        /* rebuild the store list and the stages without dead stores */
        int map[LW_MAX_STORES], ns = 0;
        stax_lstore keep[LW_MAX_STORES];
        for (int i = 0; i < k->nstores; i++) {
            int b = k->stores[i].buf;
            if (read[b] || c->pbufs[b].is_output || written_in_place(c, b)) {
                map[i] = ns;
                keep[ns++] = k->stores[i];
            }
            else {
                map[i] = -1;
            }
        }
        if (ns == k->nstores) {
            continue;
        }
        stax_stage st[LW_MAX_STAGES];
        int nst = 0;
        for (int j = 0; j < k->nstages; j++) {
            stax_stage g = k->stages[j];
            if (g.kind == STAX_STAGE_REDUCE || g.kind == STAX_STAGE_ATTENTION) {
                st[nst++] = g;
                continue;
            }
            int first = -1, cnt = 0;
            for (int i = g.first; i < g.first + g.n; i++) {
                if (map[i] >= 0) {
                    if (first < 0) {
                        first = map[i];
                    }
                    cnt++;
                }
            }
            if (cnt > 0) {
                g.first = first;
                g.n = cnt;
                st[nst++] = g;
            }
        }
        memcpy(k->stores, keep, sizeof(stax_lstore) * (size_t)ns);
        k->nstores = ns;
        memcpy(k->stages, st, sizeof(stax_stage) * (size_t)nst);
        k->nstages = nst;
        if (ns == 0) {
            k->alive = 0;
        }
    }
    free(read);
    return 0;
}

static int64_t
pbuf_bytes(pbuf_t *b)
{
    int64_t n = lw_dtype_size(b->dtype);
    for (int d = 0; d < b->ndim; d++) {
        n *= b->sizes[d];
    }
    return n;
}

/* greedy: for each producer P in schedule order, merge the later kernel
 * saving the most bytes, until none fits */
static int
fuse(lw_ctx *c)
{
    int n = c->npbufs;
    unsigned char *avail = calloc((size_t)n, 1);
    unsigned char *pw = calloc((size_t)n, 1), *cr = calloc((size_t)n, 1);
    if (avail == NULL || pw == NULL || cr == NULL) {
        free(avail);
        free(pw);
        free(cr);
        PyErr_NoMemory();
        return -1;
    }
    for (int b = 0; b < n; b++) {
        avail[b] = c->pbufs[b].kind == PB_INPUT || c->pbufs[b].kind == PB_CONST;
    }
    int rc = 0;
    for (int pi = 0; pi < c->nsteps; pi++) {
        step_t *ps = &c->steps[pi];
        if (ps->kind == ST_KERNEL && ps->draft->alive) {
            for (;;) {
                int best = -1;
                int64_t best_saved = -1;
                memset(pw, 0, (size_t)n);
                step_writes(ps, pw);
                for (int ci = pi + 1; ci < c->nsteps; ci++) {
                    step_t *cs = &c->steps[ci];
                    if (cs->kind != ST_KERNEL || !cs->draft->alive
                        || !nest_fit(ps->draft, cs->draft)) {
                        continue;
                    }
                    memset(cr, 0, (size_t)n);
                    if (kernel_reads(c, cs->draft, cr) < 0) {
                        rc = -1;
                        goto done;
                    }
                    int64_t saved = 0;
                    for (int b = 0; b < n; b++) {
                        if (cr[b]) {
                            saved += pbuf_bytes(&c->pbufs[b]) * (pw[b] ? 2 : 1);
                        }
                    }
                    if (saved > best_saved) {
                        /* only candidates that actually merge count */
                        best_saved = saved;
                        best = ci;
                    }
                }
                if (best < 0) {
                    break;
                }
                int m = try_merge(c, pi, best, avail);
                if (m < 0) {
                    rc = -1;
                    goto done;
                }
                if (m == 0) {
                    /* the top candidate does not fit: try the others in
                     * order once */
                    int any = 0;
                    for (int ci = pi + 1; ci < c->nsteps && !any; ci++) {
                        step_t *cs = &c->steps[ci];
                        if (ci == best || cs->kind != ST_KERNEL || !cs->draft->alive) {
                            continue;
                        }
                        m = try_merge(c, pi, ci, avail);
                        if (m < 0) {
                            rc = -1;
                            goto done;
                        }
                        any = m;
                    }
                    if (!any) {
                        break;
                    }
                }
            }
        }
        memset(pw, 0, (size_t)n);
        step_writes(ps, pw);
        for (int b = 0; b < n; b++) {
            avail[b] |= pw[b];
        }
    }
done:
    free(avail);
    free(pw);
    free(cr);
    return rc;
}

/* ------------------------------------------------------------ finalize */
/* innermost extents from which a static kernel's loop bound is a constant */
#define LW_CONST_EXTENT_MIN 256

static int
sym_of(lw_ctx *c, int64_t v)
{
    /* symbolic mode: one size argument per use, so that which arguments
     * coincide never depends on the sizes (4x4 vs 4x6) */
    for (int i = 0; i < c->nsyms && !c->symbolic; i++) {
        if (c->syms[i] == v && !c->sym_reserved[i]) {
            return i;
        }
    }
    if (c->nsyms == LW_MAX_SYMS) {
        return -1;
    }
    c->syms[c->nsyms] = v;
    return c->nsyms++;
}

/* ------------------------------------------------- symbolic (dynamic) */
/* A pointer set / numbering over the DAG of one kernel's expressions. */
typedef struct {
    const void **keys;
    long *ids;
    size_t cap, n;
} pset;

/* id of p (>= 0) if seen, else -1 after inserting it with a new id; -2 on
 * memory error */
static long
ps_visit(pset *m, const void *p)
{
    if (m->n * 2 >= m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 256;
        const void **k = calloc(cap, sizeof(void *));
        long *id = calloc(cap, sizeof(long));
        if (k == NULL || id == NULL) {
            free(k);
            free(id);
            return -2;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (m->keys[i] != NULL) {
                size_t j = ((uintptr_t)m->keys[i] >> 4) & (cap - 1);
                while (k[j] != NULL) {
                    j = (j + 1) & (cap - 1);
                }
                k[j] = m->keys[i];
                id[j] = m->ids[i];
            }
        }
        free(m->keys);
        free(m->ids);
        m->keys = k;
        m->ids = id;
        m->cap = cap;
    }
    size_t j = ((uintptr_t)p >> 4) & (m->cap - 1);
    while (m->keys[j] != NULL) {
        if (m->keys[j] == p) {
            return m->ids[j];
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->keys[j] = p;
    m->ids[j] = (long)m->n++;
    return -1;
}

static void
ps_free(pset *m)
{
    free(m->keys);
    free(m->ids);
    memset(m, 0, sizeof(*m));
}

typedef struct {
    lw_ctx *c;
    pset seen;
    stax_strbuf *key;    /* NULL: symbolize pass; else: serialize */
    int err;
} symctx;

static int
new_sym(lw_ctx *c, int64_t v)
{
    if (c->nsyms == LW_MAX_SYMS) {
        return -1;
    }
    c->syms[c->nsyms] = v;
    c->sym_reserved[c->nsyms] = 1;
    return c->nsyms++;
}

static void sym_lval(symctx *x, const stax_lval *v);

/* entry of sym_ix / sym_lval on node p: 1 when there is nothing more to do
 * (no node or an error: "_"; seen before: its back-reference "#id"), 0 when
 * p is new */
static int
sym_enter(symctx *x, const void *p)
{
    if (p == NULL || x->err) {
        if (x->key) {
            stax_strbuf_printf(x->key, "_");
        }
        return 1;
    }
    long id = ps_visit(&x->seen, p);
    if (id == -2) {
        x->err = 1;
        return 1;
    }
    if (id >= 0) {
        if (x->key) {
            stax_strbuf_printf(x->key, "#%ld", id);
        }
        return 1;
    }
    return 0;
}

/* Symbolize: every integer constant other than 0 and 1 of an index
 * expression becomes a size argument holding its value (strides, offsets,
 * div/mod operands, numel divisors).  0 and 1 stay constants (broadcast
 * stride 0, unit stride: what vectorization needs), as in sigma's stride
 * expressions.  Serialize: an exact text of the kernel's structure. */
static void
sym_ix(symctx *x, const stax_ix *cix)
{
    if (sym_enter(x, cix)) {
        return;
    }
    stax_ix *ix = (stax_ix *)cix;
    if (x->key == NULL) {
        if (ix->kind == STAX_IX_CONST && ix->v != 0 && ix->v != 1) {
            int sy = new_sym(x->c, ix->v);
            if (sy < 0) {
                x->err = 1;
                return;
            }
            ix->kind = STAX_IX_SYM;
            ix->v = sy;
            return;
        }
    }
    else {
        stax_strbuf_printf(x->key, "(i%d %lld", (int)ix->kind, (long long)ix->v);
    }
    if (ix->kind == STAX_IX_ADD || ix->kind == STAX_IX_MUL
        || ix->kind == STAX_IX_DIV || ix->kind == STAX_IX_MOD) {
        sym_ix(x, ix->a);
        sym_ix(x, ix->b);
    }
    if (ix->kind == STAX_IX_VALUE) {
        sym_lval(x, ix->val);
    }
    if (x->key) {
        stax_strbuf_printf(x->key, ")");
    }
}

static void
sym_lval(symctx *x, const stax_lval *cv)
{
    if (sym_enter(x, cv)) {
        return;
    }
    stax_lval *v = (stax_lval *)cv;
    if (x->key == NULL) {
        /* integer constants (cat / pad / gather bounds) likewise */
        if (v->kind == STAX_LV_CONST && v->dtype == STAX_INT64 && v->i != 0 && v->i != 1) {
            stax_ix *ix = stax_arena_alloc(x->c->arena, sizeof(stax_ix));
            int sy = ix ? new_sym(x->c, v->i) : -1;
            if (sy < 0) {
                x->err = 1;
                return;
            }
            ix->kind = STAX_IX_SYM;
            ix->v = sy;
            v->kind = STAX_LV_INDEX;
            v->index = ix;
            v->i = 0;
            v->f = 0;
            return;
        }
    }
    else {
        /* only the fields the kind uses (others may be stale) */
        stax_strbuf_printf(x->key, "(v%d d%d", (int)v->kind, (int)v->dtype);
        switch (v->kind) {
        case STAX_LV_LOAD:
            stax_strbuf_printf(x->key, " b%d", v->buf);
            break;
        case STAX_LV_CONST:
            stax_strbuf_printf(x->key, " f%a i%lld", v->f, (long long)v->i);
            break;
        case STAX_LV_ACC:
            stax_strbuf_printf(x->key, " a%d", v->acc);
            break;
        case STAX_LV_PRIM:
            stax_strbuf_printf(x->key, " p%d n%d", (int)v->prim, v->nargs);
            break;
        default:
            break;
        }
    }
    for (int i = 0; i < v->nargs && i < 3; i++) {
        sym_lval(x, v->args[i]);
    }
    if (v->kind == STAX_LV_LOAD || v->kind == STAX_LV_INDEX) {
        sym_ix(x, v->index);
    }
    if (v->kind == STAX_LV_LOAD) {
        sym_lval(x, v->mask);
    }
    if (x->key) {
        stax_strbuf_printf(x->key, ")");
    }
}

/* run the pass over every expression of k; 0 or -1 + exception */
static int
sym_kernel(lw_ctx *c, stax_kernel *k, stax_strbuf *key)
{
    symctx x = {c, {0}, key, 0};
    if (key) {
        stax_strbuf_printf(key, "K%d,%d|", k->nouter, k->ninner);
        for (int i = 0; i < k->nbufs; i++) {
            stax_strbuf_printf(key, "b%d,%d,%d|", (int)k->bufs[i].dtype,
                               k->bufs[i].is_output, k->bufs[i].noalias);
        }
        for (int i = 0; i < k->nstages; i++) {
            stax_strbuf_printf(key, "g%d,%d,%d,%d,%d,%d|", (int)k->stages[i].kind,
                               k->stages[i].first, k->stages[i].n,
                               k->stages[i].tile_q, k->stages[i].tile_k,
                               k->stages[i].zero_empty);
        }
    }
    for (int i = 0; i < k->nouter + k->ninner; i++) {
        sym_ix(&x, k->dims[i]);
    }
    for (int i = 0; i < k->naccs; i++) {
        if (key) {
            stax_strbuf_printf(key, "|a%d,%d:", (int)k->accs[i].op, (int)k->accs[i].dtype);
        }
        sym_lval(&x, k->accs[i].value);
        sym_ix(&x, k->accs[i].index);
    }
    for (int i = 0; i < k->nstores; i++) {
        if (key) {
            stax_strbuf_printf(key, "|s%d:", k->stores[i].buf);
            if (k->stores[i].combine != STAX_COMBINE_NONE) {
                stax_strbuf_printf(key, "c%d:", (int)k->stores[i].combine);
            }
        }
        sym_ix(&x, k->stores[i].index);
        sym_lval(&x, k->stores[i].value);
    }
    ps_free(&x.seen);
    if (x.err || (key && key->oom)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError,
                            "stax: too many size arguments in a dynamic kernel");
        }
        return -1;
    }
    return 0;
}

static void
hcap_free(PyObject *cap)
{
    void *h = PyCapsule_GetPointer(cap, "stax.kernel");
    stax_backend *be = PyCapsule_GetContext(cap);
    if (h != NULL && be != NULL) {
        be->free(be, h);
    }
}

/* compile s->k through a kernel cache keyed by its structure: a kernel of
 * the same structure reuses the machine code (symbolize: another size of
 * the class, its constants as size arguments; else an identical kernel of
 * the same program, e.g. the same layer repeated in a model). 0 or -1 */
static int
compile_keyed(lw_ctx *c, step_t *s, PyObject *cache, int symbolize)
{
    stax_strbuf key = {0};
    if ((symbolize && sym_kernel(c, s->k, NULL) < 0) || sym_kernel(c, s->k, &key) < 0) {
        free(key.p);
        return -1;
    }
    PyObject *kb = PyBytes_FromStringAndSize(key.p ? key.p : "", (Py_ssize_t)key.n);
    free(key.p);
    if (kb == NULL) {
        return -1;
    }
    PyObject *hit = PyDict_GetItemWithError(cache, kb);
    if (hit != NULL) {
        s->hcap = Py_NewRef(PyTuple_GET_ITEM(hit, 0));
        s->source = Py_XNewRef(PyTuple_GET_ITEM(hit, 1));
        s->handle = NULL;
        s->fn = NULL;
        void *h = PyCapsule_GetPointer(s->hcap, "stax.kernel");
        Py_DECREF(kb);
        if (h == NULL) {
            return -1;
        }
        s->fn = c->be->kernel_fn ? c->be->kernel_fn(c->be, h) : NULL;
        s->handle = h;
        return 0;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(kb);
        return -1;
    }
    void *h = lw_compile_kernel(c, s->k, &s->source);
    if (h == NULL) {
        Py_DECREF(kb);
        return -1;
    }
    PyObject *cap = PyCapsule_New(h, "stax.kernel", hcap_free);
    if (cap == NULL) {
        c->be->free(c->be, h);
        Py_DECREF(kb);
        return -1;
    }
    PyCapsule_SetContext(cap, c->be);
    s->hcap = cap;
    s->handle = h;
    s->fn = c->be->kernel_fn ? c->be->kernel_fn(c->be, h) : NULL;
    PyObject *ent = PyTuple_Pack(2, cap, s->source ? s->source : Py_None);
    int rc = ent ? PyDict_SetItem(cache, kb, ent) : -1;
    Py_XDECREF(ent);
    Py_DECREF(kb);
    return rc;
}

static int
finalize_kernel(lw_ctx *c, step_t *s)
{
    kdraft *d = s->draft;
    if (lw_unroll_small_reductions(c, d) < 0 || lw_split_loops(c, d) < 0) {
        return -1;
    }
    int n = c->npbufs;
    unsigned char *read = calloc((size_t)n, 1), *wr = calloc((size_t)n, 1);
    int *map = malloc(sizeof(int) * (size_t)n);
    stax_kernel *k = stax_arena_alloc(c->arena, sizeof(stax_kernel));
    if (read == NULL || wr == NULL || map == NULL || k == NULL) {
        free(read);
        free(wr);
        free(map);
        if (!PyErr_Occurred()) {
            PyErr_NoMemory();
        }
        return -1;
    }
    if (kernel_reads(c, d, read) < 0) {
        goto error;
    }
    step_writes(s, wr);
    int nb = 0;
    for (int b = 0; b < n; b++) {
        map[b] = -1;
        if (read[b] || wr[b]) {
            map[b] = nb++;
        }
    }
    k->nbufs = nb;
    k->bufs = stax_arena_alloc(c->arena, sizeof(stax_kbuf) * (size_t)(nb ? nb : 1));
    s->bufmap = stax_arena_alloc(c->arena, sizeof(int) * (size_t)(nb ? nb : 1));
    if (k->bufs == NULL || s->bufmap == NULL) {
        goto error;
    }
    for (int b = 0; b < n; b++) {
        if (map[b] >= 0) {
            stax_kbuf *kb = &k->bufs[map[b]];
            kb->id = b;
            kb->dtype = c->pbufs[b].dtype;
            kb->is_output = wr[b];
            kb->noalias = 1;
            s->bufmap[map[b]] = b;
            if (read[b]) {
                k->bytes_read += pbuf_bytes(&c->pbufs[b]);
            }
            if (wr[b]) {
                k->bytes_written += pbuf_bytes(&c->pbufs[b]);
            }
        }
    }
    k->nouter = d->nouter;
    k->ninner = d->ninner;
    k->work = 1;
    for (int i = 0; i < d->nouter + d->ninner; i++) {
        if (i > 0 && i == d->nouter + d->ninner - 1 && !c->symbolic
            && d->dimv[i] >= LW_CONST_EXTENT_MIN) {
            /* a static program's long innermost loop runs a constant
             * number of times: LLVM knows the trip count (4096 = 256
             * vectors of 16) and emits no vector epilogue or scalar
             * remainder -- a third of the code of a pointwise kernel to
             * optimize and compile (the 8-op chain at 4096^2: LLVM
             * 33 -> 20 ms).  Short loops keep a size argument: a
             * constant 16 is unrolled in full before the vectorizer sees
             * it, and im2col's masked vector loads became gathers.  Dim 0
             * stays a size argument: the runtime splits it into chunks. */
            if ((k->dims[i] = lw_ix_const(c, d->dimv[i])) == NULL) {
                goto error;
            }
            k->work *= d->dimv[i];
            continue;
        }
        int sy = sym_of(c, d->dimv[i]);
        if (sy < 0) {
            PyErr_SetString(PyExc_RuntimeError, "too many size arguments");
            goto error;
        }
        stax_ix *ix = stax_arena_alloc(c->arena, sizeof(stax_ix));
        if (ix == NULL) {
            goto error;
        }
        ix->kind = STAX_IX_SYM;
        ix->v = sy;
        k->dims[i] = ix;
        k->work *= d->dimv[i];
    }
    lw_rw rw = {0};
    rw.bufmap = map;
    rw.nbufmap = n;
    k->naccs = d->naccs;
    k->accs = stax_arena_alloc(c->arena, sizeof(stax_lacc) * (size_t)(d->naccs + 1));
    k->nstores = d->nstores;
    k->stores = stax_arena_alloc(c->arena, sizeof(stax_lstore) * (size_t)(d->nstores + 1));
    k->nstages = d->nstages;
    k->stages = stax_arena_alloc(c->arena, sizeof(stax_stage) * (size_t)(d->nstages + 1));
    if (k->accs == NULL || k->stores == NULL || k->stages == NULL) {
        lw_rw_done(&rw);
        goto error;
    }
    memcpy(k->stages, d->stages, sizeof(stax_stage) * (size_t)d->nstages);
    for (int i = 0; i < d->naccs; i++) {
        k->accs[i] = d->accs[i];
        k->accs[i].value = lw_rewrite(c, &rw, d->accs[i].value);
        if (d->accs[i].index) {
            k->accs[i].index = lw_rewrite_ix(c, &rw, d->accs[i].index);
        }
        if (k->accs[i].value == NULL) {
            lw_rw_done(&rw);
            goto error;
        }
    }
    for (int i = 0; i < d->nstores; i++) {
        k->stores[i].buf = map[d->stores[i].buf];
        k->stores[i].combine = d->stores[i].combine;
        k->stores[i].index = lw_rewrite_ix(c, &rw, d->stores[i].index);
        k->stores[i].value = lw_rewrite(c, &rw, d->stores[i].value);
        if (k->stores[i].value == NULL || k->stores[i].index == NULL) {
            lw_rw_done(&rw);
            goto error;
        }
    }
    lw_rw_done(&rw);
    snprintf(k->name, sizeof(k->name), "kernel%d_%s%s", c->kcount++,
             (d->nstores + d->naccs > 1) ? "fused_" : "", d->label);
    for (char *q = k->name; *q; q++) {
        if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z')
              || (*q >= '0' && *q <= '9') || *q == '_')) {
            *q = '_';
        }
    }
    int nb_in = 0;
    for (int b = 0; b < n; b++) {
        nb_in += wr[b] && c->pbufs[b].kind == PB_INPUT;
    }
    if (nb_in > 0) {
        s->bump = stax_arena_alloc(c->arena, sizeof(int) * (size_t)nb_in);
        if (s->bump == NULL) {
            goto error;
        }
        for (int b = 0; b < n; b++) {
            if (wr[b] && c->pbufs[b].kind == PB_INPUT) {
                s->bump[s->nbump++] = c->pbufs[b].input;
            }
        }
    }
    s->k = k;
    s->par_n = d->nouter > 0 ? d->dimv[0] : 1;
    if (lw_is_attention(d)) {
        /* the parallel unit is a block of tile_q query rows */
        int64_t tq = d->stages[0].tile_q;
        s->par_n = d->dimv[0] * ((d->dimv[1] + tq - 1) / tq);
    }
    s->work = k->work;
    free(read);
    free(wr);
    free(map);
    return 0;
error:
    free(read);
    free(wr);
    free(map);
    return -1;
}

/* inputs a value is differentiably derived from: integer and bool values
 * (comparisons, casts to int) cut the chain, as autograd does */
typedef struct {
    lw_ctx *c;
    kdraft *d;
    long budget;
} dep_ctx;

static uint64_t
lval_deps(dep_ctx *x, const stax_lval *v)
{
    if (v == NULL || !lw_is_float(v->dtype)) {
        return 0;
    }
    if (--x->budget < 0) {
        return ~0ULL;   /* too large to walk: conservative */
    }
    switch (v->kind) {
    case STAX_LV_LOAD:
        return x->c->pbufs[v->buf].deps;
    case STAX_LV_ACC:
        return v->acc < x->d->naccs ? lval_deps(x, x->d->accs[v->acc].value) : 0;
    case STAX_LV_CAST:
    case STAX_LV_PRIM: {
        uint64_t r = 0;
        for (int i = 0; i < v->nargs; i++) {
            r |= lval_deps(x, v->args[i]);
        }
        return r;
    }
    default:
        return 0;
    }
}

static int compile_kernels(lw_ctx *c);

int
lw_finalize(lw_ctx *c, const int *outputs, int noutputs)
{
    for (int i = 0; i < noutputs; i++) {
        c->pbufs[outputs[i]].is_output = 1;
    }
    if (fuse(c) < 0 || drop_dead_stores(c) < 0) {
        return -1;
    }
    /* compact: drop dead kernels */
    int j = 0;
    for (int i = 0; i < c->nsteps; i++) {
        step_t *s = &c->steps[i];
        if (s->kind == ST_KERNEL && !s->draft->alive) {
            continue;
        }
        c->steps[j++] = *s;
    }
    c->nsteps = j;
    for (int i = 0; i < c->nsteps; i++) {
        if (c->steps[i].kind == ST_KERNEL && finalize_kernel(c, &c->steps[i]) < 0) {
            return -1;
        }
    }
    /* buffer plan */
    int n = c->npbufs;
    unsigned char *rd = malloc((size_t)(n ? n : 1)), *wr = malloc((size_t)(n ? n : 1));
    if (rd == NULL || wr == NULL) {
        free(rd);
        free(wr);
        PyErr_NoMemory();
        return -1;
    }
    for (int b = 0; b < n; b++) {
        c->pbufs[b].first = c->pbufs[b].last = -1;
    }
    for (int i = 0; i < c->nsteps; i++) {
        step_t *s = &c->steps[i];
        memset(rd, 0, (size_t)n);
        memset(wr, 0, (size_t)n);
        if (s->kind == ST_KERNEL) {
            for (int q = 0; q < s->k->nbufs; q++) {
                (s->k->bufs[q].is_output ? wr : rd)[s->bufmap[q]] = 1;
            }
        }
        else {
            step_reads(c, s, rd);
            step_writes(s, wr);
        }
        for (int b = 0; b < n; b++) {
            if (wr[b] && c->pbufs[b].first < 0) {
                c->pbufs[b].first = i;
            }
            if (rd[b] || wr[b]) {
                c->pbufs[b].last = i;
            }
        }
    }
    /* input dependencies of every buffer (requires_grad of outputs): per
     * store, the buffers its value and the kernel's accumulators load */
    for (int b = 0; b < n; b++) {
        pbuf_t *p = &c->pbufs[b];
        p->deps = p->kind == PB_INPUT ? (1ULL << (p->input < 63 ? p->input : 63)) : 0;
    }
    for (int i = 0; i < c->nsteps; i++) {
        step_t *s = &c->steps[i];
        if (s->kind == ST_KERNEL) {
            kdraft *d = s->draft;
            for (int q = 0; q < d->nstores; q++) {
                dep_ctx x = {c, d, 200000};
                uint64_t dep = lval_deps(&x, d->stores[q].value);
                if (dep == ~0ULL) {
                    dep = 0;
                    for (int b = 0; b < n; b++) {
                        dep |= c->pbufs[b].kind == PB_INPUT ? c->pbufs[b].deps : 0;
                    }
                }
                if (c->pbufs[d->stores[q].buf].kind != PB_INPUT) {
                    c->pbufs[d->stores[q].buf].deps |= dep;
                }
            }
            PyErr_Clear();
            continue;
        }
        memset(rd, 0, (size_t)n);
        memset(wr, 0, (size_t)n);
        step_reads(c, s, rd);
        step_writes(s, wr);
        uint64_t dep = 0;
        for (int b = 0; b < n; b++) {
            if (rd[b]) {
                dep |= c->pbufs[b].deps;
            }
        }
        for (int b = 0; b < n; b++) {
            if (wr[b] && c->pbufs[b].kind != PB_INPUT) {
                c->pbufs[b].deps |= dep;
            }
        }
    }
    free(rd);
    free(wr);
    for (int i = 0; i < c->nsteps; i++) {
        step_t *s = &c->steps[i];
        int na = 0, nf = 0;
        for (int b = 0; b < n; b++) {
            pbuf_t *p = &c->pbufs[b];
            na += p->kind == PB_TEMP && p->first == i;
            nf += (p->kind == PB_TEMP || p->kind == PB_EXTERN) && !p->is_output
                  && p->last == i;
        }
        s->alloc = stax_arena_alloc(c->arena, sizeof(int) * (size_t)(na + 1));
        s->frees = stax_arena_alloc(c->arena, sizeof(int) * (size_t)(nf + 1));
        if (s->alloc == NULL || s->frees == NULL) {
            return -1;
        }
        for (int b = 0; b < n; b++) {
            pbuf_t *p = &c->pbufs[b];
            if (p->kind == PB_TEMP && p->first == i) {
                s->alloc[s->nalloc++] = b;
            }
            if ((p->kind == PB_TEMP || p->kind == PB_EXTERN) && !p->is_output && p->last == i) {
                s->frees[s->nfree++] = b;
            }
        }
    }
    /* the first run's big blocks fault on the other core meanwhile */
    lw_prefault_begin(c);
    int rc = compile_kernels(c);
    lw_prefault_end();
    return rc;
}

static int
compile_kernels(lw_ctx *c)
{
    /* compile; in static mode identical kernels (the same block of a model
     * repeated: GPT's layers) compile once: the first call of the 2-layer
     * GPT compiled 17 kernels, 6 of them copies (bench/models.py) */
    PyObject *same = NULL;
    if (!(c->symbolic && c->kcache != NULL) && c->be->device == NULL) {
        same = PyDict_New();
        if (same == NULL) {
            return -1;
        }
    }
    for (int i = 0; i < c->nsteps; i++) {
        step_t *s = &c->steps[i];
        if (s->kind != ST_KERNEL) {
            continue;
        }
        if (c->symbolic && c->kcache != NULL) {
            if (compile_keyed(c, s, c->kcache, 1) < 0) {
                return -1;
            }
            continue;
        }
        if (same != NULL) {
            if (compile_keyed(c, s, same, 0) < 0) {
                Py_DECREF(same);
                return -1;
            }
            continue;
        }
        s->handle = lw_compile_kernel(c, s->k, &s->source);
        if (s->handle == NULL) {
            return -1;
        }
        s->fn = c->be->kernel_fn ? c->be->kernel_fn(c->be, s->handle) : NULL;
    }
    Py_XDECREF(same);
    return 0;
}
