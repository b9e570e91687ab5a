/* The CUDA runtime (device.h): libcuda loaded with dlopen and declared
 * here (no CUDA headers), the primary context and one stream of device 0,
 * the caching allocator and the Python functions tensorplay.cuda wraps.
 * Everything runs under the GIL. */
#include "device/device_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

#define CU_ERR_OOM 2
#define CU_ATTR_CC_MAJOR 75
#define CU_ATTR_CC_MINOR 76

static struct {
    int tried, ok, count;
    void *lib;
    char why[1024];
    CUcontext ctx;
    CUdevice dev;
    CUstream stream;
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    CUresult (*MemAlloc)(stax_cuptr *, size_t);
    CUresult (*MemFree)(stax_cuptr);
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*MemcpyHtoDAsync)(stax_cuptr, const void *, size_t, CUstream);
    CUresult (*MemcpyDtoHAsync)(void *, stax_cuptr, size_t, CUstream);
    CUresult (*MemcpyDtoDAsync)(stax_cuptr, stax_cuptr, size_t, CUstream);
    CUresult (*MemsetD8Async)(stax_cuptr, unsigned char, size_t, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*EventDestroy)(CUevent);
} cu;

PyObject *stax_cuda_oom_error = NULL;

static void
why_add(const char *what)
{
    size_t n = strlen(cu.why), w = strlen(what);
    if (n && n + 2 < sizeof(cu.why)) {
        memcpy(cu.why + n, "; ", 2);
        n += 2;
    }
    if (n + w >= sizeof(cu.why)) {
        w = sizeof(cu.why) - n - 1;
    }
    memcpy(cu.why + n, what, w);
    cu.why[n + w] = '\0';
}

int
stax_cuda_check(int r, const char *what)
{
    const char *name = NULL, *s = NULL;
    if (r == 0) {
        return 0;
    }
    if (cu.GetErrorName == NULL || cu.GetErrorName(r, &name) != 0
        || name == NULL) {
        name = "CUDA_ERROR_UNKNOWN";
    }
    if (cu.GetErrorString == NULL || cu.GetErrorString(r, &s) != 0
        || s == NULL) {
        s = "unknown error";
    }
    PyErr_Format(PyExc_RuntimeError, "CUDA driver: %s failed: %s: %s (%d)",
                 what, name, s, r);
    return -1;
}

#define CU_SYM(field, sym)                                               \
    do {                                                                 \
        *(void **)&cu.field = dlsym(cu.lib, sym);                        \
        if (cu.field == NULL) {                                          \
            why_add("libcuda lacks " sym);                               \
            goto fail;                                                   \
        }                                                                \
    } while (0)

static void (*ready_hook)(void);

static void
load(void)
{
    static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
    const char *env = getenv("TENSORPLAY_LIBCUDA");
    cu.tried = 1;
    if (env != NULL && *env) {
        cu.lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (cu.lib == NULL) {
            const char *e = dlerror();
            why_add(e ? e : env);
        }
    }
    for (int i = 0; names[i] != NULL && cu.lib == NULL; i++) {
        cu.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (cu.lib == NULL) {
            const char *e = dlerror();
            why_add(e ? e : names[i]);
        }
    }
    if (cu.lib == NULL) {
        goto fail;
    }
    CU_SYM(Init, "cuInit");
    CU_SYM(DeviceGetCount, "cuDeviceGetCount");
    CU_SYM(DeviceGet, "cuDeviceGet");
    CU_SYM(DeviceGetAttribute, "cuDeviceGetAttribute");
    CU_SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    CU_SYM(CtxSetCurrent, "cuCtxSetCurrent");
    CU_SYM(ModuleLoadData, "cuModuleLoadData");
    CU_SYM(ModuleUnload, "cuModuleUnload");
    CU_SYM(ModuleGetFunction, "cuModuleGetFunction");
    CU_SYM(LaunchKernel, "cuLaunchKernel");
    CU_SYM(MemAlloc, "cuMemAlloc_v2");
    CU_SYM(MemFree, "cuMemFree_v2");
    CU_SYM(MemGetInfo, "cuMemGetInfo_v2");
    CU_SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
    CU_SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
    CU_SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
    CU_SYM(MemsetD8Async, "cuMemsetD8Async");
    CU_SYM(StreamCreate, "cuStreamCreate");
    CU_SYM(StreamSynchronize, "cuStreamSynchronize");
    CU_SYM(GetErrorString, "cuGetErrorString");
    CU_SYM(GetErrorName, "cuGetErrorName");
    CU_SYM(EventCreate, "cuEventCreate");
    CU_SYM(EventRecord, "cuEventRecord");
    CU_SYM(EventSynchronize, "cuEventSynchronize");
    CU_SYM(EventElapsedTime, "cuEventElapsedTime");
    CU_SYM(EventDestroy, "cuEventDestroy_v2");
    if (cu.Init(0) != 0) {
        why_add("cuInit failed: the NVIDIA driver found no usable GPU");
        goto fail;
    }
    if (cu.DeviceGetCount(&cu.count) != 0 || cu.count < 1) {
        cu.count = 0;
        why_add("libcuda loaded but it reports no CUDA device");
        goto fail;
    }
    if (cu.DeviceGet(&cu.dev, 0) != 0
        || cu.PrimaryCtxRetain(&cu.ctx, cu.dev) != 0
        || cu.CtxSetCurrent(cu.ctx) != 0) {
        why_add("cannot open CUDA device 0");
        goto fail;
    }
    /* a blocking stream: ordered with legacy-stream work of other
     * libraries on the same context too (torch, CuPy through DLPack) */
    if (cu.StreamCreate(&cu.stream, 0) != 0) {
        why_add("cannot create a stream on device 0");
        goto fail;
    }
    cu.ok = 1;
    return;
fail:
    cu.count = 0;
}

