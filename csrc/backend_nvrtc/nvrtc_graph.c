/* A stand-in lowering for the NVRTC back end: a GraphModule (a pointwise
 * chain, optionally ending in one reduction) or an S-expression over inputs
 * becomes ONE fused kernel of lower.h's loop-level IR, rendered by
 * nvrtc_render.c. Each node's scalar formula comes from the op table
 * (ops.def), parsed here; Python scalars are weak (they take the tensor's
 * dtype, as in PyTorch); lowering inserts casts so that each primitive's
 * operands have its dtype, as lower.h requires. The graph is read through
 * its Python API (node.op/.target/.args/...), so any FX-like graph works.
 * The lower room's own lowering drives the same renderer through the
 * stax_backend vtable (backend_nvrtc_init.c). */
#include "backend_nvrtc/nvrtc_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the op table, read directly from ops.def (names, kinds, formulas) */
typedef struct {
    const char *name;
    int kind;
    int arity;
    const char *schema;
    const char *formula;
} op_row;

static const op_row op_rows[] = {
#define STAX_OP(ID, nm, KIND, ar, schema, ovl, inpl, formula, decomp, flags) \
    {#nm, KIND, ar, schema, formula},
#include "ops/ops.def"
    {NULL, 0, 0, NULL, NULL},
};

static const op_row *
find_op(const char *name)
{
    for (int i = 0; op_rows[i].name != NULL; i++) {
        if (strcmp(op_rows[i].name, name) == 0) {
            return &op_rows[i];
        }
    }
    return NULL;
}

/* reductions this stand-in lowers */
typedef struct {
    const char *name;
    stax_red_t op;
    int mean;
} red_row;

static const red_row red_rows[] = {
    {"sum", STAX_RED_SUM, 0}, {"prod", STAX_RED_PROD, 0},
    {"amax", STAX_RED_MAX, 0}, {"amin", STAX_RED_MIN, 0},
    {"max", STAX_RED_MAX, 0}, {"min", STAX_RED_MIN, 0},
    {"argmax", STAX_RED_ARGMAX, 0}, {"argmin", STAX_RED_ARGMIN, 0},
    {"any", STAX_RED_ANY, 0}, {"all", STAX_RED_ALL, 0},
    {"mean", STAX_RED_SUM, 1}, {NULL, 0, 0},
};

static const red_row *
find_reduction(const char *name)
{
    for (int i = 0; red_rows[i].name != NULL; i++) {
        if (strcmp(red_rows[i].name, name) == 0) {
            return &red_rows[i];
        }
    }
    return NULL;
}

/* ------------------------------------------------------------ exprs */

#define MAX_INPUTS 16
#define MAX_NODES 1024
#define NAME_LEN 64

typedef enum { X_LOAD = 0, X_CONST, X_PRIM, X_ACC } xkind_t;

typedef struct xnode {
    xkind_t kind;
    stax_prim_t prim;
    int nargs;
    struct xnode *args[3];
    int input;                  /* LOAD; ACC: the accumulator */
    double value;               /* CONST */
    int weak;                   /* dtype follows the other operand */
    stax_dtype_t dtype;         /* result dtype */
    const stax_lval *lv;        /* lowering memo */
} xnode;

typedef struct {
    stax_dtype_t dtype;
    int ndim;
    int64_t shape[STAX_MAX_DIMS];
    int64_t layout[STAX_MAX_DIMS];    /* its strides, in elements */
    int64_t strides[STAX_MAX_DIMS];   /* per iteration dim */
    char label[NAME_LEN];
} xinput;

#define MAX_STAGES 8

typedef struct {
    stax_stage_kind_t kind;
    int op;                           /* REDUCE: stax_red_t */
    xnode *body;
    stax_dtype_t dtype;               /* accumulator / stored dtype */
} xstage;

typedef struct {
    char name[NAME_LEN];
    int nstages;                      /* 0: one pointwise or reduce below */
    xstage st[MAX_STAGES];
    int naccs;
    int order[STAX_MAX_DIMS];         /* iteration dim -> broadcast dim */
    int bndim;
    int64_t bshape[STAX_MAX_DIMS];    /* broadcast shape */
    int ninputs;
    xinput in[MAX_INPUTS];
    int ndim, nred;          /* iteration dims; the trailing nred reduced */
    int64_t sizes[STAX_MAX_DIMS];
    xnode *body;
    int reduce;                       /* stax_red_t, or -1 */
    int mean;
    stax_dtype_t out_dtype;
    int out_ndim;
    int64_t out_shape[STAX_MAX_DIMS];
    int npool;
    xnode pool[MAX_NODES];
} spec_t;

#define PF_BOOL 1u    /* result is bool */
#define PF_FLOAT 2u   /* integer operands compute in float32 */
#define PF_LOGIC 4u   /* operands are bool */

static unsigned
prim_flags(stax_prim_t p)
{
    switch (p) {
    case STAX_PRIM_EQ: case STAX_PRIM_NE: case STAX_PRIM_LT: case STAX_PRIM_LE:
    case STAX_PRIM_GT: case STAX_PRIM_GE: case STAX_PRIM_ISNAN:
    case STAX_PRIM_ISINF: case STAX_PRIM_ISFINITE:
        return PF_BOOL;
    case STAX_PRIM_AND: case STAX_PRIM_OR: case STAX_PRIM_XOR:
    case STAX_PRIM_NOT:
        return PF_BOOL | PF_LOGIC;
    case STAX_PRIM_ADD: case STAX_PRIM_SUB: case STAX_PRIM_MUL:
    case STAX_PRIM_NEG: case STAX_PRIM_ABS: case STAX_PRIM_SIGN:
    case STAX_PRIM_FLOOR: case STAX_PRIM_CEIL: case STAX_PRIM_ROUND:
    case STAX_PRIM_TRUNC: case STAX_PRIM_POW: case STAX_PRIM_FMOD:
    case STAX_PRIM_REMAINDER: case STAX_PRIM_FLOORDIV: case STAX_PRIM_MAX:
    case STAX_PRIM_MIN: case STAX_PRIM_MAXNAN: case STAX_PRIM_MINNAN:
    case STAX_PRIM_WHERE: case STAX_PRIM_BITAND: case STAX_PRIM_BITOR:
    case STAX_PRIM_BITXOR: case STAX_PRIM_BITNOT:
        return 0;
    default:
        return PF_FLOAT;   /* div, exp, log, sin, sigmoid, ... */
    }
}

static int
category(stax_dtype_t dt)
{
    return dt == STAX_BOOL ? 0 : (stax_nvrtc_is_float(dt) ? 2 : 1);
}

/* PyTorch promotion with weak (Python scalar) operands */
static stax_dtype_t
promote(stax_dtype_t a, int wa, stax_dtype_t b, int wb)
{
    if (wa != wb) {
        stax_dtype_t s = wa ? b : a, w = wa ? a : b;
        if (category(w) <= category(s)) {
            return s;
        }
        return category(w) == 2 ? STAX_FLOAT32 : STAX_INT64;
    }
    if (category(a) != category(b)) {
        return category(a) > category(b) ? a : b;
    }
    if (a == b) {
        return a;
    }
    if ((a == STAX_UINT8 && b == STAX_INT8)
        || (a == STAX_INT8 && b == STAX_UINT8)) {
        return STAX_INT16;
    }
    return stax_nvrtc_dtype_size(a) >= stax_nvrtc_dtype_size(b) ? a : b;
}

/* dtype in which a prim computes its operands */
static stax_dtype_t
compute_dtype(const xnode *e, int *weak)
{
    int first = e->prim == STAX_PRIM_WHERE ? 1 : 0;
    stax_dtype_t dt = e->args[first]->dtype;
    int w = e->args[first]->weak;
    if (prim_flags(e->prim) & PF_LOGIC) {
        *weak = 0;
        return STAX_BOOL;
    }
    for (int i = first + 1; i < e->nargs; i++) {
        dt = promote(dt, w, e->args[i]->dtype, e->args[i]->weak);
        w = w && e->args[i]->weak;
    }
    if ((prim_flags(e->prim) & PF_FLOAT) && !stax_nvrtc_is_float(dt)) {
        dt = STAX_FLOAT32;
    }
    *weak = w;
    return dt;
}

static xnode *
new_node(spec_t *k)
{
    xnode *e;
    if (k->npool >= MAX_NODES) {
        PyErr_SetString(PyExc_NotImplementedError,
                        "NVRTC renderer: expression too large for one kernel");
        return NULL;
    }
    e = &k->pool[k->npool++];
    memset(e, 0, sizeof(*e));
    return e;
}

static xnode *
new_load(spec_t *k, int input)
{
    xnode *e = new_node(k);
    if (e != NULL) {
        e->kind = X_LOAD;
        e->input = input;
        e->dtype = k->in[input].dtype;
    }
    return e;
}

static xnode *
new_const(spec_t *k, double v, stax_dtype_t dt)
{
    xnode *e = new_node(k);
    if (e != NULL) {
        e->kind = X_CONST;
        e->value = v;
        e->weak = 1;
        e->dtype = dt;
    }
    return e;
}

static xnode *
new_prim(spec_t *k, stax_prim_t p, int nargs, xnode **args)
{
    xnode *e;
    int weak = 0;
    if (nargs != stax_prim_arity(p)) {
        PyErr_Format(PyExc_ValueError, "loop-IR primitive '%s' takes %d "
                     "operands, got %d", stax_prim_name(p), stax_prim_arity(p),
                     nargs);
        return NULL;
    }
    /* x * 1 (a scalar, e.g. add's alpha=1) is x */
    if (p == STAX_PRIM_MUL) {
        for (int i = 0; i < 2; i++) {
            xnode *c = args[i], *o = args[1 - i];
            if (c->kind == X_CONST && c->weak && c->value == 1.0
                && !o->weak && category(o->dtype) >= category(c->dtype)) {
                return o;
            }
        }
    }
    if ((e = new_node(k)) == NULL) {
        return NULL;
    }
    e->kind = X_PRIM;
    e->prim = p;
    e->nargs = nargs;
    for (int i = 0; i < nargs; i++) {
        e->args[i] = args[i];
    }
    e->dtype = compute_dtype(e, &weak);
    e->weak = weak;
    if (prim_flags(p) & PF_BOOL) {
        e->dtype = STAX_BOOL;
        e->weak = 0;
    }
    return e;
}

static xnode *
number_node(spec_t *k, PyObject *v)
{
    if (PyBool_Check(v)) {
        return new_const(k, v == Py_True, STAX_BOOL);
    }
    if (PyLong_Check(v)) {
        long long x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred()) {
            return NULL;
        }
        return new_const(k, (double)x, STAX_INT64);
    }
    if (PyFloat_Check(v)) {
        return new_const(k, PyFloat_AS_DOUBLE(v), STAX_FLOAT32);
    }
    PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: operand of type "
                 "%.100s is neither a node of this kernel nor a number",
                 Py_TYPE(v)->tp_name);
    return NULL;
}

