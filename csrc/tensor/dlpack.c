/* DLPack (the array interchange protocol, unversioned "dltensor" capsules):
 * Tensor.__dlpack__ / __dlpack_device__ export a tensor of either device
 * without a copy; tensorplay.from_dlpack(obj) imports any producer's
 * (NumPy, torch, CuPy, JAX, a capsule) without a copy, the storage keeping
 * the producer's buffer alive through the capsule's deleter.
 *
 * Streams (the protocol's rule): a consumer on CUDA passes the stream it
 * will use; the exporter makes that stream see every write queued so far.
 * tensorplay has one blocking stream per device, so its export synchronizes
 * that stream (any consumer stream then sees the data), and its import asks
 * the producer for the legacy default stream (1), with which a blocking
 * stream is ordered. */
#include "tensor/tensor_internal.h"
#include "device/device.h"

#include <stdlib.h>

enum { DL_CPU = 1, DL_CUDA = 2 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_BOOL = 6 };

typedef struct {
    int32_t device_type;
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

static const DLDataType dl_types[STAX_NUM_DTYPES] = {
    [STAX_BOOL] = {DL_BOOL, 8, 1},   [STAX_UINT8] = {DL_UINT, 8, 1},
    [STAX_INT8] = {DL_INT, 8, 1},    [STAX_INT16] = {DL_INT, 16, 1},
    [STAX_INT32] = {DL_INT, 32, 1},  [STAX_INT64] = {DL_INT, 64, 1},
    [STAX_FLOAT16] = {DL_FLOAT, 16, 1}, [STAX_FLOAT32] = {DL_FLOAT, 32, 1},
    [STAX_FLOAT64] = {DL_FLOAT, 64, 1}, [STAX_BFLOAT16] = {DL_BFLOAT, 16, 1},
};

/* ---- export ------------------------------------------------------------ */

typedef struct {
    DLManagedTensor m;
    PyObject *tensor;                /* strong */
    int64_t dims[2 * STAX_MAX_DIMS];
} export_t;

static void
export_deleter(DLManagedTensor *m)
{
    export_t *e = (export_t *)m;
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF(e->tensor);
    PyGILState_Release(g);
    free(e);
}

static void
export_capsule_dtor(PyObject *cap)
{
    /* a consumer renames the capsule ("used_dltensor") and owns it then */
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        if (m != NULL && m->deleter != NULL) {
            m->deleter(m);
        }
    }
    PyErr_Clear();
}

static PyObject *
m_dlpack(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy",
                             NULL};
    PyObject *stream = Py_None, *maxv = Py_None, *dldev = Py_None,
             *copy = Py_None, *cap;
    StaxTensor *t = (StaxTensor *)self;
    export_t *e;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO:__dlpack__", kwlist,
                                     &stream, &maxv, &dldev, &copy)) {
        return NULL;
    }
    if (copy == Py_True) {
        PyErr_SetString(PyExc_BufferError, "__dlpack__: copy=True is not "
                        "supported; export shares the tensor's memory");
        return NULL;
    }
    if (t->requires_grad) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Can't export tensors that require gradient, use "
                        "tensor.detach()");
        return NULL;
    }
    if (stax_tensor_is_cuda(t) && stream != Py_None) {
        long s = PyLong_Check(stream) ? PyLong_AsLong(stream) : 0;
        if (s == -1 && PyErr_Occurred()) {
            return NULL;
        }
        /* -1: the consumer asks for no synchronization */
        if (s != -1 && stax_cuda_synchronize() < 0) {
            return NULL;
        }
    }
    else if (stax_tensor_is_cuda(t) && stax_cuda_synchronize() < 0) {
        return NULL;
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return PyErr_NoMemory();
    }
    e->tensor = Py_NewRef(self);
    for (int d = 0; d < t->ndim; d++) {
        e->dims[d] = t->sizes[d];
        e->dims[STAX_MAX_DIMS + d] = t->strides[d];
    }
    e->m.dl_tensor.data = STAX_TENSOR_DATA(t);
    e->m.dl_tensor.device.device_type = stax_tensor_is_cuda(t) ? DL_CUDA
                                                               : DL_CPU;
    e->m.dl_tensor.device.device_id = 0;
    e->m.dl_tensor.ndim = t->ndim;
    e->m.dl_tensor.dtype = dl_types[t->dtype];
    e->m.dl_tensor.shape = e->dims;
    e->m.dl_tensor.strides = e->dims + STAX_MAX_DIMS;
    e->m.dl_tensor.byte_offset = 0;
    e->m.manager_ctx = e;
    e->m.deleter = export_deleter;
    cap = PyCapsule_New(&e->m, "dltensor", export_capsule_dtor);
    if (cap == NULL) {
        export_deleter(&e->m);
    }
    return cap;
}

static PyObject *
m_dlpack_device(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("(ii)", stax_tensor_is_cuda((StaxTensor *)self)
                                 ? DL_CUDA : DL_CPU, 0);
}

/* ---- import ------------------------------------------------------------ */

static void
import_capsule_dtor(PyObject *cap)
{
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "stax.dlpack");
    if (m != NULL && m->deleter != NULL) {
        m->deleter(m);
    }
    PyErr_Clear();
}

