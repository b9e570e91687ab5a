/* The public function objects (tensorplay.functional.<name>, Tensor
 * methods), __tensor_function__ dispatch, the installer of Tensor methods
 * and number slots, stax_op_for_target, and the _C helpers of _ops.py. */
#include <math.h>
#include <string.h>

#include "tensor/stax_numpy.h"
#include "structmember.h"
#include "ops/ops.h"
#include "ops/ops_internal.h"

typedef struct {
    PyObject_HEAD
    const stax_op_info *op;
    PyObject *name;       /* "relu" */
    PyObject *qualname;   /* "relu" / "Tensor.relu" */
    PyObject *module;     /* "tensorplay.functional" */
    PyObject *doc;
    PyObject *dict;
    int is_method;
    vectorcallfunc vectorcall;
} StaxOpFunc;

static PyTypeObject *OpFunc_Type;
static PyObject *py_impls[STAX_OP_COUNT];          /* strong: out-of-place */
static PyObject *py_inplace_impls[STAX_OP_COUNT];  /* strong: in-place */
static PyObject *functions[STAX_OP_COUNT];         /* strong: public objects */
static PyObject *methods[STAX_OP_COUNT];           /* strong */
static PyObject *inplace_methods[STAX_OP_COUNT];   /* strong */
static PyObject *tensor_function_str;              /* "__tensor_function__" */
static PyObject *base_tensor_function;             /* borrowed from Tensor */
static PyObject *op_name_str;                      /* "_stax_op" */

static PyObject *builtin_abs;

/* ---- __tensor_function__ ------------------------------------------------ */

static int
overrides(PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    PyObject *attr;
    if (tp == StaxTensor_Type || tp == &PyFloat_Type || tp == &PyLong_Type
        || tp == &PyBool_Type || o == Py_None || tp == &PyUnicode_Type
        || tp == &PySlice_Type) {
        return 0;
    }
    attr = _PyType_Lookup(tp, tensor_function_str);
    if (attr == NULL) {
        return 0;
    }
    /* Tensor's own (if it ever gets one) is not an override */
    return attr != _PyType_Lookup(StaxTensor_Type, tensor_function_str);
}

/* collect overriding objects' types (unique, in order) from o */
static int
collect(PyObject *o, PyObject **types, int depth)
{
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject **items = PySequence_Fast_ITEMS(o);
        if (depth > 2) {
            return 0;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (collect(items[i], types, depth + 1) < 0) {
                return -1;
            }
        }
        return 0;
    }
    if (!overrides(o)) {
        return 0;
    }
    if (*types == NULL) {
        *types = PyList_New(0);
        if (*types == NULL) {
            return -1;
        }
    }
    if (!PySequence_Contains(*types, (PyObject *)Py_TYPE(o))) {
        /* subclasses before superclasses */
        Py_ssize_t n = PyList_GET_SIZE(*types), at = n;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (PyType_IsSubtype(Py_TYPE(o),
                                 (PyTypeObject *)PyList_GET_ITEM(*types, i))) {
                at = i;
                break;
            }
        }
        return PyList_Insert(*types, at, (PyObject *)Py_TYPE(o));
    }
    return 0;
}

/* borrowed list or NULL; -1 on error */
static int
find_overrides(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
               PyObject **types)
{
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    *types = NULL;
    for (Py_ssize_t i = 0; i < nargs + nk; i++) {
        PyObject *o = args[i];
        PyTypeObject *tp = Py_TYPE(o);
        if (tp == StaxTensor_Type || tp == &PyFloat_Type
            || tp == &PyLong_Type || o == Py_None) {
            continue;
        }
        if (collect(o, types, 0) < 0) {
            Py_CLEAR(*types);
            return -1;
        }
    }
    return 0;
}

static PyObject *
dispatch_override(PyObject *func, PyObject *types, PyObject *const *args,
                  Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *targs = NULL, *kw = NULL, *ttypes = NULL, *res = NULL;
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    targs = PyTuple_New(nargs);
    kw = PyDict_New();
    ttypes = PyList_AsTuple(types);
    if (targs == NULL || kw == NULL || ttypes == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyTuple_SET_ITEM(targs, i, Py_NewRef(args[i]));
    }
    for (Py_ssize_t i = 0; i < nk; i++) {
        if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i),
                           args[nargs + i]) < 0) {
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ttypes); i++) {
        PyObject *tp = PyTuple_GET_ITEM(ttypes, i);
        PyObject *meth = PyObject_GetAttr(tp, tensor_function_str);
        if (meth == NULL) {
            goto done;
        }
        res = PyObject_CallFunctionObjArgs(meth, func, ttypes, targs, kw,
                                           NULL);
        Py_DECREF(meth);
        if (res == NULL || res != Py_NotImplemented) {
            goto done;
        }
        Py_CLEAR(res);
    }
    PyErr_Format(PyExc_TypeError,
                 "no implementation found for '%R' on types that implement "
                 "__tensor_function__: %R", func, ttypes);
done:
    Py_XDECREF(targs);
    Py_XDECREF(kw);
    Py_XDECREF(ttypes);
    return res;
}

/* ---- calling an op ------------------------------------------------------ */

/* In-place ops follow PyTorch: with grad mode on, a target that does not
 * require grad and is written from an operand that does (positional or
 * keyword) requires grad afterwards (and is no longer a leaf). A target that
 * already requires grad keeps its flags. One place for every in-place op. */
static void
inplace_requires_grad(PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    StaxTensor *self;
    if (nargs < 1 || !StaxTensor_Check(args[0])) {
        return;
    }
    self = (StaxTensor *)args[0];
    if (self->requires_grad || !stax_dtype_is_floating(self->dtype)) {
        return;
    }
    if (stax_result_requires_grad(args + 1, nargs - 1 + nkw)) {
        stax_tensor_set_result_requires_grad(self, 1);
    }
}

/* torch's assert_no_internal_overlap: an elementwise write into a tensor
 * where two elements share one memory location (an expanded dim, stride 0
 * and size > 1) would depend on the order of the writes. */
static int
check_no_internal_overlap(PyObject *o)
{
    StaxTensor *t;
    if (!StaxTensor_Check(o)) {
        return 0;
    }
    t = (StaxTensor *)o;
    for (int d = 0; d < t->ndim; d++) {
        if (t->strides[d] == 0 && t->sizes[d] > 1) {
            PyErr_SetString(PyExc_RuntimeError,
                            "unsupported operation: more than one element of the "
                            "written-to tensor refers to a single memory location. "
                            "Please clone() the tensor before performing the "
                            "operation.");
            return -1;
        }
    }
    return 0;
}

static stax_autograd_hook_t autograd_hook;
static _Thread_local stax_ops_read_hook_t read_hook;

void
stax_ops_set_read_hook(stax_ops_read_hook_t hook)
{
    read_hook = hook;
}

static void
announce_reads(PyObject *const *args, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = args[i];
        if (StaxTensor_Check(o)) {
            read_hook((StaxTensor *)o);
        }
        else if (PyList_CheckExact(o) || PyTuple_CheckExact(o)) {
            Py_ssize_t k = PySequence_Fast_GET_SIZE(o);
            PyObject **items = PySequence_Fast_ITEMS(o);
            for (Py_ssize_t j = 0; j < k; j++) {
                if (StaxTensor_Check(items[j])) {
                    read_hook((StaxTensor *)items[j]);
                }
            }
        }
    }
}

void
stax_ops_set_autograd_hook(stax_autograd_hook_t hook)
{
    autograd_hook = hook;
}

/* 1 if o (or an element of a list/tuple o) is a CUDA tensor */
static int
has_cuda(PyObject *o)
{
    if (StaxTensor_Check(o)) {
        return stax_tensor_is_cuda((StaxTensor *)o);
    }
    if (PyList_Check(o) || PyTuple_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            PyObject *e = PySequence_Fast_GET_ITEM(o, i);
            if (StaxTensor_Check(e) && stax_tensor_is_cuda((StaxTensor *)e)) {
                return 1;
            }
        }
    }
    return 0;
}

/* Ops whose tensor-room implementation handles CUDA (and bfloat16)
 * tensors itself: views (metadata only), the copies between devices, and
 * the copies laid out by a memory format (clone, _to_copy, contiguous:
 * _C._copy_as) */
static int
cuda_native(const stax_op_info *op)
{
    return op->kind == STAX_OPK_VIEW || op->id == STAX_OP_TO
           || op->id == STAX_OP_COPY_ || op->id == STAX_OP_CLONE
           || op->id == STAX_OP_TO_COPY || op->id == STAX_OP_CONTIGUOUS;
}

/* an op handed to a registered Python dispatcher, called as
 * hook(name, func, args, kwargs, flag): STAX_PY_CUDA_DISPATCH
 * (tensorplay.cuda._dispatch: a CUDA operand; flag = in place; a generated
 * kernel, cuBLAS, or the host with a one-time warning) and
 * STAX_PY_BF16_DISPATCH (tensorplay._ops._bf16_dispatch: a bfloat16
 * operand, computed in float32 and rounded once; flag = mutates) */
static PyObject *
run_registered(int which, const stax_op_info *op, PyObject *func,
               PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int flag)
{
    PyObject *h = stax_py_registered(which);
    PyObject *t = NULL, *kw = NULL, *name = NULL, *res = NULL;
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    if (h == NULL || (t = PyTuple_New(nargs)) == NULL
        || (kw = PyDict_New()) == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyTuple_SET_ITEM(t, i, Py_NewRef(args[i]));
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i), args[nargs + i])
            < 0) {
            goto done;
        }
    }
    name = PyUnicode_FromString(op->name);
    if (name != NULL) {
        res = PyObject_CallFunctionObjArgs(h, name, func, t, kw,
                                           flag ? Py_True : Py_False, NULL);
    }
done:
    Py_XDECREF(t);
    Py_XDECREF(kw);
    Py_XDECREF(name);
    return res;
}

/* 1 if o (or an element of a list/tuple o) is a bfloat16 tensor */
static int
has_bf16(PyObject *o)
{
    if (StaxTensor_Check(o)) {
        return ((StaxTensor *)o)->dtype == STAX_BFLOAT16;
    }
    if (PyList_Check(o) || PyTuple_Check(o)) {
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            PyObject *e = PySequence_Fast_GET_ITEM(o, i);
            if (StaxTensor_Check(e)
                && ((StaxTensor *)e)->dtype == STAX_BFLOAT16) {
                return 1;
            }
        }
    }
    return 0;
}

/* An op computing on values with a bfloat16 operand (or dtype=bfloat16):
 * NumPy has no bfloat16, so tensorplay._ops._bf16_dispatch runs it as
 * torch's CPU kernels do, in float32 rounded once to bfloat16. Views,
 * copies and the tensor room's own methods handle bfloat16 themselves. */
