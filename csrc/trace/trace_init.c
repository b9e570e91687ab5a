/* Room init: registers this room's types and functions on tensorplay._C. */
#include "trace/trace_internal.h"

int
stax_trace_module_init(PyObject *m)
{
    if (stax_trace_proxy_init(m) < 0 || stax_trace_tracer_init(m) < 0) {
        return -1;
    }
    return 0;
}
