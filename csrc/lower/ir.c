/* Loop-level IR support: primitive names, the arena, the string buffer and
 * the human printer of kernels (TENSORPLAY_LOGS=kernels). */
#include "lower/lower.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dtype names and kinds (our own copy: the printer must not depend on
 * link order with the tensor room) */
static const char *const dt_names[] = {
    "bool", "uint8", "int8", "int16", "int32", "int64",
    "float16", "float32", "float64", "bfloat16"};
_Static_assert(sizeof(dt_names) / sizeof(dt_names[0]) == STAX_NUM_DTYPES, "a name per dtype");

static const char *
dt_name(stax_dtype_t dt)
{
    return (unsigned)dt < STAX_NUM_DTYPES ? dt_names[dt] : "?";
}

static int
dt_floating(stax_dtype_t dt)
{
    return dt == STAX_FLOAT16 || dt == STAX_FLOAT32 || dt == STAX_FLOAT64
           || dt == STAX_BFLOAT16;
}

static const char *const prim_names[] = {
#define STAX_PRIM_NAME_(ID, name, arity) name,
    STAX_PRIM_LIST(STAX_PRIM_NAME_)
#undef STAX_PRIM_NAME_
};
static const int prim_arity[] = {
#define STAX_PRIM_AR_(ID, name, arity) arity,
    STAX_PRIM_LIST(STAX_PRIM_AR_)
#undef STAX_PRIM_AR_
};
_Static_assert(sizeof(prim_names) / sizeof(prim_names[0]) == STAX_PRIM_COUNT,
               "prim table size");

const char *
stax_prim_name(stax_prim_t p)
{
    return (unsigned)p < STAX_PRIM_COUNT ? prim_names[p] : "?";
}

int
stax_prim_arity(stax_prim_t p)
{
    return (unsigned)p < STAX_PRIM_COUNT ? prim_arity[p] : 0;
}

int
stax_prim_from_name(const char *name)
{
    for (int i = 0; i < STAX_PRIM_COUNT; i++) {
        if (strcmp(prim_names[i], name) == 0) {
            return i;
        }
    }
    return -1;
}

/* ---------------------------------------------------------------- arena */
typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) char data[];
} chunk;

struct stax_arena {
    chunk *head;
};

stax_arena *
stax_arena_new(void)
{
    stax_arena *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        PyErr_NoMemory();
    }
    return a;
}

