/* Private header of the backend_nvrtc room (other rooms: backend_nvrtc.h).
 * A pure back end: it never lowers anything itself; it renders the loop IR
 * that the lower room makes (lower.h's stax_kernel), in tinygrad's split:
 *   renderer  nvrtc_render.c   loop IR -> CUDA C
 *   compiler  nvrtc_loader.c   CUDA C -> PTX / CUBIN through NVRTC
 *   runtime   nvrtc_loader.c   module load, alloc, copy, launch (libcuda)
 * and backend_nvrtc_init.c: the stax_backend vtable and the Python
 * functions. libnvrtc and libcuda are dlopen()ed on first use and never
 * linked. */
#ifndef STAX_NVRTC_INTERNAL_H
#define STAX_NVRTC_INTERNAL_H

#include "backend_nvrtc/backend_nvrtc.h"
#include "device/device.h"

#include <stddef.h>
#include <stdint.h>

/* kernel parameters: 8 bytes each, under CUDA's 4 KB */
#define STAX_NVRTC_MAX_BUFS 96
#define STAX_NVRTC_MAX_SIZES 256

/* ---- dtypes (nvrtc_render.c) ---- */
const char *stax_nvrtc_dtype_name(stax_dtype_t dt);
int stax_nvrtc_dtype_size(stax_dtype_t dt);
int stax_nvrtc_is_float(stax_dtype_t dt);

/* ---- renderer (nvrtc_render.c) ---- */
/* number of size arguments the kernel reads (1 + largest STAX_IX_SYM) */
int stax_nvrtc_kernel_nsizes(const stax_kernel *k);
/* a set of the values a walk of a kernel's value DAG has been through
 * (nvrtc_render.c): add returns 1 when v is new (or memory ran out: walk
 * it again), 0 when already there; free slot with PyMem_Free */
typedef struct {
    const void **slot;
    size_t cap, n;
} lv_seen;
int stax_nvrtc_seen_add(lv_seen *s, const void *v);
int stax_nvrtc_max_sym(const stax_ix *ix);
/* CUDA C of one kernel: new str, or NULL + exception (NotImplementedError
 * for what the renderer cannot do). Signature of the rendered kernel:
 *   extern "C" __global__ void <k->name>(T0 *buf0, ..., stax_sizes sizes,
 *                                        int64_t start, int64_t end)
 * with stax_sizes { int64_t v[max(nsizes, 1)]; } passed by value. */
PyObject *stax_nvrtc_render_kernel(const stax_kernel *k, int nsizes);
/* CUDA C of one small kernel built from the same preambles as rendered
 * kernels (a block reduction, 16-byte loads, the math the online softmax
 * and activations call, float16 and float64): what the NVRTC warm-up
 * (nvrtc_loader.c) compiles so that a process's first real compile finds
 * NVRTC started and its code in memory. Static storage; entry "stax_warm". */
const char *stax_nvrtc_warm_source(void);
/* bytes per row element of the kernel's row cache (the loads two row
 * loops share, kept in dynamic shared memory); 0 if it has none. A launch
 * that passes rnumel * this many bytes of dynamic shared memory (and one
 * row per block) turns the cache on; with less the kernel reads global
 * memory in every row loop. */
int64_t stax_nvrtc_row_cache_bytes(const stax_kernel *k);
/* the block sizes (bit BX set for BX threads) at which the kernel runs
 * its register row path (nvrtc_render.c: the shared row read once into
 * registers), taken when the row is aligned; 0: none. Such a launch needs
 * no row cache (dynamic shared memory 0). */
int stax_nvrtc_reg_row_blocks(const stax_kernel *k);
/* the unroll factors of the row loops (TENSORPLAY_NVRTC_UNROLL, default
 * "4"), as the compile cache's tag names them */
const char *stax_nvrtc_unroll_tag(void);
/* "" with the off-by-default rendering knobs off, else "; vec 1; onepass 1" */
const char *stax_nvrtc_knob_tag(void);
/* TENSORPLAY_NVRTC_OPTIONS ("" when unset): NVRTC options of every
 * rendered kernel's compile */
const char *stax_nvrtc_extra_options(void);
/* 1 if the renderer can render loop-IR primitive prim (what the vtable's
 * supports_op answers), else 0 */
int stax_nvrtc_renders_prim(int prim);
/* interval bounds of an index expression, loop variable v in
 * [vlo[v], vhi[v]]; -1 + exception if data-dependent */
int stax_nvrtc_ix_bounds(const stax_ix *ix, const int64_t *sizes,
                         const int64_t *vlo, const int64_t *vhi, int64_t *lo,
                         int64_t *hi);

/* ---- compiler (nvrtc_loader.c) ---- */
extern PyObject *stax_nvrtc_error;     /* tensorplay._C.NVRTCError */
int stax_nvrtc_load(void);             /* 0, or -1 + NVRTCError */
/* start the NVRTC warm-up thread (once; TENSORPLAY_NVRTC_WARMUP=0: never):
 * the device room calls it when CUDA first comes up. No exception. */
