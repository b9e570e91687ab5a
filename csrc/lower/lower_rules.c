/* Lowering rules: one graph node -> a virtual buffer (a function from
 * indices to values) or a kernel draft.  Pointwise ops are lowered from the
 * op table's S-expression formulas; views are index maps; reductions and
 * normalizations build reduction kernels whose prologue is the (inlined)
 * body of their input. */
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "stax_numpy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define UNSUPPORTED(msg) do { *why = (msg); return 0; } while (0)

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

static vbuf *
vb_new(lw_ctx *c)
{
    vbuf *v = stax_arena_alloc(c->arena, sizeof(vbuf));
    if (v) {
        v->pbuf = -1;
    }
    return v;
}

/* the vbuf of a Node argument, or NULL (not a node) */
static vbuf *
arg_vb(struct lw_node_in *in, PyObject *o)
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

static int
is_number(PyObject *o)
{
    return PyLong_Check(o) || PyFloat_Check(o) || PyBool_Check(o);
}

/* schema parameter index by name (-1 none) */
static int
param_index(const stax_op_info *op, const char *name)
{
    const char *s = op->schema;
    int idx = 0;
    size_t n = strlen(name);
    const char *p = s;
    while (*p) {
        /* a parameter: "Type name[=default]" separated by ',' ; '*' alone */
        while (*p == '(' || *p == ' ' || *p == ',') {
            p++;
        }
        if (*p == ')' || *p == 0) {
            break;
        }
        const char *e = p;
        int depth = 0;
        while (*e && !(depth == 0 && (*e == ',' || *e == ')'))) {
            if (*e == '[' || *e == '(') {
                depth++;
            }
            if (*e == ']') {
                depth--;
            }
            e++;
        }
        if (!(e - p == 1 && *p == '*')) {
            /* name = last word before '=' */
            const char *eq = memchr(p, '=', (size_t)(e - p));
            const char *ne = eq ? eq : e;
            const char *nb = ne;
            while (nb > p && nb[-1] != ' ') {
                nb--;
            }
            if ((size_t)(ne - nb) == n && strncmp(nb, name, n) == 0) {
                return idx;
            }
            idx++;
        }
        p = e;
    }
    return -1;
}

static PyObject *
bound_arg(PyObject *bound, const stax_op_info *op, const char *name)
{
    int i = param_index(op, name);
    if (i < 0 || i >= PyTuple_GET_SIZE(bound)) {
        return NULL;
    }
    return PyTuple_GET_ITEM(bound, i);
}

