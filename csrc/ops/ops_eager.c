/* Eager pointwise kernels in C: PyTorch type promotion and broadcasting,
 * computed by NumPy ufuncs (cached, vectorcall) on no-copy array views, or
 * by small C loops over libm for what NumPy lacks (erf, erfc, sigmoid,
 * rsqrt). Everything else runs the Python implementation of _ops.py. */
#include <math.h>
#include <string.h>

#include "tensor/stax_numpy.h"
#include "ops/ops.h"
#include "ops/ops_internal.h"

/* NumPy ufunc of each pointwise op (NULL: not a plain ufunc) */
static const char *const ufunc_names[STAX_OP_COUNT] = {
    [STAX_OP_ADD] = "add", [STAX_OP_SUB] = "subtract",
    [STAX_OP_MUL] = "multiply", [STAX_OP_DIV] = "true_divide",
    [STAX_OP_TRUE_DIVIDE] = "true_divide",
    [STAX_OP_FLOOR_DIVIDE] = "floor_divide",
    [STAX_OP_REMAINDER] = "remainder", [STAX_OP_FMOD] = "fmod",
    [STAX_OP_POW] = "power", [STAX_OP_ATAN2] = "arctan2",
    [STAX_OP_MAXIMUM] = "maximum", [STAX_OP_MINIMUM] = "minimum",
    [STAX_OP_EQ] = "equal", [STAX_OP_NE] = "not_equal",
    [STAX_OP_LT] = "less", [STAX_OP_LE] = "less_equal",
    [STAX_OP_GT] = "greater", [STAX_OP_GE] = "greater_equal",
    [STAX_OP_LOGICAL_AND] = "logical_and", [STAX_OP_LOGICAL_OR] = "logical_or",
    [STAX_OP_LOGICAL_XOR] = "logical_xor",
    [STAX_OP_LOGICAL_NOT] = "logical_not",
    [STAX_OP_BITWISE_AND] = "bitwise_and", [STAX_OP_BITWISE_OR] = "bitwise_or",
    [STAX_OP_BITWISE_XOR] = "bitwise_xor",
    [STAX_OP_BITWISE_NOT] = "invert",
    [STAX_OP_ISNAN] = "isnan", [STAX_OP_ISINF] = "isinf",
    [STAX_OP_ISFINITE] = "isfinite",
    [STAX_OP_NEG] = "negative", [STAX_OP_ABS] = "absolute",
[STAX_OP_EXP] = "exp", [STAX_OP_EXP2] = "exp2",
    [STAX_OP_EXPM1] = "expm1", [STAX_OP_LOG] = "log", [STAX_OP_LOG2] = "log2",
    [STAX_OP_LOG10] = "log10", [STAX_OP_LOG1P] = "log1p",
    [STAX_OP_SQRT] = "sqrt", [STAX_OP_SIN] = "sin", [STAX_OP_COS] = "cos",
    [STAX_OP_TAN] = "tan", [STAX_OP_TANH] = "tanh", [STAX_OP_SINH] = "sinh",
    [STAX_OP_COSH] = "cosh", [STAX_OP_ASIN] = "arcsin",
    [STAX_OP_ACOS] = "arccos", [STAX_OP_ATAN] = "arctan",
    [STAX_OP_FLOOR] = "floor", [STAX_OP_CEIL] = "ceil", [STAX_OP_ROUND] = "rint",
    [STAX_OP_TRUNC] = "trunc", [STAX_OP_RECIPROCAL] = "reciprocal",
    [STAX_OP_SQUARE] = "square", [STAX_OP_RELU] = "maximum",
};
_Static_assert(sizeof(ufunc_names) / sizeof(ufunc_names[0]) == STAX_OP_COUNT,
               "ufunc_names must cover the op table");

static PyObject *ufuncs[STAX_OP_COUNT];   /* strong */
static char scalar_ok[STAX_OP_COUNT];     /* has a Scalar overload */
int stax_ops_reflected;                   /* set by number slots: 2 - x */
static PyObject *zero_long;
static PyObject *zero_arrays[STAX_NUM_DTYPES];   /* 0-d zeros, lazily */

static PyObject *
zero_of(stax_dtype_t dt)
{
    if (zero_arrays[dt] == NULL) {
        PyArray_Descr *d = PyArray_DescrFromType(stax_dtype_to_npy(dt));
        zero_arrays[dt] = PyArray_Zeros(0, NULL, d, 0);
        if (zero_arrays[dt] == NULL) {
            PyErr_Clear();
            return zero_long;
        }
    }
    return zero_arrays[dt];
}
static PyObject *out_kwnames;   /* ("out",) */

/* C loops for unary ops NumPy lacks */
typedef enum { CL_NONE = 0, CL_ERF, CL_ERFC, CL_SIGMOID, CL_RSQRT, CL_EXP } cloop_t;

static cloop_t
cloop_of(stax_op_id_t id)
{
    switch (id) {
    case STAX_OP_ERF: return CL_ERF;
    case STAX_OP_ERFC: return CL_ERFC;
    case STAX_OP_SIGMOID: return CL_SIGMOID;
    case STAX_OP_RSQRT: return CL_RSQRT;
    default: return CL_NONE;
    }
}

static void
run_cloop_f(cloop_t k, const float *in, float *out, npy_intp n)
{
    npy_intp i;
    switch (k) {
    case CL_ERF: for (i = 0; i < n; i++) out[i] = erff(in[i]); break;
    case CL_ERFC: for (i = 0; i < n; i++) out[i] = erfcf(in[i]); break;
    case CL_SIGMOID:
        for (i = 0; i < n; i++) out[i] = 1.0f / (1.0f + expf(-in[i]));
        break;
    case CL_RSQRT: for (i = 0; i < n; i++) out[i] = 1.0f / sqrtf(in[i]); break;
    /* in double, rounded once: <= 1 ulp (NumPy's float32 exp is 2.3 ulp) */
    case CL_EXP: for (i = 0; i < n; i++) out[i] = (float)exp((double)in[i]); break;
    default: break;
    }
}

