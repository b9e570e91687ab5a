/* matmul on CUDA tensors through cuBLAS (the device room loads it):
 * _C._cuda_mm(a, b) for 2-D (m, k) @ (k, n) and batched 3-D (B, m, k) @
 * (B, k, n), float32 / float64 (Sgemm / Dgemm), float16 / bfloat16
 * (GemmEx, float32 accumulation as torch), each operand row-major or transposed
 * (a unit stride in one of its last two dims); NotImplemented for anything
 * else (the caller makes the operands contiguous or runs on the host). */
#include "ops/ops_internal.h"
#include "device/device.h"

/* one operand as cuBLAS sees it, for the column-major product
 * C^T = B^T A^T: op N with ld = the row stride when rows are contiguous,
 * op T with ld = the column stride when columns are. -1: neither. */
static int
operand(const StaxTensor *t, int64_t rows, int64_t cols, int *op,
        int64_t *ld)
{
    int nd = t->ndim;
    int64_t s0 = t->strides[nd - 2], s1 = t->strides[nd - 1];
    if ((s1 == 1 || cols == 1) && s0 >= (cols > 1 ? cols : 1)) {
        *op = 0;
        *ld = s0 > 0 ? s0 : (cols > 1 ? cols : 1);
        return 0;
    }
    if ((s0 == 1 || rows == 1) && s1 >= (rows > 1 ? rows : 1)) {
        *op = 1;
        *ld = s1 > 0 ? s1 : (rows > 1 ? rows : 1);
        return 0;
    }
    return -1;
}

