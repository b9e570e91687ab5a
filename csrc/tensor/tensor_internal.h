/* Private to the tensor room: shared between its .c files. Other rooms use
 * tensor.h only. */
#ifndef STAX_TENSOR_INTERNAL_H
#define STAX_TENSOR_INTERNAL_H

#include "tensor/tensor.h"

extern PyTypeObject StaxTensor_TypeObj;
extern PyTypeObject StaxStorage_TypeObj;
extern PyTypeObject StaxDType_TypeObj;
extern PyTypeObject StaxSize_TypeObj;
extern PyTypeObject StaxDevice_TypeObj;
extern PyTypeObject StaxGenerator_TypeObj;

typedef struct {
    PyObject_HEAD
    stax_dtype_t dt;
} StaxDTypeObject;

typedef struct {
    PyObject_HEAD
    PyObject *type;   /* str */
    PyObject *index;  /* int or None */
} StaxDeviceObject;

/* dtype.c */
int stax_tensor_dtype_init(PyObject *m);
PyObject *stax_size_new(int ndim, const int64_t *sizes);
PyObject *stax_cpu_device(void);     /* borrowed */
/* normalize dim (negative allowed) into [0, ndim); IndexError like torch.
 * ndim 0 is treated as 1 (torch's wrap rule). */
int stax_wrap_dim(int64_t dim, int ndim, int *out);
/* parse a size argument: ints as varargs, or one tuple/list/Size. */
int stax_parse_sizes(PyObject *args, int64_t *sizes, int *ndim);
int stax_parse_int_seq(PyObject *o, int64_t *vals, int *n, const char *what);

/* tensor_type.c */
int stax_tensor_type_init(PyObject *m);
extern PyObject *stax_repr_hook;
/* tensor_api.c */
StaxTensor *stax_tensor_alloc(PyTypeObject *tp);
/* A storage of nbytes at data on device (STAX_DEV_*) whose bytes owner
 * keeps alive (stolen, also on failure). NULL + exception. */
StaxStorage *stax_storage_new(PyObject *owner, char *data, int64_t nbytes,
                              int device);
/* Row-major strides for sizes (a dim of size 0 or 1 counts as 1). */
void stax_contiguous_strides(int ndim, const int64_t *sizes, int64_t *strides);
/* A new tensor of dtype dt on storage st (stolen, also on failure; NULL
 * passes an error through) at offset 0 with sizes and strides (NULL:
 * row-major). NULL + exception. */
StaxTensor *stax_tensor_on_storage(StaxStorage *st, stax_dtype_t dt, int ndim,
                                   const int64_t *sizes, const int64_t *strides);
PyObject *stax_tensor_copy_into(StaxTensor *dst, PyObject *src); /* -> None */
StaxTensor *stax_tensor_to_dtype(StaxTensor *t, stax_dtype_t dt, int copy);
PyObject *stax_tensor_item(StaxTensor *t);
double stax_half_to_double(uint16_t h);
uint16_t stax_double_to_half(double d);
/* tensor_methods.c: the Tensor type's getset and method tables */
extern PyGetSetDef stax_tensor_getset[];
extern PyMethodDef stax_tensor_methods[];

/* gradmode.c */
int stax_tensor_gradmode_init(PyObject *m);

/* layout.c */
int stax_tensor_layout_init(PyObject *m);

/* philox.c */
int stax_tensor_random_init(PyObject *m);
int stax_tensor_registry_init(PyObject *m);

/* slots.c: number-slot trampolines (see there) */
#define STAX_TENSOR_BINARY_SLOTS(X)                                      \
    X(nb_add) X(nb_subtract) X(nb_multiply) X(nb_remainder)              \
    X(nb_lshift) X(nb_rshift) X(nb_and) X(nb_xor) X(nb_or)               \
    X(nb_floor_divide) X(nb_true_divide) X(nb_matrix_multiply)           \
    X(nb_inplace_add) X(nb_inplace_subtract) X(nb_inplace_multiply)      \
    X(nb_inplace_remainder) X(nb_inplace_lshift) X(nb_inplace_rshift)    \
    X(nb_inplace_and) X(nb_inplace_xor) X(nb_inplace_or)                 \
    X(nb_inplace_floor_divide) X(nb_inplace_true_divide)                 \
    X(nb_inplace_matrix_multiply)