static void
run_cloop_d(cloop_t k, const double *in, double *out, npy_intp n)
{
    npy_intp i;
    switch (k) {
    case CL_ERF: for (i = 0; i < n; i++) out[i] = erf(in[i]); break;
    case CL_ERFC: for (i = 0; i < n; i++) out[i] = erfc(in[i]); break;
    case CL_SIGMOID:
        for (i = 0; i < n; i++) out[i] = 1.0 / (1.0 + exp(-in[i]));
        break;
    case CL_RSQRT: for (i = 0; i < n; i++) out[i] = 1.0 / sqrt(in[i]); break;
    case CL_EXP: for (i = 0; i < n; i++) out[i] = exp(in[i]); break;
    default: break;
    }
}

/* ---- helpers ----------------------------------------------------------- */

static int
is_scalar(PyObject *o)
{
    return PyFloat_Check(o) || PyLong_Check(o);  /* bool is a long */
}

static void
shape_str(char *buf, size_t cap, int nd, const int64_t *s)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, cap - k, "[");
    for (int i = 0; i < nd && k < cap; i++) {
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "",
                              (long long)s[i]);
    }
    if (k < cap) {
        snprintf(buf + k, cap - k, "]");
    }
}

int
stax_ops_broadcast(int na, const int64_t *sa, int nb, const int64_t *sb,
                   int *nout, int64_t *out)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int ia = i - (n - na), ib = i - (n - nb);
        int64_t a = ia >= 0 ? sa[ia] : 1, b = ib >= 0 ? sb[ib] : 1;
        if (a == b || b == 1) {
            out[i] = a;
        }
        else if (a == 1) {
            out[i] = b;
        }
        else {
            PyErr_Format(PyExc_RuntimeError,
                         "The size of tensor a (%lld) must match the size of "
                         "tensor b (%lld) at non-singleton dimension %d",
                         (long long)a, (long long)b, i);
            return -1;
        }
    }
    *nout = n;
    return 0;
}

/* array for a tensor operand, cast to dt when needed; scalars pass through */
static PyObject *
operand_array(PyObject *o, stax_dtype_t dt, int cast)
{
    PyObject *arr;
    if (!StaxTensor_Check(o)) {
        /* a 0-d array of the computation dtype: NumPy's fast path (a
         * Python scalar costs a weak-promotion resolution per call) */
        PyArray_Descr *d = PyArray_DescrFromType(stax_dtype_to_npy(dt));
        arr = PyArray_Empty(0, NULL, d, 0);    /* steals d */
        if (arr == NULL) {
            return NULL;
        }
        if (PyArray_SETITEM((PyArrayObject *)arr,
                            PyArray_DATA((PyArrayObject *)arr), o) < 0) {
            /* out of range for dt (int8 + 1000): wrap around as torch
             * does, through an int64 0-d array cast unsafely; an int in
             * [2^63, 2^64) is torch's uint64 Scalar, which wraps to int64
             * too (int64 + 2**63 == int64 - 2**63) */
            PyObject *w;
            long long v;
            int ovf = 0;
            PyErr_Clear();
            Py_DECREF(arr);
            if (!PyLong_Check(o) || stax_dtype_is_floating(dt)) {
                return Py_NewRef(o);
            }
            v = PyLong_AsLongLongAndOverflow(o, &ovf);
            if (ovf > 0) {
                v = (long long)PyLong_AsUnsignedLongLongMask(o);
            }
            if (PyErr_Occurred() || ovf < 0) {
                PyErr_Clear();
                return Py_NewRef(o);
            }
            w = PyArray_Zeros(0, NULL, PyArray_DescrFromType(NPY_INT64), 0);
            if (w == NULL) {
                return NULL;
            }
            *(long long *)PyArray_DATA((PyArrayObject *)w) = v;
            arr = PyArray_CastToType((PyArrayObject *)w,
                                     PyArray_DescrFromType(
                                         stax_dtype_to_npy(dt)), 0);
            Py_DECREF(w);
            return arr;
        }
        return arr;
    }
    arr = stax_tensor_as_array((StaxTensor *)o);
    if (arr == NULL || !cast || ((StaxTensor *)o)->dtype == dt) {
        return arr;
    }
    {
        PyObject *c = PyArray_CastToType((PyArrayObject *)arr,
                                         PyArray_DescrFromType(
                                             stax_dtype_to_npy(dt)), 0);
        Py_DECREF(arr);
        return c;
    }
}

static void
propagate_grad(StaxTensor *res, PyObject *const *ops, int n)
{
    if (!stax_dtype_is_floating(res->dtype) || !stax_grad_enabled()) {
        return;
    }
    for (int i = 0; i < n; i++) {
        if (StaxTensor_Check(ops[i]) && ((StaxTensor *)ops[i])->requires_grad) {
            res->requires_grad = 1;
            return;
        }
    }
}

/* dtype check shared by in-place ops: result type must cast to self's */
static int
check_inplace_cast(stax_dtype_t res, stax_dtype_t self)
{
    int ok;
    if (stax_dtype_is_floating(res)) {
        ok = stax_dtype_is_floating(self);
    }
    else if (stax_dtype_is_integral(res)) {
        ok = self != STAX_BOOL;
    }
    else {
        ok = 1;
    }
    if (!ok) {
        PyErr_Format(PyExc_RuntimeError,
                     "result type %s can't be cast to the desired output "
                     "type %s", stax_dtype_title(res),
                     stax_dtype_title(self));
        return -1;
    }
    return 0;
}

/* ---- binary ------------------------------------------------------------ */

/* 1 if the integer operand (array or 0-d array) holds a zero */
static int
has_zero(PyObject *x)
{
    PyObject *z, *r;
    int res;
    if (!PyArray_Check(x)) {
        return PyObject_Not(x);
    }
    z = PyObject_CallMethod(x, "all", NULL);
    if (z == NULL) {
        return -1;
    }
    res = PyObject_Not(z);
    Py_DECREF(z);
    (void)r;
    return res;
}


/* Call a ufunc without out=; new reference to an ndarray (a ufunc over 0-d
 * operands returns a NumPy scalar, which PyArray_CopyInto cannot take). */
static PyObject *
ufunc_array(PyObject *uf, PyObject *const *args, Py_ssize_t n)
{
    PyObject *res = PyObject_Vectorcall(uf, args, n, NULL);
    PyObject *arr = NULL;
    if (res != NULL) {
        arr = PyArray_FromAny(res, NULL, 0, 0, 0, NULL);
        Py_DECREF(res);
    }
    return arr;
}

