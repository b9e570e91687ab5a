/* The stax back end entry point (tensorplay._C.stax_backend) and the
 * compiled-program runtime: a CompiledProgram is a list of steps (kernel
 * calls, library calls, fallback kernels) over a buffer plan.  Its call
 * path is C only: check the inputs, allocate fresh outputs, run the steps
 * (big kernels with the GIL released, split across the thread pool),
 * release intermediates at their last use, return the output pytree. */
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "stax_numpy.h"
#include <structmember.h>

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define STAX_GIL_RELEASE_WORK 16384

/* ------------------------------------------------------------- SlotRef */
typedef struct {
    PyObject_HEAD
    int index;
} SlotRef;

static PyTypeObject *SlotRef_Type;

static PyObject *
slotref_repr(PyObject *o)
{
    return PyUnicode_FromFormat("<slot %d>", ((SlotRef *)o)->index);
}

static PyType_Slot slotref_slots[] = {
    {Py_tp_repr, slotref_repr},
    {0, NULL},
};

static PyType_Spec slotref_spec = {
    .name = "tensorplay._C._StaxSlot",
    .basicsize = sizeof(SlotRef),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = slotref_slots,
};

int
stax_lower_slotref_index(PyObject *o)
{
    if (SlotRef_Type != NULL && Py_IS_TYPE(o, SlotRef_Type)) {
        return ((SlotRef *)o)->index;
    }
    return -1;
}

static PyObject *
slotref_new(int i)
{
    SlotRef *s = PyObject_New(SlotRef, SlotRef_Type);
    if (s != NULL) {
        s->index = i;
    }
    return (PyObject *)s;
}

/* ---------------------------------------------------------- KernelInfo */
static PyTypeObject *KernelInfo_Type;

static PyStructSequence_Field kinfo_fields[] = {
    {"name", "kernel symbol"},
    {"source", "LLVM IR after O3 (CPU) / CUDA C"},
    {"loop_ir", "the loop-level IR, printed"},
    {"bytes_read", "bytes read per call"},
    {"bytes_written", "bytes written per call"},
    {NULL, NULL},
};

static PyStructSequence_Desc kinfo_desc = {
    "tensorplay._C.StaxKernel", "A compiled kernel of a Stax program.",
    kinfo_fields, 5,
};

/* ----------------------------------------------------- CompiledProgram */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    lw_ctx c;
    PyObject *kernels;        /* list of StaxKernel */
    PyObject *out_template;   /* output pytree with SlotRefs */
    int out_single;           /* template is one SlotRef: its index */
    PyObject *gm;             /* the GraphModule (for op_graph) */
    PyObject *op_graph;       /* lazily */
    int64_t lower_bound;
    int64_t *in_sizes;        /* per input: ndim, sizes, strides (checked) */
    int *in_ndim;
    stax_dtype_t *in_dtype;
    int dynamic;              /* other sizes: a variant per size class */
    int strict;
    PyObject *variants;       /* list of Programs (dynamic) */
    PyObject *kcache;         /* dynamic: kernel structure -> (capsule,
                                 source), shared with the variants */
    PyObject *rg_extra;       /* op graph: output pytree of input masks
                                 (int) for outputs written in place, or
                                 NULL: see rg_extra_template */
} Program;

static PyTypeObject *Program_Type;

static void
ctx_clear(lw_ctx *c)
{
    for (int i = 0; i < c->nsteps; i++) {
        step_t *s = &c->steps[i];
        if (s->hcap != NULL) {
            s->handle = NULL;   /* owned by the shared capsule */
            Py_CLEAR(s->hcap);
        }
        if (s->handle != NULL && c->be != NULL) {
            c->be->free(c->be, s->handle);
            s->handle = NULL;
        }
        Py_CLEAR(s->target);
        Py_CLEAR(s->args);
        Py_CLEAR(s->kwargs);
        Py_CLEAR(s->stack);
        Py_CLEAR(s->source);
    }
    for (int i = 0; i < c->npbufs; i++) {
        Py_CLEAR(c->pbufs[i].obj);
    }
    free(c->steps);
    free(c->pbufs);
    c->steps = NULL;
    c->pbufs = NULL;
    c->nsteps = c->npbufs = 0;
    stax_arena_free(c->arena);
    c->arena = NULL;
}

void
lw_ctx_clear(lw_ctx *c)
{
    ctx_clear(c);
}

static int
program_traverse(Program *p, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(p));
    Py_VISIT(p->kernels);
    Py_VISIT(p->out_template);
    Py_VISIT(p->gm);
    Py_VISIT(p->op_graph);
    Py_VISIT(p->variants);
    Py_VISIT(p->kcache);
    Py_VISIT(p->rg_extra);
    for (int i = 0; i < p->c.nsteps; i++) {
        Py_VISIT(p->c.steps[i].target);
        Py_VISIT(p->c.steps[i].args);
        Py_VISIT(p->c.steps[i].kwargs);
    }
    for (int i = 0; i < p->c.npbufs; i++) {
        Py_VISIT(p->c.pbufs[i].obj);
    }
    return 0;
}

static int
program_clear(Program *p)
{
    Py_CLEAR(p->kernels);
    Py_CLEAR(p->out_template);
    Py_CLEAR(p->gm);
    Py_CLEAR(p->op_graph);
    Py_CLEAR(p->variants);
    Py_CLEAR(p->kcache);
    Py_CLEAR(p->rg_extra);
    for (int i = 0; i < p->c.nsteps; i++) {
        Py_CLEAR(p->c.steps[i].target);
        Py_CLEAR(p->c.steps[i].args);
        Py_CLEAR(p->c.steps[i].kwargs);
    }
    return 0;
}

static void
program_dealloc(Program *p)
{
    PyTypeObject *tp = Py_TYPE(p);
    PyObject_GC_UnTrack(p);
    program_clear(p);
    ctx_clear(&p->c);
    free(p->in_sizes);
    free(p->in_ndim);
    free(p->in_dtype);
    tp->tp_free((PyObject *)p);
    Py_DECREF(tp);
}

/* ------------------------------------------------------------- runtime */
static char *
data_ptr(PyObject *o)
{
    if (StaxTensor_Check(o)) {
        StaxTensor *t = (StaxTensor *)o;
        return t->storage->data + t->offset * lw_dtype_size(t->dtype);
    }
    return PyArray_DATA((PyArrayObject *)o);
}

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

