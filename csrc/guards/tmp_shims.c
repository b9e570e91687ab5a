/* TEMPORARY integration shims until the tensor room lands (weak: the
 * tensor room's definitions win). Delete once main has them. */
#include "guards/guards.h"

__attribute__((weak)) int
stax_grad_enabled(void)
{
    return 1;
}

__attribute__((weak)) stax_dtype_t
stax_default_dtype(void)
{
    return STAX_FLOAT32;
}

__attribute__((weak)) const char *
stax_dtype_name(stax_dtype_t dt)
{
    (void)dt;
    return "?";
}
