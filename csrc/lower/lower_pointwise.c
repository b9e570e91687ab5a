/* Pointwise lowering: a node whose op has a scalar formula in the op table
 * (an S-expression) becomes a virtual buffer whose body evaluates that
 * formula on its broadcast operands, with torch's type promotion
 * (result_type) over tensor operands and Python scalars. */
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "tensor/stax_numpy.h"

#include <math.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>

static int half_operands(const stax_op_info *op);

static int
is_number(PyObject *o)
{
    return PyLong_Check(o) || PyFloat_Check(o) || PyBool_Check(o);
}

/* ------------------------------------------------------------ promotion */
/* torch.result_type over tensor operands (vbufs) and Python scalars, by
 * the tensor room's one promotion routine */
static stax_dtype_t
result_type(vbuf **vs, PyObject **scal, int n)
{
    stax_promo_operand d[4];
    int k = 0;
    for (int i = 0; i < n && k < 4; i++) {
        if (vs[i] != NULL) {
            d[k].dtype = vs[i]->dtype;
            d[k++].rank = vs[i]->ndim > 0 ? STAX_PROMO_TENSOR : STAX_PROMO_ZERO_DIM;
        }
        else if (scal[i] != NULL && stax_scalar_dtype(scal[i]) >= 0) {
            d[k].dtype = (stax_dtype_t)stax_scalar_dtype(scal[i]);
            d[k++].rank = STAX_PROMO_SCALAR;
        }
    }
    return stax_result_type_of(d, k);
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
    stax_dtype_t od;             /* the node's dtype */
    const char *why;
} fctx;

typedef struct {
    const stax_lval *v;
    int none;
    int weak;                    /* a literal / Python scalar */
    PyObject *str;               /* a string argument (case) */
} fval;

static fval f_eval(fctx *f, const stax_sexp *t);

/* the rank of a tensor operand (-1: not a tensor) */
static int
operand_ndim(fctx *f, PyObject *o)
{
    vbuf *v = lw_arg_vb(f->in, o);
    if (v != NULL) {
        return v->kind == VB_TENSOR ? v->ndim : -1;
    }
    return StaxTensor_Type != NULL && StaxTensor_Check(o) ? ((StaxTensor *)o)->ndim : -1;
}

