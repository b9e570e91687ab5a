/* Public header of the device room: the CUDA runtime. libcuda (and cuBLAS)
 * are dlopen()ed on first use and never linked, so the extension builds
 * and imports without CUDA headers or a GPU. One context (the primary one)
 * and one stream per device; every launch, copy and memset goes on that
 * stream, so work is ordered without events; a host read synchronizes.
 *
 * Memory comes from the caching allocator: blocks are rounded up to a size
 * class (512 bytes below 1 MiB, 2 MiB above), kept in per-class free lists
 * when their tensor dies, and reused by the next request of that class;
 * nothing goes back to the driver on the hot path, only through
 * stax_cuda_empty_cache() (tp.cuda.empty_cache) or once when an
 * allocation fails (then OutOfMemoryError if it fails again).
 *
 * Knows no tensor: pointers and byte counts only. */
#ifndef STAX_DEVICE_H
#define STAX_DEVICE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

typedef unsigned long long stax_cuptr;   /* CUdeviceptr */

/* 0 when a driver and a device are usable; -1 + RuntimeError("CUDA is not
 * available: ...") naming what was looked for. Makes the context current. */
int stax_cuda_init(void);
/* called once, with the GIL, before the first device allocation (the
 * first CUDA tensor: the NVRTC back end starts its warm-up there); must
 * not raise */
void stax_cuda_set_ready_hook(void (*hook)(void));
int stax_cuda_is_available(void);   /* no exception */
int stax_cuda_device_count(void);   /* 0 without a driver; no exception */

/* The storage owner of a device block: a Python object whose dealloc
 * returns the block to the allocator. New reference; *ptr gets the device
 * address. nbytes 0 gives a valid (1-byte class) block. NULL +
 * tensorplay.cuda.OutOfMemoryError (a RuntimeError) or RuntimeError. */
PyObject *stax_cuda_block_new(size_t nbytes, stax_cuptr *ptr);
extern PyObject *stax_cuda_oom_error;     /* OutOfMemoryError type */

/* stream-ordered copies and fills; -1 + RuntimeError with the CUDA error
 * name. d2h synchronizes the stream first (host reads see every write). */
int stax_cuda_h2d(stax_cuptr dst, const void *src, size_t n);
int stax_cuda_d2h(void *dst, stax_cuptr src, size_t n);
int stax_cuda_d2d(stax_cuptr dst, stax_cuptr src, size_t n);
int stax_cuda_memset(stax_cuptr dst, unsigned char v, size_t n);
int stax_cuda_synchronize(void);

/* Kernels: load a module image (PTX text or CUBIN bytes) once; the handle
 * is a CUfunction. Launch on the device's stream, asynchronously. */
int stax_cuda_module_function(const void *image, const char *name,
                              void **module, void **function);
void stax_cuda_module_unload(void *module);
int stax_cuda_launch(void *function, const int64_t grid[3],
                     const int64_t block[3], void **params);
/* "sm_XY" of the current device */
int stax_cuda_arch(char *out, size_t cap);
/* the stream (CUstream) of the current device, for libraries (cuBLAS) */
void *stax_cuda_stream(void);
/* dlsym in libcuda (after stax_cuda_init), NULL if absent */
void *stax_cuda_symbol(const char *name);
/* -1 + RuntimeError("CUDA driver: <what> failed: <name> (<code>)") unless r == 0 */
int stax_cuda_check(int r, const char *what);

/* GEMM through cuBLAS (dlopen'ed): column-major C = op(A) op(B) for
 * float32 (dtype 0), float64 (1), float16 (2) or bfloat16 (3; these two by
 * cublasGemmStridedBatchedEx with float32 accumulation), batched with
 * strides (batch = 1: one product). -1 + RuntimeError("cuBLAS ...") when
 * the library is missing or a call fails, naming the cublasStatus_t. */
int stax_cuda_gemm(int dtype, int transa, int transb, int64_t m, int64_t n,
                   int64_t k, stax_cuptr a, int64_t lda, int64_t stride_a,
                   stax_cuptr b, int64_t ldb, int64_t stride_b, stax_cuptr c,
                   int64_t ldc, int64_t stride_c, int64_t batch);