static int
bf16_computed(const stax_op_info *op, PyObject *const *args, Py_ssize_t nargs,
              PyObject *kwnames, int inplace)
{
    Py_ssize_t nk = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    int hit = 0;
    if (cuda_native(op)) {
        return 0;
    }
    if ((inplace ? py_inplace_impls[op->id] : py_impls[op->id]) == NULL
        && op->kind != STAX_OPK_POINTWISE && op->kind != STAX_OPK_REDUCTION) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < nargs + nk && !hit; i++) {
        hit = has_bf16(args[i]);
    }
    for (Py_ssize_t i = 0; i < nk && !hit; i++) {
        hit = args[nargs + i] == stax_dtype_object(STAX_BFLOAT16)
              && PyUnicode_CompareWithASCIIString(
                     PyTuple_GET_ITEM(kwnames, i), "dtype") == 0;
    }
    return hit;
}

/* An elementwise result of a Python implementation (NumPy's results are
 * row-major) or of a CUDA kernel laid out as TensorIterator lays out
 * torch's: in its tensor
 * operands' stride order; one more copy when that is not the layout it
 * has. A result sharing an operand's storage (the operand itself, a view)
 * is kept. Steals res. */
/* torch's strides for an elementwise result of sizes (nd, sizes) of op
 * on args: 1 and st filled, or 0 (row-major, or a result sharing an
 * operand's storage: kept as it is) */
static int
pointwise_strides(const stax_op_info *op, PyObject *const *args,
                  Py_ssize_t nall, const StaxTensor *r, int64_t *st)
{
    PyObject *ops[8];
    int n = 0;
    if (r->ndim < 2 || op->kind != STAX_OPK_POINTWISE
        || (op->flags & STAX_OPF_LAYOUT_CONTIG)
        || op->id == STAX_OP_CONTIGUOUS || op->id == STAX_OP_CLONE
        || op->id == STAX_OP_TO_COPY || op->id == STAX_OP_TO) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < nall && n < 8; i++) {
        if (StaxTensor_Check(args[i])) {
            if (((StaxTensor *)args[i])->storage == r->storage) {
                return 0;
            }
            ops[n++] = args[i];
        }
        else if (op->id == STAX_OP_WHERE && i < 3 && stax_scalar_dtype(args[i]) >= 0) {
            ops[n++] = args[i];   /* where's Python scalar is a 0-d operand */
        }
    }
    if (n == 0) {
        return 0;
    }
    if (op->flags & STAX_OPF_LAYOUT_LIKE) {
        if (!StaxTensor_Check(args[0])
            || ((StaxTensor *)args[0])->ndim != r->ndim
            || stax_layout_format_strides((StaxTensor *)args[0],
                                          STAX_MF_PRESERVE, st) < 0) {
            PyErr_Clear();
            return 0;
        }
    }
    else {
        stax_layout_iter_strides(n, ops, r->ndim, r->sizes, st);
    }
    return memcmp(st, r->strides, sizeof(int64_t) * (size_t)r->ndim) != 0;
}

static PyObject *
pointwise_layout(const stax_op_info *op, PyObject *const *args,
                 Py_ssize_t nall, PyObject *res)
{
    StaxTensor *r = (StaxTensor *)res, *o;
    int64_t st[STAX_MAX_DIMS];
    if (res == NULL || !StaxTensor_Check(res)
        || !pointwise_strides(op, args, nall, r, st)) {
        return res;
    }
    /* a CUDA result (a generated kernel's, row-major) is copied on the
     * device by the tensor room */
    o = stax_tensor_empty_strided_on(r->ndim, r->sizes, st, r->dtype,
                                     r->storage->device);
    if (o == NULL || stax_tensor_copy_from(o, res) < 0) {
        Py_XDECREF(o);
        Py_DECREF(res);
        return NULL;
    }
    if (r->requires_grad) {
        stax_tensor_set_result_requires_grad(o, 1);
    }
    Py_DECREF(res);
    return (PyObject *)o;
}

