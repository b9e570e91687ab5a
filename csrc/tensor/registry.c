/* The Python objects of the tensorplay package that the C core calls back
 * into, registered once by the package's __init__ through
 * _C._register(name, obj): no C file imports tensorplay.* at run time. */
#include "tensor/tensor_internal.h"

#include <string.h>

static const char *const py_names[STAX_PY_COUNT] = {
    [STAX_PY_PACKAGE] = "tensorplay",
    [STAX_PY_FUNCTIONAL] = "tensorplay.functional",
    [STAX_PY_OPS] = "tensorplay.ops",
    [STAX_PY_REBUILD_TENSOR] = "tensorplay._tensor._rebuild_tensor",
    [STAX_PY_REBUILD_ON_DEVICE] = "tensorplay.serialization._rebuild_on_device",
    [STAX_PY_CUDA_DISPATCH] = "tensorplay.cuda._dispatch",
    [STAX_PY_BF16_DISPATCH] = "tensorplay._ops._bf16_dispatch",
    [STAX_PY_CUDA_DEVICE_OP] = "tensorplay.cuda._device_op",
};
_Static_assert(sizeof(py_names) / sizeof(py_names[0]) == STAX_PY_COUNT,
               "one name per registered object");

static PyObject *py_objects[STAX_PY_COUNT];   /* strong */

PyObject *
stax_py_registered(stax_py_key key)
{
    if (py_objects[key] == NULL) {
        PyErr_Format(PyExc_RuntimeError,
                     "tensorplay._C: %s was not registered (import "
                     "tensorplay, not tensorplay._C alone)", py_names[key]);
    }
    return py_objects[key];
}

static PyObject *
py_register(PyObject *m, PyObject *args)
{
    const char *name;
    PyObject *obj;
    (void)m;
    if (!PyArg_ParseTuple(args, "sO:_register", &name, &obj)) {
        return NULL;
    }
    for (int i = 0; i < STAX_PY_COUNT; i++) {
        if (strcmp(py_names[i], name) == 0) {
            Py_XSETREF(py_objects[i], Py_NewRef(obj));
            Py_RETURN_NONE;
        }
    }
    PyErr_Format(PyExc_KeyError, "_register: no slot named '%s'", name);
    return NULL;
}

static PyMethodDef registry_methods[] = {
    {"_register", py_register, METH_VARARGS,
     "_register(name, obj): hand the C core a Python object of the package "
     "(called once by tensorplay/__init__.py)"},
    {NULL},
};

int
stax_tensor_registry_init(PyObject *m)
{
    return PyModule_AddFunctions(m, registry_methods);
}