/* ----------------------------------------------------------- broadcast */
/* body of v, broadcast to an output of ndim dims (right aligned) */
static const stax_lval *
bcast(lw_ctx *c, vbuf *v, int ndim, const int64_t *sizes,
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

static void
ident_vars(lw_ctx *c, int n, const stax_ix **vars)
{
    for (int d = 0; d < n; d++) {
        vars[d] = lw_ix_var(c, d);
    }
}

/* ------------------------------------------------------------ promotion */
static int
dt_cat(stax_dtype_t d)
{
    return d == STAX_BOOL ? 0 : (lw_is_float(d) ? 2 : 1);
}

/* torch.result_type over tensor operands (vbufs) and Python scalars */
static stax_dtype_t
result_type(vbuf **vs, PyObject **scal, int n)
{
    int have_t = 0, have_z = 0, scat = -1;
    stax_dtype_t dt = STAX_BOOL, dz = STAX_BOOL;
    for (int i = 0; i < n; i++) {
        if (vs[i] != NULL) {
            if (vs[i]->ndim > 0) {
                dt = have_t ? stax_promote_types(dt, vs[i]->dtype) : vs[i]->dtype;
                have_t = 1;
            }
            else {
                dz = have_z ? stax_promote_types(dz, vs[i]->dtype) : vs[i]->dtype;
                have_z = 1;
            }
        }
        else if (scal[i] != NULL) {
            int k = PyBool_Check(scal[i]) ? 0 : (PyFloat_Check(scal[i]) ? 2 : 1);
            scat = k > scat ? k : scat;
        }
    }
    if (!have_t) {
        dt = dz;
        have_t = have_z;
    }
    else if (have_z && dt_cat(dz) > dt_cat(dt)) {
        dt = dz;
    }
    if (!have_t) {
        return scat == 2 ? stax_default_dtype() : (scat == 1 ? STAX_INT64 : STAX_BOOL);
    }
    if (scat > dt_cat(dt)) {
        dt = scat == 2 ? stax_default_dtype() : STAX_INT64;
    }
    return dt;
}

/* ------------------------------------------------------------- formulas */
typedef struct {
    lw_ctx *c;
    struct lw_node_in *in;
    PyObject *bound;
    const stax_op_info *op;
    int nout;
    int64_t osizes[STAX_MAX_DIMS];
    const stax_ix *ovars[STAX_MAX_DIMS];
    stax_dtype_t cd;             /* computation dtype */
    const char *p;               /* parse position */
    const char *why;
} fctx;

typedef struct {
    const stax_lval *v;
    int none;
    int weak;                    /* a literal / Python scalar */
    PyObject *str;               /* a string argument (case) */
} fval;

static void
skip_ws(fctx *f)
{
    while (*f->p == ' ' || *f->p == '\n' || *f->p == '\t') {
        f->p++;
    }
}

static int
read_tok(fctx *f, char *buf, size_t n)
{
    skip_ws(f);
    size_t i = 0;
    while (*f->p && *f->p != ' ' && *f->p != '(' && *f->p != ')' && i + 1 < n) {
        buf[i++] = *f->p++;
    }
    buf[i] = 0;
    return (int)i;
}

static fval f_eval(fctx *f);

static fval
f_operand(fctx *f, PyObject *o)
{
    fval r = {0};
    vbuf *v = arg_vb(f->in, o);
    if (v != NULL) {
        if (v->kind != VB_TENSOR) {
            f->why = "operand is not a tensor";
            return r;
        }
        r.v = bcast(f->c, v, f->nout, f->osizes, f->ovars);
        return r;
    }
    if (o == Py_None) {
        r.none = 1;
        return r;
    }
    if (PyUnicode_Check(o)) {
        r.str = o;
        return r;
    }
    if (is_number(o)) {
        double x = PyFloat_Check(o) ? PyFloat_AS_DOUBLE(o) : (double)PyLong_AsLongLong(o);
        stax_dtype_t dt = PyBool_Check(o) ? STAX_BOOL
                          : PyFloat_Check(o) ? STAX_FLOAT64 : STAX_INT64;
        r.v = lw_const(f->c, dt, x);
        r.weak = 1;
        return r;
    }
    if (StaxTensor_Type != NULL && StaxTensor_Check(o) && ((StaxTensor *)o)->ndim == 0) {
        /* a 0-d constant tensor: its value */
        PyObject *item = PyObject_CallMethod(o, "item", NULL);
        if (item != NULL && is_number(item)) {
            fval q = f_operand(f, item);
            Py_DECREF(item);
            return q;
        }
        Py_XDECREF(item);
        PyErr_Clear();
    }
    f->why = "unsupported operand";
    return r;
}

static stax_dtype_t
pair_type(fval *a, fval *b)
{
    if (a->weak && !b->weak) {
        stax_dtype_t bt = b->v->dtype, at = a->v->dtype;
        return dt_cat(at) > dt_cat(bt) ? (at == STAX_FLOAT64 ? stax_default_dtype() : at) : bt;
    }
    if (b->weak && !a->weak) {
        return pair_type(b, a);
    }
    if (a->weak && b->weak) {
        stax_dtype_t t = stax_promote_types(a->v->dtype, b->v->dtype);
        return t == STAX_FLOAT64 ? stax_default_dtype() : t;
    }
    return stax_promote_types(a->v->dtype, b->v->dtype);
}

static fval
f_prim(fctx *f, int prim, fval *x, int n)
{
    fval r = {0};
    lw_ctx *c = f->c;
    stax_prim_t p = (stax_prim_t)prim;
    /* None operands: min/max with None is the identity (clamp) */
    if ((p == STAX_PRIM_MAXNAN || p == STAX_PRIM_MINNAN || p == STAX_PRIM_MAX
         || p == STAX_PRIM_MIN) && n == 2 && (x[0].none || x[1].none)) {
        return x[0].none ? x[1] : x[0];
    }
    for (int i = 0; i < n; i++) {
        if (x[i].v == NULL) {
            if (f->why == NULL) {
                f->why = "missing operand";
            }
            return r;
        }
    }
    const stax_lval *a[3] = {NULL, NULL, NULL};
    stax_dtype_t rt = f->cd;
    switch (p) {
    case STAX_PRIM_EQ: case STAX_PRIM_NE: case STAX_PRIM_LT:
    case STAX_PRIM_LE: case STAX_PRIM_GT: case STAX_PRIM_GE: {
        stax_dtype_t t = pair_type(&x[0], &x[1]);
        a[0] = lw_cast(c, x[0].v, t);
        a[1] = lw_cast(c, x[1].v, t);
        rt = STAX_BOOL;
        break;
    }
    case STAX_PRIM_AND: case STAX_PRIM_OR: case STAX_PRIM_XOR: case STAX_PRIM_NOT:
        for (int i = 0; i < n; i++) {
            a[i] = lw_cast(c, x[i].v, STAX_BOOL);
        }
        rt = STAX_BOOL;
        break;
    case STAX_PRIM_ISNAN: case STAX_PRIM_ISINF: case STAX_PRIM_ISFINITE:
        a[0] = x[0].v;
        rt = STAX_BOOL;
        break;
    case STAX_PRIM_WHERE:
        a[0] = lw_cast(c, x[0].v, STAX_BOOL);
        a[1] = lw_cast(c, x[1].v, f->cd);
        a[2] = lw_cast(c, x[2].v, f->cd);
        break;
    default:
        for (int i = 0; i < n; i++) {
            a[i] = lw_cast(c, x[i].v, f->cd);
        }
        if (!lw_is_float(f->cd)) {
            switch (p) {
            case STAX_PRIM_EXP: case STAX_PRIM_LOG: case STAX_PRIM_SQRT:
            case STAX_PRIM_SIN: case STAX_PRIM_COS: case STAX_PRIM_TANH:
            case STAX_PRIM_ERF: case STAX_PRIM_RSQRT: case STAX_PRIM_EXPM1:
            case STAX_PRIM_LOG1P: case STAX_PRIM_SIGMOID:
                f->why = "transcendental primitive on an integer dtype";
                return r;
            default:
                break;
            }
        }
        break;
    }
    r.v = lw_prim(c, p, rt, a[0], a[1], a[2]);
    return r;
}

static fval
f_eval(fctx *f)
{
    fval r = {0};
    char tok[64];
    skip_ws(f);
    if (*f->p == '(') {
        f->p++;
        read_tok(f, tok, sizeof(tok));
        if (strcmp(tok, "case") == 0) {
            fval sel = f_eval(f);
            fval chosen = {0};
            int found = 0;
            for (;;) {
                skip_ws(f);
                if (*f->p == ')' || *f->p == 0) {
                    break;
                }
                char key[64];
                read_tok(f, key, sizeof(key));
                int match = 0;
                if (strcmp(key, "None") == 0) {
                    match = sel.none;
                }
                else if (sel.str != NULL) {
                    match = PyUnicode_CompareWithASCIIString(sel.str, key) == 0;
                }
                if (match && !found) {
                    chosen = f_eval(f);
                    found = 1;
                }
                else {
                    /* skip the expression */
                    skip_ws(f);
                    if (*f->p == '(') {
                        int depth = 0;
                        do {
                            if (*f->p == '(') depth++;
                            if (*f->p == ')') depth--;
                            f->p++;
                        } while (depth > 0 && *f->p);
                    }
                    else {
                        read_tok(f, key, sizeof(key));
                    }
                }
            }
            if (*f->p == ')') {
                f->p++;
            }
            if (!found) {
                f->why = "no case of the formula matches the argument";
            }
            return chosen;
        }
        int prim = stax_prim_from_name(tok);
        if (prim < 0) {
            f->why = "formula uses an unknown primitive";
            return r;
        }
        fval x[3] = {{0}};
        int n = 0;
        for (;;) {
            skip_ws(f);
            if (*f->p == ')' || *f->p == 0) {
                break;
            }
            if (n == 3) {
                f->why = "formula arity";
                return r;
            }
            x[n++] = f_eval(f);
            if (f->why != NULL) {
                return r;
            }
        }
        if (*f->p == ')') {
            f->p++;
        }
        if (n != stax_prim_arity((stax_prim_t)prim)) {
            f->why = "formula arity mismatch";
            return r;
        }
        return f_prim(f, prim, x, n);
    }
    read_tok(f, tok, sizeof(tok));
    if (tok[0] >= 'a' && tok[0] <= 'd' && tok[1] == 0) {
        int i = tok[0] - 'a';
        if (i >= PyTuple_GET_SIZE(f->bound)) {
            f->why = "formula operand out of range";
            return r;
        }
        return f_operand(f, PyTuple_GET_ITEM(f->bound, i));
    }
    if (tok[0] == '$') {
        PyObject *o = bound_arg(f->bound, f->op, tok + 1);
        if (o == NULL) {
            f->why = "formula names an unknown argument";
            return r;
        }
        return f_operand(f, o);
    }
    double x;
    if (strcmp(tok, "inf") == 0) {
        x = INFINITY;
    }
    else if (strcmp(tok, "-inf") == 0) {
        x = -INFINITY;
    }
    else if (strcmp(tok, "nan") == 0) {
        x = NAN;
    }
    else {
        char *end;
        x = strtod(tok, &end);
        if (end == tok) {
            f->why = "bad formula token";
            return r;
        }
    }
    r.v = lw_const(f->c, f->cd, x);
    r.weak = 1;
    return r;
}

static int
lower_formula(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
              const char *formula, vbuf *out, const char **why)
{
    fctx f;
    memset(&f, 0, sizeof(f));
    f.c = c;
    f.in = in;
    f.bound = bound;
    f.op = in->op;
    f.nout = out->ndim;
    memcpy(f.osizes, out->sizes, sizeof(int64_t) * (size_t)out->ndim);
    ident_vars(c, out->ndim, f.ovars);
    f.cd = out->dtype;
    if (in->op->flags & STAX_OPF_COMPARISON) {
        vbuf *vs[4] = {NULL};
        PyObject *sc[4] = {NULL};
        int n = in->op->arity < 4 ? in->op->arity : 4;
        for (int i = 0; i < n && i < PyTuple_GET_SIZE(bound); i++) {
            PyObject *o = PyTuple_GET_ITEM(bound, i);
            vs[i] = arg_vb(in, o);
            sc[i] = (vs[i] == NULL && is_number(o)) ? o : NULL;
        }
        f.cd = result_type(vs, sc, n);
    }
    f.p = formula;
    fval r = f_eval(&f);
    if (PyErr_Occurred()) {
        return -1;
    }
    if (f.why != NULL || r.v == NULL) {
        *why = f.why ? f.why : "formula did not produce a value";
        return 0;
    }
    out->body = lw_cast(c, r.v, out->dtype);
    return out->body ? 1 : -1;
}

/* ------------------------------------------------------------- helpers */
static int
norm_dim(int64_t d, int n)
{
    if (n == 0) {
        return (d == 0 || d == -1) ? 0 : -1;    /* a 0-d tensor: dim 0 / -1 */
    }
    if (d < 0) {
        d += n;
    }
    return (d < 0 || d >= (n ? n : 1)) ? -1 : (int)d;
}

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
        int d = norm_dim(PyLong_AsLongLong(o), n);
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
            int d = norm_dim(PyLong_AsLongLong(e), n);
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

static int
add_stage(kdraft *k, stax_stage_kind_t kind, int first, int n)
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
    if (add_stage(k, STAX_STAGE_REDUCE, i, 1) < 0) {
        return -1;
    }
    return i;
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
    if (add_stage(k, inner ? STAX_STAGE_INNER : STAX_STAGE_OUTER, s, 1) < 0) {
        return -1;
    }
    out->pbuf = pb;
    out->body = lw_contig_load(c, pb);
    return out->body ? 0 : -1;
}

static double
num(PyObject *o, double dflt)
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

