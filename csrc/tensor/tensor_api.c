/* The tensor room's C API on tensors: half precision conversions, new
 * tensors on fresh storages, views, construction from/to NumPy without
 * copies, copies with broadcasting (copy_into), dtype conversions, item,
 * and the public wrappers declared in tensor.h. */
#include "tensor/tensor_internal.h"
#include "tensor/stax_numpy.h"
#include <structmember.h>

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

/* creation order of storages (StaxStorage.serial) */
static uint64_t storage_serial = 1;
/* per thread: the trace room journals its own thread's writes */
static _Thread_local stax_write_hook_fn write_hook = NULL;
static _Thread_local stax_read_hook_fn read_hook = NULL;

void
stax_tensor_set_read_hook(stax_read_hook_fn fn)
{
    read_hook = fn;
}

uint64_t
stax_storage_serial_now(void)
{
    return storage_serial;
}

void
stax_tensor_set_write_hook(stax_write_hook_fn fn)
{
    write_hook = fn;
}

void
stax_tensor_will_write(StaxTensor *t)
{
    if (write_hook != NULL) {
        write_hook(t, 0);
    }
}

StaxStorage *
stax_storage_new(PyObject *owner, char *data, int64_t nbytes, int device)
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
    s->device = device;
    s->serial = storage_serial++;
    return s;
}

void
stax_contiguous_strides(int ndim, const int64_t *sizes, int64_t *strides)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= sizes[i] > 1 ? sizes[i] : 1;
    }
}

StaxTensor *
stax_tensor_on_storage(StaxStorage *st, stax_dtype_t dt, int ndim,
                       const int64_t *sizes, const int64_t *strides)
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
    if (ndim == 0) {
        return t;      /* a 0-d tensor: sizes may be NULL (memcpy of NULL is UB) */
    }
    memcpy(t->sizes, sizes, sizeof(int64_t) * (size_t)ndim);
    if (strides != NULL) {
        memcpy(t->strides, strides, sizeof(int64_t) * (size_t)ndim);
    }
    else {
        stax_contiguous_strides(ndim, sizes, t->strides);
    }
    return t;
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
    if (write_hook != NULL) {
        write_hook(t, 1);
    }
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
    return stax_tensor_on_storage(
        stax_storage_new(arr, PyArray_DATA((PyArrayObject *)arr),
                         (int64_t)n * stax_dtype_itemsize(dt), STAX_DEV_CPU),
        dt, ndim, sizes, NULL);
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
    int64_t extent = 1, sizes[STAX_MAX_DIMS], strides[STAX_MAX_DIMS];
    int empty = PyArray_SIZE(arr) == 0;
    for (int i = 0; i < ndim; i++) {
        npy_intp st = PyArray_STRIDE(arr, i);
        sizes[i] = PyArray_DIM(arr, i);
        strides[i] = st / isz;
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
    /* torch gives empty tensors contiguous strides */
    return stax_tensor_on_storage(
        stax_storage_new(Py_NewRef(obj), PyArray_DATA(arr),
                         empty ? 0 : extent * isz, STAX_DEV_CPU),
        dt, ndim, sizes, empty ? NULL : strides);
}

PyObject *
stax_tensor_as_array(StaxTensor *t)
{
    if (t->dtype == STAX_BFLOAT16) {
        PyErr_SetString(PyExc_TypeError, "Got unsupported ScalarType BFloat16");
        return NULL;
    }
    return stax_tensor_as_storage_array(t);
}

StaxTensor *
stax_tensor_from_storage_array(PyObject *ndarray, stax_dtype_t dt)
{
    if (dt != STAX_BFLOAT16) {
        StaxTensor *t = stax_tensor_from_array(ndarray);
        if (t != NULL && t->dtype != dt) {
            Py_DECREF(t);
            PyErr_Format(PyExc_SystemError, "storage array of dtype %s for "
                         "a %s tensor", stax_dtype_name(t->dtype),
                         stax_dtype_name(dt));
            return NULL;
        }
        return t;
    }
    if (!PyArray_Check(ndarray)
        || PyArray_TYPE((PyArrayObject *)ndarray) != NPY_UINT16) {
        PyErr_SetString(PyExc_SystemError,
                        "bfloat16 storage must be a uint16 array");
        return NULL;
    }
    /* wrap the bits as uint16 (int16 is the nearest stax dtype of that
     * size) and retag: sizes, strides and the storage are the same */
    PyObject *v = PyArray_View((PyArrayObject *)ndarray,
                               PyArray_DescrFromType(NPY_INT16), NULL);
    StaxTensor *t = v ? stax_tensor_from_array(v) : NULL;
    Py_XDECREF(v);
    if (t != NULL) {
        t->dtype = STAX_BFLOAT16;
    }
    return t;
}