void stax_nvrtc_warm_start(void);
/* A CUBIN compile on the background worker (nvrtc_loader.c), the final
 * tier of a kernel (backend_nvrtc_init.c). submit: under the GIL; the job
 * is queued with the caller's reference, or NULL (no exception) when no
 * worker can run it (then compile on the caller's thread). poll: 0 still
 * going; 1 done, *out (malloc'ed, the caller's) and *n the CUBIN; -1
 * failed (*status its nvrtcResult, -1 in a forked child). wait: until it
 * is done or failed (call without the GIL). release: the caller's
 * reference; a job still queued is dropped. wait_all: until the queue is
 * empty and nothing compiles (call without the GIL). */
typedef struct stax_nvrtc_job stax_nvrtc_job;
stax_nvrtc_job *stax_nvrtc_job_submit(const char *src, const char *name,
                                      const char *arch,
                                      const char *const *opts, int nopt);
int stax_nvrtc_job_poll(stax_nvrtc_job *j, char **out, size_t *n, int *status);
void stax_nvrtc_job_wait(stax_nvrtc_job *j);
void stax_nvrtc_job_release(stax_nvrtc_job *j);
void stax_nvrtc_jobs_wait_all(void);
/* CLOCK_MONOTONIC in milliseconds (the warm-up's and STAX_NVRTC_TIMING's) */
double stax_nvrtc_now_ms(void);
/* Compile CUDA C: arch "compute_XY" -> PTX (str), "sm_XY" -> CUBIN (bytes).
 * NULL + NVRTCError carrying the compile log (.log) on failure. */
PyObject *stax_nvrtc_compile_source(const char *src, const char *name,
                                    const char *arch, PyObject *options);
/* the same with C options (after arch and the standard; 62 at most) */
PyObject *stax_nvrtc_compile(const char *src, const char *name, const char *arch,
                             const char *const *extra, int nextra);
/* options (None or a sequence of str; not a str, no NUL, at most cap) as
 * C strings in opts, which live as long as *keep (a new reference, NULL
 * for None); the count, or -1 + TypeError/ValueError */
int stax_nvrtc_option_strings(PyObject *options, const char **opts, int cap,
                              PyObject **keep);

/* ---- runtime (nvrtc_loader.c) ---- */
int stax_nvrtc_cuda_load(void);        /* 0, or -1 + RuntimeError */
/* "sm_XY" of device 0 into out; -1 + exception */
int stax_nvrtc_device_arch(char *out, size_t cap);
/* One launch: copy nbufs host buffers in (nbytes[i] each), run the kernel
 * image (PTX str or CUBIN bytes) with the given sizes/start/end and launch
 * configuration, copy the buffers marked in is_output back. */
int stax_nvrtc_launch_image(PyObject *image, const char *name, int nbufs,
                            char **host, const int64_t *nbytes,
                            const int *is_output, const int64_t *sizes,
                            int nsizes, int64_t start, int64_t end,
                            const int64_t grid[3], const int64_t block[3]);

/* one launch of a loaded kernel on the device's stream (asynchronous);
 * timed: CUDA events around it, read by nvrtc_last_kernel_ms (waits) */
int stax_nvrtc_launch_fn(void *fn, void **params, const int64_t grid[3],
                         const int64_t block[3], int64_t smem, int timed);

/* the most dynamic shared memory (<= want bytes) launches of kernel fn may
 * pass: asks the driver for more than the default 48 KiB where the device
 * allows it (cuFuncSetAttribute) */
int64_t stax_nvrtc_smem_optin(void *fn, int64_t want);
/* the most threads a block of kernel fn may have (the driver's
 * CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK; 1024 if it cannot say) */
int64_t stax_nvrtc_max_threads(void *fn);

/* the event time (ms) of the last timed launch */
double stax_nvrtc_last_ms(void);

/* launch configuration of a kernel at these sizes (nvrtc_render.c);
 * -1 + exception if an extent needs a size argument sizes lacks */
/* the inner (reduction) length of kernel k at these sizes; -1 + exception
 * like stax_nvrtc_launch_config */
int stax_nvrtc_row_length(const stax_kernel *k, const int64_t *sizes,
                          int64_t *rn);
int stax_nvrtc_launch_config(const stax_kernel *k, const int64_t *sizes,
                             int64_t start, int64_t end, int64_t grid[3],
                             int64_t block[3]);

/* ---- Python entry points (nvrtc_loader.c) ---- */
PyObject *stax_nvrtc_py_available(PyObject *self, PyObject *unused);
PyObject *stax_nvrtc_py_version(PyObject *self, PyObject *unused);
PyObject *stax_nvrtc_py_library_path(PyObject *self, PyObject *unused);
PyObject *stax_nvrtc_py_compile(PyObject *self, PyObject *args,
                                PyObject *kwargs);
PyObject *stax_nvrtc_py_cuda_available(PyObject *self, PyObject *unused);
PyObject *stax_nvrtc_py_last_kernel_ms(PyObject *self, PyObject *unused);
PyObject *stax_nvrtc_py_warmup_info(PyObject *self, PyObject *args,
                                    PyObject *kw);

#endif
