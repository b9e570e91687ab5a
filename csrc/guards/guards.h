/* Public header of the guards room: signatures, specialization keys, guards, replay, fingerprints, three-level dispatch, free-variable lifting, recompile log, the compile entry. */
#ifndef STAX_GUARDS_H
#define STAX_GUARDS_H

#include "trace/trace.h"
#include "lower/lower.h"

int stax_guards_module_init(PyObject *m);

#endif
