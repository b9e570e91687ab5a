/* A stand-in lowering for the NVRTC back end: a spec (expression trees
 * over the loop IR's scalar primitives, from a GraphModule, an S-expression
 * or a list of stages: nvrtc_graph.c) becomes ONE fused kernel of lower.h's
 * loop-level IR, rendered by nvrtc_render.c and wrapped as a kernel record.
 * Formulas are the op table's (ops.def) S-expressions, parsed here; Python
 * scalars are weak (they take the tensor's dtype, as in PyTorch); casts are
 * inserted so that each primitive's operands have its dtype, as lower.h
 * requires. The lower room's own lowering drives the same renderer through
 * the stax_backend vtable (backend_nvrtc_init.c). */
#include "backend_nvrtc/nvrtc_spec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const op_row op_rows[] = {
#define STAX_OP(ID, nm, KIND, ar, schema, ovl, inpl, formula, decomp, flags) \
    {#nm, KIND, ar, schema, formula},
#include "ops/ops.def"
    {NULL, 0, 0, NULL, NULL},
};

const op_row *
stax_nvrtc_find_op(const char *name)
{
    for (int i = 0; op_rows[i].name != NULL; i++) {
        if (strcmp(op_rows[i].name, name) == 0) {
            return &op_rows[i];
        }
    }
    return NULL;
}

static const red_row red_rows[] = {
    {"sum", STAX_RED_SUM, 0}, {"prod", STAX_RED_PROD, 0},
    {"amax", STAX_RED_MAX, 0}, {"amin", STAX_RED_MIN, 0},
    {"max", STAX_RED_MAX, 0}, {"min", STAX_RED_MIN, 0},
    {"argmax", STAX_RED_ARGMAX, 0}, {"argmin", STAX_RED_ARGMIN, 0},
    {"any", STAX_RED_ANY, 0}, {"all", STAX_RED_ALL, 0},
    {"mean", STAX_RED_SUM, 1}, {NULL, 0, 0},
};

const red_row *
stax_nvrtc_find_reduction(const char *name)
{
    for (int i = 0; red_rows[i].name != NULL; i++) {
        if (strcmp(red_rows[i].name, name) == 0) {
            return &red_rows[i];
        }
    }
    return NULL;
}

/* ------------------------------------------------------------ exprs */
#define PF_BOOL 1u    /* result is bool */
#define PF_FLOAT 2u   /* integer operands compute in float32 */
#define PF_LOGIC 4u   /* operands are bool */
#define PF_INT64 8u   /* operands and result are int64 (philox) */

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
    case STAX_PRIM_PHILOX:
        return PF_INT64;
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
    if (prim_flags(e->prim) & PF_INT64) {
        *weak = 0;
        return STAX_INT64;
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

xnode *
stax_nvrtc_new_load(spec_t *k, int input)
{
    xnode *e = new_node(k);
    if (e != NULL) {
        e->kind = X_LOAD;
        e->input = input;
        e->dtype = k->in[input].dtype;
    }
    return e;
}

xnode *
stax_nvrtc_new_const(spec_t *k, double v, stax_dtype_t dt)
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
    if (!stax_nvrtc_renders_prim(p)) {
        PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: primitive "
                     "'%s' not supported", stax_prim_name(p));
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
        return stax_nvrtc_new_const(k, v == Py_True, STAX_BOOL);
    }
    if (PyLong_Check(v)) {
        long long x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred()) {
            return NULL;
        }
        return stax_nvrtc_new_const(k, (double)x, STAX_INT64);
    }
    if (PyFloat_Check(v)) {
        return stax_nvrtc_new_const(k, PyFloat_AS_DOUBLE(v), STAX_FLOAT32);
    }
    PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: operand of type "
                 "%.100s is neither a node of this kernel nor a number",
                 Py_TYPE(v)->tp_name);
    return NULL;
}

/* ------------------------------------------------------------ parser */


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
        return stax_nvrtc_new_const(p->k, v, STAX_FLOAT32);
    }
    if (strcmp(atom, "true") == 0 || strcmp(atom, "false") == 0) {
        return stax_nvrtc_new_const(p->k, atom[0] == 't', STAX_BOOL);
    }
    {
        char *end = NULL;
        double v = strtod(atom, &end);
        if (end == NULL || *end != '\0') {
            return bad(p, "unknown atom");
        }
        return stax_nvrtc_new_const(p->k, v, strpbrk(atom, ".eE")
                                             ? STAX_FLOAT32 : STAX_INT64);
    }
}

xnode *
stax_nvrtc_parse_formula(spec_t *k, const char *formula, xnode **ops,
                         int nops, scalar_fn scalar, void *ctx)
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
        args[1] = stax_nvrtc_new_const(k, (double)cnt, STAX_FLOAT32);
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
int
stax_nvrtc_read_layout(PyObject *x, xinput *in)
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
int
stax_nvrtc_read_dims(PyObject *dims, int ndim, int *red)
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
int
stax_nvrtc_layout_kernel(spec_t *k, const int *red_in, int keepdim)
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
stax_dtype_t
stax_nvrtc_reduction_dtype(const red_row *r, stax_dtype_t dt)
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

int
stax_nvrtc_set_reduction(spec_t *k, const char *name)
{
    const red_row *r = stax_nvrtc_find_reduction(name);
    if (r == NULL) {
        PyErr_Format(PyExc_NotImplementedError, "NVRTC renderer: no "
                     "reduction '%s'", name);
        return -1;
    }
    k->reduce = (int)r->op;
    k->mean = r->mean;
    k->out_dtype = stax_nvrtc_reduction_dtype(r, k->body->dtype);
    return 0;
}

void
stax_nvrtc_set_name(char *dst, PyObject *name, const char *dflt)
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

PyObject *
stax_nvrtc_kernel_record(spec_t *k, int compile)
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