static PyObject *
from_capsule(PyObject *cap)
{
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    DLTensor *dl;
    stax_dtype_t dt = STAX_NUM_DTYPES;
    PyObject *owner;
    StaxStorage *st;
    StaxTensor *t;
    int64_t lo = 0, hi = 0, isz;
    int empty = 0;
    if (m == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "from_dlpack: expected a "
                        "'dltensor' capsule (a used one cannot be imported "
                        "twice)");
        return NULL;
    }
    dl = &m->dl_tensor;
    for (int i = 0; i < STAX_NUM_DTYPES; i++) {
        if (dl_types[i].code == dl->dtype.code
            && dl_types[i].bits == dl->dtype.bits && dl->dtype.lanes == 1) {
            dt = (stax_dtype_t)i;
        }
    }
    if (dt == STAX_NUM_DTYPES) {
        PyErr_Format(PyExc_TypeError, "from_dlpack: unsupported DLPack dtype "
                     "(code %d, bits %d, lanes %d)", dl->dtype.code,
                     dl->dtype.bits, dl->dtype.lanes);
        return NULL;
    }
    if (dl->device.device_type != DL_CPU
        && !(dl->device.device_type == DL_CUDA && dl->device.device_id == 0)) {
        PyErr_Format(PyExc_RuntimeError, "from_dlpack: unsupported device "
                     "(DLPack device type %d, id %d): tensorplay has cpu and "
                     "cuda:0", dl->device.device_type, dl->device.device_id);
        return NULL;
    }
    if (dl->device.device_type == DL_CUDA && stax_cuda_init() < 0) {
        return NULL;
    }
    if (dl->ndim < 0 || dl->ndim > STAX_MAX_DIMS) {
        PyErr_SetString(PyExc_RuntimeError, "from_dlpack: too many dims");
        return NULL;
    }
    isz = stax_dtype_itemsize(dt);
    for (int d = 0; d < dl->ndim; d++) {
        int64_t s = dl->strides ? dl->strides[d] : 0;
        if (dl->shape[d] == 0) {
            empty = 1;
        }
        if (s < 0) {
            PyErr_SetString(PyExc_RuntimeError, "from_dlpack: negative "
                            "strides are not supported");
            return NULL;
        }
        hi += (dl->shape[d] > 0 ? dl->shape[d] - 1 : 0) * s;
    }
    /* the capsule becomes the storage's owner: renamed as the protocol
     * says, the deleter runs when the storage dies */
    if (PyCapsule_SetName(cap, "used_dltensor") < 0) {
        return NULL;
    }
    owner = PyCapsule_New(m, "stax.dlpack", import_capsule_dtor);
    if (owner == NULL) {
        return NULL;
    }
    st = stax_storage_new(owner, (char *)dl->data + dl->byte_offset,
                          empty ? 0 : (hi - lo + 1) * isz,
                          dl->device.device_type == DL_CUDA ? STAX_DEV_CUDA : STAX_DEV_CPU);
    t = stax_tensor_on_storage(st, dt, dl->ndim, dl->shape, dl->strides);
    return (PyObject *)t;
}

static PyObject *
py_from_dlpack(PyObject *mod, PyObject *obj)
{
    PyObject *cap, *r;
    if (PyCapsule_CheckExact(obj)) {
        return from_capsule(obj);
    }
    if (StaxTensor_Check(obj)) {
        return Py_NewRef(obj);
    }
    PyObject *dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    if (dev == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "from_dlpack: expected an object "
                         "with __dlpack__ or a DLPack capsule, got %.100s",
                         Py_TYPE(obj)->tp_name);
        }
        return NULL;
    }
    long type = PyTuple_Check(dev) && PyTuple_GET_SIZE(dev) == 2
        ? PyLong_AsLong(PyTuple_GET_ITEM(dev, 0)) : -1;
    Py_DECREF(dev);
    if (type == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (type == DL_CUDA) {
        /* ordered before our blocking stream: the legacy default stream */
        PyObject *kw = Py_BuildValue("{si}", "stream", 1);
        PyObject *m = kw ? PyObject_GetAttrString(obj, "__dlpack__") : NULL;
        PyObject *e = m ? PyTuple_New(0) : NULL;
        cap = e ? PyObject_Call(m, e, kw) : NULL;
        Py_XDECREF(kw);
        Py_XDECREF(m);
        Py_XDECREF(e);
    }
    else {
        cap = PyObject_CallMethod(obj, "__dlpack__", NULL);
    }
    if (cap == NULL) {
        return NULL;
    }
    r = from_capsule(cap);
    Py_DECREF(cap);
    return r;
}

static PyMethodDef dlpack_tensor_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))m_dlpack,
     METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, "
     "copy=None) -> a 'dltensor' capsule sharing this tensor's memory"},
    {"__dlpack_device__", m_dlpack_device, METH_NOARGS,
     "__dlpack_device__() -> (1, 0) on the cpu, (2, 0) on cuda:0"},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef dlpack_module_methods[] = {
    {"from_dlpack", py_from_dlpack, METH_O,
     "from_dlpack(ext_tensor) -> Tensor\n\nA tensor sharing the memory of "
     "any object with __dlpack__ (NumPy, torch, CuPy, JAX, ...) or of a "
     "DLPack capsule: no copy; cpu and cuda:0 buffers. TypeError for other "
     "objects or dtypes, RuntimeError for other devices."},
    {NULL, NULL, 0, NULL},
};

int
stax_tensor_dlpack_init(PyObject *m)
{
    PyObject *d = StaxTensor_Type->tp_dict;
    for (PyMethodDef *md = dlpack_tensor_methods; md->ml_name; md++) {
        PyObject *f = PyDescr_NewMethod(StaxTensor_Type, md);
        if (f == NULL || PyDict_SetItemString(d, md->ml_name, f) < 0) {
            Py_XDECREF(f);
            return -1;
        }
        Py_DECREF(f);
    }
    PyType_Modified(StaxTensor_Type);
    return PyModule_AddFunctions(m, dlpack_module_methods);
}