/* ------------------------------------------------------------ parser */

typedef PyObject *(*scalar_fn)(void *ctx, const char *name);

typedef struct {
    const char *s, *formula;
    spec_t *k;
    xnode **ops;
    int nops;
    scalar_fn scalar;
    void *ctx;
} parser;

static void
skip_ws(parser *p)
{
    while (*p->s == ' ' || *p->s == '\t' || *p->s == '\n') {
        p->s++;
    }
}

static xnode *
bad(parser *p, const char *why)
{
    PyErr_Format(PyExc_ValueError, "bad formula '%s': %s at offset %d",
                 p->formula, why, (int)(p->s - p->formula));
    return NULL;
}

static int
atom_end(char c)
{
    return c == '\0' || c == ' ' || c == '(' || c == ')' || c == '\n'
           || c == '\t';
}

static xnode *
parse_expr(parser *p)
{
    char atom[64];
    const char *a;
    size_t len;

    skip_ws(p);
    if (*p->s == '(') {
        xnode *args[4];
        int n = 0, prim;
        p->s++;
        skip_ws(p);
        a = p->s;
        while (!atom_end(*p->s)) {
            p->s++;
        }
        len = (size_t)(p->s - a);
        if (len == 0 || len >= sizeof(atom)) {
            return bad(p, "expected a primitive");
        }
        memcpy(atom, a, len);
        atom[len] = '\0';
        prim = stax_prim_from_name(atom);
        if (prim < 0) {
            return bad(p, "unknown primitive");
        }
        for (;;) {
            skip_ws(p);
            if (*p->s == ')') {
                p->s++;
                break;
            }
            if (*p->s == '\0' || n == 4) {
                return bad(p, "unbalanced or too many operands");
            }
            if ((args[n++] = parse_expr(p)) == NULL) {
                return NULL;
            }
        }
        return new_prim(p->k, (stax_prim_t)prim, n, args);
    }
    a = p->s;
    while (!atom_end(*p->s)) {
        p->s++;
    }
    len = (size_t)(p->s - a);
    if (len == 0) {
        return bad(p, "expected an atom");
    }
    if (len >= sizeof(atom)) {
        return bad(p, "atom too long");
    }
    memcpy(atom, a, len);
    atom[len] = '\0';
    if (len == 1 && atom[0] >= 'a' && atom[0] <= 'h') {
        int i = atom[0] - 'a';
        if (i >= p->nops || p->ops[i] == NULL) {
            return bad(p, "operand out of range");
        }
        return p->ops[i];
    }
    if (strncmp(atom, "acc", 3) == 0 && atom[3] >= '0' && atom[3] <= '9') {
        int i = atoi(atom + 3);
        xnode *e;
        if (i >= p->k->naccs) {
            return bad(p, "accumulator not defined by an earlier stage");
        }
        if ((e = new_node(p->k)) != NULL) {
            e->kind = X_ACC;
            e->input = i;
            e->dtype = p->k->st[0].dtype;
            for (int j = 0, a = 0; j < p->k->nstages; j++) {
                if (p->k->st[j].kind == STAX_STAGE_REDUCE && a++ == i) {
                    int op = p->k->st[j].op;
                    e->dtype = (op == STAX_RED_ARGMAX || op == STAX_RED_ARGMIN)
                               ? STAX_INT64 : p->k->st[j].dtype;
                }
            }
        }
        return e;
    }
    if (atom[0] == '$') {
        PyObject *v;
        xnode *e;
        if (p->scalar == NULL) {
            return bad(p, "no scalar arguments here");
        }
        if ((v = p->scalar(p->ctx, atom + 1)) == NULL) {
            return NULL;
        }
        e = number_node(p->k, v);
        Py_DECREF(v);
        return e;
    }
    if (strcmp(atom, "inf") == 0 || strcmp(atom, "-inf") == 0
        || strcmp(atom, "nan") == 0) {
        double v = atom[0] == '-' ? -INFINITY
                   : (atom[0] == 'n' ? NAN : INFINITY);
        return new_const(p->k, v, STAX_FLOAT32);
    }
    if (strcmp(atom, "true") == 0 || strcmp(atom, "false") == 0) {
        return new_const(p->k, atom[0] == 't', STAX_BOOL);
    }
    {
        char *end = NULL;
        double v = strtod(atom, &end);
        if (end == NULL || *end != '\0') {
            return bad(p, "unknown atom");
        }
        return new_const(p->k, v, strpbrk(atom, ".eE") ? STAX_FLOAT32
                                                       : STAX_INT64);
    }
}