/* the op itself, after __tensor_function__ dispatch and autograd */
static PyObject *
run_op_kernel(const stax_op_info *op, PyObject *func, PyObject *const *args,
              size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nall = nargs + (kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *res, *impl;
    int inplace = stax_ops_is_inplace_info(op);
    /* writes its argument 0: an in-place twin (add_) or a row that only
     * exists in place (copy_, uniform_): the table's flag says which */
    int mutates = (op->flags & STAX_OPF_INPLACE) != 0;

    if (inplace && op->kind == STAX_OPK_POINTWISE && nargs >= 1
        && check_no_internal_overlap(args[0]) < 0) {
        return NULL;
    }
    if (((inplace && op->kind == STAX_OPK_POINTWISE) || op->id == STAX_OP_COPY_)
        && nargs >= 1) {
        for (Py_ssize_t i = 1; i < nall; i++) {
            if (stax_tensor_check_no_overlap(args[0], args[i], 0) < 0) {
                return NULL;
            }
        }
    }
    if (inplace && nargs >= 1
        && (op->id == STAX_OP_INDEX_ADD || op->id == STAX_OP_INDEX_COPY
            || op->id == STAX_OP_INDEX_FILL || op->id == STAX_OP_SCATTER
            || op->id == STAX_OP_SCATTER_ADD || op->id == STAX_OP_SCATTER_REDUCE)) {
        /* torch's assert_no_overlap between self and its index/source */
        for (Py_ssize_t i = 1; i < nall; i++) {
            if (stax_tensor_check_no_overlap(args[0], args[i], 1) < 0) {
                return NULL;
            }
        }
    }
    if (!cuda_native(op)) {
        for (Py_ssize_t i = 0; i < nall; i++) {
            if (has_cuda(args[i])) {
                res = run_registered(STAX_PY_CUDA_DISPATCH, op, func, args, nargs,
                                     kwnames, inplace);
                if (res != NULL && mutates) {
                    inplace_requires_grad(args, nargs, kwnames);
                }
                if (!inplace && !mutates && op->kind == STAX_OPK_POINTWISE) {
                    res = pointwise_layout(op, args, nall, res);
                }
                return res;
            }
        }
    }
    if (bf16_computed(op, args, nargs, kwnames, inplace)) {
        res = run_registered(STAX_PY_BF16_DISPATCH, op, func, args, nargs, kwnames,
                             mutates);
        if (!inplace && !mutates && op->kind == STAX_OPK_POINTWISE) {
            res = pointwise_layout(op, args, nall, res);
        }
        if (res != NULL && mutates) {
            inplace_requires_grad(args, nargs, kwnames);
        }
        return res;
    }
    res = stax_ops_eager_c(op, args, nargs, kwnames);
    if (res == Py_NotImplemented) {
        Py_DECREF(res);
        res = NULL;
        impl = inplace ? py_inplace_impls[op->id] : py_impls[op->id];
        if (impl != NULL) {
            res = PyObject_Vectorcall(impl, args, nargsf, kwnames);
            if (!inplace && op->kind == STAX_OPK_POINTWISE) {
                res = pointwise_layout(op, args, nall, res);
            }
        }
        else if (nargs >= 1 && StaxTensor_Check(args[0])) {
            /* a method the tensor room implements (views, to, copy_ ...) */
            PyObject *m = PyObject_GetAttrString(
                (PyObject *)Py_TYPE(args[0]), op->name);
            if (m != NULL && Py_TYPE(m) != OpFunc_Type) {
                res = PyObject_Vectorcall(m, args, nargsf, kwnames);
                Py_DECREF(m);
            }
            else {
                Py_XDECREF(m);
                PyErr_Clear();
                PyErr_Format(PyExc_NotImplementedError,
                             "tensorplay: op '%s' has no eager implementation "
                             "for these arguments", op->name);
                return NULL;
            }
        }
        else {
            PyErr_Format(PyExc_NotImplementedError,
                         "tensorplay: op '%s' has no eager implementation for "
                         "these arguments", op->name);
            return NULL;
        }
    }
    if (res != NULL && mutates) {
        inplace_requires_grad(args, nargs, kwnames);
    }
    return res;
}

/* ---- meta evaluation (stax_ops_meta_call) ------------------------------- */

int stax_ops_meta_mode = 0;
static int meta_armed = 0;      /* 1: the next op to reach run_op is a meta call */
static int meta_consumed = 0;   /* 1: an op took the armed call */
static PyObject *meta_marker;   /* private exception: "needs the values" */

PyObject *
stax_ops_meta_unsupported(void)
{
    PyErr_SetNone(meta_marker);
    return NULL;
}

/* Metadata rules for composite and library ops whose eager implementation
 * is Python over NumPy (its results are always contiguous, _ops_wrap):
 * the result of a call eager would run without error, else the marker (the
 * call then runs eagerly and raises eager's own error). Success only: each
 * rule accepts the plain cases it can vouch for. */
static int
float_tensor(PyObject *o)
{
    return StaxTensor_Check(o) && stax_dtype_is_floating(((StaxTensor *)o)->dtype);
}

static PyObject *
meta_result(int nd, const int64_t *shape, stax_dtype_t dt)
{
    return (PyObject *)stax_tensor_empty(nd, shape, dt);
}

/* Each rule below: b the bound arguments, x the float tensor input; nonzero
 * when the rule vouches for the call. */

static int
meta_gelu_ok(PyObject *b)
{
    /* (input, *, approximate) */
    PyObject *ap = PyTuple_GET_ITEM(b, 1);
    return PyUnicode_Check(ap) && (PyUnicode_CompareWithASCIIString(ap, "none") == 0
                                   || PyUnicode_CompareWithASCIIString(ap, "tanh") == 0);
}

/* softmax-like rules: dim an in-range int, the dtype argument (at index
 * dtype_at: softmax (self, dim, _stacklevel, dtype), _safe_softmax (self,
 * dim, dtype)) left None */
static int
meta_dim_ok(PyObject *b, const StaxTensor *x, Py_ssize_t dtype_at)
{
    PyObject *d = PyTuple_GET_ITEM(b, 1);
    long dim;
    if (!PyLong_CheckExact(d) || PyTuple_GET_ITEM(b, dtype_at) != Py_None || x->ndim < 1) {
        return 0;
    }
    dim = PyLong_AsLong(d);
    if (dim == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return dim >= -x->ndim && dim < x->ndim;
}

static int
meta_layer_norm_ok(PyObject *b, const StaxTensor *x)
{
    /* (input, normalized_shape, weight, bias, eps) */
    PyObject *ns = PyTuple_GET_ITEM(b, 1), *fast, *eps = PyTuple_GET_ITEM(b, 4);
    int64_t nsv[STAX_MAX_DIMS];
    Py_ssize_t k;
    if (!(PyFloat_CheckExact(eps) || PyLong_CheckExact(eps))) {
        return 0;
    }
    if (PyLong_CheckExact(ns)) {
        k = 1;
        nsv[0] = PyLong_AsLongLong(ns);
    }
    else if (PyTuple_CheckExact(ns) || PyList_CheckExact(ns)) {
        fast = ns;
        k = PySequence_Fast_GET_SIZE(fast);
        if (k > STAX_MAX_DIMS) {
            return 0;
        }
        for (Py_ssize_t i = 0; i < k; i++) {
            PyObject *v = PySequence_Fast_GET_ITEM(fast, i);
            if (!PyLong_CheckExact(v)) {
                return 0;
            }
            nsv[i] = PyLong_AsLongLong(v);
        }
    }
    else {
        return 0;
    }
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (k == 0 || x->ndim < k) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        if (x->sizes[x->ndim - k + i] != nsv[i]) {
            return 0;
        }
    }
    for (int j = 2; j <= 3; j++) {
        PyObject *p = PyTuple_GET_ITEM(b, j);
        if (p == Py_None) {
            continue;
        }
        if (!float_tensor(p) || ((StaxTensor *)p)->ndim != k) {
            return 0;
        }
        for (Py_ssize_t i = 0; i < k; i++) {
            if (((StaxTensor *)p)->sizes[i] != nsv[i]) {
                return 0;
            }
        }
    }
    return 1;
}

/* the result's rank (its sizes in shape), 0 where the rule does not vouch */
static int
meta_linear_shape(PyObject *b, const StaxTensor *x, int64_t *shape)
{
    /* (input, weight, bias) */
    PyObject *bias = PyTuple_GET_ITEM(b, 2);
    StaxTensor *w;
    if (!float_tensor(PyTuple_GET_ITEM(b, 1)) || x->ndim < 1) {
        return 0;
    }
    w = (StaxTensor *)PyTuple_GET_ITEM(b, 1);
    if (w->ndim != 2 || w->dtype != x->dtype || x->sizes[x->ndim - 1] != w->sizes[1]) {
        return 0;
    }
    if (bias != Py_None
        && (!StaxTensor_Check(bias) || ((StaxTensor *)bias)->dtype != x->dtype
            || ((StaxTensor *)bias)->ndim != 1
            || ((StaxTensor *)bias)->sizes[0] != w->sizes[0])) {
        return 0;
    }
    memcpy(shape, x->sizes, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = w->sizes[0];
    return x->ndim;
}

/* as meta_linear_shape; (self, other), both at least 2-d */
static int
meta_matmul_shape(PyObject *b, const StaxTensor *x, int64_t *shape)
{
    int nb, na, no;
    StaxTensor *w;
    if (!float_tensor(PyTuple_GET_ITEM(b, 1))) {
        return 0;
    }
    w = (StaxTensor *)PyTuple_GET_ITEM(b, 1);
    na = x->ndim;
    nb = w->ndim;
    if (na < 2 || nb < 2 || w->dtype != x->dtype
        || x->sizes[na - 1] != w->sizes[nb - 2]) {
        return 0;
    }
    no = na > nb ? na : nb;
    for (int i = 0; i < no - 2; i++) {   /* batch dims, right aligned */
        int ia = i - (no - na), ib = i - (no - nb);
        int64_t sa = ia >= 0 ? x->sizes[ia] : 1, sb = ib >= 0 ? w->sizes[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            return 0;
        }
        shape[i] = sa == 1 ? sb : sa;
    }
    shape[no - 2] = x->sizes[na - 2];
    shape[no - 1] = w->sizes[nb - 1];
    return no;
}

/* batch_norm in evaluation mode (training=False: no running statistics
 * written): x's shape and dtype, every per-channel tensor given with C
 * elements (eager's checks); a strided x keeps NumPy's layout in eager */
static int
meta_batch_norm_ok(PyObject *b, const StaxTensor *x)
{
    /* (input, running_mean, running_var, weight, bias, training, momentum, eps) */
    PyObject *tr = PyTuple_GET_ITEM(b, 5), *eps = PyTuple_GET_ITEM(b, 7);
    if (x->ndim < 2 || tr != Py_False || !stax_tensor_is_contiguous((StaxTensor *)x)
        || !(PyFloat_CheckExact(eps) || PyLong_CheckExact(eps))) {
        return 0;
    }
    for (int j = 1; j <= 4; j++) {
        PyObject *p = PyTuple_GET_ITEM(b, j);
        if (p == Py_None && j >= 3) {
            continue;
        }
        if (!float_tensor(p) || stax_tensor_numel((StaxTensor *)p) != x->sizes[1]) {
            return 0;
        }
    }
    return 1;
}

/* an int or a pair of ints (nn's _pair), exact Python ints only */
static int
meta_pair(PyObject *o, int64_t v[2])
{
    if (PyLong_CheckExact(o)) {
        v[0] = v[1] = PyLong_AsLongLong(o);
    }
    else if ((PyTuple_CheckExact(o) || PyList_CheckExact(o))
             && PySequence_Fast_GET_SIZE(o) == 2
             && PyLong_CheckExact(PySequence_Fast_GET_ITEM(o, 0))
             && PyLong_CheckExact(PySequence_Fast_GET_ITEM(o, 1))) {
        v[0] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(o, 0));
        v[1] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(o, 1));
    }
    else {
        return 0;
    }
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* F.unfold (im2col, what conv2d decomposes into): (N, C*kh*kw, oh*ow), or
 * without N for a 3-d input; every argument valid as eager checks it */
static int
meta_unfold_shape(PyObject *b, const StaxTensor *x, int64_t *shape)
{
    /* (input, kernel_size, dilation, padding, stride) */
    int64_t k[2], dl[2], p[2], st[2], o[2];
    int nd = x->ndim;
    if ((nd != 3 && nd != 4) || !meta_pair(PyTuple_GET_ITEM(b, 1), k)
        || !meta_pair(PyTuple_GET_ITEM(b, 2), dl) || !meta_pair(PyTuple_GET_ITEM(b, 3), p)
        || !meta_pair(PyTuple_GET_ITEM(b, 4), st)) {
        return 0;
    }
    if (nd == 3 && (x->sizes[0] == 0 || x->sizes[1] == 0)) {
        return 0;
    }
    for (int i = 0; i < 2; i++) {
        if (k[i] <= 0 || dl[i] <= 0 || st[i] <= 0 || p[i] < 0 || k[i] > (1 << 20)
            || dl[i] > (1 << 20) || p[i] > (1 << 20)) {
            return 0;
        }
        o[i] = (x->sizes[nd - 2 + i] + 2 * p[i] - dl[i] * (k[i] - 1) - 1) / st[i] + 1;
        if (x->sizes[nd - 2 + i] + 2 * p[i] - dl[i] * (k[i] - 1) - 1 < 0 || o[i] < 1) {
            return 0;
        }
    }
    if (nd == 4) {
        shape[0] = x->sizes[0];
    }
    shape[nd - 3] = x->sizes[nd - 3] * k[0] * k[1];
    shape[nd - 2] = o[0] * o[1];
    return nd - 1;
}

static int
meta_masked_fill_ok(PyObject *b, const StaxTensor *x)
{
    /* (self, mask, value): mask broadcasts to self */
    PyObject *v = PyTuple_GET_ITEM(b, 2);
    StaxTensor *m;
    if (!StaxTensor_Check(PyTuple_GET_ITEM(b, 1))
        || !(PyFloat_CheckExact(v) || PyLong_CheckExact(v) || PyBool_Check(v))) {
        return 0;
    }
    m = (StaxTensor *)PyTuple_GET_ITEM(b, 1);
    if (m->dtype != STAX_BOOL || m->ndim > x->ndim) {
        return 0;
    }
    for (int i = 0; i < m->ndim; i++) {
        int64_t sm = m->sizes[i], sx = x->sizes[x->ndim - m->ndim + i];
        if (sm != sx && sm != 1) {
            return 0;
        }
    }
    return 1;
}

/* native_layer_norm (what the front end decomposes layer_norm into):
 * (the normalized x, mean, rstd), the statistics with the normalized dims
 * kept as 1 and float32 for float16 input (eager's _ln_np works in float32
 * there). Without it the eager CUDA kernel of layer_norm was built over a
 * host stand-in that ran layer_norm on the host, twice (its trace and the
 * shape propagation of its lowering): 5.5 s of a 16384^2 first call. */
static PyObject *
meta_native_layer_norm(PyObject *b, const StaxTensor *x)
{
    PyObject *ns = PyTuple_GET_ITEM(b, 1);
    int64_t st[STAX_MAX_DIMS];
    Py_ssize_t k;
    stax_dtype_t sdt = x->dtype == STAX_FLOAT16 ? STAX_FLOAT32 : x->dtype;
    /* a strided x: eager's statistics keep NumPy's layout of its mean */
    if (!meta_layer_norm_ok(b, x) || !stax_tensor_is_contiguous((StaxTensor *)x)) {
        return stax_ops_meta_unsupported();
    }
    k = PyLong_CheckExact(ns) ? 1 : PySequence_Fast_GET_SIZE(ns);
    memcpy(st, x->sizes, sizeof(int64_t) * (size_t)x->ndim);
    for (Py_ssize_t i = x->ndim - k; i < x->ndim; i++) {
        st[i] = 1;
    }
    PyObject *y = meta_result(x->ndim, x->sizes, x->dtype);
    PyObject *m = y ? meta_result(x->ndim, st, sdt) : NULL;
    PyObject *r = m ? meta_result(x->ndim, st, sdt) : NULL;
    PyObject *t = r ? PyTuple_Pack(3, y, m, r) : NULL;
    Py_XDECREF(y);
    Py_XDECREF(m);
    Py_XDECREF(r);
    return t;
}

static PyObject *
meta_composite(const stax_op_info *op, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames)
{
    PyObject *b = stax_ops_bind_vector(op, args, nargs, kwnames, args + nargs);
    PyObject *res = NULL;
    StaxTensor *x;
    int64_t shape[STAX_MAX_DIMS];
    const int64_t *sizes;
    int nd, ok;
    if (b == NULL) {
        PyErr_Clear();
        return stax_ops_meta_unsupported();
    }
    if (!float_tensor(PyTuple_GET_ITEM(b, 0))) {
        goto unsupported;
    }
    x = (StaxTensor *)PyTuple_GET_ITEM(b, 0);
    nd = x->ndim;      /* the result: x's shape, but for linear and matmul */
    sizes = x->sizes;
    if (op->id == STAX_OP_NATIVE_LAYER_NORM) {
        res = meta_native_layer_norm(b, x);
        Py_DECREF(b);
        return res;
    }
    switch (op->id) {
    case STAX_OP_GELU:
        ok = meta_gelu_ok(b);
        break;
    case STAX_OP_SOFTMAX:
    case STAX_OP_LOG_SOFTMAX:
        ok = meta_dim_ok(b, x, 3);
        break;
    case STAX_OP_LAYER_NORM:
        ok = meta_layer_norm_ok(b, x);
        break;
    case STAX_OP_LINEAR:
        ok = (nd = meta_linear_shape(b, x, shape)) > 0;
        sizes = shape;
        break;
    case STAX_OP_MATMUL:
        ok = (nd = meta_matmul_shape(b, x, shape)) > 0;
        sizes = shape;
        break;
    case STAX_OP_MASKED_FILL:
        ok = meta_masked_fill_ok(b, x);
        break;
    case STAX_OP__SAFE_SOFTMAX:
        ok = meta_dim_ok(b, x, 2);
        break;
    case STAX_OP_BATCH_NORM:
        ok = meta_batch_norm_ok(b, x);
        break;
    case STAX_OP_UNFOLD:
        ok = (nd = meta_unfold_shape(b, x, shape)) > 0;
        sizes = shape;
        break;
    default:
        ok = 0;
        break;
    }
    if (!ok) {
        goto unsupported;
    }
    res = meta_result(nd, sizes, x->dtype);
    if (res != NULL) {
        /* an elementwise op's result in eager's layout (no elements) */
        int64_t st[STAX_MAX_DIMS];
        Py_ssize_t nall = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
        if (pointwise_strides(op, args, nall, (StaxTensor *)res, st)) {
            memcpy(((StaxTensor *)res)->strides, st,
                   sizeof(int64_t) * (size_t)nd);
        }
    }
    Py_DECREF(b);
    return res;
unsupported:
    Py_DECREF(b);
    return stax_ops_meta_unsupported();
}

static int
has_meta_composite(const stax_op_info *op)
{
    switch (op->id) {
    case STAX_OP_GELU:
    case STAX_OP_SOFTMAX:
    case STAX_OP_LOG_SOFTMAX:
    case STAX_OP_LAYER_NORM:
    case STAX_OP_NATIVE_LAYER_NORM:
    case STAX_OP_LINEAR:
    case STAX_OP_MATMUL:
    case STAX_OP_MASKED_FILL:
    case STAX_OP__SAFE_SOFTMAX:
    case STAX_OP_BATCH_NORM:
    case STAX_OP_UNFOLD:
        return 1;
    default:
        return 0;
    }
}

/* ---- meta evaluation on CUDA operands ----
 * A trace over CUDA inputs defers its samples as one over host inputs
 * does: the metadata rules run on host stand-ins with the operands' sizes,
 * strides and dtypes (their bytes are never read), and the result is
 * re-homed on the device: an uninitialized device block of its extent,
 * viewed with the rule's sizes and strides, filled only when the trace asks
 * for its values (trace_lazy.c). Without it every op recorded on CUDA
 * inputs built and launched an eager NVRTC kernel during the trace (on the
 * H200 ~616 ms of a fresh process's first call of Example 1.1, four such
 * kernels). A host operand of one or more dimensions is torch's device-mix
 * error: the marker leaves it to the eager call to raise.
 * TENSORPLAY_CUDA_META=0 turns this off (the samples are computed). */

static int
cuda_meta_enabled(void)
{
    const char *e = getenv("TENSORPLAY_CUDA_META");
    return !(e != NULL && e[0] == '0' && e[1] == '\0');
}

/* elements from the storage's start to one past the last t reaches (its
 * offset when it has none); -1 for a negative stride */
static int64_t
meta_extent(const StaxTensor *t)
{
    int64_t hi = t->offset + 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->sizes[i] == 0) {
            return t->offset;
        }
        if (t->strides[i] < 0) {
            return -1;
        }
        hi += (t->sizes[i] - 1) * t->strides[i];
    }
    return hi;
}

