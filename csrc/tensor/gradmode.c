/* Grad mode: a per-thread flag (rho of the specialization key). The
 * context managers (no_grad, enable_grad, set_grad_enabled,
 * inference_mode) are thin Python classes in tensorplay/_tensor.py. */
#include "tensor/tensor_internal.h"

/* thread-local, as torch: every thread starts with grad enabled */
static _Thread_local int grad_enabled = 1;
static _Thread_local int inference_mode = 0;

int
stax_grad_enabled(void)
{
    return grad_enabled;
}

void
stax_set_grad_enabled(int on)
{
    grad_enabled = on ? 1 : 0;
}

int
stax_inference_mode_enabled(void)
{
    return inference_mode;
}

static PyObject *
py_is_grad_enabled(PyObject *self, PyObject *unused)
{
    return PyBool_FromLong(grad_enabled);
}

static PyObject *
py_set_grad_enabled(PyObject *self, PyObject *arg)
{
    int v = PyObject_IsTrue(arg);
    if (v < 0) {
        return NULL;
    }
    int old = grad_enabled;
    grad_enabled = v;
    return PyBool_FromLong(old);
}

static PyObject *
py_is_inference_mode_enabled(PyObject *self, PyObject *unused)
{
    return PyBool_FromLong(inference_mode);
}

static PyObject *
py_set_inference_mode(PyObject *self, PyObject *arg)
{
    int v = PyObject_IsTrue(arg);
    if (v < 0) {
        return NULL;
    }
    int old = inference_mode;
    inference_mode = v;
    return PyBool_FromLong(old);
}

static PyMethodDef gradmode_methods[] = {
    {"is_grad_enabled", py_is_grad_enabled, METH_NOARGS, NULL},
    {"_set_grad_enabled", py_set_grad_enabled, METH_O,
     "set the flag; returns the previous value"},
    {"is_inference_mode_enabled", py_is_inference_mode_enabled, METH_NOARGS,
     NULL},
    {"_set_inference_mode", py_set_inference_mode, METH_O, NULL},
    {NULL},
};

int
stax_tensor_gradmode_init(PyObject *m)
{
    return PyModule_AddFunctions(m, gradmode_methods);
}
