/* The buffer pool: where the compiled-program runtime gets a fresh buffer
 * for an output or a temporary.  Big ones come from a pool of blocks that
 * previous results released (their array's base is a capsule returning the
 * block), small ones from the ordinary tensor/NumPy allocators. */
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "tensor/stax_numpy.h"

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

static void
pool_release(PyObject *cap)
{
    void *ptr = PyCapsule_GetPointer(cap, "stax.block");
    size_t size = (size_t)(uintptr_t)PyCapsule_GetContext(cap);
    if (ptr == NULL) {
        PyErr_Clear();
        return;
    }
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

static PyObject *
pool_array(int ndim, const int64_t *sizes, stax_dtype_t dt)
{
    npy_intp dims[STAX_MAX_DIMS];
    size_t n = (size_t)lw_dtype_size(dt);
    for (int d = 0; d < ndim; d++) {
        dims[d] = (npy_intp)sizes[d];
        n *= (size_t)sizes[d];
    }
    size_t size = (n + 4095) & ~(size_t)4095;
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