/* a tensor on `device` with t's sizes, strides, offset and dtype over an
 * uninitialized block of its extent (host: untouched pages) */
static PyObject *
meta_like_on(const StaxTensor *t, int device)
{
    int64_t n = meta_extent(t);
    StaxTensor *base, *v;
    if (n < 0) {
        return stax_ops_meta_unsupported();
    }
    base = device == STAX_DEV_CUDA ? stax_tensor_empty_on(1, &n, t->dtype, device)
                                   : stax_tensor_empty(1, &n, t->dtype);
    if (base == NULL) {
        return NULL;
    }
    v = stax_tensor_view(base, t->ndim, t->sizes, t->strides, t->offset);
    Py_DECREF(base);
    if (v != NULL) {
        v->requires_grad = t->requires_grad;
    }
    return (PyObject *)v;
}

/* new reference: o with its CUDA tensors (also the elements of a list or
 * tuple) replaced by host stand-ins, each appended to sins; *mixed set for
 * a host tensor of one or more dimensions */
static PyObject *
meta_host_arg(PyObject *o, int *mixed, PyObject *sins)
{
    if (StaxTensor_Check(o)) {
        StaxTensor *t = (StaxTensor *)o;
        PyObject *h;
        if (!stax_tensor_is_cuda(t)) {
            *mixed |= t->ndim > 0;
            return Py_NewRef(o);
        }
        h = meta_like_on(t, STAX_DEV_CPU);
        if (h != NULL && PyList_Append(sins, h) < 0) {
            Py_CLEAR(h);
        }
        return h;
    }
    if (PyList_Check(o) || PyTuple_Check(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject *r;
        if (!has_cuda(o)) {
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *e = PySequence_Fast_GET_ITEM(o, i);
                *mixed |= StaxTensor_Check(e) && ((StaxTensor *)e)->ndim > 0;
            }
            return Py_NewRef(o);
        }
        if (!PyList_CheckExact(o) && !PyTuple_CheckExact(o)) {
            return stax_ops_meta_unsupported();
        }
        r = PyList_Check(o) ? PyList_New(n) : PyTuple_New(n);
        for (Py_ssize_t i = 0; r != NULL && i < n; i++) {
            PyObject *e = meta_host_arg(PySequence_Fast_GET_ITEM(o, i), mixed, sins);
            if (e == NULL) {
                Py_CLEAR(r);
                break;
            }
            if (PyList_Check(r)) {
                PyList_SET_ITEM(r, i, e);
            }
            else {
                PyTuple_SET_ITEM(r, i, e);
            }
        }
        return r;
    }
    return Py_NewRef(o);
}

/* new reference: the meta result r with its host tensors re-homed on the
 * device (an operand's stand-in given back is that operand) */
static PyObject *
meta_rehome(PyObject *r, PyObject *const *h, PyObject *const *args,
            Py_ssize_t nall, PyObject *sins)
{
    if (StaxTensor_Check(r)) {
        StaxTensor *t = (StaxTensor *)r;
        for (Py_ssize_t i = 0; i < nall; i++) {
            if (h[i] == r) {
                return Py_NewRef(args[i]);
            }
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sins); i++) {
            if (((StaxTensor *)PyList_GET_ITEM(sins, i))->storage == t->storage) {
                /* a view of an operand: what eager gives is the values' */
                return stax_ops_meta_unsupported();
            }
        }
        return stax_tensor_is_cuda(t) ? Py_NewRef(r) : meta_like_on(t, STAX_DEV_CUDA);
    }
    if (PyTuple_CheckExact(r) || PyList_CheckExact(r)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(r);
        PyObject *o = PyList_Check(r) ? PyList_New(n) : PyTuple_New(n);
        for (Py_ssize_t i = 0; o != NULL && i < n; i++) {
            PyObject *e = meta_rehome(PySequence_Fast_GET_ITEM(r, i), h, args, nall, sins);
            if (e == NULL) {
                Py_CLEAR(o);
                break;
            }
            if (PyList_Check(o)) {
                PyList_SET_ITEM(o, i, e);
            }
            else {
                PyTuple_SET_ITEM(o, i, e);
            }
        }
        return o;
    }
    if (PyTuple_Check(r) || PyList_Check(r)) {
        return stax_ops_meta_unsupported();   /* a named tuple: eager's own */
    }
    return Py_NewRef(r);
}

static PyObject *
run_op_meta_cuda(const stax_op_info *op, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    Py_ssize_t nall = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject **h = NULL, *sins = NULL, *res = NULL, *out = NULL;
    int mixed = 0;
    Py_ssize_t done_n = 0;
    if (!cuda_meta_enabled()) {
        return stax_ops_meta_unsupported();
    }
    h = PyMem_Calloc((size_t)(nall > 0 ? nall : 1), sizeof(PyObject *));
    sins = h != NULL ? PyList_New(0) : NULL;
    if (sins == NULL) {
        if (h == NULL) {
            PyErr_NoMemory();
        }
        goto done;
    }
    for (; done_n < nall; done_n++) {
        h[done_n] = meta_host_arg(args[done_n], &mixed, sins);
        if (h[done_n] == NULL) {
            goto done;
        }
    }
    if (mixed) {
        out = stax_ops_meta_unsupported();
        goto done;
    }
    stax_ops_meta_mode = 1;
    res = stax_ops_eager_c(op, h, nargs, kwnames);
    stax_ops_meta_mode = 0;
    if (res == Py_NotImplemented) {
        Py_CLEAR(res);
        if (has_meta_composite(op) && py_impls[op->id] != NULL) {
            res = meta_composite(op, h, nargs, kwnames);
        }
        else {
            out = stax_ops_meta_unsupported();
            goto done;
        }
    }
    if (res != NULL) {
        out = meta_rehome(res, h, args, nall, sins);
    }
done:
    for (Py_ssize_t i = 0; h != NULL && i < done_n; i++) {
        Py_XDECREF(h[i]);
    }
    PyMem_Free(h);
    Py_XDECREF(sins);
    Py_XDECREF(res);
    return out;
}

/* the op of an armed call: the eager C kernel in meta mode, or the marker
 * when only the values could tell (nothing has run) */
static PyObject *
run_op_meta(const stax_op_info *op, PyObject *const *args, size_t nargsf,
            PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *types = NULL, *res;
    if (stax_ops_is_inplace_info(op)
        || (op->kind != STAX_OPK_POINTWISE && op->kind != STAX_OPK_REDUCTION
            && !has_meta_composite(op))
        || (op->flags & STAX_OPF_NONDETERMINISTIC)
        || (autograd_hook != NULL && stax_grad_enabled())) {
        return stax_ops_meta_unsupported();
    }
    if (find_overrides(args, nargs, kwnames, &types) < 0) {
        return NULL;
    }
    if (types != NULL) {
        Py_DECREF(types);
        return stax_ops_meta_unsupported();
    }
    for (Py_ssize_t i = 0; i < nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0); i++) {
        if (has_bf16(args[i])) {
            /* the C kernels know no bfloat16 (its values are computed by
             * _bf16_dispatch) */
            return stax_ops_meta_unsupported();
        }
    }
    for (Py_ssize_t i = 0; i < nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0); i++) {
        if (has_cuda(args[i])) {
            return run_op_meta_cuda(op, args, nargs, kwnames);
        }
    }
    stax_ops_meta_mode = 1;
    res = stax_ops_eager_c(op, args, nargs, kwnames);
    stax_ops_meta_mode = 0;
    if (res == Py_NotImplemented) {
        Py_DECREF(res);
        if (has_meta_composite(op) && py_impls[op->id] != NULL) {
            /* the eager call would run its Python implementation */
            return meta_composite(op, args, nargs, kwnames);
        }
        return stax_ops_meta_unsupported();
    }
    return res;
}