PyObject *
stax_tensor_as_storage_array(StaxTensor *t)
{
    npy_intp dims[STAX_MAX_DIMS], strides[STAX_MAX_DIMS];
    if (read_hook != NULL) {
        read_hook(t);
    }
    if (stax_tensor_is_cuda(t)) {
        /* torch's words: no host view of device memory */
        PyErr_SetString(PyExc_TypeError,
                        "can't convert cuda:0 device type tensor to numpy. "
                        "Use Tensor.cpu() to copy the tensor to host memory "
                        "first.");
        return NULL;
    }
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

/* float32 values of an array of half-like bits (any strides), contiguous */
static PyObject *
half_like_bits_to_f32(PyObject *bits, stax_dtype_t dt)
{
    PyObject *c = PyArray_NewCopy((PyArrayObject *)bits, NPY_CORDER), *f;
    if (c == NULL) {
        return NULL;
    }
    f = PyArray_SimpleNew(PyArray_NDIM((PyArrayObject *)c),
                          PyArray_DIMS((PyArrayObject *)c), NPY_FLOAT32);
    if (f != NULL) {
        const uint16_t *in = PyArray_DATA((PyArrayObject *)c);
        float *out = PyArray_DATA((PyArrayObject *)f);
        npy_intp n = PyArray_SIZE((PyArrayObject *)c);
        if (dt == STAX_BFLOAT16) {      /* inline: the loop vectorizes */
            for (npy_intp i = 0; i < n; i++) {
                out[i] = stax_bf16_to_float(in[i]);
            }
        }
        else {
            for (npy_intp i = 0; i < n; i++) {
                out[i] = (float)stax_half_like_to_double(dt, in[i]);
            }
        }
    }
    Py_DECREF(c);
    return f;
}

/* half-like bits of a contiguous float32 array, rounded to nearest even */
static PyObject *
f32_to_half_like_bits(PyObject *f, stax_dtype_t dt)
{
    PyObject *b = PyArray_SimpleNew(PyArray_NDIM((PyArrayObject *)f),
                                    PyArray_DIMS((PyArrayObject *)f),
                                    NPY_UINT16);
    if (b != NULL) {
        const float *in = PyArray_DATA((PyArrayObject *)f);
        uint16_t *out = PyArray_DATA((PyArrayObject *)b);
        npy_intp n = PyArray_SIZE((PyArrayObject *)f);
        if (dt == STAX_BFLOAT16) {
            for (npy_intp i = 0; i < n; i++) {
                out[i] = stax_float_to_bf16(in[i]);
            }
        }
        else {
            for (npy_intp i = 0; i < n; i++) {
                out[i] = stax_double_to_half_like(dt, in[i]);
            }
        }
    }
    return b;
}

/* copy src (Tensor, array, scalar, nested list) into dst with broadcasting
 * and casting; does not bump the version. Returns None. */
PyObject *
stax_tensor_copy_into(StaxTensor *dst, PyObject *src)
{
    PyObject *darr = NULL, *sarr = NULL, *res = NULL, *tmp = NULL, *target;
    int sbf = StaxTensor_Check(src)
              && ((StaxTensor *)src)->dtype == STAX_BFLOAT16;
    stax_tensor_will_write(dst);
    if (stax_tensor_is_cuda(dst) || (StaxTensor_Check(src)
                                     && stax_tensor_is_cuda((StaxTensor *)src))) {
        return stax_tensor_cuda_copy_into(dst, src);
    }
    darr = stax_tensor_as_storage_array(dst);
    if (darr == NULL) {
        goto done;
    }
    target = darr;
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
        sarr = stax_tensor_as_storage_array(e);
        Py_DECREF(e);
    }
    else {
        sarr = PyArray_FromAny(src, NULL, 0, 0, 0, NULL);
    }
    if (sarr == NULL) {
        goto done;
    }
    if (sbf && dst->dtype != STAX_BFLOAT16) {
        /* bfloat16 values reach other dtypes as float32 (exact) */
        PyObject *f = half_like_bits_to_f32(sarr, STAX_BFLOAT16);
        Py_SETREF(sarr, f);
        if (sarr == NULL) {
            goto done;
        }
    }
    if (dst->dtype == STAX_BFLOAT16 && !sbf) {
        /* other dtypes reach bfloat16 through float32, rounded to nearest
         * even (c10's conversion: double -> float -> bfloat16) */
        npy_intp dims[STAX_MAX_DIMS];
        for (int i = 0; i < dst->ndim; i++) {
            dims[i] = dst->sizes[i];
        }
        tmp = PyArray_SimpleNew(dst->ndim, dims, NPY_FLOAT32);
        if (tmp == NULL) {
            goto done;
        }
        target = tmp;
    }
    if (PyArray_CopyInto((PyArrayObject *)target, (PyArrayObject *)sarr) < 0) {
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
    if (tmp != NULL) {
        PyObject *bits = f32_to_half_like_bits(tmp, STAX_BFLOAT16);
        int rc = bits ? PyArray_CopyInto((PyArrayObject *)darr,
                                         (PyArrayObject *)bits) : -1;
        Py_XDECREF(bits);
        if (rc < 0) {
            goto done;
        }
    }
    res = Py_NewRef(Py_None);
done:
    Py_XDECREF(darr);
    Py_XDECREF(sarr);
    Py_XDECREF(tmp);
    return res;
}

StaxTensor *
stax_tensor_to_dtype(StaxTensor *t, stax_dtype_t dt, int copy)
{
    if (dt == t->dtype && !copy) {
        return (StaxTensor *)Py_NewRef(t);
    }
    if (stax_tensor_is_cuda(t)) {
        return stax_tensor_cuda_to_dtype(t, dt, copy);
    }
    return stax_tensor_copy_as(t, dt, STAX_MF_CONTIGUOUS);
}

StaxTensor *
stax_tensor_copy_as(StaxTensor *t, stax_dtype_t dt, stax_memory_format mf)
{
    StaxTensor *r = stax_tensor_empty_like(t, dt, mf, t->storage->device);
    PyObject *ok;
    if (r == NULL) {
        return NULL;
    }
    ok = stax_tensor_copy_into(r, (PyObject *)t);
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

/* torch's guess of a tensor's memory format from its strides
 * (suggest_memory_format): channels-last when, walking C, the spatial dims
 * innermost first, then N, each stride reaches at least past the previous
 * dim (N111-like ambiguous cases stay contiguous) */
static int
strides_like_channels_last(const StaxTensor *t)
{
    static const int o4[] = {1, 3, 2, 0}, o5[] = {1, 4, 3, 2, 0};
    const int *order = t->ndim == 4 ? o4 : o5;
    int64_t min = 0;
    if ((t->ndim != 4 && t->ndim != 5) || t->strides[1] == 0) {
        return 0;
    }
    for (int i = 0; i < t->ndim; i++) {
        int d = order[i];
        if (t->sizes[d] == 0 || t->strides[d] < min
            || (d == 0 && min == t->strides[1])) {
            return 0;
        }
        min = t->strides[d] * (t->sizes[d] > 1 ? t->sizes[d] : 1);
    }
    return 1;
}

StaxTensor *
stax_tensor_to_format(StaxTensor *t, stax_dtype_t dt, int copy,
                      stax_memory_format mf)
{
    if (!copy && dt == t->dtype) {
        /* torch's to_will_alias: the tensor itself unless the format asked
         * for is not the one its strides suggest */
        int cl = strides_like_channels_last(t);
        stax_memory_format have = !cl ? STAX_MF_CONTIGUOUS
                                  : t->ndim == 4 ? STAX_MF_CHANNELS_LAST
                                                 : STAX_MF_CHANNELS_LAST_3D;
        if (mf == STAX_MF_PRESERVE || mf == have) {
            return (StaxTensor *)Py_NewRef(t);
        }
    }
    return stax_tensor_copy_as(t, dt, mf);
}

PyObject *
stax_tensor_item(StaxTensor *t)
{
    int64_t n = stax_tensor_numel(t);
    if (read_hook != NULL) {
        read_hook(t);
    }
    if (n != 1) {
        PyErr_Format(PyExc_RuntimeError,
                     "a Tensor with %lld elements cannot be converted to "
                     "Scalar", (long long)n);
        return NULL;
    }
    if (stax_tensor_is_cuda(t)) {
        return stax_tensor_cuda_item(t);
    }
    char *p = STAX_TENSOR_DATA(t);
    switch (t->dtype) {
    case STAX_BOOL: return PyBool_FromLong(*(npy_bool *)p != 0);
    case STAX_UINT8: return PyLong_FromLong(*(uint8_t *)p);
    case STAX_INT8: return PyLong_FromLong(*(int8_t *)p);
    case STAX_INT16: return PyLong_FromLong(*(int16_t *)p);
    case STAX_INT32: return PyLong_FromLong(*(int32_t *)p);
    case STAX_INT64: return PyLong_FromLongLong(*(int64_t *)p);
    case STAX_FLOAT16:
    case STAX_BFLOAT16:
        return PyFloat_FromDouble(stax_half_like_to_double(t->dtype, *(uint16_t *)p));
    case STAX_FLOAT32: return PyFloat_FromDouble(*(float *)p);
    case STAX_FLOAT64: return PyFloat_FromDouble(*(double *)p);
    default: break;
    }
    PyErr_SetString(PyExc_SystemError, "bad dtype");
    return NULL;
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
