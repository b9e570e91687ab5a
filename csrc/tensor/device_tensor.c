/* Tensors on the CUDA device: storages whose bytes are a block of the
 * device room's caching allocator, the device objects, parsing device=
 * arguments, and the copies between host and device (no autograd here:
 * Tensor.to records its own history above this). A host read of a CUDA
 * tensor (item, repr, tolist, .cpu()) copies the bytes it can reach and
 * synchronizes the device's stream first. */
#include "tensor/tensor_internal.h"
#include "tensor/stax_numpy.h"
#include "device/device.h"

static PyObject *cuda_device = NULL;   /* device(type='cuda', index=0) */

PyObject *
stax_device_object(int device)
{
    if (device == STAX_DEV_CUDA) {
        if (cuda_device == NULL) {
            cuda_device = PyObject_CallFunction(
                (PyObject *)&StaxDevice_TypeObj, "si", "cuda", 0);
        }
        return cuda_device;    /* borrowed; NULL + exception on failure */
    }
    return stax_cpu_device();
}

int
stax_parse_device(PyObject *o, int *device)
{
    PyObject *s = NULL;
    const char *c;
    int rc = -1;
    if (o == NULL || o == Py_None) {
        return 0;               /* keep *device */
    }
    if (PyLong_Check(o) && !PyBool_Check(o)) {
        long i = PyLong_AsLong(o);
        if (i == -1 && PyErr_Occurred()) {
            return -1;
        }
        s = PyUnicode_FromFormat("cuda:%ld", i);
    }
    else if (PyUnicode_Check(o) || Py_IS_TYPE(o, &StaxDevice_TypeObj)) {
        s = PyObject_Str(o);
    }
    else {
        PyErr_Format(PyExc_TypeError, "expected a device (str, "
                     "tensorplay.device or int), got %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if (s == NULL || (c = PyUnicode_AsUTF8(s)) == NULL) {
        goto done;
    }
    if (strcmp(c, "cpu") == 0 || strcmp(c, "cpu:0") == 0) {
        *device = STAX_DEV_CPU;
        rc = 0;
    }
    else if (strcmp(c, "cuda") == 0 || strcmp(c, "cuda:0") == 0) {
        if (stax_cuda_init() < 0) {
            goto done;
        }
        *device = STAX_DEV_CUDA;
        rc = 0;
    }
    else if (strncmp(c, "cuda:", 5) == 0) {
        if (stax_cuda_init() == 0) {
            PyErr_Format(PyExc_RuntimeError, "CUDA error: invalid device "
                         "ordinal (%s: tensorplay uses device 0 only)", c);
        }
    }
    else {
        PyErr_Format(PyExc_RuntimeError, "Expected one of cpu, cuda device "
                     "type at start of device string: %s", c);
    }
done:
    Py_XDECREF(s);
    return rc;
}

const char *
stax_tensor_device_str(const StaxTensor *t)
{
    return t->storage->device == STAX_DEV_CUDA ? "cuda:0" : "cpu";
}

/* a storage of n bytes on the device (owner: the allocator's block) */
static StaxStorage *
cuda_storage(int64_t nbytes)
{
    stax_cuptr p = 0;
    PyObject *blk = stax_cuda_block_new((size_t)nbytes, &p);
    if (blk == NULL) {
        return NULL;
    }
    return stax_storage_new(blk, (char *)(uintptr_t)p, nbytes, STAX_DEV_CUDA);
}

StaxTensor *
stax_tensor_empty_on(int ndim, const int64_t *sizes, stax_dtype_t dt,
                     int device)
{
    if (device != STAX_DEV_CUDA) {
        return stax_tensor_empty(ndim, sizes, dt);
    }
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (sizes[i] < 0) {
            PyErr_Format(PyExc_RuntimeError, "Trying to create tensor with "
                         "negative dimension %lld: [%lld]",
                         (long long)sizes[i], (long long)sizes[i]);
            return NULL;
        }
        if (__builtin_mul_overflow(n, sizes[i], &n) || n > ((int64_t)1 << 60)) {
            PyErr_SetString(PyExc_RuntimeError, "Storage size calculation "
                            "overflowed");
            return NULL;
        }
    }
    return stax_tensor_on_storage(cuda_storage(n * stax_dtype_itemsize(dt)), dt, ndim, sizes,
                                  NULL);
}

