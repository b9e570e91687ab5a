/* matmul on CUDA tensors through cuBLAS (the device room loads it):
 * _C._cuda_mm(a, b) for 2-D (m, k) @ (k, n) and batched 3-D (B, m, k) @
 * (B, k, n), float32 / float64, each operand row-major or transposed
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
        || (a->dtype != STAX_FLOAT32 && a->dtype != STAX_FLOAT64)
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
    if (stax_cuda_gemm(a->dtype == STAX_FLOAT32 ? 0 : 1, opb, opa, N, M, K,
                       (stax_cuptr)(uintptr_t)STAX_TENSOR_DATA(b), ldb, sb,
                       (stax_cuptr)(uintptr_t)STAX_TENSOR_DATA(a), lda, sa,
                       (stax_cuptr)(uintptr_t)STAX_TENSOR_DATA(c), N, M * N,
                       B) < 0) {
        Py_DECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}

static PyMethodDef ops_cuda_methods[] = {
    {"_cuda_mm", py_cuda_mm, METH_VARARGS,
     "_cuda_mm(a, b) -> a @ b through cuBLAS for 2-D / batched 3-D float32 "
     "or float64 CUDA tensors, or NotImplemented."},
    {NULL, NULL, 0, NULL},
};

int
stax_ops_cuda_init(PyObject *m)
{
    return PyModule_AddFunctions(m, ops_cuda_methods);
}
