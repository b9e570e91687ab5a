/* Public header of the backend_nvrtc room: loop IR -> CUDA C -> NVRTC (PTX) -> driver API; libnvrtc/libcuda are dlopen()ed at run time, never linked. */
#ifndef STAX_BACKEND_NVRTC_H
#define STAX_BACKEND_NVRTC_H

#include "lower/lower.h"

int stax_nvrtc_module_init(PyObject *m);

#endif