static PyObject *
new_buffer(Program *p, pbuf_t *b)
{
    int64_t nbytes = lw_dtype_size(b->dtype);
    for (int d = 0; d < b->ndim; d++) {
        nbytes *= b->sizes[d];
    }
    if (nbytes >= POOL_MIN_BYTES) {
        PyObject *arr = pool_array(b->ndim, b->sizes, b->dtype);
        if (arr == NULL || p->c.numpy_io) {
            return arr;
        }
        PyObject *t = (PyObject *)stax_tensor_from_array(arr);
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

static PyObject *
as_array(PyObject *o)
{
    if (PyArray_Check(o)) {
        return Py_NewRef(o);
    }
    return stax_tensor_as_array((StaxTensor *)o);
}

static PyObject *
from_array(Program *p, PyObject *a)
{
    if (p->c.numpy_io || a == NULL) {
        return a;
    }
    PyObject *c = PyArray_FROM_OF(a, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
    Py_DECREF(a);
    if (c == NULL) {
        return NULL;
    }
    PyObject *t = (PyObject *)stax_tensor_from_array(c);
    Py_DECREF(c);
    return t;
}

/* a fallback/extract result as a contiguous tensor of the planned dtype */
static PyObject *
normalize_result(Program *p, PyObject *r, pbuf_t *b)
{
    int nd;
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    stax_dtype_t dt;
    if (!lw_val_info(r, &nd, sz, st, &dt)) {
        return r;   /* not a tensor: kept as an object */
    }
    int ok = nd == b->ndim && dt == b->dtype;
    int64_t e = 1;
    for (int d = nd - 1; ok && d >= 0; d--) {
        ok = sz[d] == b->sizes[d] && (sz[d] == 1 || st[d] == e);
        e *= sz[d];
    }
    if (ok) {
        return r;
    }
    if (!(nd == b->ndim && dt == b->dtype)) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_RuntimeError,
                        "stax: a fallback kernel returned a value of another "
                        "shape or dtype than at compile time");
        return NULL;
    }
    PyObject *a = as_array(r);
    Py_DECREF(r);
    if (a == NULL) {
        return NULL;
    }
    PyObject *c = PyArray_NewCopy((PyArrayObject *)a, NPY_CORDER);
    Py_DECREF(a);
    return from_array(p, c);
}

static PyObject *
instantiate(PyObject *t, PyObject **slots)
{
    int i = stax_lower_slotref_index(t);
    if (i >= 0) {
        return Py_NewRef(slots[i]);
    }
    if (PyTuple_CheckExact(t) || PyList_CheckExact(t)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(t);
        PyObject *r = PyTuple_CheckExact(t) ? PyTuple_New(n) : PyList_New(n);
        if (r == NULL) {
            return NULL;
        }
        for (Py_ssize_t k = 0; k < n; k++) {
            PyObject *e = instantiate(PySequence_Fast_GET_ITEM(t, k), slots);
            if (e == NULL) {
                Py_DECREF(r);
                return NULL;
            }
            if (PyTuple_CheckExact(r)) {
                PyTuple_SET_ITEM(r, k, e);
            }
            else {
                PyList_SET_ITEM(r, k, e);
            }
        }
        return r;
    }
    if (PyDict_CheckExact(t)) {
        PyObject *r = PyDict_New(), *k, *v;
        Py_ssize_t pos = 0;
        if (r == NULL) {
            return NULL;
        }
        while (PyDict_Next(t, &pos, &k, &v)) {
            PyObject *e = instantiate(v, slots);
            if (e == NULL || PyDict_SetItem(r, k, e) < 0) {
                Py_XDECREF(e);
                Py_DECREF(r);
                return NULL;
            }
            Py_DECREF(e);
        }
        return r;
    }
    return Py_NewRef(t);
}

/* a library-call operand: the buffer's array, or a strided view of it */
static PyObject *
operand_array(PyObject *slot, const void *viewp, stax_dtype_t dt)
{
    if (viewp == NULL) {
        return as_array(slot);
    }
    const struct {
        int on, ndim;
        int64_t sizes[STAX_MAX_DIMS], strides[STAX_MAX_DIMS], offset;
    } *v = viewp;
    PyObject *base = as_array(slot);
    if (base == NULL) {
        return NULL;
    }
    npy_intp dims[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    int isz = lw_dtype_size(dt);
    for (int d = 0; d < v->ndim; d++) {
        dims[d] = (npy_intp)v->sizes[d];
        st[d] = (npy_intp)(v->strides[d] * isz);
    }
    PyArray_Descr *descr = PyArray_DescrFromType(stax_dtype_to_npy(dt));
    PyObject *arr = descr == NULL ? NULL
        : PyArray_NewFromDescr(&PyArray_Type, descr, v->ndim, dims, st,
                               data_ptr(slot) + v->offset * isz, 0, NULL);
    if (arr == NULL || PyArray_SetBaseObject((PyArrayObject *)arr, base) < 0) {
        Py_XDECREF(arr);
        Py_DECREF(base);
        return NULL;
    }
    return arr;
}

typedef struct {
    stax_kernel_fn fn;
    char **bufs;
    const int64_t *syms;
} run_ctx;

static void
run_chunk(void *ctx, int64_t s, int64_t e)
{
    run_ctx *r = ctx;
    r->fn(r->bufs, r->syms, s, e);
}

static int
run_kernel(Program *p, step_t *s, PyObject **slots, const int64_t *syms)
{
    char *bufs[64];
    char **bp = bufs;
    if (s->k->nbufs > 64) {
        bp = malloc(sizeof(char *) * (size_t)s->k->nbufs);
        if (bp == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    for (int q = 0; q < s->k->nbufs; q++) {
        bp[q] = data_ptr(slots[s->bufmap[q]]);
    }
    if (s->fn == NULL) {
        int rc = p->c.be->launch(p->c.be, s->handle, bp, syms, 0, s->par_n);
        if (bp != bufs) {
            free(bp);
        }
        return rc;
    }
    if (s->work < STAX_GIL_RELEASE_WORK) {
        s->fn(bp, syms, 0, s->par_n);
    }
    else {
        run_ctx r = {s->fn, bp, syms};
        Py_BEGIN_ALLOW_THREADS
        stax_lower_parallel_for(s->par_n, s->work, run_chunk, &r);
        Py_END_ALLOW_THREADS
    }
    if (bp != bufs) {
        free(bp);
    }
    return 0;
}

static int
input_ok(Program *p, int i, PyObject *o)
{
    int nd = p->in_ndim[i];
    if (nd < 0) {
        return 0;    /* not a tensor placeholder */
    }
    const int64_t *sz = p->in_sizes + (size_t)i * 2 * STAX_MAX_DIMS;
    if (StaxTensor_Check(o)) {
        StaxTensor *t = (StaxTensor *)o;
        if (t->ndim == nd && t->dtype == p->in_dtype[i]) {
            int ok = 1;
            for (int d = 0; d < nd; d++) {
                ok &= t->sizes[d] == sz[d]
                      && (t->sizes[d] == 1 || t->strides[d] == sz[STAX_MAX_DIMS + d]);
            }
            if (ok) {
                return 0;
            }
        }
    }
    else if (p->c.numpy_io && PyArray_Check(o)) {
        int n2;
        int64_t s2[STAX_MAX_DIMS], st2[STAX_MAX_DIMS];
        stax_dtype_t dt;
        if (lw_val_info(o, &n2, s2, st2, &dt) && n2 == nd && dt == p->in_dtype[i]) {
            int ok = 1;
            for (int d = 0; d < nd; d++) {
                ok &= s2[d] == sz[d] && (s2[d] == 1 || st2[d] == sz[STAX_MAX_DIMS + d]);
            }
            if (ok) {
                return 0;
            }
        }
    }
    return -1;
}

static PyObject *build_program(PyObject *gm, PyObject *ex, int strict,
                               int dynamic, PyObject *vals, int no_random,
                               PyObject *kcache);
static PyObject *shape_prop(PyObject *gm, PyObject *ex);

/* A 1-d tensor over a copy of t's whole storage (same dtype). */
static PyObject *
storage_clone(StaxTensor *t)
{
    int isz = stax_dtype_itemsize(t->dtype);
    int64_t n = isz > 0 ? t->storage->nbytes / isz : 0;
    StaxTensor *flat = stax_tensor_empty(1, &n, t->dtype);
    if (flat != NULL && n > 0) {
        memcpy(flat->storage->data, t->storage->data, (size_t)(n * isz));
    }
    return (PyObject *)flat;
}

/* shape_prop over the call's real inputs, without its side effects: the
 * graph may write its inputs in place (functionalized copy_ write-backs)
 * and draw random numbers, and the variant's kernels will do both again
 * when they run. So propagate over layout-preserving clones of the tensor
 * inputs (inputs sharing a storage share one clone) with the default
 * generator's state restored afterwards. */
static PyObject *
shape_prop_isolated(PyObject *gm, PyObject *ex)
{
    Py_ssize_t n = PyTuple_GET_SIZE(ex);
    PyObject *cex = PyTuple_New(n);
    PyObject *clones = PyDict_New();   /* storage -> flat clone tensor */
    PyObject *rnd = PyImport_ImportModule("tensorplay.random");
    PyObject *state = rnd ? PyObject_CallMethod(rnd, "get_rng_state", NULL) : NULL;
    PyObject *vals = NULL;
    if (cex == NULL || clones == NULL || state == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(ex, i);
        PyObject *c = NULL;
        if (StaxTensor_Check(a)) {
            StaxTensor *t = (StaxTensor *)a;
            PyObject *key = (PyObject *)t->storage;
            PyObject *flat = PyDict_GetItemWithError(clones, key); /* borrowed */
            if (flat == NULL && PyErr_Occurred()) {
                goto done;
            }
            if (flat == NULL) {
                PyObject *f = storage_clone(t);
                if (f == NULL || PyDict_SetItem(clones, key, f) < 0) {
                    Py_XDECREF(f);
                    goto done;
                }
                Py_DECREF(f);
                flat = f;
            }
            c = (PyObject *)stax_tensor_as_strided((StaxTensor *)flat, t->ndim,
                                                   t->sizes, t->strides,
                                                   t->offset);
        }
        else {
            c = Py_NewRef(a);
        }
        if (c == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(cex, i, c);
    }
    vals = shape_prop(gm, cex);
    if (vals != NULL) {
        /* placeholders keep the real inputs (their layout is the same) */
        PyObject *graph = PyObject_GetAttrString(gm, "graph");
        PyObject *nl = graph ? PyObject_GetAttrString(graph, "nodes") : NULL;
        PyObject *nodes = nl ? PySequence_List(nl) : NULL;
        Py_XDECREF(graph);
        Py_XDECREF(nl);
        Py_ssize_t k = 0;
        for (Py_ssize_t i = 0; nodes && i < PyList_GET_SIZE(nodes); i++) {
            StaxNode *node = (StaxNode *)PyList_GET_ITEM(nodes, i);
            if (node->op == STAX_NODE_PLACEHOLDER && k < n) {
                if (PyDict_SetItem(vals, (PyObject *)node,
                                   PyTuple_GET_ITEM(ex, k++)) < 0) {
                    Py_CLEAR(vals);
                    break;
                }
            }
        }
        if (nodes == NULL) {
            Py_CLEAR(vals);
        }
        Py_XDECREF(nodes);
    }
done:
    if (state != NULL) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *r = PyObject_CallMethod(rnd, "set_rng_state", "O", state);
        if (r == NULL) {
            Py_CLEAR(vals);
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(tb);
        }
        else {
            Py_DECREF(r);
            PyErr_Restore(et, ev, tb);
        }
    }
    Py_XDECREF(state);
    Py_XDECREF(rnd);
    Py_XDECREF(clones);
    Py_XDECREF(cex);
    return vals;
}

/* dynamic mode: the variant compiled for these inputs' sizes (borrowed) */
static Program *
find_variant(Program *p, PyObject *const *args, Py_ssize_t nargs)
{
    if (p->variants != NULL) {
        for (Py_ssize_t v = 0; v < PyList_GET_SIZE(p->variants); v++) {
            Program *q = (Program *)PyList_GET_ITEM(p->variants, v);
            int ok = 1;
            for (int i = 0; i < nargs && ok; i++) {
                ok = input_ok(q, i, args[i]) == 0;
            }
            if (ok) {
                return q;
            }
        }
    }
    else {
        p->variants = PyList_New(0);
        if (p->variants == NULL) {
            return NULL;
        }
    }
    PyObject *ex = PyTuple_New(nargs);
    if (ex == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyTuple_SET_ITEM(ex, i, Py_NewRef(args[i]));
    }
    PyObject *vals = shape_prop_isolated(p->gm, ex);
    PyObject *q = vals ? build_program(p->gm, ex, p->strict, 0, vals, p->c.no_random,
                                        p->kcache) : NULL;
    Py_DECREF(ex);
    Py_XDECREF(vals);
    if (q == NULL) {
        return NULL;
    }
    Py_XSETREF(((Program *)q)->rg_extra, Py_XNewRef(p->rg_extra));
    if (PyList_GET_SIZE(p->variants) >= 16) {
        PySequence_DelItem(p->variants, 0);
    }
    int rc = PyList_Append(p->variants, q);
    Py_DECREF(q);
    return rc < 0 ? NULL : (Program *)q;
}

/* Outputs written in place (v = f(w); v.copy_(x); return v): eager's v
 * keeps requires_grad from its creation, but the op graph's value of v is
 * the write's (clone(x)), whose buffer depends on x alone. The mask of
 * inputs each such output leaf was created from, from the Python-level
 * graph; a leaf whose mask meets a grad input gets requires_grad. */
static void
rg_extra_apply(PyObject *t, PyObject *r, uint64_t rg, PyObject *const *args,
               Py_ssize_t nargs)
{
    if (PyLong_Check(t)) {
        uint64_t m = PyLong_AsUnsignedLongLong(t);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return;
        }
        if ((m & rg) == 0 || !StaxTensor_Check(r)
            || !lw_is_float(((StaxTensor *)r)->dtype)) {
            return;
        }
        for (Py_ssize_t i = 0; i < nargs; i++) {
            if (args[i] == r) {
                return;        /* an input itself keeps its own flag */
            }
        }
        ((StaxTensor *)r)->requires_grad = 1;
        return;
    }
    if ((PyTuple_Check(t) || PyList_Check(t))
        && (PyTuple_Check(r) || PyList_Check(r))
        && PySequence_Fast_GET_SIZE(t) == PySequence_Fast_GET_SIZE(r)) {
        for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(t); k++) {
            rg_extra_apply(PySequence_Fast_GET_ITEM(t, k),
                           PySequence_Fast_GET_ITEM(r, k), rg, args, nargs);
        }
    }
    else if (PyDict_Check(t) && PyDict_Check(r)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(t, &pos, &k, &v)) {
            PyObject *rv = PyDict_GetItemWithError(r, k);
            if (rv != NULL) {
                rg_extra_apply(v, rv, rg, args, nargs);
            }
            PyErr_Clear();
        }
    }
}

static PyObject *target_name(PyObject *node, int *is_method);

static PyObject *
rg_extra_map(PyObject *o, PyObject *masks, PyObject *written, int *any)
{
    if (StaxNode_Type != NULL && PyObject_TypeCheck(o, StaxNode_Type)) {
        PyObject *m = PySet_Contains(written, o) == 1
                      ? PyDict_GetItemWithError(masks, o) : NULL;
        if (m != NULL && PyObject_IsTrue(m) == 1) {
            *any = 1;
            return Py_NewRef(m);
        }
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (PyTuple_Check(o) || PyList_Check(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject *r = PyTuple_Check(o) ? PyTuple_New(n) : PyList_New(n);
        for (Py_ssize_t k = 0; r != NULL && k < n; k++) {
            PyObject *e = rg_extra_map(PySequence_Fast_GET_ITEM(o, k), masks,
                                       written, any);
            if (e == NULL) {
                Py_CLEAR(r);
                break;
            }
            if (PyTuple_Check(r)) {
                PyTuple_SET_ITEM(r, k, e);
            }
            else {
                PyList_SET_ITEM(r, k, e);
            }
        }
        return r;
    }
    if (PyDict_Check(o)) {
        PyObject *r = PyDict_New(), *k, *v;
        Py_ssize_t pos = 0;
        while (r != NULL && PyDict_Next(o, &pos, &k, &v)) {
            PyObject *e = rg_extra_map(v, masks, written, any);
            if (e == NULL || PyDict_SetItem(r, k, e) < 0) {
                Py_CLEAR(r);
            }
            Py_XDECREF(e);
        }
        return r;
    }
    Py_RETURN_NONE;
}

/* new reference: the rg_extra pytree of the Python-level graph gm, or NULL
 * (none, no exception) */
static PyObject *
rg_extra_template(PyObject *gm)
{
    PyObject *g = PyObject_GetAttrString(gm, "graph");
    PyObject *l = g ? PyObject_GetAttrString(g, "nodes") : NULL;
    PyObject *nodes = l ? PySequence_List(l) : NULL;
    PyObject *masks = PyDict_New(), *written = PySet_New(NULL), *r = NULL;
    int k = 0, any = 0;
    Py_XDECREF(g);
    Py_XDECREF(l);
    for (Py_ssize_t i = 0; nodes && masks && written && i < PyList_GET_SIZE(nodes); i++) {
        PyObject *node = PyList_GET_ITEM(nodes, i);
        PyObject *op = PyObject_GetAttrString(node, "op");
        const char *opc = op ? PyUnicode_AsUTF8(op) : NULL;
        uint64_t m = 0;
        if (opc == NULL) {
            Py_XDECREF(op);
            goto done;
        }
        if (!strcmp(opc, "output")) {
            PyObject *a = PyObject_GetAttrString(node, "args");
            PyObject *o = a && PyTuple_Check(a) && PyTuple_GET_SIZE(a) == 1
                          ? PyTuple_GET_ITEM(a, 0) : a;
            r = o ? rg_extra_map(o, masks, written, &any) : NULL;
            Py_XDECREF(a);
            Py_DECREF(op);
            break;
        }
        if (!strcmp(opc, "placeholder")) {
            m = 1ULL << (k < 63 ? k : 63);
            k++;
        }
        else {
            PyObject *ins = PyObject_GetAttrString(node, "all_input_nodes");
            PyObject *il = ins ? PySequence_List(ins) : NULL;
            Py_XDECREF(ins);
            for (Py_ssize_t j = 0; il && j < PyList_GET_SIZE(il); j++) {
                PyObject *mm = PyDict_GetItemWithError(masks, PyList_GET_ITEM(il, j));
                m |= mm ? PyLong_AsUnsignedLongLong(mm) : 0;
            }
            Py_XDECREF(il);
            int im = 0;
            PyObject *nm = target_name(node, &im);
            const char *sn = nm ? PyUnicode_AsUTF8(nm) : NULL;
            size_t sl = sn ? strlen(sn) : 0;
            if (sn && ((sl > 1 && sn[sl - 1] == '_' && sn[sl - 2] != '_')
                       || strstr(sn, "setitem") != NULL)) {
                PyObject *a = PyObject_GetAttrString(node, "args");
                if (a && PyTuple_Check(a) && PyTuple_GET_SIZE(a) > 0) {
                    PySet_Add(written, PyTuple_GET_ITEM(a, 0));
                }
                Py_XDECREF(a);
            }
            Py_XDECREF(nm);
            PyErr_Clear();
        }
        Py_DECREF(op);
        PyObject *pm = PyLong_FromUnsignedLongLong(m);
        if (pm == NULL || PyDict_SetItem(masks, node, pm) < 0) {
            Py_XDECREF(pm);
            goto done;
        }
        Py_DECREF(pm);
    }
done:
    Py_XDECREF(nodes);
    Py_XDECREF(masks);
    Py_XDECREF(written);
    PyErr_Clear();
    if (r != NULL && !any) {
        Py_CLEAR(r);
    }
    return r;
}

static PyObject *
program_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                   PyObject *kwnames)
{
    Program *p = (Program *)self;
    lw_ctx *c = &p->c;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *stack_slots[32];
    PyObject **slots = stack_slots;
    PyObject *result = NULL;
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        PyErr_SetString(PyExc_TypeError, "compiled program takes positional inputs only");
        return NULL;
    }
    if (nargs != c->ninputs) {
        PyErr_Format(PyExc_TypeError, "compiled program takes %d inputs, got %zd",
                     c->ninputs, nargs);
        return NULL;
    }
    if (c->npbufs > 32) {
        slots = calloc((size_t)c->npbufs, sizeof(PyObject *));
        if (slots == NULL) {
            return PyErr_NoMemory();
        }
    }
    else {
        memset(stack_slots, 0, sizeof(stack_slots));
    }
    for (int b = 0; b < c->npbufs; b++) {
        pbuf_t *pb = &c->pbufs[b];
        if (pb->kind == PB_INPUT) {
            if (input_ok(p, pb->input, args[pb->input]) < 0) {
                if (p->dynamic) {
                    Program *q = find_variant(p, args, nargs);
                    if (q != NULL) {
                        Py_INCREF(q);
                        result = program_vectorcall((PyObject *)q, args, nargsf, kwnames);
                        Py_DECREF(q);
                    }
                    goto done;
                }
                PyErr_Format(PyExc_ValueError,
                             "stax compiled program: input %d has another type, "
                             "shape, strides or dtype than the example it was "
                             "compiled for", pb->input);
                goto done;
            }
            slots[b] = Py_NewRef(args[pb->input]);
        }
        else if (pb->kind == PB_CONST) {
            slots[b] = Py_NewRef(pb->obj);
        }
    }
    /* random draws reserve their words of the default generator now, in
     * node order, as eager execution would */
    const int64_t *syms = c->syms;
    int64_t local_syms[LW_MAX_SYMS];
    if (c->nrand > 0) {
        StaxGenerator *g = stax_default_generator();
        if (g == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "stax: no default generator");
            goto done;
        }
        memcpy(local_syms, c->syms, sizeof(int64_t) * (size_t)c->nsyms);
        for (int r = 0; r < c->nrand; r++) {
            local_syms[c->rand_seed_sym[r]] = (int64_t)g->seed;
            local_syms[c->rand_off_sym[r]] = (int64_t)stax_generator_reserve(g, c->rand_words[r]);
        }
        syms = local_syms;
    }
    for (int i = 0; i < c->nsteps; i++) {
        step_t *s = &c->steps[i];
        for (int q = 0; q < s->nalloc; q++) {
            int b = s->alloc[q];
            slots[b] = new_buffer(p, &c->pbufs[b]);
            if (slots[b] == NULL) {
                goto done;
            }
        }
        switch (s->kind) {
        case ST_KERNEL:
            if (run_kernel(p, s, slots, syms) < 0) {
                goto done;
            }
            for (int q = 0; q < s->nbump; q++) {
                if (StaxTensor_Check(args[s->bump[q]])) {
                    stax_tensor_bump_version((StaxTensor *)args[s->bump[q]]);
                }
            }
            break;
        case ST_MATMUL: {
            PyObject *a = operand_array(slots[s->a], s->view[0].on ? &s->view[0] : NULL,
                                        c->pbufs[s->a].dtype);
            PyObject *b = a ? operand_array(slots[s->b], s->view[1].on ? &s->view[1] : NULL,
                                            c->pbufs[s->b].dtype) : NULL;
            PyObject *bt = NULL, *r = NULL;
            if (b != NULL) {
                bt = s->transpose_b ? PyArray_Transpose((PyArrayObject *)b, NULL)
                                    : Py_NewRef(b);
            }
            if (bt != NULL) {
                r = PyNumber_MatrixMultiply(a, bt);
            }
            Py_XDECREF(a);
            Py_XDECREF(b);
            Py_XDECREF(bt);
            r = r ? from_array(p, r) : NULL;
            if (r == NULL) {
                goto done;
            }
            slots[s->out] = r;
            break;
        }
        case ST_FALLBACK: {
            PyObject *a = instantiate(s->args, slots);
            PyObject *kw = a ? instantiate(s->kwargs, slots) : NULL;
            PyObject *r = NULL;
            if (kw != NULL) {
                if (s->is_method) {
                    PyObject *m = PyObject_GetAttr(PyTuple_GET_ITEM(a, 0), s->target);
                    PyObject *rest = m ? PyTuple_GetSlice(a, 1, PyTuple_GET_SIZE(a)) : NULL;
                    r = rest ? PyObject_Call(m, rest, kw) : NULL;
                    Py_XDECREF(m);
                    Py_XDECREF(rest);
                }
                else {
                    r = PyObject_Call(s->target, a, kw);
                }
            }
            Py_XDECREF(a);
            Py_XDECREF(kw);
            if (r != NULL) {
                r = normalize_result(p, r, &c->pbufs[s->out]);
            }
            if (r == NULL) {
                goto done;
            }
            slots[s->out] = r;
            break;
        }
        case ST_EXTRACT: {
            PyObject *r = PySequence_GetItem(slots[s->src], s->index);
            if (r != NULL) {
                r = normalize_result(p, r, &c->pbufs[s->out]);
            }
            if (r == NULL) {
                goto done;
            }
            slots[s->out] = r;
            break;
        }
        }
        for (int q = 0; q < s->nfree; q++) {
            Py_CLEAR(slots[s->frees[q]]);
        }
    }
    uint64_t rg = 0;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (StaxTensor_Check(args[i]) && ((StaxTensor *)args[i])->requires_grad) {
            rg |= 1ULL << (i < 63 ? i : 63);
        }
    }
    if (rg != 0 && stax_grad_enabled()) {
        for (int b = 0; b < c->npbufs; b++) {
            pbuf_t *pb = &c->pbufs[b];
            if (pb->is_output && (pb->deps & rg) && pb->kind != PB_INPUT
                && pb->kind != PB_CONST && lw_is_float(pb->dtype)
                && slots[b] != NULL && StaxTensor_Check(slots[b])) {
                ((StaxTensor *)slots[b])->requires_grad = 1;
            }
        }
    }
    if (p->out_single >= 0) {
        result = Py_NewRef(slots[p->out_single]);
    }
    else {
        result = instantiate(p->out_template, slots);
    }
    if (result != NULL && rg != 0 && p->rg_extra != NULL && stax_grad_enabled()) {
        rg_extra_apply(p->rg_extra, result, rg, args, nargs);
    }
