/* Renderer of the NVRTC back end: loop-level IR (lower.h's stax_kernel) ->
 * CUDA C. tinygrad's split: this file is the renderer; nvrtc_loader.c the
 * compiler (NVRTC) and runtime (driver API).
 *
 * GPU organization of a kernel (cf. Listing 1.2 of the seed):
 *  - ninner == 0 (pointwise): a grid-stride loop, one thread per outer
 *    point; the outer point's flat index is split into x0 .. x<n-1>.
 *  - ninner > 0 (reduction): one thread block per outer point (grid-stride
 *    over the outer points). A REDUCE stage: each thread folds a strided
 *    slice of the inner points into register accumulators, then a
 *    block-level tree reduction (warp shuffles, one partial per warp in
 *    shared memory, a last shuffle round) leaves every accumulator in every
 *    thread. An INNER stage: the block's threads stride over the inner
 *    points and store. An OUTER stage: thread 0 stores.
 * Loop extents and index expressions are rendered from the IR: sizes[] are
 * kernel arguments (a by-value struct), so one artifact serves every size
 * of its class, and x0 runs over [start, end) as in the CPU kernel ABI.
 * The source is self-contained: NVRTC needs no header. */
#include "backend_nvrtc/nvrtc_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ dtypes */

static const char *const dtype_names[STAX_NUM_DTYPES] = {
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16",
    "float32", "float64", "bfloat16",
};
/* in registers (float16 and bfloat16 compute in float) */
static const char *const reg_ctypes[STAX_NUM_DTYPES] = {
    "bool", "unsigned char", "signed char", "short", "int", "long long",
    "float", "float", "double", "float",
};
/* in memory (bool is one byte 0/1, float16 and bfloat16 their bits) */
static const char *const mem_ctypes[STAX_NUM_DTYPES] = {
    "unsigned char", "unsigned char", "signed char", "short", "int",
    "long long", "unsigned short", "float", "double", "unsigned short",
};
static const int dtype_sizes[STAX_NUM_DTYPES] = {1, 1, 1, 2, 4, 8, 2, 4, 8, 2};

/* the preamble's helpers of a half-like dtype (NULL for the others):
 * bits -> float, float -> bits (to nearest even), float -> float rounded */
static const char *
half_load(stax_dtype_t dt)
{
    return dt == STAX_FLOAT16 ? "stax_h2f" : dt == STAX_BFLOAT16 ? "stax_b2f" : NULL;
}

static const char *
half_store(stax_dtype_t dt)
{
    return dt == STAX_FLOAT16 ? "stax_f2h" : dt == STAX_BFLOAT16 ? "stax_f2b" : NULL;
}

static const char *
half_round(stax_dtype_t dt)
{
    return dt == STAX_FLOAT16 ? "stax_rh" : dt == STAX_BFLOAT16 ? "stax_rb" : NULL;
}

static int
dt_ok(stax_dtype_t dt)
{
    return (unsigned)dt < STAX_NUM_DTYPES;
}

const char *
stax_nvrtc_dtype_name(stax_dtype_t dt)
{
    return dt_ok(dt) ? dtype_names[dt] : "?";
}

int
stax_nvrtc_dtype_size(stax_dtype_t dt)
{
    return dt_ok(dt) ? dtype_sizes[dt] : 0;
}

int
stax_nvrtc_is_float(stax_dtype_t dt)
{
    return dt == STAX_FLOAT16 || dt == STAX_FLOAT32 || dt == STAX_FLOAT64
           || dt == STAX_BFLOAT16;
}

/* ------------------------------------------------------------ text */

typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} sbuf;

static void
put(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (b->oom) {
        return;
    }
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *nb = PyMem_Realloc(b->buf, cap);
        if (nb == NULL) {
            b->oom = 1;
            return;
        }
        b->buf = nb;
        b->cap = cap;
    }
}

/* a literal of value (f or i) in dtype dt */
static void
literal(sbuf *b, double f, int64_t i, stax_dtype_t dt)
{
    if (dt == STAX_BOOL) {
        put(b, "%s", i != 0 ? "true" : "false");
    }
    else if (stax_nvrtc_is_float(dt)) {
        int fl = dt != STAX_FLOAT64;
        if (isnan(f)) {
            put(b, fl ? "__int_as_float(0x7fc00000)"
                : "__longlong_as_double(0x7ff8000000000000LL)");
        }
        else if (isinf(f)) {
            put(b, fl ? "__int_as_float(%s)" : "__longlong_as_double(%s)",
                fl ? (f > 0 ? "0x7f800000" : "(int)0xff800000")
                : (f > 0 ? "0x7ff0000000000000LL"
                   : "(long long)0xfff0000000000000ULL"));
        }
        else {
            char num[40];
            snprintf(num, sizeof(num), fl ? "%.9g" : "%.17g", f);
            put(b, "%s%s%s", num, strpbrk(num, ".en") ? "" : ".0",
                fl ? "f" : "");
        }
    }
    else if (dt == STAX_INT64) {
        if (i == INT64_MIN) {
            put(b, "(-9223372036854775807LL - 1)");
        }
        else {
            put(b, "%lldLL", (long long)i);
        }
    }
    else {
        put(b, "((%s)%lld)", reg_ctypes[dt], (long long)i);
    }
}

/* ------------------------------------------------------------ emitter */

/* the values the analyses (row cache, vector loops) look through */
#define MEMO_CAP 512

/* Row cache of a multi-stage reduction (softmax, layer_norm, var): a load
 * that two row loops of one kernel both read (same buffer, same index,
 * a buffer the kernel does not write) is read from global memory once, by
 * the first of those stages, which keeps it in dynamic shared memory at
 * [rindex]; the later stages read it there. Each thread reads back only
 * what it wrote (every row loop gives a thread the same rindex values), and
 * the block reductions between stages are barriers anyway. The launch
 * decides: it passes rnumel * row_bytes of dynamic shared memory when that
 * fits (one row per block), and the kernel reads %dynamic_smem_size to
 * know; with none, every stage loads from global memory as before. */
#define RC_CAP 4
#define RC_SCAN_CAP 64
#define VEC_CAP 16

typedef struct {
    int buf;
    const stax_ix *index;
    stax_dtype_t dtype;          /* the load's (register) dtype */
    int first_stage, last_stage, nstages;
    int slot;                    /* -1: not cached */
    int64_t offset;              /* bytes per row element before it */
} rc_entry;

typedef struct {
    sbuf *b;
    const stax_kernel *k;
    int ntmp;
    const char *indent;
    /* the values already in a tmp: as many as the kernel has (a fixed
     * 512 silently dropped the rest, whose references then read "tmp-1":
     * searchsorted's unrolled binary search over 11 elements has ~900) */
    int nmemo, memo_cap;
    const stax_lval **memo_v;
    int *memo_t;
    int nrc;                     /* row cache candidates */
    rc_entry rc[RC_SCAN_CAP];
    int64_t rc_bytes;            /* cached bytes per row element, 0: none */
    int stage;                   /* the row loop being written, -1: none */
    /* 16-byte vector accesses (TENSORPLAY_NVRTC_VEC=1, see vec_analyze) */
    int nvec;
    int vec_buf[VEC_CAP];
    const stax_ix *vec_ix[VEC_CAP];
    int vec_store[VEC_CAP];
    int vec_j;                   /* element of the vector being written, -1 */
    int vec_stage;               /* stage whose loads vec_ld[] marks */
    unsigned char vec_ld[VEC_CAP];  /* load i is vector-read in vec_stage */
    int vec_auto;                /* vector loops only for rows >= VEC_MIN_ROW */
    int rr_v;                    /* register row path being written: vectors
                                  * per thread per cached row, 0: none */
} emitter;

static int
unsupported(const char *what, int v)
{
    if (strcmp(what, "primitive") == 0 && v >= 0 && v < STAX_PRIM_COUNT) {
        PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: primitive "
                     "'%s' not supported", stax_prim_name((stax_prim_t)v));
        return -1;
    }
    PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: %s %d not "
                 "supported", what, v);
    return -1;
}

static int
memo_get(emitter *m, const stax_lval *v)
{
    for (int i = 0; i < m->nmemo; i++) {
        if (m->memo_v[i] == v) {
            return m->memo_t[i];
        }
    }
    return -1;
}

