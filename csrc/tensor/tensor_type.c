/* The Tensor and Storage types: construction from/to NumPy without copies,
 * metadata getters, conversions, the small methods every tensor has. */
#include "tensor/tensor_internal.h"
#include "stax_numpy.h"
#include <structmember.h>

PyObject *stax_repr_hook = NULL;

/* ---- half precision conversions ------------------------------------- */

double
stax_half_to_double(uint16_t h)
{
    int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v;
    if (exp == 0) {
        v = ldexp((double)man, -24);
    }
    else if (exp == 31) {
        v = man ? NAN : INFINITY;
    }
    else {
        v = ldexp((double)(man | 0x400), exp - 25);
    }
    return sign ? -v : v;
}

uint16_t
stax_double_to_half(double d)
{
    /* round to nearest even, directly from the double (no double rounding) */
    uint16_t sign = signbit(d) ? 0x8000 : 0;
    double a = fabs(d);
    if (isnan(d)) {
        return (uint16_t)(sign | 0x7e00);
    }
    if (a >= 65520.0) {
        return (uint16_t)(sign | 0x7c00);
    }
    if (a < 6.103515625e-05) {                /* subnormal: m * 2^-24 */
        return (uint16_t)(sign | (uint16_t)nearbyint(a * 16777216.0));
    }
    int e;
    frexp(a, &e);                             /* a = f * 2^e, f in [0.5, 1) */
    double m = nearbyint(ldexp(a, 11 - e));   /* 1.m * 2^10, in [1024, 2048] */
    int E = e - 1;
    if (m >= 2048.0) {
        m = 1024.0;
        E++;
    }
    if (E > 15) {
        return (uint16_t)(sign | 0x7c00);
    }
    return (uint16_t)(sign | ((E + 15) << 10) | ((uint16_t)m - 1024));
}

/* ---- Storage -------------------------------------------------------- */

static void
storage_dealloc(PyObject *self)
{
    StaxStorage *s = (StaxStorage *)self;
    Py_XDECREF(s->owner);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *
storage_nbytes(PyObject *self, PyObject *unused)
{
    return PyLong_FromLongLong(((StaxStorage *)self)->nbytes);
}

static PyObject *
storage_data_ptr(PyObject *self, PyObject *unused)
{
    return PyLong_FromVoidPtr(((StaxStorage *)self)->data);
}

static Py_ssize_t
storage_len(PyObject *self)
{
    return (Py_ssize_t)((StaxStorage *)self)->nbytes;
}

static PySequenceMethods storage_as_sequence = {
    .sq_length = storage_len,
};

static PyMethodDef storage_methods[] = {
    {"nbytes", storage_nbytes, METH_NOARGS, NULL},
    {"size", storage_nbytes, METH_NOARGS, NULL},
    {"data_ptr", storage_data_ptr, METH_NOARGS, NULL},
    {NULL},
};

static PyMemberDef storage_members[] = {
    {"_version", T_ULONGLONG, offsetof(StaxStorage, version), READONLY, NULL},
    {"owner", T_OBJECT, offsetof(StaxStorage, owner), READONLY, NULL},
    {NULL},
};

PyTypeObject StaxStorage_TypeObj = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorplay.Storage",
    .tp_basicsize = sizeof(StaxStorage),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = storage_dealloc,
    .tp_as_sequence = &storage_as_sequence,
    .tp_methods = storage_methods,
    .tp_members = storage_members,
};

/* steals owner */
static StaxStorage *
storage_new(PyObject *owner, char *data, int64_t nbytes)
{
    StaxStorage *s = PyObject_New(StaxStorage, &StaxStorage_TypeObj);
    if (s == NULL) {
        Py_DECREF(owner);
        return NULL;
    }
    s->owner = owner;
    s->data = data;
    s->nbytes = nbytes;
    s->version = 0;
    return s;
}

/* a new tensor of dtype dt and rank ndim on storage st (a new reference,
 * given up on failure; NULL: an error already set); sizes and strides are
 * the caller's to fill */
static StaxTensor *
tensor_on_storage(StaxStorage *st, stax_dtype_t dt, int ndim)
{
    if (st == NULL) {
        return NULL;
    }
    StaxTensor *t = stax_tensor_alloc(&StaxTensor_TypeObj);
    if (t == NULL) {
        Py_DECREF(st);
        return NULL;
    }
    t->storage = st;
    t->dtype = dt;
    t->ndim = ndim;
    return t;
}

/* row-major strides for t's sizes (a dim of size 0 or 1 counts as 1) */
static void
contiguous_strides(StaxTensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->strides[i] = s;
        s *= t->sizes[i] > 1 ? t->sizes[i] : 1;
    }
}

/* ---- core C API ----------------------------------------------------- */

StaxTensor *
stax_tensor_alloc(PyTypeObject *tp)
{
    return (StaxTensor *)tp->tp_alloc(tp, 0);
}

int64_t
stax_tensor_numel(StaxTensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        n *= t->sizes[i];
    }
    return n;
}

int
stax_tensor_is_contiguous(StaxTensor *t)
{
    int64_t expected = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->sizes[i] == 0) {
            return 1;
        }
    }
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->sizes[i] != 1 && t->strides[i] != expected) {
            return 0;
        }
        expected *= t->sizes[i];
    }
    return 1;
}

void
stax_tensor_bump_version(StaxTensor *t)
{
    t->storage->version++;
}

StaxTensor *
stax_tensor_empty(int ndim, const int64_t *sizes, stax_dtype_t dt)
{
    npy_intp n = 1;
    for (int i = 0; i < ndim; i++) {
        if (sizes[i] < 0) {
            PyErr_Format(PyExc_RuntimeError,
                         "Trying to create tensor with negative dimension "
                         "%lld: [%lld]", (long long)sizes[i],
                         (long long)sizes[i]);
            return NULL;
        }
        if (__builtin_mul_overflow(n, (npy_intp)sizes[i], &n)
            || n > ((npy_intp)1 << 60)) {
            PyObject *l = PyList_New(ndim);
            for (int j = 0; l && j < ndim; j++) {
                PyList_SET_ITEM(l, j, PyLong_FromLongLong(sizes[j]));
            }
            PyErr_Format(PyExc_RuntimeError,
                         "Storage size calculation overflowed with sizes=%S",
                         l);
            Py_XDECREF(l);
            return NULL;
        }
    }
    PyObject *arr = PyArray_SimpleNew(1, &n, stax_dtype_to_npy(dt));
    if (arr == NULL) {
        return NULL;
    }
    StaxTensor *t = tensor_on_storage(
        storage_new(arr, PyArray_DATA((PyArrayObject *)arr),
                    (int64_t)n * stax_dtype_itemsize(dt)), dt, ndim);
    if (t == NULL) {
        return NULL;
    }
    for (int i = 0; i < ndim; i++) {
        t->sizes[i] = sizes[i];
    }
    contiguous_strides(t);
    return t;
}

