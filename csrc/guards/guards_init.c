/* Room init: registers this room's types and functions on tensorplay._C. */
#include "guards/guards.h"

int
stax_guards_module_init(PyObject *m)
{
    (void)m;
    return 0;
}