static xnode *
parse_formula(spec_t *k, const char *formula, xnode **ops, int nops,
              scalar_fn scalar, void *ctx)
{
    parser p = {formula, formula, k, ops, nops, scalar, ctx};
    xnode *e = parse_expr(&p);
    if (e == NULL) {
        return NULL;
    }
    skip_ws(&p);
    if (*p.s != '\0') {
        return bad(&p, "trailing text");
    }
    return e;
}

/* ------------------------------------------------------------ to loop IR */

typedef struct {
    stax_arena *arena;
    const spec_t *k;
    int off;                /* 1 when a dummy outer dim was added */
    const stax_ix *in_ix[MAX_INPUTS];
} lower_t;

static stax_ix *
ix_new(lower_t *L, stax_ix_kind_t kind, int64_t v, const stax_ix *a,
       const stax_ix *b)
{
    stax_ix *ix = stax_arena_alloc(L->arena, sizeof(*ix));
    if (ix != NULL) {
        ix->kind = kind;
        ix->v = v;
        ix->a = a;
        ix->b = b;
    }
    return ix;
}

/* sum_j coef[j] * var(j + off) over the dims in [first, last) */
static const stax_ix *
ix_affine(lower_t *L, const int64_t *coef, int first, int last)
{
    const stax_ix *acc = NULL;
    for (int j = first; j < last; j++) {
        const stax_ix *t;
        if (coef[j] == 0) {
            continue;
        }
        t = ix_new(L, STAX_IX_VAR, j + L->off, NULL, NULL);
        if (t != NULL && coef[j] != 1) {
            t = ix_new(L, STAX_IX_MUL, 0,
                       ix_new(L, STAX_IX_CONST, coef[j], NULL, NULL), t);
        }
        if (t == NULL) {
            return NULL;
        }
        acc = acc ? ix_new(L, STAX_IX_ADD, 0, acc, t) : t;
        if (acc == NULL) {
            return NULL;
        }
    }
    return acc ? acc : ix_new(L, STAX_IX_CONST, 0, NULL, NULL);
}

static stax_lval *
lv_new(lower_t *L, stax_lval_kind_t kind, stax_dtype_t dt)
{
    stax_lval *v = stax_arena_alloc(L->arena, sizeof(*v));
    if (v != NULL) {
        v->kind = kind;
        v->dtype = dt;
    }
    return v;
}

static const stax_lval *lower_x(lower_t *L, xnode *e);

