/* Trampolines for Tensor's number slots and rich comparison.
 *
 * The ops room installs the real slot functions into
 * StaxTensor_Type->tp_as_number (and tp_richcompare) after PyType_Ready.
 * Slots filled in only after PyType_Ready get no `__add__`-style wrapper in
 * the type's dict, so Tensor has these trampolines from the start: the
 * dict then holds Tensor.__add__, __radd__, __iadd__, __eq__, ..., and each
 * trampoline forwards to whatever function the slot holds now (returning
 * NotImplemented while nobody installed one). */
#include "tensor/tensor_internal.h"

#define NM (StaxTensor_TypeObj.tp_as_number)

#define BINARY(SLOT)                                                     \
    PyObject *                                                           \
    stax_tramp_##SLOT(PyObject *a, PyObject *b)                          \
    {                                                                    \
        binaryfunc f = NM->SLOT;                                         \
        if (f == NULL || f == stax_tramp_##SLOT) {                       \
            Py_RETURN_NOTIMPLEMENTED;                                    \
        }                                                                \
        return f(a, b);                                                  \
    }

#define UNARY(SLOT)                                                      \
    PyObject *                                                           \
    stax_tramp_##SLOT(PyObject *a)                                       \
    {                                                                    \
        unaryfunc f = NM->SLOT;                                          \
        if (f == NULL || f == stax_tramp_##SLOT) {                       \
            PyErr_Format(PyExc_TypeError, "bad operand type for unary "  \
                         "operation: '%.100s'", Py_TYPE(a)->tp_name);    \
            return NULL;                                                 \
        }                                                                \
        return f(a);                                                     \
    }

#define TERNARY(SLOT)                                                    \
    PyObject *                                                           \
    stax_tramp_##SLOT(PyObject *a, PyObject *b, PyObject *c)             \
    {                                                                    \
        ternaryfunc f = NM->SLOT;                                        \
        if (f == NULL || f == stax_tramp_##SLOT) {                       \
            Py_RETURN_NOTIMPLEMENTED;                                    \
        }                                                                \
        return f(a, b, c);                                               \
    }

STAX_TENSOR_BINARY_SLOTS(BINARY)
STAX_TENSOR_UNARY_SLOTS(UNARY)
STAX_TENSOR_TERNARY_SLOTS(TERNARY)

PyObject *
stax_tramp_richcompare(PyObject *a, PyObject *b, int op)
{
    richcmpfunc f = StaxTensor_TypeObj.tp_richcompare;
    if (f == NULL || f == stax_tramp_richcompare) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    return f(a, b, op);
}