StaxTensor *
stax_tensor_view(StaxTensor *base, int ndim, const int64_t *sizes,
                 const int64_t *strides, int64_t offset)
{
    if (ndim > STAX_MAX_DIMS) {
        PyErr_Format(PyExc_RuntimeError, "at most %d dimensions are "
                     "supported", STAX_MAX_DIMS);
        return NULL;
    }
    StaxTensor *t = stax_tensor_alloc(&StaxTensor_TypeObj);
    if (t == NULL) {
        return NULL;
    }
    t->storage = (StaxStorage *)Py_NewRef(base->storage);
    t->offset = offset;
    t->ndim = ndim;
    memcpy(t->sizes, sizes, ndim * sizeof(int64_t));
    memcpy(t->strides, strides, ndim * sizeof(int64_t));
    t->dtype = base->dtype;
    if (base->requires_grad && stax_grad_enabled()) {
        t->requires_grad = 1;
        t->nonleaf = 1;
    }
    return t;
}

void
stax_tensor_set_result_requires_grad(StaxTensor *out, int rg)
{
    out->requires_grad = rg ? 1 : 0;
    out->nonleaf = rg ? 1 : 0;
}

int
stax_result_requires_grad(PyObject *const *operands, Py_ssize_t n)
{
    if (!stax_grad_enabled()) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (operands[i] != NULL && StaxTensor_Check(operands[i])
            && ((StaxTensor *)operands[i])->requires_grad) {
            return 1;
        }
    }
    return 0;
}

StaxTensor *
stax_tensor_from_array(PyObject *obj)
{
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "expected np.ndarray (got %.100s)",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PyArrayObject *arr = (PyArrayObject *)obj;
    stax_dtype_t dt;
    if (stax_dtype_from_npy(PyArray_TYPE(arr), &dt) < 0) {
        return NULL;
    }
    if (!PyArray_ISNBO(PyArray_DESCR(arr)->byteorder)) {
        PyErr_SetString(PyExc_ValueError,
                        "given numpy array has byte order different from the "
                        "native byte order. Conversion between byte orders "
                        "is currently not supported.");
        return NULL;
    }
    int ndim = PyArray_NDIM(arr);
    if (ndim > STAX_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "at most %d dimensions are supported",
                     STAX_MAX_DIMS);
        return NULL;
    }
    int isz = stax_dtype_itemsize(dt);
    int64_t extent = 1;
    int empty = PyArray_SIZE(arr) == 0;
    for (int i = 0; i < ndim; i++) {
        npy_intp st = PyArray_STRIDE(arr, i);
        if (st < 0) {
            PyErr_SetString(PyExc_ValueError,
                            "At least one stride in the given numpy array is "
                            "negative, and tensors with negative strides are "
                            "not currently supported. (You can probably work "
                            "around this by making a copy of your array  with "
                            "array.copy().) ");
            return NULL;
        }
        if (st % isz != 0) {
            PyErr_SetString(PyExc_ValueError,
                            "given numpy array strides not a multiple of the "
                            "element byte size. Copy the numpy array to "
                            "reallocate the memory.");
            return NULL;
        }
        if (PyArray_DIM(arr, i) == 0) {
            empty = 1;
        }
        else {
            extent += (PyArray_DIM(arr, i) - 1) * (st / isz);
        }
    }
    StaxTensor *t = tensor_on_storage(
        storage_new(Py_NewRef(obj), PyArray_DATA(arr),
                    empty ? 0 : extent * isz), dt, ndim);
    if (t == NULL) {
        return NULL;
    }
    for (int i = 0; i < ndim; i++) {
        t->sizes[i] = PyArray_DIM(arr, i);
        t->strides[i] = PyArray_STRIDE(arr, i) / isz;
    }
    if (empty) {   /* torch gives empty tensors contiguous strides */
        contiguous_strides(t);
    }
    return t;
}