static int
memo_put(emitter *m, const stax_lval *v, int t)
{
    if (m->nmemo == m->memo_cap) {
        int cap = m->memo_cap ? 2 * m->memo_cap : 256;
        const stax_lval **nv = PyMem_Realloc(m->memo_v, sizeof(*nv) * (size_t)cap);
        if (nv != NULL) {
            m->memo_v = nv;
        }
        int *nt = nv != NULL ? PyMem_Realloc(m->memo_t, sizeof(*nt) * (size_t)cap) : NULL;
        if (nt == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        m->memo_t = nt;
        m->memo_cap = cap;
    }
    m->memo_v[m->nmemo] = v;
    m->memo_t[m->nmemo] = t;
    m->nmemo++;
    return 0;
}

static void
emitter_free(emitter *m)
{
    if (m != NULL) {
        PyMem_Free(m->memo_v);
        PyMem_Free(m->memo_t);
        PyMem_Free(m);
    }
}

static void
var_name(sbuf *b, const stax_kernel *k, int64_t v)
{
    if (v < k->nouter) {
        put(b, "x%d", (int)v);
    }
    else {
        put(b, "r%d", (int)(v - k->nouter));
    }
}

static int emit_val(emitter *m, const stax_lval *v);

/* ------------------------------------------------------------ row cache */

/* bytes of a value in registers (what the row cache stores) */
static const int reg_sizes[STAX_NUM_DTYPES] = {1, 1, 1, 2, 4, 8, 4, 4, 8, 4};

static int
ix_equal(const stax_ix *a, const stax_ix *b)
{
    if (a == NULL || b == NULL) {
        return a == b;
    }
    if (a->kind != b->kind || a->kind == STAX_IX_VALUE) {
        return 0;
    }
    if (a->kind == STAX_IX_CONST || a->kind == STAX_IX_VAR
        || a->kind == STAX_IX_SYM) {
        return a->v == b->v;
    }
    return ix_equal(a->a, b->a) && ix_equal(a->b, b->b);
}

/* 1 if ix reads a value (a data-dependent index) */
static int
ix_has_value(const stax_ix *ix)
{
    if (ix == NULL) {
        return 0;
    }
    if (ix->kind == STAX_IX_VALUE) {
        return 1;
    }
    if (ix->kind >= STAX_IX_ADD && ix->kind <= STAX_IX_MOD) {
        return ix_has_value(ix->a) || ix_has_value(ix->b);
    }
    return 0;
}

/* 1 if ix depends on an inner (reduction) loop variable */
static int
ix_uses_inner(const stax_ix *ix, int nouter)
{
    if (ix == NULL) {
        return 0;
    }
    if (ix->kind == STAX_IX_VAR) {
        return ix->v >= nouter;
    }
    if (ix->kind >= STAX_IX_ADD && ix->kind <= STAX_IX_MOD) {
        return ix_uses_inner(ix->a, nouter) || ix_uses_inner(ix->b, nouter);
    }
    return 0;
}

/* the candidate of load v (same buffer, index and dtype), or NULL */
static rc_entry *
rc_match(emitter *m, const stax_lval *v)
{
    for (int i = 0; i < m->nrc; i++) {
        rc_entry *e = &m->rc[i];
        if (e->buf == v->buf && e->dtype == v->dtype
            && ix_equal(e->index, v->index)) {
            return e;
        }
    }
    return NULL;
}

/* the cache slot of load v in the row loop being written, or NULL */
static const rc_entry *
rc_find(emitter *m, const stax_lval *v)
{
    rc_entry *e;
    if (m->stage < 0 || m->rc_bytes == 0 || v->mask != NULL) {
        return NULL;
    }
    e = rc_match(m, v);
    return e != NULL && e->slot >= 0 ? e : NULL;
}

static void
rc_note(emitter *m, const stax_lval *v, int stage)
{
    const stax_kernel *k = m->k;
    rc_entry *e;
    if (v->mask != NULL || v->buf < 0 || v->buf >= k->nbufs
        || k->bufs[v->buf].is_output || !dt_ok(v->dtype)
        || ix_has_value(v->index) || !ix_uses_inner(v->index, k->nouter)) {
        return;
    }
    e = rc_match(m, v);
    if (e != NULL) {
        if (e->last_stage != stage) {
            e->last_stage = stage;
            e->nstages++;
        }
        return;
    }
    if (m->nrc == RC_SCAN_CAP) {
        return;
    }
    e = &m->rc[m->nrc++];
    e->buf = v->buf;
    e->index = v->index;
    e->dtype = v->dtype;
    e->first_stage = e->last_stage = stage;
    e->nstages = 1;
    e->slot = -1;
    e->offset = 0;
}

/* the loads of value tree v (each node once) */
static void
rc_scan(emitter *m, const stax_lval *v, int stage, const stax_lval **seen,
        int *nseen)
{
    if (v == NULL || v->kind == STAX_LV_CONST || v->kind == STAX_LV_INDEX
        || *nseen >= MEMO_CAP) {
        return;
    }
    for (int i = 0; i < *nseen; i++) {
        if (seen[i] == v) {
            return;
        }
    }
    seen[(*nseen)++] = v;
    if (v->kind == STAX_LV_LOAD) {
        rc_note(m, v, stage);
        return;
    }
    for (int i = 0; i < v->nargs; i++) {
        rc_scan(m, v->args[i], stage, seen, nseen);
    }
}

/* Choose the row cache of a reduction kernel: the loads that two or more
 * of its row loops read, at most RC_CAP of them, widest first (so each
 * slot is aligned); sets m->rc_bytes. */
static void
rc_analyze(emitter *m)
{
    const stax_kernel *k = m->k;
    const stax_lval **seen = NULL;
    int nseen, nslots = 0;
    m->nrc = 0;
    m->rc_bytes = 0;
    m->stage = -1;
    if (k->ninner == 0 || (k->nstages > 0
                           && k->stages[0].kind == STAX_STAGE_ATTENTION)) {
        return;
    }
    seen = PyMem_Malloc(sizeof(*seen) * MEMO_CAP);
    if (seen == NULL) {
        return;      /* no cache: a correct kernel all the same */
    }
    for (int s = 0; s < k->nstages; s++) {
        const stax_stage *st = &k->stages[s];
        nseen = 0;
        for (int i = st->first; i < st->first + st->n; i++) {
            if (st->kind == STAX_STAGE_REDUCE) {
                rc_scan(m, k->accs[i].value, s, seen, &nseen);
            }
            else if (st->kind == STAX_STAGE_INNER) {
                rc_scan(m, k->stores[i].value, s, seen, &nseen);
            }
        }
    }
    PyMem_Free(seen);
    for (int sz = 8; sz >= 1; sz /= 2) {
        for (int i = 0; i < m->nrc; i++) {
            rc_entry *e = &m->rc[i];
            if (e->nstages >= 2 && reg_sizes[e->dtype] == sz
                && nslots < RC_CAP) {
                e->slot = nslots++;
                e->offset = m->rc_bytes;
                m->rc_bytes += sz;
            }
        }
    }
}

int64_t
stax_nvrtc_row_cache_bytes(const stax_kernel *k)
{
    emitter *m = PyMem_Calloc(1, sizeof(*m));
    int64_t n;
    if (m == NULL) {
        return 0;
    }
    m->k = k;
    rc_analyze(m);
    n = m->rc_bytes;
    emitter_free(m);
    return n;
}

/* emit the value expressions an index needs (STAX_IX_VALUE) */
static int
prep_ix(emitter *m, const stax_ix *ix)
{
    if (ix == NULL) {
        return 0;
    }
    if (ix->kind == STAX_IX_VALUE) {
        return emit_val(m, ix->val);
    }
    if (ix->kind >= STAX_IX_ADD && ix->kind <= STAX_IX_MOD) {
        if (prep_ix(m, ix->a) < 0 || prep_ix(m, ix->b) < 0) {
            return -1;
        }
    }
    return 0;
}

static void
render_ix(emitter *m, const stax_ix *ix)
{
    sbuf *b = m->b;
    switch (ix->kind) {
    case STAX_IX_CONST:
        put(b, "%lldLL", (long long)ix->v);
        break;
    case STAX_IX_VAR:
        var_name(b, m->k, ix->v);
        break;
    case STAX_IX_SYM:
        put(b, "sizes.v[%d]", (int)ix->v);
        break;
    case STAX_IX_ADD:
        if (ix->a->kind == STAX_IX_CONST && ix->a->v == 0) {
            render_ix(m, ix->b);
        }
        else if (ix->b->kind == STAX_IX_CONST && ix->b->v == 0) {
            render_ix(m, ix->a);
        }
        else {
            put(b, "(");
            render_ix(m, ix->a);
            put(b, " + ");
            render_ix(m, ix->b);
            put(b, ")");
        }
        break;
    case STAX_IX_MUL:
        if (ix->a->kind == STAX_IX_CONST && ix->a->v == 1) {
            render_ix(m, ix->b);
        }
        else if (ix->b->kind == STAX_IX_CONST && ix->b->v == 1) {
            render_ix(m, ix->a);
        }
        else {
            render_ix(m, ix->a);
            put(b, "*");
            render_ix(m, ix->b);
        }
        break;
    case STAX_IX_DIV:
    case STAX_IX_MOD:
        put(b, "(");
        render_ix(m, ix->a);
        put(b, ix->kind == STAX_IX_DIV ? " / " : " %% ");
        render_ix(m, ix->b);
        put(b, ")");
        break;
    case STAX_IX_VALUE:
        put(b, "(int64_t)tmp%d", memo_get(m, ix->val));
        break;
    }
}

/* reference to an emitted value */
static void
ref(emitter *m, const stax_lval *v)
{
    if (v->kind == STAX_LV_CONST) {
        literal(m->b, v->f, v->i, v->dtype);
    }
    else {
        put(m->b, "tmp%d", memo_get(m, v));
    }
}

static int vec_find(emitter *m, int buf, const stax_ix *ix, int store);
static int vec_rc_ok(emitter *m, const rc_entry *rc, const stax_lval *v);

/* in a vector step: the vector (index into m->vec_*) that holds load v,
 * or -1 (a scalar load) */
static int
vec_load(emitter *m, const stax_lval *v)
{
    int vi;
    if (m->vec_j < 0 || v->mask != NULL) {
        return -1;
    }
    vi = vec_find(m, v->buf, v->index, 0);
    return vi >= 0 && m->vec_ld[vi] ? vi : -1;
}

static void
load_text(emitter *m, const stax_lval *v)
{
    stax_dtype_t dt = m->k->bufs[v->buf].dtype;
    int vi = vec_load(m, v);
    if (half_load(dt) != NULL) {
        put(m->b, "%s(", half_load(dt));
    }
    if (vi >= 0) {
        /* an element of the vector the iteration loaded */
        put(m->b, "stax_vl%d.v[%d", vi, m->vec_j);
    }
    else {
        put(m->b, "buf%d[", v->buf);
        render_ix(m, v->index);
    }
    put(m->b, half_load(dt) != NULL ? "])" : (dt == STAX_BOOL ? "] != 0" : "]"));
}

static const char *
math_name(stax_prim_t p)
{
    switch (p) {
    case STAX_PRIM_EXP: case STAX_PRIM_EXP2: case STAX_PRIM_EXPM1:
    case STAX_PRIM_LOG: case STAX_PRIM_LOG2: case STAX_PRIM_LOG10:
    case STAX_PRIM_LOG1P: case STAX_PRIM_SQRT: case STAX_PRIM_RSQRT:
    case STAX_PRIM_SIN: case STAX_PRIM_COS: case STAX_PRIM_TAN:
    case STAX_PRIM_TANH: case STAX_PRIM_SINH: case STAX_PRIM_COSH:
    case STAX_PRIM_ASIN: case STAX_PRIM_ACOS: case STAX_PRIM_ATAN:
    case STAX_PRIM_ERF: case STAX_PRIM_ERFC: case STAX_PRIM_ATAN2:
        return stax_prim_name(p);
    default:
        return NULL;
    }
}

/* How the renderer spells each loop-IR primitive. A primitive that is not
 * listed here is not rendered (NotImplementedError), and the vtable's
 * supports_op says so, so a new entry of STAX_PRIM_LIST never turns into
 * a call of a helper the preamble lacks. */
typedef enum {
    R_NONE = 0,     /* cannot render */
    R_INFIX,        /* a OP b */
    R_MATH,         /* CUDA math library: exp / expf, ... */
    R_SPECIAL,      /* its own case in emit_prim */
    R_HELPER        /* stax_<name>(...) from the preamble */
} prim_rendering;

static prim_rendering
prim_kind(int p)
{
    if (p < 0 || p >= STAX_PRIM_COUNT) {
        return R_NONE;
    }
    if (math_name((stax_prim_t)p) != NULL) {
        return R_MATH;
    }
    switch ((stax_prim_t)p) {
    case STAX_PRIM_ADD: case STAX_PRIM_SUB: case STAX_PRIM_MUL:
    case STAX_PRIM_DIV: case STAX_PRIM_EQ: case STAX_PRIM_NE:
    case STAX_PRIM_LT: case STAX_PRIM_LE: case STAX_PRIM_GT:
    case STAX_PRIM_GE: case STAX_PRIM_AND: case STAX_PRIM_OR:
    case STAX_PRIM_XOR: case STAX_PRIM_BITAND: case STAX_PRIM_BITOR:
    case STAX_PRIM_BITXOR:
        return R_INFIX;
    case STAX_PRIM_NEG: case STAX_PRIM_NOT: case STAX_PRIM_BITNOT:
    case STAX_PRIM_WHERE: case STAX_PRIM_SIGMOID: case STAX_PRIM_SHL:
    case STAX_PRIM_SHR: case STAX_PRIM_FMA:
        return R_SPECIAL;
    /* each has a definition in the preamble below */
    case STAX_PRIM_ABS: case STAX_PRIM_SIGN: case STAX_PRIM_FLOOR:
    case STAX_PRIM_CEIL: case STAX_PRIM_ROUND: case STAX_PRIM_TRUNC:
    case STAX_PRIM_POW: case STAX_PRIM_FMOD: case STAX_PRIM_REMAINDER:
    case STAX_PRIM_FLOORDIV: case STAX_PRIM_MAX: case STAX_PRIM_MIN:
    case STAX_PRIM_MAXNAN: case STAX_PRIM_MINNAN: case STAX_PRIM_ISNAN:
    case STAX_PRIM_ISINF: case STAX_PRIM_ISFINITE: case STAX_PRIM_PHILOX:
        return R_HELPER;
    default:
        return R_NONE;
    }
}

int
stax_nvrtc_renders_prim(int prim)
{
    return prim_kind(prim) != R_NONE;
}

/* 0, or -1 with NotImplementedError where v cannot be written: a primitive
 * the renderer lacks, a wrong operand count, a bitwise op of a float */
static int
check_prim(const stax_lval *v)
{
    if (!stax_nvrtc_renders_prim(v->prim)) {
        return unsupported("primitive", v->prim);
    }
    if (v->nargs != stax_prim_arity(v->prim)) {
        PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: "
                     "primitive '%s' with %d operands (it takes %d)",
                     stax_prim_name(v->prim), v->nargs,
                     stax_prim_arity(v->prim));
        return -1;
    }
    if (v->prim == STAX_PRIM_BITAND || v->prim == STAX_PRIM_BITOR
        || v->prim == STAX_PRIM_BITXOR || v->prim == STAX_PRIM_BITNOT) {
        /* C has no bitwise operators on floating types */
        for (int i = 0; i < v->nargs; i++) {
            if (stax_nvrtc_is_float(v->args[i]->dtype)) {
                PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: "
                             "primitive '%s' of a %s operand",
                             stax_prim_name(v->prim),
                             stax_nvrtc_dtype_name(v->args[i]->dtype));
                return -1;
            }
        }
    }
    return 0;
}

/* C's infix operator for p (with its spaces), or NULL */
static const char *
infix_op(stax_prim_t p)
{
    switch (p) {
    case STAX_PRIM_ADD: return " + ";
    case STAX_PRIM_SUB: return " - ";
    case STAX_PRIM_MUL: return " * ";
    case STAX_PRIM_DIV: return " / ";
    case STAX_PRIM_EQ: return " == ";
    case STAX_PRIM_NE: return " != ";
    case STAX_PRIM_LT: return " < ";
    case STAX_PRIM_LE: return " <= ";
    case STAX_PRIM_GT: return " > ";
    case STAX_PRIM_GE: return " >= ";
    case STAX_PRIM_AND: return " && ";
    case STAX_PRIM_OR: return " || ";
    case STAX_PRIM_XOR: return " != ";
    case STAX_PRIM_BITAND: return " & ";
    case STAX_PRIM_BITOR: return " | ";
    case STAX_PRIM_BITXOR: return " ^ ";
    default: return NULL;
    }
}

static void
emit_infix(emitter *m, const stax_lval *v, const char *op2)
{
    sbuf *b = m->b;
    /* integer ops promote to int in C: convert back to the dtype */
    int narrow = !stax_nvrtc_is_float(v->dtype) && v->dtype != STAX_BOOL
                 && dtype_sizes[v->dtype] < 4;
    if (v->prim == STAX_PRIM_XOR) {
        put(b, "(bool)");
    }
    if (narrow) {
        put(b, "(%s)(", reg_ctypes[v->dtype]);
    }
    ref(m, v->args[0]);
    put(b, "%s", op2);
    ref(m, v->args[1]);
    if (narrow) {
        put(b, ")");
    }
}

/* f(x) or f(x, y): mn the math function's double name, f its suffix */
static void
emit_call(emitter *m, const stax_lval *v, const char *mn, const char *f)
{
    sbuf *b = m->b;
    put(b, "%s%s(", mn, f);
    ref(m, v->args[0]);
    if (v->nargs == 2) {
        put(b, ", ");
        ref(m, v->args[1]);
    }
    put(b, ")");
}

static void
emit_shift(emitter *m, const stax_lval *v)
{
    sbuf *b = m->b;
    /* torch's values past the width (C's shifts are undefined there) */
    const char *ct = reg_ctypes[v->dtype];
    put(b, "((unsigned long long)(");
    ref(m, v->args[1]);
    put(b, ") >= 8 * sizeof(%s) ? ", ct);
    if (v->prim == STAX_PRIM_SHL) {
        put(b, "(%s)0", ct);
    }
    else {
        put(b, "(%s)((", ct);
        ref(m, v->args[0]);
        put(b, ") < 0 ? -1 : 0)");
    }
    put(b, " : (%s)(", ct);
    ref(m, v->args[0]);
    put(b, v->prim == STAX_PRIM_SHL ? " << " : " >> ");
    ref(m, v->args[1]);
    put(b, "))");
}

static void
emit_fma(emitter *m, const stax_lval *v, stax_dtype_t adt, const char *f)
{
    sbuf *b = m->b;
    int fl = stax_nvrtc_is_float(adt);
    if (fl) {
        put(b, "fma%s(", f);
    }
    else {
        put(b, v->dtype == STAX_BOOL ? "((" : "(%s)((", reg_ctypes[v->dtype]);
    }
    ref(m, v->args[0]);
    put(b, fl ? ", " : (v->dtype == STAX_BOOL ? " && " : " * "));
    ref(m, v->args[1]);
    put(b, fl ? ", " : (v->dtype == STAX_BOOL ? ") || " : ") + "));
    ref(m, v->args[2]);
    put(b, ")");
}

/* The primitives written in place (prim_kind's R_SPECIAL): 1 when v is one
 * of them and written, 0 when not */
static int
emit_special(emitter *m, const stax_lval *v, stax_dtype_t adt, const char *f)
{
    sbuf *b = m->b;
    switch (v->prim) {
    case STAX_PRIM_NEG:
        put(b, "(%s)(-", reg_ctypes[v->dtype]);
        ref(m, v->args[0]);
        put(b, ")");
        return 1;
    case STAX_PRIM_NOT:
        put(b, "!");
        ref(m, v->args[0]);
        return 1;
    case STAX_PRIM_BITNOT:
        put(b, v->dtype == STAX_BOOL ? "!" : "(%s)~", reg_ctypes[v->dtype]);
        ref(m, v->args[0]);
        return 1;
    case STAX_PRIM_SHL:
    case STAX_PRIM_SHR:
        emit_shift(m, v);
        return 1;
    case STAX_PRIM_WHERE:
        ref(m, v->args[0]);
        put(b, " ? ");
        ref(m, v->args[1]);
        put(b, " : ");
        ref(m, v->args[2]);
        return 1;
    case STAX_PRIM_FMA:
        emit_fma(m, v, adt, f);
        return 1;
    case STAX_PRIM_SIGMOID:
        put(b, "%s / (%s + exp%s(-", f[0] ? "1.0f" : "1.0",
            f[0] ? "1.0f" : "1.0", f);
        ref(m, v->args[0]);
        put(b, "))");
        return 1;
    default:
        return 0;
    }
}

static int
emit_prim(emitter *m, const stax_lval *v)
{
    sbuf *b = m->b;
    stax_dtype_t adt = v->nargs ? v->args[v->nargs - 1]->dtype : v->dtype;
    const char *f = adt == STAX_FLOAT64 ? "" : "f";
    const char *mn = math_name(v->prim);
    const char *rh = half_round(v->dtype);   /* round each op to half */
    const char *op2 = NULL;

    if (check_prim(v) < 0) {
        return -1;
    }
    if (rh) {
        put(b, "%s(", rh);
    }
    op2 = infix_op(v->prim);
    if (op2 != NULL) {
        emit_infix(m, v, op2);
    }
    else if (mn != NULL) {
        emit_call(m, v, mn, f);
    }
    else if (!emit_special(m, v, adt, f)) {
        if (prim_kind(v->prim) != R_HELPER) {
            return unsupported("primitive", v->prim);
        }
        /* overloaded helpers of the preamble: stax_<prim>(...) */
        put(b, "stax_%s(", stax_prim_name(v->prim));
        for (int i = 0; i < v->nargs; i++) {
            put(b, i ? ", " : "");
            ref(m, v->args[i]);
        }
        put(b, ")");
    }
    if (rh) {
        put(b, ")");
    }
    return 0;
}

