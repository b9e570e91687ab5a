/* Room init: registers this room's types and functions on tensorplay._C. */
#include "backend_llvm/backend_llvm.h"

int
stax_llvm_module_init(PyObject *m)
{
    (void)m;
    return 0;
}