PyObject *
stax_tensor_as_array(StaxTensor *t)
{
    npy_intp dims[STAX_MAX_DIMS], strides[STAX_MAX_DIMS];
    int isz = stax_dtype_itemsize(t->dtype);
    for (int i = 0; i < t->ndim; i++) {
        dims[i] = t->sizes[i];
        strides[i] = t->strides[i] * isz;
    }
    PyArray_Descr *d = PyArray_DescrFromType(stax_dtype_to_npy(t->dtype));
    if (d == NULL) {
        return NULL;
    }
    PyObject *arr = PyArray_NewFromDescr(&PyArray_Type, d, t->ndim, dims,
                                         strides, STAX_TENSOR_DATA(t),
                                         NPY_ARRAY_WRITEABLE, NULL);
    if (arr == NULL) {
        return NULL;
    }
    if (PyArray_SetBaseObject((PyArrayObject *)arr,
                              Py_NewRef(t->storage)) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

static PyObject *
shape_str(StaxTensor *t)
{
    PyObject *l = PyList_New(t->ndim);
    if (l == NULL) {
        return NULL;
    }
    for (int i = 0; i < t->ndim; i++) {
        PyList_SET_ITEM(l, i, PyLong_FromLongLong(t->sizes[i]));
    }
    return l;
}

/* copy src (Tensor, array, scalar, nested list) into dst with broadcasting
 * and casting; does not bump the version. Returns None. */
PyObject *
stax_tensor_copy_into(StaxTensor *dst, PyObject *src)
{
    PyObject *darr = NULL, *sarr = NULL, *res = NULL;
    darr = stax_tensor_as_array(dst);
    if (darr == NULL) {
        goto done;
    }
    if (StaxTensor_Check(src)) {
        StaxTensor *s = (StaxTensor *)src, *e;
        if (s->ndim > dst->ndim) {
            PyObject *ls = shape_str(s), *ld = shape_str(dst);
            if (ls && ld) {
                PyErr_Format(PyExc_RuntimeError,
                             "output with shape %R doesn't match the "
                             "broadcast shape %R", ld, ls);
            }
            Py_XDECREF(ls);
            Py_XDECREF(ld);
            goto done;
        }
        e = stax_tensor_expand(s, dst->ndim, dst->sizes);
        if (e == NULL) {
            goto done;
        }
        sarr = stax_tensor_as_array(e);
        Py_DECREF(e);
    }
    else {
        sarr = PyArray_FromAny(src, NULL, 0, 0, 0, NULL);
    }
    if (sarr == NULL) {
        goto done;
    }
    if (PyArray_CopyInto((PyArrayObject *)darr, (PyArrayObject *)sarr) < 0) {
        if (PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyObject *ld = shape_str(dst), *ls = NULL;
            PyErr_Clear();
            ls = PyArray_NDIM((PyArrayObject *)sarr) >= 0 ? PyList_New(0) : NULL;
            for (int i = 0; ls && i < PyArray_NDIM((PyArrayObject *)sarr); i++) {
                PyObject *v = PyLong_FromSsize_t(
                    PyArray_DIM((PyArrayObject *)sarr, i));
                if (v == NULL || PyList_Append(ls, v) < 0) {
                    Py_XDECREF(v);
                    Py_CLEAR(ls);
                    break;
                }
                Py_DECREF(v);
            }
            if (ld && ls) {
                PyErr_Format(PyExc_RuntimeError,
                             "shape mismatch: value tensor of shape %R cannot "
                             "be broadcast to indexing result of shape %R",
                             ls, ld);
            }
            Py_XDECREF(ld);
            Py_XDECREF(ls);
        }
        goto done;
    }
    res = Py_NewRef(Py_None);
done:
    Py_XDECREF(darr);
    Py_XDECREF(sarr);
    return res;
}

StaxTensor *
stax_tensor_to_dtype(StaxTensor *t, stax_dtype_t dt, int copy)
{
    if (dt == t->dtype && !copy) {
        return (StaxTensor *)Py_NewRef(t);
    }
    StaxTensor *r = stax_tensor_empty(t->ndim, t->sizes, dt);
    if (r == NULL) {
        return NULL;
    }
    PyObject *ok = stax_tensor_copy_into(r, (PyObject *)t);
    if (ok == NULL) {
        Py_DECREF(r);
        return NULL;
    }
    Py_DECREF(ok);
    if (t->requires_grad && stax_dtype_is_floating(dt)
        && stax_grad_enabled()) {
        stax_tensor_set_result_requires_grad(r, 1);
    }
    return r;
}

PyObject *
stax_tensor_item(StaxTensor *t)
{
    int64_t n = stax_tensor_numel(t);
    if (n != 1) {
        PyErr_Format(PyExc_RuntimeError,
                     "a Tensor with %lld elements cannot be converted to "
                     "Scalar", (long long)n);
        return NULL;
    }
    char *p = STAX_TENSOR_DATA(t);
    switch (t->dtype) {
    case STAX_BOOL: return PyBool_FromLong(*(npy_bool *)p != 0);
    case STAX_UINT8: return PyLong_FromLong(*(uint8_t *)p);
    case STAX_INT8: return PyLong_FromLong(*(int8_t *)p);
    case STAX_INT16: return PyLong_FromLong(*(int16_t *)p);
    case STAX_INT32: return PyLong_FromLong(*(int32_t *)p);
    case STAX_INT64: return PyLong_FromLongLong(*(int64_t *)p);
    case STAX_FLOAT16: return PyFloat_FromDouble(stax_half_to_double(*(uint16_t *)p));
    case STAX_FLOAT32: return PyFloat_FromDouble(*(float *)p);
    case STAX_FLOAT64: return PyFloat_FromDouble(*(double *)p);
    default: break;
    }
    PyErr_SetString(PyExc_SystemError, "bad dtype");
    return NULL;
}

/* ---- Tensor type slots -------------------------------------------- */

static int
tensor_traverse(PyObject *self, visitproc visit, void *arg)
{
    StaxTensor *t = (StaxTensor *)self;
    Py_VISIT(t->dict);
    Py_VISIT(t->grad);
    return 0;
}

static int
tensor_clear(PyObject *self)
{
    StaxTensor *t = (StaxTensor *)self;
    Py_CLEAR(t->dict);
    Py_CLEAR(t->grad);
    return 0;
}

static void
tensor_dealloc(PyObject *self)
{
    StaxTensor *t = (StaxTensor *)self;
    PyObject_GC_UnTrack(self);
    if (t->weakreflist != NULL) {
        PyObject_ClearWeakRefs(self);
    }
    tensor_clear(self);
    Py_CLEAR(t->storage);
    Py_TYPE(self)->tp_free(self);
}

static Py_hash_t
tensor_hash(PyObject *self)
{
    return _Py_HashPointer(self);
}

static PyObject *
tensor_repr(PyObject *self)
{
    if (stax_repr_hook != NULL) {
        return PyObject_CallOneArg(stax_repr_hook, self);
    }
    PyObject *arr = stax_tensor_as_array((StaxTensor *)self), *r = NULL;
    if (arr == NULL) {
        return NULL;
    }
    r = PyUnicode_FromFormat("tensor(%R)", arr);
    Py_DECREF(arr);
    return r;
}

static int
fill_from_data(StaxTensor *t, PyObject *data, stax_dtype_t dt)
{
    PyObject *arr = PyArray_FromAny(
        data, PyArray_DescrFromType(stax_dtype_to_npy(dt)), 0, 0,
        NPY_ARRAY_DEFAULT | NPY_ARRAY_ENSURECOPY | NPY_ARRAY_FORCECAST, NULL);
    if (arr == NULL) {
        return -1;
    }
    StaxTensor *src = stax_tensor_from_array(arr);
    Py_DECREF(arr);
    if (src == NULL) {
        return -1;
    }
    t->storage = (StaxStorage *)Py_NewRef(src->storage);
    t->ndim = src->ndim;
    t->dtype = dt;
    memcpy(t->sizes, src->sizes, sizeof(t->sizes));
    memcpy(t->strides, src->strides, sizeof(t->strides));
    Py_DECREF(src);
    return 0;
}

/* tensorplay.Tensor(*sizes) / Tensor(data): default dtype */
static PyObject *
tensor_new(PyTypeObject *tp, PyObject *args, PyObject *kwds)
{
    StaxTensor *t = stax_tensor_alloc(tp), *tmp = NULL;
    if (t == NULL) {
        return NULL;
    }
    stax_dtype_t dt = stax_default_dtype();
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n == 1 && !PyLong_Check(PyTuple_GET_ITEM(args, 0))
        && !PyTuple_Check(PyTuple_GET_ITEM(args, 0))) {
        PyObject *a = PyTuple_GET_ITEM(args, 0);
        if (StaxTensor_Check(a)) {
            tmp = (StaxTensor *)a;
            t->storage = (StaxStorage *)Py_NewRef(tmp->storage);
            t->ndim = tmp->ndim;
            t->offset = tmp->offset;
            t->dtype = tmp->dtype;
            memcpy(t->sizes, tmp->sizes, sizeof(t->sizes));
            memcpy(t->strides, tmp->strides, sizeof(t->strides));
            return (PyObject *)t;
        }
        if (fill_from_data(t, a, dt) < 0) {
            Py_DECREF(t);
            return NULL;
        }
        return (PyObject *)t;
    }
    int64_t sizes[STAX_MAX_DIMS];
    int nd = 1;
    sizes[0] = 0;
    if (n > 0 && stax_parse_sizes(args, sizes, &nd) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    tmp = stax_tensor_empty(nd, sizes, dt);
    if (tmp == NULL) {
        Py_DECREF(t);
        return NULL;
    }
    memset(STAX_TENSOR_DATA(tmp), 0, tmp->storage->nbytes);
    t->storage = (StaxStorage *)Py_NewRef(tmp->storage);
    t->ndim = tmp->ndim;
    t->dtype = dt;
    memcpy(t->sizes, tmp->sizes, sizeof(t->sizes));
    memcpy(t->strides, tmp->strides, sizeof(t->strides));
    Py_DECREF(tmp);
    return (PyObject *)t;
}

/* ---- number slots for one-element tensors ----------------------------- */

static int
tensor_bool(PyObject *self)
{
    StaxTensor *t = (StaxTensor *)self;
    int64_t n = stax_tensor_numel(t);
    if (n == 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Boolean value of Tensor with no values is ambiguous");
        return -1;
    }
    if (n > 1) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Boolean value of Tensor with more than one value is "
                        "ambiguous");
        return -1;
    }
    PyObject *v = stax_tensor_item(t);
    if (v == NULL) {
        return -1;
    }
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

static PyObject *
scalar_of(PyObject *self)
{
    StaxTensor *t = (StaxTensor *)self;
    if (stax_tensor_numel(t) != 1) {
        PyErr_SetString(PyExc_ValueError,
                        "only one element tensors can be converted to Python "
                        "scalars");
        return NULL;
    }
    return stax_tensor_item(t);
}

/* int(t) / float(t): the one element converted by conv */
static PyObject *
scalar_as(PyObject *self, PyObject *(*conv)(PyObject *))
{
    PyObject *v = scalar_of(self), *r;
    if (v == NULL) {
        return NULL;
    }
    r = conv(v);
    Py_DECREF(v);
    return r;
}

static PyObject *
tensor_int(PyObject *self)
{
    return scalar_as(self, PyNumber_Long);
}

static PyObject *
tensor_float(PyObject *self)
{
    return scalar_as(self, PyNumber_Float);
}

static PyObject *
tensor_index(PyObject *self)
{
    StaxTensor *t = (StaxTensor *)self;
    if (stax_tensor_numel(t) != 1 || !stax_dtype_is_integral(t->dtype)) {
        PyErr_SetString(PyExc_TypeError,
                        "only integer tensors of a single element can be "
                        "converted to an index");
        return NULL;
    }
    return stax_tensor_item(t);
}

#define TRAMP(S) .S = stax_tramp_##S,
static PyNumberMethods tensor_as_number = {
    STAX_TENSOR_BINARY_SLOTS(TRAMP)
    STAX_TENSOR_UNARY_SLOTS(TRAMP)
    STAX_TENSOR_TERNARY_SLOTS(TRAMP)
    .nb_bool = tensor_bool,
    .nb_int = tensor_int,
    .nb_float = tensor_float,
    .nb_index = tensor_index,
};

static Py_ssize_t
tensor_len(PyObject *self)
{
    StaxTensor *t = (StaxTensor *)self;
    if (t->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
        return -1;
    }
    return (Py_ssize_t)t->sizes[0];
}

static PySequenceMethods tensor_as_sequence = {
    .sq_length = tensor_len,
};

static PyObject *
tensor_subscript(PyObject *self, PyObject *key)
{
    int h;
    PyObject *r = stax_tensor_override_item(self, key, NULL, &h);
    if (h) {
        return r;
    }
    return stax_tensor_getitem((StaxTensor *)self, key);
}

static int
tensor_ass_subscript(PyObject *self, PyObject *key, PyObject *value)
{
    int h;
    if (value != NULL) {
        PyObject *r = stax_tensor_override_item(self, key, value, &h);
        if (h) {
            Py_XDECREF(r);
            return r == NULL ? -1 : 0;
        }
    }
    return stax_tensor_setitem((StaxTensor *)self, key, value);
}

static PyMappingMethods tensor_as_mapping = {
    .mp_length = tensor_len,
    .mp_subscript = tensor_subscript,
    .mp_ass_subscript = tensor_ass_subscript,
};

static PyObject *
tensor_iter(PyObject *self)
{
    StaxTensor *t = (StaxTensor *)self;
    if (t->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "iteration over a 0-d tensor");
        return NULL;
    }
    PyObject *l = PyList_New(t->sizes[0]), *it;
    if (l == NULL) {
        return NULL;
    }
    for (int64_t i = 0; i < t->sizes[0]; i++) {
        StaxTensor *v = stax_tensor_view(t, t->ndim - 1, t->sizes + 1,
                                         t->strides + 1,
                                         t->offset + i * t->strides[0]);
        if (v == NULL) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, (PyObject *)v);
    }
    it = PyObject_GetIter(l);
    Py_DECREF(l);
    return it;
}