static PyObject *binary_impl(const stax_op_info *op, PyObject *a,
                             PyObject *b, StaxTensor *inplace_out);

/* NumPy scalars (np.float32(2)) act as Python scalars, as in torch */
static PyObject *
py_scalar_of(PyObject *o)
{
    if (PyArray_IsScalar(o, Generic) && !PyFloat_Check(o) && !PyLong_Check(o)
        && (PyArray_IsScalar(o, Number) || PyArray_IsScalar(o, Bool))) {
        return PyObject_CallMethod(o, "item", NULL);
    }
    return Py_NewRef(o);
}

int
stax_ops_is_numpy_scalar(PyObject *o)
{
    return PyArray_IsScalar(o, Number) || PyArray_IsScalar(o, Bool);
}

PyObject *
stax_ops_binary(const stax_op_info *op, PyObject *a, PyObject *b,
                StaxTensor *inplace_out)
{
    PyObject *a2, *b2, *r;
    if (StaxTensor_Check(a) && StaxTensor_Check(b)) {
        return binary_impl(op, a, b, inplace_out);
    }
    a2 = py_scalar_of(a);
    if (a2 == NULL) {
        return NULL;
    }
    b2 = py_scalar_of(b);
    if (b2 == NULL) {
        Py_DECREF(a2);
        return NULL;
    }
    /* torch: a Python int operand beyond 64 bits does not convert */
    for (int k = 0; k < 2; k++) {
        PyObject *o = k ? b2 : a2;
        if (PyLong_Check(o) && !PyBool_Check(o)) {
            int over = 0, neg;
            (void)PyLong_AsLongLongAndOverflow(o, &over);
            neg = over < 0;
            if (over > 0) {
                (void)PyLong_AsUnsignedLongLong(o);
                over = PyErr_Occurred() != NULL;
                PyErr_Clear();
            }
            if (over) {
                Py_DECREF(a2);
                Py_DECREF(b2);
                PyErr_SetString(PyExc_OverflowError,
                                neg
                                    ? "can't convert negative int to unsigned"
                                    : "int too big to convert");
                return NULL;
            }
        }
    }
    r = binary_impl(op, a2, b2, inplace_out);
    Py_DECREF(a2);
    Py_DECREF(b2);
    return r;
}

/* meta mode: the ufunc call of the kernel on 0-d operands of the same
 * dtypes (a scalar operand as itself), so that NumPy's type resolution
 * raises what the full call would (square on bool: same_kind cast). 0, or
 * -1 with that error. */
static int
probe_ufunc(PyObject *uf, PyObject *const *ops, int n, stax_dtype_t ct,
            stax_dtype_t ot)
{
    PyObject *args[3] = {NULL, NULL, NULL}, *r = NULL;
    int rc = -1;
    for (int i = 0; i < n; i++) {
        args[i] = StaxTensor_Check(ops[i])
            ? PyArray_Zeros(0, NULL, PyArray_DescrFromType(stax_dtype_to_npy(ct)), 0)
            : PyArray_Check(ops[i]) ? Py_NewRef(ops[i])
                                    : operand_array(ops[i], ct, 1);
        if (args[i] == NULL) {
            goto done;
        }
    }
    args[n] = PyArray_Zeros(0, NULL, PyArray_DescrFromType(stax_dtype_to_npy(ot)), 0);
    if (args[n] == NULL) {
        goto done;
    }
    r = PyObject_Vectorcall(uf, args, (size_t)n, out_kwnames);
    rc = r != NULL ? 0 : -1;
done:
    for (int i = 0; i <= n; i++) {
        Py_XDECREF(args[i]);
    }
    Py_XDECREF(r);
    return rc;
}

/* meta mode: eager's result, allocated, not computed; the errors that
 * depend on the operands' values (integer division by zero, integer
 * powers, a Python scalar NumPy cannot hold) need the values */
/* a binary op's fresh result, laid out as TensorIterator lays out torch's
 * (the operands' stride order); pow's Python exponent is no operand of
 * torch's iterator (its Tensor_Scalar kernel is built as a unary op) */
static StaxTensor *
binary_result(const stax_op_info *op, PyObject *const *ops, int nd,
              const int64_t *shape, stax_dtype_t ot)
{
    int64_t st[STAX_MAX_DIMS];
    int n = op->id == STAX_OP_POW && !StaxTensor_Check(ops[1]) ? 1 : 2;
    stax_layout_iter_strides(n, ops, nd, shape, st);
    return stax_tensor_empty_strided_on(nd, shape, st, ot, STAX_DEV_CPU);
}

/* a unary op's fresh result in x's layout (TensorIterator's) */
static StaxTensor *
unary_result(PyObject *x, stax_dtype_t ot)
{
    const StaxTensor *t = (const StaxTensor *)x;
    int64_t st[STAX_MAX_DIMS];
    stax_layout_iter_strides(1, &x, t->ndim, t->sizes, st);
    return stax_tensor_empty_strided_on(t->ndim, t->sizes, st, ot, STAX_DEV_CPU);
}

static PyObject *
binary_meta(const stax_op_info *op, PyObject *a, PyObject *b,
            StaxTensor *inplace_out, stax_dtype_t ct, stax_dtype_t ot, int nd,
            const int64_t *shape)
{
    PyObject *ops[2] = {a, b};
    StaxTensor *out;
    if (inplace_out != NULL
        || (!stax_dtype_is_floating(ct)
            && (op->id == STAX_OP_FLOOR_DIVIDE || op->id == STAX_OP_REMAINDER
                || op->id == STAX_OP_FMOD || op->id == STAX_OP_POW))) {
        return stax_ops_meta_unsupported();
    }
    for (int i = 0; i < 2; i++) {
        if (!StaxTensor_Check(ops[i])) {
            PyObject *x = operand_array(ops[i], ct, 1);
            int ok = x != NULL && PyArray_Check(x);
            Py_XDECREF(x);
            if (!ok) {
                PyErr_Clear();
                return stax_ops_meta_unsupported();
            }
        }
    }
    if (probe_ufunc(ufuncs[op->id], ops, 2, ct, ot) < 0) {
        return NULL;
    }
    out = binary_result(op, ops, nd, shape, ot);
    if (out != NULL) {
        propagate_grad(out, ops, 2);
    }
    return (PyObject *)out;
}

