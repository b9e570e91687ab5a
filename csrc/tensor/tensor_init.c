#include "tensor/tensor.h"
PyTypeObject *StaxTensor_Type = NULL;
PyTypeObject *StaxStorage_Type = NULL;
PyTypeObject *StaxDType_Type = NULL;
int
stax_tensor_module_init(PyObject *m)
{
    (void)m;
    return 0;
}
