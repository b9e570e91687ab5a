/* Tensor attributes and methods: the getters and setters (shape, dtype,
 * requires_grad, grad, data, T, ...) and the small methods every tensor
 * has (size, stride, numpy, to, the cast methods, clone, copy_, fill_,
 * ...), with the getset and method tables the Tensor type uses. */
#include "tensor/tensor_internal.h"
#include "tensor/stax_numpy.h"
#include <structmember.h>

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

const char *
stax_tensor_device_type(const StaxTensor *t)
{
    return t->storage->device == STAX_DEV_CUDA ? "cuda" : "cpu";
}

static PyObject *
get_device(PyObject *self, void *c)
{
    PyObject *d = stax_device_object(SELF->storage->device);
    return d ? Py_NewRef(d) : NULL;
}

static PyObject *
get_is_cuda(PyObject *self, void *c)
{
    return PyBool_FromLong(stax_tensor_is_cuda(SELF));
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
    if (SELF->nonleaf && !SELF->retains_grad && SELF->grad == NULL
        && PyErr_WarnEx(PyExc_UserWarning,
                        "The .grad attribute of a Tensor that is not a leaf "
                        "Tensor is being accessed. Its .grad attribute won't "
                        "be populated during autograd.backward(). If you "
                        "indeed want the .grad field to be populated for a "
                        "non-leaf Tensor, use .retain_grad() on the non-leaf "
                        "Tensor. If you access the non-leaf Tensor by "
                        "mistake, make sure you access the leaf Tensor "
                        "instead.", 1) < 0) {
        return NULL;
    }
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
get_grad_fn(PyObject *self, void *c)
{
    return Py_NewRef(SELF->grad_fn ? SELF->grad_fn : Py_None);
}

static PyObject *
get_output_nr(PyObject *self, void *c)
{
    return PyLong_FromLong(SELF->output_nr);
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
    if (v != NULL && !StaxTensor_Check(v)) {
        /* a stand-in (the tracer's proxy) says what t.data = v means */
        PyObject *m = PyObject_GetAttrString(v, "__tensor_set_data__"), *r;
        if (m == NULL) {
            PyErr_Clear();
        }
        else {
            r = PyObject_CallOneArg(m, self);
            Py_DECREF(m);
            Py_XDECREF(r);
            return r == NULL ? -1 : 0;
        }
    }
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

PyGetSetDef stax_tensor_getset[] = {
    {"shape", get_shape, NULL, NULL, NULL},
    {"dtype", get_dtype, NULL, NULL, NULL},
    {"device", get_device, NULL, NULL, NULL},
    {"ndim", get_ndim, NULL, NULL, NULL},
    {"_version", get_version, NULL, NULL, NULL},
    {"requires_grad", get_requires_grad, set_requires_grad, NULL, NULL},
    {"is_leaf", get_is_leaf, NULL, NULL, NULL},
    {"grad", get_grad, set_grad, NULL, NULL},
    {"grad_fn", get_grad_fn, NULL, NULL, NULL},
    {"output_nr", get_output_nr, NULL, NULL, NULL},
    {"_output_nr", get_output_nr, NULL, NULL, NULL},
    {"is_cuda", get_is_cuda, NULL, NULL, NULL},
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
    static char *kwlist[] = {"memory_format", NULL};
    PyObject *mfo = Py_None;
    stax_memory_format mf;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:is_contiguous", kwlist,
                                     &mfo)
        || stax_parse_memory_format(mfo, "is_contiguous", &mf) < 0) {
        return NULL;
    }
    return PyBool_FromLong(stax_tensor_is_contiguous_as(SELF, mf));
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
    if (SELF->requires_grad) {
        /* torch's __array__ is numpy(): np.asarray(w) of a parameter
         * raises, as w.numpy() does */
        PyErr_SetString(PyExc_RuntimeError,
                        "Can't call numpy() on Tensor that requires grad. Use "
                        "tensor.detach().numpy() instead.");
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
    if (stax_tensor_is_cuda(SELF)) {
        StaxTensor *h = stax_tensor_to_device(SELF, STAX_DEV_CPU);
        PyObject *r = h ? m_tolist((PyObject *)h, NULL) : NULL;
        Py_XDECREF(h);
        return r;
    }
    if (SELF->dtype == STAX_BFLOAT16) {
        /* Python floats of the exact values, through float32 */
        StaxTensor *f = stax_tensor_to_dtype(SELF, STAX_FLOAT32, 1);
        PyObject *r = f ? m_tolist((PyObject *)f, NULL) : NULL;
        Py_XDECREF(f);
        return r;
    }
    PyObject *arr = stax_tensor_as_array(SELF), *r;
    if (arr == NULL) {
        return NULL;
    }
    r = PyArray_ToList((PyArrayObject *)arr);
    Py_DECREF(arr);
    return r;
}

/* t moved to device: a copy with t's grad flags as a result of an op */
static PyObject *
move_to(StaxTensor *t, int device)
{
    StaxTensor *r = stax_tensor_to_device(t, device);
    if (r != NULL && r != t && t->requires_grad && stax_grad_enabled()) {
        stax_tensor_set_result_requires_grad(r, 1);
    }
    return (PyObject *)r;
}

/* t on another device as dtype dt laid out by mf (torch's _to_copy): the
 * move keeps t's layout (preserve_format), a new dtype or another format
 * is one more copy on the device */
static PyObject *
moved_as(StaxTensor *t, int device, stax_dtype_t dt, stax_memory_format mf)
{
    PyObject *moved = move_to(t, device);
    StaxTensor *m = (StaxTensor *)moved;
    int64_t st[STAX_MAX_DIMS];
    if (moved == NULL) {
        return NULL;
    }
    if (mf != STAX_MF_PRESERVE) {
        if (stax_layout_format_strides(m, mf, st) < 0) {
            Py_DECREF(moved);
            return NULL;
        }
        if (memcmp(st, m->strides, sizeof(int64_t) * (size_t)m->ndim) == 0) {
            mf = STAX_MF_PRESERVE;
        }
    }
    if (dt == t->dtype && mf == STAX_MF_PRESERVE) {
        return moved;
    }
    Py_SETREF(moved, (PyObject *)stax_tensor_copy_as(m, dt, mf));
    return moved;
}

static PyObject *
m_to(PyObject *self, PyObject *args, PyObject *kw)
{
    STAX_OVERRIDE_VARARGS("to");
    stax_dtype_t dt = SELF->dtype;
    stax_memory_format mf = STAX_MF_PRESERVE;
    int copy = 0, device = SELF->storage->device;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        if (StaxTensor_Check(a)) {
            dt = ((StaxTensor *)a)->dtype;
            device = ((StaxTensor *)a)->storage->device;
        }
        else if (PyUnicode_Check(a) || Py_IS_TYPE(a, &StaxDevice_TypeObj)) {
            stax_dtype_t tmp;
            if (PyUnicode_Check(a) && stax_dtype_from_object(a, &tmp) == 0) {
                dt = tmp;
                continue;
            }
            PyErr_Clear();
            if (stax_parse_device(a, &device) < 0) {
                return NULL;
            }
        }
        else if (PyBool_Check(a)) {
            continue;   /* non_blocking */
        }
        else if (PyLong_Check(a)) {
            if (stax_parse_device(a, &device) < 0) {
                return NULL;
            }
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
        if (stax_parse_memory_format(PyDict_GetItemString(kw, "memory_format"),
                                     "to", &mf) < 0) {
            return NULL;
        }
        v = PyDict_GetItemString(kw, "copy");
        if (v != NULL) {
            copy = PyObject_IsTrue(v);
        }
        v = PyDict_GetItemString(kw, "device");
        if (v != NULL && stax_parse_device(v, &device) < 0) {
            return NULL;
        }
    }
    if (device != SELF->storage->device) {
        return moved_as(SELF, device, dt, mf);
    }
    return (PyObject *)stax_tensor_to_format(SELF, dt, copy, mf);
}

static PyObject *
m_cuda(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"device", "non_blocking", "memory_format", NULL};
    PyObject *dev = Py_None, *nb = NULL, *mf = NULL;
    int device = STAX_DEV_CUDA;
    stax_memory_format fmt;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOO:cuda", kwlist, &dev, &nb,
                                     &mf)) {
        return NULL;
    }
    if (dev == Py_None) {
        dev = NULL;
        if (!stax_tensor_is_cuda(SELF)) {
            PyObject *s = PyUnicode_FromString("cuda");
            int rc = s ? stax_parse_device(s, &device) : -1;
            Py_XDECREF(s);
            if (rc < 0) {
                return NULL;
            }
        }
    }
    else if (stax_parse_device(dev, &device) < 0) {
        return NULL;
    }
    if (device != STAX_DEV_CUDA) {
        PyErr_Format(PyExc_RuntimeError, "Invalid device, must be cuda "
                     "device");
        return NULL;
    }
    if (stax_parse_memory_format(mf, "cuda", &fmt) < 0) {
        return NULL;
    }
    if (stax_tensor_is_cuda(SELF)) {
        return (PyObject *)stax_tensor_to_format(SELF, SELF->dtype, 0, fmt);
    }
    return moved_as(SELF, STAX_DEV_CUDA, SELF->dtype, fmt);
}