int stax_cublas_available(void);
/* "CUBLAS_STATUS_..." of a cublasStatus_t (UNKNOWN for other values) */
const char *stax_cublas_status_name(int status);

/* ---- CUDA graphs (graphs.c) ----
 * A program's kernel launches (and cuBLAS products) recorded on the host
 * during one call, then replayed as one graph (a chain of kernel nodes and
 * captured child graphs); a later call updates the nodes whose arguments
 * changed. While a recording is open every other
 * stream operation of this room (copies, fills, synchronizations, cuBLAS,
 * events, memory returned to the driver) first launches what was recorded,
 * one by one, and ends the recording as broken: the stream's order never
 * changes. */
typedef struct stax_cuda_graph stax_cuda_graph;
typedef struct {
    long long replays;         /* graph launches */
    long long builds;          /* graphs instantiated */
    long long updates;         /* kernel nodes given new arguments */
    long long nodes;           /* kernel nodes of the current graph */
    long long direct_launches; /* recorded kernels launched one by one */
} stax_cuda_graph_stats;
/* 1 if libcuda has the graph entry points (cuGraphCreate,
 * cuGraphAddKernelNode(_v2), cuGraphInstantiateWithFlags,
 * cuGraphExecKernelNodeSetParams(_v2), cuGraphLaunch, cuGraphExecDestroy,
 * cuGraphDestroy); else 0 with *why (static text) naming what is missing.
 * No exception. */
int stax_cuda_graphs_available(const char **why);
stax_cuda_graph *stax_cuda_graph_new(void);          /* NULL + MemoryError */
void stax_cuda_graph_free(stax_cuda_graph *g);       /* NULL ok */
/* open a recording into g (one at a time) */
void stax_cuda_graph_begin(stax_cuda_graph *g);
int stax_cuda_recording(void);
/* a launch while recording: 1 recorded (its nparams arguments, psize[i]
 * bytes each, are copied), 0 not recorded (another thread's launch: the
 * recording was broken first; the caller launches it), -1 + exception */
int stax_cuda_record_launch(void *fn, const int64_t grid[3],
                            const int64_t block[3], int64_t smem,
                            void **params, int nparams, const size_t *psize);
/* on: a cuBLAS product (stax_cuda_gemm) while recording becomes a node of
 * the graph (a child graph captured from cuBLAS) instead of breaking the
 * recording; the program turns it on around its own matmul steps only,
 * so that eager work inside a call keeps breaking it */
void stax_cuda_record_products(int on);
/* 1 if products can join graphs: libcuda's child-graph and capture entry
 * points, cuBLAS's cublasSetWorkspace_v2; no exception */
int stax_cuda_products_available(void);
/* launch what was recorded one by one and end the recording as broken
 * (no-op when none is open); -1 + RuntimeError naming the CUDA error */
int stax_cuda_record_break(void);
/* close g's recording: replay 1 launches it as g's graph (built on first
 * use or when the number of launches changed; nodes whose launch changed
 * updated), 0 one by one. 0 done, 1 the recording had broken (its
 * launches ran one by one), -1 + RuntimeError("CUDA driver: <call>
 * failed: CUDA_ERROR_...") after launching this call's kernels one by one
 * (the graph is dropped; the next replay builds a new one). */
int stax_cuda_graph_end(stax_cuda_graph *g, int replay);
void stax_cuda_graph_stats_get(const stax_cuda_graph *g,
                               stax_cuda_graph_stats *s);
/* executable graphs alive (instantiated, not yet destroyed) */
long long stax_cuda_graphs_live(void);
/* tests: "missing" hides the graph entry points, "" restores them; a
 * driver call's name (cuGraphCreate, cuGraphAddKernelNode,
 * cuGraphInstantiateWithFlags, cuGraphExecKernelNodeSetParams,
 * cuGraphLaunch) makes its next call fail with CUDA_ERROR_NOT_SUPPORTED */
void stax_cuda_graph_inject(const char *what);
/* a launch with dynamic shared memory (stax_cuda_launch: none) */
int stax_cuda_launch_ex(void *function, const int64_t grid[3],
                        const int64_t block[3], int64_t smem, void **params);

/* room init: tensorplay._C functions cuda_* and OutOfMemoryError */
int stax_device_module_init(PyObject *m);

#endif