int
stax_ops_meta_target(PyObject *target)
{
    int inplace = 0;
    const stax_pyop_info *p;
    if (target == NULL) {
        return 0;
    }
    if (Py_TYPE(target) == OpFunc_Type) {
        return !stax_ops_is_inplace_info(((StaxOpFunc *)target)->op);
    }
    /* operator.add & co reach the Tensor number slots, which call run_op */
    p = stax_pyop_for_target(target, &inplace);
    return p != NULL && !inplace && (p->flags & STAX_PYOPF_SLOT)
           && stax_pyop_op(p, 0) != NULL;
}

PyObject *
stax_ops_meta_call(PyObject *callable, PyObject *args, PyObject *kwargs)
{
    PyObject *res;
    int consumed;
    if (meta_armed) {
        PyErr_SetString(PyExc_RuntimeError, "stax_ops_meta_call: re-entered");
        return NULL;
    }
    meta_armed = 1;
    meta_consumed = 0;
    res = PyObject_Call(callable, args, kwargs);
    consumed = meta_consumed;
    meta_armed = 0;
    meta_consumed = 0;
    stax_ops_meta_mode = 0;
    if (!consumed) {
        /* the call never reached an op (it failed before, or went
         * elsewhere): what it did cannot be trusted as metadata */
        Py_XDECREF(res);
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (res == NULL && PyErr_ExceptionMatches(meta_marker)) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    return res;
}

/* tp.autocast (tensorplay/amp): hook(name, func, args, kwargs) -> the
 * op's result with its operands cast, or NotImplemented (the op runs as
 * is). Called for every op outside meta evaluation and overrides while
 * installed; not re-entered from the op it calls (autocast_busy), as
 * torch's autocast kernels call the op with autocast excluded. */
static PyObject *autocast_hook;
static int autocast_busy;

int
stax_ops_autocast_active(void)
{
    return autocast_hook != NULL;
}

static PyObject *
py_set_autocast_hook(PyObject *m, PyObject *fn)
{
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "_set_autocast_hook: a callable or None");
        return NULL;
    }
    Py_XSETREF(autocast_hook, fn == Py_None ? NULL : Py_NewRef(fn));
    Py_RETURN_NONE;
}

static PyObject *
run_autocast(const stax_op_info *op, PyObject *func, PyObject *const *args,
             size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *t = PyTuple_New(nargs), *kw = PyDict_New(), *name = NULL, *res = NULL;
    PyObject *hook = Py_XNewRef(autocast_hook);
    if (t == NULL || kw == NULL || hook == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyTuple_SET_ITEM(t, i, Py_NewRef(args[i]));
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) {
            goto done;
        }
    }
    name = PyUnicode_FromString(op->name);
    if (name != NULL) {
        autocast_busy++;
        res = PyObject_CallFunctionObjArgs(hook, name, func, t, kw, NULL);
        autocast_busy--;
    }
done:
    Py_XDECREF(t);
    Py_XDECREF(kw);
    Py_XDECREF(name);
    Py_XDECREF(hook);
    return res;
}

static PyObject *
run_op(const stax_op_info *op, PyObject *func, PyObject *const *args,
       size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *types = NULL, *res;

    if (meta_armed) {
        meta_armed = 0;
        meta_consumed = 1;
        return run_op_meta(op, args, nargsf, kwnames);
    }
    if (find_overrides(args, nargs, kwnames, &types) < 0) {
        return NULL;
    }
    if (types != NULL) {
        res = dispatch_override(func, types, args, nargs, kwnames);
        Py_DECREF(types);
        return res;
    }
    if (read_hook != NULL) {
        announce_reads(args, nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0));
    }
    if (autocast_hook != NULL && !autocast_busy) {
        res = run_autocast(op, func, args, nargsf, kwnames);
        if (res != Py_NotImplemented) {
            return res;
        }
        Py_DECREF(res);
    }
    if (autograd_hook != NULL && stax_grad_enabled()) {
        return autograd_hook(op, func, args, nargsf, kwnames, run_op_kernel);
    }
    return run_op_kernel(op, func, args, nargsf, kwnames);
}

/* PyTorch's keyword aliases and out=: `axis` for `dim` and `keepdims` for
 * `keepdim` (NumPy spellings torch accepts), and out=, which runs the op
 * out of place and writes the result into `out` (tensorplay._out_copy:
 * torch's cast and shape checks; a copy_ node when traced). 1 when the
 * call was rewritten (*res set, NULL on error), 0 when no keyword is one
 * of them. */
static int
call_with_aliases(const stax_op_info *op, PyObject *func,
                  PyObject *const *args, size_t nargsf, PyObject *kwnames,
                  PyObject **res)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nk = PyTuple_GET_SIZE(kwnames), i, hit = 0;
    int has_dim = strstr(op->schema, " dim") != NULL;
    int has_keep = strstr(op->schema, " keepdim") != NULL;
    for (i = 0; i < nk; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(k, "out") == 0
            || (has_dim && PyUnicode_CompareWithASCIIString(k, "axis") == 0)
            || (has_keep && PyUnicode_CompareWithASCIIString(k, "keepdims") == 0)) {
            hit = 1;
        }
    }
    if (!hit) {
        return 0;
    }
    PyObject *out = NULL, *names = NULL, *r = NULL;
    PyObject **stack = PyMem_Malloc(sizeof(PyObject *) * (size_t)(nargs + nk + 1));
    *res = NULL;
    if (stack == NULL) {
        PyErr_NoMemory();
        return 1;
    }
    for (i = 0; i < nargs; i++) {
        stack[i] = args[i];
    }
    names = PyList_New(0);
    if (names == NULL) {
        goto done;
    }
    Py_ssize_t j = 0;
    for (i = 0; i < nk; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = args[nargs + i];
        PyObject *name = NULL;
        if (PyUnicode_CompareWithASCIIString(k, "out") == 0) {
            if (v != Py_None) {
                out = v;
            }
            continue;
        }
        if (has_dim && PyUnicode_CompareWithASCIIString(k, "axis") == 0) {
            name = PyUnicode_FromString("dim");
        }
        else if (has_keep && PyUnicode_CompareWithASCIIString(k, "keepdims") == 0) {
            name = PyUnicode_FromString("keepdim");
        }
        else {
            name = Py_NewRef(k);
        }
        if (name == NULL || PyList_Append(names, name) < 0) {
            Py_XDECREF(name);
            goto done;
        }
        Py_DECREF(name);
        stack[nargs + j++] = v;
    }
    PyObject *kn = PyList_AsTuple(names);
    if (kn == NULL) {
        goto done;
    }
    r = run_op(op, func, stack, (size_t)nargs, PyTuple_GET_SIZE(kn) ? kn : NULL);
    Py_DECREF(kn);
    if (r != NULL && out != NULL) {
        PyObject *pkg = stax_py_registered(STAX_PY_PACKAGE);
        PyObject *w = pkg ? PyObject_CallMethod(pkg, "_out_copy", "OOs", out, r, op->name) : NULL;
        if (pkg == NULL && !PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "out= needs the tensorplay package");
        }
        Py_SETREF(r, w);
    }
done:
    Py_XDECREF(names);
    PyMem_Free(stack);
    *res = r;
    return 1;
}

static PyObject *
opfunc_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                  PyObject *kwnames)
{
    StaxOpFunc *f = (StaxOpFunc *)self;
    PyObject *pub = self, *res = NULL;
    if (f->is_method && !stax_ops_is_inplace_info(f->op)
        && functions[f->op->id] != NULL) {
        pub = functions[f->op->id];   /* x.add(p) -> tensorplay.functional.add */
    }
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0
        && call_with_aliases(f->op, pub, args, nargsf, kwnames, &res)) {
        return res;
    }
    return run_op(f->op, pub, args, nargsf, kwnames);
}

PyObject *
stax_op_call(const stax_op_info *op, PyObject *args, PyObject *kwargs)
{
    PyObject *func = stax_op_function(op);
    PyObject *res = NULL, *kwnames = NULL;
    PyObject *stack[32];
    Py_ssize_t n = PyTuple_GET_SIZE(args), nk = 0, i = 0;
    if (kwargs != NULL && kwargs != Py_None) {
        nk = PyDict_GET_SIZE(kwargs);
    }
    if (n + nk > 32) {
        PyErr_SetString(PyExc_TypeError, "too many arguments");
        return NULL;
    }
    for (i = 0; i < n; i++) {
        stack[i] = PyTuple_GET_ITEM(args, i);
    }
    if (nk > 0) {
        PyObject *k, *v;
        Py_ssize_t pos = 0, j = 0;
        kwnames = PyTuple_New(nk);
        if (kwnames == NULL) {
            return NULL;
        }
        while (PyDict_Next(kwargs, &pos, &k, &v)) {
            PyTuple_SET_ITEM(kwnames, j, Py_NewRef(k));
            stack[n + j++] = v;
        }
    }
    res = run_op(op, func ? func : Py_None, stack, (size_t)n, kwnames);
    Py_XDECREF(kwnames);
    return res;
}

PyObject *
stax_op_function(const stax_op_info *op)
{
    if (stax_ops_is_inplace_info(op)) {
        return inplace_methods[op->id];
    }
    return functions[op->id] ? functions[op->id] : methods[op->id];
}

/* ---- the function object type ------------------------------------------- */

static PyObject *
opfunc_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(self);
    }
    return PyMethod_New(self, obj);
}

static PyObject *
opfunc_repr(PyObject *self)
{
    StaxOpFunc *f = (StaxOpFunc *)self;
    if (f->is_method) {
        return PyUnicode_FromFormat("<method '%U' of 'Tensor' objects>",
                                    f->name);
    }
    return PyUnicode_FromFormat("<built-in function %U>", f->name);
}