/* elements [lo, hi] of the storage that t can reach (hi < lo: none) */
static void
reach(const StaxTensor *t, int64_t *lo, int64_t *hi)
{
    *lo = t->offset;
    *hi = t->offset;
    for (int d = 0; d < t->ndim; d++) {
        if (t->sizes[d] == 0) {
            *hi = *lo - 1;
            return;
        }
        *hi += t->strides[d] * (t->sizes[d] - 1);
    }
}

StaxTensor *
stax_tensor_host_span(StaxTensor *t)
{
    int64_t lo, hi, n;
    int isz = stax_dtype_itemsize(t->dtype);
    StaxTensor *base, *v;
    reach(t, &lo, &hi);
    if (hi < lo) {
        return stax_tensor_empty(t->ndim, t->sizes, t->dtype);
    }
    n = hi - lo + 1;
    base = stax_tensor_empty(1, &n, t->dtype);
    if (base == NULL) {
        return NULL;
    }
    if (stax_cuda_d2h(base->storage->data,
                      (stax_cuptr)(uintptr_t)(t->storage->data + lo * isz),
                      (size_t)(n * isz)) < 0) {
        Py_DECREF(base);
        return NULL;
    }
    v = stax_tensor_view(base, t->ndim, t->sizes, t->strides, 0);
    Py_DECREF(base);
    return v;
}

int
stax_tensor_upload_span(StaxTensor *t, StaxTensor *host)
{
    int64_t lo, hi;
    int isz = stax_dtype_itemsize(t->dtype);
    reach(t, &lo, &hi);
    if (hi < lo) {
        return 0;
    }
    return stax_cuda_h2d((stax_cuptr)(uintptr_t)(t->storage->data + lo * isz),
                         host->storage->data + host->offset * isz,
                         (size_t)((hi - lo + 1) * isz));
}

/* torch's preserve_format across devices: a dense tensor keeps its
 * strides (its block of numel elements travels as is), any other a dense
 * layout in its stride order */
StaxTensor *
stax_tensor_to_device(StaxTensor *t, int device)
{
    int isz = stax_dtype_itemsize(t->dtype);
    if (t->storage->device == device) {
        return (StaxTensor *)Py_NewRef(t);
    }
    if (device == STAX_DEV_CPU) {
        StaxTensor *h = stax_tensor_host_span(t), *c;
        if (h == NULL || stax_tensor_is_dense(h)) {
            return h;
        }
        c = stax_tensor_copy_as(h, h->dtype, STAX_MF_PRESERVE);
        Py_DECREF(h);
        return c;
    }
    StaxTensor *src = stax_tensor_is_dense(t)
        ? (StaxTensor *)Py_NewRef(t)
        : stax_tensor_copy_as(t, t->dtype, STAX_MF_PRESERVE);
    StaxTensor *r = NULL;
    if (src == NULL) {
        return NULL;
    }
    /* no grad flags on the copy: the caller records history */
    r = stax_tensor_empty_strided_on(src->ndim, src->sizes, src->strides,
                                     src->dtype, STAX_DEV_CUDA);
    if (r != NULL
        && stax_cuda_h2d((stax_cuptr)(uintptr_t)r->storage->data,
                         STAX_TENSOR_DATA(src),
                         (size_t)(stax_tensor_numel(t) * isz)) < 0) {
        Py_CLEAR(r);
    }
    Py_DECREF(src);
    return r;
}

/* a CUDA copy of a host result, or the host result itself when t is a
 * host tensor (helpers of the host round trips below) */
static PyObject *
back_to(PyObject *r, int device)
{
    StaxTensor *c;
    if (r == NULL || device != STAX_DEV_CUDA || !StaxTensor_Check(r)) {
        return r;
    }
    c = stax_tensor_to_device((StaxTensor *)r, STAX_DEV_CUDA);
    if (c != NULL) {
        c->requires_grad = ((StaxTensor *)r)->requires_grad;
        c->nonleaf = ((StaxTensor *)r)->nonleaf;
    }
    Py_DECREF(r);
    return (PyObject *)c;
}

PyObject *
stax_tensor_cuda_item(StaxTensor *t)
{
    StaxTensor *h = stax_tensor_host_span(t);
    PyObject *r;
    if (h == NULL) {
        return NULL;
    }
    r = stax_tensor_item(h);
    Py_DECREF(h);
    return r;
}

