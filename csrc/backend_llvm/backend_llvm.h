/* Public header of the backend_llvm room: loop IR -> LLVM IR -> ORC LLJIT. The only room that includes llvm-c/. */
#ifndef STAX_BACKEND_LLVM_H
#define STAX_BACKEND_LLVM_H

#include "lower/lower.h"

int stax_llvm_module_init(PyObject *m);

#endif