void
stax_cuda_set_ready_hook(void (*hook)(void))
{
    ready_hook = hook;
}

int
stax_cuda_init(void)
{
    if (!cu.tried) {
        load();
    }
    if (cu.ok) {
        return stax_cuda_check(cu.CtxSetCurrent(cu.ctx), "cuCtxSetCurrent");
    }
    PyErr_Format(PyExc_RuntimeError,
                 "CUDA is not available: tensorplay looked for the NVIDIA "
                 "driver library (libcuda.so.1, or $TENSORPLAY_LIBCUDA) and a "
                 "CUDA device: %s", cu.why);
    return -1;
}

int
stax_cuda_is_available(void)
{
    if (stax_cuda_init() < 0) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

int
stax_cuda_device_count(void)
{
    return stax_cuda_is_available() ? cu.count : 0;
}

void *
stax_cuda_stream(void)
{
    return cu.stream;
}

void *
stax_cuda_symbol(const char *name)
{
    return cu.lib != NULL ? dlsym(cu.lib, name) : NULL;
}

/* ------------------------------------------------------ caching allocator */

/* before memory goes back to the driver: a launch still recorded (not yet
 * made) may use it. An error there is written as unraisable: the free
 * path has no way to report it, and the launches were already doomed. */
static void
flush_recording(void)
{
    if (stax_cuda_recording() && stax_cuda_record_break() < 0) {
        PyErr_WriteUnraisable(NULL);
    }
}

#define SMALL_LIMIT ((size_t)1 << 20)
#define SMALL_ROUND ((size_t)512)
#define LARGE_ROUND ((size_t)2 << 20)
#define NBINS 4096           /* open addressing over the size classes */

typedef struct free_blk {
    stax_cuptr ptr;
    struct free_blk *next;
} free_blk;

static struct {
    size_t size;             /* 0: empty slot */
    free_blk *head;
} bins[NBINS];
static int64_t mem_allocated, mem_peak, mem_reserved;
static int64_t n_driver_allocs;

static size_t
size_class(size_t n)
{
    if (n == 0) {
        n = 1;
    }
    if (n <= SMALL_LIMIT) {
        return (n + SMALL_ROUND - 1) & ~(SMALL_ROUND - 1);
    }
    return (n + LARGE_ROUND - 1) & ~(LARGE_ROUND - 1);
}

static int
bin_of(size_t size, int create)
{
    size_t h = (size / SMALL_ROUND) * 2654435761u;
    for (int i = 0; i < NBINS; i++) {
        int s = (int)((h + (size_t)i) % NBINS);
        if (bins[s].size == size) {
            return s;
        }
        if (bins[s].size == 0) {
            if (!create) {
                return -1;
            }
            bins[s].size = size;
            return s;
        }
    }
    return -1;
}

static void
release_block(stax_cuptr ptr, size_t size)
{
    int s = bin_of(size, 1);
    free_blk *b = s >= 0 ? malloc(sizeof(*b)) : NULL;
    mem_allocated -= (int64_t)size;
    if (b == NULL) {         /* no bookkeeping room: give it back */
        flush_recording();
        if (cu.ok) {
            cu.MemFree(ptr);
        }
        mem_reserved -= (int64_t)size;
        return;
    }
    b->ptr = ptr;
    b->next = bins[s].head;
    bins[s].head = b;
}

static int64_t
empty_cache(void)
{
    int64_t freed = 0;
    /* a recorded launch not yet made may use a cached block */
    flush_recording();
    for (int s = 0; s < NBINS; s++) {
        while (bins[s].head != NULL) {
            free_blk *b = bins[s].head;
            bins[s].head = b->next;
            if (cu.ok) {
                cu.MemFree(b->ptr);
            }
            freed += (int64_t)bins[s].size;
            free(b);
        }
    }
    mem_reserved -= freed;
    return freed;
}

static int
take_block(size_t size, stax_cuptr *ptr)
{
    int s = bin_of(size, 0);
    CUresult r;
    if (s >= 0 && bins[s].head != NULL) {
        free_blk *b = bins[s].head;
        bins[s].head = b->next;
        *ptr = b->ptr;
        free(b);
        goto got;
    }
    if (stax_cuda_init() < 0) {
        return -1;
    }
    r = cu.MemAlloc(ptr, size);
    if (r == CU_ERR_OOM) {
        /* once: what the cache holds goes back to the driver, then retry */
        empty_cache();
        r = cu.MemAlloc(ptr, size);
    }
    if (r == CU_ERR_OOM) {
        size_t fr = 0, tot = 0;
        char msg[512];
        cu.MemGetInfo(&fr, &tot);
        /* PyErr_Format has no %f */
        snprintf(msg, sizeof(msg),
                 "CUDA out of memory. Tried to allocate %.2f MiB. GPU 0 has a "
                 "total capacity of %.2f GiB of which %.2f GiB is free. Of the "
                 "allocated memory %.2f GiB is allocated by tensorplay, and "
                 "%.2f GiB is reserved by tensorplay but unallocated.",
                 (double)size / (1 << 20), (double)tot / (1 << 30),
                 (double)fr / (1 << 30), (double)mem_allocated / (1 << 30),
                 (double)(mem_reserved - mem_allocated) / (1 << 30));
        PyErr_SetString(stax_cuda_oom_error, msg);
        return -1;
    }
    if (stax_cuda_check(r, "cuMemAlloc") < 0) {
        return -1;
    }
    n_driver_allocs++;
    mem_reserved += (int64_t)size;
got:
    mem_allocated += (int64_t)size;
    if (mem_allocated > mem_peak) {
        mem_peak = mem_allocated;
    }
    return 0;
}

typedef struct {
    PyObject_HEAD
    stax_cuptr ptr;
    size_t size;             /* its size class */
} CudaBlock;

static void
block_dealloc(PyObject *o)
{
    CudaBlock *b = (CudaBlock *)o;
    PyTypeObject *tp = Py_TYPE(o);
    if (b->ptr) {
        release_block(b->ptr, b->size);
    }
    tp->tp_free(o);
    Py_DECREF(tp);
}

static PyObject *
block_repr(PyObject *o)
{
    CudaBlock *b = (CudaBlock *)o;
    return PyUnicode_FromFormat("<CUDA block 0x%llx, %zu bytes>",
                                (unsigned long long)b->ptr, b->size);
}

static PyType_Slot block_slots[] = {
    {Py_tp_dealloc, block_dealloc},
    {Py_tp_repr, block_repr},
    {0, NULL},
};

static PyType_Spec block_spec = {
    .name = "tensorplay._C._CudaBlock",
    .basicsize = sizeof(CudaBlock),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = block_slots,
};

static PyTypeObject *block_type;

PyObject *
stax_cuda_block_new(size_t nbytes, stax_cuptr *ptr)
{
    size_t size = size_class(nbytes);
    CudaBlock *b = NULL;
    stax_cuptr p = 0;
    static int ready_told;
    if (!ready_told && ready_hook != NULL) {
        ready_told = 1;        /* the first CUDA tensor (not a mere
                                  tp.cuda.is_available()) */
        ready_hook();
    }
    if (take_block(size, &p) < 0) {
        return NULL;
    }
    b = PyObject_New(CudaBlock, block_type);
    if (b == NULL) {
        release_block(p, size);
        return NULL;
    }
    b->ptr = p;
    b->size = size;
    *ptr = p;
    return (PyObject *)b;
}

/* ------------------------------------------------------ copies, launches */

int
stax_cuda_h2d(stax_cuptr dst, const void *src, size_t n)
{
    if (n == 0) {
        return 0;
    }
    if (stax_cuda_record_break() < 0 || stax_cuda_init() < 0) {
        return -1;
    }
    /* from pageable memory the driver stages the bytes before returning,
     * so the host buffer may go away at once */
    return stax_cuda_check(cu.MemcpyHtoDAsync(dst, src, n, cu.stream),
                           "cuMemcpyHtoDAsync");
}

int
stax_cuda_d2h(void *dst, stax_cuptr src, size_t n)
{
    CUresult r;
    if (stax_cuda_record_break() < 0 || stax_cuda_init() < 0) {
        return -1;
    }
    if (n > 0 && stax_cuda_check(cu.MemcpyDtoHAsync(dst, src, n, cu.stream),
                                 "cuMemcpyDtoHAsync") < 0) {
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    r = cu.StreamSynchronize(cu.stream);
    Py_END_ALLOW_THREADS
    return stax_cuda_check(r, "cuStreamSynchronize");
}

int
stax_cuda_d2d(stax_cuptr dst, stax_cuptr src, size_t n)
{
    if (n == 0) {
        return 0;
    }
    if (stax_cuda_record_break() < 0 || stax_cuda_init() < 0) {
        return -1;
    }
    return stax_cuda_check(cu.MemcpyDtoDAsync(dst, src, n, cu.stream),
                           "cuMemcpyDtoDAsync");
}

int
stax_cuda_memset(stax_cuptr dst, unsigned char v, size_t n)
{
    if (n == 0) {
        return 0;
    }
    if (stax_cuda_record_break() < 0 || stax_cuda_init() < 0) {
        return -1;
    }
    return stax_cuda_check(cu.MemsetD8Async(dst, v, n, cu.stream),
                           "cuMemsetD8Async");
}

int
stax_cuda_synchronize(void)
{
    CUresult r;
    if (stax_cuda_record_break() < 0 || stax_cuda_init() < 0) {
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    r = cu.StreamSynchronize(cu.stream);
    Py_END_ALLOW_THREADS
    return stax_cuda_check(r, "cuStreamSynchronize");
}

int
stax_cuda_module_function(const void *image, const char *name,
                          void **module, void **function)
{
    CUmodule mod = NULL;
    CUfunction fn = NULL;
    if (stax_cuda_init() < 0
        || stax_cuda_check(cu.ModuleLoadData(&mod, image),
                           "cuModuleLoadData") < 0) {
        return -1;
    }
    if (stax_cuda_check(cu.ModuleGetFunction(&fn, mod, name),
                        "cuModuleGetFunction") < 0) {
        cu.ModuleUnload(mod);
        return -1;
    }
    *module = mod;
    *function = fn;
    return 0;
}

void
stax_cuda_module_unload(void *module)
{
    if (module != NULL && cu.ok) {
        cu.ModuleUnload((CUmodule)module);
    }
}

int
stax_cuda_launch_ex(void *function, const int64_t grid[3],
                    const int64_t block[3], int64_t smem, void **params)
{
    /* a launch that is not recorded runs after what was */
    if (stax_cuda_record_break() < 0) {
        return -1;
    }
    return stax_cuda_check(
        cu.LaunchKernel((CUfunction)function, (unsigned)grid[0],
                        (unsigned)grid[1], (unsigned)grid[2],
                        (unsigned)block[0], (unsigned)block[1],
                        (unsigned)block[2], (unsigned)smem, cu.stream, params,
                        NULL),
        "cuLaunchKernel");
}

int
stax_cuda_launch(void *function, const int64_t grid[3],
                 const int64_t block[3], void **params)
{
    return stax_cuda_launch_ex(function, grid, block, 0, params);
}

int
stax_cuda_arch(char *out, size_t cap)
{
    int ma = 0, mi = 0;
    if (stax_cuda_init() < 0
        || stax_cuda_check(cu.DeviceGetAttribute(&ma, CU_ATTR_CC_MAJOR,
                                                 cu.dev),
                           "cuDeviceGetAttribute") < 0
        || stax_cuda_check(cu.DeviceGetAttribute(&mi, CU_ATTR_CC_MINOR,
                                                 cu.dev),
                           "cuDeviceGetAttribute") < 0) {
        return -1;
    }
    snprintf(out, cap, "sm_%d%d", ma, mi);
    return 0;
}

/* ------------------------------------------------------------- cuBLAS */

typedef struct cublasContext *cublasHandle_t;

static struct {
    int tried;
    void *lib;
    cublasHandle_t handle;
    char why[1024];
    int (*Create)(cublasHandle_t *);
    int (*SetStream)(cublasHandle_t, void *);
    int (*SetWorkspace)(cublasHandle_t, void *, size_t);   /* optional */
    void *on;                  /* the stream the handle is set to */
    int (*Sgemm)(cublasHandle_t, int, int, int, int, int, const float *,
                 const float *, int, long long, const float *, int,
                 long long, const float *, float *, int, long long, int);
    int (*Dgemm)(cublasHandle_t, int, int, int, int, int, const double *,
                 const double *, int, long long, const double *, int,
                 long long, const double *, double *, int, long long, int);
    /* cublasGemmStridedBatchedEx: typed operands, a compute type, an algo */
    int (*GemmEx)(cublasHandle_t, int, int, int, int, int, const void *,
                  const void *, int, int, long long, const void *, int, int,
                  long long, const void *, void *, int, int, long long, int,
                  int, int);
} cb;

/* cublasStatus_t names (cublas_api.h); the library's own
 * cublasGetStatusName is newer than some libcublas we accept */
const char *
stax_cublas_status_name(int status)
{
    switch (status) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

static void *
cublas_open(void)
{
    static const char *const rel[] = {
        "nvidia/cu13/lib/libcublas.so.13", "nvidia/cublas/lib/libcublas.so.13",
        "nvidia/cublas/lib/libcublas.so.12", NULL,
    };
    static const char *const names[] = {
        "libcublas.so.13", "libcublas.so.12", "libcublas.so",
        "/usr/local/cuda/lib64/libcublas.so", NULL,
    };
    const char *env = getenv("TENSORPLAY_CUBLAS");
    void *h = NULL;
    if (env != NULL && *env && (h = dlopen(env, RTLD_NOW | RTLD_LOCAL))) {
        return h;
    }
    for (int i = 0; names[i] != NULL; i++) {
        if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)) != NULL) {
            return h;
        }
    }
    PyObject *path = PySys_GetObject("path");   /* borrowed */
    for (Py_ssize_t i = 0; path && PyList_Check(path)
                           && i < PyList_GET_SIZE(path); i++) {
        const char *dir = PyUnicode_Check(PyList_GET_ITEM(path, i))
            ? PyUnicode_AsUTF8(PyList_GET_ITEM(path, i)) : NULL;
        if (dir == NULL) {
            PyErr_Clear();
            continue;
        }
        for (int j = 0; rel[j] != NULL; j++) {
            char full[4096];
            snprintf(full, sizeof(full), "%s/%s", *dir ? dir : ".", rel[j]);
            if ((h = dlopen(full, RTLD_NOW | RTLD_LOCAL)) != NULL) {
                return h;
            }
        }
    }
    return NULL;
}

static int
cublas_load(void)
{
    if (!cb.tried) {
        cb.tried = 1;
        if (stax_cuda_init() < 0) {
            return -1;
        }
        cb.lib = cublas_open();
        if (cb.lib == NULL) {
            snprintf(cb.why, sizeof(cb.why), "libcublas not found "
                     "($TENSORPLAY_CUBLAS, libcublas.so.13/.12, "
                     "/usr/local/cuda/lib64, the nvidia-cublas wheels)");
            goto fail;
        }
        *(void **)&cb.Create = dlsym(cb.lib, "cublasCreate_v2");
        *(void **)&cb.SetStream = dlsym(cb.lib, "cublasSetStream_v2");
        *(void **)&cb.SetWorkspace = dlsym(cb.lib, "cublasSetWorkspace_v2");
        *(void **)&cb.Sgemm = dlsym(cb.lib, "cublasSgemmStridedBatched");
        *(void **)&cb.Dgemm = dlsym(cb.lib, "cublasDgemmStridedBatched");
        *(void **)&cb.GemmEx = dlsym(cb.lib, "cublasGemmStridedBatchedEx");
        if (!cb.Create || !cb.SetStream || !cb.Sgemm || !cb.Dgemm
            || !cb.GemmEx) {
            snprintf(cb.why, sizeof(cb.why), "libcublas lacks a symbol");
            goto fail;
        }
        int r = cb.Create(&cb.handle);
        if (r == 0) {
            r = cb.SetStream(cb.handle, cu.stream);
            cb.on = cu.stream;
        }
        if (r != 0) {
            snprintf(cb.why, sizeof(cb.why), "cublasCreate failed: %s (%d)",
                     stax_cublas_status_name(r), r);
            cb.handle = NULL;
            goto fail;
        }
        return 0;
    fail:;
    }
    if (cb.handle != NULL) {
        return 0;
    }
    if (!PyErr_Occurred()) {
        PyErr_Format(PyExc_RuntimeError, "cuBLAS is not available: %s",
                     cb.why);
    }
    return -1;
}

int
stax_cublas_available(void)
{
    if (cublas_load() < 0) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static int in_capture;         /* stax_cuda_gemm_capture is issuing */

/* the cuBLAS handle on `stream` (cublasSetStream also puts the handle
 * back on cuBLAS's default workspace pool) */
static int
handle_on(void *stream)
{
    int r;
    if (cb.on == stream) {
        return 0;
    }
    r = cb.SetStream(cb.handle, stream);
    if (r != 0) {
        PyErr_Format(PyExc_RuntimeError, "cuBLAS: cublasSetStream failed: "
                     "%s (%d)", stax_cublas_status_name(r), r);
        return -1;
    }
    cb.on = stream;
    return 0;
}

int
stax_cuda_gemm_issue(const stax_gemm_args *g)
{
    int r;
    /* outside a capture every product runs on the room's stream (a
     * capture that could not hand the handle back is mended here) */
    if (!in_capture && handle_on(cu.stream) < 0) {
        return -1;
    }
    if (g->dtype == 0) {
        const float one = 1.0f, zero = 0.0f;
        r = cb.Sgemm(cb.handle, g->transa, g->transb, (int)g->m, (int)g->n,
                     (int)g->k, &one, (const float *)(uintptr_t)g->a,
                     (int)g->lda, g->stride_a, (const float *)(uintptr_t)g->b,
                     (int)g->ldb, g->stride_b, &zero,
                     (float *)(uintptr_t)g->c, (int)g->ldc, g->stride_c,
                     (int)g->batch);
    }
    else if (g->dtype == 1) {
        const double one = 1.0, zero = 0.0;
        r = cb.Dgemm(cb.handle, g->transa, g->transb, (int)g->m, (int)g->n,
                     (int)g->k, &one, (const double *)(uintptr_t)g->a,
                     (int)g->lda, g->stride_a,
                     (const double *)(uintptr_t)g->b, (int)g->ldb,
                     g->stride_b, &zero, (double *)(uintptr_t)g->c,
                     (int)g->ldc, g->stride_c, (int)g->batch);
    }
    else {
        /* float16 / bfloat16 operands and result, float32 accumulation and
         * scalars (torch's CUDA half GEMM): cudaDataType CUDA_R_16F = 2,
         * CUDA_R_16BF = 14; CUBLAS_COMPUTE_32F = 68, CUBLAS_GEMM_DEFAULT */
        const float one = 1.0f, zero = 0.0f;
        int t = g->dtype == 2 ? 2 : 14;
        r = cb.GemmEx(cb.handle, g->transa, g->transb, (int)g->m, (int)g->n,
                      (int)g->k, &one, (const void *)(uintptr_t)g->a, t,
                      (int)g->lda, g->stride_a, (const void *)(uintptr_t)g->b,
                      t, (int)g->ldb, g->stride_b, &zero,
                      (void *)(uintptr_t)g->c, t, (int)g->ldc, g->stride_c,
                      (int)g->batch, 68, -1);
    }
    if (r != 0) {
        PyErr_Format(PyExc_RuntimeError, "cuBLAS: %s failed: %s (%d)",
                     g->dtype <= 1 ? (g->dtype == 0 ? "cublasSgemmStridedBatched"
                                                    : "cublasDgemmStridedBatched")
                                   : "cublasGemmStridedBatchedEx",
                     stax_cublas_status_name(r), r);
        return -1;
    }
    return 0;
}

/* what a capture needs, made once: a non-blocking stream of its own (the
 * legacy stream is never involved) and a workspace (cuBLAS allocating its
 * own inside a capture would put memory nodes in the graph; 32 MiB, what
 * Hopper's cuBLAS asks for by default) */
static struct {
    CUstream stream;
    stax_cuptr ws;
    size_t wsbytes;
    CUresult (*Begin)(CUstream, int);
    CUresult (*End)(CUstream, void **);
} capt;

int
stax_cuda_capture_ready(void)
{
    if (capt.stream != NULL) {
        return 0;
    }
    if (cublas_load() < 0) {
        return -1;
    }
    *(void **)&capt.Begin = stax_cuda_symbol("cuStreamBeginCapture_v2");
    *(void **)&capt.End = stax_cuda_symbol("cuStreamEndCapture");
    if (capt.Begin == NULL || capt.End == NULL || cb.SetWorkspace == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "CUDA graphs: libcuda lacks "
                        "cuStreamBeginCapture_v2/cuStreamEndCapture or "
                        "libcublas lacks cublasSetWorkspace_v2");
        return -1;
    }
    capt.wsbytes = (size_t)32 << 20;
    if (take_block(capt.wsbytes, &capt.ws) < 0) {   /* OOM: the cache
                                                        emptied, retried */
        capt.ws = 0;
        return -1;
    }
    if (stax_cuda_check(cu.StreamCreate(&capt.stream, 1 /* NON_BLOCKING */),
                        "cuStreamCreate") < 0) {
        release_block(capt.ws, capt.wsbytes);
        capt.ws = 0;
        capt.stream = NULL;
        return -1;
    }
    return 0;
}

int
stax_cuda_gemm_capture(const stax_gemm_args *g, void **graph)
{
    void *gr = NULL;
    int r, rc = -1;
    CUresult e;
    *graph = NULL;
    if (cublas_load() < 0 || stax_cuda_capture_ready() < 0
        || handle_on(capt.stream) < 0) {
        goto restore;
    }
    r = cb.SetWorkspace(cb.handle, (void *)(uintptr_t)capt.ws, capt.wsbytes);
    if (r != 0) {
        PyErr_Format(PyExc_RuntimeError, "cuBLAS: cublasSetWorkspace failed: "
                     "%s (%d)", stax_cublas_status_name(r), r);
        goto restore;
    }
    /* thread-local: another thread's allocation is no error of ours */
    if (stax_cuda_check(capt.Begin(capt.stream, 1), "cuStreamBeginCapture") < 0) {
        goto restore;
    }
    in_capture = 1;
    r = stax_cuda_gemm_issue(g);
    in_capture = 0;
    e = capt.End(capt.stream, &gr);          /* always: the stream leaves
                                                capture mode */
    if (r < 0) {
        goto restore;
    }
    if (stax_cuda_check(e, "cuStreamEndCapture") < 0) {
        goto restore;
    }
    if (gr == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "CUDA driver: cuStreamEndCapture "
                        "returned no graph");
        goto restore;
    }
    *graph = gr;
    gr = NULL;
    rc = 0;
restore:
    /* back on the room's stream (and cuBLAS's default workspace pool); a
     * failure here is mended by the next product */
    if (cb.handle != NULL && handle_on(cu.stream) < 0) {
        if (rc == 0) {
            rc = -1;
        }
        else {
            PyErr_Clear();     /* the first error is the one to report */
        }
    }
    if (gr != NULL || (rc < 0 && *graph != NULL)) {
        void (*destroy)(void *) = (void (*)(void *))stax_cuda_symbol("cuGraphDestroy");
        if (destroy != NULL) {
            destroy(gr != NULL ? gr : *graph);
        }
        *graph = NULL;
    }
    return rc;
}