/* an operand rounded to float16, as a float32 (f64: float64) array (new
 * reference) */
static PyObject *
half_operand(PyObject *o, int f64)
{
    PyObject *h = operand_array(o, STAX_FLOAT16, 1);
    if (h == NULL || !PyArray_Check(h)) {
        return h;
    }
    PyObject *f = (PyObject *)PyArray_CastToType(
        (PyArrayObject *)h, PyArray_DescrFromType(f64 ? NPY_FLOAT64 : NPY_FLOAT32), 0);
    Py_DECREF(h);
    return f;
}

static PyObject *
binary_impl(const stax_op_info *op, PyObject *a, PyObject *b,
            StaxTensor *inplace_out)
{
    PyObject *ops[2] = {a, b};
    PyObject *xa = NULL, *xb = NULL, *oarr = NULL, *r = NULL;
    StaxTensor *out = NULL;
    stax_dtype_t rt, ct, ot;
    int64_t shape[STAX_MAX_DIMS];
    int nd, na, nb, half_in = 0;
    const int64_t *sa, *sb;
    PyObject *uf = ufuncs[op->id];

    if (uf == NULL) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    for (int i = 0; i < 2; i++) {
        if (!StaxTensor_Check(ops[i]) && is_scalar(ops[i])
            && (i == 0 ? !(stax_ops_reflected || op->id == STAX_OP_POW)
                       : !scalar_ok[op->id])
            && StaxTensor_Check(ops[1 - i])) {
            PyErr_Format(PyExc_TypeError,
                         "%s(): argument '%s' (position %d) must be Tensor, "
                         "not %.100s", op->name, i ? "other" : "input",
                         i + 1, Py_TYPE(ops[i])->tp_name);
            return NULL;
        }
        if (!StaxTensor_Check(ops[i]) && !is_scalar(ops[i])) {
            if (i == 0 && !StaxTensor_Check(ops[1])) {
                Py_RETURN_NOTIMPLEMENTED;
            }
            PyErr_Format(PyExc_TypeError,
                         "%s(): argument '%s' (position %d) must be Tensor, "
                         "not %.100s", op->name, i ? "other" : "input",
                         i + 1, Py_TYPE(ops[i])->tp_name);
            return NULL;
        }
    }
    if (!StaxTensor_Check(a) && !StaxTensor_Check(b)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (stax_result_type(ops, 2, &rt) < 0) {
        return NULL;
    }
    ct = ot = rt;
    if (op->flags & STAX_OPF_COMPARISON) {
        ot = STAX_BOOL;
    }
    else if (op->flags & STAX_OPF_FLOAT_RESULT) {
        if (!stax_dtype_is_floating(rt)) {
            ct = ot = stax_default_dtype();
        }
    }
    else if (op->flags & STAX_OPF_INT_OK && op->id != STAX_OP_RELU
             && op->id != STAX_OP_SQUARE) {
        /* bitwise */
        if (stax_dtype_is_floating(rt)) {
            PyErr_Format(PyExc_NotImplementedError,
                         "\"%s_cpu\" not implemented for '%s'", op->name,
                         stax_dtype_title(rt));
            return NULL;
        }
    }
    else if (op->id == STAX_OP_SUB
             && (PyBool_Check(a) || PyBool_Check(b)
                 || (StaxTensor_Check(a)
                     && ((StaxTensor *)a)->dtype == STAX_BOOL)
                 || (StaxTensor_Check(b)
                     && ((StaxTensor *)b)->dtype == STAX_BOOL))) {
        if (rt == STAX_BOOL) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Subtraction, the `-` operator, with two bool "
                            "tensors is not supported. Use the `^` or "
                            "`logical_xor()` operator instead.");
        }
        else {
            PyErr_SetString(PyExc_RuntimeError,
                            "Subtraction, the `-` operator, with a bool "
                            "tensor is not supported. If you are trying to "
                            "invert a mask, use the `~` or `logical_not()` "
                            "operator instead.");
        }
        return NULL;
    }
    else if (rt == STAX_BOOL && (op->id == STAX_OP_FLOOR_DIVIDE
                                 || op->id == STAX_OP_REMAINDER
                                 || op->id == STAX_OP_FMOD)) {
        PyErr_Format(PyExc_NotImplementedError,
                     "\"%s_cpu\" not implemented for 'Bool'",
                     op->id == STAX_OP_FLOOR_DIVIDE ? "div_floor" : op->name);
        return NULL;
    }
    else if (op->id == STAX_OP_POW && (StaxTensor_Check(b) || rt == STAX_BOOL)
             && !stax_dtype_is_floating(rt)) {
        Py_RETURN_NOTIMPLEMENTED;   /* integer ** tensor, bool ** bool: _ops.py */
    }
    if (op->id == STAX_OP_POW && StaxTensor_Check(a) && !StaxTensor_Check(b)
        && !PyBool_Check(b) && (PyLong_Check(b) || PyFloat_Check(b))) {
        /* torch checks a Python exponent before looking at the elements
         * (an empty tensor raises too): a negative integer power of an
         * integer tensor, and an exponent the result dtype cannot hold */
        if (!stax_dtype_is_floating(rt) && PyLong_Check(b)) {
            int ov = 0;
            long long e = PyLong_AsLongLongAndOverflow(b, &ov);
            if (e == -1 && PyErr_Occurred()) {
                return NULL;
            }
            if (e < 0 || ov < 0) {
                PyErr_SetString(PyExc_RuntimeError,
                                "Integers to negative integer powers are not allowed.");
                return NULL;
            }
        }
        if (stax_dtype_check_scalar(rt, b) < 0) {
            return NULL;
        }
    }
    na = StaxTensor_Check(a) ? ((StaxTensor *)a)->ndim : 0;
    nb = StaxTensor_Check(b) ? ((StaxTensor *)b)->ndim : 0;
    sa = StaxTensor_Check(a) ? ((StaxTensor *)a)->sizes : NULL;
    sb = StaxTensor_Check(b) ? ((StaxTensor *)b)->sizes : NULL;
    if (stax_ops_broadcast(na, sa, nb, sb, &nd, shape) < 0) {
        return NULL;
    }
    if (inplace_out != NULL) {
        int same = nd == inplace_out->ndim;
        for (int i = 0; same && i < nd; i++) {
            same = shape[i] == inplace_out->sizes[i];
        }
        if (!same) {
            char s1[256], s2[256];
            shape_str(s1, sizeof(s1), inplace_out->ndim, inplace_out->sizes);
            shape_str(s2, sizeof(s2), nd, shape);
            PyErr_Format(PyExc_RuntimeError,
                         "output with shape %s doesn't match the broadcast "
                         "shape %s", s1, s2);
            return NULL;
        }
        if (!(op->flags & STAX_OPF_COMPARISON)
            && check_inplace_cast(ot, inplace_out->dtype) < 0) {
            return NULL;
        }
    }
    if (ct == STAX_FLOAT16 && !(op->flags & STAX_OPF_COMPARISON)) {
        /* torch's opmath: float16 computes in float32 with a Python scalar
         * at full precision (x * 0.1 does not round 0.1 to half first, as
         * NumPy would), and rounds the result once into the output */
        ct = STAX_FLOAT32;
        /* ... but add/sub/fmod/remainder/pow read their
         * operands as float16 first (x + 0.1 adds half(0.1)), as torch's
         * Half kernels for these ops do */
        half_in = op->id == STAX_OP_ADD || op->id == STAX_OP_SUB
                  || op->id == STAX_OP_FMOD || op->id == STAX_OP_REMAINDER
                  || op->id == STAX_OP_POW;
    }
    if (stax_ops_meta_mode) {
        return binary_meta(op, a, b, inplace_out, ct, ot, nd, shape);
    }
    /* pow: torch's std::pow(float, float) is glibc's powf (within an
     * ulp of the exact value, unlike NumPy's vectorized float32 power):
     * computed in float64, rounded to float32, then to float16 */
    if (half_in && op->id == STAX_OP_POW) {
        half_in = 2;
    }
    /* a float16 result: torch's TensorIterator casts tensor operands of
     * other dtypes to float16 first (int32 2**31 - 1 becomes inf, and
     * inf * 0 NaN), then its kernel computes in float32; a 0-d second
     * operand is its CPU scalar, read at float32 without the cast */
    xa = half_in || (ot == STAX_FLOAT16 && StaxTensor_Check(a))
         ? half_operand(a, half_in == 2) : operand_array(a, ct, 1);
    if (xa == NULL) {
        goto done;
    }
    xb = half_in || (ot == STAX_FLOAT16 && StaxTensor_Check(b)
                     && ((StaxTensor *)b)->ndim > 0)
         ? half_operand(b, half_in == 2) : operand_array(b, ct, 1);
    if (xb == NULL) {
        goto done;
    }
    if (!stax_dtype_is_floating(ct) && (op->id == STAX_OP_FLOOR_DIVIDE
                                        || op->id == STAX_OP_REMAINDER
                                        || op->id == STAX_OP_FMOD)) {
        /* integer division by zero raises, as in torch (an empty result
         * divides nothing) */
        int64_t numel = 1;
        for (int i = 0; i < nd; i++) {
            numel *= shape[i];
        }
        int z = numel == 0 ? 0 : has_zero(xb);
        if (z < 0) {
            goto done;
        }
        if (z) {
            PyErr_SetString(PyExc_RuntimeError, "ZeroDivisionError");
            goto done;
        }
    }
    if (inplace_out != NULL) {
        stax_tensor_will_write(inplace_out);
        out = (StaxTensor *)Py_NewRef(inplace_out);
    }
    else {
        out = binary_result(op, ops, nd, shape, ot);
        if (out == NULL) {
            goto done;
        }
    }
    oarr = stax_tensor_as_array(out);
    if (oarr == NULL) {
        goto done;
    }
    if ((inplace_out != NULL && inplace_out->dtype != ot) || half_in == 2) {
        /* compute in ot, then cast into self */
        PyObject *args[2] = {xa, xb};
        PyObject *tmp = ufunc_array(uf, args, 2);
        if (tmp != NULL && half_in == 2 && PyArray_Check(tmp)) {
            Py_SETREF(tmp, (PyObject *)PyArray_CastToType(
                (PyArrayObject *)tmp, PyArray_DescrFromType(NPY_FLOAT32), 0));
        }
        if (tmp == NULL || PyArray_CopyInto((PyArrayObject *)oarr,
                                            (PyArrayObject *)tmp) < 0) {
            Py_XDECREF(tmp);
            goto done;
        }
        Py_DECREF(tmp);
    }
    else {
        PyObject *args[3] = {xa, xb, oarr};
        PyObject *tmp = PyObject_Vectorcall(uf, args, 2, out_kwnames);
        if (tmp == NULL) {
            if (PyErr_ExceptionMatches(PyExc_ValueError)) {
                /* "Integers to negative integer powers are not allowed." */
                PyObject *et, *ev, *tb, *msg;
                PyErr_Fetch(&et, &ev, &tb);
                msg = ev ? PyObject_Str(ev) : NULL;
                PyErr_SetObject(PyExc_RuntimeError, msg ? msg : Py_None);
                Py_XDECREF(msg);
                Py_XDECREF(et);
                Py_XDECREF(ev);
                Py_XDECREF(tb);
            }
            goto done;
        }
        Py_DECREF(tmp);
    }
    if (inplace_out != NULL) {
        stax_tensor_bump_version(inplace_out);
    }
    else {
        propagate_grad(out, ops, 2);
    }
    r = (PyObject *)out;
    out = NULL;