static stax_dtype_t
acc_float(stax_dtype_t dt)
{
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
        items[i] = vb_new(c);
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

static int
lower_reduction(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                vbuf *out, const char **why)
{
    const char *name = in->op->name;
    int mask[STAX_MAX_DIMS];
    PyObject *dim = bound_arg(bound, in->op, "dim");
    if (strcmp(name, "max") == 0 || strcmp(name, "min") == 0) {
        if (dim != NULL && dim != Py_None && !PyLong_Check(dim)) {
            UNSUPPORTED("max/min with a tensor second operand");
        }
    }
    if (dims_mask(dim, x->ndim, mask) < 0) {
        UNSUPPORTED("reduction dims not understood");
    }
    redk r;
    if (red_begin(c, x, mask, name, &r) < 0) {
        return -1;
    }
    kdraft *k = r.k;
    const stax_lval *v = red_value(c, x, &r);
    if (v == NULL) {
        return -1;
    }
    stax_dtype_t odt = out->kind == VB_TENSOR ? out->dtype : x->dtype;
    double n = (double)r.n;
    int a0;
    if (!strcmp(name, "sum") || !strcmp(name, "mean")) {
        stax_dtype_t ad = odt;
        a0 = add_acc(k, STAX_RED_SUM, ad, lw_cast(c, v, ad), NULL);
        if (a0 < 0) {
            return -1;
        }
        const stax_lval *res = lw_acc(c, a0, ad);
        if (!strcmp(name, "mean")) {
            res = lw_prim(c, STAX_PRIM_DIV, ad, res, lw_size_const(c, ad, r.n), NULL);
        }
        return red_store(c, &r, x, mask, out, res, 0);
    }
    if (!strcmp(name, "prod")) {
        a0 = add_acc(k, STAX_RED_PROD, odt, lw_cast(c, v, odt), NULL);
        return a0 < 0 ? -1 : red_store(c, &r, x, mask, out, lw_acc(c, a0, odt), 0);
    }
    if (!strcmp(name, "amax") || !strcmp(name, "amin")
        || ((!strcmp(name, "max") || !strcmp(name, "min")) && (dim == NULL || dim == Py_None))) {
        int mx = !strcmp(name, "amax") || !strcmp(name, "max");
        a0 = add_acc(k, mx ? STAX_RED_MAX : STAX_RED_MIN, x->dtype, v, NULL);
        return a0 < 0 ? -1 : red_store(c, &r, x, mask, out, lw_acc(c, a0, x->dtype), 0);
    }
    if (!strcmp(name, "max") || !strcmp(name, "min")) {
        vbuf *items[2];
        if (tuple_out(c, in, out, 2, items) < 0) {
            return -1;
        }
        int mx = !strcmp(name, "max");
        a0 = add_acc(k, mx ? STAX_RED_MAX : STAX_RED_MIN, x->dtype, v, NULL);
        int a1 = a0 < 0 ? -1 : add_acc_same(k, mx ? STAX_RED_ARGMAX : STAX_RED_ARGMIN,
                                            STAX_INT64, v, r.rlinear);
        if (a1 < 0) {
            return -1;
        }
        if (red_store(c, &r, x, mask, items[0], lw_acc(c, a0, x->dtype), 0) < 0) {
            return -1;
        }
        return red_store(c, &r, x, mask, items[1], lw_acc(c, a1, STAX_INT64), 0);
    }
    if (!strcmp(name, "argmax") || !strcmp(name, "argmin")) {
        a0 = add_acc(k, name[3] == 'm' && name[4] == 'a' ? STAX_RED_ARGMAX : STAX_RED_ARGMIN,
                     STAX_INT64, v, r.rlinear);
        return a0 < 0 ? -1 : red_store(c, &r, x, mask, out, lw_acc(c, a0, STAX_INT64), 0);
    }
    if (!strcmp(name, "any") || !strcmp(name, "all")) {
        a0 = add_acc(k, name[1] == 'n' ? STAX_RED_ANY : STAX_RED_ALL, STAX_BOOL,
                     lw_cast(c, v, STAX_BOOL), NULL);
        return a0 < 0 ? -1 : red_store(c, &r, x, mask, out, lw_acc(c, a0, STAX_BOOL), 0);
    }
    if (!strcmp(name, "var") || !strcmp(name, "std") || !strcmp(name, "var_mean")
        || !strcmp(name, "std_mean")) {
        stax_dtype_t fd = acc_float(x->dtype);
        double corr = 1.0;
        PyObject *unb = bound_arg(bound, in->op, "unbiased");
        PyObject *co = bound_arg(bound, in->op, "correction");
        if (unb != NULL && unb != Py_None) {
            corr = PyObject_IsTrue(unb) ? 1.0 : 0.0;
        }
        if (co != NULL && co != Py_None) {
            corr = num(co, 1.0);
        }
        const stax_lval *xv = lw_cast(c, v, fd);
        a0 = add_acc(k, STAX_RED_SUM, fd, xv, NULL);
        if (a0 < 0) {
            return -1;
        }
        const stax_lval *mean = lw_prim(c, STAX_PRIM_DIV, fd, lw_acc(c, a0, fd),
                                        lw_size_const(c, fd, r.n), NULL);
        const stax_lval *dv = lw_prim(c, STAX_PRIM_SUB, fd, xv, mean, NULL);
        int a1 = add_acc(k, STAX_RED_SUM, fd, lw_prim(c, STAX_PRIM_MUL, fd, dv, dv, NULL), NULL);
        if (a1 < 0) {
            return -1;
        }
        const stax_lval *var = n == 0 ? lw_const(c, fd, NAN)
                               : lw_prim(c, STAX_PRIM_DIV, fd, lw_acc(c, a1, fd),
                                         c->symbolic && r.n > 1
                                         ? lw_prim(c, STAX_PRIM_SUB, fd,
                                                   lw_size_const(c, fd, r.n),
                                                   lw_const(c, fd, corr), NULL)
                                         : lw_const(c, fd, n - corr), NULL);
        int sd = name[0] == 's';
        if (sd) {
            var = lw_prim(c, STAX_PRIM_SQRT, fd, var, NULL, NULL);
        }
        if (strstr(name, "_mean")) {
            vbuf *items[2];
            if (tuple_out(c, in, out, 2, items) < 0) {
                return -1;
            }
            if (red_store(c, &r, x, mask, items[0], var, 0) < 0) {
                return -1;
            }
            return red_store(c, &r, x, mask, items[1], mean, 0);
        }
        return red_store(c, &r, x, mask, out, var, 0);
    }
    if (!strcmp(name, "logsumexp")) {
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
        return red_store(c, &r, x, mask, out, res, 0);
    }
    if (!strcmp(name, "norm")) {
        stax_dtype_t fd = acc_float(x->dtype);
        PyObject *po = bound_arg(bound, in->op, "p");
        double p = num(po, 2.0);
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
        return red_store(c, &r, x, mask, out, res, 0);
    }
    UNSUPPORTED("reduction without a lowering rule");
}

/* softmax / log_softmax over one dim: max, sum(exp), normalize: 1 kernel */
static int
lower_softmax(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
              vbuf *out, int logsm, const char **why)
{
    PyObject *dim = bound_arg(bound, in->op, "dim");
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
    stax_dtype_t fd = out->dtype;
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

static int
lower_layer_norm(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                 vbuf *out, int native, const char **why)
{
    PyObject *ns = bound_arg(bound, in->op, "normalized_shape");
    PyObject *wo = bound_arg(bound, in->op, "weight");
    PyObject *bo = bound_arg(bound, in->op, "bias");
    double eps = num(bound_arg(bound, in->op, "eps"), 1e-5);
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
    vbuf *w = wo ? arg_vb(in, wo) : NULL, *b = bo ? arg_vb(in, bo) : NULL;
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
    int a0 = add_acc(r.k, STAX_RED_SUM, fd, xv, NULL);
    if (a0 < 0) {
        return -1;
    }
    const stax_lval *mean = lw_prim(c, STAX_PRIM_DIV, fd, lw_acc(c, a0, fd),
                                    lw_size_const(c, fd, r.n), NULL);
    const stax_lval *dv = lw_prim(c, STAX_PRIM_SUB, fd, xv, mean, NULL);
    int a1 = add_acc(r.k, STAX_RED_SUM, fd, lw_prim(c, STAX_PRIM_MUL, fd, dv, dv, NULL), NULL);
    if (a1 < 0) {
        return -1;
    }
    const stax_lval *var = lw_prim(c, STAX_PRIM_DIV, fd, lw_acc(c, a1, fd),
                                   lw_size_const(c, fd, r.n), NULL);
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
static int
lower_batch_norm(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                 vbuf *out, const char **why)
{
    PyObject *tr = bound_arg(bound, in->op, "training");
    if (tr == NULL || PyObject_IsTrue(tr)) {
        UNSUPPORTED("batch_norm in training mode (updates running statistics)");
    }
    vbuf *rm = arg_vb(in, bound_arg(bound, in->op, "running_mean"));
    vbuf *rv = arg_vb(in, bound_arg(bound, in->op, "running_var"));
    PyObject *wo = bound_arg(bound, in->op, "weight"), *bo = bound_arg(bound, in->op, "bias");
    vbuf *w = wo ? arg_vb(in, wo) : NULL, *b = bo ? arg_vb(in, bo) : NULL;
    if (rm == NULL || rv == NULL || x->ndim < 2) {
        UNSUPPORTED("batch_norm without running statistics");
    }
    double eps = num(bound_arg(bound, in->op, "eps"), 1e-5);
    stax_dtype_t fd = out->dtype;
    const stax_ix *ov[STAX_MAX_DIMS];
    ident_vars(c, x->ndim, ov);
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

/* ----------------------------------------------------------------- views */
/* out dims -> input var map, then rewrite x's body */
static int
view_map(lw_ctx *c, vbuf *x, vbuf *out, const stax_ix *const *map)
{
    lw_rw rw = {0};
    rw.vars = map;
    rw.nvars = x->ndim;
    out->body = lw_rewrite(c, &rw, x->body);
    lw_rw_done(&rw);
    return out->body ? 1 : -1;
}

/* torch's computeStride: strides of a view of (shape, stride) as newshape */
static int
view_strides(int on, const int64_t *os, const int64_t *ost, int nn,
             const int64_t *ns, int64_t *nst)
{
    if (on == 0) {
        for (int d = 0; d < nn; d++) {
            nst[d] = 1;
        }
        return 1;
    }
    int view_d = nn - 1;
    int64_t chunk = ost[on - 1], tn = 1, vn = 1;
    for (int td = on - 1; td >= 0; td--) {
        tn *= os[td];
        if (td == 0 || (os[td - 1] != 1 && ost[td - 1] != tn * chunk)) {
            while (view_d >= 0 && (vn < tn || ns[view_d] == 1)) {
                nst[view_d] = vn * chunk;
                vn *= ns[view_d];
                view_d--;
            }
            if (vn != tn) {
                return 0;
            }
            if (td > 0) {
                chunk = ost[td - 1];
                tn = 1;
                vn = 1;
            }
        }
    }
    return view_d == -1;
}

static int
lower_reshape(lw_ctx *c, vbuf *x, vbuf *out)
{
    int64_t coef[STAX_MAX_DIMS], cst, nst[STAX_MAX_DIMS];
    const stax_lval *b = x->body;
    if (b->kind == STAX_LV_LOAD && b->mask == NULL
        && lw_ix_affine(b->index, x->ndim, coef, &cst)) {
        int64_t numel = 1;
        for (int d = 0; d < x->ndim; d++) {
            numel *= x->sizes[d];
        }
        if (numel > 0 && view_strides(x->ndim, x->sizes, coef, out->ndim, out->sizes, nst)) {
            const stax_ix *ix = lw_ix_const(c, cst);
            for (int d = out->ndim - 1; d >= 0; d--) {
                if (out->sizes[d] != 1) {
                    ix = lw_ix_bin(c, STAX_IX_ADD,
                                   lw_ix_bin(c, STAX_IX_MUL, lw_ix_var(c, d),
                                             lw_ix_const(c, nst[d])), ix);
                }
            }
            out->body = lw_load(c, b->buf, ix, NULL);
            return out->body ? 1 : -1;
        }
    }
    /* general: through the linear index (div / mod) */
    const stax_ix *ov[STAX_MAX_DIMS], *map[STAX_MAX_DIMS];
    ident_vars(c, out->ndim, ov);
    const stax_ix *lin = lw_contig_index(c, out->ndim, out->sizes, ov);
    int64_t st = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        map[d] = x->sizes[d] == 1 ? lw_ix_const(c, 0)
                 : lw_ix_bin(c, STAX_IX_MOD, lw_ix_bin(c, STAX_IX_DIV, lin, lw_ix_const(c, st)),
                             lw_ix_const(c, x->sizes[d]));
        st *= x->sizes[d];
    }
    return view_map(c, x, out, map);
}

static int
int_list(PyObject *o, int64_t *v, int max)
{
    if (PyLong_Check(o)) {
        v[0] = PyLong_AsLongLong(o);
        return 1;
    }
    if (!PyList_Check(o) && !PyTuple_Check(o)) {
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    if (n > max) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(o, i);
        if (!PyLong_Check(e)) {
            return -1;
        }
        v[i] = PyLong_AsLongLong(e);
    }
    return (int)n;
}

/* getitem with ints, slices, None, Ellipsis */
static int
lower_getitem(lw_ctx *c, vbuf *x, PyObject *idx, vbuf *out, const char **why)
{
    PyObject *items[2 * STAX_MAX_DIMS];
    Py_ssize_t n;
    if (PyTuple_Check(idx)) {
        n = PyTuple_GET_SIZE(idx);
        if (n > 2 * STAX_MAX_DIMS) {
            UNSUPPORTED("index too long");
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            items[i] = PyTuple_GET_ITEM(idx, i);
        }
    }
    else {
        n = 1;
        items[0] = idx;
    }
    int consumed = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyLong_Check(items[i]) || PySlice_Check(items[i])) {
            consumed++;
        }
        else if (items[i] != Py_None && items[i] != Py_Ellipsis) {
            UNSUPPORTED("advanced (tensor) indexing");
        }
    }
    const stax_ix *map[STAX_MAX_DIMS];
    int xd = 0, od = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = items[i];
        if (it == Py_Ellipsis) {
            int skip = x->ndim - consumed;
            for (int j = 0; j < skip; j++) {
                map[xd++] = lw_ix_var(c, od++);
            }
            consumed = x->ndim;   /* only one ellipsis */
        }
        else if (it == Py_None) {
            od++;
        }
        else if (PyLong_Check(it)) {
            if (xd >= x->ndim) {
                UNSUPPORTED("too many indices");
            }
            int64_t k = PyLong_AsLongLong(it);
            if (k < 0) {
                k += x->sizes[xd];
            }
            map[xd++] = lw_ix_const(c, k);
        }
        else {
            if (xd >= x->ndim) {
                UNSUPPORTED("too many indices");
            }
            Py_ssize_t start, stop, step;
            if (PySlice_Unpack(it, &start, &stop, &step) < 0) {
                return -1;
            }
            PySlice_AdjustIndices((Py_ssize_t)x->sizes[xd], &start, &stop, step);
            if (step <= 0) {
                UNSUPPORTED("non-positive slice step");
            }
            map[xd++] = lw_ix_bin(c, STAX_IX_ADD, lw_ix_const(c, start),
                                  lw_ix_bin(c, STAX_IX_MUL, lw_ix_var(c, od++),
                                            lw_ix_const(c, step)));
        }
    }
    while (xd < x->ndim) {
        map[xd++] = lw_ix_var(c, od++);
    }
    if (od != out->ndim) {
        UNSUPPORTED("index result rank mismatch");
    }
    return view_map(c, x, out, map);
}

