/* Room init: registers this room's types and functions on tensorplay._C. */
#include "backend_nvrtc/backend_nvrtc.h"

int
stax_nvrtc_module_init(PyObject *m)
{
    (void)m;
    return 0;
}