static int
emit_val(emitter *m, const stax_lval *v)
{
    sbuf *b = m->b;
    const rc_entry *rc = NULL;
    int t;
    if (v->kind == STAX_LV_CONST || memo_get(m, v) >= 0) {
        return 0;
    }
    if (!dt_ok(v->dtype)) {
        return unsupported("dtype", v->dtype);
    }
    for (int i = 0; i < v->nargs && v->kind != STAX_LV_LOAD; i++) {
        if (emit_val(m, v->args[i]) < 0) {
            return -1;
        }
    }
    if (v->kind == STAX_LV_LOAD || v->kind == STAX_LV_INDEX) {
        if (prep_ix(m, v->index) < 0) {
            return -1;
        }
    }
    if (v->kind == STAX_LV_LOAD && v->mask != NULL
        && emit_val(m, v->mask) < 0) {
        return -1;
    }
    t = m->ntmp++;
    put(b, "%sconst %s tmp%d = ", m->indent, reg_ctypes[v->dtype], t);
    switch (v->kind) {
    case STAX_LV_LOAD:
        rc = rc_find(m, v);
        if (rc != NULL && vec_load(m, v) >= 0 && vec_rc_ok(m, rc, v)) {
            /* the vector step reads and fills the cache */
            load_text(m, v);
            rc = NULL;
        }
        else if (rc != NULL && rc->first_stage != m->stage) {
            /* an earlier row loop of this row cached it */
            put(b, "stax_rc_on ? stax_rc%d[rindex] : (", rc->slot);
            load_text(m, v);
            put(b, ")");
        }
        else if (v->mask != NULL) {
            /* masked: the index may be out of range where the mask is
             * false; ?: evaluates only the chosen arm */
            ref(m, v->mask);
            put(b, " ? (%s)(", reg_ctypes[v->dtype]);
            load_text(m, v);
            put(b, ") : (%s)0", reg_ctypes[v->dtype]);
        }
        else {
            load_text(m, v);
        }
        break;
    case STAX_LV_INDEX:
        put(b, "(%s)(", reg_ctypes[v->dtype]);
        render_ix(m, v->index);
        put(b, ")");
        break;
    case STAX_LV_ACC: {
        const stax_lacc *a = &m->k->accs[v->acc];
        if (a->op == STAX_RED_ARGMAX || a->op == STAX_RED_ARGMIN) {
            put(b, "(%s)acci%d", reg_ctypes[v->dtype], v->acc);
        }
        else {
            put(b, "(%s)acc%d", reg_ctypes[v->dtype], v->acc);
        }
        break;
    }
    case STAX_LV_CAST:
        if (v->dtype == STAX_BOOL) {
            ref(m, v->args[0]);
            put(b, " != 0");
        }
        else if (half_round(v->dtype) != NULL) {
            put(b, "%s((float)", half_round(v->dtype));
            ref(m, v->args[0]);
            put(b, ")");
        }
        else if (stax_nvrtc_is_float(v->args[0]->dtype)
                 && !stax_nvrtc_is_float(v->dtype)) {
            /* C's float -> small integer saturates to the small type;
             * torch's CUDA goes through int32 / int64 */
            const char *nan = v->args[0]->dtype == STAX_FLOAT64
                ? "-2147483647 - 1" : "0";
            put(b, "(%s)", reg_ctypes[v->dtype]);
            if (v->dtype == STAX_INT64 || v->dtype == STAX_UINT8) {
                put(b, "stax_f2i64((double)");
            }
            else {
                put(b, "stax_f2i32((double)");
            }
            ref(m, v->args[0]);
            if (v->dtype == STAX_INT64 || v->dtype == STAX_UINT8) {
                put(b, ")");
            }
            else {
                put(b, ", %s)", nan);
            }
        }
        else {
            put(b, "(%s)", reg_ctypes[v->dtype]);
            ref(m, v->args[0]);
        }
        break;
    case STAX_LV_PRIM:
        if (emit_prim(m, v) < 0) {
            return -1;
        }
        break;
    default:
        return unsupported("value kind", v->kind);
    }
    switch (v->kind) {
    case STAX_LV_LOAD:
        put(b, ";  // load buf%d\n", v->buf);
        if (rc != NULL && rc->first_stage == m->stage) {
            put(b, "%sif (stax_rc_on) { stax_rc%d[rindex] = tmp%d; }\n",
                m->indent, rc->slot, t);
        }
        break;
    case STAX_LV_PRIM: put(b, ";  // %s\n", stax_prim_name(v->prim)); break;
    case STAX_LV_CAST: put(b, ";  // cast\n"); break;
    case STAX_LV_ACC: put(b, ";  // acc%d\n", v->acc); break;
    default: put(b, ";\n"); break;
    }
    return memo_put(m, v, t);
}

static int
emit_store(emitter *m, const stax_lstore *s)
{
    stax_dtype_t dt = m->k->bufs[s->buf].dtype;
    if (emit_val(m, s->value) < 0 || prep_ix(m, s->index) < 0) {
        return -1;
    }
    if (s->combine != STAX_COMBINE_NONE) {
        static const char *const fn[] = {NULL, "add", "mul", "max", "min"};
        if (dt != STAX_FLOAT32 && dt != STAX_FLOAT64 && dt != STAX_INT32
            && dt != STAX_INT64) {
            return unsupported("combining store of dtype", (int)dt);
        }
        if ((unsigned)s->combine > STAX_COMBINE_MIN) {
            return unsupported("store combine", (int)s->combine);
        }
        put(m->b, "%sstax_atomic_%s(&buf%d[", m->indent, fn[s->combine], s->buf);
        render_ix(m, s->index);
        put(m->b, "], (%s)(", mem_ctypes[dt]);
        ref(m, s->value);
        put(m->b, "));\n");
        return 0;
    }
    if (m->vec_j >= 0 && vec_find(m, s->buf, s->index, 1) >= 0) {
        put(m->b, "%sstax_vs%d.v[%d] = ", m->indent,
            vec_find(m, s->buf, s->index, 1), m->vec_j);
    }
    else {
        put(m->b, "%sbuf%d[", m->indent, s->buf);
        render_ix(m, s->index);
        put(m->b, "] = ");
    }
    if (half_store(dt) != NULL) {
        put(m->b, "%s(", half_store(dt));
    }
    else {
        put(m->b, "(%s)(", mem_ctypes[dt]);
    }
    ref(m, s->value);
    put(m->b, ");\n");
    return 0;
}

/* Helpers every kernel may use: overloads for float, double, integers.
 * maxnan/minnan propagate NaN (PyTorch maximum/relu/clamp); max/min are
 * fmax/fmin (NaN ignored); round is half-to-even (torch.round); float16 is
 * converted with PTX cvt (no cuda_fp16.h needed), bfloat16 with integer bit
 * operations that round as the tensor room does (no cuda_bf16.h). */
static const char preamble[] =
"typedef long long int64_t;\n"
"#define STAX_D static __device__ __forceinline__\n"
"/* kernels with register rows: at most 64 registers a thread, so that\n"
" * two blocks of 512 threads share a multiprocessor and blocks of 1024\n"
" * launch */\n"
"#define STAX_LB __launch_bounds__(1024)\n"
"STAX_D float stax_h2f(unsigned short h)\n"
"{ float f; asm(\"{ cvt.f32.f16 %0, %1; }\" : \"=f\"(f) : \"h\"(h)); "
"return f; }\n"
"STAX_D unsigned short stax_f2h(float f)\n"
"{ unsigned short h; asm(\"{ cvt.rn.f16.f32 %0, %1; }\" : \"=h\"(h) : "
"\"f\"(f)); return h; }\n"
"STAX_D float stax_rh(float f) { return stax_h2f(stax_f2h(f)); }\n"
"STAX_D float stax_b2f(unsigned short h)\n"
"{ return __uint_as_float((unsigned)h << 16); }\n"
"STAX_D unsigned short stax_f2b(float f)   /* nearest even, NaN 0x7fc0 */\n"
"{ unsigned u = __float_as_uint(f); if ((u & 0x7fffffffu) > 0x7f800000u) "
"return 0x7fc0; return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }\n"
"STAX_D float stax_rb(float f) { return stax_b2f(stax_f2b(f)); }\n"
"/* float -> integer as torch's CUDA casts and the eager kernels\n"
" * (tensorplay/cuda/_kernels.py CAST_CONV): int64 saturates, NaN its\n"
" * minimum; int32 saturates, NaN `nan`; int16/int8 keep the low bits of\n"
" * the int32, uint8 the low byte of the int64 (C's (unsigned char)-1.5f\n"
" * would saturate to 0) */\n"
"STAX_D long long stax_f2i64(double v)\n"
"{ if (v != v || v <= -9223372036854775808.0) return -0x7fffffffffffffffLL - 1;\n"
"  if (v >= 9223372036854775808.0) return 0x7fffffffffffffffLL;\n"
"  return (long long)v; }\n"
"STAX_D int stax_f2i32(double v, int nan)\n"
"{ if (v != v) return nan;\n"
"  if (v <= -2147483648.0) return -2147483647 - 1;\n"
"  if (v >= 2147483647.0) return 2147483647;\n"
"  return (int)v; }\n"
"template <typename T> STAX_D bool stax_isnan(T a) { return a != a; }\n"
"template <typename T> STAX_D T stax_maxnan(T a, T b)\n"
"{ return a != a ? a : (b != b ? b : (a > b ? a : b)); }\n"
"template <typename T> STAX_D T stax_minnan(T a, T b)\n"
"{ return a != a ? a : (b != b ? b : (a < b ? a : b)); }\n"
"template <typename T> STAX_D T stax_max(T a, T b)\n"
"{ return a != a ? b : (b != b ? a : (a > b ? a : b)); }\n"
"template <typename T> STAX_D T stax_min(T a, T b)\n"
"{ return a != a ? b : (b != b ? a : (a < b ? a : b)); }\n"
"template <typename T> STAX_D T stax_sign(T a)\n"
"{ return (T)((a > (T)0) - (a < (T)0)); }   /* sign(nan) = 0, as torch */\n"
"template <typename T> STAX_D T stax_abs(T a)\n"
"{ return a < (T)0 ? (T)-a : a; }\n"
"STAX_D bool stax_abs(bool a) { return a; }\n"
"STAX_D float stax_abs(float a) { return fabsf(a); }\n"
"STAX_D double stax_abs(double a) { return fabs(a); }\n"
"template <typename T> STAX_D T stax_floor(T a) { return a; }\n"
"STAX_D float stax_floor(float a) { return floorf(a); }\n"
"STAX_D double stax_floor(double a) { return floor(a); }\n"
"template <typename T> STAX_D T stax_ceil(T a) { return a; }\n"
"STAX_D float stax_ceil(float a) { return ceilf(a); }\n"
"STAX_D double stax_ceil(double a) { return ceil(a); }\n"
"template <typename T> STAX_D T stax_trunc(T a) { return a; }\n"
"STAX_D float stax_trunc(float a) { return truncf(a); }\n"
"STAX_D double stax_trunc(double a) { return trunc(a); }\n"
"template <typename T> STAX_D T stax_round(T a) { return a; }\n"
"STAX_D float stax_round(float a) { return rintf(a); }\n"
"STAX_D double stax_round(double a) { return rint(a); }\n"
"template <typename T> STAX_D bool stax_isinf(T a) { return false; }\n"
"STAX_D bool stax_isinf(float a)\n"
"{ return fabsf(a) == __int_as_float(0x7f800000); }\n"
"STAX_D bool stax_isinf(double a)\n"
"{ return fabs(a) == __longlong_as_double(0x7ff0000000000000LL); }\n"
"template <typename T> STAX_D bool stax_isfinite(T a)\n"
"{ return !stax_isnan(a) && !stax_isinf(a); }\n"
"template <typename T> STAX_D T stax_fmod(T a, T b) { return a % b; }\n"
"STAX_D float stax_fmod(float a, float b) { return fmodf(a, b); }\n"
"STAX_D double stax_fmod(double a, double b) { return fmod(a, b); }\n"
"template <typename T> STAX_D T stax_remainder(T a, T b)\n"
"{ T r = stax_fmod(a, b);\n"
"  return (r != (T)0 && ((r < (T)0) != (b < (T)0))) ? (T)(r + b) : r; }\n"
"template <typename T> STAX_D T stax_floordiv(T a, T b)\n"
"{ T q = a / b;\n"
"  return (a % b != 0 && ((a < 0) != (b < 0))) ? (T)(q - 1) : q; }\n"
"template <typename T> STAX_D T stax_floordiv_fp(T a, T b)\n"
"{ if (b == (T)0) { return a / b; }\n"
"  T m = fmod(a, b), d = (a - m) / b;\n"
"  if (m != (T)0 && ((b < (T)0) != (m < (T)0))) { d -= (T)1; }\n"
"  if (d == (T)0) { return copysign((T)0, a / b); }\n"
"  T f = floor(d); return (d - f > (T)0.5) ? f + (T)1 : f; }\n"
"STAX_D float stax_floordiv(float a, float b) { return stax_floordiv_fp(a, b); }\n"
"STAX_D double stax_floordiv(double a, double b) { return stax_floordiv_fp(a, b); }\n"
"/* integer pow wraps (unsigned arithmetic: no signed overflow); a\n"
" * negative exponent gives 0 except for bases 1 and -1 (PyTorch) */\n"
"template <typename T> STAX_D T stax_pow(T a, T b)\n"
"{ if (b < (T)0) { return a == (T)1 ? (T)1 : a == (T)-1 ? ((b & 1) ? a : (T)1)\n"
"                                                        : (T)0; }\n"
"  unsigned long long r = 1, x = (unsigned long long)a;\n"
"  while (b > (T)0) { if (b & 1) { r *= x; } x *= x; b >>= 1; }\n"
"  return (T)r; }\n"
"STAX_D float stax_pow(float a, float b) { return powf(a, b); }\n"
"STAX_D double stax_pow(double a, double b) { return pow(a, b); }\n"
"/* philox(seed, offset, j): word j of the Philox4x32-10 stream of a draw\n"
" * that starts at word `offset` of generator `seed` (docs/rng.md), the\n"
" * same words as the CPU (csrc/tensor/philox.c): key = (lo32(seed),\n"
" * hi32(seed)), counter = (lo32(c), hi32(c), 0, 0) with c = offset/4 +\n"
" * j/4, ten rounds, then word j % 4 of the block. Plain C: the 32x32->64\n"
" * products become mul.wide.u32. */\n"
"#define STAX_PHILOX_M0 0xD2511F53u\n"
"#define STAX_PHILOX_M1 0xCD9E8D57u\n"
"#define STAX_PHILOX_W0 0x9E3779B9u\n"
"#define STAX_PHILOX_W1 0xBB67AE85u\n"
"#define STAX_PHILOX_ROUNDS 10\n"
"STAX_D long long stax_philox(long long seed, long long offset, long long j)\n"
"{\n"
"    const unsigned long long c = ((unsigned long long)offset >> 2)\n"
"                                 + ((unsigned long long)j >> 2);\n"
"    unsigned int c0 = (unsigned int)c, c1 = (unsigned int)(c >> 32);\n"
"    unsigned int c2 = 0u, c3 = 0u;\n"
"    unsigned int k0 = (unsigned int)seed;\n"
"    unsigned int k1 = (unsigned int)((unsigned long long)seed >> 32);\n"
"#pragma unroll\n"
"    for (int r = 0; r < STAX_PHILOX_ROUNDS; r++) {\n"
"        const unsigned long long p0 = (unsigned long long)STAX_PHILOX_M0 * c0;\n"
"        const unsigned long long p1 = (unsigned long long)STAX_PHILOX_M1 * c2;\n"
"        c0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0;\n"
"        c1 = (unsigned int)p1;\n"
"        c2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;\n"
"        c3 = (unsigned int)p0;\n"
"        k0 += STAX_PHILOX_W0;\n"
"        k1 += STAX_PHILOX_W1;\n"
"    }\n"
"    const long long w = j & 3;\n"
"    return (long long)(w == 0 ? c0 : (w == 1 ? c1 : (w == 2 ? c2 : c3)));\n"
"}\n"
"/* bytes of dynamic shared memory this launch has (the row cache) */\n"
"STAX_D unsigned stax_dyn_smem(void)\n"
"{ unsigned n; asm(\"mov.u32 %0, %%dynamic_smem_size;\" : \"=r\"(n)); return n; }\n"
"/* block-level tree reduction: warp shuffles, one partial per warp in\n"
" * shared memory, a last shuffle round in warp 0; every thread gets the\n"
" * result. blockDim.x is a multiple of 32. */\n"
"template <typename T, typename F>\n"
"static __device__ T stax_block_reduce(T v, F f, T ident, T *sh)\n"
"{\n"
"    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
"    const int nwarps = blockDim.x >> 5;\n"
"    for (int off = 16; off > 0; off >>= 1) {\n"
"        v = f(v, __shfl_down_sync(0xffffffffu, v, off));\n"
"    }\n"
"    if (lane == 0) {\n"
"        sh[warp] = v;\n"
"    }\n"
"    __syncthreads();\n"
"    if (warp == 0) {\n"
"        v = lane < nwarps ? sh[lane] : ident;\n"
"        for (int off = 16; off > 0; off >>= 1) {\n"
"            v = f(v, __shfl_down_sync(0xffffffffu, v, off));\n"
"        }\n"
"        if (lane == 0) {\n"
"            sh[32] = v;\n"
"        }\n"
"    }\n"
"    __syncthreads();\n"
"    v = sh[32];\n"
"    __syncthreads();\n"
"    return v;\n"
"}\n"
"/* arg-reduction: (value, index) pairs; NaN counts as extreme; ties and\n"
" * NaNs keep the first index; an index < 0 is empty */\n"
"template <bool MX, typename T>\n"
"STAX_D bool stax_arg_better(T v, long long i, T bv, long long bi)\n"
"{\n"
"    if (i < 0) { return false; }\n"
"    if (bi < 0) { return true; }\n"
"    if (bv != bv) { return v != v && i < bi; }\n"
"    if (v != v) { return true; }\n"
"    if (MX ? v > bv : v < bv) { return true; }\n"
"    return v == bv && i < bi;\n"
"}\n"
"template <bool MX, typename T>\n"
"static __device__ void stax_block_argreduce(T &v, long long &i, T *shv,\n"
"                                            long long *shi)\n"
"{\n"
"    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
"    const int nwarps = blockDim.x >> 5;\n"
"    for (int off = 16; off > 0; off >>= 1) {\n"
"        T ov = __shfl_down_sync(0xffffffffu, v, off);\n"
"        long long oi = __shfl_down_sync(0xffffffffu, i, off);\n"
"        if (stax_arg_better<MX>(ov, oi, v, i)) { v = ov; i = oi; }\n"
"    }\n"
"    if (lane == 0) { shv[warp] = v; shi[warp] = i; }\n"
"    __syncthreads();\n"
"    if (warp == 0) {\n"
"        v = lane < nwarps ? shv[lane] : v;\n"
"        i = lane < nwarps ? shi[lane] : -1;\n"
"        for (int off = 16; off > 0; off >>= 1) {\n"
"            T ov = __shfl_down_sync(0xffffffffu, v, off);\n"
"            long long oi = __shfl_down_sync(0xffffffffu, i, off);\n"
"            if (stax_arg_better<MX>(ov, oi, v, i)) { v = ov; i = oi; }\n"
"        }\n"
"        if (lane == 0) { shv[32] = v; shi[32] = i; }\n"
"    }\n"
"    __syncthreads();\n"
"    v = shv[32];\n"
"    i = shi[32];\n"
"    __syncthreads();\n"
"}\n"
"/* one warp per row (blockDim.x == 32, rows on threadIdx.y): a butterfly\n"
" * of shuffles, every lane gets the result; no shared memory, no barrier\n"
" * (rows of one block may run different numbers of iterations) */\n"
"template <typename T, typename F>\n"
"static __device__ T stax_warp_reduce(T v, F f)\n"
"{\n"
"    for (int off = 16; off > 0; off >>= 1) {\n"
"        v = f(v, __shfl_xor_sync(0xffffffffu, v, off));\n"
"    }\n"
"    return v;\n"
"}\n"
"template <bool MX, typename T>\n"
"static __device__ void stax_warp_argreduce(T &v, long long &i)\n"
"{\n"
"    for (int off = 16; off > 0; off >>= 1) {\n"
"        T ov = __shfl_xor_sync(0xffffffffu, v, off);\n"
"        long long oi = __shfl_xor_sync(0xffffffffu, i, off);\n"
"        if (stax_arg_better<MX>(ov, oi, v, i)) { v = ov; i = oi; }\n"
"    }\n"
"}\n"
"#define STAX_RED_OP(NAME, EXPR) struct NAME { template <typename T> \\\n"
"    __device__ T operator()(T a, T b) const { return EXPR; } };\n"
"STAX_RED_OP(stax_op_sum, a + b)\n"
"STAX_RED_OP(stax_op_prod, a * b)\n"
"STAX_RED_OP(stax_op_max, stax_maxnan(a, b))\n"
"STAX_RED_OP(stax_op_min, stax_minnan(a, b))\n"
"STAX_RED_OP(stax_op_any, a || b)\n"
"STAX_RED_OP(stax_op_all, a && b)\n";

