/* Fast creation functions in C: empty, zeros, ones (sizes as varargs or one
 * sequence; keywords dtype, device, requires_grad, plus ignored layout,
 * pin_memory, memory_format, out=None). tensorplay/_tensor.py re-exports
 * them. */
#include "tensor/tensor_internal.h"
#include "tensor/stax_numpy.h"

enum { MAKE_EMPTY, MAKE_ZEROS, MAKE_ONES };

static void
fill_ones(StaxTensor *t)
{
    int64_t n = stax_tensor_numel(t);
    char *p = STAX_TENSOR_DATA(t);
    switch (t->dtype) {
    case STAX_BOOL:
    case STAX_UINT8:
    case STAX_INT8:
        memset(p, 1, n);
        break;
    case STAX_INT16: for (int64_t i = 0; i < n; i++) ((int16_t *)p)[i] = 1; break;
    case STAX_INT32: for (int64_t i = 0; i < n; i++) ((int32_t *)p)[i] = 1; break;
    case STAX_INT64: for (int64_t i = 0; i < n; i++) ((int64_t *)p)[i] = 1; break;
    case STAX_FLOAT16:
    case STAX_BFLOAT16: {
        uint16_t one = stax_double_to_half_like(t->dtype, 1.0);
        for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = one;
        break;
    }
    case STAX_FLOAT32: for (int64_t i = 0; i < n; i++) ((float *)p)[i] = 1.0f; break;
    case STAX_FLOAT64: for (int64_t i = 0; i < n; i++) ((double *)p)[i] = 1.0; break;
    default: break;
    }
}

static PyObject *
make(int kind, PyObject *args, PyObject *kw)
{
    int64_t sizes[STAX_MAX_DIMS];
    int nd = 0;
    stax_dtype_t dt = stax_default_dtype();
    int rg = 0, device = STAX_DEV_CPU;
    if (kw != NULL) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kw, &pos, &k, &v)) {
            const char *s = PyUnicode_AsUTF8(k);
            if (s == NULL) {
                return NULL;
            }
            if (strcmp(s, "dtype") == 0) {
                if (v != Py_None && stax_dtype_from_object(v, &dt) < 0) {
                    return NULL;
                }
            }
            else if (strcmp(s, "device") == 0) {
                if (stax_parse_device(v, &device) < 0) {
                    return NULL;
                }
            }
            else if (strcmp(s, "requires_grad") == 0) {
                rg = PyObject_IsTrue(v);
                if (rg < 0) {
                    return NULL;
                }
            }
            else if (strcmp(s, "size") == 0) {
                if (PyTuple_GET_SIZE(args) != 0) {
                    PyErr_SetString(PyExc_TypeError,
                                    "size given both positionally and as a "
                                    "keyword");
                    return NULL;
                }
                if (stax_parse_int_seq(v, sizes, &nd, "size") < 0) {
                    return NULL;
                }
                nd = -nd - 1;   /* mark as parsed */
            }
            else if (strcmp(s, "layout") != 0 && strcmp(s, "pin_memory") != 0
                     && strcmp(s, "memory_format") != 0
                     && !(strcmp(s, "out") == 0 && v == Py_None)) {
                PyErr_Format(PyExc_TypeError,
                             "%s() got an unexpected keyword argument '%s'",
                             kind == MAKE_EMPTY ? "empty"
                             : kind == MAKE_ZEROS ? "zeros" : "ones", s);
                return NULL;
            }
        }
    }
    if (nd < 0) {
        nd = -nd - 1;
    }
    else if (stax_parse_sizes(args, sizes, &nd) < 0) {
        return NULL;
    }
    if (rg && !stax_dtype_is_floating(dt)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "only Tensors of floating point dtype can require "
                        "gradients");
        return NULL;
    }
    StaxTensor *t;
    if (device == STAX_DEV_CUDA) {
        if (kind == MAKE_ONES) {
            StaxTensor *h = stax_tensor_empty(nd, sizes, dt);
            if (h != NULL) {
                fill_ones(h);
            }
            t = h ? stax_tensor_to_device(h, STAX_DEV_CUDA) : NULL;
            Py_XDECREF(h);
        }
        else {
            /* empty too: torch's empty bools are valid values */
            t = stax_tensor_zeros_on(nd, sizes, dt, STAX_DEV_CUDA);
        }
        if (t != NULL) {
            t->requires_grad = rg;
        }
        return (PyObject *)t;
    }
    t = stax_tensor_empty(nd, sizes, dt);
    if (t == NULL) {
        return NULL;
    }
    if (kind == MAKE_ZEROS) {
        memset(STAX_TENSOR_DATA(t), 0, t->storage->nbytes);
    }
    else if (kind == MAKE_ONES) {
        fill_ones(t);
    }
    else if (dt == STAX_BOOL) {
        memset(STAX_TENSOR_DATA(t), 0, t->storage->nbytes);  /* valid bools */
    }
    t->requires_grad = rg;
    return (PyObject *)t;
}