/* x.float(memory_format=torch.preserve_format) & co */
static PyObject *
cast_method(PyObject *self, PyObject *args, PyObject *kw, const char *name,
            stax_dtype_t dt)
{
    static char *kwlist[] = {"memory_format", NULL};
    PyObject *mfo = Py_None;
    stax_memory_format mf;
    if (!PyArg_ParseTupleAndKeywords(args, kw,
                                     "|$O", kwlist, &mfo)
        || stax_parse_memory_format(mfo, name, &mf) < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_to_format(SELF, dt, 0, mf);
}

#define CAST_METHOD(NAME, DT)                                           \
    static PyObject *                                                   \
    m_##NAME(PyObject *self, PyObject *args, PyObject *kw)              \
    {                                                                   \
        return cast_method(self, args, kw, #NAME, DT);                  \
    }
CAST_METHOD(float, STAX_FLOAT32)
CAST_METHOD(double, STAX_FLOAT64)
CAST_METHOD(half, STAX_FLOAT16)
CAST_METHOD(bfloat16, STAX_BFLOAT16)
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
            "DoubleTensor", "BFloat16Tensor"};
        return PyUnicode_FromFormat("tensorplay.%s", names[SELF->dtype]);
    }
    if (stax_dtype_from_object(dtype, &dt) < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_to_format(SELF, dt, 0, STAX_MF_PRESERVE);
}