done:
    Py_XDECREF(xa);
    Py_XDECREF(xb);
    Py_XDECREF(oarr);
    Py_XDECREF(out);
    return r;
}

/* ---- unary ------------------------------------------------------------- */

static PyObject *
run_cloop(cloop_t k, PyObject *xa, PyObject *oarr, stax_dtype_t ot)
{
    /* compute in float32 (float16 too) or float64, contiguous */
    int ctype = ot == STAX_FLOAT64 ? NPY_FLOAT64 : NPY_FLOAT32;
    PyObject *in = NULL, *tmp = NULL;
    in = PyArray_FromAny(xa, PyArray_DescrFromType(ctype), 0, 0,
                         NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED
                         | NPY_ARRAY_FORCECAST, NULL);
    if (in == NULL) {
        return NULL;
    }
    tmp = PyArray_NewLikeArray((PyArrayObject *)in, NPY_CORDER,
                               PyArray_DescrFromType(ctype), 0);
    if (tmp == NULL) {
        Py_DECREF(in);
        return NULL;
    }
    if (ctype == NPY_FLOAT32) {
        run_cloop_f(k, PyArray_DATA((PyArrayObject *)in),
                    PyArray_DATA((PyArrayObject *)tmp),
                    PyArray_SIZE((PyArrayObject *)in));
    }
    else {
        run_cloop_d(k, PyArray_DATA((PyArrayObject *)in),
                    PyArray_DATA((PyArrayObject *)tmp),
                    PyArray_SIZE((PyArrayObject *)in));
    }
    Py_DECREF(in);
    if (PyArray_CopyInto((PyArrayObject *)oarr, (PyArrayObject *)tmp) < 0) {
        Py_DECREF(tmp);
        return NULL;
    }
    Py_DECREF(tmp);
    Py_RETURN_NONE;
}