done:
    for (int b = 0; b < c->npbufs; b++) {
        Py_XDECREF(slots[b]);
    }
    if (slots != stack_slots) {
        free(slots);
    }
    return result;
}

static PyObject *
program_get_op_graph(Program *p, void *closure)
{
    (void)closure;
    if (p->op_graph == NULL) {
        PyObject *mod = PyImport_ImportModule("tensorplay._C");
        PyObject *f = mod ? PyObject_GetAttrString(mod, "make_op_graph") : NULL;
        Py_XDECREF(mod);
        if (f == NULL) {
            PyErr_Clear();
            return Py_NewRef(p->gm);
        }
        p->op_graph = PyObject_CallOneArg(f, p->gm);
        Py_DECREF(f);
        if (p->op_graph == NULL) {
            PyErr_Clear();
            return Py_NewRef(p->gm);
        }
    }
    return Py_NewRef(p->op_graph);
}

static PyObject *
program_get_kernels(Program *p, void *closure)
{
    (void)closure;
    return Py_NewRef(p->kernels);
}

static PyObject *
program_get_fallbacks(Program *p, void *closure)
{
    (void)closure;
    return PyLong_FromLong(p->c.nfallbacks);
}

static PyObject *
program_get_lb(Program *p, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(p->lower_bound);
}

