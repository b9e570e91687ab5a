/* Room init: registers this room's types and functions on tensorplay._C. */
#include "trace/trace.h"

int
stax_trace_module_init(PyObject *m)
{
    (void)m;
    return 0;
}