static PyObject *
py_empty(PyObject *self, PyObject *args, PyObject *kw)
{
    return make(MAKE_EMPTY, args, kw);
}

static PyObject *
py_zeros(PyObject *self, PyObject *args, PyObject *kw)
{
    return make(MAKE_ZEROS, args, kw);
}

static PyObject *
py_ones(PyObject *self, PyObject *args, PyObject *kw)
{
    return make(MAKE_ONES, args, kw);
}

/* _scalar_tensor(value, dtype=None): a 0-d tensor from a Python scalar
 * (bool -> bool, int -> int64, float -> default dtype unless dtype). */
static PyObject *
py_scalar_tensor(PyObject *self, PyObject *args)
{
    PyObject *v, *dto = Py_None;
    stax_dtype_t dt;
    if (!PyArg_ParseTuple(args, "O|O:_scalar_tensor", &v, &dto)) {
        return NULL;
    }
    if (dto != Py_None) {
        if (stax_dtype_from_object(dto, &dt) < 0) {
            return NULL;
        }
    }
    else if (PyBool_Check(v)) {
        dt = STAX_BOOL;
    }
    else if (PyLong_Check(v)) {
        dt = STAX_INT64;
    }
    else if (PyFloat_Check(v)) {
        dt = stax_default_dtype();
    }
    else {
        PyErr_Format(PyExc_TypeError, "_scalar_tensor: expected a Python "
                     "scalar, got %.100s", Py_TYPE(v)->tp_name);
        return NULL;
    }
    StaxTensor *t = stax_tensor_empty(0, NULL, dt);
    if (t == NULL) {
        return NULL;
    }
    char *p = STAX_TENSOR_DATA(t);
    if (PyFloat_Check(v) || stax_dtype_is_floating(dt)) {
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) {
            Py_DECREF(t);
            return NULL;
        }
        switch (dt) {
        case STAX_BOOL: *(npy_bool *)p = d != 0; break;
        case STAX_UINT8: *(uint8_t *)p = (uint8_t)(int64_t)d; break;
        case STAX_INT8: *(int8_t *)p = (int8_t)(int64_t)d; break;
        case STAX_INT16: *(int16_t *)p = (int16_t)(int64_t)d; break;
        case STAX_INT32: *(int32_t *)p = (int32_t)(int64_t)d; break;
        case STAX_INT64: *(int64_t *)p = (int64_t)d; break;
        case STAX_FLOAT16:
        case STAX_BFLOAT16: *(uint16_t *)p = stax_double_to_half_like(dt, d); break;
        case STAX_FLOAT32: *(float *)p = (float)d; break;
        case STAX_FLOAT64: *(double *)p = d; break;
        default: break;
        }
        return (PyObject *)t;
    }
    long long i = PyLong_AsLongLong(v);
    if (i == -1 && PyErr_Occurred()) {
        Py_DECREF(t);
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Overflow when unpacking long long");
        }
        return NULL;
    }
    switch (dt) {
    case STAX_BOOL: *(npy_bool *)p = i != 0; break;
    case STAX_UINT8: *(uint8_t *)p = (uint8_t)i; break;
    case STAX_INT8: *(int8_t *)p = (int8_t)i; break;
    case STAX_INT16: *(int16_t *)p = (int16_t)i; break;
    case STAX_INT32: *(int32_t *)p = (int32_t)i; break;
    case STAX_INT64: *(int64_t *)p = (int64_t)i; break;
    default: break;
    }
    return (PyObject *)t;
}

static PyMethodDef creation_methods[] = {
    {"_scalar_tensor", py_scalar_tensor, METH_VARARGS, NULL},
    {"empty", (PyCFunction)(void (*)(void))py_empty, METH_VARARGS | METH_KEYWORDS,
     "empty(*size, dtype=None, device=None, requires_grad=False)"},
    {"zeros", (PyCFunction)(void (*)(void))py_zeros, METH_VARARGS | METH_KEYWORDS,
     "zeros(*size, dtype=None, device=None, requires_grad=False)"},
    {"ones", (PyCFunction)(void (*)(void))py_ones, METH_VARARGS | METH_KEYWORDS,
     "ones(*size, dtype=None, device=None, requires_grad=False)"},
    {NULL},
};

int
stax_tensor_creation_init(PyObject *m)
{
    return PyModule_AddFunctions(m, creation_methods);
}