static int
lower_view(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
           vbuf *out, const char **why)
{
    const char *name = in->op->name;
    const stax_ix *map[STAX_MAX_DIMS];
    if (!strcmp(name, "view") || !strcmp(name, "reshape") || !strcmp(name, "flatten")
        || !strcmp(name, "unflatten") || !strcmp(name, "squeeze") || !strcmp(name, "unsqueeze")) {
        if (out->kind != VB_TENSOR || (!strcmp(name, "view") && out->dtype != x->dtype)) {
            UNSUPPORTED("view as another dtype");
        }
        return lower_reshape(c, x, out);
    }
    if (!strcmp(name, "detach") || !strcmp(name, "alias")) {
        out->body = x->body;
        return 1;
    }
    if (!strcmp(name, "t") || !strcmp(name, "transpose") || !strcmp(name, "permute")) {
        int perm[STAX_MAX_DIMS];
        for (int d = 0; d < x->ndim; d++) {
            perm[d] = d;
        }
        if (!strcmp(name, "t")) {
            if (x->ndim == 2) {
                perm[0] = 1;
                perm[1] = 0;
            }
        }
        else if (!strcmp(name, "transpose")) {
            PyObject *d0 = bound_arg(bound, in->op, "dim0"), *d1 = bound_arg(bound, in->op, "dim1");
            if (!d0 || !d1 || !PyLong_Check(d0) || !PyLong_Check(d1)) {
                UNSUPPORTED("transpose dims");
            }
            int a = norm_dim(PyLong_AsLongLong(d0), x->ndim);
            int b = norm_dim(PyLong_AsLongLong(d1), x->ndim);
            if (a < 0 || b < 0) {
                UNSUPPORTED("transpose dims");
            }
            perm[a] = b;
            perm[b] = a;
        }
        else {
            int64_t p[STAX_MAX_DIMS];
            PyObject *dims = bound_arg(bound, in->op, "dims");
            if (dims == NULL || int_list(dims, p, STAX_MAX_DIMS) != x->ndim) {
                UNSUPPORTED("permute dims");
            }
            for (int d = 0; d < x->ndim; d++) {
                perm[d] = norm_dim(p[d], x->ndim);
                if (perm[d] < 0) {
                    UNSUPPORTED("permute dims");
                }
            }
        }
        /* out dim k reads input dim perm[k] */
        for (int k = 0; k < x->ndim; k++) {
            map[perm[k]] = lw_ix_var(c, k);
        }
        return view_map(c, x, out, map);
    }
    if (!strcmp(name, "expand") || !strcmp(name, "expand_as")) {
        int off = out->ndim - x->ndim;
        for (int d = 0; d < x->ndim; d++) {
            map[d] = (x->sizes[d] == 1) ? lw_ix_const(c, 0) : lw_ix_var(c, off + d);
        }
        return view_map(c, x, out, map);
    }
    if (!strcmp(name, "select") || !strcmp(name, "narrow") || !strcmp(name, "slice")) {
        PyObject *dobj = bound_arg(bound, in->op, "dim");
        int d = dobj && PyLong_Check(dobj) ? norm_dim(PyLong_AsLongLong(dobj), x->ndim) : -1;
        if (d < 0) {
            UNSUPPORTED("select/narrow dim");
        }
        int od = 0;
        for (int j = 0; j < x->ndim; j++) {
            if (j != d) {
                map[j] = lw_ix_var(c, od++);
            }
            else if (name[0] == 's' && name[1] == 'e') {
                int64_t i = PyLong_AsLongLong(bound_arg(bound, in->op, "index"));
                map[j] = lw_ix_const(c, i < 0 ? i + x->sizes[d] : i);
            }
            else if (name[0] == 'n') {
                int64_t s = PyLong_AsLongLong(bound_arg(bound, in->op, "start"));
                map[j] = lw_ix_bin(c, STAX_IX_ADD, lw_ix_const(c, s < 0 ? s + x->sizes[d] : s),
                                   lw_ix_var(c, od++));
            }
            else {
                PyObject *so = bound_arg(bound, in->op, "start");
                PyObject *eo = bound_arg(bound, in->op, "end");
                PyObject *sto = bound_arg(bound, in->op, "step");
                PyObject *sl = PySlice_New(so, eo, sto);
                if (sl == NULL) {
                    return -1;
                }
                Py_ssize_t s, e, st;
                int rc = PySlice_Unpack(sl, &s, &e, &st);
                Py_DECREF(sl);
                if (rc < 0) {
                    return -1;
                }
                PySlice_AdjustIndices((Py_ssize_t)x->sizes[d], &s, &e, st);
                map[j] = lw_ix_bin(c, STAX_IX_ADD, lw_ix_const(c, s),
                                   lw_ix_bin(c, STAX_IX_MUL, lw_ix_var(c, od++),
                                             lw_ix_const(c, st)));
            }
        }
        if (PyErr_Occurred()) {
            return -1;
        }
        return view_map(c, x, out, map);
    }
    if (!strcmp(name, "getitem")) {
        PyObject *idx = bound_arg(bound, in->op, "index");
        if (idx == NULL) {
            UNSUPPORTED("getitem index");
        }
        return lower_getitem(c, x, idx, out, why);
    }
    if (!strcmp(name, "split") || !strcmp(name, "chunk") || !strcmp(name, "unbind")) {
        if (!PyTuple_Check(in->val) && !PyList_Check(in->val)) {
            UNSUPPORTED("split without a tuple value");
        }
        PyObject *dobj = bound_arg(bound, in->op, "dim");
        int d = dobj && PyLong_Check(dobj) ? norm_dim(PyLong_AsLongLong(dobj), x->ndim) : 0;
        if (d < 0) {
            UNSUPPORTED("split dim");
        }
        PyObject *seq = PySequence_Tuple(in->val);
        if (seq == NULL) {
            return -1;
        }
        Py_ssize_t n = PyTuple_GET_SIZE(seq);
        out->kind = VB_TUPLE;
        out->nitems = (int)n;
        out->items = stax_arena_alloc(c->arena, sizeof(vbuf *) * (size_t)(n ? n : 1));
        int64_t off = 0;
        int unbind = !strcmp(name, "unbind");
        for (Py_ssize_t i = 0; i < n; i++) {
            vbuf *it = vb_new(c);
            int64_t st[STAX_MAX_DIMS];
            if (it == NULL || out->items == NULL
                || !lw_val_info(PyTuple_GET_ITEM(seq, i), &it->ndim, it->sizes, st, &it->dtype)) {
                Py_DECREF(seq);
                if (!PyErr_Occurred()) {
                    UNSUPPORTED("split item");
                }
                return -1;
            }
            it->kind = VB_TENSOR;
            int od = 0;
            for (int j = 0; j < x->ndim; j++) {
                if (j == d) {
                    map[j] = unbind ? lw_ix_const(c, off)
                                    : lw_ix_bin(c, STAX_IX_ADD, lw_ix_const(c, off),
                                                lw_ix_var(c, od++));
                }
                else {
                    map[j] = lw_ix_var(c, od++);
                }
            }
            off += unbind ? 1 : it->sizes[d];
            if (view_map(c, x, it, map) < 0) {
                Py_DECREF(seq);
                return -1;
            }
            out->items[i] = it;
        }
        Py_DECREF(seq);
        return 1;
    }
    UNSUPPORTED("view without a lowering rule");
}