static PyObject *
m_clone(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"memory_format", NULL};
    PyObject *mfo = Py_None;
    stax_memory_format mf;
    if (!PyArg_ParseTupleAndKeywords(args, kw,
                                     "|$O:clone", kwlist, &mfo)
        || stax_parse_memory_format(mfo, "clone", &mf) < 0) {
        return NULL;
    }
    return (PyObject *)stax_tensor_copy_as(SELF, SELF->dtype, mf);
}

static PyObject *
m_contiguous(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"memory_format", NULL};
    PyObject *mfo = NULL;
    stax_memory_format mf = STAX_MF_CONTIGUOUS;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$O:contiguous", kwlist,
                                     &mfo)
        || (mfo != NULL && mfo != Py_None
            && stax_parse_memory_format(mfo, "contiguous", &mf) < 0)) {
        return NULL;
    }
    if (stax_tensor_is_contiguous_as(SELF, mf)) {
        return Py_NewRef(self);
    }
    if (mf == STAX_MF_PRESERVE) {
        PyErr_SetString(PyExc_RuntimeError, "preserve memory format is "
                        "unsupported by the contiguous operator");
        return NULL;
    }
    return (PyObject *)stax_tensor_copy_as(SELF, SELF->dtype, mf);
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
    SELF->output_nr = 0;
    Py_CLEAR(SELF->grad_fn);
    return Py_NewRef(self);
}

