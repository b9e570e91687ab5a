/* Public header of the tensor room: the Tensor type (storage + offset + sizes
 * + strides + dtype + device + shared version counter), dtypes and type
 * promotion. Knows no op. */
#ifndef STAX_TENSOR_H
#define STAX_TENSOR_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define STAX_MAX_DIMS 16

typedef enum {
    STAX_BOOL = 0,
    STAX_UINT8,
    STAX_INT8,
    STAX_INT16,
    STAX_INT32,
    STAX_INT64,
    STAX_FLOAT16,
    STAX_FLOAT32,
    STAX_FLOAT64,
    STAX_NUM_DTYPES
} stax_dtype_t;

/* A storage: one NumPy array owns the bytes; every view shares the storage
 * and so shares its version counter (t._version). */
typedef struct {
    PyObject_HEAD
    PyObject *owner;      /* strong: the NumPy array owning the memory */
    char *data;           /* base pointer */
    int64_t nbytes;
    uint64_t version;     /* bumped by every in-place write to any view */
} StaxStorage;

typedef struct {
    PyObject_HEAD
    StaxStorage *storage;          /* strong */
    int64_t offset;                /* storage offset, in elements */
    int ndim;
    int64_t sizes[STAX_MAX_DIMS];
    int64_t strides[STAX_MAX_DIMS]; /* in elements */
    stax_dtype_t dtype;
    int requires_grad;
    PyObject *dict;                /* instance dict (subclasses, Parameter) */
    PyObject *weakreflist;
} StaxTensor;

extern PyTypeObject *StaxTensor_Type;   /* tensorplay.Tensor */
extern PyTypeObject *StaxStorage_Type;
extern PyTypeObject *StaxDType_Type;    /* tensorplay.dtype */

#define StaxTensor_Check(o) PyObject_TypeCheck((o), StaxTensor_Type)
#define STAX_TENSOR_DATA(t) \
    ((t)->storage->data + (t)->offset * stax_dtype_itemsize((t)->dtype))

/* dtypes */
int stax_dtype_itemsize(stax_dtype_t dt);
const char *stax_dtype_name(stax_dtype_t dt);        /* "float32" */
int stax_dtype_is_floating(stax_dtype_t dt);
int stax_dtype_is_integral(stax_dtype_t dt);         /* bool excluded */
int stax_dtype_to_npy(stax_dtype_t dt);              /* NPY_FLOAT32 ... */
int stax_dtype_from_npy(int npy_type, stax_dtype_t *out);   /* -1 + TypeError */
PyObject *stax_dtype_object(stax_dtype_t dt);        /* borrowed tp.float32 */
int stax_dtype_from_object(PyObject *o, stax_dtype_t *out); /* tp.float32, "float32", np.float32 */
stax_dtype_t stax_default_dtype(void);               /* float32 unless set */

/* PyTorch type promotion. Category order bool < integral < floating; a
 * dimensioned tensor outranks a 0-d tensor which outranks a Python scalar
 * within the same category. */
stax_dtype_t stax_promote_types(stax_dtype_t a, stax_dtype_t b);
/* operands: Tensors or Python scalars (bool/int/float). -1 + exception. */
int stax_result_type(PyObject *const *operands, Py_ssize_t n, stax_dtype_t *out);

/* construction */
StaxTensor *stax_tensor_from_array(PyObject *ndarray); /* no copy; negative strides -> ValueError */
StaxTensor *stax_tensor_empty(int ndim, const int64_t *sizes, stax_dtype_t dt);  /* contiguous */
StaxTensor *stax_tensor_view(StaxTensor *base, int ndim, const int64_t *sizes,
                             const int64_t *strides, int64_t offset);  /* shares storage */
/* a NumPy array viewing the same bytes (no copy; base keeps storage alive) */
PyObject *stax_tensor_as_array(StaxTensor *t);
int stax_tensor_is_contiguous(StaxTensor *t);
int64_t stax_tensor_numel(StaxTensor *t);
void stax_tensor_bump_version(StaxTensor *t);

/* grad mode (rho of the specialization key) */
int stax_grad_enabled(void);
void stax_set_grad_enabled(int on);

/* room init: registers Tensor, dtype objects, creation functions, RNG. */
int stax_tensor_module_init(PyObject *m);

#endif