/* combining stores (lower.h stax_combine_t; the scatter family): add,
 * and integer max/min, by the hardware's atomics (float64 atomicAdd:
 * sm_60+); mul and float max/min by a compare-and-swap loop over the
 * element's bits, combining as the CPU's ST_SCATTER step does (max/min
 * keep a NaN, wherever it came from; integer products wrap) */
static const char atomic_preamble[] =
"STAX_D void stax_atomic_add(float *p, float v) { atomicAdd(p, v); }\n"
"STAX_D void stax_atomic_add(double *p, double v) { atomicAdd(p, v); }\n"
"STAX_D void stax_atomic_add(int *p, int v) { atomicAdd(p, v); }\n"
"STAX_D void stax_atomic_add(long long *p, long long v)\n"
"{ atomicAdd((unsigned long long *)p, (unsigned long long)v); }\n"
"STAX_D unsigned stax_bits(float v) { return __float_as_uint(v); }\n"
"STAX_D unsigned long long stax_bits(double v)\n"
"{ return (unsigned long long)__double_as_longlong(v); }\n"
"STAX_D unsigned stax_bits(int v) { return (unsigned)v; }\n"
"STAX_D unsigned long long stax_bits(long long v) { return (unsigned long long)v; }\n"
"STAX_D float stax_unbits(unsigned u, float) { return __uint_as_float(u); }\n"
"STAX_D double stax_unbits(unsigned long long u, double)\n"
"{ return __longlong_as_double((long long)u); }\n"
"STAX_D int stax_unbits(unsigned u, int) { return (int)u; }\n"
"STAX_D long long stax_unbits(unsigned long long u, long long) { return (long long)u; }\n"
"STAX_D float stax_mulw(float a, float b) { return a * b; }\n"
"STAX_D double stax_mulw(double a, double b) { return a * b; }\n"
"STAX_D int stax_mulw(int a, int b) { return (int)((unsigned)a * (unsigned)b); }\n"
"STAX_D long long stax_mulw(long long a, long long b)\n"
"{ return (long long)((unsigned long long)a * (unsigned long long)b); }\n"
"struct stax_comb_mul { template <typename T> __device__ T operator()(T o, T v) const\n"
"    { return stax_mulw(o, v); } };\n"
"struct stax_comb_max { template <typename T> __device__ T operator()(T o, T v) const\n"
"    { return stax_maxnan(v, o); } };\n"
"struct stax_comb_min { template <typename T> __device__ T operator()(T o, T v) const\n"
"    { return stax_minnan(v, o); } };\n"
"template <typename T, typename F>\n"
"STAX_D void stax_atomic_cas(T *p, T v, F f)\n"
"{\n"
"    typedef decltype(stax_bits(v)) U;\n"
"    U *a = (U *)p;\n"
"    U old = *(volatile U *)a, seen;\n"
"    do {\n"
"        seen = old;\n"
"        const U want = stax_bits(f(stax_unbits(seen, v), v));\n"
"        if (want == seen) {\n"
"            return;\n"
"        }\n"
"        old = atomicCAS(a, seen, want);\n"
"    } while (old != seen);\n"
"}\n"
"template <typename T> STAX_D void stax_atomic_mul(T *p, T v)\n"
"{ stax_atomic_cas(p, v, stax_comb_mul()); }\n"
"template <typename T> STAX_D void stax_atomic_max(T *p, T v)\n"
"{ stax_atomic_cas(p, v, stax_comb_max()); }\n"
"template <typename T> STAX_D void stax_atomic_min(T *p, T v)\n"
"{ stax_atomic_cas(p, v, stax_comb_min()); }\n"
"STAX_D void stax_atomic_max(int *p, int v) { atomicMax(p, v); }\n"
"STAX_D void stax_atomic_max(long long *p, long long v) { atomicMax(p, v); }\n"
"STAX_D void stax_atomic_min(int *p, int v) { atomicMin(p, v); }\n"
"STAX_D void stax_atomic_min(long long *p, long long v) { atomicMin(p, v); }\n";

static int
has_combine(const stax_kernel *k)
{
    for (int i = 0; i < k->nstores; i++) {
        if (k->stores[i].combine != STAX_COMBINE_NONE) {
            return 1;
        }
    }
    return 0;
}

static const char *const red_ops[] = {
    "stax_op_sum", "stax_op_prod", "stax_op_max", "stax_op_min", NULL, NULL,
    "stax_op_any", "stax_op_all",
};

/* accumulator type: shuffles move 32/64-bit words */
static const char *
acc_ctype(stax_dtype_t dt)
{
    if (!stax_nvrtc_is_float(dt) && dtype_sizes[dt] < 4) {
        return "int";
    }
    return reg_ctypes[dt];
}

static void
red_identity(sbuf *b, const stax_lacc *a, stax_dtype_t dt)
{
    static const char *const lo[] = {"0", "0", "(-128)", "(-32768)",
                                     "(-2147483647 - 1)",
                                     "(-9223372036854775807LL - 1)"};
    static const char *const hi[] = {"1", "255", "127", "32767",
                                     "2147483647", "9223372036854775807LL"};
    switch (a->op) {
    case STAX_RED_PROD: case STAX_RED_ALL:
        literal(b, 1.0, 1, stax_nvrtc_is_float(dt) ? dt : STAX_INT64);
        break;
    case STAX_RED_MAX: case STAX_RED_ARGMAX:
        if (stax_nvrtc_is_float(dt)) {
            literal(b, -INFINITY, 0, dt);
        }
        else {
            put(b, "%s", lo[dt]);
        }
        break;
    case STAX_RED_MIN: case STAX_RED_ARGMIN:
        if (stax_nvrtc_is_float(dt)) {
            literal(b, INFINITY, 0, dt);
        }
        else {
            put(b, "%s", hi[dt]);
        }
        break;
    default:
        literal(b, 0.0, 0, stax_nvrtc_is_float(dt) ? dt : STAX_INT64);
        break;
    }
}

static int
is_arg(const stax_lacc *a)
{
    return a->op == STAX_RED_ARGMAX || a->op == STAX_RED_ARGMIN;
}

/* declare + reset the accumulators of a REDUCE stage */
static void
acc_init(emitter *m, const stax_stage *st)
{
    for (int i = st->first; i < st->first + st->n; i++) {
        const stax_lacc *a = &m->k->accs[i];
        if (is_arg(a)) {
            stax_dtype_t vd = a->value->dtype;
            put(m->b, "%s%s accv%d = ", m->indent, acc_ctype(vd), i);
            red_identity(m->b, a, vd);
            put(m->b, ";\n%slong long acci%d = -1;\n", m->indent, i);
        }
        else {
            put(m->b, "%s%s acc%d = ", m->indent, acc_ctype(a->dtype), i);
            red_identity(m->b, a, a->dtype);
            put(m->b, ";\n");
        }
    }
}

static int
acc_fold(emitter *m, const stax_stage *st)
{
    for (int i = st->first; i < st->first + st->n; i++) {
        const stax_lacc *a = &m->k->accs[i];
        if (emit_val(m, a->value) < 0) {
            return -1;
        }
        if (is_arg(a)) {
            if (prep_ix(m, a->index) < 0) {
                return -1;
            }
            put(m->b, "%s{\n%s    const long long ci = ", m->indent,
                m->indent);
            render_ix(m, a->index);
            put(m->b, ";\n%s    if (stax_arg_better<%s>((%s)", m->indent,
                a->op == STAX_RED_ARGMAX ? "true" : "false",
                acc_ctype(a->value->dtype));
            ref(m, a->value);
            put(m->b, ", ci, accv%d, acci%d)) {\n%s        accv%d = ",
                i, i, m->indent, i);
            ref(m, a->value);
            put(m->b, ";\n%s        acci%d = ci;\n%s    }\n%s}\n", m->indent,
                i, m->indent, m->indent);
        }
        else {
            const char *op = red_ops[a->op];
            if (op == NULL) {
                return unsupported("reduction", a->op);
            }
            put(m->b, "%sacc%d = %s()(acc%d, (%s)", m->indent, i, op, i,
                acc_ctype(a->dtype));
            ref(m, a->value);
            put(m->b, ");\n");
        }
    }
    return 0;
}

static void
acc_block_reduce(emitter *m, const stax_stage *st)
{
    for (int i = st->first; i < st->first + st->n; i++) {
        const stax_lacc *a = &m->k->accs[i];
        if (is_arg(a)) {
            const char *T = acc_ctype(a->value->dtype);
            put(m->b, "%sif (blockDim.y > 1) {\n%s    stax_warp_argreduce<%s>("
                "accv%d, acci%d);\n%s} else {\n", m->indent, m->indent,
                a->op == STAX_RED_ARGMAX ? "true" : "false", i, i, m->indent);
            put(m->b, "%s    stax_block_argreduce<%s>(accv%d, acci%d, "
                "(%s *)stax_shv, stax_shi);\n%s}\n", m->indent,
                a->op == STAX_RED_ARGMAX ? "true" : "false", i, i, T,
                m->indent);
            put(m->b, "%sif (acci%d < 0) {\n%s    acci%d = 0;\n%s}\n",
                m->indent, i, m->indent, i, m->indent);
        }
        else {
            const char *T = acc_ctype(a->dtype);
            put(m->b, "%sacc%d = blockDim.y > 1 ? stax_warp_reduce(acc%d, "
                "%s())\n%s    : stax_block_reduce(acc%d, %s(), (%s)",
                m->indent, i, i, red_ops[a->op], m->indent, i, red_ops[a->op],
                T);
            red_identity(m->b, a, a->dtype);
            put(m->b, ", (%s *)stax_shv);\n", T);
        }
    }
}

/* split a flat index into loop variables [first, last); var first gets
 * `base +` the leading quotient */
static void
emit_split(emitter *m, int first, int last, const char *flat,
           const char *base)
{
    for (int d = last - 1; d >= first; d--) {
        sbuf *b = m->b;
        put(b, "%sconst int64_t ", m->indent);
        var_name(b, m->k, d);
        put(b, " = ");
        if (d == first) {
            put(b, "%s%s", base ? base : "", base ? " + " : "");
            if (d == last - 1) {
                put(b, "%s;\n", flat);
            }
            else {
                put(b, "%s_q%d;\n", flat, d + 1);
            }
            continue;
        }
        if (d == last - 1) {
            put(b, "%s %% d%d;\n", flat, d);
            put(b, "%sconst int64_t %s_q%d = %s / d%d;\n", m->indent, flat, d,
                flat, d);
        }
        else {
            put(b, "%s_q%d %% d%d;\n", flat, d + 1, d);
            put(b, "%sconst int64_t %s_q%d = %s_q%d / d%d;\n", m->indent,
                flat, d, flat, d + 1, d);
        }
    }
}