static int
opfunc_traverse(PyObject *self, visitproc visit, void *arg)
{
    StaxOpFunc *f = (StaxOpFunc *)self;
    Py_VISIT(f->dict);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int
opfunc_clear(PyObject *self)
{
    StaxOpFunc *f = (StaxOpFunc *)self;
    Py_CLEAR(f->dict);
    return 0;
}

static void
opfunc_dealloc(PyObject *self)
{
    StaxOpFunc *f = (StaxOpFunc *)self;
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    opfunc_clear(self);
    Py_XDECREF(f->name);
    Py_XDECREF(f->qualname);
    Py_XDECREF(f->module);
    Py_XDECREF(f->doc);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *
opfunc_get_op_name(PyObject *self, void *c)
{
    (void)c;
    return PyUnicode_FromString(((StaxOpFunc *)self)->op->name);
}

static PyObject *
opfunc_get_schema(PyObject *self, void *c)
{
    (void)c;
    return PyUnicode_FromString(((StaxOpFunc *)self)->op->schema);
}

static PyMemberDef opfunc_members[] = {
    {"__name__", T_OBJECT, offsetof(StaxOpFunc, name), 0, NULL},
    {"__qualname__", T_OBJECT, offsetof(StaxOpFunc, qualname), 0, NULL},
    {"__module__", T_OBJECT, offsetof(StaxOpFunc, module), 0, NULL},
    {"__doc__", T_OBJECT, offsetof(StaxOpFunc, doc), 0, NULL},
    {"__dictoffset__", T_PYSSIZET, offsetof(StaxOpFunc, dict), READONLY, NULL},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(StaxOpFunc, vectorcall),
     READONLY, NULL},
    {NULL},
};

static PyGetSetDef opfunc_getset[] = {
    {"op_name", opfunc_get_op_name, NULL, NULL, NULL},
    {"_stax_op", opfunc_get_op_name, NULL, NULL, NULL},
    {"schema", opfunc_get_schema, NULL, NULL, NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyObject *
opfunc_reduce(PyObject *self, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(((StaxOpFunc *)self)->qualname);
}

static PyMethodDef opfunc_methods[] = {
    {"__reduce__", opfunc_reduce, METH_NOARGS, NULL},
    {NULL},
};

static PyType_Slot opfunc_slots[] = {
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, opfunc_descr_get},
    {Py_tp_repr, opfunc_repr},
    {Py_tp_traverse, opfunc_traverse},
    {Py_tp_clear, opfunc_clear},
    {Py_tp_dealloc, opfunc_dealloc},
    {Py_tp_members, opfunc_members},
    {Py_tp_getset, opfunc_getset},
    {Py_tp_methods, opfunc_methods},
    {0, NULL},
};

static PyType_Spec opfunc_spec = {
    .name = "tensorplay._C.OpFunction",
    .basicsize = sizeof(StaxOpFunc),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC
             | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = opfunc_slots,
};

static PyObject *
make_func(const stax_op_info *op, int is_method)
{
    StaxOpFunc *f = PyObject_GC_New(StaxOpFunc, OpFunc_Type);
    if (f == NULL) {
        return NULL;
    }
    f->op = op;
    f->is_method = is_method;
    f->dict = NULL;
    f->vectorcall = opfunc_vectorcall;
    f->name = PyUnicode_FromString(op->name);
    f->qualname = is_method ? PyUnicode_FromFormat("Tensor.%s", op->name)
                            : Py_NewRef(f->name);
    f->module = PyUnicode_FromString(is_method ? "tensorplay"
                                               : "tensorplay.functional");
    f->doc = PyUnicode_FromFormat("%s%s\n\nop kind %d; formula %s; "
                                  "decomposition %s", op->name,
                                  op->schema ? op->schema : "()", op->kind,
                                  op->formula ? op->formula : "-",
                                  op->decomp ? op->decomp : "-");
    PyObject_GC_Track((PyObject *)f);
    if (f->name == NULL || f->qualname == NULL || f->module == NULL
        || f->doc == NULL) {
        Py_DECREF(f);
        return NULL;
    }
    return (PyObject *)f;
}

/* ---- stax_op_for_target ------------------------------------------------- */

const stax_op_info *
stax_op_for_target(const char *opcode, PyObject *target)
{
    if (opcode == NULL || target == NULL) {
        return NULL;
    }
    if (strcmp(opcode, "call_method") == 0) {
        const char *s;
        if (!PyUnicode_Check(target)) {
            return NULL;
        }
        s = PyUnicode_AsUTF8(target);
        if (s == NULL) {
            PyErr_Clear();
            return NULL;
        }
        return stax_op_by_name(s);
    }
    if (strcmp(opcode, "call_function") != 0) {
        return NULL;
    }
    if (Py_TYPE(target) == OpFunc_Type) {
        return ((StaxOpFunc *)target)->op;
    }
    {
        int inplace = 0;
        const stax_pyop_info *p = stax_pyop_for_target(target, &inplace);
        if (p != NULL) {
            return stax_pyop_op(p, inplace);
        }
    }
    if (target == builtin_abs) {
        return &stax_op_table[STAX_OP_ABS];
    }
    {
        /* tp.ops.<name>.<overload> objects and Python functions */
        PyObject *n = PyObject_GetAttr(target, op_name_str);
        const stax_op_info *op = NULL;
        if (n != NULL && PyUnicode_Check(n)) {
            const char *s = PyUnicode_AsUTF8(n);
            op = s ? stax_op_by_name(s) : NULL;
        }
        Py_XDECREF(n);
        PyErr_Clear();
        return op;
    }
}

/* ---- number slots -------------------------------------------------------- */

/* Tensor's number slots and rich comparison, generated from the Python
 * operator rows of ops.def: a row whose op exists fills nb_<NB> (and
 * nb_inplace_<NB> when the op has an in-place twin). */

static int
slot_operand(PyObject *o)
{
    return StaxTensor_Check(o) || PyFloat_Check(o) || PyLong_Check(o)
           || stax_ops_is_numpy_scalar(o);
}

static PyObject *
binary_slot(stax_pyop_key_t key, PyObject *a, PyObject *b)
{
    PyObject *args[2] = {a, b};
    const stax_pyop_info *p = &stax_pyop_table[key];
    const stax_op_info *op = &stax_op_table[p->op];
    PyObject *r;
    int saved;
    if (!slot_operand(a) || !slot_operand(b)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (Py_TYPE(a) != StaxTensor_Type || Py_TYPE(b) != StaxTensor_Type) {
        PyObject *types = NULL;
        if (find_overrides(args, 2, NULL, &types) < 0) {
            return NULL;
        }
        if (types != NULL) {
            r = dispatch_override(stax_pyop_function(p, 0), types, args, 2,
                                  NULL);
            Py_DECREF(types);
            return r;
        }
    }
    if (key == STAX_PYOP_TRUEDIV && !StaxTensor_Check(a) && StaxTensor_Check(b)) {
        /* number / tensor is torch's Tensor.__rtruediv__:
         * reciprocal(tensor) * number, each rounded to the result dtype
         * (0.0 / 1e-40 is nan in float32: 1 / 1e-40 overflows) */
        PyObject *rec = run_op(&stax_op_table[STAX_OP_RECIPROCAL],
                               functions[STAX_OP_RECIPROCAL], &args[1], 1, NULL);
        if (rec == NULL) {
            return NULL;
        }
        PyObject *margs[2] = {rec, a};
        r = run_op(&stax_op_table[STAX_OP_MUL], functions[STAX_OP_MUL], margs, 2, NULL);
        Py_DECREF(rec);
        return r;
    }
    saved = stax_ops_reflected;
    stax_ops_reflected = !StaxTensor_Check(a);
    r = run_op(op, functions[p->op], args, 2, NULL);
    stax_ops_reflected = saved;
    return r;
}

static PyObject *
inplace_slot(stax_pyop_key_t key, PyObject *a, PyObject *b)
{
    PyObject *args[2] = {a, b};
    stax_op_id_t id = stax_pyop_table[key].op;
    if (!slot_operand(b)) {
        /* a traced operand (x += proxy, x a tensor the trace holds as a
         * constant) or another override: the in-place operator through
         * it, and x itself as the result, as eager's x += y keeps x. The
         * fallback to x + y bound x's name, list item or attribute to the
         * override's value (a proxy left in the caller's objects). */
        PyObject *types = NULL, *r;
        PyObject *fn = stax_pyop_function(&stax_pyop_table[key], 1);
        if (fn == NULL || find_overrides(args, 2, NULL, &types) < 0) {
            return fn == NULL ? Py_NewRef(Py_NotImplemented) : NULL;
        }
        if (types == NULL) {
            Py_RETURN_NOTIMPLEMENTED;
        }
        r = dispatch_override(fn, types, args, 2, NULL);
        Py_DECREF(types);
        if (r == NULL || r == Py_NotImplemented) {
            return r;
        }
        Py_DECREF(r);
        return Py_NewRef(a);
    }
    return run_op(stax_ops_inplace_of(&stax_op_table[id]),
                  inplace_methods[id], args, 2, NULL);
}

static PyObject *
unary_slot(stax_pyop_key_t key, PyObject *a)
{
    PyObject *args[1] = {a};
    stax_op_id_t id = stax_pyop_table[key].op;
    return run_op(&stax_op_table[id], functions[id] ? functions[id]
                                                     : methods[id],
                  args, 1, NULL);
}

#define STAX_PYOP_BIN(KEY, fn, ifn, OP, sym, NB, flags)                     \
    static PyObject *slot_##KEY(PyObject *a, PyObject *b)                   \
    {                                                                       \
        return binary_slot(STAX_PYOP_##KEY, a, b);                          \
    }                                                                       \
    static PyObject *islot_##KEY(PyObject *a, PyObject *b)                  \
    {                                                                       \
        return inplace_slot(STAX_PYOP_##KEY, a, b);                         \
    }                                                                       \
    static PyObject *slot3_##KEY(PyObject *a, PyObject *b, PyObject *m)     \
    {                                                                       \
        if (m != Py_None) {                                                 \
            Py_RETURN_NOTIMPLEMENTED;                                       \
        }                                                                   \
        return binary_slot(STAX_PYOP_##KEY, a, b);                          \
    }                                                                       \
    static PyObject *islot3_##KEY(PyObject *a, PyObject *b, PyObject *m)    \
    {                                                                       \
        if (m != Py_None) {                                                 \
            Py_RETURN_NOTIMPLEMENTED;                                       \
        }                                                                   \
        return inplace_slot(STAX_PYOP_##KEY, a, b);                         \
    }
#define STAX_PYOP_UN(KEY, fn, OP, sym, NB, flags)                           \
    static PyObject *slot_##KEY(PyObject *a)                                \
    {                                                                       \
        return unary_slot(STAX_PYOP_##KEY, a);                              \
    }
#include "ops/ops.def"

static const stax_pyop_key_t richcompare_keys[6] = {
#define STAX_PYOP_CMP(KEY, fn, OP, sym, PYCMP, flags) [PYCMP] = STAX_PYOP_##KEY,
#include "ops/ops.def"
};

static PyObject *
tensor_richcompare(PyObject *a, PyObject *b, int cmp)
{
    stax_op_id_t id = stax_pyop_table[richcompare_keys[cmp]].op;
    PyObject *args[2] = {a, b};
    if (!slot_operand(b)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    return run_op(&stax_op_table[id], functions[id], args, 2, NULL);
}

static int
install_slots(void)
{
    PyNumberMethods *nm = StaxTensor_Type->tp_as_number;
    if (nm == NULL) {
        PyErr_SetString(PyExc_SystemError, "Tensor has no tp_as_number");
        return -1;
    }
#define HAS_OP(KEY) (stax_pyop_table[STAX_PYOP_##KEY].op != STAX_OP_NONE)
/* nb_power takes a modulo: _Generic picks the slot of the field's type */
#define STAX_PYOP_BIN(KEY, fn, ifn, OP, sym, NB, flags)                     \
    if (HAS_OP(KEY)) {                                                      \
        const stax_op_info *op_ = &stax_op_table[stax_pyop_table[          \
            STAX_PYOP_##KEY].op];                                           \
        nm->nb_##NB = _Generic(nm->nb_##NB, ternaryfunc: slot3_##KEY,       \
                               default: slot_##KEY);                        \
        if (stax_ops_inplace_of(op_) != NULL) {                             \
            nm->nb_inplace_##NB = _Generic(nm->nb_inplace_##NB,             \
                                           ternaryfunc: islot3_##KEY,       \
                                           default: islot_##KEY);           \
        }                                                                   \
    }
#define STAX_PYOP_UN(KEY, fn, OP, sym, NB, flags)                           \
    if (HAS_OP(KEY)) {                                                      \
        nm->nb_##NB = slot_##KEY;                                           \
    }
#include "ops/ops.def"
#undef HAS_OP
    StaxTensor_Type->tp_richcompare = tensor_richcompare;
    PyType_Modified(StaxTensor_Type);
    return 0;
}

/* ---- module functions ------------------------------------------------------ */

static const stax_op_info *
op_arg(PyObject *name)
{
    const char *s = PyUnicode_AsUTF8(name);
    const stax_op_info *op;
    if (s == NULL) {
        return NULL;
    }
    op = stax_op_by_name(s);
    if (op == NULL) {
        PyErr_Format(PyExc_KeyError, "no op named '%s'", s);
    }
    return op;
}

static PyObject *
py_set_impl(PyObject *m, PyObject *args)
{
    PyObject *name, *fn;
    const stax_op_info *op;
    PyObject **slot;
    (void)m;
    if (!PyArg_ParseTuple(args, "UO:_ops_set_impl", &name, &fn)) {
        return NULL;
    }
    op = op_arg(name);
    if (op == NULL) {
        return NULL;
    }
    slot = stax_ops_is_inplace_info(op) ? &py_inplace_impls[op->id]
                                        : &py_impls[op->id];
    Py_XSETREF(*slot, Py_NewRef(fn));
    Py_RETURN_NONE;
}

static const char *const lower_rule_names[] = {
    "none", "formula", "cast", "reduction", "softmax", "layer_norm",
    "batch_norm", "view", "matmul", "cat", "pad", "gather", "scatter", "tri",
    "fill_like", "one_hot", "unfold", "random"};
_Static_assert(sizeof(lower_rule_names) / sizeof(lower_rule_names[0])
                   == STAX_LOWER_RANDOM + 1,
               "lower_rule_names: one name per stax_lower_rule_t");

static PyObject *
info_tuple(const stax_op_info *op)
{
    static const char *kinds[] = {"pointwise", "reduction", "view",
                                  "composite", "random", "extern", "other"};
    /* an in-place twin's info shares its row's id but not its derivative */
    const char *deriv = stax_ops_is_inplace_info(op) ? NULL
                                                     : stax_op_derivative[op->id];
    return Py_BuildValue("{s:s,s:i,s:s,s:i,s:z,s:z,s:z,s:z,s:z,s:z,s:s,s:I}",
                         "name", op->name, "id", (int)op->id,
                         "kind", kinds[op->kind], "arity", op->arity,
                         "schema", op->schema, "overloads", op->overloads,
                         "inplace", op->inplace, "formula", op->formula,
                         "decomposition", op->decomp, "derivative", deriv,
                         "lower", lower_rule_names[stax_op_lower[op->id]],
                         "flags", op->flags);
}

static PyObject *
py_op_table(PyObject *m, PyObject *unused)
{
    PyObject *res = PyList_New(0);
    (void)m;
    (void)unused;
    if (res == NULL) {
        return NULL;
    }
    for (int i = 0; i < STAX_OP_COUNT; i++) {
        const stax_op_info *ops2[2] = {&stax_op_table[i],
                                       stax_ops_inplace_of(&stax_op_table[i])};
        for (int k = 0; k < 2; k++) {
            PyObject *d;
            if (ops2[k] == NULL) {
                continue;
            }
            d = info_tuple(ops2[k]);
            if (d == NULL || PyList_Append(res, d) < 0) {
                Py_XDECREF(d);
                Py_DECREF(res);
                return NULL;
            }
            Py_DECREF(d);
        }
    }
    return res;
}

static PyObject *
py_op_info(PyObject *m, PyObject *name)
{
    const stax_op_info *op = op_arg(name);
    (void)m;
    return op ? info_tuple(op) : NULL;
}

/* a stax_sexp as nested tuples of str (None for no tree) */
static PyObject *
sexp_py(const stax_sexp *t)
{
    PyObject *r;
    if (t == NULL) {
        Py_RETURN_NONE;
    }
    if (!t->is_list) {
        return PyUnicode_FromString(t->atom);
    }
    r = PyTuple_New(t->n);
    for (int i = 0; r != NULL && i < t->n; i++) {
        PyObject *it = sexp_py(t->items[i]);
        if (it == NULL) {
            Py_CLEAR(r);
            break;
        }
        PyTuple_SET_ITEM(r, i, it);
    }
    return r;
}

static PyObject *
py_op_trees(PyObject *m, PyObject *name)
{
    const stax_op_info *op = op_arg(name);
    (void)m;
    if (op == NULL) {
        return NULL;
    }
    return Py_BuildValue("(NN)", sexp_py(stax_op_formula_tree(op)),
                         sexp_py(stax_op_decomp_tree(op)));
}

static PyObject *
py_op_bind(PyObject *m, PyObject *args)
{
    PyObject *name, *a, *kw = NULL;
    const stax_op_info *op;
    (void)m;
    if (!PyArg_ParseTuple(args, "UO!|O:_op_bind", &name, &PyTuple_Type, &a,
                          &kw)) {
        return NULL;
    }
    op = op_arg(name);
    return op ? stax_op_bind(op, a, kw) : NULL;
}

static PyObject *
py_op_call(PyObject *m, PyObject *args)
{
    PyObject *name, *a, *kw = NULL;
    const stax_op_info *op;
    (void)m;
    if (!PyArg_ParseTuple(args, "UO!|O:_op_call", &name, &PyTuple_Type, &a,
                          &kw)) {
        return NULL;
    }
    op = op_arg(name);
    return op ? stax_op_call(op, a, kw) : NULL;
}

static PyObject *
py_op_for_target(PyObject *m, PyObject *args)
{
    const char *opcode;
    PyObject *target;
    const stax_op_info *op;
    (void)m;
    if (!PyArg_ParseTuple(args, "sO:_op_for_target", &opcode, &target)) {
        return NULL;
    }
    op = stax_op_for_target(opcode, target);
    if (op == NULL) {
        Py_RETURN_NONE;
    }
    return PyUnicode_FromString(op->name);
}

static PyObject *
py_wrap(PyObject *m, PyObject *arr)
{
    PyObject *a;
    StaxTensor *t;
    (void)m;
    /* a fresh result array: C-contiguous copy unless it already is one */
    a = PyArray_FromAny(arr, NULL, 0, 0, NPY_ARRAY_C_CONTIGUOUS
                        | NPY_ARRAY_ALIGNED, NULL);
    if (a == NULL) {
        return NULL;
    }
    t = stax_tensor_from_array(a);
    Py_DECREF(a);
    return (PyObject *)t;
}

static PyObject *
py_array(PyObject *m, PyObject *t)
{
    (void)m;
    if (!StaxTensor_Check(t)) {
        PyErr_Format(PyExc_TypeError, "expected a Tensor, got %.100s",
                     Py_TYPE(t)->tp_name);
        return NULL;
    }
    return stax_tensor_as_array((StaxTensor *)t);
}

/* _ops_fma(x, y, alpha): x + y * alpha rounded once (C fma / fmaf), for
 * eager add/sub with alpha as torch's CPU kernel (vec::fmadd); x and y
 * C-contiguous arrays of one shape and dtype float32 or float64 (alpha
 * converted to that dtype first, as torch's opmath alpha) */
static PyObject *
py_fma(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *xo, *yo;
    double alpha;
    if (!PyArg_ParseTuple(args, "OOd:_ops_fma", &xo, &yo, &alpha)) {
        return NULL;
    }
    if (!PyArray_Check(xo) || !PyArray_Check(yo)) {
        PyErr_SetString(PyExc_TypeError, "_ops_fma: expected two arrays");
        return NULL;
    }
    PyArrayObject *x = (PyArrayObject *)xo, *y = (PyArrayObject *)yo;
    int tn = PyArray_TYPE(x);
    if ((tn != NPY_FLOAT32 && tn != NPY_FLOAT64) || PyArray_TYPE(y) != tn
        || !PyArray_IS_C_CONTIGUOUS(x) || !PyArray_IS_C_CONTIGUOUS(y)
        || PyArray_NDIM(x) != PyArray_NDIM(y)
        || !PyArray_CompareLists(PyArray_DIMS(x), PyArray_DIMS(y), PyArray_NDIM(x))) {
        PyErr_SetString(PyExc_TypeError, "_ops_fma: C-contiguous float32/float64 arrays "
                        "of one shape and dtype");
        return NULL;
    }
    PyObject *r = PyArray_SimpleNew(PyArray_NDIM(x), PyArray_DIMS(x), tn);
    if (r == NULL) {
        return NULL;
    }
    npy_intp n = PyArray_SIZE(x);
    if (tn == NPY_FLOAT32) {
        const float *a = PyArray_DATA(x), *b = PyArray_DATA(y);
        float *o = PyArray_DATA((PyArrayObject *)r), al = (float)alpha;
        for (npy_intp i = 0; i < n; i++) {
            o[i] = fmaf(b[i], al, a[i]);
        }
    }
    else {
        const double *a = PyArray_DATA(x), *b = PyArray_DATA(y);
        double *o = PyArray_DATA((PyArrayObject *)r);
        for (npy_intp i = 0; i < n; i++) {
            o[i] = fma(b[i], alpha, a[i]);
        }
    }
    return r;
}

static PyObject *
py_bump(PyObject *m, PyObject *t)
{
    (void)m;
    if (!StaxTensor_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "expected a Tensor");
        return NULL;
    }
    stax_tensor_bump_version((StaxTensor *)t);
    Py_RETURN_NONE;
}

/* before a Python-level in-place write (then _ops_bump_version): the
 * tracer's journal keeps the caller's tensors restorable */
static PyObject *
py_will_write(PyObject *m, PyObject *t)
{
    (void)m;
    if (!StaxTensor_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "expected a Tensor");
        return NULL;
    }
    stax_tensor_will_write((StaxTensor *)t);
    Py_RETURN_NONE;
}

static PyObject *
py_functions(PyObject *m, PyObject *unused)
{
    PyObject *d = PyDict_New();
    (void)m;
    (void)unused;
    if (d == NULL) {
        return NULL;
    }
    for (int i = 0; i < STAX_OP_COUNT; i++) {
        if (functions[i] != NULL
            && PyDict_SetItemString(d, stax_op_table[i].name,
                                    functions[i]) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}

/* _C._pyop_table(): the Python operator rows as dicts (for the tests
 * that check every derived table against them) */
static PyObject *
py_pyop_table(PyObject *m, PyObject *unused)
{
    PyObject *l = PyList_New(STAX_PYOP_COUNT);
    (void)m;
    (void)unused;
    if (l == NULL) {
        return NULL;
    }
    for (int i = 0; i < STAX_PYOP_COUNT; i++) {
        const stax_pyop_info *p = &stax_pyop_table[i];
        const stax_op_info *ip = stax_pyop_op(p, 1);
        PyObject *d = Py_BuildValue(
            "{s:s,s:z,s:z,s:z,s:z,s:i,s:O,s:O,s:O,s:O}", "fn", p->fn,
            "ifn", p->ifn,
            "op", p->op == STAX_OP_NONE ? NULL : stax_op_table[p->op].name,
            "inplace_op", ip ? ip->name : NULL, "sym", p->sym,
            "arity", p->arity, "fold",
            (p->flags & STAX_PYOPF_FOLD) ? Py_True : Py_False, "slot",
            (p->flags & STAX_PYOPF_SLOT) ? Py_True : Py_False, "function",
            stax_pyop_function(p, 0), "ifunction",
            stax_pyop_function(p, 1) ? stax_pyop_function(p, 1) : Py_None);
        if (d == NULL) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, d);
    }
    return l;
}

/* x[i] goes before x[b] in topk's order: largest first (NaN the largest),
 * or smallest first (NaN the largest); equal values keep index order, as
 * the stable sort of the NumPy path */
#define TOPK_BEFORE(xi, xb, largest) \
    ((largest) ? ((isnan(xi) && !isnan(xb)) || (xi) > (xb)) \
               : ((!isnan(xi) && isnan(xb)) || (xi) < (xb)))

#define TOPK_MAX_K 16

/* _C._ops_topk_last(input, k, dim, largest) -> (values, indices) or None.
 * topk along the last dim of a contiguous float32/float64 CPU tensor for
 * k <= 16 with no gradient to record: k scans per row.  None where the
 * Python path decides (errors, other dims or layouts, larger k, autograd):
 * a generate() loop's topk(logits, k) cost ~20 us in NumPy's sort. */
static PyObject *
py_topk_last(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *to;
    Py_ssize_t k, dim;
    int largest;
    if (!PyArg_ParseTuple(args, "Onnp:_ops_topk_last", &to, &k, &dim, &largest)) {
        return NULL;
    }
    if (!StaxTensor_Check(to)) {
        Py_RETURN_NONE;
    }
    StaxTensor *t = (StaxTensor *)to;
    if (t->ndim < 1 || (dim != -1 && dim != t->ndim - 1) || stax_tensor_is_cuda(t)
        || (t->dtype != STAX_FLOAT32 && t->dtype != STAX_FLOAT64)
        || !stax_tensor_is_contiguous(t) || (t->requires_grad && stax_grad_enabled())) {
        Py_RETURN_NONE;
    }
    int64_t n = t->sizes[t->ndim - 1];
    if (k < 0 || k > n || k > TOPK_MAX_K) {
        Py_RETURN_NONE;
    }
    int64_t rows = n > 0 ? stax_tensor_numel(t) / n : 0, shape[STAX_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) {
        shape[d] = t->sizes[d];
    }
    shape[t->ndim - 1] = k;
    StaxTensor *vals = stax_tensor_empty(t->ndim, shape, t->dtype);
    StaxTensor *idx = vals == NULL ? NULL : stax_tensor_empty(t->ndim, shape, STAX_INT64);
    if (idx == NULL) {
        Py_XDECREF(vals);
        return NULL;
    }
    int64_t *od = (int64_t *)STAX_TENSOR_DATA(idx);
    int64_t taken[TOPK_MAX_K];
    for (int64_t r = 0; r < rows; r++) {
        for (Py_ssize_t s = 0; s < k; s++) {
            int64_t best = -1;
            for (int64_t i = 0; i < n; i++) {
                int used = 0;
                for (Py_ssize_t q = 0; q < s; q++) {
                    used |= taken[q] == i;
                }
                if (used) {
                    continue;
                }
                if (best < 0) {
                    best = i;
                }
                else if (t->dtype == STAX_FLOAT32) {
                    const float *x = (const float *)STAX_TENSOR_DATA(t) + r * n;
                    if (TOPK_BEFORE(x[i], x[best], largest)) {
                        best = i;
                    }
                }
                else {
                    const double *x = (const double *)STAX_TENSOR_DATA(t) + r * n;
                    if (TOPK_BEFORE(x[i], x[best], largest)) {
                        best = i;
                    }
                }
            }
            taken[s] = best;
            od[r * k + s] = best;
            if (t->dtype == STAX_FLOAT32) {
                ((float *)STAX_TENSOR_DATA(vals))[r * k + s]
                    = ((const float *)STAX_TENSOR_DATA(t))[r * n + best];
            }
            else {
                ((double *)STAX_TENSOR_DATA(vals))[r * k + s]
                    = ((const double *)STAX_TENSOR_DATA(t))[r * n + best];
            }
        }
    }
    return Py_BuildValue("(NN)", (PyObject *)vals, (PyObject *)idx);
}

static PyMethodDef ops_methods[] = {
    {"_pyop_table", py_pyop_table, METH_NOARGS,
     "the Python operator rows of ops.def as dicts"},
    {"_ops_set_impl", py_set_impl, METH_VARARGS, "register an eager impl"},
    {"_set_autocast_hook", py_set_autocast_hook, METH_O,
     "tp.autocast's hook(name, func, args, kwargs), or None"},
    {"_op_table", py_op_table, METH_NOARGS, "the op table as dicts"},
    {"_op_info", py_op_info, METH_O, "one op's row as a dict"},
    {"_op_trees", py_op_trees, METH_O,
     "(formula, decomposition) of an op as the one parser reads them: nested "
     "tuples of str, None where the row has none"},
    {"_op_bind", py_op_bind, METH_VARARGS, "stax_op_bind(name, args, kw)"},
    {"_op_call", py_op_call, METH_VARARGS, "run op eagerly"},
    {"_op_for_target", py_op_for_target, METH_VARARGS,
     "stax_op_for_target(opcode, target) -> op name or None"},
    {"_ops_wrap", py_wrap, METH_O, "ndarray -> Tensor (no copy if contiguous)"},
    {"_ops_array", py_array, METH_O, "Tensor -> ndarray view"},
    {"_ops_bump_version", py_bump, METH_O, "bump a tensor's version"},
    {"_ops_will_write", py_will_write, METH_O,
     "announce an in-place write of a tensor (before it; then _ops_bump_version)"},
    {"_ops_fma", py_fma, METH_VARARGS, "x + y * alpha rounded once (eager add/sub with alpha)"},
    {"_ops_topk_last", py_topk_last, METH_VARARGS,
     "topk along the last dim for small k, or None (the Python path decides)"},
    {"_op_functions", py_functions, METH_NOARGS,
     "name -> public function object"},
    {NULL},
};

/* ---- init ------------------------------------------------------------------ */

static int
install_method(PyObject *tdict, const char *name, PyObject *obj)
{
    PyObject *old = PyDict_GetItemString(tdict, name);   /* borrowed */
    if (old != NULL) {
        return 0;   /* the tensor room's own method wins */
    }
    return PyDict_SetItemString(tdict, name, obj);
}

int
stax_ops_func_init(PyObject *m)
{
    PyObject *bi = NULL, *tdict;
    int rc = -1;

    OpFunc_Type = (PyTypeObject *)PyType_FromSpec(&opfunc_spec);
    if (OpFunc_Type == NULL) {
        return -1;
    }
    meta_marker = PyErr_NewException("tensorplay._C._MetaNeedsValues", NULL, NULL);
    if (meta_marker == NULL) {
        return -1;
    }
    OpFunc_Type->tp_dictoffset = offsetof(StaxOpFunc, dict);
    OpFunc_Type->tp_vectorcall_offset = offsetof(StaxOpFunc, vectorcall);
    if (PyModule_AddObjectRef(m, "OpFunction", (PyObject *)OpFunc_Type) < 0) {
        return -1;
    }
    tensor_function_str = PyUnicode_InternFromString("__tensor_function__");
    op_name_str = PyUnicode_InternFromString("_stax_op");
    if (tensor_function_str == NULL || op_name_str == NULL) {
        return -1;
    }
    base_tensor_function = _PyType_Lookup(StaxTensor_Type,
                                          tensor_function_str);
    bi = PyImport_ImportModule("builtins");
    if (bi == NULL) {
        goto done;
    }
    builtin_abs = PyObject_GetAttrString(bi, "abs");
    if (builtin_abs == NULL) {
        goto done;
    }
    tdict = StaxTensor_Type->tp_dict;
    for (int i = 0; i < STAX_OP_COUNT; i++) {
        const stax_op_info *op = &stax_op_table[i];
        const stax_op_info *ip = stax_ops_inplace_of(op);
        if (op->flags & STAX_OPF_FUNCTION) {
            functions[i] = make_func(op, 0);
            if (functions[i] == NULL) {
                goto done;
            }
        }
        if (op->flags & STAX_OPF_METHOD) {
            methods[i] = make_func(op, 1);
            if (methods[i] == NULL
                || install_method(tdict, op->name, methods[i]) < 0) {
                goto done;
            }
        }
        if (ip != NULL) {
            inplace_methods[i] = make_func(ip, 1);
            if (inplace_methods[i] == NULL
                || install_method(tdict, ip->name, inplace_methods[i]) < 0) {
                goto done;
            }
        }
    }
    PyType_Modified(StaxTensor_Type);
    if (install_slots() < 0) {
        goto done;
    }
    if (PyModule_AddFunctions(m, ops_methods) < 0) {
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(bi);
    return rc;
}
