/* Random op lowering: rand_like, randn_like and dropout (the other random
 * ops have no native lowering) draw from the same Philox stream as eager;
 * each draw reserves words of the default generator's offset, passed to
 * the kernel as size arguments per call. */
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "tensor/stax_numpy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    c->rand_gen[c->nrand] = Py_XNewRef(c->cur_gen);
    c->nrand++;
    const stax_ix *ov[STAX_MAX_DIMS];
    lw_ident_vars(c, out->ndim, ov);
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

/* the Box-Muller normal of eager's fill (float64: 4 words, else 2), in
 * double */
static const stax_lval *
normal_z(lw_ctx *c, rdraw *r, int f64)
{
    const stax_lval *u1, *u2;
    if (f64) {
        u1 = u53(c, rword(c, r, 0), rword(c, r, 1));
        u2 = u53(c, rword(c, r, 2), rword(c, r, 3));
    }
    else {
        u1 = u24(c, rword(c, r, 0));
        u2 = u24(c, rword(c, r, 1));
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
    return lw_prim(c, STAX_PRIM_MUL, D, rad, cs, NULL);
}

/* x.uniform_(from, to) / x.normal_(mean, std) as a value: a fresh draw of
 * x's shape, element i from words i*W.. of the stream as eager's fill
 * (which draws a view in its row-major order too), so a write through a
 * view is this draw scattered into the base. uniform float32/float16:
 * (float)(a + (b - a) * u24) in double; float64: a + (b - a) * u53;
 * normal: a + b * z in double, rounded to the dtype once (float16: from
 * double, as eager's store; bfloat16: through float32, as eager's) */
static int
lower_uniform_normal(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *out,
                     const char **why)
{
    stax_dtype_t dt = out->dtype, D = STAX_FLOAT64;
    int uni = in->op->id == STAX_OP_UNIFORM_;
    if (dt != STAX_FLOAT16 && dt != STAX_BFLOAT16 && dt != STAX_FLOAT32 && dt != STAX_FLOAT64) {
        UNSUPPORTED("random fill of a non-float dtype");
    }
    PyObject *pa = lw_bound_arg(bound, in->op, uni ? "from" : "mean");
    PyObject *pb = lw_bound_arg(bound, in->op, uni ? "to" : "std");
    for (int k = 0; k < 2; k++) {
        PyObject *o = k ? pb : pa;
        if (o != NULL && o != Py_None && !PyFloat_Check(o) && !PyLong_Check(o)) {
            UNSUPPORTED("random fill with a parameter that is not a Python number");
        }
    }
    double a = lw_num(pa, 0.0), b = lw_num(pb, 1.0);
    rdraw r;
    int f64 = dt == STAX_FLOAT64;
    int ok = rand_draw(c, out, uni ? (f64 ? 2 : 1) : (f64 ? 4 : 2), &r);
    if (ok <= 0) {
        if (ok == 0) {
            UNSUPPORTED("too many random draws in one program");
        }
        return -1;
    }
    const stax_lval *v;
    if (uni) {
        const stax_lval *u = f64 ? u53(c, rword(c, &r, 0), rword(c, &r, 1))
                                 : u24(c, rword(c, &r, 0));
        v = lw_prim(c, STAX_PRIM_ADD, D, lw_const(c, D, a),
                    lw_prim(c, STAX_PRIM_MUL, D, lw_const(c, D, b - a), u, NULL), NULL);
        if (!f64) {
            v = lw_cast(c, v, STAX_FLOAT32);
        }
    }
    else {
        v = lw_prim(c, STAX_PRIM_ADD, D, lw_const(c, D, a),
                    lw_prim(c, STAX_PRIM_MUL, D, lw_const(c, D, b), normal_z(c, &r, f64), NULL),
                    NULL);
    }
    out->body = lw_cast(c, v, dt);
    return out->body ? 1 : -1;
}

/* bernoulli(x, p) (a number p: eager's zeros_like(x).bernoulli_(p)) or
 * bernoulli(x) (x the probabilities): element i is 1 where u53 of words
 * 2i, 2i+1 < p, in the value's dtype */
static int
lower_bernoulli(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x, vbuf *out,
                const char **why)
{
    PyObject *p = lw_bound_arg(bound, in->op, "p");
    const stax_lval *pv;
    if (p != NULL && p != Py_None) {
        if (!PyFloat_Check(p) && !PyLong_Check(p)) {
            UNSUPPORTED("bernoulli with a probability that is not a Python number");
        }
        double pd = lw_num(p, 0.5);
        if (!(pd >= 0 && pd <= 1)) {
            UNSUPPORTED("bernoulli probability out of [0, 1] (eager raises)");
        }
        pv = lw_const(c, STAX_FLOAT64, pd);
    }
    else {
        if (x == NULL || !lw_is_float(x->dtype)) {
            UNSUPPORTED("bernoulli of a non-float probability tensor");
        }
        pv = lw_cast(c, x->body, STAX_FLOAT64);
    }
    rdraw r;
    int ok = rand_draw(c, out, 2, &r);
    if (ok <= 0) {
        if (ok == 0) {
            UNSUPPORTED("too many random draws in one program");
        }
        return -1;
    }
    const stax_lval *u = u53(c, rword(c, &r, 0), rword(c, &r, 1));
    const stax_lval *hit = lw_prim(c, STAX_PRIM_LT, STAX_BOOL, u, pv, NULL);
    out->body = lw_cast(c, hit, out->dtype);
    return out->body ? 1 : -1;
}

/* x.random_(from, to) as a value: eager's randint fill, element i = lo +
 * (w[2i] | w[2i+1] << 32) mod (hi - lo) in unsigned 64-bit arithmetic,
 * here as ((hi32 mod m) * (2^32 mod m) + lo32 mod m) mod m, exact in int64
 * for m <= 2^31 (wider ranges: float64's and int64's defaults, refused) */
static int
lower_random_int(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *out,
                 const char **why)
{
    PyObject *pf = lw_bound_arg(bound, in->op, "from");
    PyObject *pt = lw_bound_arg(bound, in->op, "to");
    int64_t lo = 0, hi;
    stax_dtype_t dt = out->dtype;
    for (int k = 0; k < 2; k++) {
        PyObject *o = k ? pt : pf;
        if (o != NULL && o != Py_None && (!PyLong_Check(o) || PyBool_Check(o))) {
            UNSUPPORTED("random_ with a bound that is not a Python int");
        }
    }
    int ovf = 0;
    if (pt != NULL && pt != Py_None) {
        lo = pf != NULL && pf != Py_None ? PyLong_AsLongLongAndOverflow(pf, &ovf) : 0;
        hi = PyLong_AsLongLongAndOverflow(pt, &ovf);
    }
    else if (pf != NULL && pf != Py_None) {
        hi = PyLong_AsLongLongAndOverflow(pf, &ovf);
    }
    else {
        /* eager's default range for the dtype (_tensor._random_) */
        switch (dt) {
        case STAX_FLOAT32: hi = (1LL << 24) + 1; break;
        case STAX_FLOAT16: hi = (1LL << 11) + 1; break;
        case STAX_BOOL: hi = 2; break;
        case STAX_UINT8: hi = 256; break;
        case STAX_INT8: hi = 128; break;
        case STAX_INT16: hi = 32768; break;
        case STAX_INT32: hi = 2147483648LL; break;
        default: UNSUPPORTED("random_ over a range wider than 2**31");
        }
    }
    if (ovf || PyErr_Occurred()) {
        PyErr_Clear();
        UNSUPPORTED("random_ bound beyond int64");
    }
    if (lo > (1LL << 53) || lo < -(1LL << 53)) {
        UNSUPPORTED("random_ with a lower bound beyond 2**53");
    }
    if (hi <= lo || hi - lo > (1LL << 31)) {
        UNSUPPORTED(hi <= lo ? "random_ with an empty range (eager raises)"
                             : "random_ over a range wider than 2**31");
    }
    int64_t m = hi - lo;
    rdraw r;
    int ok = rand_draw(c, out, 2, &r);
    if (ok <= 0) {
        if (ok == 0) {
            UNSUPPORTED("too many random draws in one program");
        }
        return -1;
    }
    stax_dtype_t it = STAX_INT64;
    const stax_lval *mm = lw_const(c, it, (double)m);
    const stax_lval *w0 = lw_prim(c, STAX_PRIM_REMAINDER, it, rword(c, &r, 0), mm, NULL);
    const stax_lval *w1 = lw_prim(c, STAX_PRIM_REMAINDER, it, rword(c, &r, 1), mm, NULL);
    const stax_lval *sh = lw_const(c, it, (double)(int64_t)((1ULL << 32) % (uint64_t)m));
    const stax_lval *v = lw_prim(c, STAX_PRIM_ADD, it, lw_prim(c, STAX_PRIM_MUL, it, w1, sh, NULL),
                                 w0, NULL);
    v = lw_prim(c, STAX_PRIM_REMAINDER, it, v, mm, NULL);
    v = lw_prim(c, STAX_PRIM_ADD, it, v, lw_const(c, it, (double)lo), NULL);
    out->body = lw_cast(c, v, dt);
    return out->body ? 1 : -1;
}

static int lower_random_node(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                             vbuf *out, const char **why);

int
lw_lower_random(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                vbuf *out, const char **why)
{
    PyObject *gen = bound != NULL ? lw_bound_arg(bound, in->op, "generator") : NULL;
    if (c->no_random) {
        UNSUPPORTED("random op next to a fallback kernel (draw order)");
    }
    if (gen != NULL && gen != Py_None && !PyObject_TypeCheck(gen, StaxGenerator_Type)) {
        UNSUPPORTED("random op with a generator that is not a tensorplay.Generator");
    }
    if (out->kind != VB_TENSOR) {
        UNSUPPORTED("random op of a non-tensor value");
    }
    /* the draws of this node reserve their words of `gen` at run time (the
     * program holds it: the graph's constant, the same object every call);
     * a factory's generator= keyword is already in cur_gen */
    if (gen != NULL && gen != Py_None) {
        c->cur_gen = gen;
    }
    int rc = lower_random_node(c, in, bound, x, out, why);
    c->cur_gen = NULL;
    return rc;
}

static int
lower_random_node(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                  vbuf *out, const char **why)
{
    stax_op_id_t id = in->op->id;
    if (id == STAX_OP_BERNOULLI) {
        return lower_bernoulli(c, in, bound, x, out, why);
    }
    if (id == STAX_OP_UNIFORM_ || id == STAX_OP_NORMAL_) {
        return lower_uniform_normal(c, in, bound, out, why);
    }
    if (id == STAX_OP_RANDOM_) {
        return lower_random_int(c, in, bound, out, why);
    }
    /* float16 / bfloat16 draws: eager's fill computes a float32 uniform
     * (a double normal) from the same words and rounds it to the dtype */
    int half = out->dtype == STAX_FLOAT16 || out->dtype == STAX_BFLOAT16;
    if (out->dtype != STAX_FLOAT32 && out->dtype != STAX_FLOAT64
        && !(half && (id == STAX_OP_RAND_LIKE || id == STAX_OP_RANDN_LIKE))) {
        UNSUPPORTED("random op of a non-float dtype");
    }
    int ok = 0;
    if ((id == STAX_OP_RAND_LIKE)) {
        out->body = rand_uniform(c, out, half ? STAX_FLOAT32 : out->dtype, &ok);
        if (half && out->body != NULL) {
            out->body = lw_cast(c, out->body, out->dtype);
        }
    }
    else if ((id == STAX_OP_RANDN_LIKE)) {
        rdraw r;
        int f64 = out->dtype == STAX_FLOAT64;
        ok = rand_draw(c, out, f64 ? 4 : 2, &r);
        if (ok > 0) {
            stax_dtype_t D = STAX_FLOAT64;
            const stax_lval *z = normal_z(c, &r, f64);
            z = lw_prim(c, STAX_PRIM_ADD, D, lw_const(c, D, 0.0), z, NULL);
            out->body = lw_cast(c, z, out->dtype);
        }
    }
    else if ((id == STAX_OP_DROPOUT) && x != NULL) {
        double p = lw_num(lw_bound_arg(bound, in->op, "p"), 0.5);
        PyObject *tr = lw_bound_arg(bound, in->op, "training");
        PyObject *ip = lw_bound_arg(bound, in->op, "inplace");
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

/* ------------------------------------------------------------ factories */

static int is_cpu_device(PyObject *d);

/* arange(end) / arange(start, end[, step]) with integer bounds: element i
 * is start + i * step (exact in int64, then cast to the value's dtype); the
 * length is the value's (a symbolic end gives each size variant its own) */
static int
lower_arange(lw_ctx *c, PyObject *args, PyObject *kwargs, vbuf *out, const char **why)
{
    int64_t b[3] = {0, 0, 1};
    Py_ssize_t n = args != NULL && PyTuple_Check(args) ? PyTuple_GET_SIZE(args) : 0;
    if (n < 1 || n > 3 || out->ndim != 1) {
        UNSUPPORTED("arange without 1 to 3 positional bounds");
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        if (!PyLong_Check(a) || PyBool_Check(a)) {
            UNSUPPORTED("arange with bounds that are not Python ints");
        }
        int ovf = 0;
        b[n == 1 ? 1 : i] = PyLong_AsLongLongAndOverflow(a, &ovf);
        if (ovf || PyErr_Occurred()) {
            PyErr_Clear();
            UNSUPPORTED("arange bound beyond int64");
        }
    }
    if (kwargs != NULL && PyDict_Check(kwargs)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwargs, &pos, &k, &v)) {
            const char *kn = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
            if (kn == NULL || !(!strcmp(kn, "dtype") || (!strcmp(kn, "device") && is_cpu_device(v))
                                || (!strcmp(kn, "requires_grad") && v == Py_False))) {
                PyErr_Clear();
                UNSUPPORTED("arange keyword without a native meaning");
            }
        }
    }
    const stax_lval *i = lw_index(c, lw_ix_var(c, 0), STAX_INT64);
    const stax_lval *e = i ? lw_prim(c, STAX_PRIM_MUL, STAX_INT64, i, lw_const(c, STAX_INT64, (double)b[2]),
                                     NULL) : NULL;
    e = e ? lw_prim(c, STAX_PRIM_ADD, STAX_INT64, e, lw_const(c, STAX_INT64, (double)b[0]), NULL) : NULL;
    out->body = e && out->dtype != STAX_INT64 ? lw_cast(c, e, out->dtype) : e;
    return out->body ? 1 : -1;
}

static int
is_cpu_device(PyObject *d)
{
    if (d == Py_None) {
        return 1;
    }
    PyObject *s = PyObject_Str(d);
    int r = s != NULL && PyUnicode_Check(s) && PyUnicode_CompareWithASCIIString(s, "cpu") == 0;
    Py_XDECREF(s);
    PyErr_Clear();
    return r;
}

/* zeros/ones/full/empty/rand/randn(size..., **kw): the shape and dtype are
 * the node's value's; every keyword either has that meaning (dtype,
 * device='cpu', layout, pin_memory=False, requires_grad=False,
 * generator=None) or the node is refused (out=, requires_grad=True, a
 * generator, a tensor fill value) */
int
lw_lower_factory(lw_ctx *c, const stax_call_info *call, PyObject *args, PyObject *kwargs,
                 PyObject *val, vbuf **outp, const char **why)
{
    const stax_call_key_t key = call->key;
    vbuf *out = lw_vb_new(c);
    int64_t st[STAX_MAX_DIMS];
    PyObject *fill = NULL, *gen = NULL;
    if (out == NULL) {
        return -1;
    }
    out->kind = VB_TENSOR;
    if (val == NULL || !lw_val_info(val, &out->ndim, out->sizes, st, &out->dtype)) {
        UNSUPPORTED("factory whose value is not a tensor");
    }
    if (key == STAX_CALL_ARANGE) {
        int rc = lower_arange(c, args, kwargs, out, why);
        if (rc > 0) {
            *outp = out;
        }
        return rc;
    }
    int random = call->op != STAX_OP_NONE;   /* rand -> rand_like's draws */
    if (key == STAX_CALL_FULL) {
        fill = args != NULL && PyTuple_Check(args) && PyTuple_GET_SIZE(args) >= 2
               ? PyTuple_GET_ITEM(args, 1) : NULL;
    }
    if (kwargs != NULL && PyDict_Check(kwargs)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwargs, &pos, &k, &v)) {
            const char *kn = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
            if (kn == NULL) {
                PyErr_Clear();
                UNSUPPORTED("factory keyword is not a str");
            }
            if (!strcmp(kn, "dtype") || !strcmp(kn, "size") || !strcmp(kn, "memory_format")) {
                continue;     /* the value's dtype and shape; contiguous */
            }
            if (!strcmp(kn, "fill_value") && key == STAX_CALL_FULL) {
                fill = v;
            }
            else if (!strcmp(kn, "device")) {
                if (!is_cpu_device(v)) {
                    UNSUPPORTED("factory on a device other than the CPU");
                }
            }
            else if (!strcmp(kn, "layout")) {
                if (v != Py_None) {
                    PyObject *s = PyObject_Str(v);
                    int ok = s && PyUnicode_Check(s) && PyUnicode_Tailmatch(
                        s, PyUnicode_FromString("strided"), 0, PY_SSIZE_T_MAX, 1) == 1;
                    Py_XDECREF(s);
                    PyErr_Clear();
                    if (!ok) {
                        UNSUPPORTED("factory with a non-strided layout");
                    }
                }
            }
            else if (!strcmp(kn, "requires_grad") || !strcmp(kn, "pin_memory")) {
                int t = PyObject_IsTrue(v);
                if (t != 0) {
                    PyErr_Clear();
                    UNSUPPORTED(kn[0] == 'r' ? "factory with requires_grad=True"
                                             : "factory with pin_memory=True");
                }
            }
            else if (!strcmp(kn, "generator") && random) {
                if (v != Py_None && !PyObject_TypeCheck(v, StaxGenerator_Type)) {
                    UNSUPPORTED("random op with a generator that is not a tensorplay.Generator");
                }
                gen = v != Py_None ? v : NULL;
            }
            else {
                UNSUPPORTED("factory keyword without a native meaning (out=, names=, ...)");
            }
        }
    }
    if (random) {
        const stax_op_info *op = &stax_op_table[call->op];
        struct lw_node_in in;
        memset(&in, 0, sizeof(in));
        in.opname = op->name;
        in.op = op;
        in.val = val;
        c->cur_gen = gen;
        int rc = lw_lower_random(c, &in, NULL, NULL, out, why);
        c->cur_gen = NULL;
        if (rc > 0) {
            *outp = out;
        }
        return rc;
    }
    double v = key == STAX_CALL_ONES ? 1.0 : 0.0;
    if (key == STAX_CALL_FULL) {
        if (fill == NULL || !(PyBool_Check(fill) || PyLong_Check(fill) || PyFloat_Check(fill))) {
            UNSUPPORTED("full with a fill value that is not a Python number");
        }
        if (PyLong_Check(fill) && !PyBool_Check(fill)) {
            int ovf = 0;
            long long iv = PyLong_AsLongLongAndOverflow(fill, &ovf);
            if (ovf || iv > (1LL << 53) || iv < -(1LL << 53)) {
                PyErr_Clear();
                UNSUPPORTED("full with an integer fill value beyond 2**53");
            }
            v = (double)iv;
        }
        else {
            v = PyFloat_Check(fill) ? PyFloat_AS_DOUBLE(fill) : (fill == Py_True ? 1.0 : 0.0);
        }
    }
    out->body = lw_const(c, out->dtype, v);
    if (out->body == NULL) {
        return -1;
    }
    *outp = out;
    return 1;
}