static const stax_lval *
lv_const(lower_t *L, double value, stax_dtype_t dt)
{
    stax_lval *v = lv_new(L, STAX_LV_CONST, dt);
    if (v != NULL) {
        v->f = value;
        v->i = isfinite(value) ? (int64_t)value : 0;
    }
    return v;
}

static const stax_lval *
lv_cast(lower_t *L, const stax_lval *x, stax_dtype_t dt)
{
    stax_lval *v;
    if (x == NULL || x->dtype == dt) {
        return x;
    }
    if ((v = lv_new(L, STAX_LV_CAST, dt)) != NULL) {
        v->nargs = 1;
        v->args[0] = x;
    }
    return v;
}

/* lower e, converted to dtype dt */
static const stax_lval *
lower_as(lower_t *L, xnode *e, stax_dtype_t dt)
{
    if (e->kind == X_CONST) {
        return lv_const(L, e->value, dt);
    }
    return lv_cast(L, lower_x(L, e), dt);
}

static const stax_lval *
lower_x(lower_t *L, xnode *e)
{
    stax_lval *v = NULL;
    if (e->lv != NULL) {
        return e->lv;
    }
    switch (e->kind) {
    case X_LOAD:
        if ((v = lv_new(L, STAX_LV_LOAD, e->dtype)) != NULL) {
            v->buf = e->input;
            v->index = L->in_ix[e->input];
        }
        break;
    case X_CONST:
        return lv_const(L, e->value, e->dtype);
    case X_ACC:
        if ((v = lv_new(L, STAX_LV_ACC, e->dtype)) != NULL) {
            v->acc = e->input;
        }
        break;
    case X_PRIM: {
        int weak = 0;
        stax_dtype_t cd = compute_dtype(e, &weak);
        if ((v = lv_new(L, STAX_LV_PRIM, e->dtype)) == NULL) {
            return NULL;
        }
        v->prim = e->prim;
        v->nargs = e->nargs;
        for (int i = 0; i < e->nargs; i++) {
            stax_dtype_t want = cd;
            if (e->prim == STAX_PRIM_WHERE && i == 0) {
                want = STAX_BOOL;
            }
            if ((v->args[i] = lower_as(L, e->args[i], want)) == NULL) {
                return NULL;
            }
        }
        break;
    }
    }
    e->lv = v;
    return v;
}

/* the single pointwise / reduce+store form as stages */
static int
legacy_stages(spec_t *k)
{
    xnode *accn, *v;
    if (k->reduce < 0) {
        k->st[0] = (xstage){STAX_STAGE_OUTER, 0, k->body, k->out_dtype};
        k->nstages = 1;
        return 0;
    }
    k->st[0] = (xstage){STAX_STAGE_REDUCE, k->reduce, k->body, k->out_dtype};
    k->nstages = 1;
    k->naccs = 1;
    if ((accn = new_node(k)) == NULL) {
        return -1;
    }
    accn->kind = X_ACC;
    accn->input = 0;
    accn->dtype = (k->reduce == STAX_RED_ARGMAX
                   || k->reduce == STAX_RED_ARGMIN) ? STAX_INT64
                                                    : k->out_dtype;
    v = accn;
    if (k->mean) {
        int64_t cnt = 1;
        xnode *args[2];
        for (int j = k->ndim - k->nred; j < k->ndim; j++) {
            cnt *= k->sizes[j];
        }
        args[0] = accn;
        args[1] = new_const(k, (double)cnt, STAX_FLOAT32);
        if (args[1] == NULL
            || (v = new_prim(k, STAX_PRIM_DIV, 2, args)) == NULL) {
            return -1;
        }
    }
    k->st[1] = (xstage){STAX_STAGE_OUTER, 0, v, k->out_dtype};
    k->nstages = 2;
    return 0;
}

/* spec -> one stax_kernel in `arena` (NULL + exception). Stages in order;
 * each REDUCE stage fills the next accumulator, each INNER (full shape) or
 * OUTER (reduced shape) stage stores the next output buffer, contiguous. */