static PyObject *
program_get_dynamic(Program *p, void *closure)
{
    (void)closure;
    return PyBool_FromLong(p->dynamic);
}

static PyObject *
program_get_gm(Program *p, void *closure)
{
    (void)closure;
    return Py_NewRef(p->gm);
}

static PyObject *
program_get_bytes(Program *p, void *closure)
{
    (void)closure;
    int64_t n = 0;
    for (int i = 0; i < p->c.nsteps; i++) {
        if (p->c.steps[i].kind == ST_KERNEL) {
            n += p->c.steps[i].k->bytes_read + p->c.steps[i].k->bytes_written;
        }
    }
    return PyLong_FromLongLong(n);
}

static PyObject *
program_get_steps(Program *p, void *closure)
{
    (void)closure;
    PyObject *l = PyList_New(0);
    static const char *names[] = {"kernel", "library", "fallback", "extract"};
    for (int i = 0; l && i < p->c.nsteps; i++) {
        step_t *s = &p->c.steps[i];
        PyObject *e = s->kind == ST_KERNEL
                          ? PyUnicode_FromFormat("kernel %s", s->k->name)
                          : PyUnicode_FromString(names[s->kind]);
        if (e == NULL || PyList_Append(l, e) < 0) {
            Py_XDECREF(e);
            Py_DECREF(l);
            return NULL;
        }
        Py_DECREF(e);
    }
    return l;
}

static PyGetSetDef program_getset[] = {
    {"kernels", (getter)program_get_kernels, NULL, "compiled kernels", NULL},
    {"op_graph", (getter)program_get_op_graph, NULL, "op-level graph", NULL},
    {"fallbacks", (getter)program_get_fallbacks, NULL, "nodes run eagerly", NULL},
    {"lower_bound_bytes", (getter)program_get_lb, NULL,
     "Prop. 1.1: bytes of the inputs plus the outputs", NULL},
    {"bytes_moved", (getter)program_get_bytes, NULL,
     "bytes read + written by all kernels per call", NULL},
    {"graph_module", (getter)program_get_gm, NULL, "the compiled GraphModule", NULL},
    {"dynamic", (getter)program_get_dynamic, NULL,
     "one artifact serves every size (a variant per size class)", NULL},
    {"steps", (getter)program_get_steps, NULL, "the program's steps", NULL},
    {NULL},
};

static PyObject *
program_repr(Program *p)
{
    return PyUnicode_FromFormat("<stax CompiledProgram: %zd kernels, %d fallbacks>",
                                PyList_GET_SIZE(p->kernels), p->c.nfallbacks);
}

static PyMemberDef program_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Program, vectorcall), READONLY},
    {NULL},
};

static PyType_Slot program_slots[] = {
    {Py_tp_dealloc, program_dealloc},
    {Py_tp_traverse, program_traverse},
    {Py_tp_clear, program_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_getset, program_getset},
    {Py_tp_members, program_members},
    {Py_tp_repr, program_repr},
    {0, NULL},
};

static PyType_Spec program_spec = {
    .name = "tensorplay._C.CompiledProgram",
    .basicsize = sizeof(Program),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = program_slots,
};

/* ------------------------------------------------------------- driver */
static const char *
operator_alias(const char *n)
{
    static const char *const map[][2] = {
        {"truediv", "div"}, {"floordiv", "floor_divide"}, {"mod", "remainder"},
        {"and_", "bitwise_and"}, {"or_", "bitwise_or"}, {"xor", "bitwise_xor"},
        {"invert", "bitwise_not"}, {"pos", "clone"}, {"concat", "cat"},
        {"concatenate", "cat"}, {"absolute", "abs"}, {"clamp_", "clamp_"},
        {"divide", "div"}, {"multiply", "mul"}, {"subtract", "sub"},
        {"greater", "gt"}, {"less", "lt"}, {"permute", "permute"},
        {"float", "to"}, {"double", "to"}, {"half", "to"}, {"int", "to"},
        {"long", "to"}, {"bool", "to"}, {"short", "to"}, {"byte", "to"},
        {"char", "to"}, {"type", "to"}, {"type_as", "to"},
        {NULL, NULL}};
    for (int i = 0; map[i][0]; i++) {
        if (!strcmp(map[i][0], n)) {
            return map[i][1];
        }
    }
    return n;
}

/* the op name of a node's target (new str) or NULL (no exception) */
static PyObject *
target_name(PyObject *node, int *is_method)
{
    PyObject *op = PyObject_GetAttrString(node, "op");
    PyObject *tg = PyObject_GetAttrString(node, "target");
    PyObject *r = NULL;
    *is_method = 0;
    if (op == NULL || tg == NULL) {
        goto done;
    }
    if (PyUnicode_Check(tg)) {
        *is_method = PyUnicode_CompareWithASCIIString(op, "call_method") == 0;
        r = Py_NewRef(tg);
        goto done;
    }
    r = PyObject_GetAttrString(tg, "_stax_op");
    if (r == NULL) {
        PyErr_Clear();
        r = PyObject_GetAttrString(tg, "__name__");
    }
    if (r != NULL && !PyUnicode_Check(r)) {
        Py_CLEAR(r);
    }
done:
    PyErr_Clear();
    Py_XDECREF(op);
    Py_XDECREF(tg);
    return r;
}

