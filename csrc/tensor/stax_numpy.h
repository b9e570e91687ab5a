/* Include this (not numpy/arrayobject.h) from any room that uses the NumPy
 * C API: the API table is imported once, in stax_module/module.c. */
#ifndef STAX_NUMPY_H
#define STAX_NUMPY_H
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL STAX_ARRAY_API
#include <numpy/arrayobject.h>
#endif