static int
emit_stores(emitter *m, const stax_stage *st)
{
    for (int i = st->first; i < st->first + st->n; i++) {
        if (emit_store(m, &m->k->stores[i]) < 0) {
            return -1;
        }
    }
    return 0;
}

/* the memo is per scope: values of a closed loop body are not visible */
static void
scope_reset(emitter *m, int keep)
{
    m->nmemo = keep;
}

/* the statements of a pointwise kernel at one outer point (xindex) */
static int
point_body(emitter *m)
{
    const stax_kernel *k = m->k;
    emit_split(m, 0, k->nouter, "xindex", "start");
    for (int s = 0; s < k->nstages; s++) {
        const stax_stage *st = &k->stages[s];
        if (st->kind == STAX_STAGE_REDUCE) {
            acc_init(m, st);
            if (acc_fold(m, st) < 0) {
                return -1;
            }
            for (int i = st->first; i < st->first + st->n; i++) {
                if (is_arg(&k->accs[i])) {
                    put(m->b, "%sacci%d = acci%d < 0 ? 0 : acci%d;\n",
                        m->indent, i, i, i);
                }
            }
        }
        else if (emit_stores(m, st) < 0) {
            return -1;
        }
    }
    return 0;
}

/* the statements of row loop stage st at one inner point (rindex) */
static int
row_body(emitter *m, const stax_stage *st)
{
    const stax_kernel *k = m->k;
    emit_split(m, k->nouter, k->nouter + k->ninner, "rindex", NULL);
    if (st->kind == STAX_STAGE_REDUCE) {
        return acc_fold(m, st);
    }
    return emit_stores(m, st);
}

/* Loops whose trips are independent (the points of a pointwise kernel, the
 * inner points a thread folds or stores in a row loop) are unrolled by
 * STAX_UNROLL with no bound check while a whole group is in range, then a
 * plain remainder loop: the loads of a group have no dependence on each
 * other, so STAX_UNROLL of them are in flight per thread (Little's law:
 * one scalar load per thread keeps too few bytes in flight to reach the
 * H200's bandwidth). Each thread still visits its points in the same
 * order as a plain stride loop, so a fold's rounding does not change. */
#define STAX_UNROLL 4
/* the row loops' default factors, in TENSORPLAY_NVRTC_UNROLL's syntax */
#define STAX_ROW_UNROLL_DEFAULT "4"

/* The unroll factors of row loops: TENSORPLAY_NVRTC_UNROLL, a factor
 * (1 .. 16) or a descending list of them ("8,4": groups of 8 while whole
 * groups of 8 are in range, then of 4, then the remainder one by one;
 * every thread still visits its points in stride order); default
 * STAX_ROW_UNROLL_DEFAULT, and STAX_UNROLL where the text is junk. Read
 * once: a code-generation knob, which the compile cache's tag names
 * (stax_nvrtc_unroll_tag). Measured on an H200: 8 makes
 * 16384-long rows faster (softmax 0.63 -> 0.80 of copy) but leaves
 * 128-long rows at 32 threads without a whole group (1M x 128 Example
 * 1.1: 0.98 -> 0.75); "8,4" should keep both. */
#define STAX_UNROLL_MAX 4

static int
row_unrolls(const int **out)
{
    static int u[STAX_UNROLL_MAX], n = 0;
    if (n == 0) {
        const char *e = getenv("TENSORPLAY_NVRTC_UNROLL");
        char *end = NULL;
        if (e == NULL || *e == '\0') {
            e = STAX_ROW_UNROLL_DEFAULT;
        }
        while (*e && n < STAX_UNROLL_MAX) {
            long v = strtol(e, &end, 10);
            if (end == e || v < 1 || v > 16 || (n > 0 && v >= u[n - 1])) {
                break;
            }
            u[n++] = (int)v;
            e = *end == ',' ? end + 1 : end;
            if (*end != ',') {
                break;
            }
        }
        if (n == 0) {
            u[n++] = STAX_UNROLL;
        }
    }
    *out = u;
    return n;
}

const char *
stax_nvrtc_unroll_tag(void)
{
    static char tag[64];
    const int *u;
    int n = row_unrolls(&u);
    size_t len = 0;
    tag[0] = '\0';
    for (int i = 0; i < n && len < sizeof(tag) - 8; i++) {
        len += (size_t)snprintf(tag + len, sizeof(tag) - len, i ? ",%d" : "%d", u[i]);
    }
    return tag;
}

/* Code-generation knobs that are off by default, read at every rendering
 * (so a test can set them per test; the compile cache's tag names them):
 * TENSORPLAY_NVRTC_ONEPASS=1 folds softmax's max and sum of exp into one
 * row loop (online_pair). */
static int
knob_on(const char *name)
{
    const char *e = getenv(name);
    return e != NULL && e[0] == '1' && e[1] == '\0';
}

/* TENSORPLAY_NVRTC_VEC: "0" scalar row loops only; "1" vector loops for
 * every row length; anything else (the default) vector loops for rows of
 * at least VEC_MIN_ROW points. On an H200 the vector loops took softmax
 * 16384^2 from 0.65 to 0.77 of a device copy and layer_norm from 0.70 to
 * 0.84, but Example 1.1 at 1048576x128 (a warp per row of 128) from 0.97
 * to 0.88: short rows keep the scalar loops (not rendered at all when the
 * row length is a constant under the bound, else a per-launch check). */
#define VEC_MIN_ROW 2048

static int
vec_mode(void)
{
    const char *e = getenv("TENSORPLAY_NVRTC_VEC");
    if (e != NULL && e[0] == '0' && e[1] == '\0') {
        return 0;
    }
    return knob_on("TENSORPLAY_NVRTC_VEC") ? 1 : 2;
}

static int
lval_equal(const stax_lval *a, const stax_lval *b)
{
    if (a == b) {
        return 1;
    }
    if (a == NULL || b == NULL || a->kind != b->kind || a->dtype != b->dtype
        || a->nargs != b->nargs) {
        return 0;
    }
    switch (a->kind) {
    case STAX_LV_CONST:
        return a->i == b->i && (a->f == b->f || (isnan(a->f) && isnan(b->f)));
    case STAX_LV_LOAD:
        return a->buf == b->buf && ix_equal(a->index, b->index)
               && lval_equal(a->mask, b->mask);
    case STAX_LV_INDEX:
        return ix_equal(a->index, b->index);
    case STAX_LV_ACC:
        return a->acc == b->acc;
    case STAX_LV_PRIM:
        if (a->prim != b->prim) {
            return 0;
        }
        break;
    default:
        break;
    }
    for (int i = 0; i < a->nargs; i++) {
        if (!lval_equal(a->args[i], b->args[i])) {
            return 0;
        }
    }
    return 1;
}

/* Online softmax (TENSORPLAY_NVRTC_ONEPASS=1): REDUCE stage s folds
 * m = max(v) and REDUCE stage s + 1 folds sum(exp(v - m)) over the same v
 * (softmax, log_softmax): one row loop keeps a running (m, s), rescaling s
 * by exp(m_old - m_new) when the max grows, and the block combines pairs.
 * NaN/inf as the two loops: a NaN or +inf max makes the sum NaN (exp(NaN)
 * and exp(inf - inf) are folded in), an all -inf row (sum of exp(NaN)) is
 * NaN after the combine, and -inf elements add 0 under a finite max. */
static int
online_pair(const stax_kernel *k, int s)
{
    const stax_stage *a, *b;
    const stax_lacc *am, *as;
    const stax_lval *e, *d;
    if (s + 1 >= k->nstages || !knob_on("TENSORPLAY_NVRTC_ONEPASS")) {
        return 0;
    }
    a = &k->stages[s];
    b = &k->stages[s + 1];
    if (a->kind != STAX_STAGE_REDUCE || b->kind != STAX_STAGE_REDUCE
        || a->n != 1 || b->n != 1) {
        return 0;
    }
    am = &k->accs[a->first];
    as = &k->accs[b->first];
    if (am->op != STAX_RED_MAX || as->op != STAX_RED_SUM
        || !stax_nvrtc_is_float(am->dtype) || am->dtype != as->dtype
        || am->value == NULL || am->value->dtype != am->dtype
        || am->value->kind == STAX_LV_CONST) {
        return 0;
    }
    e = as->value;
    if (e == NULL || e->kind != STAX_LV_PRIM || e->prim != STAX_PRIM_EXP
        || e->nargs != 1 || e->dtype != am->dtype) {
        return 0;
    }
    d = e->args[0];
    if (d->kind != STAX_LV_PRIM || d->prim != STAX_PRIM_SUB || d->nargs != 2
        || d->dtype != am->dtype || d->args[1]->kind != STAX_LV_ACC
        || d->args[1]->acc != a->first || d->args[1]->dtype != am->dtype) {
        return 0;
    }
    return lval_equal(d->args[0], am->value);
}

/* one inner point of the fused pair (stage s: max into am, s + 1: sum) */
static int
row_body_online(emitter *m, const stax_stage *st0, const stax_stage *st1)
{
    const stax_kernel *k = m->k;
    const stax_lacc *am = &k->accs[st0->first], *as = &k->accs[st1->first];
    const stax_lval *v2 = as->value->args[0]->args[0];
    const char *T = acc_ctype(am->dtype);
    int im = st0->first, is = st1->first;
    emit_split(m, k->nouter, k->nouter + k->ninner, "rindex", NULL);
    if (emit_val(m, am->value) < 0) {
        return -1;
    }
    if (v2 != am->value && memo_put(m, v2, memo_get(m, am->value)) < 0) {
        return -1;
    }
    put(m->b, "%s{\n%s    const %s mn = stax_maxnan(acc%d, (%s)", m->indent,
        m->indent, T, im, T);
    ref(m, am->value);
    put(m->b, ");\n%s    if (mn != acc%d) { acc%d *= stax_oexp(acc%d - mn); }\n"
        "%s    acc%d = mn;\n%s}\n", m->indent, im, is, im, m->indent, im,
        m->indent);
    if (emit_val(m, as->value) < 0) {
        return -1;
    }
    put(m->b, "%sacc%d = stax_op_sum()(acc%d, acc%d == (%s)", m->indent, is,
        is, im, T);
    literal(m->b, -INFINITY, 0, am->dtype == STAX_FLOAT64 ? STAX_FLOAT64
            : STAX_FLOAT32);
    put(m->b, " ? (%s)0 : (%s)", T, T);
    ref(m, as->value);
    put(m->b, ");\n");
    return 0;
}

/* 16-byte vector accesses in row loops (TENSORPLAY_NVRTC_VEC=1): in a
 * kernel with one inner loop variable, a load or store whose index is
 * base(outer) + r0 (coefficient 1) is read or written four elements at a
 * time (float4, 8 bytes of four halves, two double2), each thread taking
 * four consecutive points per step, while every such access of the row is
 * aligned to four elements (checked per row: stax_vok); the rest of the
 * row, and rows that are not aligned, run the scalar loops. All row loops
 * of a kernel use the same mapping of points to threads, so the row cache
 * reads back what the same thread wrote. Off: kernels read in place
 * (in-place ops) and loads under a mask stay scalar. */
static const char vec_preamble[] =
"template <typename T> struct alignas(4 * sizeof(T)) stax_v4 { T v[4]; };\n"
"template <typename T> STAX_D bool stax_vaok(const T *p)\n"
"{ return ((unsigned long long)p & (4 * sizeof(T) - 1)) == 0; }\n";

#define IX_NONLINEAR INT64_MIN

/* the coefficient of loop variable var in ix when ix is affine in it with
 * a constant coefficient, else IX_NONLINEAR */
static int64_t
ix_coef(const stax_ix *ix, int var)
{
    int64_t a, b;
    if (ix == NULL) {
        return IX_NONLINEAR;
    }
    switch (ix->kind) {
    case STAX_IX_CONST: case STAX_IX_SYM:
        return 0;
    case STAX_IX_VAR:
        return ix->v == var ? 1 : 0;
    case STAX_IX_VALUE:
        return IX_NONLINEAR;
    default:
        break;
    }
    a = ix_coef(ix->a, var);
    b = ix_coef(ix->b, var);
    if (a == IX_NONLINEAR || b == IX_NONLINEAR) {
        return IX_NONLINEAR;
    }
    switch (ix->kind) {
    case STAX_IX_ADD:
        return a + b;
    case STAX_IX_MUL:
        if (a == 0 && b == 0) {
            return 0;
        }
        if (a == 0 && ix->a->kind == STAX_IX_CONST) {
            return ix->a->v * b;
        }
        if (b == 0 && ix->b->kind == STAX_IX_CONST) {
            return ix->b->v * a;
        }
        return IX_NONLINEAR;
    default:       /* DIV, MOD */
        return a == 0 && b == 0 ? 0 : IX_NONLINEAR;
    }
}

/* the row cache slot of load v is read and written four elements at a
 * time: the first slot (16-byte aligned at every multiple of 4) holding
 * 4-byte values as memory holds them (float32, int32) */
static int
vec_rc_ok(emitter *m, const rc_entry *rc, const stax_lval *v)
{
    stax_dtype_t dt = m->k->bufs[v->buf].dtype;
    return rc != NULL && rc->offset == 0 && v->dtype == dt
           && (dt == STAX_FLOAT32 || dt == STAX_INT32);
}

static int
vec_find(emitter *m, int buf, const stax_ix *ix, int store)
{
    for (int i = 0; i < m->nvec; i++) {
        if (m->vec_buf[i] == buf && m->vec_store[i] == store
            && ix_equal(m->vec_ix[i], ix)) {
            return i;
        }
    }
    return -1;
}

/* 1: access (buf, ix) added or already there; 0: full (vector it not) */
static int
vec_add(emitter *m, int buf, const stax_ix *ix, int store)
{
    if (vec_find(m, buf, ix, store) >= 0) {
        return 1;
    }
    if (m->nvec == VEC_CAP) {
        return 0;
    }
    m->vec_buf[m->nvec] = buf;
    m->vec_ix[m->nvec] = ix;
    m->vec_store[m->nvec] = store;
    m->nvec++;
    return 1;
}

/* the loads of v: candidates added (mark == 0) or marked as read in the
 * stage being written (mark == 1); *bad if the kernel reads an output */
static void
vec_scan(emitter *m, const stax_lval *v, int mark, const stax_lval **seen,
         int *nseen, int *bad)
{
    const stax_kernel *k = m->k;
    if (v == NULL || v->kind == STAX_LV_CONST || *nseen >= MEMO_CAP) {
        return;
    }
    for (int i = 0; i < *nseen; i++) {
        if (seen[i] == v) {
            return;
        }
    }
    seen[(*nseen)++] = v;
    if (v->kind == STAX_LV_LOAD) {
        if (v->buf < 0 || v->buf >= k->nbufs || k->bufs[v->buf].is_output) {
            *bad = 1;
        }
        else if (v->mask == NULL && !ix_has_value(v->index)
                 && ix_coef(v->index, k->nouter) == 1) {
            if (mark) {
                int i = vec_find(m, v->buf, v->index, 0);
                const rc_entry *rc = rc_find(m, v);
                if (i >= 0 && (rc == NULL || rc->first_stage == m->stage)) {
                    m->vec_ld[i] = 1;
                }
                else if (i >= 0 && vec_rc_ok(m, rc, v)) {
                    m->vec_ld[i] = 2;
                }
            }
            else {
                vec_add(m, v->buf, v->index, 0);
            }
        }
        vec_scan(m, v->mask, mark, seen, nseen, bad);
        return;
    }
    for (int i = 0; i < v->nargs; i++) {
        vec_scan(m, v->args[i], mark, seen, nseen, bad);
    }
}