static PyObject *
node_stack(PyObject *node)
{
    PyObject *meta = PyObject_GetAttrString(node, "meta");
    PyObject *st = meta && PyDict_Check(meta) ? PyDict_GetItemString(meta, "stack") : NULL;
    PyObject *r = st ? PyObject_Str(st) : PyUnicode_FromString("<unknown source line>");
    Py_XDECREF(meta);
    return r;
}

static PyObject *
node_val(PyObject *node, PyObject *vals)
{
    if (vals != NULL) {
        PyObject *v = PyDict_GetItemWithError(vals, node);
        PyErr_Clear();
        return Py_XNewRef(v);
    }
    PyObject *meta = PyObject_GetAttrString(node, "meta");
    PyObject *v = NULL;
    if (meta != NULL && PyDict_Check(meta)) {
        v = PyDict_GetItemString(meta, "val");
        Py_XINCREF(v);
    }
    Py_XDECREF(meta);
    PyErr_Clear();
    return v;
}

typedef struct {
    lw_ctx *c;
    vbuf **vb;
    PyObject *index;
    const char *why;
    PyObject *vals;
    int ncopy;                 /* functionalized input mutations: */
    vbuf *copy_src[64];        /* an output that is the new value of a */
    int copy_dst[64];          /* mutated input returns that input */
} tmpl_ctx;

static PyObject *node_val(PyObject *node, PyObject *vals);

static void
mark_output(tmpl_ctx *t, int pb, PyObject *val)
{
    t->c->pbufs[pb].is_output = 1;
    if (val != NULL && StaxTensor_Check(val) && ((StaxTensor *)val)->requires_grad) {
        t->c->pbufs[pb].requires_grad = 1;
    }
}

/* replace Nodes by SlotRefs (materializing what a value needs) */
static PyObject *
make_template(tmpl_ctx *t, PyObject *o, int for_output)
{
    if (StaxNode_Type != NULL && PyObject_TypeCheck(o, StaxNode_Type)) {
        PyObject *ix = PyDict_GetItemWithError(t->index, o);
        if (ix == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_RuntimeError, "stax: node used before definition");
            }
            return NULL;
        }
        vbuf *v = t->vb[PyLong_AsLong(ix)];
        if (v == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "stax: node without a value");
            return NULL;
        }
        if (for_output) {
            for (int q = 0; q < t->ncopy; q++) {
                if (t->copy_src[q] == v) {
                    return slotref_new(t->copy_dst[q]);
                }
            }
        }
        if (v->kind == VB_PYOBJ) {
            return v->pbuf >= 0 ? slotref_new(v->pbuf) : Py_NewRef(v->obj ? v->obj : Py_None);
        }
        if (v->kind == VB_TUPLE) {
            PyObject *tup = PyTuple_New(v->nitems);
            for (int i = 0; tup && i < v->nitems; i++) {
                int pb = lw_materialize(t->c, v->items[i]);
                PyObject *e = pb < 0 ? NULL : slotref_new(pb);
                if (e == NULL) {
                    Py_CLEAR(tup);
                    break;
                }
                if (for_output) {
                    PyObject *nv = node_val(o, t->vals);
                    PyObject *iv = nv && PyTuple_Check(nv) && i < PyTuple_GET_SIZE(nv)
                                       ? PyTuple_GET_ITEM(nv, i) : NULL;
                    mark_output(t, pb, iv);
                    Py_XDECREF(nv);
                }
                PyTuple_SET_ITEM(tup, i, e);
            }
            return tup;
        }
        int pb = lw_materialize(t->c, v);
        if (pb < 0) {
            return NULL;
        }
        if (for_output) {
            PyObject *nv = node_val(o, t->vals);
            mark_output(t, pb, nv);
            Py_XDECREF(nv);
        }
        return slotref_new(pb);
    }
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject *r = PyTuple_CheckExact(o) ? PyTuple_New(n) : PyList_New(n);
        for (Py_ssize_t i = 0; r && i < n; i++) {
            PyObject *e = make_template(t, PySequence_Fast_GET_ITEM(o, i), for_output);
            if (e == NULL) {
                Py_CLEAR(r);
                break;
            }
            if (PyTuple_CheckExact(r)) {
                PyTuple_SET_ITEM(r, i, e);
            }
            else {
                PyList_SET_ITEM(r, i, e);
            }
        }
        return r;
    }
    if (PyDict_CheckExact(o)) {
        PyObject *r = PyDict_New(), *k, *v;
        Py_ssize_t pos = 0;
        while (r && PyDict_Next(o, &pos, &k, &v)) {
            PyObject *e = make_template(t, v, for_output);
            if (e == NULL || PyDict_SetItem(r, k, e) < 0) {
                Py_XDECREF(e);
                Py_CLEAR(r);
                break;
            }
            Py_DECREF(e);
        }
        return r;
    }
    return Py_NewRef(o);
}

static int
make_fallback(lw_ctx *c, tmpl_ctx *t, PyObject *node, PyObject *val, int is_method,
              vbuf **out)
{
    PyObject *args = PyObject_GetAttrString(node, "args");
    PyObject *kwargs = args ? PyObject_GetAttrString(node, "kwargs") : NULL;
    PyObject *target = kwargs ? PyObject_GetAttrString(node, "target") : NULL;
    PyObject *ta = NULL, *tk = NULL;
    int rc = -1;
    if (target == NULL) {
        goto done;
    }
    ta = make_template(t, args, 0);
    tk = ta ? make_template(t, kwargs == Py_None ? NULL : kwargs, 0) : NULL;
    if (ta != NULL && kwargs != NULL && tk == NULL && !PyErr_Occurred()) {
        tk = PyDict_New();
    }
    if (tk == NULL || tk == Py_None) {
        Py_XDECREF(tk);
        tk = ta ? PyDict_New() : NULL;
        if (tk == NULL) {
            goto done;
        }
    }
    if (!PyTuple_Check(ta)) {
        PyObject *x = PySequence_Tuple(ta);
        Py_SETREF(ta, x);
        if (ta == NULL) {
            goto done;
        }
    }
    step_t *s = lw_new_step(c, ST_FALLBACK);
    if (s == NULL) {
        goto done;
    }
    s->target = Py_NewRef(target);
    s->is_method = is_method;
    s->args = ta;
    s->kwargs = tk;
    ta = tk = NULL;
    s->stack = node_stack(node);
    vbuf *v = stax_arena_alloc(c->arena, sizeof(vbuf));
    if (v == NULL) {
        goto done;
    }
    v->pbuf = -1;
    int nd;
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    stax_dtype_t dt;
    int step_index = c->nsteps - 1;
    if (val != NULL && lw_val_info(val, &nd, sz, st, &dt)) {
        int pb = lw_new_pbuf(c, PB_EXTERN, nd, sz, dt);
        if (pb < 0) {
            goto done;
        }
        c->steps[step_index].out = pb;
        v->kind = VB_TENSOR;
        v->ndim = nd;
        memcpy(v->sizes, sz, sizeof(int64_t) * (size_t)nd);
        v->dtype = dt;
        v->pbuf = pb;
        v->body = lw_contig_load(c, pb);
    }
    else if (val != NULL && PyTuple_Check(val)) {
        int pb = lw_new_pbuf(c, PB_EXTERN, 0, sz, STAX_FLOAT32);
        if (pb < 0) {
            goto done;
        }
        c->pbufs[pb].ndim = -1;   /* an object, not a tensor */
        c->steps[step_index].out = pb;
        Py_ssize_t n = PyTuple_GET_SIZE(val);
        v->kind = VB_TUPLE;
        v->nitems = (int)n;
        v->items = stax_arena_alloc(c->arena, sizeof(vbuf *) * (size_t)(n ? n : 1));
        if (v->items == NULL) {
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            vbuf *it = stax_arena_alloc(c->arena, sizeof(vbuf));
            if (it == NULL) {
                goto done;
            }
            it->pbuf = -1;
            v->items[i] = it;
            PyObject *e = PyTuple_GET_ITEM(val, i);
            if (!lw_val_info(e, &nd, sz, st, &dt)) {
                it->kind = VB_PYOBJ;
                it->obj = e;
                continue;
            }
            int ob = lw_new_pbuf(c, PB_EXTERN, nd, sz, dt);
            step_t *x = ob < 0 ? NULL : lw_new_step(c, ST_EXTRACT);
            if (x == NULL) {
                goto done;
            }
            x->src = pb;
            x->index = i;
            x->out = ob;
            it->kind = VB_TENSOR;
            it->ndim = nd;
            memcpy(it->sizes, sz, sizeof(int64_t) * (size_t)nd);
            it->dtype = dt;
            it->pbuf = ob;
            it->body = lw_contig_load(c, ob);
        }
    }
    else {
        int pb = lw_new_pbuf(c, PB_EXTERN, 0, sz, STAX_FLOAT32);
        if (pb < 0) {
            goto done;
        }
        c->pbufs[pb].ndim = -1;
        c->steps[step_index].out = pb;
        v->kind = VB_PYOBJ;
        v->pbuf = pb;
    }
    c->nfallbacks++;
    *out = v;
    rc = 0;
done:
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_XDECREF(target);
    Py_XDECREF(ta);
    Py_XDECREF(tk);
    return rc;
}

static int
strict_error(PyObject *node, const char *opname, const char *why)
{
    PyObject *name = PyObject_GetAttrString(node, "name");
    PyObject *stack = node_stack(node);
    PyErr_Clear();
    PyErr_Format(stax_lower_NativeCompileError,
                 "strict_native: node '%U' (op %s) has no native lowering "
                 "(%s); at %U",
                 name ? name : Py_None, opname ? opname : "?", why,
                 stack ? stack : Py_None);
    Py_XDECREF(name);
    Py_XDECREF(stack);
    return -1;
}