/* tensorplay.cuda._device_op(what, t, key, value): "getitem" / "setitem"
 * with an advanced key (boolean masks, integer index tensors), "to" (key:
 * the dtype), "copy" (key: the source) done by kernels on the device;
 * NotImplemented where it does not cover the arguments, and then the host
 * copy below serves them. */
static PyObject *
on_device(const char *what, StaxTensor *t, PyObject *key, PyObject *value)
{
    PyObject *h = stax_py_registered(STAX_PY_CUDA_DEVICE_OP);
    if (h == NULL) {            /* _C alone, without the package: the host */
        PyErr_Clear();
        return Py_NewRef(Py_NotImplemented);
    }
    return PyObject_CallFunction(h, "sOOO", what, (PyObject *)t, key,
                                 value != NULL ? value : Py_None);
}

/* dst <- src where either lives on the device: through a host copy of
 * dst's reachable bytes, written back whole (elements dst does not view
 * inside that span are written with what they held) */
PyObject *
stax_tensor_cuda_copy_into(StaxTensor *dst, PyObject *src)
{
    PyObject *s = NULL, *ok = NULL;
    StaxTensor *h = NULL;
    if (StaxTensor_Check(src) && ((StaxTensor *)src)->storage->device
                                 == STAX_DEV_CUDA) {
        StaxTensor *st = (StaxTensor *)src;
        /* device to device, same layout: one copy on the stream */
        if (dst->storage->device == STAX_DEV_CUDA && st->dtype == dst->dtype
            && st->ndim == dst->ndim
            && memcmp(st->sizes, dst->sizes, sizeof(int64_t) * dst->ndim) == 0
            && ((stax_tensor_is_contiguous(st) && stax_tensor_is_contiguous(dst))
                || (memcmp(st->strides, dst->strides,
                           sizeof(int64_t) * dst->ndim) == 0
                    && stax_tensor_is_dense(st)))) {
            /* one dense block in the same layout: its first element is
             * its lowest address */
            int isz = stax_dtype_itemsize(dst->dtype);
            if (stax_cuda_d2d((stax_cuptr)(uintptr_t)STAX_TENSOR_DATA(dst),
                              (stax_cuptr)(uintptr_t)STAX_TENSOR_DATA(st),
                              (size_t)(stax_tensor_numel(dst) * isz)) < 0) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
    }
    if (dst->storage->device == STAX_DEV_CUDA) {
        PyObject *r = on_device("copy", dst, src, NULL);
        if (r != Py_NotImplemented) {
            return r;
        }
        Py_DECREF(r);
    }
    if (StaxTensor_Check(src) && ((StaxTensor *)src)->storage->device
                                 == STAX_DEV_CUDA) {
        s = (PyObject *)stax_tensor_to_device((StaxTensor *)src, STAX_DEV_CPU);
    }
    else {
        s = Py_NewRef(src);
    }
    if (s == NULL) {
        return NULL;
    }
    if (dst->storage->device != STAX_DEV_CUDA) {
        ok = stax_tensor_copy_into(dst, s);
        Py_DECREF(s);
        return ok;
    }
    h = stax_tensor_host_span(dst);
    if (h != NULL) {
        ok = stax_tensor_copy_into(h, s);
    }
    if (ok != NULL && stax_tensor_upload_span(dst, h) < 0) {
        Py_CLEAR(ok);
    }
    Py_XDECREF(h);
    Py_DECREF(s);
    return ok;
}

/* dtype conversion of a CUDA tensor (or a copy): a kernel on the device
 * where tensorplay.cuda._device_op has one, else a host round trip */
StaxTensor *
stax_tensor_cuda_to_dtype(StaxTensor *t, stax_dtype_t dt, int copy)
{
    StaxTensor *h, *r;
    PyObject *d;
    if (dt == t->dtype && !copy) {
        return (StaxTensor *)Py_NewRef(t);
    }
    d = on_device("to", t, stax_dtype_object(dt), NULL);
    if (d == NULL) {
        return NULL;
    }
    if (d != Py_NotImplemented) {
        if (!StaxTensor_Check(d)) {
            Py_DECREF(d);
            PyErr_SetString(PyExc_TypeError, "tensorplay.cuda._device_op: "
                            "'to' did not return a tensor");
            return NULL;
        }
        if (t->requires_grad && stax_dtype_is_floating(dt)
            && stax_grad_enabled()) {
            stax_tensor_set_result_requires_grad((StaxTensor *)d, 1);
        }
        return (StaxTensor *)d;
    }
    Py_DECREF(d);
    h = stax_tensor_to_device(t, STAX_DEV_CPU);
    if (h == NULL) {
        return NULL;
    }
    h->requires_grad = t->requires_grad;
    r = stax_tensor_to_dtype(h, dt, 1);
    Py_DECREF(h);
    return (StaxTensor *)back_to((PyObject *)r, STAX_DEV_CUDA);
}

/* an index key with its CUDA tensors (alone or in a tuple) copied to the
 * host; new reference */
static PyObject *
key_to_host(PyObject *key)
{
    if (StaxTensor_Check(key) && stax_tensor_is_cuda((StaxTensor *)key)) {
        return (PyObject *)stax_tensor_to_device((StaxTensor *)key,
                                                 STAX_DEV_CPU);
    }
    if (PyTuple_Check(key)) {
        Py_ssize_t n = PyTuple_GET_SIZE(key);
        PyObject *r = PyTuple_New(n);
        for (Py_ssize_t i = 0; r != NULL && i < n; i++) {
            PyObject *e = key_to_host(PyTuple_GET_ITEM(key, i));
            if (e == NULL) {
                Py_CLEAR(r);
                break;
            }
            PyTuple_SET_ITEM(r, i, e);
        }
        return r;
    }
    return Py_NewRef(key);
}

/* getitem / setitem with a key that copies (masks, integer tensors) on a
 * CUDA tensor: on the host copy of its reachable bytes */

PyObject *
stax_tensor_cuda_getitem(StaxTensor *t, PyObject *key)
{
    StaxTensor *h;
    PyObject *k, *r = on_device("getitem", t, key, NULL);
    if (r != Py_NotImplemented) {
        if (r != NULL && StaxTensor_Check(r) && t->requires_grad
            && stax_grad_enabled()) {
            stax_tensor_set_result_requires_grad((StaxTensor *)r, 1);
        }
        return r;
    }
    Py_DECREF(r);
    h = stax_tensor_host_span(t);
    if (h == NULL) {
        return NULL;
    }
    h->requires_grad = t->requires_grad;
    k = key_to_host(key);
    if (k == NULL) {
        Py_DECREF(h);
        return NULL;
    }
    r = stax_tensor_getitem(h, k);
    Py_DECREF(k);
    if (r != NULL && StaxTensor_Check(r)
        && ((StaxTensor *)r)->storage == h->storage) {
        /* a view of the host copy: the same view of the device storage */
        StaxTensor *v = (StaxTensor *)r;
        StaxTensor *d = stax_tensor_view(t, v->ndim, v->sizes, v->strides,
                                         t->offset + v->offset - h->offset);
        Py_DECREF(r);
        Py_DECREF(h);
        return (PyObject *)d;
    }
    Py_DECREF(h);
    return back_to(r, STAX_DEV_CUDA);
}

int
stax_tensor_cuda_setitem(StaxTensor *t, PyObject *key, PyObject *value)
{
    StaxTensor *h;
    PyObject *k = NULL, *v = NULL;
    int rc = -1;
    PyObject *r;
    stax_tensor_will_write(t);
    r = on_device("setitem", t, key, value);
    if (r == NULL) {
        return -1;
    }
    if (r != Py_NotImplemented) {
        Py_DECREF(r);
        stax_tensor_bump_version(t);
        return 0;
    }
    Py_DECREF(r);
    h = stax_tensor_host_span(t);
    if (h == NULL) {
        return -1;
    }
    k = key_to_host(key);
    v = StaxTensor_Check(value) && ((StaxTensor *)value)->storage->device
                                   == STAX_DEV_CUDA
        ? (PyObject *)stax_tensor_to_device((StaxTensor *)value, STAX_DEV_CPU)
        : Py_NewRef(value);
    if (k != NULL && v != NULL && stax_tensor_setitem(h, k, v) == 0
        && stax_tensor_upload_span(t, h) == 0) {
        stax_tensor_bump_version(t);
        rc = 0;
    }
    Py_XDECREF(k);
    Py_XDECREF(v);
    Py_DECREF(h);
    return rc;
}

/* zero-filled CUDA tensor (one memset on the stream) */
StaxTensor *
stax_tensor_zeros_on(int ndim, const int64_t *sizes, stax_dtype_t dt,
                     int device)
{
    StaxTensor *t = stax_tensor_empty_on(ndim, sizes, dt, device);
    if (t == NULL) {
        return NULL;
    }
    if (device == STAX_DEV_CUDA) {
        if (stax_cuda_memset((stax_cuptr)(uintptr_t)t->storage->data, 0,
                             (size_t)t->storage->nbytes) < 0) {
            Py_DECREF(t);
            return NULL;
        }
    }
    else {
        memset(STAX_TENSOR_DATA(t), 0, (size_t)t->storage->nbytes);
    }
    return t;
}

/* ---- Python functions ----------------------------------------------- */

static PyObject *
py_to_device(PyObject *m, PyObject *args)
{
    PyObject *t, *dev;
    int device = STAX_DEV_CPU;
    if (!PyArg_ParseTuple(args, "O!O:_to_device", &StaxTensor_TypeObj, &t,
                          &dev)
        || stax_parse_device(dev, &device) < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_to_device((StaxTensor *)t, device);
}

static PyObject *
py_host_span(PyObject *m, PyObject *t)
{
    if (!StaxTensor_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "_host_span expects a Tensor");
        return NULL;
    }
    if (((StaxTensor *)t)->storage->device != STAX_DEV_CUDA) {
        return Py_NewRef(t);
    }
    return (PyObject *)stax_tensor_host_span((StaxTensor *)t);
}

static PyObject *
py_upload_span(PyObject *m, PyObject *args)
{
    PyObject *t, *h;
    if (!PyArg_ParseTuple(args, "O!O!:_upload_span", &StaxTensor_TypeObj, &t,
                          &StaxTensor_TypeObj, &h)) {
        return NULL;
    }
    if (((StaxTensor *)t)->storage->device == STAX_DEV_CUDA
        && stax_tensor_upload_span((StaxTensor *)t, (StaxTensor *)h) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
py_empty_on(PyObject *m, PyObject *args)
{
    PyObject *size, *dtype, *dev;
    int64_t sizes[STAX_MAX_DIMS];
    int nd = 0, device = STAX_DEV_CPU, zero = 0;
    stax_dtype_t dt;
    if (!PyArg_ParseTuple(args, "OOO|p:_empty_on", &size, &dtype, &dev, &zero)
        || stax_parse_int_seq(size, sizes, &nd, "size") < 0
        || stax_dtype_from_object(dtype, &dt) < 0
        || stax_parse_device(dev, &device) < 0) {
        return NULL;
    }
    return (PyObject *)(zero ? stax_tensor_zeros_on(nd, sizes, dt, device)
                             : stax_tensor_empty_on(nd, sizes, dt, device));
}

static PyObject *
py_parse_device(PyObject *m, PyObject *dev)
{
    int device = STAX_DEV_CPU;
    PyObject *r;
    if (stax_parse_device(dev, &device) < 0) {
        return NULL;
    }
    r = stax_device_object(device);
    return r ? Py_NewRef(r) : NULL;
}

static PyMethodDef device_tensor_methods[] = {
    {"_to_device", py_to_device, METH_VARARGS,
     "_to_device(t, device) -> t itself or a contiguous copy on device "
     "(no autograd history; Tensor.to records it)."},
    {"_host_span", py_host_span, METH_O,
     "_host_span(t) -> a host tensor with t's sizes and strides viewing a "
     "host copy of the bytes t reaches (t itself for a host tensor)."},
    {"_upload_span", py_upload_span, METH_VARARGS,
     "_upload_span(t, host): write a _host_span(t) copy back to t's device "
     "storage."},
    {"_empty_on", py_empty_on, METH_VARARGS,
     "_empty_on(size, dtype, device, zero=False) -> a new contiguous tensor."},
    {"_parse_device", py_parse_device, METH_O,
     "_parse_device(device) -> tensorplay.device (cpu or cuda:0); "
     "RuntimeError('CUDA is not available: ...') without a GPU."},
    {NULL, NULL, 0, NULL},
};

int
stax_tensor_device_init(PyObject *m)
{
    return PyModule_AddFunctions(m, device_tensor_methods);
}