#define STAX_TENSOR_UNARY_SLOTS(X)                                       \
    X(nb_negative) X(nb_positive) X(nb_absolute) X(nb_invert)
#define STAX_TENSOR_TERNARY_SLOTS(X) X(nb_power) X(nb_inplace_power)
#define STAX_TRAMP_DECL2(S) PyObject *stax_tramp_##S(PyObject *, PyObject *);
#define STAX_TRAMP_DECL1(S) PyObject *stax_tramp_##S(PyObject *);
#define STAX_TRAMP_DECL3(S) \
    PyObject *stax_tramp_##S(PyObject *, PyObject *, PyObject *);
STAX_TENSOR_BINARY_SLOTS(STAX_TRAMP_DECL2)
STAX_TENSOR_UNARY_SLOTS(STAX_TRAMP_DECL1)
STAX_TENSOR_TERNARY_SLOTS(STAX_TRAMP_DECL3)
PyObject *stax_tramp_richcompare(PyObject *a, PyObject *b, int op);

/* override.c: __tensor_function__ for the room's own methods.
 * stax_tensor_override: *handled = 0 -> no override (returns NULL, no
 * error); *handled = 1 -> the result (or NULL + exception). */
PyObject *stax_tensor_override(PyObject *func, PyObject *args,
                               PyObject *kwargs, int *handled);
PyObject *stax_tensor_method_object(const char *name);   /* borrowed */
PyObject *stax_tensor_override_method(const char *name, PyObject *self,
                                      PyObject *args, PyObject *kw,
                                      int *handled);
/* at the top of a METH_VARARGS|METH_KEYWORDS method */
#define STAX_OVERRIDE_VARARGS(NAME)                                       \
    do {                                                                  \
        int h_;                                                           \
        PyObject *r_ = stax_tensor_override_method(NAME, self, args, kw,  \
                                                   &h_);                  \
        if (h_) {                                                         \
            return r_;                                                    \
        }                                                                 \
    } while (0)
/* at the top of a METH_O method taking `other` */
#define STAX_OVERRIDE_O(NAME, ARG)                                        \
    do {                                                                  \
        if (!StaxTensor_Check(ARG)) {                                     \
            int h_;                                                       \
            PyObject *t_ = PyTuple_Pack(1, ARG), *r_;                     \
            if (t_ == NULL) {                                             \
                return NULL;                                              \
            }                                                             \
            r_ = stax_tensor_override_method(NAME, self, t_, NULL, &h_);  \
            Py_DECREF(t_);                                                \
            if (h_) {                                                     \
                return r_;                                                \
            }                                                             \
        }                                                                 \
    } while (0)
int stax_tensor_override_init(void);
/* value NULL: getitem */
PyObject *stax_tensor_override_item(PyObject *self, PyObject *key,
                                    PyObject *value, int *handled);

/* device_tensor.c: host round trips of CUDA tensors */
int stax_tensor_device_init(PyObject *m);
int stax_tensor_dlpack_init(PyObject *m);   /* dlpack.c */
PyObject *stax_tensor_cuda_item(StaxTensor *t);
PyObject *stax_tensor_cuda_copy_into(StaxTensor *dst, PyObject *src);
StaxTensor *stax_tensor_cuda_to_dtype(StaxTensor *t, stax_dtype_t dt, int copy);
PyObject *stax_tensor_cuda_getitem(StaxTensor *t, PyObject *key);
int stax_tensor_cuda_setitem(StaxTensor *t, PyObject *key, PyObject *value);

/* creation.c */
int stax_tensor_creation_init(PyObject *m);

/* views.c / indexing.c */
int stax_tensor_views_init(PyObject *m);

#endif