/* mask every load of body (cat / pad arms) */
typedef struct {
    lw_ctx *c;
    const stax_lval *mask;
} mask_ctx;

static int
mask_hook(lw_rw *rw, const stax_lval *load, const stax_lval **out)
{
    mask_ctx *m = rw->hook_ctx;
    lw_rw inner = {0};
    const stax_ix *ix = lw_rewrite_ix(m->c, &inner, load->index);
    lw_rw_done(&inner);
    const stax_lval *mk = m->mask;
    if (load->mask != NULL) {
        mk = lw_prim(m->c, STAX_PRIM_AND, STAX_BOOL, mk, load->mask, NULL);
    }
    *out = lw_load(m->c, load->buf, ix, mk);
    return *out ? 1 : -1;
}

static const stax_lval *
masked(lw_ctx *c, const stax_lval *body, const stax_lval *mask)
{
    mask_ctx m = {c, mask};
    lw_rw rw = {0};
    rw.load_hook = mask_hook;
    rw.hook_ctx = &m;
    const stax_lval *r = lw_rewrite(c, &rw, body);
    lw_rw_done(&rw);
    return r;
}

static const stax_lval *
in_range(lw_ctx *c, const stax_ix *v, int64_t lo, int64_t hi)
{
    const stax_lval *iv = lw_index(c, v, STAX_INT64);
    return lw_prim(c, STAX_PRIM_AND, STAX_BOOL,
                   lw_prim(c, STAX_PRIM_GE, STAX_BOOL, iv, lw_const(c, STAX_INT64, (double)lo), NULL),
                   lw_prim(c, STAX_PRIM_LT, STAX_BOOL, iv, lw_const(c, STAX_INT64, (double)hi), NULL),
                   NULL);
}

static int
lower_cat(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *out,
          int stack, const char **why)
{
    PyObject *ts = PyTuple_GET_ITEM(bound, 0);
    PyObject *dobj = bound_arg(bound, in->op, "dim");
    if (!PyList_Check(ts) && !PyTuple_Check(ts)) {
        UNSUPPORTED("cat of a non-list");
    }
    int d = dobj && PyLong_Check(dobj) ? norm_dim(PyLong_AsLongLong(dobj), out->ndim) : -1;
    if (d < 0) {
        UNSUPPORTED("cat dim");
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ts);
    const stax_lval *acc = NULL;
    int64_t off = 0;
    const stax_ix *ov[STAX_MAX_DIMS];
    ident_vars(c, out->ndim, ov);
    for (Py_ssize_t i = 0; i < n; i++) {
        vbuf *v = arg_vb(in, PySequence_Fast_GET_ITEM(ts, i));
        if (v == NULL || v->kind != VB_TENSOR) {
            UNSUPPORTED("cat of a non-tensor");
        }
        if (!stack && v->ndim == 1 && v->sizes[0] == 0 && out->ndim != 1) {
            continue;   /* legacy empty tensors */
        }
        int64_t len = stack ? 1 : v->sizes[d];
        if (len == 0) {
            continue;
        }
        const stax_ix *map[STAX_MAX_DIMS];
        int j = 0;
        for (int k = 0; k < out->ndim; k++) {
            if (k == d) {
                if (!stack) {
                    map[j++] = lw_ix_bin(c, STAX_IX_ADD, ov[k], lw_ix_const(c, -off));
                }
            }
            else {
                map[j++] = ov[k];
            }
        }
        lw_rw rw = {0};
        rw.vars = map;
        rw.nvars = v->ndim;
        const stax_lval *b = lw_cast(c, lw_rewrite(c, &rw, v->body), out->dtype);
        lw_rw_done(&rw);
        if (b == NULL) {
            return -1;
        }
        const stax_lval *m = in_range(c, ov[d], off, off + len);
        b = masked(c, b, m);
        acc = acc == NULL ? b : lw_prim(c, STAX_PRIM_WHERE, out->dtype, m, b, acc);
        off += len;
    }
    out->body = acc ? acc : lw_const(c, out->dtype, 0);
    return out->body ? 1 : -1;
}

static int
lower_pad(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
          vbuf *out, const char **why)
{
    PyObject *mode = bound_arg(bound, in->op, "mode");
    if (mode && PyUnicode_Check(mode) && PyUnicode_CompareWithASCIIString(mode, "constant")) {
        UNSUPPORTED("pad mode other than constant");
    }
    int64_t p[2 * STAX_MAX_DIMS];
    PyObject *po = bound_arg(bound, in->op, "pad");
    int np = po ? int_list(po, p, 2 * STAX_MAX_DIMS) : -1;
    if (np < 0 || np % 2 || np / 2 > x->ndim) {
        UNSUPPORTED("pad widths");
    }
    double val = num(bound_arg(bound, in->op, "value"), 0.0);
    int64_t numel = 1;
    for (int d = 0; d < x->ndim; d++) {
        numel *= x->sizes[d];
    }
    if (numel == 0) {
        /* nothing to read: all padding (a masked load still needs a
         * readable element 0) */
        out->body = lw_const(c, out->dtype, val);
        return out->body ? 1 : -1;
    }
    const stax_ix *map[STAX_MAX_DIMS];
    const stax_lval *m = NULL;
    for (int d = 0; d < x->ndim; d++) {
        int k = x->ndim - 1 - d;     /* pad pairs start at the last dim */
        const stax_ix *v = lw_ix_var(c, d);
        if (2 * k + 1 < np) {
            int64_t left = p[2 * k];
            map[d] = lw_ix_bin(c, STAX_IX_ADD, v, lw_ix_const(c, -left));
            const stax_lval *r = in_range(c, v, left, left + x->sizes[d]);
            m = m ? lw_prim(c, STAX_PRIM_AND, STAX_BOOL, m, r, NULL) : r;
        }
        else {
            map[d] = v;
        }
    }
    lw_rw rw = {0};
    rw.vars = map;
    rw.nvars = x->ndim;
    const stax_lval *b = lw_rewrite(c, &rw, x->body);
    lw_rw_done(&rw);
    if (b == NULL) {
        return -1;
    }
    if (m != NULL) {
        b = lw_prim(c, STAX_PRIM_WHERE, out->dtype, m, masked(c, b, m), lw_const(c, out->dtype, val));
    }
    out->body = lw_cast(c, b, out->dtype);
    return out->body ? 1 : -1;
}

