/* Room init: registers this room's types and functions on tensorplay._C. */
#include "lower/lower.h"

int
stax_lower_module_init(PyObject *m)
{
    (void)m;
    return 0;
}