static stax_kernel *
spec_to_kernel(spec_t *k, stax_arena *arena)
{
    lower_t L;
    stax_kernel *K;
    int has_inner = 0, nouter, off, nout = 0, nacc = 0, nb;
    int64_t ostride[STAX_MAX_DIMS] = {0}, istride[STAX_MAX_DIMS] = {0};
    int64_t cst[STAX_MAX_DIMS], acc = 1, total = 1;

    if (k->nstages == 0 && legacy_stages(k) < 0) {
        return NULL;
    }
    for (int s = 0; s < k->nstages; s++) {
        has_inner |= k->st[s].kind != STAX_STAGE_OUTER;
        nout += k->st[s].kind != STAX_STAGE_REDUCE;
    }
    if (!has_inner && k->nred > 0) {
        PyErr_SetString(PyExc_ValueError, "NVRTC stand-in lowering: reduced "
                        "dims but no reduce/inner stage");
        return NULL;
    }
    nouter = k->ndim - k->nred;
    off = nouter == 0 ? 1 : 0;
    nb = k->ninputs + nout;
    if (nb > STAX_NVRTC_MAX_BUFS) {
        PyErr_SetString(PyExc_ValueError, "too many buffers");
        return NULL;
    }
    memset(&L, 0, sizeof(L));
    L.arena = arena;
    L.k = k;
    L.off = off;
    K = stax_arena_alloc(arena, sizeof(*K));
    if (K == NULL) {
        return NULL;
    }
    snprintf(K->name, sizeof(K->name), "%s", k->name);
    K->nouter = nouter + off;
    K->ninner = k->nred;
    if (off) {
        K->dims[0] = ix_new(&L, STAX_IX_CONST, 1, NULL, NULL);
    }
    for (int j = 0; j < k->ndim; j++) {
        K->dims[j + off] = ix_new(&L, STAX_IX_CONST, k->sizes[j], NULL, NULL);
        if (K->dims[j + off] == NULL) {
            return NULL;
        }
        total *= k->sizes[j];
    }
    K->nbufs = nb;
    K->bufs = stax_arena_alloc(arena, sizeof(stax_kbuf) * (size_t)nb);
    K->stages = stax_arena_alloc(arena, sizeof(stax_stage)
                                        * (size_t)k->nstages);
    K->stores = stax_arena_alloc(arena, sizeof(stax_lstore)
                                        * (size_t)(nout ? nout : 1));
    K->accs = stax_arena_alloc(arena, sizeof(stax_lacc) * MAX_STAGES);
    if (!K->bufs || !K->stages || !K->stores || !K->accs) {
        return NULL;
    }
    for (int i = 0; i < k->ninputs; i++) {
        K->bufs[i].id = i;
        K->bufs[i].dtype = k->in[i].dtype;
        K->bufs[i].noalias = 1;
        if ((L.in_ix[i] = ix_affine(&L, k->in[i].strides, 0, k->ndim))
            == NULL) {
            return NULL;
        }
        K->bytes_read += stax_nvrtc_dtype_size(k->in[i].dtype) * total;
    }
    /* output layouts: OUTER contiguous over the outer dims; INNER
     * contiguous over the broadcast shape, seen in iteration order */
    for (int j = nouter - 1; j >= 0; j--) {
        ostride[j] = acc;
        acc *= k->sizes[j];
    }
    {
        int64_t c = 1;
        for (int d = k->bndim - 1; d >= 0; d--) {
            cst[d] = c;
            c *= k->bshape[d];
        }
        for (int j = 0; j < k->ndim; j++) {
            istride[j] = cst[k->order[j]];
        }
    }
    K->work = total;
    for (int s = 0; s < k->nstages; s++) {
        xstage *xs = &k->st[s];
        stax_stage *ks = &K->stages[s];
        ks->kind = xs->kind;
        ks->n = 1;
        if (xs->kind == STAX_STAGE_REDUCE) {
            stax_lacc *a = &K->accs[nacc];
            ks->first = nacc++;
            a->op = (stax_red_t)xs->op;
            a->dtype = xs->dtype;
            if (a->op == STAX_RED_ARGMAX || a->op == STAX_RED_ARGMIN) {
                int64_t rstride[STAX_MAX_DIMS] = {0}, r = 1;
                for (int j = k->ndim - 1; j >= nouter; j--) {
                    rstride[j] = r;
                    r *= k->sizes[j];
                }
                a->dtype = STAX_INT64;
                a->value = lower_x(&L, xs->body);
                a->index = ix_affine(&L, rstride, nouter, k->ndim);
                if (a->index == NULL) {
                    return NULL;
                }
            }
            else if (a->op == STAX_RED_ANY || a->op == STAX_RED_ALL) {
                a->value = lower_as(&L, xs->body, STAX_BOOL);
            }
            else {
                a->value = lower_as(&L, xs->body, a->dtype);
            }
            if (a->value == NULL) {
                return NULL;
            }
            continue;
        }
        {
            int ob = k->ninputs + (int)(ks->first = K->nstores);
            stax_lstore *st = &K->stores[K->nstores++];
            int inner = xs->kind == STAX_STAGE_INNER && k->nred > 0;
            if (!inner) {
                ks->kind = STAX_STAGE_OUTER;
            }
            K->bufs[ob].id = ob;
            K->bufs[ob].dtype = xs->dtype;
            K->bufs[ob].is_output = 1;
            K->bufs[ob].noalias = 1;
            st->buf = ob;
            st->index = inner ? ix_affine(&L, istride, 0, k->ndim)
                              : ix_affine(&L, ostride, 0, nouter);
            st->value = lower_as(&L, xs->body, xs->dtype);
            if (st->index == NULL || st->value == NULL) {
                return NULL;
            }
            K->bytes_written += stax_nvrtc_dtype_size(xs->dtype)
                                * (inner ? total : acc);
        }
    }
    K->nstages = k->nstages;
    K->naccs = nacc;
    return K;
}

/* ------------------------------------------------------------ layouts */