static int64_t
val_bytes(PyObject *v)
{
    int nd;
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    stax_dtype_t dt;
    if (!lw_val_info(v, &nd, sz, st, &dt)) {
        return 0;
    }
    int64_t n = lw_dtype_size(dt);
    for (int d = 0; d < nd; d++) {
        n *= sz[d];
    }
    return n;
}

/* run the graph eagerly on ex: node -> value (new dict) */
static PyObject *
subst_vals(PyObject *o, PyObject *vals)
{
    if (StaxNode_Type != NULL && PyObject_TypeCheck(o, StaxNode_Type)) {
        PyObject *v = PyDict_GetItemWithError(vals, o);
        if (v == NULL && !PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "shape propagation: node used before definition");
        }
        return Py_XNewRef(v);
    }
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject *r = PyTuple_CheckExact(o) ? PyTuple_New(n) : PyList_New(n);
        for (Py_ssize_t i = 0; r && i < n; i++) {
            PyObject *e = subst_vals(PySequence_Fast_GET_ITEM(o, i), vals);
            if (e == NULL) {
                Py_CLEAR(r);
                break;
            }
            if (PyTuple_CheckExact(r)) {
                PyTuple_SET_ITEM(r, i, e);
            }
            else {
                PyList_SET_ITEM(r, i, e);
            }
        }
        return r;
    }
    if (PyDict_CheckExact(o)) {
        PyObject *r = PyDict_New(), *k, *v;
        Py_ssize_t pos = 0;
        while (r && PyDict_Next(o, &pos, &k, &v)) {
            PyObject *e = subst_vals(v, vals);
            if (e == NULL || PyDict_SetItem(r, k, e) < 0) {
                Py_XDECREF(e);
                Py_CLEAR(r);
            }
            Py_XDECREF(e);
        }
        return r;
    }
    return Py_NewRef(o);
}

static PyObject *
shape_prop(PyObject *gm, PyObject *ex)
{
    PyObject *graph = PyObject_GetAttrString(gm, "graph");
    PyObject *nl = graph ? PyObject_GetAttrString(graph, "nodes") : NULL;
    PyObject *nodes = nl ? PySequence_List(nl) : NULL;
    PyObject *vals = nodes ? PyDict_New() : NULL;
    Py_XDECREF(graph);
    Py_XDECREF(nl);
    int k = 0;
    for (Py_ssize_t i = 0; vals && i < PyList_GET_SIZE(nodes); i++) {
        PyObject *node = PyList_GET_ITEM(nodes, i);
        PyObject *op = PyObject_GetAttrString(node, "op");
        PyObject *tg = op ? PyObject_GetAttrString(node, "target") : NULL;
        PyObject *a = tg ? PyObject_GetAttrString(node, "args") : NULL;
        PyObject *kw = a ? PyObject_GetAttrString(node, "kwargs") : NULL;
        PyObject *r = NULL;
        const char *o = op ? PyUnicode_AsUTF8(op) : NULL;
        if (kw != NULL && o != NULL) {
            if (!strcmp(o, "placeholder")) {
                r = k < PyTuple_GET_SIZE(ex) ? Py_NewRef(PyTuple_GET_ITEM(ex, k)) : Py_NewRef(Py_None);
                k++;
            }
            else if (!strcmp(o, "output")) {
                r = Py_NewRef(Py_None);
            }
            else if (!strcmp(o, "get_attr")) {
                r = PyObject_GetAttr(gm, tg);
            }
            else {
                PyObject *sa = subst_vals(a, vals);
                PyObject *sk = sa ? subst_vals(kw == Py_None ? Py_None : kw, vals) : NULL;
                if (sk != NULL && sk != Py_None && !PyDict_Check(sk)) {
                    Py_CLEAR(sk);
                }
                if (sa != NULL && !PyTuple_Check(sa)) {
                    Py_SETREF(sa, PySequence_Tuple(sa));
                }
                if (sa != NULL && (sk != NULL || kw == Py_None || PyErr_Occurred() == NULL)) {
                    PyObject *kwd = (sk == NULL || sk == Py_None) ? NULL : sk;
                    if (!strcmp(o, "call_method")) {
                        PyObject *m = PyObject_GetAttr(PyTuple_GET_ITEM(sa, 0), tg);
                        PyObject *rest = m ? PyTuple_GetSlice(sa, 1, PyTuple_GET_SIZE(sa)) : NULL;
                        r = rest ? PyObject_Call(m, rest, kwd) : NULL;
                        Py_XDECREF(m);
                        Py_XDECREF(rest);
                    }
                    else {
                        r = PyObject_Call(tg, sa, kwd);
                    }
                }
                Py_XDECREF(sa);
                Py_XDECREF(sk);
            }
        }
        Py_XDECREF(op);
        Py_XDECREF(tg);
        Py_XDECREF(a);
        Py_XDECREF(kw);
        if (r == NULL || PyDict_SetItem(vals, node, r) < 0) {
            Py_XDECREF(r);
            Py_CLEAR(vals);
            break;
        }
        Py_DECREF(r);
    }
    Py_XDECREF(nodes);
    return vals;
}

static PyObject *
stax_backend_fn(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    (void)mod;
    PyObject *gm = NULL, *examples = NULL;
    int strict = 0, dynamic = 0;
    if (!PyArg_ParseTuple(args, "OO:stax_backend", &gm, &examples)) {
        return NULL;
    }
    if (kwargs != NULL) {
        PyObject *s = PyDict_GetItemString(kwargs, "strict_native");
        if (s != NULL && (strict = PyObject_IsTrue(s)) < 0) {
            return NULL;
        }
        s = PyDict_GetItemString(kwargs, "dynamic");
        if (s != NULL && (dynamic = PyObject_IsTrue(s)) < 0) {
            return NULL;
        }
    }
    PyObject *ex = PySequence_Tuple(examples);
    if (ex == NULL) {
        return NULL;
    }
    /* a graph that mutates (in-place ops) is lowered from its op-level
     * graph, where functionalization turned mutations into values and
     * copy_ into the mutated inputs; others from the Python-level graph
     * (same semantics, no pass cost on the first call) */
    PyObject *gm_in = gm;
    gm = NULL;
    {
        PyObject *g0 = PyObject_GetAttrString(gm_in, "graph");
        PyObject *l0 = g0 ? PyObject_GetAttrString(g0, "nodes") : NULL;
        PyObject *n0 = l0 ? PySequence_List(l0) : NULL;
        Py_XDECREF(g0);
        Py_XDECREF(l0);
        int mut = 0;
        for (Py_ssize_t i = 0; n0 && i < PyList_GET_SIZE(n0) && !mut; i++) {
            int im = 0;
            PyObject *nm = target_name(PyList_GET_ITEM(n0, i), &im);
            if (nm != NULL) {
                const char *sname = PyUnicode_AsUTF8(nm);
                size_t l = sname ? strlen(sname) : 0;
                mut = l > 1 && sname[l - 1] == '_' && sname[l - 2] != '_';
                mut |= sname && strstr(sname, "setitem") != NULL;
            }
            Py_XDECREF(nm);
        }
        Py_XDECREF(n0);
        PyErr_Clear();
        if (mut) {
            PyObject *m = PyImport_ImportModule("tensorplay._C");
            PyObject *f = m ? PyObject_GetAttrString(m, "make_op_graph") : NULL;
            Py_XDECREF(m);
            gm = f ? PyObject_CallOneArg(f, gm_in) : NULL;
            Py_XDECREF(f);
            if (gm == NULL) {
                PyErr_Clear();
            }
        }
        if (gm == NULL) {
            gm = Py_NewRef(gm_in);
        }
    }
    /* the graph's meta['val'] describe the traced sizes: other example
     * sizes (a per-layout artifact) need their own values */
    PyObject *vals = NULL;
    PyObject *graph = PyObject_GetAttrString(gm, "graph");
    PyObject *nl = graph ? PyObject_GetAttrString(graph, "nodes") : NULL;
    PyObject *nodes = nl ? PySequence_List(nl) : NULL;
    Py_XDECREF(graph);
    Py_XDECREF(nl);
    if (nodes == NULL) {
        Py_DECREF(ex);
        Py_DECREF(gm);
        return NULL;
    }
    int k = 0, differ = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes) && !differ; i++) {
        PyObject *node = PyList_GET_ITEM(nodes, i);
        PyObject *op = PyObject_GetAttrString(node, "op");
        if (op != NULL && PyUnicode_CompareWithASCIIString(op, "placeholder") == 0) {
            PyObject *v = node_val(node, NULL);
            int n1, n2;
            int64_t s1[STAX_MAX_DIMS], s2[STAX_MAX_DIMS], t1[STAX_MAX_DIMS], t2[STAX_MAX_DIMS];
            stax_dtype_t d1, d2;
            if (v != NULL && k < PyTuple_GET_SIZE(ex)
                && lw_val_info(v, &n1, s1, t1, &d1)
                && lw_val_info(PyTuple_GET_ITEM(ex, k), &n2, s2, t2, &d2)) {
                differ = n1 != n2 || d1 != d2
                         || memcmp(s1, s2, sizeof(int64_t) * (size_t)n1) != 0;
            }
            Py_XDECREF(v);
            k++;
        }
        else if (op != NULL && PyUnicode_CompareWithASCIIString(op, "output") != 0) {
            /* nodes a pass created without a value: propagate shapes */
            PyObject *v = node_val(node, NULL);
            differ |= v == NULL;
            Py_XDECREF(v);
        }
        Py_XDECREF(op);
    }
    PyErr_Clear();
    Py_DECREF(nodes);
    if (differ) {
        vals = shape_prop(gm, ex);
        if (vals == NULL) {
            Py_DECREF(ex);
            Py_DECREF(gm);
            return NULL;
        }
    }
    PyObject *r = build_program(gm, ex, strict, dynamic, vals, 0, NULL);
    if (r != NULL && ((Program *)r)->c.nrand > 0 && ((Program *)r)->c.nfallbacks > 0) {
        /* a fallback kernel could draw from the generator between native
         * draws: keep eager's order by running the random ops eagerly too */
        Py_SETREF(r, build_program(gm, ex, strict, dynamic, vals, 1, NULL));
    }
    if (r != NULL && gm != gm_in) {
        Py_XSETREF(((Program *)r)->op_graph, Py_NewRef(gm));
        Py_XSETREF(((Program *)r)->rg_extra, rg_extra_template(gm_in));
    }
    Py_XDECREF(vals);
    Py_DECREF(ex);
    Py_DECREF(gm);
    return r;
}