/* an index value, wrapped (negative) and clamped into [0, n) */
static const stax_ix *
safe_index(lw_ctx *c, const stax_lval *iv, int64_t n)
{
    iv = lw_cast(c, iv, STAX_INT64);
    const stax_lval *nn = lw_const(c, STAX_INT64, (double)n);
    const stax_lval *z = lw_const(c, STAX_INT64, 0);
    iv = lw_prim(c, STAX_PRIM_WHERE, STAX_INT64,
                 lw_prim(c, STAX_PRIM_LT, STAX_BOOL, iv, z, NULL),
                 lw_prim(c, STAX_PRIM_ADD, STAX_INT64, iv, nn, NULL), iv);
    iv = lw_prim(c, STAX_PRIM_MIN, STAX_INT64,
                 lw_prim(c, STAX_PRIM_MAX, STAX_INT64, iv, z, NULL),
                 lw_const(c, STAX_INT64, (double)(n > 0 ? n - 1 : 0)), NULL);
    return iv ? lw_ix_value(c, iv) : NULL;
}

static int
lower_gather(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *out,
             const char **why)
{
    const char *name = in->op->name;
    const stax_ix *map[STAX_MAX_DIMS], *ov[STAX_MAX_DIMS];
    ident_vars(c, out->ndim, ov);
    if (!strcmp(name, "embedding")) {
        vbuf *idx = arg_vb(in, PyTuple_GET_ITEM(bound, 0));
        vbuf *w = arg_vb(in, PyTuple_GET_ITEM(bound, 1));
        if (!idx || !w || w->ndim != 2 || out->ndim != idx->ndim + 1) {
            UNSUPPORTED("embedding shapes");
        }
        lw_rw rw = {0};
        rw.vars = ov;
        rw.nvars = idx->ndim;
        const stax_lval *iv = lw_rewrite(c, &rw, idx->body);
        lw_rw_done(&rw);
        map[0] = safe_index(c, iv, w->sizes[0]);
        map[1] = ov[idx->ndim];
        return view_map(c, w, out, map);
    }
    vbuf *x = arg_vb(in, PyTuple_GET_ITEM(bound, 0));
    PyObject *dobj = bound_arg(bound, in->op, "dim");
    vbuf *idx = arg_vb(in, bound_arg(bound, in->op, "index"));
    if (!x || !idx || !dobj || !PyLong_Check(dobj)) {
        UNSUPPORTED("index_select/gather operands");
    }
    int d = norm_dim(PyLong_AsLongLong(dobj), x->ndim);
    if (d < 0) {
        UNSUPPORTED("index dim");
    }
    const stax_lval *iv;
    lw_rw rw = {0};
    if (!strcmp(name, "index_select")) {
        const stax_ix *m1[1] = {ov[d]};
        rw.vars = m1;
        rw.nvars = 1;
        iv = lw_rewrite(c, &rw, idx->body);
    }
    else {
        rw.vars = ov;
        rw.nvars = idx->ndim;
        iv = lw_rewrite(c, &rw, idx->body);
    }
    lw_rw_done(&rw);
    for (int j = 0; j < x->ndim; j++) {
        map[j] = j == d ? safe_index(c, iv, x->sizes[d]) : ov[j];
    }
    return view_map(c, x, out, map);
}

/* --------------------------------------------------------------- matmul */
static int
lower_matmul(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *out,
             const char **why)
{
    const char *name = in->op->name;
    vbuf *a = arg_vb(in, PyTuple_GET_ITEM(bound, 0));
    vbuf *b = arg_vb(in, PyTuple_GET_ITEM(bound, 1));
    if (!a || !b || a->kind != VB_TENSOR || b->kind != VB_TENSOR) {
        UNSUPPORTED("matmul operands");
    }
    if (!lw_is_float(a->dtype) || a->dtype != b->dtype) {
        UNSUPPORTED("matmul of non-float or mixed dtypes");
    }
    int lin = !strcmp(name, "linear");
    vbuf *bias = NULL;
    if (lin) {
        PyObject *bo = bound_arg(bound, in->op, "bias");
        if (bo && bo != Py_None) {
            bias = arg_vb(in, bo);
            if (bias == NULL) {
                UNSUPPORTED("linear bias");
            }
        }
    }
    /* an operand that is a strided view of a buffer (x.t(), a slice) is
     * handed to the library as such, not copied */
    int64_t coef[2][STAX_MAX_DIMS], cst[2];
    int isview[2] = {0, 0};
    vbuf *ops2[2] = {a, b};
    for (int j = 0; j < 2; j++) {
        const stax_lval *bd = ops2[j]->body;
        if (ops2[j]->pbuf < 0 && bd != NULL && bd->kind == STAX_LV_LOAD && bd->mask == NULL
            && lw_ix_affine(bd->index, ops2[j]->ndim, coef[j], &cst[j]) && cst[j] >= 0) {
            isview[j] = 1;
            for (int d = 0; d < ops2[j]->ndim; d++) {
                isview[j] &= coef[j][d] >= 0;
            }
        }
    }
    int pa = isview[0] ? a->body->buf : lw_materialize(c, a);
    int pb = pa < 0 ? -1 : (isview[1] ? b->body->buf : lw_materialize(c, b));
    if (pb < 0) {
        return -1;
    }
    step_t *s = lw_new_step(c, ST_MATMUL);
    if (s == NULL) {
        return -1;
    }
    s->a = pa;
    s->b = pb;
    for (int j = 0; j < 2; j++) {
        if (isview[j]) {
            s->view[j].on = 1;
            s->view[j].ndim = ops2[j]->ndim;
            s->view[j].offset = cst[j];
            for (int d = 0; d < ops2[j]->ndim; d++) {
                s->view[j].sizes[d] = ops2[j]->sizes[d];
                s->view[j].strides[d] = coef[j][d];
            }
        }
    }
    s->transpose_b = lin;
    int po = lw_new_pbuf(c, PB_EXTERN, out->ndim, out->sizes, out->dtype);
    if (po < 0) {
        return -1;
    }
    s->out = po;
    out->body = lw_contig_load(c, po);
    if (bias == NULL) {
        out->pbuf = po;
        return out->body ? 1 : -1;
    }
    /* the bias epilogue stays a pointwise body: fused into the consumer */
    const stax_ix *ov[STAX_MAX_DIMS];
    ident_vars(c, out->ndim, ov);
    const stax_lval *bb = bcast(c, bias, out->ndim, out->sizes, ov);
    out->body = lw_prim(c, STAX_PRIM_ADD, out->dtype, out->body,
                        lw_cast(c, bb, out->dtype), NULL);
    return out->body ? 1 : -1;
}

/* functionalized writes into views: slice_scatter / select_scatter */
static int
lower_scatter(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
              vbuf *out, const char **why)
{
    const char *name = in->op->name;
    vbuf *src = arg_vb(in, PyTuple_GET_ITEM(bound, 1));
    PyObject *dobj = bound_arg(bound, in->op, "dim");
    if (src == NULL || src->kind != VB_TENSOR || x->ndim != out->ndim) {
        UNSUPPORTED("scatter operands");
    }
    int d = dobj && PyLong_Check(dobj) ? norm_dim(PyLong_AsLongLong(dobj), out->ndim) : -1;
    if (d < 0 || out->ndim == 0) {
        UNSUPPORTED("scatter dim");
    }
    const stax_ix *ov[STAX_MAX_DIMS], *map[STAX_MAX_DIMS];
    ident_vars(c, out->ndim, ov);
    const stax_lval *v = lw_index(c, ov[d], STAX_INT64);
    const stax_lval *mask;
    int j = 0;
    if (name[1] == 'l') {      /* slice_scatter */
        PyObject *sl = PySlice_New(bound_arg(bound, in->op, "start"),
                                   bound_arg(bound, in->op, "end"),
                                   bound_arg(bound, in->op, "step"));
        if (sl == NULL) {
            return -1;
        }
        Py_ssize_t st, en, stp;
        int rc = PySlice_Unpack(sl, &st, &en, &stp);
        Py_DECREF(sl);
        if (rc < 0) {
            return -1;
        }
        Py_ssize_t len = PySlice_AdjustIndices((Py_ssize_t)out->sizes[d], &st, &en, stp);
        if (stp <= 0) {
            UNSUPPORTED("scatter step");
        }
        int64_t last = len > 0 ? st + (len - 1) * stp : st - 1;
        mask = lw_prim(c, STAX_PRIM_AND, STAX_BOOL,
                       lw_prim(c, STAX_PRIM_GE, STAX_BOOL, v, lw_const(c, STAX_INT64, (double)st), NULL),
                       lw_prim(c, STAX_PRIM_LE, STAX_BOOL, v, lw_const(c, STAX_INT64, (double)last), NULL),
                       NULL);
        if (stp > 1) {
            const stax_lval *rel = lw_prim(c, STAX_PRIM_SUB, STAX_INT64, v,
                                           lw_const(c, STAX_INT64, (double)st), NULL);
            mask = lw_prim(c, STAX_PRIM_AND, STAX_BOOL, mask,
                           lw_prim(c, STAX_PRIM_EQ, STAX_BOOL,
                                   lw_prim(c, STAX_PRIM_REMAINDER, STAX_INT64, rel,
                                           lw_const(c, STAX_INT64, (double)stp), NULL),
                                   lw_const(c, STAX_INT64, 0), NULL), NULL);
        }
        for (int k = 0; k < out->ndim; k++) {
            map[k] = k != d ? ov[k]
                     : lw_ix_bin(c, STAX_IX_DIV,
                                 lw_ix_bin(c, STAX_IX_ADD, ov[k], lw_ix_const(c, -st)),
                                 lw_ix_const(c, stp));
        }
        j = out->ndim;
        if (src->ndim != out->ndim) {
            UNSUPPORTED("slice_scatter source rank");
        }
    }
    else {                     /* select_scatter */
        int64_t idx = PyLong_AsLongLong(bound_arg(bound, in->op, "index"));
        if (PyErr_Occurred()) {
            return -1;
        }
        if (idx < 0) {
            idx += out->sizes[d];
        }
        mask = lw_prim(c, STAX_PRIM_EQ, STAX_BOOL, v, lw_const(c, STAX_INT64, (double)idx), NULL);
        for (int k = 0; k < out->ndim; k++) {
            if (k != d) {
                map[j++] = ov[k];
            }
        }
        if (src->ndim != j) {
            UNSUPPORTED("select_scatter source rank");
        }
    }
    lw_rw rw = {0};
    rw.vars = map;
    rw.nvars = j;
    /* broadcast-free: the source has the slice's shape */
    const stax_lval *sb = lw_rewrite(c, &rw, src->body);
    lw_rw_done(&rw);
    if (sb == NULL || mask == NULL) {
        return -1;
    }
    sb = masked(c, lw_cast(c, sb, out->dtype), mask);
    out->body = lw_prim(c, STAX_PRIM_WHERE, out->dtype, mask, sb, lw_cast(c, x->body, out->dtype));
    return out->body ? 1 : -1;
}

