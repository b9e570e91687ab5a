/* The buffer pool: where the compiled-program runtime gets a fresh buffer
 * for an output or a temporary.  Big ones come from a pool of blocks that
 * previous results released (their array's base is a capsule returning the
 * block), small ones from the ordinary tensor/NumPy allocators. */
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "tensor/stax_numpy.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------ buffer pool
 * Big outputs and temporaries come from a pool of blocks that previous
 * results released (their array's base is a capsule returning the block):
 * a fresh mmap'ed block costs a page fault per 4 KiB on first touch, which
 * for a memory-bound kernel is as much as the kernel itself.  A block is
 * reused only after its previous tensor is gone, so outputs never alias.
 * Runs under the GIL. */
#define POOL_MIN_BYTES (1 << 16)
#define POOL_CLASSES 32
#define POOL_PER_CLASS 4
#define POOL_MAX_BYTES ((size_t)512 << 20)

typedef struct pool_blk {
    struct pool_blk *next;
} pool_blk;

static struct {
    size_t size;
    int count;
    pool_blk *head;
    unsigned long used;
} pool[POOL_CLASSES];
static size_t pool_cached;
static unsigned long pool_clock;

/* keep block ptr of `size` bytes for a later pool_get, or free it */
static void
pool_put(void *ptr, size_t size)
{
    int slot = -1;
    for (int i = 0; i < POOL_CLASSES; i++) {
        if (pool[i].size == size) {
            slot = i;
            break;
        }
    }
    if (slot < 0) {
        /* take a free class, or the least recently used empty one */
        for (int i = 0; i < POOL_CLASSES; i++) {
            if (pool[i].count == 0 && (slot < 0 || pool[i].used < pool[slot].used)) {
                slot = i;
            }
        }
        if (slot >= 0) {
            pool[slot].size = size;
        }
    }
    if (slot < 0 || pool[slot].count >= POOL_PER_CLASS
        || pool_cached + size > POOL_MAX_BYTES) {
        free(ptr);
        return;
    }
    pool_blk *b = ptr;
    b->next = pool[slot].head;
    pool[slot].head = b;
    pool[slot].count++;
    pool_cached += size;
}

static void
pool_release(PyObject *cap)
{
    void *ptr = PyCapsule_GetPointer(cap, "stax.block");
    size_t size = (size_t)(uintptr_t)PyCapsule_GetContext(cap);
    if (ptr == NULL) {
        PyErr_Clear();
        return;
    }
    pool_put(ptr, size);
}

/* blocks of `size` bytes the pool holds now */
static int
pool_count(size_t size)
{
    for (int i = 0; i < POOL_CLASSES; i++) {
        if (pool[i].size == size) {
            return pool[i].count;
        }
    }
    return 0;
}

static void *
pool_get(size_t size)
{
    pool_clock++;
    for (int i = 0; i < POOL_CLASSES; i++) {
        if (pool[i].size == size && pool[i].head != NULL) {
            pool_blk *b = pool[i].head;
            pool[i].head = b->next;
            pool[i].count--;
            pool[i].used = pool_clock;
            pool_cached -= size;
            return b;
        }
    }
    void *p = NULL;
    if (posix_memalign(&p, 64, size) != 0) {
        return NULL;
    }
    return p;
}

/* the pool's block size for a buffer of n bytes: whole pages */
static size_t
block_size(size_t n)
{
    return (n + 4095) & ~(size_t)4095;
}

static PyObject *
pool_array(int ndim, const int64_t *sizes, stax_dtype_t dt)
{
    npy_intp dims[STAX_MAX_DIMS];
    size_t n = (size_t)lw_dtype_size(dt);
    for (int d = 0; d < ndim; d++) {
        dims[d] = (npy_intp)sizes[d];
        n *= (size_t)sizes[d];
    }
    size_t size = block_size(n);
    void *mem = pool_get(size);
    if (mem == NULL) {
        return PyErr_NoMemory();
    }
    PyObject *cap = PyCapsule_New(mem, "stax.block", pool_release);
    if (cap == NULL) {
        free(mem);
        return NULL;
    }
    if (PyCapsule_SetContext(cap, (void *)(uintptr_t)size) < 0) {
        Py_DECREF(cap);
        return NULL;
    }
    PyArray_Descr *descr = PyArray_DescrFromType(stax_dtype_to_npy(dt));
    PyObject *arr = descr == NULL ? NULL
        : PyArray_NewFromDescr(&PyArray_Type, descr, ndim, dims, NULL, mem,
                               NPY_ARRAY_CARRAY, NULL);
    if (arr == NULL || PyArray_SetBaseObject((PyArrayObject *)arr, cap) < 0) {
        Py_XDECREF(arr);
        Py_DECREF(cap);
        return NULL;
    }
    return arr;
}

PyObject *
lw_new_buffer(Program *p, pbuf_t *b)
{
    int64_t nbytes = lw_dtype_size(b->dtype);
    if (p->c.be != NULL && p->c.be->device != NULL) {
        /* the caching allocator's blocks: no pool here */
        return (PyObject *)stax_tensor_empty_on(b->ndim, b->sizes, b->dtype,
                                                STAX_DEV_CUDA);
    }
    for (int d = 0; d < b->ndim; d++) {
        nbytes *= b->sizes[d];
    }
    if (nbytes >= POOL_MIN_BYTES) {
        PyObject *arr = pool_array(b->ndim, b->sizes, b->dtype);
        if (arr == NULL || p->c.numpy_io) {
            return arr;
        }
        PyObject *t = (PyObject *)stax_tensor_from_storage_array(arr, b->dtype);
        Py_DECREF(arr);
        return t;
    }
    if (p->c.numpy_io) {
        npy_intp dims[STAX_MAX_DIMS];
        for (int d = 0; d < b->ndim; d++) {
            dims[d] = (npy_intp)b->sizes[d];
        }
        return PyArray_EMPTY(b->ndim, dims, stax_dtype_to_npy(b->dtype), 0);
    }
    return (PyObject *)stax_tensor_empty(b->ndim, b->sizes, b->dtype);
}

/* ------------------------------------------------------ prefaulting
 * A new process's first run of a program writes its big outputs into
 * fresh memory: a page fault per 4 KiB (64 MiB of a 4096^2 float32 result
 * is 16384 faults, ~28 ms of CPU in this VM; huge pages are no cure here:
 * their faults took 3 to 130 ms, waiting on compaction).  The back end
 * compiles on one core, so while it does, a helper thread takes from
 * malloc the blocks the first run will ask the pool for and touches their
 * pages; they enter the pool when the compile is done, and the run finds
 * them faulted.  A compile that ends first (a cache hit) stops the helper
 * at once: the pages it did not reach fault in the run as before.  Blocks
 * the pool will not keep are never made, so nothing is held that the pool
 * would not hold anyway. */
#define PREFAULT_MIN_BYTES ((size_t)4 << 20)
#define PREFAULT_MAX_BLOCKS 64

static struct {
    pthread_t thread;
    int running;
    atomic_int stop;
    int n;
    void *mem[PREFAULT_MAX_BLOCKS];
    size_t size[PREFAULT_MAX_BLOCKS];
} pf;
static unsigned long long pf_touched;    /* pages, since start */
static pthread_once_t pf_atfork_once = PTHREAD_ONCE_INIT;

/* fork() while the helper runs (another thread forks in the window where
 * the compiling thread waits for it without the GIL): the child has
 * neither the helper nor the compile that owns the blocks. Its state is
 * cleared, so the child prefaults its own compiles and never joins a
 * thread it does not have; the blocks are the child's copies of memory
 * no one will use, left alone (no malloc call in a fork handler). */
static void
prefault_atfork_child(void)
{
    pf.running = 0;
    pf.n = 0;
    atomic_store(&pf.stop, 0);
}

static void
prefault_atfork_register(void)
{
    pthread_atfork(NULL, NULL, prefault_atfork_child);
}

static void *
prefault_main(void *arg)
{
    (void)arg;
    unsigned long long pages = 0;
    for (int i = 0; i < pf.n; i++) {
        volatile char *m = pf.mem[i];
        for (size_t off = 0; off < pf.size[i]; off += 4096) {
            if (atomic_load_explicit(&pf.stop, memory_order_relaxed)) {
                goto done;
            }
            m[off] = 0;
            pages++;
        }
    }
done:
    __atomic_fetch_add(&pf_touched, pages, __ATOMIC_RELAXED);
    return NULL;
}

/* the blocks the first run takes from the pool that the pool cannot give
 * now: the run's allocations replayed against the pool's counts */
static int
prefault_plan(lw_ctx *c)
{
    size_t sizes[PREFAULT_MAX_BLOCKS];
    int avail[PREFAULT_MAX_BLOCKS], nsizes = 0;
    size_t total = 0;
    pf.n = 0;
    for (int i = 0; i < c->nsteps; i++) {
        step_t *s = &c->steps[i];
        for (int q = 0; q < s->nalloc + s->nfree; q++) {
            int freeing = q >= s->nalloc;
            pbuf_t *b = &c->pbufs[freeing ? s->frees[q - s->nalloc] : s->alloc[q]];
            if (b->kind != PB_TEMP || b->ndim < 0 || (!freeing && s->kind != ST_KERNEL)) {
                continue;
            }
            size_t n = (size_t)lw_dtype_size(b->dtype);
            for (int d = 0; d < b->ndim; d++) {
                n *= (size_t)b->sizes[d];
            }
            if (n < POOL_MIN_BYTES) {
                continue;
            }
            size_t size = block_size(n);
            int j = 0;
            while (j < nsizes && sizes[j] != size) {
                j++;
            }
            if (j == nsizes) {
                if (nsizes == PREFAULT_MAX_BLOCKS) {
                    continue;
                }
                sizes[nsizes] = size;
                avail[nsizes++] = pool_count(size);
            }
            if (freeing) {
                avail[j]++;
            }
            else if (avail[j] > 0) {
                avail[j]--;
            }
            else if (pf.n < PREFAULT_MAX_BLOCKS && pool_count(size) + pf.n < POOL_PER_CLASS
                     && pool_cached + total + size <= POOL_MAX_BYTES) {
                pf.size[pf.n++] = size;
                total += size;
            }
        }
    }
    if (total < PREFAULT_MIN_BYTES) {
        pf.n = 0;
    }
    return pf.n;
}

static void prefault_start(void);

void
lw_prefault_begin(lw_ctx *c)
{
    if (pf.running || c->be == NULL || c->be->device != NULL || getenv("STAX_NO_PREFAULT")) {
        return;
    }
    if (prefault_plan(c) == 0) {
        return;
    }
    prefault_start();
}

/* the helper on the planned blocks pf.size[0 .. pf.n) */
static void
prefault_start(void)
{
    pthread_once(&pf_atfork_once, prefault_atfork_register);
    for (int i = 0; i < pf.n; i++) {
        if (posix_memalign(&pf.mem[i], 64, pf.size[i]) != 0) {
            pf.mem[i] = NULL;
            pf.n = i;
            break;
        }
    }
    atomic_store(&pf.stop, 0);
    if (pf.n == 0 || pthread_create(&pf.thread, NULL, prefault_main, NULL) != 0) {
        for (int i = 0; i < pf.n; i++) {
            free(pf.mem[i]);
        }
        pf.n = 0;
        return;
    }
    pf.running = 1;
}

void
lw_prefault_end(void)
{
    if (!pf.running) {
        return;
    }
    atomic_store(&pf.stop, 1);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(pf.thread, NULL);
    Py_END_ALLOW_THREADS
    pf.running = 0;
    for (int i = 0; i < pf.n; i++) {
        pool_put(pf.mem[i], pf.size[i]);
    }
    pf.n = 0;
}

/* the helper on one block of nbytes, as a compile starts it (a test's
 * handle on the fork window); 1 when it runs */
int
lw_prefault_start_bytes(size_t nbytes)
{
    if (pf.running || nbytes == 0) {
        return pf.running;
    }
    pf.n = 1;
    pf.size[0] = block_size(nbytes);
    prefault_start();
    return pf.running;
}

int
lw_prefault_running(void)
{
    return pf.running;
}

/* pages the prefault helper has touched since start (a test's witness) */
unsigned long long
lw_prefault_pages(void)
{
    return __atomic_load_n(&pf_touched, __ATOMIC_RELAXED);
}
