/* Inside the device room only: what device.c and graphs.c share. */
#ifndef STAX_DEVICE_INTERNAL_H
#define STAX_DEVICE_INTERNAL_H

#include "device/device.h"

/* one cuBLAS product, as stax_cuda_gemm takes it: recorded into a CUDA
 * graph by value (its bytes compare equal when nothing changed) */
typedef struct {
    int dtype, transa, transb, pad;
    int64_t m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch;
    stax_cuptr a, b, c;
} stax_gemm_args;
/* no padding: its bytes are compared whole */
_Static_assert(sizeof(stax_gemm_args) == 4 * sizeof(int) + 13 * 8,
               "stax_gemm_args has padding");

/* issue g on the room's stream (cuBLAS loaded, sizes checked) */
int stax_cuda_gemm_issue(const stax_gemm_args *g);
/* capture g into a new CUgraph (*graph, the caller destroys it): on a
 * capture stream of its own, cuBLAS on a workspace of the room's (no
 * allocation inside the capture); -1 + RuntimeError naming the call */
int stax_cuda_gemm_capture(const stax_gemm_args *g, void **graph);
/* what captures need, made once (a capture stream, a 32 MiB cuBLAS
 * workspace from the caching allocator): 0, or -1 + exception (an OOM
 * after the cache was emptied) */
int stax_cuda_capture_ready(void);
/* 1 if cuBLAS and libcuda have what capturing a product needs
 * (cublasSetWorkspace_v2, cuStreamBeginCapture_v2, cuStreamEndCapture);
 * no exception */
int stax_cuda_products_capturable(void);
/* a product while recording (graphs.c): 1 recorded, 0 not recorded (no
 * recording, or another thread's: broken first; the caller issues it),
 * -1 + exception */
int stax_cuda_record_gemm(const stax_gemm_args *g);

#endif
