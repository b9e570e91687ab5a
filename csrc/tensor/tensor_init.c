/* Room init: registers Tensor, dtype objects, Size, device, grad mode,
 * views, indexing and the Philox generator on tensorplay._C. */
#include "tensor/tensor_internal.h"

PyTypeObject *StaxTensor_Type = NULL;
PyTypeObject *StaxStorage_Type = NULL;
PyTypeObject *StaxDType_Type = NULL;

int
stax_tensor_module_init(PyObject *m)
{
    if (stax_tensor_override_init() < 0
        || stax_tensor_dtype_init(m) < 0
        || stax_tensor_type_init(m) < 0
        || stax_tensor_gradmode_init(m) < 0
        || stax_tensor_install_view_methods(StaxTensor_Type) < 0
        || stax_tensor_creation_init(m) < 0
        || stax_tensor_random_init(m) < 0
        || stax_tensor_device_init(m) < 0
        || stax_tensor_dlpack_init(m) < 0
        || stax_tensor_registry_init(m) < 0
        || stax_tensor_layout_init(m) < 0) {
        return -1;
    }
    return 0;
}