void *
stax_arena_alloc(stax_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    chunk *c = a->head;
    if (c == NULL || c->used + n > c->cap) {
        size_t cap = n > 65536 ? n : 65536;
        c = malloc(sizeof(chunk) + cap);
        if (c == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void
stax_arena_free(stax_arena *a)
{
    if (a == NULL) {
        return;
    }
    chunk *c = a->head;
    while (c != NULL) {
        chunk *n = c->next;
        free(c);
        c = n;
    }
    free(a);
}

/* ---------------------------------------------------------- string buffer */
void
stax_strbuf_printf(stax_strbuf *sb, const char *fmt, ...)
{
    if (sb->oom) {
        return;
    }
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = sb->cap - sb->n;
        int w = vsnprintf(sb->p ? sb->p + sb->n : NULL, sb->p ? room : 0,
                          fmt, ap);
        va_end(ap);
        if (w < 0) {
            sb->oom = 1;
            return;
        }
        if (sb->p != NULL && (size_t)w < room) {
            sb->n += (size_t)w;
            return;
        }
        size_t cap = sb->cap ? sb->cap * 2 : 256;
        while (cap < sb->n + (size_t)w + 1) {
            cap *= 2;
        }
        char *p = realloc(sb->p, cap);
        if (p == NULL) {
            sb->oom = 1;
            return;
        }
        sb->p = p;
        sb->cap = cap;
    }
}

static void
var_name(stax_strbuf *sb, int v, int nouter)
{
    if (nouter < 0 || v < nouter) {
        stax_strbuf_printf(sb, "x%d", v);
    }
    else {
        stax_strbuf_printf(sb, "r%d", v - nouter);
    }
}

static int render_nouter = -1;   /* printer context (GIL held) */

#define RENDER_LIMIT (1 << 18)

void
stax_lower_ix_render(stax_strbuf *sb, const stax_ix *ix)
{
    if (sb->n > RENDER_LIMIT) {
        return;
    }
    switch (ix->kind) {
    case STAX_IX_CONST:
        stax_strbuf_printf(sb, "%lld", (long long)ix->v);
        break;
    case STAX_IX_VAR:
        var_name(sb, (int)ix->v, render_nouter);
        break;
    case STAX_IX_SYM:
        stax_strbuf_printf(sb, "s%lld", (long long)ix->v);
        break;
    case STAX_IX_ADD:
        stax_lower_ix_render(sb, ix->a);
        stax_strbuf_printf(sb, " + ");
        stax_lower_ix_render(sb, ix->b);
        break;
    case STAX_IX_MUL: {
        int pa = ix->a->kind == STAX_IX_ADD, pb = ix->b->kind == STAX_IX_ADD;
        stax_strbuf_printf(sb, pa ? "(" : "");
        stax_lower_ix_render(sb, ix->a);
        stax_strbuf_printf(sb, pa ? ")*" : "*");
        stax_strbuf_printf(sb, pb ? "(" : "");
        stax_lower_ix_render(sb, ix->b);
        stax_strbuf_printf(sb, pb ? ")" : "");
        break;
    }
    case STAX_IX_DIV:
    case STAX_IX_MOD:
        stax_strbuf_printf(sb, "(");
        stax_lower_ix_render(sb, ix->a);
        stax_strbuf_printf(sb, ix->kind == STAX_IX_DIV ? ") // " : ") %% ");
        stax_lower_ix_render(sb, ix->b);
        break;
    case STAX_IX_VALUE:
        stax_strbuf_printf(sb, "int(");
        stax_lower_lval_render(sb, ix->val);
        stax_strbuf_printf(sb, ")");
        break;
    }
}

void
stax_lower_lval_render(stax_strbuf *sb, const stax_lval *v)
{
    if (sb->n > RENDER_LIMIT) {
        if (sb->n < RENDER_LIMIT + 8) {
            stax_strbuf_printf(sb, " ...");
        }
        return;
    }
    switch (v->kind) {
    case STAX_LV_LOAD:
        stax_strbuf_printf(sb, "buf%d[", v->buf);
        stax_lower_ix_render(sb, v->index);
        if (v->mask != NULL) {
            stax_strbuf_printf(sb, " if ");
            stax_lower_lval_render(sb, v->mask);
        }
        stax_strbuf_printf(sb, "]");
        break;
    case STAX_LV_CONST:
        if (dt_floating(v->dtype)) {
            stax_strbuf_printf(sb, "%.9g", v->f);
        }
        else {
            stax_strbuf_printf(sb, "%lld", (long long)v->i);
        }
        break;
    case STAX_LV_INDEX:
        stax_strbuf_printf(sb, "index(");
        stax_lower_ix_render(sb, v->index);
        stax_strbuf_printf(sb, ")");
        break;
    case STAX_LV_ACC:
        stax_strbuf_printf(sb, "acc%d", v->acc);
        break;
    case STAX_LV_CAST:
        stax_strbuf_printf(sb, "%s(", dt_name(v->dtype));
        stax_lower_lval_render(sb, v->args[0]);
        stax_strbuf_printf(sb, ")");
        break;
    case STAX_LV_PRIM:
        stax_strbuf_printf(sb, "%s(", stax_prim_name(v->prim));
        for (int i = 0; i < v->nargs; i++) {
            if (i) {
                stax_strbuf_printf(sb, ", ");
            }
            stax_lower_lval_render(sb, v->args[i]);
        }
        stax_strbuf_printf(sb, ")");
        break;
    }
}

static const char *const red_names[] = {
    "sum", "prod", "max", "min", "argmax", "argmin", "any", "all"};

PyObject *
stax_lower_kernel_str(const stax_kernel *k)
{
    stax_strbuf sb = {0};
    int saved = render_nouter;
    render_nouter = k->nouter;
    stax_strbuf_printf(&sb, "def %s(", k->name);
    for (int i = 0; i < k->nbufs; i++) {
        stax_strbuf_printf(&sb, "%sbuf%d: %s%s", i ? ", " : "", i,
                           dt_name(k->bufs[i].dtype),
                           k->bufs[i].is_output ? " out" : "");
    }
    stax_strbuf_printf(&sb, "):\n");
    int ind = 1;
    for (int d = 0; d < k->nouter; d++) {
        stax_strbuf_printf(&sb, "%*sfor x%d in range(", 4 * ind, "", d);
        stax_lower_ix_render(&sb, k->dims[d]);
        stax_strbuf_printf(&sb, "):%s\n", d == 0 ? "  # parallel" : "");
        ind++;
    }
    for (int s = 0; s < k->nstages; s++) {
        const stax_stage *st = &k->stages[s];
        int in = ind;
        if (st->kind == STAX_STAGE_ATTENTION) {
            stax_strbuf_printf(&sb, "%*s# attention (online softmax): query blocks of %d "
                               "rows (x0, x1 // %d parallel), keys r0<", 4 * ind, "",
                               st->tile_q, st->tile_q);
            stax_lower_ix_render(&sb, k->dims[k->nouter]);
            stax_strbuf_printf(&sb, " in tiles of %d, r1<", st->tile_k);
            stax_lower_ix_render(&sb, k->dims[k->nouter + 1]);
            stax_strbuf_printf(&sb, ", r2<");
            stax_lower_ix_render(&sb, k->dims[k->nouter + 2]);
            stax_strbuf_printf(&sb, "%s\n", st->zero_empty ? " (a row of -inf scores: 0)" : "");
            static const char *const what[3] = {"dot over r1", "score, running max",
                                                "softmax-weighted over r0"};
            for (int i = st->first; i < st->first + st->n && i - st->first < 3; i++) {
                const stax_lacc *a = &k->accs[i];
                stax_strbuf_printf(&sb, "%*sacc%d = %s[%s](", 4 * (ind + 1), "", i,
                                   red_names[a->op], dt_name(a->dtype));
                stax_lower_lval_render(&sb, a->value);
                stax_strbuf_printf(&sb, ")  # %s", what[i - st->first]);
                if (a->index != NULL) {
                    stax_strbuf_printf(&sb, "; causal: r0 <= ");
                    stax_lower_ix_render(&sb, a->index);
                }
                stax_strbuf_printf(&sb, "\n");
            }
            continue;
        }
        if (st->kind != STAX_STAGE_OUTER && k->ninner > 0) {
            stax_strbuf_printf(&sb, "%*s# %s over", 4 * ind, "",
                               st->kind == STAX_STAGE_REDUCE ? "reduce"
                                                             : "inner");
            for (int d = 0; d < k->ninner; d++) {
                stax_strbuf_printf(&sb, " r%d<", d);
                stax_lower_ix_render(&sb, k->dims[k->nouter + d]);
            }
            stax_strbuf_printf(&sb, "\n");
            in++;
        }
        for (int i = st->first; i < st->first + st->n; i++) {
            stax_strbuf_printf(&sb, "%*s", 4 * in, "");
            if (st->kind == STAX_STAGE_REDUCE) {
                const stax_lacc *a = &k->accs[i];
                stax_strbuf_printf(&sb, "acc%d = %s[%s](", i,
                                   red_names[a->op],
                                   dt_name(a->dtype));
                stax_lower_lval_render(&sb, a->value);
                stax_strbuf_printf(&sb, ")\n");
            }
            else {
                const stax_lstore *w = &k->stores[i];
                static const char *const comb[] = {" = ", " atomic+= ", " atomic*= ",
                                                    " atomic max= ", " atomic min= "};
                stax_strbuf_printf(&sb, "buf%d[", w->buf);
                stax_lower_ix_render(&sb, w->index);
                stax_strbuf_printf(&sb, "]%s", comb[w->combine]);
                stax_lower_lval_render(&sb, w->value);
                stax_strbuf_printf(&sb, "\n");
            }
        }
    }
    render_nouter = saved;
    if (sb.oom) {
        free(sb.p);
        return PyErr_NoMemory();
    }
    PyObject *r = PyUnicode_FromStringAndSize(sb.p ? sb.p : "", (Py_ssize_t)sb.n);
    free(sb.p);
    return r;
}

/* ------------------------------------------------------------ registry */
#define MAX_BACKENDS 8
static stax_backend *backends[MAX_BACKENDS];
static int nbackends;

int
stax_lower_register_backend(stax_backend *be)
{
    for (int i = 0; i < nbackends; i++) {
        if (strcmp(backends[i]->name, be->name) == 0) {
            backends[i] = be;
            return 0;
        }
    }
    if (nbackends == MAX_BACKENDS) {
        PyErr_SetString(PyExc_RuntimeError, "too many back ends");
        return -1;
    }
    backends[nbackends++] = be;
    return 0;
}

stax_backend *
stax_lower_get_backend(const char *name)
{
    for (int i = 0; i < nbackends; i++) {
        if (strcmp(backends[i]->name, name) == 0) {
            return backends[i];
        }
    }
    return NULL;
}
