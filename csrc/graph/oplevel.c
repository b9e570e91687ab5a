/* The op-level graph (seed §4.8). */
#include "graph/passes_internal.h"

PyObject *
stax_graph_p_make_op_graph(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self; (void)args; (void)kwargs;
    PyErr_SetString(PyExc_NotImplementedError, "make_op_graph");
    return NULL;
}