static void
vec_stage_scan(emitter *m, const stax_stage *st, int mark, const stax_lval **seen,
               int *nseen, int *bad)
{
    const stax_kernel *k = m->k;
    for (int i = st->first; i < st->first + st->n; i++) {
        if (st->kind == STAX_STAGE_REDUCE) {
            vec_scan(m, k->accs[i].value, mark, seen, nseen, bad);
            if (k->accs[i].index != NULL && ix_has_value(k->accs[i].index)) {
                *bad = 1;
            }
        }
        else if (st->kind == STAX_STAGE_INNER) {
            const stax_lstore *sr = &k->stores[i];
            vec_scan(m, sr->value, mark, seen, nseen, bad);
            if (sr->combine != STAX_COMBINE_NONE) {
                *bad = 1;     /* read-modify-write: one element at a time */
            }
            if (!mark && !ix_has_value(sr->index)
                && ix_coef(sr->index, k->nouter) == 1) {
                if (vec_find(m, sr->buf, sr->index, 1) >= 0
                    || !vec_add(m, sr->buf, sr->index, 1)) {
                    *bad = 1;    /* two stores of one element */
                }
            }
        }
    }
}

/* 1 when the rows are known to be shorter than VEC_MIN_ROW at render
 * time: the row length itself is a size argument, but a vector access of
 * a row-major row steps its outer loop variables by constants, the
 * smallest of which (nonzero) is at least the row length where rows do
 * not overlap; under VEC_MIN_ROW for every vector access, the scalar loops
 * alone are rendered (a kernel exactly as with the knob off) */
static int
vec_rows_short(const emitter *m)
{
    int64_t least = INT64_MAX;
    for (int i = 0; i < m->nvec; i++) {
        for (int d = 0; d < m->k->nouter; d++) {
            int64_t c = ix_coef(m->vec_ix[i], d);
            if (c == IX_NONLINEAR) {
                return 0;
            }
            c = c < 0 ? -c : c;
            if (c > 0 && c < least) {
                least = c;
            }
        }
    }
    return least < VEC_MIN_ROW;
}

/* the kernel's vector accesses (m->nvec, 0: none, the scalar loops only) */
static void
vec_analyze(emitter *m)
{
    const stax_kernel *k = m->k;
    const stax_lval **seen = NULL;
    int nseen = 0, bad = 0;
    int mode = vec_mode();
    m->nvec = 0;
    m->vec_j = -1;
    m->vec_stage = -1;
    m->vec_auto = mode == 2;
    if (k->ninner != 1 || mode == 0
        || (k->nstages > 0 && k->stages[0].kind == STAX_STAGE_ATTENTION)) {
        return;
    }
    seen = PyMem_Malloc(sizeof(*seen) * MEMO_CAP);
    if (seen == NULL) {
        return;      /* scalar loops: a correct kernel all the same */
    }
    for (int s = 0; s < k->nstages && !bad; s++) {
        nseen = 0;
        vec_stage_scan(m, &k->stages[s], 0, seen, &nseen, &bad);
    }
    PyMem_Free(seen);
    if (bad || (mode == 2 && vec_rows_short(m))) {
        m->nvec = 0;
    }
}

/* the row cache slot that vector i reads or fills four at a time, or -1 */
static int
vec_rc_slot(emitter *m, int i)
{
    for (int j = 0; j < m->nrc; j++) {
        const rc_entry *e = &m->rc[j];
        if (m->rc_bytes > 0 && e->slot >= 0 && e->buf == m->vec_buf[i]
            && ix_equal(e->index, m->vec_ix[i]) && e->offset == 0
            && e->dtype == m->k->bufs[e->buf].dtype
            && (e->dtype == STAX_FLOAT32 || e->dtype == STAX_INT32)) {
            return e->slot;
        }
    }
    return -1;
}

/* one vector step at rw (a multiple of 4): the vector loads of the stage,
 * four points (each its own scope, rindex = rw + j), the vector stores */
static int
emit_vec_step(emitter *m, const stax_stage *st, int fuse, const char *ind)
{
    const stax_kernel *k = m->k;
    sbuf *b = m->b;
    char deeper[64];
    int keep = m->nmemo;
    snprintf(deeper, sizeof deeper, "%s    ", ind);
    put(b, "%sconst int64_t r0 = rw;\n", ind);
    m->indent = ind;
    for (int i = 0; i < m->nvec; i++) {
        if (!m->vec_store[i] && m->vec_ld[i]) {
            const char *mt = mem_ctypes[k->bufs[m->vec_buf[i]].dtype];
            int slot = vec_rc_slot(m, i);
            put(b, "%sconst stax_v4<%s> stax_vl%d = ", ind, mt, i);
            if (m->rr_v > 0 && m->vec_ld[i] == 2) {
                /* the register row the first row loop filled */
                put(b, "stax_rr%d[vu];\n", slot);
                continue;
            }
            if (m->vec_ld[i] == 2) {
                put(b, "stax_rc_on ? *(const stax_v4<%s> *)&stax_rc%d[rw] : ", mt, slot);
            }
            put(b, "*(const stax_v4<%s> *)&buf%d[", mt, m->vec_buf[i]);
            render_ix(m, m->vec_ix[i]);
            put(b, "];\n");
            if (m->rr_v > 0 && m->vec_ld[i] == 1 && slot >= 0) {
                put(b, "%sstax_rr%d[vu] = stax_vl%d;\n", ind, slot, i);
            }
            else if (m->vec_ld[i] == 1 && slot >= 0) {
                put(b, "%sif (stax_rc_on) { *(stax_v4<%s> *)&stax_rc%d[rw] = stax_vl%d; }\n",
                    ind, mt, slot, i);
            }
        }
    }
    for (int i = 0; i < m->nvec; i++) {
        if (m->vec_store[i] && st->kind == STAX_STAGE_INNER) {
            for (int j = st->first; j < st->first + st->n; j++) {
                if (k->stores[j].buf == m->vec_buf[i]
                    && ix_equal(k->stores[j].index, m->vec_ix[i])) {
                    put(b, "%sstax_v4<%s> stax_vs%d;\n", ind,
                        mem_ctypes[k->bufs[m->vec_buf[i]].dtype], i);
                    break;
                }
            }
        }
    }
    for (int j = 0; j < 4; j++) {
        put(b, "%s{\n%s    const int64_t rindex = rw + %d;\n", ind, ind, j);
        m->indent = deeper;
        m->vec_j = j;
        if ((fuse ? row_body_online(m, st, st + 1) : row_body(m, st)) < 0) {
            return -1;
        }
        m->vec_j = -1;
        scope_reset(m, keep);
        put(b, "%s}\n", ind);
    }
    m->indent = ind;
    for (int i = 0; i < m->nvec; i++) {
        if (m->vec_store[i] && st->kind == STAX_STAGE_INNER) {
            for (int j = st->first; j < st->first + st->n; j++) {
                if (k->stores[j].buf == m->vec_buf[i]
                    && ix_equal(k->stores[j].index, m->vec_ix[i])) {
                    put(b, "%s*(stax_v4<%s> *)&buf%d[", ind,
                        mem_ctypes[k->bufs[m->vec_buf[i]].dtype], m->vec_buf[i]);
                    render_ix(m, m->vec_ix[i]);
                    put(b, "] = stax_vs%d;\n", i);
                    break;
                }
            }
        }
    }
    return 0;
}

/* mark the vector loads of row stage st (and of the next one when fused)
 * in m->vec_ld, afresh, for the vector or register row loop emitted next */