/* ----------------------------------------------------------------- random
 * The same Philox stream as eager (docs/rng.md): element i (C order) of a
 * draw of W words per element uses words i*W .. i*W+W-1 from the offset
 * the runtime reserves for this draw, in node order. */
static const stax_lval *
sym_value(lw_ctx *c, int k)
{
    stax_ix *ix = stax_arena_alloc(c->arena, sizeof(stax_ix));
    if (ix == NULL) {
        return NULL;
    }
    ix->kind = STAX_IX_SYM;
    ix->v = k;
    return lw_index(c, ix, STAX_INT64);
}

typedef struct {
    const stax_lval *seed, *off, *base;   /* base = i * W */
} rdraw;

static int
rand_draw(lw_ctx *c, vbuf *out, int W, rdraw *r)
{
    if (c->nrand == 32 || c->nsyms + 2 > LW_MAX_SYMS) {
        return 0;
    }
    int s0 = c->nsyms++, s1 = c->nsyms++;
    c->sym_reserved[s0] = c->sym_reserved[s1] = 1;
    c->syms[s0] = c->syms[s1] = 0;
    int64_t numel = 1;
    for (int d = 0; d < out->ndim; d++) {
        numel *= out->sizes[d];
    }
    c->rand_seed_sym[c->nrand] = s0;
    c->rand_off_sym[c->nrand] = s1;
    c->rand_words[c->nrand] = numel * W;
    c->nrand++;
    const stax_ix *ov[STAX_MAX_DIMS];
    ident_vars(c, out->ndim, ov);
    const stax_ix *lin = lw_contig_index(c, out->ndim, out->sizes, ov);
    r->seed = sym_value(c, s0);
    r->off = sym_value(c, s1);
    r->base = lw_prim(c, STAX_PRIM_MUL, STAX_INT64, lw_index(c, lin, STAX_INT64),
                      lw_const(c, STAX_INT64, W), NULL);
    return r->seed && r->off && r->base ? 1 : -1;
}

static const stax_lval *
rword(lw_ctx *c, rdraw *r, int k)
{
    const stax_lval *j = k ? lw_prim(c, STAX_PRIM_ADD, STAX_INT64, r->base,
                                     lw_const(c, STAX_INT64, k), NULL)
                           : r->base;
    return lw_prim(c, STAX_PRIM_PHILOX, STAX_INT64, r->seed, r->off, j);
}

/* (double)(w >> 8) * 2^-24 */
static const stax_lval *
u24(lw_ctx *c, const stax_lval *w)
{
    const stax_lval *h = lw_prim(c, STAX_PRIM_FLOORDIV, STAX_INT64, w,
                                 lw_const(c, STAX_INT64, 256), NULL);
    return lw_prim(c, STAX_PRIM_MUL, STAX_FLOAT64, lw_cast(c, h, STAX_FLOAT64),
                   lw_const(c, STAX_FLOAT64, 1.0 / 16777216.0), NULL);
}

/* ((double)(a >> 5) * 67108864.0 + (double)(b >> 6)) * 2^-53 */
static const stax_lval *
u53(lw_ctx *c, const stax_lval *a, const stax_lval *b)
{
    const stax_lval *ha = lw_cast(c, lw_prim(c, STAX_PRIM_FLOORDIV, STAX_INT64, a,
                                             lw_const(c, STAX_INT64, 32), NULL), STAX_FLOAT64);
    const stax_lval *hb = lw_cast(c, lw_prim(c, STAX_PRIM_FLOORDIV, STAX_INT64, b,
                                             lw_const(c, STAX_INT64, 64), NULL), STAX_FLOAT64);
    const stax_lval *s = lw_prim(c, STAX_PRIM_ADD, STAX_FLOAT64,
                                 lw_prim(c, STAX_PRIM_MUL, STAX_FLOAT64, ha,
                                         lw_const(c, STAX_FLOAT64, 67108864.0), NULL),
                                 hb, NULL);
    return lw_prim(c, STAX_PRIM_MUL, STAX_FLOAT64, s,
                   lw_const(c, STAX_FLOAT64, 1.0 / 9007199254740992.0), NULL);
}

/* uniform [0, 1) in out's dtype (float32: W=1, float64: W=2) */
static const stax_lval *
rand_uniform(lw_ctx *c, vbuf *out, stax_dtype_t dt, int *ok)
{
    rdraw r;
    int w = dt == STAX_FLOAT64 ? 2 : 1;
    *ok = rand_draw(c, out, w, &r);
    if (*ok <= 0) {
        return NULL;
    }
    if (dt == STAX_FLOAT64) {
        const stax_lval *u = u53(c, rword(c, &r, 0), rword(c, &r, 1));
        return lw_prim(c, STAX_PRIM_ADD, STAX_FLOAT64, lw_const(c, STAX_FLOAT64, 0.0), u, NULL);
    }
    const stax_lval *u = u24(c, rword(c, &r, 0));
    u = lw_prim(c, STAX_PRIM_ADD, STAX_FLOAT64, lw_const(c, STAX_FLOAT64, 0.0), u, NULL);
    return lw_cast(c, u, STAX_FLOAT32);
}