int
stax_cuda_products_capturable(void)
{
    if (cublas_load() < 0) {
        PyErr_Clear();
        return 0;
    }
    return cb.SetWorkspace != NULL
           && stax_cuda_symbol("cuStreamBeginCapture_v2") != NULL
           && stax_cuda_symbol("cuStreamEndCapture") != NULL;
}

int
stax_cuda_gemm(int dtype, int transa, int transb, int64_t m, int64_t n,
               int64_t k, stax_cuptr a, int64_t lda, int64_t stride_a,
               stax_cuptr b, int64_t ldb, int64_t stride_b, stax_cuptr c,
               int64_t ldc, int64_t stride_c, int64_t batch)
{
    stax_gemm_args g;
    int r;
    if (cublas_load() < 0) {
        return -1;
    }
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX
        || ldb > INT32_MAX || ldc > INT32_MAX || batch > INT32_MAX) {
        PyErr_SetString(PyExc_RuntimeError, "cuBLAS: a matrix dimension "
                        "exceeds 2^31 - 1");
        return -1;
    }
    memset(&g, 0, sizeof(g));       /* padding compares equal */
    g.dtype = dtype;
    g.transa = transa;
    g.transb = transb;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = a;
    g.lda = lda;
    g.stride_a = stride_a;
    g.b = b;
    g.ldb = ldb;
    g.stride_b = stride_b;
    g.c = c;
    g.ldc = ldc;
    g.stride_c = stride_c;
    g.batch = batch;
    /* inside a CUDA graph's recording the product becomes a node of it */
    r = stax_cuda_record_gemm(&g);
    if (r != 0) {
        return r < 0 ? -1 : 0;
    }
    return stax_cuda_gemm_issue(&g);
}