static PyObject *
build_program(PyObject *gm, PyObject *ex, int strict, int dynamic, PyObject *vals,
              int no_random, PyObject *kcache)
{
    PyObject *graph = NULL, *nodes = NULL, *index = NULL;
    Program *p = NULL;
    vbuf **vb = NULL;
    Py_INCREF(ex);
    stax_backend *be = stax_lower_get_backend("llvm");
    if (be == NULL) {
        Py_DECREF(ex);
        PyErr_SetString(PyExc_RuntimeError,
                        "the Stax CPU back end needs LLVM: tensorplay was built "
                        "without it; install llvm-19-dev (apt-get install "
                        "llvm-19-dev) and rebuild with `make build`");
        return NULL;
    }
    graph = PyObject_GetAttrString(gm, "graph");
    PyObject *nl = graph ? PyObject_GetAttrString(graph, "nodes") : NULL;
    nodes = nl ? PySequence_List(nl) : NULL;
    Py_XDECREF(nl);
    index = nodes ? PyDict_New() : NULL;
    if (index == NULL) {
        goto error;
    }
    p = PyObject_GC_New(Program, Program_Type);
    if (p == NULL) {
        goto error;
    }
    memset(((char *)p) + sizeof(PyObject), 0, sizeof(Program) - sizeof(PyObject));
    p->vectorcall = program_vectorcall;
    p->out_single = -1;
    p->gm = Py_NewRef(gm);
    p->dynamic = dynamic;
    p->strict = strict;
    lw_ctx *c = &p->c;
    c->arena = stax_arena_new();
    c->be = be;
    c->strict = strict;
    c->no_random = no_random;
    static int force_symbolic = -1;
    if (force_symbolic < 0) {
        /* testing knob: lower static programs symbolically too */
        force_symbolic = getenv("STAX_SYMBOLIC") != NULL;
    }
    if ((dynamic || force_symbolic) && kcache == NULL) {
        /* the first size of the class: its kernels start the cache that
         * the variants (other sizes) share */
        p->kcache = PyDict_New();
        if (p->kcache == NULL) {
            goto error;
        }
        kcache = p->kcache;
    }
    else if (kcache != NULL) {
        p->kcache = Py_NewRef(kcache);
    }
    c->symbolic = kcache != NULL;
    c->kcache = kcache;
    if (c->arena == NULL) {
        goto error;
    }
    Py_ssize_t nn = PyList_GET_SIZE(nodes);
    vb = calloc((size_t)(nn ? nn : 1), sizeof(vbuf *));
    Py_ssize_t nin = PyTuple_GET_SIZE(ex);
    p->in_sizes = calloc((size_t)(nin ? nin : 1) * 2 * STAX_MAX_DIMS, sizeof(int64_t));
    p->in_ndim = calloc((size_t)(nin ? nin : 1), sizeof(int));
    p->in_dtype = calloc((size_t)(nin ? nin : 1), sizeof(stax_dtype_t));
    if (vb == NULL || p->in_sizes == NULL || p->in_ndim == NULL || p->in_dtype == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    c->ninputs = (int)nin;
    for (Py_ssize_t i = 0; i < nin; i++) {
        p->in_ndim[i] = -1;
        if (PyArray_Check(PyTuple_GET_ITEM(ex, i))) {
            c->numpy_io = 1;
        }
    }
    tmpl_ctx tc = {c, vb, index, NULL, vals, 0, {NULL}, {0}};
    /* functionalized input mutations (copy_ into a placeholder) run after
     * everything that reads the old values */
    int copy_nodes[64], ncopies = 0;
    PyObject *output_t = NULL;
    int nph = 0;
    for (Py_ssize_t i = 0; i < nn; i++) {
        PyObject *node = PyList_GET_ITEM(nodes, i);
        PyObject *ii = PyLong_FromSsize_t(i);
        if (ii == NULL || PyDict_SetItem(index, node, ii) < 0) {
            Py_XDECREF(ii);
            goto error;
        }
        Py_DECREF(ii);
        PyObject *ops = PyObject_GetAttrString(node, "op");
        if (ops == NULL) {
            goto error;
        }
        const char *opc = PyUnicode_AsUTF8(ops);
        if (opc == NULL) {
            Py_DECREF(ops);
            goto error;
        }
        vbuf *v = NULL;
        if (!strcmp(opc, "placeholder")) {
            int k = nph++;
            if (k >= nin) {
                Py_DECREF(ops);
                PyErr_SetString(PyExc_TypeError, "stax_backend: fewer example inputs than placeholders");
                goto error;
            }
            PyObject *e = PyTuple_GET_ITEM(ex, k);
            v = stax_arena_alloc(c->arena, sizeof(vbuf));
            if (v == NULL) {
                Py_DECREF(ops);
                goto error;
            }
            int nd;
            int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
            stax_dtype_t dt;
            if (lw_val_info(e, &nd, sz, st, &dt)) {
                int pb = lw_new_pbuf(c, PB_INPUT, nd, sz, dt);
                if (pb < 0) {
                    Py_DECREF(ops);
                    goto error;
                }
                c->pbufs[pb].input = k;
                memcpy(c->pbufs[pb].strides, st, sizeof(int64_t) * (size_t)nd);
                p->in_ndim[k] = nd;
                p->in_dtype[k] = dt;
                memcpy(p->in_sizes + (size_t)k * 2 * STAX_MAX_DIMS, sz, sizeof(int64_t) * (size_t)nd);
                memcpy(p->in_sizes + (size_t)k * 2 * STAX_MAX_DIMS + STAX_MAX_DIMS, st,
                       sizeof(int64_t) * (size_t)nd);
                v->kind = VB_TENSOR;
                v->ndim = nd;
                memcpy(v->sizes, sz, sizeof(int64_t) * (size_t)nd);
                v->dtype = dt;
                v->pbuf = pb;
                v->body = lw_contig_load(c, pb);
                p->lower_bound += val_bytes(e);
            }
            else {
                int pb = lw_new_pbuf(c, PB_INPUT, 0, sz, STAX_FLOAT32);
                if (pb < 0) {
                    Py_DECREF(ops);
                    goto error;
                }
                c->pbufs[pb].input = k;
                c->pbufs[pb].ndim = -1;
                v->kind = VB_PYOBJ;
                v->pbuf = pb;
            }
        }
        else if (!strcmp(opc, "get_attr")) {
            PyObject *tg = PyObject_GetAttrString(node, "target");
            PyObject *obj = Py_NewRef(gm);
            if (tg != NULL && PyUnicode_Check(tg)) {
                PyObject *parts = PyUnicode_Split(tg, PyUnicode_FromString("."), -1);
                for (Py_ssize_t q = 0; parts && obj && q < PyList_GET_SIZE(parts); q++) {
                    Py_SETREF(obj, PyObject_GetAttr(obj, PyList_GET_ITEM(parts, q)));
                }
                Py_XDECREF(parts);
            }
            Py_XDECREF(tg);
            v = stax_arena_alloc(c->arena, sizeof(vbuf));
            if (obj == NULL || v == NULL) {
                Py_XDECREF(obj);
                Py_DECREF(ops);
                goto error;
            }
            int nd;
            int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
            stax_dtype_t dt;
            if (lw_val_info(obj, &nd, sz, st, &dt)) {
                int pb = lw_new_pbuf(c, PB_CONST, nd, sz, dt);
                if (pb < 0) {
                    Py_DECREF(obj);
                    Py_DECREF(ops);
                    goto error;
                }
                memcpy(c->pbufs[pb].strides, st, sizeof(int64_t) * (size_t)nd);
                c->pbufs[pb].obj = obj;
                v->kind = VB_TENSOR;
                v->ndim = nd;
                memcpy(v->sizes, sz, sizeof(int64_t) * (size_t)nd);
                v->dtype = dt;
                v->pbuf = pb;
                v->body = lw_contig_load(c, pb);
            }
            else {
                int pb = lw_new_pbuf(c, PB_CONST, 0, sz, STAX_FLOAT32);
                if (pb < 0) {
                    Py_DECREF(obj);
                    Py_DECREF(ops);
                    goto error;
                }
                c->pbufs[pb].ndim = -1;
                c->pbufs[pb].obj = obj;
                v->kind = VB_PYOBJ;
                v->pbuf = pb;
            }
            v->pbuf = v->pbuf;
        }
        else if (!strcmp(opc, "output")) {
            PyObject *a = PyObject_GetAttrString(node, "args");
            if (a == NULL) {
                Py_DECREF(ops);
                goto error;
            }
            PyObject *o = PyTuple_Check(a) && PyTuple_GET_SIZE(a) == 1 ? PyTuple_GET_ITEM(a, 0) : a;
            Py_XSETREF(output_t, make_template(&tc, o, 1));
            Py_DECREF(a);
            if (output_t == NULL) {
                Py_DECREF(ops);
                goto error;
            }
        }
        else {
            int is_method = 0;
            PyObject *nm = target_name(node, &is_method);
            const char *opname = nm ? PyUnicode_AsUTF8(nm) : NULL;
            if (opname == NULL) {
                PyErr_Clear();
            }
            const char *alias = opname ? operator_alias(opname) : NULL;
            char base[96] = "";
            if (alias) {
                /* "add.Tensor" (op overloads) -> "add" */
                snprintf(base, sizeof(base), "%s", alias);
                char *dot = strchr(base, '.');
                if (dot) {
                    *dot = 0;
                }
            }
            const stax_op_info *op = base[0] ? stax_op_by_name(base) : NULL;
            if (!strcmp(base, "copy_") && ncopies < 64) {
                PyObject *ca = PyObject_GetAttrString(node, "args");
                vbuf *dv = NULL, *sv = NULL;
                if (ca != NULL && PyTuple_Check(ca) && PyTuple_GET_SIZE(ca) >= 2) {
                    PyObject *i0 = PyDict_GetItem(index, PyTuple_GET_ITEM(ca, 0));
                    PyObject *i1 = PyDict_GetItem(index, PyTuple_GET_ITEM(ca, 1));
                    dv = i0 ? vb[PyLong_AsLong(i0)] : NULL;
                    sv = i1 ? vb[PyLong_AsLong(i1)] : NULL;
                }
                Py_XDECREF(ca);
                PyErr_Clear();
                if (dv != NULL && sv != NULL && dv->kind == VB_TENSOR && sv->kind == VB_TENSOR
                    && dv->pbuf >= 0 && c->pbufs[dv->pbuf].kind == PB_INPUT) {
                    tc.copy_src[tc.ncopy] = sv;
                    tc.copy_dst[tc.ncopy] = dv->pbuf;
                    tc.ncopy++;
                    copy_nodes[ncopies++] = (int)i;
                    v = sv;
                    Py_XDECREF(nm);
                    Py_DECREF(ops);
                    vb[i] = v;
                    continue;
                }
            }
            PyObject *val = node_val(node, vals);
            PyObject *nargs = PyObject_GetAttrString(node, "args");
            PyObject *nkw = nargs ? PyObject_GetAttrString(node, "kwargs") : NULL;
            const char *why = NULL;
            int rc = 0;
            if (nargs == NULL || nkw == NULL) {
                PyErr_Clear();
                why = "node without args";
            }
            else if (val == NULL) {
                why = "node without meta['val']";
            }
            else if (op == NULL) {
                why = "no op of the op table matches the node's target";
            }
            else {
                struct lw_node_in in = {base, op, node, nargs,
                                        nkw == Py_None ? NULL : nkw, val, vb, index};
                rc = lw_lower_node(c, &in, &v, &why);
                if (rc < 0) {
                    /* an internal lowering problem: report, then fall back */
                    PyObject *et, *ev, *etb;
                    PyErr_Fetch(&et, &ev, &etb);
                    PyObject *msg = ev ? PyObject_Str(ev) : NULL;
                    static char buf[256];
                    snprintf(buf, sizeof(buf), "lowering failed: %s",
                             msg ? PyUnicode_AsUTF8(msg) : "?");
                    PyErr_Clear();
                    Py_XDECREF(msg);
                    Py_XDECREF(et);
                    Py_XDECREF(ev);
                    Py_XDECREF(etb);
                    why = buf;
                    rc = 0;
                }
            }
            Py_XDECREF(nargs);
            Py_XDECREF(nkw);
            if (rc == 0) {
                if (strict) {
                    strict_error(node, opname ? opname : "?", why ? why : "unsupported");
                    Py_XDECREF(val);
                    Py_XDECREF(nm);
                    Py_DECREF(ops);
                    goto error;
                }
                if (make_fallback(c, &tc, node, val, is_method, &v) < 0) {
                    Py_XDECREF(val);
                    Py_XDECREF(nm);
                    Py_DECREF(ops);
                    goto error;
                }
            }
            Py_XDECREF(val);
            Py_XDECREF(nm);
        }
        Py_DECREF(ops);
        vb[i] = v;
    }
    if (output_t == NULL) {
        output_t = Py_NewRef(Py_None);
    }
    /* a copy's source that reads an input another copy writes is
     * materialized before any input is written */
    for (int q = 0; q < ncopies; q++) {
        PyObject *ca = PyObject_GetAttrString(PyList_GET_ITEM(nodes, copy_nodes[q]), "args");
        if (ca == NULL) {
            goto error;
        }
        vbuf *sv = vb[PyLong_AsLong(PyDict_GetItem(index, PyTuple_GET_ITEM(ca, 1)))];
        Py_DECREF(ca);
        for (int r = 0; r < ncopies && sv->pbuf < 0; r++) {
            PyObject *cb = PyObject_GetAttrString(PyList_GET_ITEM(nodes, copy_nodes[r]), "args");
            if (cb == NULL) {
                goto error;
            }
            vbuf *dv = vb[PyLong_AsLong(PyDict_GetItem(index, PyTuple_GET_ITEM(cb, 0)))];
            Py_DECREF(cb);
            int hit = r == q ? 0 : lw_body_reads(c, sv->body, dv->pbuf);
            if (hit < 0 || (hit > 0 && lw_materialize(c, sv) < 0)) {
                goto error;
            }
        }
    }
    for (int q = 0; q < ncopies; q++) {
        PyObject *node = PyList_GET_ITEM(nodes, copy_nodes[q]);
        PyObject *ca = PyObject_GetAttrString(node, "args");
        if (ca == NULL) {
            goto error;
        }
        vbuf *dv = vb[PyLong_AsLong(PyDict_GetItem(index, PyTuple_GET_ITEM(ca, 0)))];
        vbuf *sv = vb[PyLong_AsLong(PyDict_GetItem(index, PyTuple_GET_ITEM(ca, 1)))];
        Py_DECREF(ca);
        int rc = lw_lower_copy_into(c, dv, sv);
        if (rc < 0) {
            goto error;
        }
        if (rc == 0) {
            if (strict) {
                strict_error(node, "copy_", "mutation of an expanded input");
                goto error;
            }
            vbuf *fv = NULL;
            if (make_fallback(c, &tc, node, NULL, 0, &fv) < 0) {
                goto error;
            }
        }
    }
    p->out_template = output_t;
    if (stax_lower_slotref_index(output_t) >= 0) {
        p->out_single = stax_lower_slotref_index(output_t);
    }
    /* outputs */
    int outs[256], nouts = 0;
    for (int b = 0; b < c->npbufs && nouts < 256; b++) {
        if (c->pbufs[b].is_output) {
            outs[nouts++] = b;
            if (c->pbufs[b].ndim >= 0) {
                pbuf_t *pb = &c->pbufs[b];
                int64_t n = lw_dtype_size(pb->dtype);
                for (int d = 0; d < pb->ndim; d++) {
                    n *= pb->sizes[d];
                }
                p->lower_bound += n;
            }
        }
    }
    if (lw_finalize(c, outs, nouts) < 0) {
        goto error;
    }
    p->kernels = PyList_New(0);
    if (p->kernels == NULL) {
        goto error;
    }
    for (int i = 0; i < c->nsteps; i++) {
        step_t *s = &c->steps[i];
        if (s->kind != ST_KERNEL) {
            continue;
        }
        PyObject *ki = PyStructSequence_New(KernelInfo_Type);
        PyObject *lir = stax_lower_kernel_str(s->k);
        if (ki == NULL || lir == NULL) {
            Py_XDECREF(ki);
            Py_XDECREF(lir);
            goto error;
        }
        PyStructSequence_SET_ITEM(ki, 0, PyUnicode_FromString(s->k->name));
        PyStructSequence_SET_ITEM(ki, 1, Py_NewRef(s->source ? s->source : Py_None));
        PyStructSequence_SET_ITEM(ki, 2, lir);
        PyStructSequence_SET_ITEM(ki, 3, PyLong_FromLongLong(s->k->bytes_read));
        PyStructSequence_SET_ITEM(ki, 4, PyLong_FromLongLong(s->k->bytes_written));
        int rc = PyList_Append(p->kernels, ki);
        Py_DECREF(ki);
        if (rc < 0) {
            goto error;
        }
    }
    free(vb);
    Py_DECREF(ex);
    Py_DECREF(graph);
    Py_DECREF(nodes);
    Py_DECREF(index);
    PyObject_GC_Track(p);
    return (PyObject *)p;
error:
    free(vb);
    Py_XDECREF(ex);
    Py_XDECREF(graph);
    Py_XDECREF(nodes);
    Py_XDECREF(index);
    if (p != NULL) {
        if (p->kernels == NULL) {
            p->kernels = PyList_New(0);
        }
        Py_DECREF(p);
    }
    return NULL;
}

static PyObject *
num_threads_fn(PyObject *mod, PyObject *noargs)
{
    (void)mod;
    (void)noargs;
    return PyLong_FromLong(stax_lower_num_threads());
}

static PyMethodDef program_methods[] = {
    {"stax_backend", (PyCFunction)(void (*)(void))stax_backend_fn,
     METH_VARARGS | METH_KEYWORDS,
     "stax_backend(gm, example_inputs, strict_native=False, **options) -> "
     "CompiledProgram\n\nThe Stax back end (seed 1.2): lowers the graph to "
     "loop-level IR, fuses, compiles kernels with LLVM and returns a callable."},
    {"_stax_num_threads", num_threads_fn, METH_NOARGS, "thread pool size"},
    {NULL, NULL, 0, NULL},
};

int
stax_lower_program_init(PyObject *m)
{
    SlotRef_Type = (PyTypeObject *)PyType_FromSpec(&slotref_spec);
    if (SlotRef_Type == NULL) {
        return -1;
    }
    Program_Type = (PyTypeObject *)PyType_FromSpec(&program_spec);
    if (Program_Type == NULL) {
        return -1;
    }
    KernelInfo_Type = PyStructSequence_NewType(&kinfo_desc);
    if (KernelInfo_Type == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "CompiledProgram", (PyObject *)Program_Type) < 0
        || PyModule_AddObjectRef(m, "StaxKernel", (PyObject *)KernelInfo_Type) < 0) {
        return -1;
    }
    return PyModule_AddFunctions(m, program_methods);
}
