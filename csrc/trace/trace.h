/* Public header of the trace room: the Proxy type, the hybrid tracer, data gates, gate(), stand-ins, side-effect isolation. */
#ifndef STAX_TRACE_H
#define STAX_TRACE_H

#include "graph/graph.h"

int stax_trace_module_init(PyObject *m);

#endif
