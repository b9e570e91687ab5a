/* Room init: registers CompiledFunction, the signature/fingerprint
 * helpers and stax_compile (driver.c) on tensorplay._C. */
#include "guards/guards.h"

int
stax_guards_module_init(PyObject *m)
{
    if (stax_guard_signature_init(m) < 0 || stax_guard_dispatch_init(m) < 0
        || stax_guard_driver_init(m) < 0) {
        return -1;
    }
    return 0;
}