static PyObject *
stax_ops_unary(const stax_op_info *op, PyObject *a, StaxTensor *inplace_out)
{
    StaxTensor *x, *out = NULL;
    PyObject *xa = NULL, *oarr = NULL, *r = NULL, *tmp = NULL;
    stax_dtype_t ct, ot;
    cloop_t cl = cloop_of(op->id);
    PyObject *uf = ufuncs[op->id];

    if (!StaxTensor_Check(a)) {
        if (is_scalar(a)) {
            Py_RETURN_NOTIMPLEMENTED;
        }
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument 'input' (position 1) must be Tensor, "
                     "not %.100s", op->name, Py_TYPE(a)->tp_name);
        return NULL;
    }
    if (uf == NULL && cl == CL_NONE) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    x = (StaxTensor *)a;
    ct = ot = x->dtype;
    if (op->flags & STAX_OPF_COMPARISON) {
        ot = STAX_BOOL;
    }
    else if ((op->flags & STAX_OPF_FLOAT_RESULT)
             && !stax_dtype_is_floating(x->dtype)) {
        ct = ot = stax_default_dtype();
    }
    else if (x->dtype == STAX_BOOL && op->id == STAX_OP_NEG) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Negation, the `-` operator, on a bool tensor is not "
                        "supported. If you are trying to invert a mask, use "
                        "the `~` or `logical_not()` operator instead.");
        return NULL;
    }
    else if (x->dtype == STAX_BOOL
             && (op->id == STAX_OP_ABS || op->id == STAX_OP_CEIL
                 || op->id == STAX_OP_FLOOR || op->id == STAX_OP_ROUND
                 || op->id == STAX_OP_TRUNC)) {
        /* torch has no bool kernel for these */
        PyErr_Format(PyExc_NotImplementedError, "\"%s%s\" not implemented for 'Bool'",
                     op->name, op->id == STAX_OP_ABS ? "_cpu" : "_vml_cpu");
        return NULL;
    }
    else if (x->dtype == STAX_BOOL && op->id == STAX_OP_RELU) {
        PyErr_SetString(PyExc_RuntimeError, "Boolean inputs not supported for relu");
        return NULL;
    }
    else if (x->dtype == STAX_BOOL && op->id == STAX_OP_SQUARE) {
        /* torch's square is pow(x, 2): bool promotes to int64 */
        ct = ot = STAX_INT64;
    }
    else if (op->id == STAX_OP_BITWISE_NOT
             && stax_dtype_is_floating(x->dtype)) {
        PyErr_Format(PyExc_NotImplementedError,
                     "\"bitwise_not_cpu\" not implemented for '%s'",
                     stax_dtype_title(x->dtype));
        return NULL;
    }
    else if (!(op->flags & STAX_OPF_INT_OK) && !stax_dtype_is_floating(x->dtype)
             && op->id != STAX_OP_CLONE) {
        PyErr_Format(PyExc_RuntimeError, "\"%s_cpu\" not implemented for '%s'",
                     op->name, stax_dtype_title(x->dtype));
        return NULL;
    }
    if (op->id == STAX_OP_EXP && (ct == STAX_FLOAT32 || ct == STAX_FLOAT16)) {
        cl = CL_EXP;
    }
    if (stax_ops_meta_mode) {
        if (inplace_out != NULL) {
            return stax_ops_meta_unsupported();
        }
        if (cl == CL_NONE && (stax_dtype_is_floating(ct)
                              || (op->id != STAX_OP_FLOOR && op->id != STAX_OP_CEIL
                                  && op->id != STAX_OP_ROUND && op->id != STAX_OP_TRUNC))
            && !(op->id == STAX_OP_RELU && ct == STAX_BOOL)) {
            /* the kernel's ufunc call, on 0-d operands: its type errors */
            PyObject *probe[2] = {a, NULL};
            int n = 1;
            if (op->id == STAX_OP_RELU) {
                probe[1] = zero_of(ct);
                n = 2;
            }
            if (probe_ufunc(uf, probe, n, ct, ot) < 0) {
                return NULL;
            }
        }
        out = unary_result(a, ot);
        if (out != NULL) {
            propagate_grad(out, &a, 1);
        }
        return (PyObject *)out;
    }
    if (inplace_out != NULL) {
        if (check_inplace_cast(ot, inplace_out->dtype) < 0) {
            return NULL;
        }
        stax_tensor_will_write(inplace_out);
        out = (StaxTensor *)Py_NewRef(inplace_out);
    }
    else {
        out = unary_result(a, ot);
        if (out == NULL) {
            return NULL;
        }
    }
    xa = operand_array(a, ct, 1);
    if (xa == NULL) {
        goto done;
    }
    oarr = stax_tensor_as_array(out);
    if (oarr == NULL) {
        goto done;
    }
    if (cl != CL_NONE) {
        tmp = run_cloop(cl, xa, oarr, ot);
    }
    else if (!stax_dtype_is_floating(ct)
             && (op->id == STAX_OP_FLOOR || op->id == STAX_OP_CEIL
                 || op->id == STAX_OP_ROUND || op->id == STAX_OP_TRUNC)) {
        tmp = PyArray_CopyInto((PyArrayObject *)oarr, (PyArrayObject *)xa) < 0
                  ? NULL : Py_NewRef(Py_None);
    }
    else if (op->id == STAX_OP_RELU) {
        PyObject *args[3] = {xa, zero_of(ct), oarr};
        if (ct == STAX_BOOL) {
            tmp = PyArray_CopyInto((PyArrayObject *)oarr,
                                   (PyArrayObject *)xa) < 0
                      ? NULL : Py_NewRef(Py_None);
        }
        else {
            tmp = PyObject_Vectorcall(uf, args, 2, out_kwnames);
        }
    }
    else if (inplace_out != NULL
             && (ot != ct || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)oarr))) {
        /* a strided in-place unary computes into a temporary: NumPy 2.4's
         * SIMD negative with in == out strided float32/int32 views reads
         * them as contiguous (np.negative(a[:, 1], out=a[:, 1])) */
        PyObject *args[1] = {xa};
        PyObject *t2 = ufunc_array(uf, args, 1);
        if (t2 != NULL && PyArray_CopyInto((PyArrayObject *)oarr,
                                           (PyArrayObject *)t2) < 0) {
            Py_CLEAR(t2);
        }
        tmp = t2;
    }
    else {
        PyObject *args[2] = {xa, oarr};
        tmp = PyObject_Vectorcall(uf, args, 1, out_kwnames);
    }
    if (tmp == NULL) {
        goto done;
    }
    Py_DECREF(tmp);
    if (inplace_out != NULL) {
        stax_tensor_bump_version(inplace_out);
    }
    else {
        propagate_grad(out, &a, 1);
    }
    r = (PyObject *)out;
    out = NULL;