/* ---- getters ------------------------------------------------------------- */

#define SELF ((StaxTensor *)self)

static PyObject *
get_shape(PyObject *self, void *c)
{
    return stax_size_new(SELF->ndim, SELF->sizes);
}

static PyObject *
get_dtype(PyObject *self, void *c)
{
    return Py_NewRef(stax_dtype_object(SELF->dtype));
}

static PyObject *
get_device(PyObject *self, void *c)
{
    return Py_NewRef(stax_cpu_device());
}

static PyObject *
get_ndim(PyObject *self, void *c)
{
    return PyLong_FromLong(SELF->ndim);
}

static PyObject *
get_version(PyObject *self, void *c)
{
    return PyLong_FromUnsignedLongLong(SELF->storage->version);
}

static PyObject *
get_requires_grad(PyObject *self, void *c)
{
    return PyBool_FromLong(SELF->requires_grad);
}

static int
set_requires_grad_value(StaxTensor *t, int v)
{
    if (v && !stax_dtype_is_floating(t->dtype)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "only Tensors of floating point dtype can require "
                        "gradients");
        return -1;
    }
    if (!v && t->nonleaf) {
        PyErr_SetString(PyExc_RuntimeError,
                        "you can only change requires_grad flags of leaf "
                        "variables. If you want to use a computed variable in "
                        "a subgraph that doesn't require differentiation use "
                        "var_no_grad = var.detach().");
        return -1;
    }
    t->requires_grad = v;
    return 0;
}

static int
set_requires_grad(PyObject *self, PyObject *v, void *c)
{
    if (v == NULL || !PyBool_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "requires_grad must be a bool");
        return -1;
    }
    return set_requires_grad_value(SELF, v == Py_True);
}

static PyObject *
get_is_leaf(PyObject *self, void *c)
{
    return PyBool_FromLong(!SELF->nonleaf);
}

static PyObject *
get_grad(PyObject *self, void *c)
{
    return Py_NewRef(SELF->grad ? SELF->grad : Py_None);
}