static PyObject *
m_untyped_storage(PyObject *self, PyObject *unused)
{
    return Py_NewRef(SELF->storage);
}

static PyObject *
m_cpu(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"memory_format", NULL};
    PyObject *mfo = Py_None;
    stax_memory_format mf;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$O:cpu", kwlist, &mfo)
        || stax_parse_memory_format(mfo, "cpu", &mf) < 0) {
        return NULL;
    }
    if (!stax_tensor_is_cuda(SELF)) {
        return (PyObject *)stax_tensor_to_format(SELF, SELF->dtype, 0, mf);
    }
    return moved_as(SELF, STAX_DEV_CPU, SELF->dtype, mf);
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

/* torch's assert_no_partial_overlap (TensorIterator's check between the
 * written tensor and each input): a dense input that shares some but not
 * all of the written bytes, or all of them in another layout (x += x.t()),
 * would read elements already written. The same tensor, disjoint memory,
 * or a layout too hard to tell (not dense) pass, as in torch. With full,
 * torch's assert_no_overlap of the index ops (index_add_, index_put_, ...):
 * the same memory in the same layout is refused too. 0, or -1 with torch's
 * RuntimeError. */
int
stax_tensor_check_no_overlap(PyObject *out, PyObject *o, int full)
{
    const StaxTensor *a, *b;
    int64_t na = 1, nb = 1;
    const char *a0, *a1, *b0, *b1;
    int partial;
    if (!StaxTensor_Check(out) || !StaxTensor_Check(o) || (out == o && !full)) {
        return 0;
    }
    a = (const StaxTensor *)out;
    b = (const StaxTensor *)o;
    if (a->storage == NULL || b->storage == NULL || a->storage->data != b->storage->data) {
        return 0;
    }
    for (int d = 0; d < a->ndim; d++) {
        na *= a->sizes[d];
    }
    for (int d = 0; d < b->ndim; d++) {
        nb *= b->sizes[d];
    }
    if (na == 0 || nb == 0 || !stax_tensor_is_dense(a) || !stax_tensor_is_dense(b)) {
        return 0;
    }
    a0 = a->storage->data + a->offset * stax_dtype_itemsize(a->dtype);
    a1 = a0 + na * stax_dtype_itemsize(a->dtype);
    b0 = b->storage->data + b->offset * stax_dtype_itemsize(b->dtype);
    b1 = b0 + nb * stax_dtype_itemsize(b->dtype);
    if (a0 == b0 && a1 == b1) {
        partial = full || a->ndim != b->ndim
                  || memcmp(a->strides, b->strides, sizeof(int64_t) * (size_t)a->ndim) != 0;
    }
    else {
        partial = a0 < b1 && b0 < a1;
    }
    if (partial) {
        PyErr_SetString(PyExc_RuntimeError,
                        "unsupported operation: some elements of the input tensor and "
                        "the written-to tensor refer to a single memory location. "
                        "Please clone() the tensor before performing the operation.");
        return -1;
    }
    return 0;
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
    /* torch: written from a value that requires grad (grad mode on), the
     * target requires grad too (and is no longer a leaf) */
    if (!SELF->requires_grad && stax_dtype_is_floating(SELF->dtype)
        && stax_result_requires_grad(&src, 1)) {
        stax_tensor_set_result_requires_grad(SELF, 1);
    }
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
    if (stax_tensor_check_no_overlap(self, src, 0) < 0) {
        return NULL;
    }
    /* torch: copy_ into a tensor with an expanded dim (two elements at one
     * address) is refused; fill_ and zero_ are not */
    for (int d = 0; d < SELF->ndim; d++) {
        if (SELF->strides[d] == 0 && SELF->sizes[d] > 1) {
            PyErr_SetString(PyExc_RuntimeError,
                            "unsupported operation: more than one element of the "
                            "written-to tensor refers to a single memory location. "
                            "Please clone() the tensor before performing the "
                            "operation.");
            return NULL;
        }
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
    if (stax_dtype_check_scalar(SELF->dtype, value) < 0) {
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
    if (stax_tensor_is_cuda(SELF)) {
        /* a CUDA tensor travels as a host copy and its device name, rebuilt
         * by tensorplay.serialization._rebuild_on_device: it comes back on
         * that device, or where the running tp.load's map_location says
         * (plain pickle and copy.deepcopy take this path too) */
        PyObject *fn = NULL, *dev = NULL, *res = NULL;
        StaxTensor *host = stax_tensor_to_device(SELF, STAX_DEV_CPU);
        if (host != NULL && host->requires_grad) {
            /* the host copy carries values only; requires_grad travels
             * separately, as for a CPU tensor */
            stax_tensor_set_result_requires_grad(host, 0);
        }
        fn = host ? Py_XNewRef(stax_py_registered(STAX_PY_REBUILD_ON_DEVICE)) : NULL;
        dev = fn ? PyUnicode_FromString(stax_tensor_device_str(SELF)) : NULL;
        if (dev != NULL) {
            PyObject *rg = SELF->requires_grad ? Py_True : Py_False;
            if (SELF->dict != NULL && PyDict_GET_SIZE(SELF->dict) > 0) {
                res = Py_BuildValue("(O(OOOO)O)", fn, (PyObject *)host, dev, rg,
                                    (PyObject *)Py_TYPE(self), SELF->dict);
            }
            else {
                res = Py_BuildValue("(O(OOOO))", fn, (PyObject *)host, dev, rg,
                                    (PyObject *)Py_TYPE(self));
            }
        }
        Py_XDECREF(host);
        Py_XDECREF(fn);
        Py_XDECREF(dev);
        return res;
    }
    /* bfloat16 travels as its (exact) float32 values and the dtype */
    int bf = SELF->dtype == STAX_BFLOAT16;
    StaxTensor *vals = bf ? stax_tensor_to_dtype(SELF, STAX_FLOAT32, 1)
                          : (StaxTensor *)Py_NewRef(SELF);
    PyObject *arr = vals ? stax_tensor_as_array(vals) : NULL, *cp = NULL, *fn, *r;
    Py_XDECREF(vals);
    if (arr == NULL) {
        return NULL;
    }
    cp = PyArray_NewCopy((PyArrayObject *)arr, NPY_CORDER);
    Py_DECREF(arr);
    if (cp == NULL) {
        return NULL;
    }
    fn = Py_XNewRef(stax_py_registered(STAX_PY_REBUILD_TENSOR));
    if (fn == NULL) {
        Py_DECREF(cp);
        return NULL;
    }
    PyObject *rg = SELF->requires_grad ? Py_True : Py_False;
    PyObject *dt = bf ? stax_dtype_object(SELF->dtype) : Py_None;
    if (SELF->dict != NULL && PyDict_GET_SIZE(SELF->dict) > 0) {
        r = Py_BuildValue("(N(NOOO)O)", fn, cp, (PyObject *)Py_TYPE(self),
                          rg, dt, SELF->dict);
    }
    else {
        r = Py_BuildValue("(N(NOOO))", fn, cp, (PyObject *)Py_TYPE(self), rg,
                          dt);
    }
    return r;
}

PyMethodDef stax_tensor_methods[] = {
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
    {"bfloat16", (PyCFunction)(void (*)(void))m_bfloat16, METH_VARARGS | METH_KEYWORDS, NULL},
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
    {"cpu", (PyCFunction)(void (*)(void))m_cpu, METH_VARARGS | METH_KEYWORDS, NULL},
    {"cuda", (PyCFunction)(void (*)(void))m_cuda, METH_VARARGS | METH_KEYWORDS,
     "cuda(device=None, non_blocking=False) -> this tensor on cuda:0 (a copy "
     "unless it is there already)"},
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