static int
lower_random(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
             vbuf *out, const char **why)
{
    const char *name = in->op->name;
    PyObject *gen = bound_arg(bound, in->op, "generator");
    if (c->no_random) {
        UNSUPPORTED("random op next to a fallback kernel (draw order)");
    }
    if (gen != NULL && gen != Py_None) {
        UNSUPPORTED("random op with an explicit generator");
    }
    if (out->kind != VB_TENSOR || (out->dtype != STAX_FLOAT32 && out->dtype != STAX_FLOAT64)) {
        UNSUPPORTED("random op of a non-float dtype");
    }
    int ok = 0;
    if (!strcmp(name, "rand_like")) {
        out->body = rand_uniform(c, out, out->dtype, &ok);
    }
    else if (!strcmp(name, "randn_like")) {
        rdraw r;
        int f64 = out->dtype == STAX_FLOAT64;
        ok = rand_draw(c, out, f64 ? 4 : 2, &r);
        if (ok > 0) {
            const stax_lval *u1, *u2;
            if (f64) {
                u1 = u53(c, rword(c, &r, 0), rword(c, &r, 1));
                u2 = u53(c, rword(c, &r, 2), rword(c, &r, 3));
            }
            else {
                u1 = u24(c, rword(c, &r, 0));
                u2 = u24(c, rword(c, &r, 1));
            }
            stax_dtype_t D = STAX_FLOAT64;
            const stax_lval *lg = lw_prim(c, STAX_PRIM_LOG, D,
                                          lw_prim(c, STAX_PRIM_SUB, D, lw_const(c, D, 1.0), u1, NULL),
                                          NULL, NULL);
            const stax_lval *rad = lw_prim(c, STAX_PRIM_SQRT, D,
                                           lw_prim(c, STAX_PRIM_MUL, D, lw_const(c, D, -2.0), lg, NULL),
                                           NULL, NULL);
            const stax_lval *cs = lw_prim(c, STAX_PRIM_COS, D,
                                          lw_prim(c, STAX_PRIM_MUL, D,
                                                  lw_const(c, D, 2.0 * 3.14159265358979323846), u2, NULL),
                                          NULL, NULL);
            const stax_lval *z = lw_prim(c, STAX_PRIM_MUL, D, rad, cs, NULL);
            z = lw_prim(c, STAX_PRIM_ADD, D, lw_const(c, D, 0.0), z, NULL);
            out->body = lw_cast(c, z, out->dtype);
        }
    }
    else if (!strcmp(name, "dropout") && x != NULL) {
        double p = num(bound_arg(bound, in->op, "p"), 0.5);
        PyObject *tr = bound_arg(bound, in->op, "training");
        PyObject *ip = bound_arg(bound, in->op, "inplace");
        if (ip != NULL && PyObject_IsTrue(ip)) {
            UNSUPPORTED("in-place dropout");
        }
        if (p < 0 || p > 1) {
            UNSUPPORTED("dropout probability out of range (eager raises)");
        }
        if ((tr != NULL && !PyObject_IsTrue(tr)) || p == 0) {
            out->body = x->body;
            return 1;
        }
        if (p == 1) {
            out->body = lw_const(c, out->dtype, 0.0);
            return 1;
        }
        const stax_lval *u = rand_uniform(c, out, out->dtype, &ok);
        if (ok > 0) {
            stax_dtype_t dt = out->dtype;
            const stax_lval *keep = lw_prim(c, STAX_PRIM_GE, STAX_BOOL, u, lw_const(c, dt, p), NULL);
            const stax_lval *sc = lw_prim(c, STAX_PRIM_DIV, dt, lw_cast(c, x->body, dt),
                                          lw_const(c, dt, (double)(dt == STAX_FLOAT32
                                                                       ? (double)(float)(1.0 - p)
                                                                       : 1.0 - p)), NULL);
            out->body = lw_prim(c, STAX_PRIM_WHERE, dt, keep, sc, lw_const(c, dt, 0.0));
        }
    }
    else {
        UNSUPPORTED("random op without a native lowering");
    }
    if (ok == 0) {
        UNSUPPORTED("too many random draws in one program");
    }
    return out->body ? 1 : -1;
}

/* ------------------------------------------------------------- dispatch */
int
lw_lower_node(lw_ctx *c, struct lw_node_in *in, vbuf **outp, const char **why)
{
    const stax_op_info *op = in->op;
    PyObject *bound = NULL;
    int rc = 0;
    vbuf *out = vb_new(c);
    if (out == NULL) {
        return -1;
    }
    if (op == NULL) {
        UNSUPPORTED("no op of the op table matches the node's target");
    }
    size_t nl = strlen(in->opname);
    if ((op->flags & STAX_OPF_INPLACE)
        || (nl > 1 && in->opname[nl - 1] == '_' && in->opname[nl - 2] != '_')) {
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
    vbuf *x = PyTuple_GET_SIZE(bound) > 0 ? arg_vb(in, PyTuple_GET_ITEM(bound, 0)) : NULL;
    if (x != NULL && x->kind != VB_TENSOR && strcmp(op->name, "getitem") != 0) {
        Py_DECREF(bound);
        UNSUPPORTED("operand is not a lowered tensor");
    }
    const char *name = op->name;
    switch (op->kind) {
    case STAX_OPK_POINTWISE:
        if (op->formula == NULL) {
            *why = "pointwise op without a formula";
            rc = 0;
        }
        else if (!strcmp(name, "to") || !strcmp(name, "_to_copy") || !strcmp(name, "clone")
                 || !strcmp(name, "contiguous")) {
            out->body = x ? lw_cast(c, x->body, out->dtype) : NULL;
            rc = out->body ? 1 : 0;
            if (!rc) {
                *why = "copy of a non-tensor";
            }
        }
        else {
            rc = lower_formula(c, in, bound, op->formula, out, why);
        }
        break;
    case STAX_OPK_REDUCTION:
        if (x == NULL) {
            *why = "reduction of a non-tensor";
            break;
        }
        rc = lower_reduction(c, in, bound, x, out, why);
        rc = rc < 0 ? -1 : (*why && rc == 0 ? 0 : 1);
        break;
    case STAX_OPK_COMPOSITE:
        if (x == NULL) {
            *why = "composite of a non-tensor";
        }
        else if (!strcmp(name, "softmax") || !strcmp(name, "log_softmax")) {
            rc = lower_softmax(c, in, bound, x, out, name[0] == 'l', why);
            rc = rc < 0 ? -1 : (*why ? 0 : 1);
        }
        else if (!strcmp(name, "layer_norm") || !strcmp(name, "native_layer_norm")) {
            rc = lower_layer_norm(c, in, bound, x, out, name[0] == 'n', why);
            rc = rc < 0 ? -1 : (*why ? 0 : 1);
        }
        else if (!strcmp(name, "batch_norm")) {
            rc = lower_batch_norm(c, in, bound, x, out, why);
        }
        else {
            *why = "composite op not decomposed and without a fused lowering";
        }
        break;
    case STAX_OPK_VIEW:
        if (x == NULL) {
            *why = "view of a non-tensor";
        }
        else if (!strcmp(name, "getitem") && x->kind == VB_TUPLE) {
            PyObject *i = bound_arg(bound, op, "index");
            Py_ssize_t k = i && PyLong_Check(i) ? PyLong_AsSsize_t(i) : -1;
            if (k < 0) {
                k += x->nitems;
            }
            if (k < 0 || k >= x->nitems) {
                *why = "getitem of a tuple";
            }
            else {
                out = x->items[k];
                rc = 1;
            }
        }
        else if (x->kind == VB_TENSOR) {
            rc = lower_view(c, in, bound, x, out, why);
        }
        else {
            *why = "view of a non-tensor";
        }
        break;
    case STAX_OPK_EXTERN:
        rc = lower_matmul(c, in, bound, out, why);
        break;
    case STAX_OPK_OTHER:
        if (!strcmp(name, "cat") || !strcmp(name, "stack")) {
            rc = lower_cat(c, in, bound, out, name[0] == 's', why);
        }
        else if (!strcmp(name, "pad") && x != NULL) {
            rc = lower_pad(c, in, bound, x, out, why);
        }
        else if (!strcmp(name, "index_select") || !strcmp(name, "gather")
                 || !strcmp(name, "embedding")) {
            rc = lower_gather(c, in, bound, out, why);
        }
        else if ((!strcmp(name, "slice_scatter") || !strcmp(name, "select_scatter")) && x != NULL) {
            rc = lower_scatter(c, in, bound, x, out, why);
        }
        else if (!strcmp(name, "zeros_like") || !strcmp(name, "ones_like")
                 || !strcmp(name, "full_like")) {
            double v = name[0] == 'z' ? 0.0 : name[0] == 'o' ? 1.0
                       : num(bound_arg(bound, op, "fill_value"), 0.0);
            out->body = lw_const(c, out->dtype, v);
            rc = out->body ? 1 : -1;
        }
        else {
            *why = "op without a lowering rule";
        }
        break;
    case STAX_OPK_RANDOM:
        rc = lower_random(c, in, bound, x, out, why);
        break;
    default:
        *why = "op without a lowering rule";
        break;
    }
    if (rc == 1 && out->kind == VB_TENSOR && out->label == NULL) {
        /* the ops inlined into this body, for kernel names */
        char lab[48] = "";
        size_t n = 0;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(bound); i++) {
            vbuf *a = arg_vb(in, PyTuple_GET_ITEM(bound, i));
            if (a != NULL && a->kind == VB_TENSOR && a->pbuf < 0 && a->label != NULL
                && strstr(lab, a->label) == NULL) {
                n += (size_t)snprintf(lab + n, sizeof(lab) > n ? sizeof(lab) - n : 0,
                                      "%s%s", n ? "_" : "", a->label);
                if (n >= sizeof(lab)) {
                    n = sizeof(lab) - 1;
                }
            }
        }
        if (op->kind != STAX_OPK_VIEW && n + strlen(name) + 2 < sizeof(lab)) {
            snprintf(lab + n, sizeof(lab) - n, "%s%s", n ? "_" : "", name);
        }
        char *l = stax_arena_alloc(c->arena, strlen(lab) + 1);
        if (l != NULL) {
            memcpy(l, lab, strlen(lab) + 1);
            out->label = l[0] ? l : NULL;
        }
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
    if (dest->kind != VB_TENSOR || src->kind != VB_TENSOR || dest->pbuf < 0
        || c->pbufs[dest->pbuf].kind != PB_INPUT) {
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
    kdraft *k = lw_new_kernel(c, "copy_");
    if (k == NULL) {
        return -1;
    }
    const stax_ix *ov[STAX_MAX_DIMS];
    ident_vars(c, dest->ndim, ov);
    k->nouter = dest->ndim;
    for (int d = 0; d < dest->ndim; d++) {
        k->dimv[d] = dest->sizes[d];
    }
    const stax_lval *v = bcast(c, src, dest->ndim, dest->sizes, ov);
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
    return add_stage(k, STAX_STAGE_OUTER, 0, 1) < 0 ? -1 : 1;
}