static int
set_grad(PyObject *self, PyObject *v, void *c)
{
    if (v != NULL && v != Py_None && !StaxTensor_Check(v)) {
        PyErr_Format(PyExc_TypeError,
                     "assigned grad expected to be a Tensor or None but got "
                     "grad of type %.100s", Py_TYPE(v)->tp_name);
        return -1;
    }
    Py_XSETREF(SELF->grad, (v == NULL || v == Py_None) ? NULL : Py_NewRef(v));
    return 0;
}

static PyObject *
get_none(PyObject *self, void *c)
{
    Py_RETURN_NONE;
}

static PyObject *
get_false(PyObject *self, void *c)
{
    Py_RETURN_FALSE;
}

static PyObject *
get_true(PyObject *self, void *c)
{
    Py_RETURN_TRUE;
}

/* t.data and t.detach(): a view of the same storage outside autograd */
static PyObject *
detached_view(PyObject *self)
{
    StaxTensor *t = stax_tensor_view(SELF, SELF->ndim, SELF->sizes,
                                     SELF->strides, SELF->offset);
    if (t != NULL) {
        t->requires_grad = 0;
        t->nonleaf = 0;
    }
    return (PyObject *)t;
}

static PyObject *
get_data(PyObject *self, void *c)
{
    return detached_view(self);
}

static int
set_data(PyObject *self, PyObject *v, void *c)
{
    if (v == NULL || !StaxTensor_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "data must be a Tensor");
        return -1;
    }
    StaxTensor *o = (StaxTensor *)v;
    Py_SETREF(SELF->storage, (StaxStorage *)Py_NewRef(o->storage));
    SELF->offset = o->offset;
    SELF->ndim = o->ndim;
    SELF->dtype = o->dtype;
    memcpy(SELF->sizes, o->sizes, sizeof(o->sizes));
    memcpy(SELF->strides, o->strides, sizeof(o->strides));
    return 0;
}

static PyObject *
get_itemsize(PyObject *self, void *c)
{
    return PyLong_FromLong(stax_dtype_itemsize(SELF->dtype));
}

static PyObject *
get_nbytes(PyObject *self, void *c)
{
    return PyLong_FromLongLong(stax_tensor_numel(SELF)
                               * stax_dtype_itemsize(SELF->dtype));
}

static PyObject *
get_storage(PyObject *self, void *c)
{
    return Py_NewRef(SELF->storage);
}

static PyObject *
get_T(PyObject *self, void *c)
{
    return (PyObject *)stax_tensor_T(SELF);
}

static PyObject *
get_mT(PyObject *self, void *c)
{
    return (PyObject *)stax_tensor_mT(SELF);
}

static PyGetSetDef tensor_getset[] = {
    {"shape", get_shape, NULL, NULL, NULL},
    {"dtype", get_dtype, NULL, NULL, NULL},
    {"device", get_device, NULL, NULL, NULL},
    {"ndim", get_ndim, NULL, NULL, NULL},
    {"_version", get_version, NULL, NULL, NULL},
    {"requires_grad", get_requires_grad, set_requires_grad, NULL, NULL},
    {"is_leaf", get_is_leaf, NULL, NULL, NULL},
    {"grad", get_grad, set_grad, NULL, NULL},
    {"grad_fn", get_none, NULL, NULL, NULL},
    {"is_cuda", get_false, NULL, NULL, NULL},
    {"is_cpu", get_true, NULL, NULL, NULL},
    {"is_sparse", get_false, NULL, NULL, NULL},
    {"is_quantized", get_false, NULL, NULL, NULL},
    {"is_meta", get_false, NULL, NULL, NULL},
    {"data", get_data, set_data, NULL, NULL},
    {"itemsize", get_itemsize, NULL, NULL, NULL},
    {"nbytes", get_nbytes, NULL, NULL, NULL},
    {"_storage", get_storage, NULL, NULL, NULL},
    {"T", get_T, NULL, NULL, NULL},
    {"mT", get_mT, NULL, NULL, NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

/* ---- methods ---------------------------------------------------------- */

/* the dim argument of size(dim) / stride(dim), wrapped into *d; -1 with an
 * exception set */
static int
method_dim(PyObject *self, PyObject *dim, int *d)
{
    int64_t dv = PyLong_AsLongLong(dim);
    if ((dv == -1 && PyErr_Occurred()) || stax_wrap_dim(dv, SELF->ndim, d) < 0) {
        return -1;
    }
    if (SELF->ndim == 0) {
        PyErr_SetString(PyExc_IndexError,
                        "dimension specified as 0 but tensor has no "
                        "dimensions");
        return -1;
    }
    return 0;
}

static PyObject *
m_size(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dim", NULL};
    PyObject *dim = Py_None;
    int d;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:size", kwlist, &dim)) {
        return NULL;
    }
    if (dim == Py_None) {
        return stax_size_new(SELF->ndim, SELF->sizes);
    }
    if (method_dim(self, dim, &d) < 0) {
        return NULL;
    }
    return PyLong_FromLongLong(SELF->sizes[d]);
}

static PyObject *
m_stride(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dim", NULL};
    PyObject *dim = Py_None;
    int d;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:stride", kwlist, &dim)) {
        return NULL;
    }
    if (dim == Py_None) {
        PyObject *r = PyTuple_New(SELF->ndim);
        for (int i = 0; r && i < SELF->ndim; i++) {
            PyTuple_SET_ITEM(r, i, PyLong_FromLongLong(SELF->strides[i]));
        }
        return r;
    }
    if (method_dim(self, dim, &d) < 0) {
        return NULL;
    }
    return PyLong_FromLongLong(SELF->strides[d]);
}

static PyObject *
m_dim(PyObject *self, PyObject *unused)
{
    return PyLong_FromLong(SELF->ndim);
}

static PyObject *
m_numel(PyObject *self, PyObject *unused)
{
    return PyLong_FromLongLong(stax_tensor_numel(SELF));
}

static PyObject *
m_storage_offset(PyObject *self, PyObject *unused)
{
    return PyLong_FromLongLong(SELF->offset);
}

static PyObject *
m_is_contiguous(PyObject *self, PyObject *args, PyObject *kw)
{
    return PyBool_FromLong(stax_tensor_is_contiguous(SELF));
}

static PyObject *
m_is_floating_point(PyObject *self, PyObject *unused)
{
    return PyBool_FromLong(stax_dtype_is_floating(SELF->dtype));
}

static PyObject *
m_element_size(PyObject *self, PyObject *unused)
{
    return PyLong_FromLong(stax_dtype_itemsize(SELF->dtype));
}

static PyObject *
m_data_ptr(PyObject *self, PyObject *unused)
{
    return PyLong_FromVoidPtr(STAX_TENSOR_DATA(SELF));
}

static PyObject *
m_numpy(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"force", NULL};
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$p:numpy", kwlist, &force)) {
        return NULL;
    }
    if (SELF->requires_grad && !force) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Can't call numpy() on Tensor that requires grad. Use "
                        "tensor.detach().numpy() instead.");
        return NULL;
    }
    return stax_tensor_as_array(SELF);
}

