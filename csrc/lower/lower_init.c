/* Room init: registers this room's types and functions on tensorplay._C. */
#include "lower/lower.h"

PyObject *stax_lower_NativeCompileError;

int stax_lower_program_init(PyObject *m);

int
stax_lower_module_init(PyObject *m)
{
    stax_lower_NativeCompileError = PyErr_NewExceptionWithDoc(
        "tensorplay._C.NativeCompileError",
        "A node of the graph is neither lowered by Stax nor a library call, "
        "and strict_native=True forbids a fallback kernel.",
        PyExc_RuntimeError, NULL);
    if (stax_lower_NativeCompileError == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "NativeCompileError",
                              stax_lower_NativeCompileError) < 0) {
        return -1;
    }
    return stax_lower_program_init(m);
}