/* ------------------------------------------------------------- events */

typedef struct {
    PyObject_HEAD
    CUevent ev;
} CudaEvent;

static PyTypeObject *event_type;

static PyObject *
event_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"enable_timing", "blocking", "interprocess",
                             NULL};
    int timing = 0, blocking = 0, ipc = 0;
    CudaEvent *e;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|ppp:Event", kwlist, &timing,
                                     &blocking, &ipc)
        || stax_cuda_init() < 0) {
        return NULL;
    }
    e = (CudaEvent *)tp->tp_alloc(tp, 0);
    if (e == NULL) {
        return NULL;
    }
    /* CU_EVENT_DISABLE_TIMING = 2 */
    if (stax_cuda_check(cu.EventCreate(&e->ev, timing ? 0 : 2),
                        "cuEventCreate") < 0) {
        e->ev = NULL;
        Py_DECREF(e);
        return NULL;
    }
    return (PyObject *)e;
}

static void
event_dealloc(PyObject *o)
{
    CudaEvent *e = (CudaEvent *)o;
    PyTypeObject *tp = Py_TYPE(o);
    if (e->ev != NULL && cu.ok) {
        cu.EventDestroy(e->ev);
    }
    tp->tp_free(o);
    Py_DECREF(tp);
}

static PyObject *
event_record(PyObject *o, PyObject *args)
{
    (void)args;
    if (stax_cuda_record_break() < 0) {
        return NULL;
    }
    if (stax_cuda_check(cu.EventRecord(((CudaEvent *)o)->ev, cu.stream),
                        "cuEventRecord") < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
event_synchronize(PyObject *o, PyObject *unused)
{
    CUresult r;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    r = cu.EventSynchronize(((CudaEvent *)o)->ev);
    Py_END_ALLOW_THREADS
    if (stax_cuda_check(r, "cuEventSynchronize") < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
event_elapsed(PyObject *o, PyObject *end)
{
    float ms = 0.0f;
    if (!PyObject_TypeCheck(end, event_type)) {
        PyErr_SetString(PyExc_TypeError, "elapsed_time expects an Event");
        return NULL;
    }
    if (stax_cuda_check(cu.EventElapsedTime(&ms, ((CudaEvent *)o)->ev,
                                            ((CudaEvent *)end)->ev),
                        "cuEventElapsedTime") < 0) {
        return NULL;
    }
    return PyFloat_FromDouble(ms);
}

static PyMethodDef event_methods[] = {
    {"record", event_record, METH_VARARGS,
     "record(stream=None): record the event on the device's stream."},
    {"synchronize", event_synchronize, METH_NOARGS,
     "synchronize(): wait until the event has happened."},
    {"elapsed_time", event_elapsed, METH_O,
     "elapsed_time(end) -> float: milliseconds from this event to end."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot event_slots[] = {
    {Py_tp_new, event_new},
    {Py_tp_dealloc, event_dealloc},
    {Py_tp_methods, event_methods},
    {Py_tp_doc, "Event(enable_timing=False): a CUDA event on the device's "
                "stream (torch.cuda.Event)."},
    {0, NULL},
};

static PyType_Spec event_spec = {
    .name = "tensorplay.cuda.Event",
    .basicsize = sizeof(CudaEvent),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .slots = event_slots,
};

/* ------------------------------------------------------------- Python */

static PyObject *
py_is_available(PyObject *m, PyObject *unused)
{
    return PyBool_FromLong(stax_cuda_is_available());
}

static PyObject *
py_device_count(PyObject *m, PyObject *unused)
{
    return PyLong_FromLong(stax_cuda_device_count());
}

static PyObject *
py_init(PyObject *m, PyObject *unused)
{
    if (stax_cuda_init() < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
py_synchronize(PyObject *m, PyObject *unused)
{
    if (stax_cuda_synchronize() < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
py_memory_stats(PyObject *m, PyObject *unused)
{
    return Py_BuildValue("{sLsLsLsL}", "allocated", (long long)mem_allocated,
                         "peak", (long long)mem_peak, "reserved",
                         (long long)mem_reserved, "driver_allocs",
                         (long long)n_driver_allocs);
}

static PyObject *
py_empty_cache(PyObject *m, PyObject *unused)
{
    empty_cache();
    Py_RETURN_NONE;
}

static PyObject *
py_reset_peak(PyObject *m, PyObject *unused)
{
    mem_peak = mem_allocated;
    Py_RETURN_NONE;
}

static PyObject *
py_arch(PyObject *m, PyObject *unused)
{
    char arch[32];
    if (stax_cuda_arch(arch, sizeof(arch)) < 0) {
        return NULL;
    }
    return PyUnicode_FromString(arch);
}

static PyObject *
py_cublas_available(PyObject *m, PyObject *unused)
{
    return PyBool_FromLong(stax_cublas_available());
}

static PyObject *
py_cublas_status_name(PyObject *m, PyObject *arg)
{
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred()) {
        return NULL;
    }
    return PyUnicode_FromString(stax_cublas_status_name((int)v));
}

static PyMethodDef device_methods[] = {
    {"cuda_is_available", py_is_available, METH_NOARGS,
     "cuda_is_available() -> bool: libcuda loads and reports a device."},
    {"cuda_device_count", py_device_count, METH_NOARGS,
     "cuda_device_count() -> int (0 without a driver)."},
    {"cuda_init", py_init, METH_NOARGS,
     "cuda_init(): RuntimeError('CUDA is not available: ...') unless a "
     "driver and a device are usable."},
    {"cuda_synchronize", py_synchronize, METH_NOARGS,
     "cuda_synchronize(): wait for the device's stream."},
    {"cuda_memory_stats", py_memory_stats, METH_NOARGS,
     "cuda_memory_stats() -> dict(allocated, peak, reserved, driver_allocs) "
     "in bytes (size classes) / cuMemAlloc calls."},
    {"cuda_empty_cache", py_empty_cache, METH_NOARGS,
     "cuda_empty_cache(): return every cached free block to the driver."},
    {"cuda_reset_peak_memory_stats", py_reset_peak, METH_NOARGS,
     "cuda_reset_peak_memory_stats(): peak := allocated."},
    {"cuda_arch", py_arch, METH_NOARGS,
     "cuda_arch() -> 'sm_XY' of device 0."},
    {"cublas_available", py_cublas_available, METH_NOARGS,
     "cublas_available() -> bool: libcublas loaded (needs a GPU)."},
    {"_cublas_status_name", py_cublas_status_name, METH_O,
     "_cublas_status_name(status: int) -> str: the cublasStatus_t name "
     "errors of cuBLAS calls carry."},
    {NULL, NULL, 0, NULL},
};

int
stax_device_module_init(PyObject *m)
{
    if (block_type == NULL) {
        block_type = (PyTypeObject *)PyType_FromSpec(&block_spec);
        event_type = (PyTypeObject *)PyType_FromSpec(&event_spec);
        if (block_type == NULL || event_type == NULL) {
            return -1;
        }
    }
    if (stax_cuda_oom_error == NULL) {
        stax_cuda_oom_error = PyErr_NewExceptionWithDoc(
            "tensorplay.cuda.OutOfMemoryError",
            "The caching allocator could not get device memory, even after "
            "returning its cached blocks to the driver (torch's "
            "torch.cuda.OutOfMemoryError).", PyExc_RuntimeError, NULL);
        if (stax_cuda_oom_error == NULL) {
            return -1;
        }
    }
    if (PyModule_AddObjectRef(m, "CudaOutOfMemoryError", stax_cuda_oom_error) < 0
        || PyModule_AddObjectRef(m, "CudaEvent", (PyObject *)event_type) < 0) {
        return -1;
    }
    return PyModule_AddFunctions(m, device_methods);
}