done:
    Py_XDECREF(xa);
    Py_XDECREF(oarr);
    Py_XDECREF(out);
    return r;
}

/* ---- reductions: sum / mean / prod / amax / amin -------------------------- */

static PyObject *reduce_methods[STAX_OP_COUNT];   /* np.add.reduce, ... */
static PyObject *reduce_kwnames;                  /* ("axis", "dtype", "keepdims") */

/* normalized axis tuple; NULL without exception = "not on the fast path" */
static PyObject *
fast_axes(PyObject *dim, int ndim, int64_t *count, const int64_t *sizes)
{
    PyObject *t = NULL;
    int seen[STAX_MAX_DIMS] = {0};
    Py_ssize_t n;
    *count = 1;
    /* dim=None, () and [] all reduce every dimension (torch) */
    if (dim == Py_None || (PyTuple_Check(dim) && PyTuple_GET_SIZE(dim) == 0)
        || (PyList_Check(dim) && PyList_GET_SIZE(dim) == 0)) {
        t = PyTuple_New(ndim);
        for (int i = 0; t && i < ndim; i++) {
            PyTuple_SET_ITEM(t, i, PyLong_FromLong(i));
            *count *= sizes[i];
        }
        return t;
    }
    if (PyLong_CheckExact(dim)) {
        n = 1;
    }
    else if (PyTuple_CheckExact(dim) || PyList_CheckExact(dim)) {
        n = PySequence_Fast_GET_SIZE(dim);
    }
    else {
        return NULL;
    }
    if (ndim == 0) {
        return NULL;
    }
    t = PyTuple_New(n);
    if (t == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyLong_CheckExact(dim) ? dim
                                             : PySequence_Fast_ITEMS(dim)[i];
        long d;
        if (!PyLong_CheckExact(o)) {
            Py_DECREF(t);
            return NULL;
        }
        d = PyLong_AsLong(o);
        if (d < -ndim || d >= ndim) {
            PyErr_Clear();
            Py_DECREF(t);
            return NULL;   /* the Python path raises torch's IndexError */
        }
        d = d < 0 ? d + ndim : d;
        if (seen[d]) {
            Py_DECREF(t);
            return NULL;
        }
        seen[d] = 1;
        *count *= sizes[d];
        PyTuple_SET_ITEM(t, i, PyLong_FromLong(d));
    }
    return t;
}