static PyObject *
m_array(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dtype", "copy", NULL};
    PyObject *dtype = Py_None, *copy = Py_None, *arr, *r;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:__array__", kwlist,
                                     &dtype, &copy)) {
        return NULL;
    }
    arr = stax_tensor_as_array(SELF);
    if (arr == NULL) {
        return NULL;
    }
    if (dtype != Py_None) {
        r = PyObject_CallMethod(arr, "astype", "O", dtype);
        Py_DECREF(arr);
        return r;
    }
    if (copy == Py_True) {
        r = PyArray_NewCopy((PyArrayObject *)arr, NPY_KEEPORDER);
        Py_DECREF(arr);
        return r;
    }
    return arr;
}

static PyObject *
m_item(PyObject *self, PyObject *unused)
{
    return stax_tensor_item(SELF);
}

static PyObject *
m_tolist(PyObject *self, PyObject *unused)
{
    PyObject *arr = stax_tensor_as_array(SELF), *r;
    if (arr == NULL) {
        return NULL;
    }
    r = PyArray_ToList((PyArrayObject *)arr);
    Py_DECREF(arr);
    return r;
}

static PyObject *
m_to(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("to");
    stax_dtype_t dt = SELF->dtype;
    int copy = 0;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        if (StaxTensor_Check(a)) {
            dt = ((StaxTensor *)a)->dtype;
        }
        else if (PyUnicode_Check(a) || Py_IS_TYPE(a, &StaxDevice_TypeObj)) {
            PyObject *s = PyObject_Str(a);
            if (s == NULL) {
                return NULL;
            }
            int ok = PyUnicode_CompareWithASCIIString(s, "cpu") == 0;
            Py_DECREF(s);
            if (!ok) {
                stax_dtype_t tmp;
                if (PyUnicode_Check(a) && stax_dtype_from_object(a, &tmp) == 0) {
                    dt = tmp;
                    continue;
                }
                PyErr_Clear();
                PyErr_Format(PyExc_RuntimeError,
                             "tensorplay tensors live on the cpu device; "
                             "cannot move to %R", a);
                return NULL;
            }
        }
        else if (PyBool_Check(a)) {
            continue;   /* non_blocking */
        }
        else if (stax_dtype_from_object(a, &dt) < 0) {
            return NULL;
        }
    }
    if (kw != NULL) {
        PyObject *v = PyDict_GetItemString(kw, "dtype");
        if (v != NULL && v != Py_None && stax_dtype_from_object(v, &dt) < 0) {
            return NULL;
        }
        v = PyDict_GetItemString(kw, "copy");
        if (v != NULL) {
            copy = PyObject_IsTrue(v);
        }
        v = PyDict_GetItemString(kw, "device");
        if (v != NULL && v != Py_None) {
            PyObject *s = PyObject_Str(v);
            if (s == NULL) {
                return NULL;
            }
            int ok = PyUnicode_CompareWithASCIIString(s, "cpu") == 0;
            Py_DECREF(s);
            if (!ok) {
                PyErr_Format(PyExc_RuntimeError,
                             "tensorplay tensors live on the cpu device; "
                             "cannot move to %R", v);
                return NULL;
            }
        }
    }
    return (PyObject *)stax_tensor_to_dtype(SELF, dt, copy);
}

#define CAST_METHOD(NAME, DT)                                           \
    static PyObject *                                                   \
    m_##NAME(PyObject *self, PyObject *args, PyObject *kw)              \
    {                                                                   \
        return (PyObject *)stax_tensor_to_dtype(SELF, DT, 0);           \
    }
CAST_METHOD(float, STAX_FLOAT32)
CAST_METHOD(double, STAX_FLOAT64)
CAST_METHOD(half, STAX_FLOAT16)
CAST_METHOD(long, STAX_INT64)
CAST_METHOD(int, STAX_INT32)
CAST_METHOD(short, STAX_INT16)
CAST_METHOD(char, STAX_INT8)
CAST_METHOD(byte, STAX_UINT8)
CAST_METHOD(bool, STAX_BOOL)

static PyObject *
m_type(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dtype", "non_blocking", NULL};
    PyObject *dtype = Py_None, *nb = NULL;
    stax_dtype_t dt;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:type", kwlist, &dtype,
                                     &nb)) {
        return NULL;
    }
    if (dtype == Py_None) {
        static const char *names[STAX_NUM_DTYPES] = {
            "BoolTensor", "ByteTensor", "CharTensor", "ShortTensor",
            "IntTensor", "LongTensor", "HalfTensor", "FloatTensor",
            "DoubleTensor"};
        return PyUnicode_FromFormat("tensorplay.%s", names[SELF->dtype]);
    }
    if (stax_dtype_from_object(dtype, &dt) < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_to_dtype(SELF, dt, 0);
}

static PyObject *
m_clone(PyObject *self, PyObject *args, PyObject *kw)
{
    return (PyObject *)stax_tensor_to_dtype(SELF, SELF->dtype, 1);
}

static PyObject *
m_contiguous(PyObject *self, PyObject *args, PyObject *kw)
{
    if (stax_tensor_is_contiguous(SELF)) {
        return Py_NewRef(self);
    }
    return (PyObject *)stax_tensor_to_dtype(SELF, SELF->dtype, 1);
}

static PyObject *
m_detach(PyObject *self, PyObject *unused)
{
    return detached_view(self);
}

static PyObject *
m_detach_(PyObject *self, PyObject *unused)
{
    SELF->requires_grad = 0;
    SELF->nonleaf = 0;
    return Py_NewRef(self);
}

static PyObject *
m_untyped_storage(PyObject *self, PyObject *unused)
{
    return Py_NewRef(SELF->storage);
}

static PyObject *
m_cpu(PyObject *self, PyObject *unused)
{
    return Py_NewRef(self);
}

static PyObject *
m_requires_grad_(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"requires_grad", NULL};
    int v = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:requires_grad_", kwlist,
                                     &v)) {
        return NULL;
    }
    if (set_requires_grad_value(SELF, v) < 0) {
        return NULL;
    }
    return Py_NewRef(self);
}

/* copy_(src) / fill_(value) once the argument is checked: write it into
 * self, bump self's version, return self */
static PyObject *
copy_in_place(PyObject *self, PyObject *src)
{
    PyObject *r = stax_tensor_copy_into(SELF, src);
    if (r == NULL) {
        return NULL;
    }
    Py_DECREF(r);
    stax_tensor_bump_version(SELF);
    return Py_NewRef(self);
}