static int
read_i64_tuple(PyObject *o, int64_t *out, int *n)
{
    PyObject *seq = PySequence_Fast(o, "expected a sequence of ints");
    if (seq == NULL) {
        return -1;
    }
    if (PySequence_Fast_GET_SIZE(seq) > STAX_MAX_DIMS) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "too many dimensions");
        return -1;
    }
    *n = (int)PySequence_Fast_GET_SIZE(seq);
    for (int i = 0; i < *n; i++) {
        out[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

/* An example input: a Tensor (shape, stride(), dtype), a NumPy array
 * (shape, strides in bytes, dtype) or a (dtype, shape) pair (contiguous). */
static int
read_layout(PyObject *x, xinput *in)
{
    PyObject *shape = NULL, *st = NULL, *dt = NULL, *dts = NULL;
    int rc = -1, n2 = 0;
    const char *s;

    if (PyTuple_Check(x) && PyTuple_GET_SIZE(x) == 2) {
        dt = Py_NewRef(PyTuple_GET_ITEM(x, 0));
        shape = Py_NewRef(PyTuple_GET_ITEM(x, 1));
    }
    else {
        shape = PyObject_GetAttrString(x, "shape");
        dt = shape ? PyObject_GetAttrString(x, "dtype") : NULL;
        if (dt == NULL) {
            PyErr_Format(PyExc_TypeError, "NVRTC back end: example input "
                         "must be a tensor or array, got %.100s",
                         Py_TYPE(x)->tp_name);
            goto done;
        }
    }
    if (read_i64_tuple(shape, in->shape, &in->ndim) < 0) {
        goto done;
    }
    dts = PyObject_Str(dt);
    if (dts == NULL || (s = PyUnicode_AsUTF8(dts)) == NULL
        || stax_nvrtc_dtype_parse(s, &in->dtype) < 0) {
        goto done;
    }
    /* strides: x.stride() (elements) or x.strides (bytes) or contiguous */
    if (!PyTuple_Check(x) && PyObject_HasAttrString(x, "stride")
        && (st = PyObject_CallMethod(x, "stride", NULL)) != NULL) {
        if (read_i64_tuple(st, in->layout, &n2) < 0) {
            goto done;
        }
    }
    else if (!PyTuple_Check(x) && PyObject_HasAttrString(x, "strides")) {
        PyErr_Clear();
        st = PyObject_GetAttrString(x, "strides");
        if (st == NULL || read_i64_tuple(st, in->layout, &n2) < 0) {
            goto done;
        }
        for (int d = 0; d < n2; d++) {
            in->layout[d] /= stax_nvrtc_dtype_size(in->dtype);
        }
    }
    else {
        int64_t acc = 1;
        PyErr_Clear();
        n2 = in->ndim;
        for (int d = in->ndim - 1; d >= 0; d--) {
            in->layout[d] = acc;
            acc *= in->shape[d] > 0 ? in->shape[d] : 1;
        }
    }
    if (n2 != in->ndim) {
        PyErr_SetString(PyExc_ValueError, "stride/shape length mismatch");
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(shape);
    Py_XDECREF(st);
    Py_XDECREF(dt);
    Py_XDECREF(dts);
    return rc;
}

/* dims: None (all), an int, or a sequence; normalized into red[] flags */
static int
read_dims(PyObject *dims, int ndim, int *red)
{
    int64_t v[STAX_MAX_DIMS];
    int n = 0;
    if (dims == NULL || dims == Py_None) {
        for (int d = 0; d < ndim; d++) {
            red[d] = 1;
        }
        return 0;
    }
    if (PyLong_Check(dims)) {
        v[0] = PyLong_AsLongLong(dims);
        n = 1;
        if (v[0] == -1 && PyErr_Occurred()) {
            return -1;
        }
    }
    else if (read_i64_tuple(dims, v, &n) < 0) {
        return -1;
    }
    if (n == 0) {
        for (int d = 0; d < ndim; d++) {
            red[d] = 1;
        }
    }
    for (int i = 0; i < n; i++) {
        int64_t d = v[i] < 0 ? v[i] + ndim : v[i];
        if (d < 0 || d >= (ndim ? ndim : 1)) {
            PyErr_Format(PyExc_IndexError, "Dimension out of range (expected "
                         "to be in range of [%d, %d], but got %lld)", -ndim,
                         ndim - 1, (long long)v[i]);
            return -1;
        }
        if (ndim) {
            red[d] = 1;
        }
    }
    return 0;
}

/* Lay out the iteration space: broadcast shape of all inputs; kept dims
 * first, reduced dims (red[d]) last; per-input strides; output shape. */
static int
layout_kernel(spec_t *k, const int *red_in, int keepdim)
{
    int nd = 0, red[STAX_MAX_DIMS] = {0}, order[STAX_MAX_DIMS], n = 0;
    int64_t bshape[STAX_MAX_DIMS];

    for (int i = 0; i < k->ninputs; i++) {
        if (k->in[i].ndim > nd) {
            nd = k->in[i].ndim;
        }
    }
    for (int d = 0; d < nd; d++) {
        bshape[d] = 1;
    }
    for (int i = 0; i < k->ninputs; i++) {
        int off = nd - k->in[i].ndim;
        for (int d = 0; d < k->in[i].ndim; d++) {
            int64_t s = k->in[i].shape[d];
            if (s != 1) {
                if (bshape[off + d] != 1 && bshape[off + d] != s) {
                    PyErr_Format(PyExc_RuntimeError, "The size of tensor a "
                                 "(%lld) must match the size of tensor b "
                                 "(%lld) at non-singleton dimension %d",
                                 (long long)bshape[off + d], (long long)s,
                                 off + d);
                    return -1;
                }
                bshape[off + d] = s;
            }
        }
    }
    if (red_in != NULL) {
        memcpy(red, red_in, sizeof(red));
    }
    for (int d = 0; d < nd; d++) {
        if (!red[d]) {
            order[n++] = d;
        }
    }
    k->nred = 0;
    for (int d = 0; d < nd; d++) {
        if (red[d]) {
            order[n++] = d;
            k->nred++;
        }
    }
    k->ndim = nd;
    k->bndim = nd;
    for (int j = 0; j < nd; j++) {
        k->sizes[j] = bshape[order[j]];
        k->order[j] = order[j];
        k->bshape[j] = bshape[j];
    }
    for (int i = 0; i < k->ninputs; i++) {
        int off = nd - k->in[i].ndim;
        for (int j = 0; j < nd; j++) {
            int d = order[j] - off;
            k->in[i].strides[j] = (d < 0 || k->in[i].shape[d] == 1)
                ? 0 : k->in[i].layout[d];
        }
    }
    k->out_ndim = 0;
    for (int d = 0; d < nd; d++) {
        if (!red[d]) {
            k->out_shape[k->out_ndim++] = bshape[d];
        }
        else if (keepdim) {
            k->out_shape[k->out_ndim++] = 1;
        }
    }
    return 0;
}

/* result dtype of a reduction of values of dtype dt (PyTorch rules) */
static stax_dtype_t
reduction_dtype(const red_row *r, stax_dtype_t dt)
{
    switch (r->op) {
    case STAX_RED_ANY: case STAX_RED_ALL:
        return STAX_BOOL;
    case STAX_RED_ARGMAX: case STAX_RED_ARGMIN:
        return STAX_INT64;
    case STAX_RED_SUM: case STAX_RED_PROD:
        if (!stax_nvrtc_is_float(dt)) {
            /* torch: integer sums accumulate in int64; mean is float */
            return r->mean ? STAX_FLOAT32 : STAX_INT64;
        }
        return dt;
    default:
        return dt;
    }
}

static int
set_reduction(spec_t *k, const char *name)
{
    const red_row *r = find_reduction(name);
    if (r == NULL) {
        PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: no "
                     "reduction '%s'", name);
        return -1;
    }
    k->reduce = (int)r->op;
    k->mean = r->mean;
    k->out_dtype = reduction_dtype(r, k->body->dtype);
    return 0;
}

static void
set_name(char *dst, PyObject *name, const char *dflt)
{
    const char *s = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name)
                                                   : NULL;
    if (s == NULL) {
        PyErr_Clear();
        s = dflt;
    }
    snprintf(dst, NAME_LEN, "%s", s);
}

/* ------------------------------------------------------------ records */

static PyObject *
i64_tuple(const int64_t *v, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t != NULL && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (x == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

static int
append_new(PyObject *list, PyObject *v)
{
    int rc = v == NULL ? -1 : PyList_Append(list, v);
    Py_XDECREF(v);
    return rc;
}

/* Lower the spec, render it, wrap it: a types.SimpleNamespace with name,
 * source (CUDA C), loop_ir, kind, grid, block, start, end, sizes, inputs,
 * in_dtypes, in_shapes, in_layouts, output_shape, output_dtype,
 * bytes_read, bytes_written, backend. nvrtc_launch() takes it. */
static void
handle_capsule_free(PyObject *cap)
{
    stax_backend *be = stax_lower_get_backend("nvrtc");
    void *h = PyCapsule_GetPointer(cap, STAX_NVRTC_HANDLE_CAPSULE);
    if (h != NULL && be != NULL) {
        be->free(be, h);
    }
    else {
        PyErr_Clear();
    }
}

/* compile through the registered back end (vtable): the record gets .ptx
 * and ._handle (a capsule), which nvrtc_launch() then runs via be->launch */
static int
compile_via_vtable(stax_kernel *K, PyObject *kw)
{
    stax_backend *be = stax_lower_get_backend("nvrtc");
    void *h;
    PyObject *cap;
    if (be == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "nvrtc back end not registered");
        return -1;
    }
    if ((h = be->compile_kernel(be, K, NULL)) == NULL) {
        return -1;
    }
    cap = PyCapsule_New(h, STAX_NVRTC_HANDLE_CAPSULE, handle_capsule_free);
    if (cap == NULL) {
        be->free(be, h);
        return -1;
    }
    if (PyDict_SetItemString(kw, "_handle", cap) < 0
        || PyDict_SetItemString(kw, "ptx", stax_nvrtc_handle_ptx(h)) < 0) {
        Py_DECREF(cap);
        return -1;
    }
    Py_DECREF(cap);
    return 0;
}

static PyObject *
kernel_record(spec_t *k, int compile)
{
    stax_arena *arena = NULL;
    stax_kernel *K;
    int64_t grid[3], block[3], end;
    PyObject *src = NULL, *ir = NULL, *kw = NULL, *ns = NULL, *res = NULL;
    PyObject *names = NULL, *dts = NULL, *shapes = NULL, *layouts = NULL;
    PyObject *outs = NULL, *first = NULL;

    arena = stax_arena_new();
    if (arena == NULL || (K = spec_to_kernel(k, arena)) == NULL) {
        goto done;
    }
    src = stax_nvrtc_render_kernel(K, 0);
    ir = src ? stax_lower_kernel_str(K) : NULL;
    if (ir == NULL) {
        goto done;
    }
    end = K->dims[0]->v;   /* constant extents in this stand-in */
    if (stax_nvrtc_launch_config(K, NULL, 0, end, grid, block) < 0) {
        goto done;
    }
    names = PyList_New(0);
    dts = PyList_New(0);
    shapes = PyList_New(0);
    layouts = PyList_New(0);
    outs = PyList_New(0);
    if (!names || !dts || !shapes || !layouts || !outs) {
        goto done;
    }
    for (int s = 0; s < k->nstages; s++) {
        int inner = k->st[s].kind == STAX_STAGE_INNER && k->nred > 0;
        if (k->st[s].kind == STAX_STAGE_REDUCE) {
            continue;
        }
        if (append_new(outs, Py_BuildValue(
                "(Ns)", inner ? i64_tuple(k->bshape, k->bndim)
                              : i64_tuple(k->out_shape, k->out_ndim),
                stax_nvrtc_dtype_name(k->st[s].dtype))) < 0) {
            goto done;
        }
    }
    if (PyList_GET_SIZE(outs) == 0) {
        PyErr_SetString(PyExc_ValueError, "kernel has no output");
        goto done;
    }
    first = PyList_GET_ITEM(outs, 0);   /* borrowed */
    for (int i = 0; i < k->ninputs; i++) {
        if (append_new(names, PyUnicode_FromString(k->in[i].label)) < 0
            || append_new(dts, PyUnicode_FromString(
                   stax_nvrtc_dtype_name(k->in[i].dtype))) < 0
            || append_new(shapes, i64_tuple(k->in[i].shape, k->in[i].ndim))
               < 0
            || append_new(layouts, i64_tuple(k->in[i].layout, k->in[i].ndim))
               < 0) {
            goto done;
        }
    }
    kw = Py_BuildValue(
        "{s:s,s:O,s:O,s:s,s:(LLL),s:(LLL),s:L,s:L,s:(),s:O,s:O,s:O,s:O,"
        "s:O,s:s,s:O,s:L,s:L,s:s}",
        "name", K->name, "source", src, "loop_ir", ir,
        "kind", K->ninner > 0 ? "reduction" : "pointwise",
        "grid", (long long)grid[0], (long long)grid[1], (long long)grid[2],
        "block", (long long)block[0], (long long)block[1],
        (long long)block[2], "start", 0LL, "end", (long long)end,
        "sizes", "inputs", names, "in_dtypes", dts, "in_shapes", shapes,
        "in_layouts", layouts,
        "output_shape", PyTuple_GET_ITEM(first, 0),
        "output_dtype", PyUnicode_AsUTF8(PyTuple_GET_ITEM(first, 1)),
        "outputs", outs,
        "bytes_read", (long long)K->bytes_read,
        "bytes_written", (long long)K->bytes_written, "backend", "nvrtc");
    if (kw == NULL || (compile && compile_via_vtable(K, kw) < 0)) {
        goto done;
    }
    {
        PyObject *types = PyImport_ImportModule("types");
        PyObject *empty = PyTuple_New(0);
        ns = types ? PyObject_GetAttrString(types, "SimpleNamespace") : NULL;
        if (ns != NULL && empty != NULL) {
            res = PyObject_Call(ns, empty, kw);
        }
        Py_XDECREF(types);
        Py_XDECREF(empty);
    }
done:
    if (arena != NULL) {
        stax_arena_free(arena);
    }
    Py_XDECREF(src);
    Py_XDECREF(ir);
    Py_XDECREF(kw);
    Py_XDECREF(ns);
    Py_XDECREF(names);
    Py_XDECREF(dts);
    Py_XDECREF(shapes);
    Py_XDECREF(layouts);
    Py_XDECREF(outs);
    return res;
}

/* ------------------------------------------------------------ render_expr */

PyObject *
stax_nvrtc_py_render_expr(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"expr", "inputs", "reduce", "dims", "keepdim",
                             "name", "compile", NULL};
    const char *expr = NULL, *reduce = NULL, *name = "stax_kernel";
    PyObject *inputs = NULL, *dims = Py_None, *seq = NULL, *res = NULL;
    int keepdim = 0, compile = 0, red[STAX_MAX_DIMS] = {0};
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
    k = PyMem_Calloc(1, sizeof(*k));
    if (k == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    snprintf(k->name, sizeof(k->name), "%s", name);
    k->reduce = -1;
    k->ninputs = (int)PySequence_Fast_GET_SIZE(seq);
    if (k->ninputs > 8) {
        PyErr_SetString(PyExc_ValueError, "at most 8 inputs (a .. h)");
        goto done;
    }
    for (int i = 0; i < k->ninputs; i++) {
        if (read_layout(PySequence_Fast_GET_ITEM(seq, i), &k->in[i]) < 0) {
            goto done;
        }
        snprintf(k->in[i].label, NAME_LEN, "%c", 'a' + i);
        if ((ops[i] = new_load(k, i)) == NULL) {
            goto done;
        }
    }
    k->body = parse_formula(k, expr, ops, k->ninputs, NULL, NULL);
    if (k->body == NULL) {
        goto done;
    }
    {
        int nd = 0;
        for (int i = 0; i < k->ninputs; i++) {
            nd = k->in[i].ndim > nd ? k->in[i].ndim : nd;
        }
        if (reduce != NULL && read_dims(dims, nd, red) < 0) {
            goto done;
        }
    }
    if (layout_kernel(k, reduce ? red : NULL, keepdim) < 0) {
        goto done;
    }
    k->out_dtype = k->body->dtype;
    if (reduce != NULL && set_reduction(k, reduce) < 0) {
        goto done;
    }
    res = kernel_record(k, compile);
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
    k = PyMem_Calloc(1, sizeof(*k));
    if (k == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    snprintf(k->name, sizeof(k->name), "%s", name);
    k->reduce = -1;
    k->ninputs = (int)PySequence_Fast_GET_SIZE(seq);
    if (k->ninputs > 8 || PySequence_Fast_GET_SIZE(sseq) > MAX_STAGES
        || PySequence_Fast_GET_SIZE(sseq) == 0) {
        PyErr_SetString(PyExc_ValueError, "1 to 8 inputs (a .. h) and 1 to 8 "
                        "stages");
        goto done;
    }
    for (int i = 0; i < k->ninputs; i++) {
        if (read_layout(PySequence_Fast_GET_ITEM(seq, i), &k->in[i]) < 0) {
            goto done;
        }
        snprintf(k->in[i].label, NAME_LEN, "%c", 'a' + i);
        nd = k->in[i].ndim > nd ? k->in[i].ndim : nd;
        if ((ops[i] = new_load(k, i)) == NULL) {
            goto done;
        }
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
    if (read_dims(dims, nd, red) < 0 || layout_kernel(k, red, keepdim) < 0) {
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
            const red_row *r = expr ? find_reduction(op) : NULL;
            if (r == NULL || r->mean) {
                PyErr_Format(PyExc_ValueError, "stage %zd: ('reduce', op, "
                             "expr) with op in sum prod amax amin argmax "
                             "argmin any all", s);
                goto done;
            }
            if ((xs->body = parse_formula(k, expr, ops, k->ninputs, NULL,
                                          NULL)) == NULL) {
                goto done;
            }
            xs->kind = STAX_STAGE_REDUCE;
            xs->op = (int)r->op;
            xs->dtype = reduction_dtype(r, xs->body->dtype);
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
        if ((xs->body = parse_formula(k, op, ops, k->ninputs, NULL, NULL))
            == NULL) {
            goto done;
        }
        xs->kind = kind[0] == 'i' ? STAX_STAGE_INNER : STAX_STAGE_OUTER;
        xs->dtype = xs->body->dtype;
        k->nstages++;
    }
    res = kernel_record(k, compile);
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
        return new_const(k, (double)v, PyBool_Check(a) ? STAX_BOOL
                                                     : STAX_INT64);
    }
    if (PyFloat_Check(a)) {
        return new_const(k, PyFloat_AS_DOUBLE(a), STAX_FLOAT32);
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
            if (read_layout(PySequence_Fast_GET_ITEM(inseq, nph),
                            &k->in[nph]) < 0) {
                goto node_done;
            }
            set_name(k->in[nph].label, name, "in");
            k->ninputs = nph + 1;
            x = new_load(k, nph);
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
            op = find_op(opname);
            bc.schema = op ? op->schema : "(Tensor self, int[]? dim=None, "
                                          "bool keepdim=False)";
            bc.args = args;
            bc.kwargs = kwargs;
            bc.opname = opname;
            if (find_reduction(opname) != NULL
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
                x = parse_formula(k, op->formula, ops, nt, scalar_arg,
                                     &bc);
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
        if (read_dims(reduce_dims, nd, red) < 0
            || layout_kernel(k, red, keepdim) < 0) {
            goto done;
        }
        if (set_reduction(k, reduce_name) < 0) {
            goto done;
        }
    }
    else {
        if (layout_kernel(k, NULL, 0) < 0) {
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
    obj = kernel_record(k, compile);
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
