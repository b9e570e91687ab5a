/* Public header of the lower room: loop-level IR, lowering rules, fusion, scheduling, buffer plan, the compiled-program runtime and thread pool, and the back-end vtable. */
#ifndef STAX_LOWER_H
#define STAX_LOWER_H

#include "graph/graph.h"

int stax_lower_module_init(PyObject *m);

#endif