static PyObject *
m_copy_(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"src", "non_blocking", NULL};
    PyObject *src = NULL, *nb = NULL;
    STAX_OVERRIDE_VARARGS("copy_");
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:copy_", kwlist, &src,
                                     &nb)) {
        return NULL;
    }
    if (!StaxTensor_Check(src)) {
        PyErr_Format(PyExc_TypeError,
                     "copy_(): argument 'src' (position 1) must be Tensor, "
                     "not %.100s", Py_TYPE(src)->tp_name);
        return NULL;
    }
    return copy_in_place(self, src);
}

static PyObject *
m_fill_(PyObject *self, PyObject *value)
{
    STAX_OVERRIDE_O("fill_", value);
    if (StaxTensor_Check(value) && ((StaxTensor *)value)->ndim != 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "fill_ only supports 0-dimension value tensor but got "
                     "tensor with %d dimensions.",
                     ((StaxTensor *)value)->ndim);
        return NULL;
    }
    if (!StaxTensor_Check(value) && !PyNumber_Check(value)) {
        PyErr_Format(PyExc_TypeError,
                     "fill_(): argument 'value' (position 1) must be Number, "
                     "not %.100s", Py_TYPE(value)->tp_name);
        return NULL;
    }
    return copy_in_place(self, value);
}

static PyObject *
m_zero_(PyObject *self, PyObject *unused)
{
    PyObject *zero = PyLong_FromLong(0);
    PyObject *r = zero ? m_fill_(self, zero) : NULL;
    Py_XDECREF(zero);
    return r;
}

static PyObject *
m_make_subclass(PyObject *unused, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"cls", "data", "require_grad", NULL};
    PyObject *cls = NULL, *data = NULL;
    int rg = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!|p:_make_subclass", kwlist,
                                     &cls, &StaxTensor_TypeObj, &data, &rg)) {
        return NULL;
    }
    if (!PyType_Check(cls)
        || !PyType_IsSubtype((PyTypeObject *)cls, &StaxTensor_TypeObj)) {
        PyErr_SetString(PyExc_TypeError,
                        "_make_subclass: cls must be a Tensor subclass");
        return NULL;
    }
    StaxTensor *src = (StaxTensor *)data;
    StaxTensor *t = stax_tensor_alloc((PyTypeObject *)cls);
    if (t == NULL) {
        return NULL;
    }
    t->storage = (StaxStorage *)Py_NewRef(src->storage);
    t->offset = src->offset;
    t->ndim = src->ndim;
    t->dtype = src->dtype;
    memcpy(t->sizes, src->sizes, sizeof(t->sizes));
    memcpy(t->strides, src->strides, sizeof(t->strides));
    if (rg && set_requires_grad_value(t, 1) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return (PyObject *)t;
}

static PyObject *
m_reduce_ex(PyObject *self, PyObject *proto)
{
    PyObject *arr = stax_tensor_as_array(SELF), *cp = NULL, *mod, *fn, *r;
    if (arr == NULL) {
        return NULL;
    }
    cp = PyArray_NewCopy((PyArrayObject *)arr, NPY_CORDER);
    Py_DECREF(arr);
    if (cp == NULL) {
        return NULL;
    }
    mod = PyImport_ImportModule("tensorplay._tensor");
    fn = mod ? PyObject_GetAttrString(mod, "_rebuild_tensor") : NULL;
    Py_XDECREF(mod);
    if (fn == NULL) {
        Py_DECREF(cp);
        return NULL;
    }
    if (SELF->dict != NULL && PyDict_GET_SIZE(SELF->dict) > 0) {
        r = Py_BuildValue("(N(NOO)O)", fn, cp, (PyObject *)Py_TYPE(self),
                          SELF->requires_grad ? Py_True : Py_False,
                          SELF->dict);
    }
    else {
        r = Py_BuildValue("(N(NOO))", fn, cp, (PyObject *)Py_TYPE(self),
                          SELF->requires_grad ? Py_True : Py_False);
    }
    return r;
}

static PyMethodDef tensor_methods[] = {
    {"size", (PyCFunction)(void (*)(void))m_size, METH_VARARGS | METH_KEYWORDS, NULL},
    {"stride", (PyCFunction)(void (*)(void))m_stride, METH_VARARGS | METH_KEYWORDS, NULL},
    {"dim", m_dim, METH_NOARGS, NULL},
    {"ndimension", m_dim, METH_NOARGS, NULL},
    {"numel", m_numel, METH_NOARGS, NULL},
    {"nelement", m_numel, METH_NOARGS, NULL},
    {"storage_offset", m_storage_offset, METH_NOARGS, NULL},
    {"is_contiguous", (PyCFunction)(void (*)(void))m_is_contiguous, METH_VARARGS | METH_KEYWORDS, NULL},
    {"is_floating_point", m_is_floating_point, METH_NOARGS, NULL},
    {"element_size", m_element_size, METH_NOARGS, NULL},
    {"data_ptr", m_data_ptr, METH_NOARGS, NULL},
    {"numpy", (PyCFunction)(void (*)(void))m_numpy, METH_VARARGS | METH_KEYWORDS, NULL},
    {"__array__", (PyCFunction)(void (*)(void))m_array, METH_VARARGS | METH_KEYWORDS, NULL},
    {"item", m_item, METH_NOARGS, NULL},
    {"tolist", m_tolist, METH_NOARGS, NULL},
    {"to", (PyCFunction)(void (*)(void))m_to, METH_VARARGS | METH_KEYWORDS, NULL},
    {"float", (PyCFunction)(void (*)(void))m_float, METH_VARARGS | METH_KEYWORDS, NULL},
    {"double", (PyCFunction)(void (*)(void))m_double, METH_VARARGS | METH_KEYWORDS, NULL},
    {"half", (PyCFunction)(void (*)(void))m_half, METH_VARARGS | METH_KEYWORDS, NULL},
    {"long", (PyCFunction)(void (*)(void))m_long, METH_VARARGS | METH_KEYWORDS, NULL},
    {"int", (PyCFunction)(void (*)(void))m_int, METH_VARARGS | METH_KEYWORDS, NULL},
    {"short", (PyCFunction)(void (*)(void))m_short, METH_VARARGS | METH_KEYWORDS, NULL},
    {"char", (PyCFunction)(void (*)(void))m_char, METH_VARARGS | METH_KEYWORDS, NULL},
    {"byte", (PyCFunction)(void (*)(void))m_byte, METH_VARARGS | METH_KEYWORDS, NULL},
    {"bool", (PyCFunction)(void (*)(void))m_bool, METH_VARARGS | METH_KEYWORDS, NULL},
    {"type", (PyCFunction)(void (*)(void))m_type, METH_VARARGS | METH_KEYWORDS, NULL},
    {"clone", (PyCFunction)(void (*)(void))m_clone, METH_VARARGS | METH_KEYWORDS, NULL},
    {"contiguous", (PyCFunction)(void (*)(void))m_contiguous, METH_VARARGS | METH_KEYWORDS, NULL},
    {"detach", m_detach, METH_NOARGS, NULL},
    {"detach_", m_detach_, METH_NOARGS, NULL},
    {"cpu", m_cpu, METH_NOARGS, NULL},
    {"untyped_storage", m_untyped_storage, METH_NOARGS,
     "the Storage (shared by every view; ._version, .data_ptr(), .nbytes())"},
    {"requires_grad_", (PyCFunction)(void (*)(void))m_requires_grad_, METH_VARARGS | METH_KEYWORDS, NULL},
    {"copy_", (PyCFunction)(void (*)(void))m_copy_, METH_VARARGS | METH_KEYWORDS, NULL},
    {"fill_", m_fill_, METH_O, NULL},
    {"zero_", m_zero_, METH_NOARGS, NULL},
    {"_make_subclass", (PyCFunction)(void (*)(void))m_make_subclass, METH_VARARGS | METH_KEYWORDS | METH_STATIC, NULL},
    {"__reduce_ex__", m_reduce_ex, METH_O, NULL},
    {NULL},
};