static int
vec_mark_stage_loads(emitter *m, const stax_stage *st, int fuse)
{
    const stax_lval **seen = PyMem_Malloc(sizeof(*seen) * MEMO_CAP);
    int nseen = 0, bad = 0;
    if (seen == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(m->vec_ld, 0, sizeof(m->vec_ld));
    vec_stage_scan(m, st, 1, seen, &nseen, &bad);
    if (fuse) {
        vec_stage_scan(m, st + 1, 1, seen, &nseen, &bad);
    }
    PyMem_Free(seen);
    return 0;
}

/* the vector loops of row stage s (before its scalar loops, which then
 * start past the last whole vector of the row) */
static int
emit_vec_loops(emitter *m, int s, int fuse, const int *ru, int nru)
{
    const stax_kernel *k = m->k;
    const stax_stage *st = &k->stages[s];
    sbuf *b = m->b;
    if (vec_mark_stage_loads(m, st, fuse) < 0) {
        return -1;
    }
    put(b, "        if (stax_vok) {\n"
        "            int64_t rv%d = 4 * (int64_t)threadIdx.x;\n", s);
    for (int g = 0; g < nru; g++) {
        put(b, "            for (; rv%d + %d * (int64_t)blockDim.x + 3 < rnumel; "
            "rv%d += %d * (int64_t)blockDim.x) {\n"
            "#pragma unroll\n"
            "                for (int vu = 0; vu < %d; vu++) {\n"
            "                    const int64_t rw = rv%d + vu * 4 * (int64_t)blockDim.x;\n",
            s, 4 * (ru[g] - 1), s, 4 * ru[g], ru[g], s);
        if (emit_vec_step(m, st, fuse, "                    ") < 0) {
            return -1;
        }
        put(b, "                }\n            }\n");
    }
    put(b, "            for (; rv%d + 3 < rnumel; rv%d += 4 * (int64_t)blockDim.x) {\n"
        "                const int64_t rw = rv%d;\n", s, s, s);
    if (emit_vec_step(m, st, fuse, "                ") < 0) {
        return -1;
    }
    put(b, "            }\n"
        "            rbase%d = (rnumel & ~(int64_t)3) + threadIdx.x;\n"
        "        }\n", s);
    return 0;
}

/* Register rows: a reduction kernel whose row loops share a row (the row
 * cache's float32/int32 vector loads) and whose row length R is known at
 * render time gets, besides its loops, one path per block size BX with R
 * = 4 * V * BX: each thread loads its V vectors of the row once, in the
 * first row loop, all at once (V 16-byte loads in flight per thread), and
 * every later row loop reads them back from registers (fully unrolled, so
 * the array stays in registers): one pass over global memory, no shared
 * memory traffic and no shared memory limit on the blocks per
 * multiprocessor. Taken when blockDim.x == BX and the row is aligned
 * (stax_vok); the launch's block-size search (backend_nvrtc_init.c) times
 * these sizes against the loops. At most RR_MAX_FLOATS values of cached
 * rows per thread. */
#define RR_MAX_FLOATS 32

/* the vectors (loads) held in register rows: those of a row cache slot */
static int
rr_nvecs(emitter *m)
{
    int n = 0;
    for (int i = 0; i < m->nvec; i++) {
        if (!m->vec_store[i] && vec_rc_slot(m, i) >= 0) {
            n++;
        }
    }
    return n;
}

/* bit BX set for each block size BX with a register row path (the
 * emitter's rc_analyze and vec_analyze done), 0: none */
static int
rr_blocks(emitter *m)
{
    const stax_kernel *k = m->k;
    const stax_ix *d;
    int nv, mask = 0;
    int64_t R;
    if (k->ninner != 1 || m->nvec == 0 || m->rc_bytes == 0) {
        return 0;
    }
    d = k->dims[k->nouter];
    if (d == NULL || d->kind != STAX_IX_CONST || d->v < VEC_MIN_ROW) {
        return 0;
    }
    for (int s = 0; s < k->nstages; s++) {
        if (k->stages[s].kind != STAX_STAGE_REDUCE
            && k->stages[s].kind != STAX_STAGE_INNER
            && k->stages[s].kind != STAX_STAGE_OUTER) {
            return 0;
        }
    }
    nv = rr_nvecs(m);
    R = d->v;
    for (int bx = 256; bx <= 1024 && nv > 0; bx *= 2) {
        if (R % (4 * bx) == 0 && nv * (R / bx) <= RR_MAX_FLOATS) {
            mask |= bx;
        }
    }
    return mask;
}

int
stax_nvrtc_reg_row_blocks(const stax_kernel *k)
{
    emitter *m = PyMem_Calloc(1, sizeof(*m));
    int mask;
    if (m == NULL) {
        return 0;
    }
    m->k = k;
    m->vec_j = -1;
    vec_analyze(m);
    rc_analyze(m);
    mask = rr_blocks(m);
    emitter_free(m);
    return mask;
}

/* the register row loop of stage s: V vectors per thread, unrolled */
static int
emit_rr_loop(emitter *m, int s, int fuse, int bx)
{
    const stax_kernel *k = m->k;
    const stax_stage *st = &k->stages[s];
    if (vec_mark_stage_loads(m, st, fuse) < 0) {
        return -1;
    }
    put(m->b, "#pragma unroll\n"
        "            for (int vu = 0; vu < %d; vu++) {\n"
        "                const int64_t rw = 4 * ((int64_t)threadIdx.x + vu * %d);\n",
        m->rr_v, bx);
    if (emit_vec_step(m, st, fuse, "                ") < 0) {
        return -1;
    }
    put(m->b, "            }\n");
    return 0;
}

const char *
stax_nvrtc_knob_tag(void)
{
    static char tag[640];      /* whole options: kernel_options takes < 512 bytes */
    int vm = vec_mode();
    const char *o = stax_nvrtc_extra_options();
    snprintf(tag, sizeof tag, "%s%s%s%s",
             vm == 1 ? "; vec 1" : vm == 0 ? "" : "; vec auto",
             knob_on("TENSORPLAY_NVRTC_ONEPASS") ? "; onepass 1" : "",
             *o ? "; options " : "", o);
    return tag;
}

/* TENSORPLAY_NVRTC_OPTIONS: NVRTC options added to every rendered kernel's
 * compile (space-separated, e.g. "--Ofast-compile=mid"), for measuring
 * what an option does to compile time and kernel speed; read at every
 * compile, named by the compile cache's tag. "" when unset. */
const char *
stax_nvrtc_extra_options(void)
{
    const char *e = getenv("TENSORPLAY_NVRTC_OPTIONS");
    return e != NULL ? e : "";
}

/* the preamble's helpers of the online softmax (only in kernels that use
 * them, so other kernels' text does not change) */
static const char online_preamble[] =
"STAX_D float stax_oexp(float v) { return expf(v); }\n"
"STAX_D double stax_oexp(double v) { return exp(v); }\n"
"/* (m, s) <- (m, s) + (m2, s2): s = sum of exp(v - m) over both parts;\n"
" * a part whose max is the joint max keeps its sum as it is (an all -inf\n"
" * part has s 0), a NaN max makes the sum NaN */\n"
"template <typename T>\n"
"STAX_D void stax_online_join(T &m, T &s, T m2, T s2)\n"
"{\n"
"    const T mx = stax_maxnan(m, m2);\n"
"    s = (m == mx ? s : s * stax_oexp(m - mx)) + (m2 == mx ? s2 : s2 * stax_oexp(m2 - mx));\n"
"    m = mx;\n"
"}\n"
"template <typename T>\n"
"static __device__ void stax_warp_online(T &m, T &s)\n"
"{\n"
"    for (int off = 16; off > 0; off >>= 1) {\n"
"        stax_online_join(m, s, __shfl_xor_sync(0xffffffffu, m, off),\n"
"                         __shfl_xor_sync(0xffffffffu, s, off));\n"
"    }\n"
"}\n"
"template <typename T>\n"
"static __device__ void stax_block_online(T &m, T &s, T *shm, T *shs)\n"
"{\n"
"    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n"
"    const int nwarps = blockDim.x >> 5;\n"
"    stax_warp_online(m, s);\n"
"    if (lane == 0) { shm[warp] = m; shs[warp] = s; }\n"
"    __syncthreads();\n"
"    if (warp == 0) {\n"
"        m = lane < nwarps ? shm[lane] : (T)__int_as_float(0xff800000);\n"
"        s = lane < nwarps ? shs[lane] : (T)0;\n"
"        stax_warp_online(m, s);\n"
"        if (lane == 0) { shm[32] = m; shs[32] = s; }\n"
"    }\n"
"    __syncthreads();\n"
"    m = shm[32];\n"
"    s = shs[32];\n"
"    __syncthreads();\n"
"}\n";

/* the warm-up kernel: one row of softmax per block through the helpers
 * rendered kernels use (16-byte loads, block reductions, a float16 store):
 * enough to start NVRTC, small enough to compile fast */
static const char warm_kernel[] =
"struct stax_sizes { int64_t v[1]; };\n"
"extern \"C\" __global__ void STAX_LB stax_warm(const float *__restrict__ buf0,\n"
"    float *__restrict__ buf1, unsigned short *__restrict__ buf2,\n"
"    const stax_sizes sizes, const int64_t start, const int64_t end)\n"
"{\n"
"    __shared__ double stax_shv[33];\n"
"    const int64_t n = sizes.v[0];\n"
"    for (int64_t x = start + blockIdx.x; x < end; x += gridDim.x) {\n"
"        float m = __int_as_float((int)0xff800000), s = 0.0f;\n"
"        for (int64_t r = 4 * (int64_t)threadIdx.x; r + 3 < n; r += 4 * blockDim.x) {\n"
"            if (stax_vaok(&buf0[x * n + r])) {\n"
"                const stax_v4<float> v = *(const stax_v4<float> *)&buf0[x * n + r];\n"
"                m = stax_maxnan(stax_maxnan(m, v.v[0]), stax_maxnan(v.v[1], stax_maxnan(v.v[2], v.v[3])));\n"
"            }\n"
"        }\n"
"        m = stax_block_reduce(m, stax_op_max(), __int_as_float((int)0xff800000), (float *)stax_shv);\n"
"        for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {\n"
"            s = stax_op_sum()(s, stax_oexp(buf0[x * n + r] - m));\n"
"        }\n"
"        s = stax_block_reduce(s, stax_op_sum(), 0.0f, (float *)stax_shv);\n"
"        for (int64_t r = threadIdx.x; r < n; r += blockDim.x) {\n"
"            const float y = expf(buf0[x * n + r] - m) / s;\n"
"            buf1[x * n + r] = y;\n"
"            buf2[x * n + r] = stax_f2h(y);\n"
"        }\n"
"    }\n"
"}\n";

const char *
stax_nvrtc_warm_source(void)
{
    static char *src = NULL;
    if (src == NULL) {
        size_t n = strlen(preamble) + strlen(vec_preamble)
                   + strlen(online_preamble) + strlen(warm_kernel) + 1;
        char *s = malloc(n);
        if (s == NULL) {
            return NULL;
        }
        snprintf(s, n, "%s%s%s%s", preamble, vec_preamble, online_preamble,
                 warm_kernel);
        src = s;
    }
    return src;
}

static int
kernel_has_online(const stax_kernel *k)
{
    for (int s = 0; s + 1 < k->nstages; s++) {
        if (online_pair(k, s)) {
            return 1;
        }
    }
    return 0;
}

/* the row loops of every stage and the block reductions between them:
 * the generic loops (bx 0) or the register row path of block size bx */
static int
emit_stages(emitter *m, int bx, const int *ru, int nru)
{
    const stax_kernel *k = m->k;
    sbuf *b = m->b;
    int keep, fuse = 0;
    for (int s = 0; s < k->nstages; s++) {
        const stax_stage *st = &k->stages[s];
        m->indent = "        ";
        keep = m->nmemo;
        if (st->kind == STAX_STAGE_REDUCE) {
            acc_init(m, st);
        }
        if (st->kind == STAX_STAGE_OUTER) {
            put(b, "        if (threadIdx.x == 0) {\n");
            m->indent = "            ";
            if (emit_stores(m, st) < 0) {
                return -1;
            }
            put(b, "        }\n");
            scope_reset(m, keep);
            continue;
        }
        fuse = st->kind == STAX_STAGE_REDUCE && online_pair(k, s);
        if (fuse) {
            acc_init(m, &k->stages[s + 1]);
        }
        m->stage = s;
        if (bx > 0) {
            if (emit_rr_loop(m, s, fuse, bx) < 0) {
                return -1;
            }
            goto stage_end;
        }
        put(b, "        int64_t rbase%d = threadIdx.x;\n", s);
        if (m->nvec > 0 && emit_vec_loops(m, s, fuse, ru, nru) < 0) {
            return -1;
        }
        for (int g = 0; g < nru; g++) {
            put(b, "        for (; rbase%d + %d * (int64_t)blockDim.x < rnumel; "
                "rbase%d += %d * (int64_t)blockDim.x) {\n"
                "#pragma unroll\n"
                "            for (int ru = 0; ru < %d; ru++) {\n"
                "                const int64_t rindex = rbase%d + ru * "
                "(int64_t)blockDim.x;\n", s, ru[g] - 1, s, ru[g], ru[g], s);
            m->indent = "                ";
            if ((fuse ? row_body_online(m, st, &k->stages[s + 1])
                 : row_body(m, st)) < 0) {
                return -1;
            }
            put(b, "            }\n        }\n");
            scope_reset(m, keep);
        }
        put(b, "        for (int64_t rindex = rbase%d; rindex < rnumel; "
            "rindex += blockDim.x) {\n", s);
        m->indent = "            ";
        if ((fuse ? row_body_online(m, st, &k->stages[s + 1])
             : row_body(m, st)) < 0) {
            return -1;
        }
        put(b, "        }\n");
    stage_end:
        m->stage = -1;
        scope_reset(m, keep);
        m->indent = "        ";
        if (fuse) {
            const char *T = acc_ctype(k->accs[st->first].dtype);
            int im = st->first, is = k->stages[s + 1].first;
            put(b, "        if (blockDim.y > 1) {\n"
                "            stax_warp_online(acc%d, acc%d);\n"
                "        } else {\n"
                "            stax_block_online(acc%d, acc%d, (%s *)stax_shv, "
                "(%s *)stax_shi);\n        }\n"
                "        if (rnumel > 0 && acc%d == (%s)", im, is, im, is, T, T,
                im, T);
            literal(b, -INFINITY, 0, strcmp(T, "double") == 0 ? STAX_FLOAT64
                    : STAX_FLOAT32);
            put(b, ") {\n            acc%d = (%s)", is, T);
            literal(b, NAN, 0, strcmp(T, "double") == 0 ? STAX_FLOAT64
                    : STAX_FLOAT32);
            put(b, ";  // sum of exp(-inf - -inf)\n        }\n");
            s++;
        }
        else if (st->kind == STAX_STAGE_REDUCE) {
            acc_block_reduce(m, st);
        }
    }
    return 0;
}

static int
render_body(emitter *m, int *has_red)
{
    const stax_kernel *k = m->k;
    sbuf *b = m->b;
    const int *ru = NULL;
    int keep, rr, nru = row_unrolls(&ru);
    *has_red = 0;
    if (k->ninner == 0) {
        keep = m->nmemo;
        put(b, "    const int64_t xstride = (int64_t)blockDim.x * gridDim.x;\n"
            "    int64_t xbase = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
            "    for (; xbase + %d * xstride < xnumel; xbase += %d * xstride) {\n"
            "#pragma unroll\n"
            "        for (int xu = 0; xu < %d; xu++) {\n"
            "            const int64_t xindex = xbase + xu * xstride;\n",
            STAX_UNROLL - 1, STAX_UNROLL, STAX_UNROLL);
        m->indent = "            ";
        if (point_body(m) < 0) {
            return -1;
        }
        put(b, "        }\n    }\n");
        scope_reset(m, keep);
        put(b, "    for (int64_t xindex = xbase; xindex < xnumel; "
            "xindex += xstride) {\n");
        m->indent = "        ";
        if (point_body(m) < 0) {
            return -1;
        }
        put(b, "    }\n");
        scope_reset(m, keep);
        return 0;
    }
    *has_red = 1;
    /* rows on threadIdx.y (several rows per block for short rows, one
     * warp each: blockDim.x == 32) or one row per block (blockDim.y == 1) */
    put(b, "    for (int64_t xindex = (int64_t)blockIdx.x * blockDim.y + "
        "threadIdx.y; xindex < xnumel;\n"
        "         xindex += (int64_t)gridDim.x * blockDim.y) {\n");
    m->indent = "        ";
    emit_split(m, 0, k->nouter, "xindex", k->nouter ? "start" : NULL);
    if (m->nvec > 0) {
        if (m->vec_auto) {
            put(b, "        bool stax_vok = rnumel >= %dLL;\n", VEC_MIN_ROW);
        }
        else {
            put(b, "        bool stax_vok = true;\n");
        }
        put(b, "        {\n"
            "            const int64_t r0 = 0;\n");
        for (int i = 0; i < m->nvec; i++) {
            put(b, "            stax_vok = stax_vok && stax_vaok(&buf%d[",
                m->vec_buf[i]);
            render_ix(m, m->vec_ix[i]);
            put(b, "]);\n");
        }
        put(b, "        }\n");
    }
    rr = rr_blocks(m);
    for (int bx = 256; bx <= 1024; bx *= 2) {
        if (!(rr & bx)) {
            continue;
        }
        keep = m->nmemo;
        m->rr_v = (int)(k->dims[k->nouter]->v / (4 * bx));
        put(b, "        if (stax_vok && blockDim.x == %d && blockDim.y == 1) {\n", bx);
        for (int i = 0; i < m->nvec; i++) {
            int slot = vec_rc_slot(m, i);
            if (!m->vec_store[i] && slot >= 0) {
                put(b, "            stax_v4<%s> stax_rr%d[%d];  // buf%d\n",
                    mem_ctypes[k->bufs[m->vec_buf[i]].dtype], slot, m->rr_v,
                    m->vec_buf[i]);
            }
        }
        if (emit_stages(m, bx, ru, nru) < 0) {
            return -1;
        }
        put(b, "            continue;\n        }\n");
        m->rr_v = 0;
        scope_reset(m, keep);
    }
    if (emit_stages(m, 0, ru, nru) < 0) {
        return -1;
    }
    put(b, "    }\n");
    return 0;
}

/* lower.h's ATTENTION KERNELS on the GPU: one thread per query row (the
 * ABI's blocks of tile_q rows, thread t of a block = row t), the online
 * softmax's state (m, l, acc) in registers, updated key by key; acc holds
 * STAX_ATT_EC columns of the output, so a row makes ceil(Ev / EC) passes
 * over K and V (no L x S buffer, no local array of runtime size). */
#define STAX_ATT_EC 32

/* one term of the attention loop: v's temporaries at `indent`, then the
 * statement's start `lead` and v's value (the caller ends the statement) */
static int
att_term(emitter *m, const char *indent, const stax_lval *v, const char *lead)
{
    m->indent = indent;
    if (emit_val(m, v) < 0) {
        return -1;
    }
    put(m->b, "%s%s", indent, lead);
    ref(m, v);
    return 0;
}

static int
render_attention(emitter *m)
{
    const stax_kernel *k = m->k;
    const stax_stage *st = &k->stages[0];
    const stax_lacc *A = &k->accs[st->first];
    const stax_lstore *out = &k->stores[k->stages[1].first];
    sbuf *b = m->b;
    const char *at = reg_ctypes[A[0].dtype];
    const char *fx = A[0].dtype == STAX_FLOAT64 ? "exp" : "expf";
    char lead[64];
    int keep;
    put(b, "    const int64_t tq = %d, nqb = (d1 + tq - 1) / tq;\n", st->tile_q);
    put(b, "    const int64_t xnumel = (end - start) * tq;\n");
    put(b, "    for (int64_t xindex = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; "
        "xindex < xnumel;\n"
        "         xindex += (int64_t)blockDim.x * gridDim.x) {\n");
    put(b, "        const int64_t blk = start + xindex / tq;\n"
        "        const int64_t x0 = blk / nqb;\n"
        "        const int64_t x1 = (blk %% nqb) * tq + xindex %% tq;\n"
        "        if (x1 >= d1) continue;\n");
    put(b, "        int64_t jend = d2;\n");
    if (A[1].index != NULL) {
        m->indent = "        ";
        if (prep_ix(m, A[1].index) < 0) {
            return -1;
        }
        put(b, "        jend = ");
        render_ix(m, A[1].index);
        put(b, " + 1;\n        jend = jend < 0 ? 0 : (jend > d2 ? d2 : jend);\n");
    }
    put(b, "        for (int64_t e0 = 0; e0 < d4; e0 += %d) {\n", STAX_ATT_EC);
    put(b, "            const int64_t ne = d4 - e0 < %d ? d4 - e0 : %d;\n", STAX_ATT_EC,
        STAX_ATT_EC);
    put(b, "            const %s ninf = ", at);
    literal(b, -INFINITY, 0, A[0].dtype);
    put(b, ";\n            %s mrun = ninf, lrun = 0, accv[%d];\n", at, STAX_ATT_EC);
    put(b, "            for (int e = 0; e < %d; e++) accv[e] = 0;\n", STAX_ATT_EC);
    put(b, "            for (int64_t r0 = 0; r0 < jend; r0++) {\n");
    put(b, "                %s acc0 = 0;\n", at);
    put(b, "                for (int64_t r1 = 0; r1 < d3; r1++) {\n");
    keep = m->nmemo;
    if (att_term(m, "                    ", A[0].value, "acc0 += ") < 0) {
        return -1;
    }
    put(b, ";\n                }\n");
    scope_reset(m, keep);
    snprintf(lead, sizeof(lead), "const %s s = ", at);
    if (att_term(m, "                ", A[1].value, lead) < 0) {
        return -1;
    }
    put(b, ";\n"
        "                const %s mn = stax_maxnan(mrun, s);\n"
        "                const %s alpha = mrun == mn ? (%s)1 : %s(mrun - mn);\n"
        "                const %s p = mn == ninf ? (%s)0 : %s(s - mn);\n"
        "                lrun = lrun * alpha + p;\n"
        "                mrun = mn;\n", at, at, at, fx, at, at, fx);
    scope_reset(m, keep);
    put(b, "                for (int e = 0; e < ne; e++) {\n"
        "                    const int64_t r2 = e0 + e;\n");
    if (att_term(m, "                    ", A[2].value, "accv[e] = accv[e] * alpha + p * ") < 0) {
        return -1;
    }
    put(b, ";\n                }\n");
    scope_reset(m, keep);
    put(b, "            }\n");
    put(b, "            for (int e = 0; e < ne; e++) {\n"
        "                const int64_t r2 = e0 + e;\n");
    m->indent = "                ";
    if (prep_ix(m, out->index) < 0) {
        return -1;
    }
    put(b, "                buf%d[", out->buf);
    render_ix(m, out->index);
    stax_dtype_t odt = k->bufs[out->buf].dtype;
    put(b, "] = %s(%s);\n", odt == STAX_FLOAT16 ? "stax_f2h" :
        odt == STAX_FLOAT64 ? "(double)" : "(float)",
        st->zero_empty ? "lrun == 0 ? 0 : accv[e] / lrun" : "accv[e] / lrun");
    scope_reset(m, keep);
    put(b, "            }\n        }\n    }\n");
    return 0;
}

/* The values a walk has been through: a kernel's values are a DAG whose
 * shared subtrees a tree walk visits once per path (polygamma's series: a
 * walk of hours); each is looked at once. A pointer hash set, open
 * addressing; out of memory it forgets nothing it holds and walks on. */
int
stax_nvrtc_seen_add(lv_seen *s, const void *v)
{
    size_t h;
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        const void **ns = PyMem_Calloc(cap, sizeof(*ns));
        if (ns == NULL) {
            return 1;                    /* walk it again: slower, same result */
        }
        for (size_t i = 0; i < s->cap; i++) {
            if (s->slot[i] != NULL) {
                h = ((uintptr_t)s->slot[i] >> 4) & (cap - 1);
                while (ns[h] != NULL) {
                    h = (h + 1) & (cap - 1);
                }
                ns[h] = s->slot[i];
            }
        }
        PyMem_Free(s->slot);
        s->slot = ns;
        s->cap = cap;
    }
    h = ((uintptr_t)v >> 4) & (s->cap - 1);
    while (s->slot[h] != NULL) {
        if (s->slot[h] == v) {
            return 0;
        }
        h = (h + 1) & (s->cap - 1);
    }
    s->slot[h] = v;
    s->n++;
    return 1;
}