static fval
f_operand(fctx *f, PyObject *o)
{
    fval r = {0};
    vbuf *v = lw_arg_vb(f->in, o);
    if (v != NULL) {
        if (v->kind != VB_TENSOR) {
            f->why = "operand is not a tensor";
            return r;
        }
        r.v = lw_bcast(f->c, v, f->nout, f->osizes, f->ovars);
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
        if (PyLong_Check(o) && !PyBool_Check(o)) {
            /* exact: an int beyond 2^53 is not a double; one in [2^63,
             * 2^64) is torch's uint64 Scalar, wrapped to int64 */
            int ovf = 0;
            long long iv = PyLong_AsLongLongAndOverflow(o, &ovf);
            double x = (double)iv;
            if (ovf > 0) {
                iv = (long long)PyLong_AsUnsignedLongLongMask(o);
                x = PyLong_AsDouble(o);
            }
            if (PyErr_Occurred() || ovf < 0) {
                PyErr_Clear();
                f->why = "an int beyond 64 bits";
                return r;
            }
            r.v = lw_const_int(f->c, STAX_INT64, iv, x);
        }
        else {
            double x = PyFloat_Check(o) ? PyFloat_AS_DOUBLE(o) : (double)PyLong_AsLongLong(o);
            r.v = lw_const(f->c, PyBool_Check(o) ? STAX_BOOL : STAX_FLOAT64, x);
        }
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

/* The type two operands of a comparison meet in: the tensor room's one
 * promotion routine, a literal ranking as a wrapped Python scalar (torch's
 * category rule: 2.5 lifts an int tensor to the default float, 300 leaves
 * int8 alone); a float literal is wrapped as the default dtype. */
static stax_dtype_t
pair_type(fval *a, fval *b)
{
    stax_promo_operand d[2];
    fval *x[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        d[i].dtype = x[i]->v->dtype;
        d[i].rank = x[i]->weak ? STAX_PROMO_SCALAR : STAX_PROMO_TENSOR;
        if (x[i]->weak && d[i].dtype == STAX_FLOAT64) {
            d[i].dtype = stax_default_dtype();
        }
    }
    return stax_result_type_of(d, 2);
}

/* the largest finite value of a floating dtype (integers: their max,
 * never selected by nan_to_num, which has no inf to replace there) */
static double
finite_max(stax_dtype_t dt)
{
    switch (dt) {
    case STAX_FLOAT16:
        return 65504.0;
    case STAX_BFLOAT16:
        return 3.3895313892515355e38;      /* (2 - 2^-7) * 2^127 */
    case STAX_FLOAT32:
        return (double)FLT_MAX;
    case STAX_FLOAT64:
        return DBL_MAX;
    default:
        return 9007199254740992.0;
    }
}

/* d rounded to the nearest float16 (ties to even), as a double */
static double
round_to_half(double d)
{
    if (!isfinite(d) || d == 0.0) {
        return d;
    }
    double a = fabs(d);
    if (a >= 65520.0) {          /* past 65504 + half an ulp */
        return copysign(INFINITY, d);
    }
    int e;
    frexp(a, &e);
    int ex = e - 1 < -14 ? -14 : e - 1;     /* subnormals: ulp 2^-24 */
    double q = ldexp(1.0, ex - 10);
    return copysign(nearbyint(a / q) * q, d);
}

/* d rounded to the 16-bit floating dtype od, as a double */
static double
round_to_od(stax_dtype_t od, double d)
{
    if (od == STAX_BFLOAT16) {
        return (double)stax_bf16_to_float(stax_float_to_bf16((float)d));
    }
    return round_to_half(d);
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
    case STAX_PRIM_FMA:
        /* add/sub/rsub with alpha on float16/bfloat16: operands and alpha
         * rounded to the 16-bit dtype, then one float32 fma (torch's
         * reduced-precision kernels) */
        for (int i = 0; i < 3; i++) {
            const stax_lval *v = x[i].v;
            if (!stax_dtype_is_half_like(f->od) || !half_operands(f->op)) {
                /* lerp's fma (torch's lerp_vec) reads float32 operands */
                a[i] = lw_cast(c, v, f->cd);
            }
            else if (v->kind == STAX_LV_CONST) {
                a[i] = lw_const(c, f->cd, round_to_od(f->od, v->f));
            }
            else {
                a[i] = lw_cast(c, lw_cast(c, v, f->od), f->cd);
            }
        }
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
            case STAX_PRIM_FLOOR: case STAX_PRIM_CEIL: case STAX_PRIM_ROUND:
            case STAX_PRIM_TRUNC:
                r.v = a[0];    /* integers are already integral (torch: a copy) */
                return r;
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
    if (p == STAX_PRIM_NEG && a[0]->kind == STAX_LV_CONST) {
        r.v = lw_is_float(rt) ? lw_const(c, rt, -a[0]->f)
                              : lw_const_int(c, rt, (int64_t)(0 - (uint64_t)a[0]->i),
                                             -a[0]->f);
        return r;
    }
    if (p == STAX_PRIM_POW && a[0]->kind == STAX_LV_CONST && a[1]->kind == STAX_LV_CONST) {
        /* a power of two literals (round's 10**decimals): fold it, in
         * double or exactly for integers, so no pow of the kernel's dtype */
        if (lw_is_float(rt)) {
            r.v = lw_const(c, rt, pow(a[0]->f, a[1]->f));
            return r;
        }
        if (a[1]->i >= 0 && a[1]->i < 64) {
            int64_t acc = 1;
            for (int64_t k = 0; k < a[1]->i; k++) {
                acc = (int64_t)((uint64_t)acc * (uint64_t)a[0]->i);
            }
            r.v = lw_const_int(c, rt, acc, (double)acc);
            return r;
        }
    }
    r.v = lw_prim(c, p, rt, a[0], a[1], a[2]);
    return r;
}

/* (case $arg v1 e1 v2 e2 ...): the expression of the first value that
 * matches the argument (None, or a string) */
static fval
f_case(fctx *f, const stax_sexp *t)
{
    fval chosen = {0};
    fval sel = t->n > 1 ? f_eval(f, t->items[1]) : chosen;
    for (int k = 2; k + 1 < t->n; k += 2) {
        const char *key = t->items[k]->is_list ? "" : t->items[k]->atom;
        int match = 0;
        if (strcmp(key, "_") == 0) {
            match = 1;      /* any value */
        }
        else if (strcmp(key, "None") == 0) {
            match = sel.none;
        }
        else if (sel.str != NULL) {
            match = PyUnicode_CompareWithASCIIString(sel.str, key) == 0;
        }
        if (match) {
            return f_eval(f, t->items[k + 1]);
        }
    }
    f->why = "no case of the formula matches the argument";
    return chosen;
}

/* ops whose float16 kernels in torch read their operands as float16 */
static int
half_operands(const stax_op_info *op)
{
    switch (op != NULL ? op->id : STAX_OP_NONE) {
    case STAX_OP_ADD: case STAX_OP_SUB: case STAX_OP_RSUB: case STAX_OP_FMOD:
    case STAX_OP_REMAINDER: case STAX_OP_POW:
        return 1;
    default:
        return 0;
    }
}

/* an atom: an operand a-d, a $argument, or a number */
static fval
f_atom(fctx *f, const char *tok)
{
    fval r = {0};
    double x;
    if (tok[0] >= 'a' && tok[0] <= 'd' && tok[1] == 0) {
        int i = tok[0] - 'a';
        if (i >= PyTuple_GET_SIZE(f->bound)) {
            f->why = "formula operand out of range";
            return r;
        }
        r = f_operand(f, PyTuple_GET_ITEM(f->bound, i));
        if (r.v != NULL && stax_dtype_is_half_like(f->od) && i < 2 && half_operands(f->op)) {
            /* torch casts the operands of a float16 add/sub/rsub/fmod/
             * remainder/pow to float16 first (a Python scalar included:
             * x + 0.1 adds half(0.1)), then computes in float32: mul, div
             * and floor_divide keep the scalar at float32 */
            if (r.v->kind == STAX_LV_CONST) {
                double d = r.v->f;
                r.v = lw_const(f->c, STAX_FLOAT64, round_to_od(f->od, d));
            }
            else if (r.v->dtype != f->od) {
                r.v = lw_cast(f->c, r.v, f->od);
            }
        }
        else if (r.v != NULL && stax_dtype_is_half_like(f->od) && !r.weak
                 && r.v->kind != STAX_LV_CONST && r.v->dtype != f->od
                 && !lw_is_float(r.v->dtype) && f->cd != f->od
                 && !(i == 1 && operand_ndim(f, PyTuple_GET_ITEM(f->bound, i)) == 0)) {
            /* an integer/bool tensor operand of a float16 result: torch
             * casts it to float16 first (int32 2**31 - 1 is inf there),
             * but for a 0-d second operand (its CPU scalar) */
            r.v = lw_cast(f->c, r.v, f->od);
        }
        return r;
    }
    if (strcmp(tok, "$$dtype") == 0) {
        /* the result dtype's name, for a (case ...) on it: an op whose
         * torch kernel computes another form in float64 */
        static PyObject *names[STAX_NUM_DTYPES];
        if (names[f->od] == NULL) {
            names[f->od] = PyUnicode_InternFromString(stax_dtype_name(f->od));
            if (names[f->od] == NULL) {
                PyErr_Clear();
                f->why = "no memory for a dtype name";
                return r;
            }
        }
        r.str = names[f->od];
        return r;
    }
    if (tok[0] == '$') {
        PyObject *o = lw_bound_arg(f->bound, f->op, tok + 1);
        if (o == NULL) {
            f->why = "formula names an unknown argument";
            return r;
        }
        if (o == Py_None && f->op->id == STAX_OP_NAN_TO_NUM
            && (strcmp(tok + 1, "posinf") == 0 || strcmp(tok + 1, "neginf") == 0)) {
            /* torch: None means the result dtype's largest (lowest)
             * finite value; a weak scalar, exact in that dtype */
            double m = finite_max(f->od);
            r.v = lw_const(f->c, STAX_FLOAT64, tok[1] == 'p' ? m : -m);
            r.weak = 1;
            return r;
        }
        return f_operand(f, o);
    }
    /* a literal is a weak scalar of its own kind (a Python int or float),
     * so comparisons promote as torch does: int32 == inf compares in
     * floating point, not against inf cast to int32 */
    stax_dtype_t ldt = strpbrk(tok, ".eEn") != NULL ? STAX_FLOAT64 : STAX_INT64;
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
    r.v = lw_const(f->c, lw_is_float(f->cd) ? f->cd : ldt, x);
    r.weak = 1;
    return r;
}

/* the loop-IR value of a formula tree (the op table's, parsed once) */
static fval
f_eval(fctx *f, const stax_sexp *t)
{
    fval r = {0};
    if (!t->is_list) {
        return f_atom(f, t->atom);
    }
    if (t->n == 0 || t->items[0]->is_list) {
        f->why = "formula uses an unknown primitive";
        return r;
    }
    const char *head = t->items[0]->atom;
    if (strcmp(head, "case") == 0) {
        return f_case(f, t);
    }
    int prim = stax_prim_from_name(head);
    if (prim < 0) {
        f->why = "formula uses an unknown primitive";
        return r;
    }
    fval x[3] = {{0}};
    int n = t->n - 1;
    if (n > 3) {
        f->why = "formula arity";
        return r;
    }
    for (int i = 0; i < n; i++) {
        x[i] = f_eval(f, t->items[i + 1]);
        if (f->why != NULL) {
            return r;
        }
    }
    if (n != stax_prim_arity((stax_prim_t)prim)) {
        f->why = "formula arity mismatch";
        return r;
    }
    return f_prim(f, prim, x, n);
}

int
lw_lower_formula(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                 vbuf *out, const char **why)
{
    fctx f;
    memset(&f, 0, sizeof(f));
    f.c = c;
    f.in = in;
    f.bound = bound;
    f.op = in->op;
    f.nout = out->ndim;
    memcpy(f.osizes, out->sizes, sizeof(int64_t) * (size_t)out->ndim);
    lw_ident_vars(c, out->ndim, f.ovars);
    f.cd = f.od = out->dtype;
    if (in->op->flags & STAX_OPF_COMPARISON) {
        vbuf *vs[4] = {NULL};
        PyObject *sc[4] = {NULL};
        int n = in->op->arity < 4 ? in->op->arity : 4;
        for (int i = 0; i < n && i < PyTuple_GET_SIZE(bound); i++) {
            PyObject *o = PyTuple_GET_ITEM(bound, i);
            vs[i] = lw_arg_vb(in, o);
            sc[i] = (vs[i] == NULL && is_number(o)) ? o : NULL;
        }
        f.cd = result_type(vs, sc, n);
    }
    /* float16 and bfloat16 compute the whole formula in float32 and round
     * once at the end, as torch's opmath does (gelu, softplus, mish ... are
     * one rounding, not one per primitive) */
    if (stax_dtype_is_half_like(f.cd)) {
        f.cd = STAX_FLOAT32;
    }
    const stax_sexp *tree = stax_op_formula_tree(in->op);
    if (tree == NULL) {
        *why = "the op's formula does not parse";
        return 0;
    }
    fval r = f_eval(&f, tree);
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