static PyObject *
stax_ops_reduce(const stax_op_info *op, PyObject *const *args,
                Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *bound = NULL, *axes = NULL, *arr = NULL, *res = NULL;
    PyObject *r = NULL, *dt = NULL;
    StaxTensor *x, *out;
    stax_dtype_t acc, odt;
    int64_t count;
    int keep;
    PyObject *meth = reduce_methods[op->id];
    if (meth == NULL || nargs < 1 || !StaxTensor_Check(args[0])) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (nargs == 1 && kwnames == NULL) {
        bound = NULL;
    }
    else {
        bound = stax_ops_bind_vector(op, args, nargs, kwnames,
                                     args + nargs);
        if (bound == NULL) {
            PyErr_Clear();
            Py_RETURN_NOTIMPLEMENTED;
        }
        /* (self, dim, keepdim[, dtype]) */
        if (PyTuple_GET_SIZE(bound) > 3
            && PyTuple_GET_ITEM(bound, 3) != Py_None) {
            Py_DECREF(bound);
            Py_RETURN_NOTIMPLEMENTED;
        }
        if (!PyBool_Check(PyTuple_GET_ITEM(bound, 2))) {
            Py_DECREF(bound);
            Py_RETURN_NOTIMPLEMENTED;
        }
    }
    x = (StaxTensor *)args[0];
    keep = bound ? PyTuple_GET_ITEM(bound, 2) == Py_True : 0;
    axes = fast_axes(bound ? PyTuple_GET_ITEM(bound, 1)
                           : (op->id == STAX_OP_AMAX || op->id == STAX_OP_AMIN
                              ? Py_None : Py_None),
                     x->ndim, &count, x->sizes);
    if (axes == NULL) {
        Py_XDECREF(bound);
        if (PyErr_Occurred()) {
            return NULL;
        }
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (op->id == STAX_OP_PROD && bound != NULL
        && PyTuple_GET_ITEM(bound, 1) != Py_None
        && !PyLong_CheckExact(PyTuple_GET_ITEM(bound, 1))) {
        goto notimpl;   /* prod(dim=tuple) is a TypeError: Python path */
    }
    odt = acc = x->dtype;
    if (op->id == STAX_OP_SUM || op->id == STAX_OP_PROD) {
        if (!stax_dtype_is_floating(x->dtype)) {
            odt = acc = STAX_INT64;
        }
        else if (x->dtype == STAX_FLOAT16) {
            if (op->id == STAX_OP_PROD) {
                goto notimpl;   /* rounded at every step: the Python path */
            }
            acc = STAX_FLOAT32;
        }
    }
    else if (op->id == STAX_OP_MEAN) {
        if (!stax_dtype_is_floating(x->dtype)) {
            goto notimpl;
        }
        if (x->dtype == STAX_FLOAT16) {
            acc = STAX_FLOAT32;
        }
    }
    else if (count == 0 || x->dtype == STAX_BOOL) {
        goto notimpl;   /* amax/amin of empty: the Python path errors */
    }
    if (stax_ops_meta_mode) {
        /* eager's result: the reduced dims dropped (kept as 1), contiguous */
        int64_t shape[STAX_MAX_DIMS];
        int red[STAX_MAX_DIMS] = {0}, nd = 0;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(axes); i++) {
            red[PyLong_AsLong(PyTuple_GET_ITEM(axes, i))] = 1;
        }
        for (int d = 0; d < x->ndim; d++) {
            if (!red[d]) {
                shape[nd++] = x->sizes[d];
            }
            else if (keep) {
                shape[nd++] = 1;
            }
        }
        out = stax_tensor_empty(nd, shape, odt);
        if (out != NULL) {
            PyObject *a0 = args[0];
            propagate_grad(out, &a0, 1);
        }
        r = (PyObject *)out;
        goto done;
    }
    arr = stax_tensor_as_array(x);
    if (arr == NULL) {
        goto done;
    }
    dt = (PyObject *)PyArray_DescrFromType(stax_dtype_to_npy(acc));
    {
        PyObject *cargs[4] = {arr, axes,
                              op->id == STAX_OP_AMAX || op->id == STAX_OP_AMIN
                                  ? Py_None : dt,
                              keep ? Py_True : Py_False};
        res = PyObject_Vectorcall(meth, cargs, 1, reduce_kwnames);
    }
    if (res == NULL) {
        goto done;
    }
    Py_SETREF(res, PyArray_FromAny(res, NULL, 0, 0, NPY_ARRAY_ENSUREARRAY
                                   | NPY_ARRAY_C_CONTIGUOUS
                                   | NPY_ARRAY_ENSURECOPY, NULL));
    if (res == NULL) {
        goto done;
    }
    if (op->id == STAX_OP_MEAN) {
        PyObject *n = PyLong_FromLongLong(count), *q;
        if (n == NULL) {
            goto done;
        }
        q = PyNumber_InPlaceTrueDivide(res, n);
        Py_DECREF(n);
        if (q == NULL) {
            goto done;
        }
        Py_SETREF(res, q);
    }
    if (acc != odt) {
        Py_SETREF(res, PyArray_CastToType((PyArrayObject *)res,
                                          PyArray_DescrFromType(
                                              stax_dtype_to_npy(odt)), 0));
        if (res == NULL) {
            goto done;
        }
    }
    out = stax_tensor_from_array(res);
    if (out == NULL) {
        goto done;
    }
    {
        PyObject *a0 = args[0];
        propagate_grad(out, &a0, 1);
    }
    r = (PyObject *)out;
    goto done;
notimpl:
    r = Py_NewRef(Py_NotImplemented);
done:
    Py_XDECREF(bound);
    Py_XDECREF(axes);
    Py_XDECREF(arr);
    Py_XDECREF(res);
    Py_XDECREF(dt);
    return r;
}

/* The C path: positional tensor/scalar operands, no extra arguments. */
PyObject *
stax_ops_eager_c(const stax_op_info *op, PyObject *const *args,
                 Py_ssize_t nargs, PyObject *kwnames)
{
    int inplace = stax_ops_is_inplace_info(op);
    StaxTensor *self = NULL;
    if (op->kind == STAX_OPK_REDUCTION) {
        return stax_ops_reduce(op, args, nargs, kwnames);
    }
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (op->kind != STAX_OPK_POINTWISE || nargs != op->arity) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (inplace) {
        if (!StaxTensor_Check(args[0])) {
            Py_RETURN_NOTIMPLEMENTED;
        }
        self = (StaxTensor *)args[0];
    }
    if (op->arity == 1) {
        return stax_ops_unary(op, args[0], self);
    }
    if (op->arity == 2) {
        return stax_ops_binary(op, args[0], args[1], self);
    }
    Py_RETURN_NOTIMPLEMENTED;
}

int
stax_ops_eager_init(PyObject *m)
{
    PyObject *np = PyImport_ImportModule("numpy");
    (void)m;
    if (np == NULL) {
        return -1;
    }
    for (int i = 0; i < STAX_OP_COUNT; i++) {
        scalar_ok[i] = stax_op_has_overload(&stax_op_table[i], "Scalar")
                       || stax_op_has_overload(&stax_op_table[i],
                                               "Tensor_Scalar");
        if (ufunc_names[i] != NULL) {
            ufuncs[i] = PyObject_GetAttrString(np, ufunc_names[i]);
            if (ufuncs[i] == NULL) {
                Py_DECREF(np);
                return -1;
            }
        }
    }
    {
        static const struct { stax_op_id_t id; const char *uf; } rm[] = {
            {STAX_OP_SUM, "add"}, {STAX_OP_MEAN, "add"},
            {STAX_OP_PROD, "multiply"}, {STAX_OP_AMAX, "maximum"},
            {STAX_OP_AMIN, "minimum"},
        };
        for (size_t k = 0; k < sizeof(rm) / sizeof(rm[0]); k++) {
            PyObject *u = PyObject_GetAttrString(np, rm[k].uf);
            reduce_methods[rm[k].id] = u ? PyObject_GetAttrString(u, "reduce")
                                         : NULL;
            Py_XDECREF(u);
            if (reduce_methods[rm[k].id] == NULL) {
                Py_DECREF(np);
                return -1;
            }
        }
        reduce_kwnames = Py_BuildValue("(sss)", "axis", "dtype", "keepdims");
        if (reduce_kwnames == NULL) {
            Py_DECREF(np);
            return -1;
        }
    }
    Py_DECREF(np);
    zero_long = PyLong_FromLong(0);
    out_kwnames = Py_BuildValue("(s)", "out");
    return zero_long && out_kwnames ? 0 : -1;
}