PyTypeObject StaxTensor_TypeObj = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorplay.Tensor",
    .tp_basicsize = sizeof(StaxTensor),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "tensorplay.Tensor: a strided view of a NumPy-owned storage.",
    .tp_new = tensor_new,
    .tp_dealloc = tensor_dealloc,
    .tp_traverse = tensor_traverse,
    .tp_clear = tensor_clear,
    .tp_hash = tensor_hash,
    .tp_richcompare = stax_tramp_richcompare,
    .tp_repr = tensor_repr,
    .tp_as_number = &tensor_as_number,
    .tp_as_sequence = &tensor_as_sequence,
    .tp_as_mapping = &tensor_as_mapping,
    .tp_iter = tensor_iter,
    .tp_getset = tensor_getset,
    .tp_methods = tensor_methods,
    .tp_dictoffset = offsetof(StaxTensor, dict),
    .tp_weaklistoffset = offsetof(StaxTensor, weakreflist),
};

/* ---- module functions ------------------------------------------------ */

static PyObject *
py_from_numpy(PyObject *self, PyObject *arr)
{
    return (PyObject *)stax_tensor_from_array(arr);
}

static PyObject *
py_set_repr_hook(PyObject *self, PyObject *fn)
{
    Py_XSETREF(stax_repr_hook, fn == Py_None ? NULL : Py_NewRef(fn));
    Py_RETURN_NONE;
}

/* _tensor_install(name, obj): put a Python-level method/property on
 * Tensor (used by tensorplay/_tensor.py for its Python-side helpers). */
static PyObject *
py_tensor_install(PyObject *self, PyObject *args)
{
    PyObject *name, *obj;
    if (!PyArg_ParseTuple(args, "UO:_tensor_install", &name, &obj)) {
        return NULL;
    }
    if (PyDict_SetItem(StaxTensor_TypeObj.tp_dict, name, obj) < 0) {
        return NULL;
    }
    PyType_Modified(&StaxTensor_TypeObj);
    Py_RETURN_NONE;
}

static PyObject *
py_is_tensor(PyObject *self, PyObject *o)
{
    return PyBool_FromLong(StaxTensor_Check(o));
}

static PyObject *
py_empty_strided(PyObject *self, PyObject *args)
{
    PyObject *size, *stride, *dto;
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    int n1, n2;
    stax_dtype_t dt;
    if (!PyArg_ParseTuple(args, "OOO", &size, &stride, &dto)
        || stax_parse_int_seq(size, sz, &n1, "size") < 0
        || stax_parse_int_seq(stride, st, &n2, "stride") < 0
        || stax_dtype_from_object(dto, &dt) < 0) {
        return NULL;
    }
    if (n1 != n2) {
        PyErr_SetString(PyExc_RuntimeError, "mismatch in length of strides "
                        "and shape");
        return NULL;
    }
    int64_t extent = 1;
    for (int i = 0; i < n1; i++) {
        if (sz[i] == 0) {
            extent = 0;
            break;
        }
        extent += (sz[i] - 1) * st[i];
    }
    StaxTensor *base = stax_tensor_empty(1, &extent, dt);
    if (base == NULL) {
        return NULL;
    }
    StaxTensor *t = stax_tensor_view(base, n1, sz, st, 0);
    Py_DECREF(base);
    return (PyObject *)t;
}

static PyMethodDef tensor_module_methods[] = {
    {"from_numpy", py_from_numpy, METH_O, NULL},
    {"_set_repr_hook", py_set_repr_hook, METH_O, NULL},
    {"_tensor_install", py_tensor_install, METH_VARARGS, NULL},
    {"is_tensor", py_is_tensor, METH_O, NULL},
    {"empty_strided", py_empty_strided, METH_VARARGS, NULL},
    {NULL},
};

int
stax_tensor_type_init(PyObject *m)
{
    if (PyType_Ready(&StaxStorage_TypeObj) < 0
        || PyType_Ready(&StaxTensor_TypeObj) < 0) {
        return -1;
    }
    StaxTensor_Type = &StaxTensor_TypeObj;
    StaxStorage_Type = &StaxStorage_TypeObj;
    /* make NumPy defer binary ops to Tensor */
    PyObject *prio = PyFloat_FromDouble(1000.0);
    if (prio == NULL
        || PyDict_SetItemString(StaxTensor_TypeObj.tp_dict,
                                "__array_priority__", prio) < 0) {
        Py_XDECREF(prio);
        return -1;
    }
    Py_DECREF(prio);
    PyType_Modified(&StaxTensor_TypeObj);
    if (PyModule_AddObjectRef(m, "Tensor", (PyObject *)&StaxTensor_TypeObj) < 0
        || PyModule_AddObjectRef(m, "Storage",
                                 (PyObject *)&StaxStorage_TypeObj) < 0
        || PyModule_AddFunctions(m, tensor_module_methods) < 0) {
        return -1;
    }
    return 0;
}

/* ---- public wrappers (tensor.h) ----------------------------------- */

PyObject *
stax_tensor_item_object(StaxTensor *t)
{
    return stax_tensor_item(t);
}

PyObject *
stax_tensor_size_object(int ndim, const int64_t *sizes)
{
    return stax_size_new(ndim, sizes);
}

int
stax_tensor_wrap_dim(int64_t dim, int ndim, int *out)
{
    return stax_wrap_dim(dim, ndim, out);
}

int
stax_tensor_copy_from(StaxTensor *t, PyObject *src)
{
    PyObject *r = stax_tensor_copy_into(t, src);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    stax_tensor_bump_version(t);
    return 0;
}

StaxTensor *
stax_tensor_to(StaxTensor *t, stax_dtype_t dt, int copy)
{
    return stax_tensor_to_dtype(t, dt, copy);
}
