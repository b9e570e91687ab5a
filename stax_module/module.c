/* tensorplay._C: module init. Each room registers its own types and
 * functions through its public header's stax_<room>_module_init(), in the
 * order of the include partial order (tensor first). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define PY_ARRAY_UNIQUE_SYMBOL STAX_ARRAY_API
#include <numpy/arrayobject.h>

#include "tensor/tensor.h"
#include "ops/ops.h"
#include "autograd/autograd.h"
#include "graph/graph.h"
#include "trace/trace.h"
#include "lower/lower.h"
#include "guards/guards.h"
#include "backend_llvm/backend_llvm.h"
#include "backend_nvrtc/backend_nvrtc.h"
#include "cache/cache.h"
#include "device/device.h"

static int
stax_exec(PyObject *m)
{
    if (_import_array() < 0) {
        return -1;
    }
    if (stax_device_module_init(m) < 0
        || stax_tensor_module_init(m) < 0 || stax_ops_module_init(m) < 0
        || stax_autograd_module_init(m) < 0
        || stax_graph_module_init(m) < 0 || stax_trace_module_init(m) < 0
        || stax_lower_module_init(m) < 0 || stax_llvm_module_init(m) < 0
        || stax_nvrtc_module_init(m) < 0 || stax_guards_module_init(m) < 0
        || stax_cache_module_init(m) < 0) {
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot stax_slots[] = {
    {Py_mod_exec, stax_exec},
    {0, NULL},
};

static struct PyModuleDef stax_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tensorplay._C",
    .m_doc = "Stax: the TensorPlay tensor core and JIT compiler (C).",
    .m_size = 0,
    .m_slots = stax_slots,
};

PyMODINIT_FUNC
PyInit__C(void)
{
    return PyModuleDef_Init(&stax_module);
}