static PyObject *
py_cuda_mm(PyObject *m, PyObject *args)
{
    PyObject *ao, *bo;
    StaxTensor *a, *b, *c;
    int opa, opb, batched;
    int64_t lda, ldb, M, N, K, B, sa, sb;
    (void)m;
    if (!PyArg_ParseTuple(args, "OO:_cuda_mm", &ao, &bo)) {
        return NULL;
    }
    if (!StaxTensor_Check(ao) || !StaxTensor_Check(bo)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    a = (StaxTensor *)ao;
    b = (StaxTensor *)bo;
    batched = a->ndim == 3;
    if (!stax_tensor_is_cuda(a) || !stax_tensor_is_cuda(b)
        || a->dtype != b->dtype
        || (a->dtype != STAX_FLOAT32 && a->dtype != STAX_FLOAT64
            && a->dtype != STAX_FLOAT16 && a->dtype != STAX_BFLOAT16)
        || a->ndim != b->ndim || (a->ndim != 2 && a->ndim != 3)
        || (batched && a->sizes[0] != b->sizes[0])) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    M = a->sizes[a->ndim - 2];
    K = a->sizes[a->ndim - 1];
    N = b->sizes[b->ndim - 1];
    if (b->sizes[b->ndim - 2] != K) {
        PyErr_Format(PyExc_RuntimeError, "mat1 and mat2 shapes cannot be "
                     "multiplied (%lldx%lld and %lldx%lld)", (long long)M,
                     (long long)K, (long long)b->sizes[b->ndim - 2],
                     (long long)N);
        return NULL;
    }
    B = batched ? a->sizes[0] : 1;
    if (operand(a, M, K, &opa, &lda) < 0 || operand(b, K, N, &opb, &ldb) < 0) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    sa = batched ? a->strides[0] : 0;
    sb = batched ? b->strides[0] : 0;
    {
        int64_t sizes[3] = {B, M, N};
        c = batched ? stax_tensor_empty_on(3, sizes, a->dtype, STAX_DEV_CUDA)
                    : stax_tensor_empty_on(2, sizes + 1, a->dtype,
                                           STAX_DEV_CUDA);
    }
    if (c == NULL) {
        return NULL;
    }
    if (M == 0 || N == 0 || B == 0) {
        return (PyObject *)c;
    }
    if (K == 0) {       /* an empty sum: zeros */
        StaxTensor *z = stax_tensor_zeros_on(c->ndim, c->sizes, c->dtype,
                                             STAX_DEV_CUDA);
        Py_DECREF(c);
        return (PyObject *)z;
    }
    /* column-major: C^T (N x M, ld N) = op(B^T) op(A^T) */
    if (stax_cuda_gemm(a->dtype == STAX_FLOAT32 ? 0
                       : a->dtype == STAX_FLOAT64 ? 1
                       : a->dtype == STAX_FLOAT16 ? 2 : 3, opb, opa, N, M, K,
                       (stax_cuptr)(uintptr_t)STAX_TENSOR_DATA(b), ldb, sb,
                       (stax_cuptr)(uintptr_t)STAX_TENSOR_DATA(a), lda, sa,
                       (stax_cuptr)(uintptr_t)STAX_TENSOR_DATA(c), N, M * N,
                       B) < 0) {
        Py_DECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}


/* ------------------------------------------- hand-written eager kernels */

/* _C._cuda_function(image, name) -> int: load a module image (CUBIN bytes
 * from _C.nvrtc_compile for the device's sm_XY, or PTX text) and return
 * the address of its kernel `name` (a CUfunction) for _cuda_launch. The
 * module stays loaded for the life of the process: the caller caches the
 * handle per kernel source. */
static PyObject *
py_cuda_function(PyObject *m, PyObject *args)
{
    PyObject *img;
    const char *name;
    void *module = NULL, *fn = NULL;
    const void *data;
    (void)m;
    if (!PyArg_ParseTuple(args, "Os:_cuda_function", &img, &name)) {
        return NULL;
    }
    if (PyBytes_Check(img)) {
        data = PyBytes_AS_STRING(img);
    }
    else if (PyUnicode_Check(img)) {
        data = PyUnicode_AsUTF8(img);
        if (data == NULL) {
            return NULL;
        }
    }
    else {
        PyErr_SetString(PyExc_TypeError, "_cuda_function: the image must be "
                        "bytes (CUBIN) or str (PTX)");
        return NULL;
    }
    if (stax_cuda_module_function(data, name, &module, &fn) < 0) {
        return NULL;
    }
    return PyLong_FromVoidPtr(fn);
}

static int
dims3(PyObject *o, int64_t out[3], const char *what)
{
    Py_ssize_t i, n;
    if (!PyTuple_Check(o) || (n = PyTuple_GET_SIZE(o)) < 1 || n > 3) {
        PyErr_Format(PyExc_TypeError, "_cuda_launch: %s must be a tuple of "
                     "1 to 3 ints", what);
        return -1;
    }
    for (i = 0; i < 3; i++) {
        out[i] = 1;
    }
    for (i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(o, i));
        if (v == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (v < 1 || v > (i == 0 ? 2147483647LL : 65535LL)) {
            PyErr_Format(PyExc_ValueError, "_cuda_launch: %s[%zd] = %lld is "
                         "out of range", what, i, v);
            return -1;
        }
        out[i] = v;
    }
    return 0;
}

/* _C._cuda_launch(fn, grid, block, args): launch fn (from _cuda_function)
 * on the device's stream, asynchronously. Each argument becomes one 8-byte
 * kernel parameter: a CUDA tensor its data address (storage offset
 * included; the kernel declares a pointer), an int a `long long`, a float
 * a `double`. The launch is stream-ordered with every other op, so
 * operands freed after this call are reused only by later work. */
#define LAUNCH_MAX_ARGS 32
static PyObject *
py_cuda_launch(PyObject *m, PyObject *args)
{
    PyObject *fo, *go, *bo, *ao;
    void *fn;
    int64_t grid[3], block[3];
    union { long long i; double d; stax_cuptr p; } vals[LAUNCH_MAX_ARGS];
    void *params[LAUNCH_MAX_ARGS];
    Py_ssize_t i, n;
    (void)m;
    if (!PyArg_ParseTuple(args, "OOOO!:_cuda_launch", &fo, &go, &bo,
                          &PyTuple_Type, &ao)) {
        return NULL;
    }
    fn = PyLong_AsVoidPtr(fo);
    if (fn == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "_cuda_launch: no function");
        }
        return NULL;
    }
    if (dims3(go, grid, "grid") < 0 || dims3(bo, block, "block") < 0) {
        return NULL;
    }
    n = PyTuple_GET_SIZE(ao);
    if (n > LAUNCH_MAX_ARGS) {
        PyErr_Format(PyExc_ValueError, "_cuda_launch: at most %d arguments",
                     LAUNCH_MAX_ARGS);
        return NULL;
    }
    for (i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(ao, i);
        if (StaxTensor_Check(a)) {
            StaxTensor *t = (StaxTensor *)a;
            if (!stax_tensor_is_cuda(t)) {
                PyErr_Format(PyExc_RuntimeError, "_cuda_launch: argument %zd "
                             "is a tensor on the cpu device", i);
                return NULL;
            }
            vals[i].p = (stax_cuptr)(uintptr_t)STAX_TENSOR_DATA(t);
        }
        else if (PyLong_Check(a)) {
            vals[i].i = PyLong_AsLongLong(a);
            if (vals[i].i == -1 && PyErr_Occurred()) {
                return NULL;
            }
        }
        else if (PyFloat_Check(a)) {
            vals[i].d = PyFloat_AS_DOUBLE(a);
        }
        else {
            PyErr_Format(PyExc_TypeError, "_cuda_launch: argument %zd is a "
                         "%.100s (a CUDA tensor, an int or a float expected)",
                         i, Py_TYPE(a)->tp_name);
            return NULL;
        }
        params[i] = &vals[i];
    }
    if (stax_cuda_launch(fn, grid, block, params) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef ops_cuda_methods[] = {
    {"_cuda_mm", py_cuda_mm, METH_VARARGS,
     "_cuda_mm(a, b) -> a @ b through cuBLAS for 2-D / batched 3-D float32 "
     "or float64 CUDA tensors, or NotImplemented."},
    {"_cuda_function", py_cuda_function, METH_VARARGS,
     "_cuda_function(image, name) -> int: load a CUBIN (bytes) or PTX (str) "
     "module and return its kernel `name` for _cuda_launch."},
    {"_cuda_launch", py_cuda_launch, METH_VARARGS,
     "_cuda_launch(fn, grid, block, args): launch a kernel on the device's "
     "stream; CUDA tensors pass their data address, ints a long long, floats "
     "a double."},
    {NULL, NULL, 0, NULL},
};

int
stax_ops_cuda_init(PyObject *m)
{
    return PyModule_AddFunctions(m, ops_cuda_methods);
}