static int max_sym_lval(const stax_lval *v, lv_seen *seen);

static int
max_sym_ix(const stax_ix *ix, lv_seen *seen)
{
    int m = -1, a, b;
    if (ix == NULL) {
        return -1;
    }
    switch (ix->kind) {
    case STAX_IX_SYM:
        return (int)ix->v;
    case STAX_IX_VALUE:
        return max_sym_lval(ix->val, seen);
    case STAX_IX_ADD: case STAX_IX_MUL: case STAX_IX_DIV: case STAX_IX_MOD:
        a = max_sym_ix(ix->a, seen);
        b = max_sym_ix(ix->b, seen);
        return a > b ? a : b;
    default:
        return m;
    }
}

int
stax_nvrtc_max_sym(const stax_ix *ix)
{
    lv_seen seen = {NULL, 0, 0};
    int m = max_sym_ix(ix, &seen);
    PyMem_Free(seen.slot);
    return m;
}

/* the largest size symbol under v, -1 if none (or v already walked) */
static int
max_sym_lval(const stax_lval *v, lv_seen *seen)
{
    int m = -1, s;
    if (v == NULL || !stax_nvrtc_seen_add(seen, v)) {
        return -1;
    }
    if (v->kind == STAX_LV_LOAD || v->kind == STAX_LV_INDEX) {
        m = max_sym_ix(v->index, seen);
        s = max_sym_lval(v->mask, seen);
        m = s > m ? s : m;
    }
    for (int i = 0; i < v->nargs && v->kind != STAX_LV_LOAD; i++) {
        s = max_sym_lval(v->args[i], seen);
        m = s > m ? s : m;
    }
    return m;
}

int
stax_nvrtc_kernel_nsizes(const stax_kernel *k)
{
    lv_seen seen = {NULL, 0, 0};
    int m = -1, s;
    for (int d = 0; d < k->nouter + k->ninner; d++) {
        s = max_sym_ix(k->dims[d], &seen);
        m = s > m ? s : m;
    }
    for (int i = 0; i < k->nstores; i++) {
        s = max_sym_ix(k->stores[i].index, &seen);
        m = s > m ? s : m;
        s = max_sym_lval(k->stores[i].value, &seen);
        m = s > m ? s : m;
    }
    for (int i = 0; i < k->naccs; i++) {
        s = max_sym_lval(k->accs[i].value, &seen);
        m = s > m ? s : m;
        s = max_sym_ix(k->accs[i].index, &seen);
        m = s > m ? s : m;
    }
    PyMem_Free(seen.slot);
    return m + 1;
}

PyObject *
stax_nvrtc_render_kernel(const stax_kernel *k, int nsizes)
{
    sbuf b = {NULL, 0, 0, 0};
    emitter *m = NULL;
    PyObject *res = NULL;
    int has_red = 0;

    m = PyMem_Calloc(1, sizeof(*m));
    if (m == NULL) {
        return PyErr_NoMemory();
    }
    m->b = &b;
    m->k = k;
    m->stage = -1;
    if (k->nouter + k->ninner > 2 * STAX_MAX_DIMS) {
        unsupported("loop depth", k->nouter + k->ninner);
        goto done;
    }
    for (int i = 0; i < k->nbufs; i++) {
        if (!dt_ok(k->bufs[i].dtype)) {
            unsupported("dtype", k->bufs[i].dtype);
            goto done;
        }
    }
    put(&b, "// %s: generated by tensorplay backend_nvrtc (do not edit)\n",
        k->name);
    m->vec_j = -1;
    vec_analyze(m);
    put(&b, "%s", preamble);
    if (m->nvec > 0) {
        put(&b, "%s", vec_preamble);
    }
    if (k->ninner > 0 && kernel_has_online(k)) {
        put(&b, "%s", online_preamble);
    }
    if (has_combine(k)) {
        put(&b, "%s", atomic_preamble);
    }
    put(&b, "struct stax_sizes { int64_t v[%d]; };\n\n",
        nsizes > 0 ? nsizes : 1);
    put(&b, "extern \"C\" __global__ void %s%s(",
        k->ninner > 0 && stax_nvrtc_reg_row_blocks(k) ? "STAX_LB " : "", k->name);
    for (int i = 0; i < k->nbufs; i++) {
        put(&b, "%s%s *%sbuf%d, ", k->bufs[i].is_output ? "" : "const ",
            mem_ctypes[k->bufs[i].dtype],
            k->bufs[i].noalias ? "__restrict__ " : "", i);
    }
    put(&b, "const stax_sizes sizes, const int64_t start, "
        "const int64_t end)\n{\n");
    m->indent = "    ";
    for (int d = 0; d < k->nouter + k->ninner; d++) {
        put(&b, "    const int64_t d%d = ", d);
        render_ix(m, k->dims[d]);
        put(&b, ";  // extent of ");
        var_name(&b, k, d);
        put(&b, "\n");
    }
    if (k->nstages == 2 && k->stages[0].kind == STAX_STAGE_ATTENTION && k->naccs >= 3
        && k->nouter == 2 && k->ninner == 3) {
        if (render_attention(m) < 0) {
            goto done;
        }
        put(&b, "}\n");
        if (b.oom) {
            PyErr_NoMemory();
            goto done;
        }
        res = PyUnicode_FromStringAndSize(b.buf, (Py_ssize_t)b.len);
        goto done;
    }
    put(&b, "    const int64_t xnumel = ");  /* outer points */
    if (k->nouter == 0) {
        put(&b, "end > start ? 1 : 0");
    }
    else {
        put(&b, "(end - start)");
        for (int d = 1; d < k->nouter; d++) {
            put(&b, " * d%d", d);
        }
    }
    put(&b, ";\n");
    if (k->ninner > 0) {
        put(&b, "    const int64_t rnumel = ");
        for (int d = k->nouter; d < k->nouter + k->ninner; d++) {
            put(&b, d > k->nouter ? " * d%d" : "d%d", d);
        }
        put(&b, ";\n");
        put(&b, "    __shared__ double stax_shv[33];\n"
            "    __shared__ long long stax_shi[33];\n");
        rc_analyze(m);
        if (m->rc_bytes > 0) {
            put(&b, "    extern __shared__ __align__(16) unsigned char "
                "stax_dyn[];\n"
                "    const bool stax_rc_on = blockDim.y == 1\n"
                "        && (int64_t)stax_dyn_smem() >= rnumel * %lldLL;\n",
                (long long)m->rc_bytes);
            for (int i = 0; i < m->nrc; i++) {
                const rc_entry *e = &m->rc[i];
                if (e->slot >= 0) {
                    put(&b, "    %s *const stax_rc%d = (%s *)(stax_dyn + "
                        "rnumel * %lldLL);  // buf%d\n",
                        reg_ctypes[e->dtype], e->slot, reg_ctypes[e->dtype],
                        (long long)e->offset, e->buf);
                }
            }
        }
    }
    if (render_body(m, &has_red) < 0) {
        goto done;
    }
    put(&b, "}\n");
    if (b.oom) {
        PyErr_NoMemory();
        goto done;
    }
    res = PyUnicode_FromStringAndSize(b.buf, (Py_ssize_t)b.len);
done:
    PyMem_Free(b.buf);
    emitter_free(m);
    return res;
}

/* ------------------------------------------------------------ launch */

/* evaluate an index expression with every loop variable at bounds
 * (interval arithmetic); -1 + exception if it cannot be bounded */
int
stax_nvrtc_ix_bounds(const stax_ix *ix, const int64_t *sizes,
                     const int64_t *vlo, const int64_t *vhi, int64_t *lo,
                     int64_t *hi)
{
    int64_t al, ah, bl, bh;
    switch (ix->kind) {
    case STAX_IX_CONST:
        *lo = *hi = ix->v;
        return 0;
    case STAX_IX_VAR:
        *lo = vlo[ix->v];
        *hi = vhi[ix->v];
        return 0;
    case STAX_IX_SYM:
        if (sizes == NULL) {
            PyErr_SetString(PyExc_ValueError, "NVRTC launch: the kernel "
                            "needs size arguments");
            return -1;
        }
        *lo = *hi = sizes[ix->v];
        return 0;
    case STAX_IX_VALUE:
        /* a launch handle's copy holds the value's clamp bounds in a, b */
        if (ix->a != NULL && ix->b != NULL && ix->a->kind == STAX_IX_CONST
            && ix->b->kind == STAX_IX_CONST) {
            *lo = ix->a->v;
            *hi = ix->b->v;
            return 0;
        }
        PyErr_SetString(PyExc_NotImplementedError, "NVRTC launch: a "
                        "data-dependent index cannot be bounded");
        return -1;
    default:
        break;
    }
    if (stax_nvrtc_ix_bounds(ix->a, sizes, vlo, vhi, &al, &ah) < 0
        || stax_nvrtc_ix_bounds(ix->b, sizes, vlo, vhi, &bl, &bh) < 0) {
        return -1;
    }
    switch (ix->kind) {
    case STAX_IX_ADD:
        *lo = al + bl;
        *hi = ah + bh;
        break;
    case STAX_IX_MUL: {
        int64_t c[4] = {al * bl, al * bh, ah * bl, ah * bh};
        *lo = *hi = c[0];
        for (int i = 1; i < 4; i++) {
            *lo = c[i] < *lo ? c[i] : *lo;
            *hi = c[i] > *hi ? c[i] : *hi;
        }
        break;
    }
    case STAX_IX_DIV:
        *lo = bh > 0 ? (al >= 0 ? al / bh : al) : al;
        *hi = bl > 0 ? (ah >= 0 ? ah / bl : 0) : ah;
        break;
    case STAX_IX_MOD:
        *lo = 0;
        *hi = bh > 0 ? bh - 1 : 0;
        if (al >= 0 && ah < bl) {
            *lo = al;
            *hi = ah;
        }
        break;
    default:
        break;
    }
    return 0;
}

int
stax_nvrtc_row_length(const stax_kernel *k, const int64_t *sizes,
                      int64_t *rn)
{
    static const int64_t zero[2 * STAX_MAX_DIMS] = {0};
    int64_t lo, hi;
    *rn = 1;
    for (int d = k->nouter; d < k->nouter + k->ninner; d++) {
        if (stax_nvrtc_ix_bounds(k->dims[d], sizes, zero, zero, &lo, &hi)
            < 0) {
            return -1;
        }
        *rn *= hi;
    }
    return 0;
}

int
stax_nvrtc_launch_config(const stax_kernel *k, const int64_t *sizes,
                         int64_t start, int64_t end, int64_t grid[3],
                         int64_t block[3])
{
    static const int64_t zero[2 * STAX_MAX_DIMS] = {0};
    int64_t lo, hi, xn = end > start ? end - start : 0, rn = 1;
    int nd = k->nouter + k->ninner;
    for (int d = 0; d < nd; d++) {
        if (stax_nvrtc_ix_bounds(k->dims[d], sizes, zero, zero, &lo, &hi)
            < 0) {
            return -1;
        }
        if (d > 0 && d < k->nouter) {
            xn *= hi;
        }
        else if (d >= k->nouter) {
            rn *= hi;
        }
    }
    if (k->nouter == 0) {
        xn = end > start ? 1 : 0;
    }
    grid[1] = grid[2] = block[1] = block[2] = 1;
    if (k->nstages > 0 && k->stages[0].kind == STAX_STAGE_ATTENTION) {
        /* one thread per query row of the blocks [start, end) */
        int64_t rows = (end > start ? end - start : 0) * k->stages[0].tile_q;
        block[0] = 128;
        grid[0] = (rows + 127) / 128;
        grid[0] = grid[0] < 1 ? 1 : grid[0] > (1 << 20) ? (1 << 20) : grid[0];
        return 0;
    }
    if (k->ninner == 0) {
        int64_t blocks = (xn + 255) / 256;
        block[0] = 256;
        grid[0] = blocks < 132 * 32 ? blocks : 132 * 32;
    }
    else {
        /* a power of two >= the reduction length / per-thread work (4),
         * 32 .. 256: on an H200, Example 1.1 at 4096x4096 ran at ~2.4 TB/s
         * so, 1.8 TB/s with 1024 threads of one element each. Knobs:
         * TENSORPLAY_NVRTC_THREADS (max), TENSORPLAY_NVRTC_PER_THREAD. */
        const char *env = getenv("TENSORPLAY_NVRTC_THREADS");
        int64_t t = 32, mx = env ? atoll(env) : 0, per = 1;
        const char *penv = getenv("TENSORPLAY_NVRTC_PER_THREAD");
        if (mx < 32 || mx > 1024 || (mx & (mx - 1))) {
            mx = 256;
        }
        per = penv ? atoll(penv) : 4;
        per = per < 1 ? 1 : per;
        while (t * per < rn && t < mx) {
            t *= 2;
        }
        {
            /* TENSORPLAY_NVRTC_WARP_ROW=N: rows of up to N points run one
             * warp each too (several rows per block), off by default */
            const char *wenv = getenv("TENSORPLAY_NVRTC_WARP_ROW");
            int64_t wr = wenv ? atoll(wenv) : 0;
            if (wr > 0 && rn <= wr && xn > 1) {
                t = 32;
            }
        }
        block[0] = t;
        if (t == 32 && xn > 1) {
            /* short rows: one warp each, 8 rows per block (the seed's
             * XBLOCK), so a block holds 256 threads */
            const char *renv = getenv("TENSORPLAY_NVRTC_ROWS");
            int64_t rows = renv ? atoll(renv) : 8;
            rows = rows < 1 ? 1 : rows > 32 ? 32 : rows;
            block[1] = rows;
            xn = (xn + rows - 1) / rows;
        }
        grid[0] = xn < (1 << 20) ? xn : (1 << 20);
    }
    return 0;
}
