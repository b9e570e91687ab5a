/* The compiled-program runtime (and the registration of the stax back
 * end entry point, tensorplay._C.stax_backend, built in program_build.c):
 * a CompiledProgram is a list of steps (kernel calls, library calls,
 * fallback kernels) over a buffer plan.  Its call path is C only: check
 * the inputs, allocate fresh outputs, run the steps (big kernels with the
 * GIL released, split across the thread pool), release intermediates at
 * their last use, return the output pytree. */
#include <stdatomic.h>
#include "lower/lower_internal.h"
#include "graph/graph.h"
#include "device/device.h"
#include "tensor/stax_numpy.h"
#include <structmember.h>

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
#include <link.h>
#include <time.h>

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

PyObject *
lw_slotref_new(int i)
{
    SlotRef *s = PyObject_New(SlotRef, SlotRef_Type);
    if (s != NULL) {
        s->index = i;
    }
    return (PyObject *)s;
}

/* ---------------------------------------------------------- KernelInfo */
PyTypeObject *lw_kernel_info_type;

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
/* the Program struct: lower_internal.h */

PyTypeObject *lw_program_type;

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
    Py_CLEAR(c->symvals);
    for (int r = 0; r < c->nrand; r++) {
        Py_CLEAR(c->rand_gen[r]);
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
    Py_VISIT(p->variants);
    Py_VISIT(p->kcache);
    Py_VISIT(p->rg_extra);
    Py_VISIT(p->py_gm);
    for (int i = 0; i < p->c.nsteps; i++) {
        Py_VISIT(p->c.steps[i].target);
        Py_VISIT(p->c.steps[i].args);
        Py_VISIT(p->c.steps[i].kwargs);
    }
    for (int i = 0; i < p->c.npbufs; i++) {
        Py_VISIT(p->c.pbufs[i].obj);
    }
    Py_VISIT(p->c.symvals);
    return 0;
}

static int
program_clear(Program *p)
{
    Py_CLEAR(p->kernels);
    Py_CLEAR(p->out_template);
    Py_CLEAR(p->gm);
    Py_CLEAR(p->variants);
    Py_CLEAR(p->kcache);
    Py_CLEAR(p->rg_extra);
    Py_CLEAR(p->py_gm);
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
    lw_cgraph_free(p);     /* its graph goes with the program */
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

static PyObject *from_array(Program *p, PyObject *a, stax_dtype_t dt);

/* ST_SCATTER: out = a copy of self, then the visited elements in C order,
 * each combined into out at its index along dim (lower_movement.c).  An
 * index out of range is skipped (the program's index check then reruns
 * the call eagerly).  T: the element type, F: 1 for floats (NaN-propagating
 * max / min, true division for mean) */
#define SC_COMBINE(T, F, o, v, mode)                                            \
    switch (mode) {                                                             \
    case LW_SC_SET: o = v; break;                                               \
    case LW_SC_ADD: case LW_SC_MEAN: o = (T)(o + v); break;                     \
    case LW_SC_MUL: o = (T)(o * v); break;                                      \
    case LW_SC_AMAX: o = (F && (o != o || v != v)) ? (T)(o != o ? o : v)        \
                         : (v > o ? v : o); break;                              \
    case LW_SC_AMIN: o = (F && (o != o || v != v)) ? (T)(o != o ? o : v)        \
                         : (v < o ? v : o); break;                              \
    }

/* mean's division: true for floats, floor for integers (torch) */
#define SC_DIV_F(T, a, n) ((T)((a) / (T)(n)))
#define SC_DIV_I(T, a, n) ((T)((a) / (T)(n) - ((((a) % (T)(n)) != 0 && (a) < 0) ? 1 : 0)))

#define SC_LOOP(T, F, MEANDIV)                                                  \
    do {                                                                        \
        T *o = (T *)od;                                                         \
        const T *sv = (const T *)sd;                                            \
        const T cval = (T)cv, alpha = (T)alv;                                   \
        int64_t it[STAX_MAX_DIMS] = {0}, spos = 0, obase = 0;                   \
        for (int64_t e = 0; e < nvis; e++) {                                    \
            int64_t k_d = index1d ? idx[it[d]] : idx[e];                        \
            if (k_d >= 0 && k_d < dsize) {                                      \
                int64_t opos = obase + k_d * ostr[d];                           \
                T v = sv != NULL ? sv[spos] : cval;                             \
                if (scaled) {                                                   \
                    v = (T)(v * alpha);                                         \
                }                                                               \
                if (cnt != NULL && cnt[opos]++ == 0 && !include_self) {         \
                    o[opos] = v;                                                \
                }                                                               \
                else {                                                          \
                    SC_COMBINE(T, F, o[opos], v, mode)                          \
                }                                                               \
            }                                                                   \
            /* the next element in C order: the odometer */                     \
            for (int k = nd - 1; k >= 0; k--) {                                 \
                it[k]++;                                                        \
                spos += sstr[k];                                                \
                obase += k == d ? 0 : ostr[k];                                  \
                if (it[k] < isz[k]) {                                           \
                    break;                                                      \
                }                                                               \
                spos -= sstr[k] * isz[k];                                       \
                obase -= k == d ? 0 : ostr[k] * isz[k];                         \
                it[k] = 0;                                                      \
            }                                                                   \
        }                                                                       \
        if (mode == LW_SC_MEAN) {                                               \
            for (int64_t q = 0; q < nout; q++) {                                \
                int64_t c_ = cnt[q] + (include_self ? 1 : 0);                   \
                if (cnt[q] == 0 || c_ == 0) {                                   \
                    continue;                                                   \
                }                                                               \
                o[q] = MEANDIV(T, o[q], c_);                                    \
            }                                                                   \
        }                                                                       \
    } while (0)

static PyObject *
run_scatter(Program *p, step_t *s, PyObject **slots)
{
    lw_ctx *c = &p->c;
    stax_dtype_t dt = c->pbufs[s->out].dtype;
    int nd = s->scat.ndim, d = s->scat.dim;
    npy_intp dims[STAX_MAX_DIMS];
    int64_t nout = 1, nvis = 1;
    for (int k = 0; k < nd; k++) {
        dims[k] = (npy_intp)s->scat.ssizes[k];
        nout *= s->scat.ssizes[k];
        nvis *= s->scat.isizes[k];
    }
    PyObject *arr = PyArray_SimpleNew(nd, dims, stax_dtype_to_npy(dt));
    if (arr == NULL) {
        return NULL;
    }
    char *od = PyArray_DATA((PyArrayObject *)arr);
    memcpy(od, data_ptr(slots[s->a]), (size_t)nout * (size_t)lw_dtype_size(dt));
    const int64_t *idx = (const int64_t *)data_ptr(slots[s->scat.index]);
    const char *sd = s->scat.src >= 0 ? data_ptr(slots[s->scat.src]) : NULL;
    /* the loop reads locals only (its stores through o could alias the
     * step's fields) */
    const int index1d = s->scat.index1d, mode = s->scat.mode;
    const int include_self = s->scat.include_self, scaled = s->scat.alpha != 1.0;
    const double cv = s->scat.value, alv = s->scat.alpha;
    const int64_t dsize = s->scat.ssizes[d];
    int64_t ostr[STAX_MAX_DIMS], sstr[STAX_MAX_DIMS], isz[STAX_MAX_DIMS];
    int64_t so = 1, ss = 1;
    for (int k = nd - 1; k >= 0; k--) {
        ostr[k] = so;
        sstr[k] = ss;
        isz[k] = s->scat.isizes[k];
        so *= s->scat.ssizes[k];
        ss *= s->scat.srcsizes[k];
    }
    int64_t *cnt = NULL;
    if (s->scat.mode == LW_SC_MEAN || !s->scat.include_self) {
        cnt = calloc((size_t)(nout > 0 ? nout : 1), sizeof(int64_t));
        if (cnt == NULL) {
            Py_DECREF(arr);
            PyErr_NoMemory();
            return NULL;
        }
    }
    switch (dt) {
    case STAX_FLOAT32:
        SC_LOOP(float, 1, SC_DIV_F);
        break;
    case STAX_FLOAT64:
        SC_LOOP(double, 1, SC_DIV_F);
        break;
    case STAX_INT64:
        SC_LOOP(int64_t, 0, SC_DIV_I);
        break;
    case STAX_INT32:
        SC_LOOP(int32_t, 0, SC_DIV_I);
        break;
    default:
        free(cnt);
        Py_DECREF(arr);
        PyErr_SetString(PyExc_RuntimeError, "stax: scatter step of an unsupported dtype");
        return NULL;
    }
    free(cnt);
    return from_array(p, arr, dt);
}

static PyObject *
as_array(PyObject *o)
{
    if (PyArray_Check(o)) {
        return Py_NewRef(o);
    }
    /* bfloat16 buffers are their uint16 bits: copied, never computed on
     * (matmul steps refuse bfloat16) */
    return stax_tensor_as_storage_array((StaxTensor *)o);
}

/* a (contiguous) tensor of dtype dt on array a (storage bits) */
static PyObject *
from_array(Program *p, PyObject *a, stax_dtype_t dt)
{
    if (p->c.numpy_io || a == NULL) {
        return a;
    }
    PyObject *c = PyArray_FROM_OF(a, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
    Py_DECREF(a);
    if (c == NULL) {
        return NULL;
    }
    PyObject *t = (PyObject *)stax_tensor_from_storage_array(c, dt);
    Py_DECREF(c);
    return t;
}

/* a fallback/extract result as a contiguous tensor of the planned dtype.
 * A result of another shape than the planned buffer's (an op whose output
 * size depends on the values: nonzero, unique, masked_select) is kept as
 * it is when no later step reads it (an output); when `fixed` (a later
 * kernel reads it with the traced sizes) it is an error marked for the
 * driver to rerun the call eagerly (the kernels would read out of bounds). */
static PyObject *
normalize_result(Program *p, PyObject *r, pbuf_t *b, int fixed)
{
    int nd;
    int64_t sz[STAX_MAX_DIMS], st[STAX_MAX_DIMS];
    stax_dtype_t dt;
    if (!lw_val_info(r, &nd, sz, st, &dt)) {
        return r;   /* not a tensor: kept as an object */
    }
    int prog_cuda = p->c.be != NULL && p->c.be->device != NULL;
    if (StaxTensor_Check(r) && stax_tensor_is_cuda((StaxTensor *)r) != prog_cuda) {
        /* the program's kernels read its buffers on its own device: a host
         * 0-d tensor (PyTorch lets it meet CUDA tensors) moves there; any
         * other (a transfer the lowering refuses) is an error, never a
         * pointer of the other device handed to a kernel */
        if (prog_cuda && ((StaxTensor *)r)->ndim == 0) {
            Py_SETREF(r, (PyObject *)stax_tensor_to_device((StaxTensor *)r, STAX_DEV_CUDA));
            if (r == NULL) {
                return NULL;
            }
        }
        else {
            PyErr_Format(PyExc_RuntimeError,
                         "stax: a fallback step returned a tensor on device '%s' in a "
                         "program whose kernels run on '%s'",
                         stax_tensor_device_type((StaxTensor *)r), prog_cuda ? "cuda" : "cpu");
            Py_DECREF(r);
            return NULL;
        }
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
    int same_shape = nd == b->ndim;
    for (int d = 0; same_shape && d < nd; d++) {
        same_shape = sz[d] == b->sizes[d];
    }
    if (!same_shape && fixed && dt == b->dtype) {
        PyObject *e = PyObject_CallFunction(
            PyExc_RuntimeError, "s",
            "stax: a fallback step gave a result of another shape than at compile time "
            "(an output size that depends on the values), which later kernels read with "
            "the traced sizes: the call runs eagerly");
        Py_DECREF(r);
        if (e != NULL && PyObject_SetAttrString(e, "_stax_rerun", Py_True) == 0) {
            PyErr_SetObject(PyExc_RuntimeError, e);
        }
        Py_XDECREF(e);
        return NULL;
    }
    if (!(nd == b->ndim && dt == b->dtype)) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_RuntimeError,
                        "stax: a fallback kernel returned a value of another "
                        "shape or dtype than at compile time");
        return NULL;
    }
    if (StaxTensor_Check(r) && stax_tensor_is_cuda((StaxTensor *)r)) {
        PyObject *c = (PyObject *)stax_tensor_to(  /* a contiguous copy */
            (StaxTensor *)r, dt, 1);
        Py_DECREF(r);
        return c;
    }
    PyObject *a = as_array(r);
    Py_DECREF(r);
    if (a == NULL) {
        return NULL;
    }
    PyObject *c = PyArray_NewCopy((PyArrayObject *)a, NPY_CORDER);
    Py_DECREF(a);
    return from_array(p, c, dt);
}

static PyObject *
slot_leaf(PyObject *t, void *slots)
{
    int i = stax_lower_slotref_index(t);
    return i >= 0 ? Py_NewRef(((PyObject **)slots)[i]) : NULL;
}

/* the output template with its slot references filled (the graph room's
 * walk: exact tuples/lists/dicts, slices) */
static PyObject *
instantiate(PyObject *t, PyObject **slots)
{
    return stax_graph_map_leaves(t, 1, slot_leaf, slots);
}

/* a library-call operand: the buffer's array, or a strided view of it */
/* BLAS threads of a compiled matmul (docs/lowering.md, "The matmul
 * path"): NumPy's OpenBLAS called with TENSORPLAY_BLAS_THREADS threads
 * through openblas_set_num_threads_local, found in the OpenBLAS NumPy
 * loaded. Without the variable: one thread below 2^30 flops, the kernels'
 * thread count above. Measured: the 13 GPT matmuls (~50 MFLOP each,
 * bench/matmul.py) take 16 ms with one thread and 145 ms with two on this
 * loaded 2-core machine; a 2048x1024x1024 product (4.3 GFLOP, the
 * acceptance MLP block) takes 40 ms with one thread and 24 ms with two. */
typedef int (*blas_local_fn)(int);
static blas_local_fn blas_local = NULL;
static int blas_threads = -1;

static int
find_openblas(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    if (info->dlpi_name != NULL && strstr(info->dlpi_name, "openblas") != NULL) {
        void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
        if (h != NULL) {
            void *f = dlsym(h, "openblas_set_num_threads_local");
            if (f != NULL) {
                *(void **)data = f;
                return 1;
            }
        }
    }
    return 0;
}

/* the BLAS thread count of a matmul of `flops` */
static int
blas_threads_for(double flops)
{
    if (blas_threads < 0) {
        const char *e = getenv("TENSORPLAY_BLAS_THREADS");
        blas_threads = e != NULL && atoi(e) > 0 ? atoi(e) : 0;   /* 0: by size */
        void *f = NULL;
        dl_iterate_phdr(find_openblas, &f);
        blas_local = (blas_local_fn)f;
    }
    int n = blas_threads > 0 ? blas_threads
            : flops >= 1073741824.0 ? stax_lower_num_threads() : 1;
    return n > 0 ? n : 1;
}

/* set this thread's BLAS thread count for a matmul of `flops`; the
 * previous one, or -1 */
static int
blas_enter(double flops)
{
    int n = blas_threads_for(flops);
    return blas_local != NULL ? blas_local(n) : -1;
}

static void
blas_leave(int prev)
{
    if (blas_local != NULL && prev > 0) {
        blas_local(prev);
    }
}

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

/* one product's rows split over the kernel threads: each chunk of
 * SGEMM_ROWS rows is an independent lw_sgemm (its own B panel pack) */
#define SGEMM_ROWS 64
typedef struct {
    int64_t m, n, k, ar, ac, br, bc;
    const float *A, *B;
    float *C;
    atomic_int failed;
} sgemm_rows_t;

static void
sgemm_rows(void *ctx, int64_t start, int64_t end)
{
    sgemm_rows_t *g = ctx;
    int64_t r0 = start * SGEMM_ROWS, r1 = end * SGEMM_ROWS;
    r1 = r1 < g->m ? r1 : g->m;
    if (r0 < r1 && lw_sgemm(r1 - r0, g->n, g->k, g->A + r0 * g->ar, g->ar, g->ac,
                            g->B, g->br, g->bc, g->C + r0 * g->n, g->n) < 0) {
        atomic_store(&g->failed, 1);
    }
}

/* a float32 product of two arrays of 2 or more dims on lw_sgemm
 * (gemm.c): NumPy's matmul broadcasting of the batch dims, C-contiguous
 * result; threaded (row chunks over the kernel pool) when `threaded`.
 * NULL with no exception set where it does not apply (the caller
 * takes NumPy's matmul), NULL with one set on failure. */
static PyObject *
own_matmul(PyArrayObject *a, PyArrayObject *b, int threaded)
{
    int na = PyArray_NDIM(a), nb = PyArray_NDIM(b);
    if (!lw_sgemm_available() || na < 2 || nb < 2 || PyArray_TYPE(a) != NPY_FLOAT32
        || PyArray_TYPE(b) != NPY_FLOAT32 || !PyArray_ISALIGNED(a) || !PyArray_ISALIGNED(b)) {
        return NULL;
    }
    int64_t m = PyArray_DIM(a, na - 2), k = PyArray_DIM(a, na - 1), n = PyArray_DIM(b, nb - 1);
    if (PyArray_DIM(b, nb - 2) != k) {
        return NULL;      /* NumPy's error */
    }
    int nbat = (na > nb ? na : nb) - 2;
    npy_intp dims[NPY_MAXDIMS];
    int64_t sa[NPY_MAXDIMS], sb[NPY_MAXDIMS];
    for (int d = 0; d < nbat; d++) {
        int da = d - (nbat - (na - 2)), db = d - (nbat - (nb - 2));
        int64_t ea = da >= 0 ? PyArray_DIM(a, da) : 1, eb = db >= 0 ? PyArray_DIM(b, db) : 1;
        if (ea != eb && ea != 1 && eb != 1) {
            return NULL;
        }
        dims[d] = ea == 1 ? eb : ea;     /* torch: 0 vs 1 broadcasts to 0 */
        sa[d] = da >= 0 && ea != 1 ? PyArray_STRIDE(a, da) / 4 : 0;
        sb[d] = db >= 0 && eb != 1 ? PyArray_STRIDE(b, db) / 4 : 0;
    }
    dims[nbat] = m;
    dims[nbat + 1] = n;
    PyObject *r = PyArray_SimpleNew(nbat + 2, dims, NPY_FLOAT32);
    if (r == NULL) {
        return NULL;
    }
    int64_t ar = PyArray_STRIDE(a, na - 2) / 4, ac = PyArray_STRIDE(a, na - 1) / 4;
    int64_t br = PyArray_STRIDE(b, nb - 2) / 4, bc = PyArray_STRIDE(b, nb - 1) / 4;
    int64_t nmat = PyArray_SIZE((PyArrayObject *)r) / (m * n > 0 ? m * n : 1);
    const float *pa = PyArray_DATA(a), *pb = PyArray_DATA(b);
    float *pc = PyArray_DATA((PyArrayObject *)r);
    /* a B shared by every batch (x @ W, linear's weight) and an A whose
     * batches follow each other at row stride: one product of all the rows
     * (B's panels read, or packed, once) */
    int merge = nbat > 0;
    int64_t want = m * ar;
    for (int d = nbat - 1; d >= 0 && merge; d--) {
        merge = sb[d] == 0 && (sa[d] == want || dims[d] == 1);
        want *= dims[d];
    }
    if (merge) {
        m *= nmat;
        nmat = 1;
        nbat = 0;
    }
    int64_t idx[NPY_MAXDIMS] = {0};
    int rc = 0;
    if (threaded && nmat != 1) {
        Py_DECREF(r);       /* a batch of products keeps OpenBLAS's threads */
        return NULL;
    }
    if (threaded && m * n > 0) {
        sgemm_rows_t g = {m, n, k, ar, ac, br, bc, pa, pb, pc, 0};
        Py_BEGIN_ALLOW_THREADS
        stax_lower_parallel_for((m + SGEMM_ROWS - 1) / SGEMM_ROWS, m * n * k, sgemm_rows, &g);
        Py_END_ALLOW_THREADS
        rc = atomic_load(&g.failed) ? -1 : 0;
        nmat = 0;
    }
    Py_BEGIN_ALLOW_THREADS
    for (int64_t t = 0; t < nmat && m * n > 0 && rc == 0; t++) {
        int64_t oa = 0, ob = 0;
        for (int d = 0; d < nbat; d++) {
            oa += idx[d] * sa[d];
            ob += idx[d] * sb[d];
        }
        rc = lw_sgemm(m, n, k, pa + oa, ar, ac, pb + ob, br, bc, pc + t * m * n, n);
        for (int d = nbat - 1; d >= 0; d--) {
            if (++idx[d] < dims[d]) {
                break;
            }
            idx[d] = 0;
        }
    }
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        Py_DECREF(r);
        return PyErr_NoMemory();
    }
    return r;
}

/* a matmul step of a device program: the eager matmul (cuBLAS) on views
 * of the device buffers; the result is the step's output buffer */
static PyObject *
device_matmul(Program *p, step_t *s, PyObject **slots)
{
    PyObject *ops[2] = {NULL, NULL}, *args = NULL, *r = NULL;
    const stax_op_info *mm = &stax_op_table[STAX_OP_MATMUL];
    int which[2] = {s->a, s->b};
    for (int i = 0; i < 2; i++) {
        StaxTensor *t = (StaxTensor *)slots[which[i]];
        if (!StaxTensor_Check(t)) {
            PyErr_SetString(PyExc_RuntimeError, "stax: a matmul operand of a "
                            "device program is not a tensor");
            goto done;
        }
        ops[i] = s->view[i].on
            ? (PyObject *)stax_tensor_as_strided(t, s->view[i].ndim,
                                                 s->view[i].sizes,
                                                 s->view[i].strides,
                                                 t->offset + s->view[i].offset)
            : Py_NewRef(t);
        if (ops[i] == NULL) {
            goto done;
        }
    }
    if (s->transpose_b) {
        StaxTensor *b = (StaxTensor *)ops[1];
        Py_SETREF(ops[1], (PyObject *)stax_tensor_transpose(b, -2, -1));
        if (ops[1] == NULL) {
            goto done;
        }
    }
    args = PyTuple_Pack(2, ops[0], ops[1]);
    if (mm == NULL || args == NULL) {
        goto done;
    }
    r = stax_op_call(mm, args, NULL);
    if (r != NULL) {
        r = normalize_result(p, r, &p->c.pbufs[s->out], 0);
    }
done:
    Py_XDECREF(ops[0]);
    Py_XDECREF(ops[1]);
    Py_XDECREF(args);
    return r;
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

/* 1 when a kernel of the program writes input `input` in place */
static int
input_written(const lw_ctx *c, int input)
{
    for (int i = 0; i < c->nsteps; i++) {
        for (int q = 0; q < c->steps[i].nbump; q++) {
            if (c->steps[i].bump[q] == input) {
                return 1;
            }
        }
    }
    return 0;
}

/* 1 when o, the argument for placeholder i of a CUDA program, is a 0-d
 * host tensor of the placeholder's dtype: torch lets such a tensor join a
 * device op as a scalar (an optimizer's step count, a loss scale); the
 * call binds a device copy of it and writes a written one back */
int
lw_host_scalar(Program *p, int i, PyObject *o)
{
    return p->c.be != NULL && p->c.be->device != NULL && StaxTensor_Check(o)
           && !stax_tensor_is_cuda((StaxTensor *)o)
           && ((StaxTensor *)o)->ndim == 0 && p->in_ndim[i] == 0
           && ((StaxTensor *)o)->dtype == p->in_dtype[i];
}

int
lw_input_ok(Program *p, int i, PyObject *o)
{
    int nd = p->in_ndim[i];
    if (nd < 0) {
        return 0;    /* not a tensor placeholder */
    }
    const int64_t *sz = p->in_sizes + (size_t)i * 2 * STAX_MAX_DIMS;
    if (StaxTensor_Check(o)) {
        StaxTensor *t = (StaxTensor *)o;
        if (stax_tensor_is_cuda(t) != (p->c.be != NULL && p->c.be->device != NULL)) {
            /* kernels of one device only; a 0-d host tensor in a CUDA
             * program is copied there per call (lw_host_scalar) */
            if (!lw_host_scalar(p, i, o)) {
                return -1;
            }
        }
        if (t->ndim == nd && t->dtype == p->in_dtype[i]) {
            int ok = 1, empty = 0;
            for (int d = 0; d < nd; d++) {
                ok &= t->sizes[d] == sz[d];
                empty |= t->sizes[d] == 0;
            }
            /* no element is read from a tensor of no elements: its strides
             * (0 for a broadcast grad, anything for a view) are no layout */
            for (int d = 0; ok && !empty && d < nd; d++) {
                ok &= t->sizes[d] == 1 || t->strides[d] == sz[STAX_MAX_DIMS + d];
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
            int ok = 1, empty = 0;
            for (int d = 0; d < nd; d++) {
                ok &= s2[d] == sz[d];
                empty |= s2[d] == 0;
            }
            for (int d = 0; ok && !empty && d < nd; d++) {
                ok &= s2[d] == 1 || st2[d] == sz[STAX_MAX_DIMS + d];
            }
            if (ok) {
                return 0;
            }
        }
    }
    return -1;
}

/* p->rg_extra (built from the Python-level graph of a mutating function,
 * program_build.c: rg_extra_template) is NULL or a 3-tuple
 * (written, fresh, mutated), each None or:
 * written: output pytree, see rg_extra_apply;
 * fresh: output pytree with, for every leaf whose eager value is not an
 *   input itself, the mask of inputs it comes from: see fresh_apply;
 * mutated: per input, the mask of inputs its in-place writes read: an input
 *   not requiring grad whose mask meets a grad input (grad mode on) gets
 *   requires_grad, as eager's in-place ops give it. */

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

/* new reference: r with every leaf that fresh marks as not an input but
 * that is one of the call's inputs (the op graph returns the mutated input
 * when a value equals its new value: v = f(x); x.copy_(v); return v)
 * replaced by a copy, requiring grad as eager's v would */
static PyObject *
fresh_apply(PyObject *t, PyObject *r, uint64_t rg, PyObject *const *args,
            Py_ssize_t nargs)
{
    if (PyLong_Check(t)) {
        Py_ssize_t i = 0;
        while (i < nargs && args[i] != r) {
            i++;
        }
        if (i == nargs) {
            return Py_NewRef(r);
        }
        if (StaxTensor_Check(r)) {
            StaxTensor *x = (StaxTensor *)r;
            StaxTensor *c = stax_tensor_empty_on(x->ndim, x->sizes, x->dtype,
                                                 x->storage->device);
            uint64_t m = PyLong_AsUnsignedLongLong(t);
            if (PyErr_Occurred()) {
                PyErr_Clear();
                m = 0;
            }
            if (c == NULL || stax_tensor_copy_from(c, r) < 0) {
                Py_XDECREF(c);
                return NULL;
            }
            if ((m & rg) != 0 && stax_grad_enabled() && lw_is_float(c->dtype)) {
                stax_tensor_set_result_requires_grad(c, 1);
            }
            return (PyObject *)c;
        }
        if (PyArray_Check(r)) {
            return PyArray_NewCopy((PyArrayObject *)r, NPY_ANYORDER);
        }
        return Py_NewRef(r);
    }
    if ((PyTuple_CheckExact(t) || PyList_CheckExact(t))
        && (PyTuple_CheckExact(r) || PyList_CheckExact(r))
        && PySequence_Fast_GET_SIZE(t) == PySequence_Fast_GET_SIZE(r)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(r);
        PyObject *o = PyTuple_CheckExact(r) ? PyTuple_New(n) : PyList_New(n);
        int changed = 0;
        for (Py_ssize_t k = 0; o != NULL && k < n; k++) {
            PyObject *rk = PySequence_Fast_GET_ITEM(r, k);
            PyObject *e = fresh_apply(PySequence_Fast_GET_ITEM(t, k), rk, rg,
                                      args, nargs);
            if (e == NULL) {
                Py_CLEAR(o);
                return NULL;
            }
            changed |= e != rk;
            if (PyTuple_Check(o)) {
                PyTuple_SET_ITEM(o, k, e);
            }
            else {
                PyList_SET_ITEM(o, k, e);
            }
        }
        if (o != NULL && !changed) {
            Py_SETREF(o, Py_NewRef(r));
        }
        return o;
    }
    if (PyDict_Check(t) && PyDict_CheckExact(r)) {
        PyObject *o = NULL, *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(t, &pos, &k, &v)) {
            PyObject *rv = PyDict_GetItemWithError(r, k);
            PyObject *e;
            if (rv == NULL) {
                if (PyErr_Occurred()) {
                    Py_XDECREF(o);
                    return NULL;
                }
                continue;
            }
            e = fresh_apply(v, rv, rg, args, nargs);
            if (e == NULL) {
                Py_XDECREF(o);
                return NULL;
            }
            if (e != rv && o == NULL) {
                o = PyDict_Copy(r);
            }
            if (e != rv && (o == NULL || PyDict_SetItem(o, k, e) < 0)) {
                Py_DECREF(e);
                Py_XDECREF(o);
                return NULL;
            }
            Py_DECREF(e);
        }
        return o != NULL ? o : Py_NewRef(r);
    }
    return Py_NewRef(r);
}

/* mutated inputs: see p->rg_extra above */
static void
mutated_apply(PyObject *mt, uint64_t rg, PyObject *const *args, Py_ssize_t nargs)
{
    for (Py_ssize_t q = 0; q < PyTuple_GET_SIZE(mt) && q < nargs; q++) {
        uint64_t m = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(mt, q));
        StaxTensor *x = StaxTensor_Check(args[q]) ? (StaxTensor *)args[q] : NULL;
        if (PyErr_Occurred()) {
            PyErr_Clear();
            continue;
        }
        if ((m & rg) != 0 && x != NULL && !x->requires_grad && lw_is_float(x->dtype)) {
            stax_tensor_set_result_requires_grad(x, 1);
        }
    }
}

/* The runtime checks (lw_ctx.zchecks) are read after the last step: the
 * inputs the steps write are copied first, so that a failed check leaves
 * them as they were. A dict input index -> copy (empty: none written). */
static PyObject *
snapshot_inputs(lw_ctx *c, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *d = PyDict_New();
    for (int i = 0; d != NULL && i < c->nsteps; i++) {
        const step_t *s = &c->steps[i];
        for (int q = 0; q < s->nbump; q++) {
            int a = s->bump[q];
            if (a < 0 || a >= nargs || !StaxTensor_Check(args[a])) {
                continue;
            }
            PyObject *k = PyLong_FromLong(a);
            int has = k ? PyDict_Contains(d, k) : -1;
            PyObject *cp = has == 0 ? (PyObject *)stax_tensor_to((StaxTensor *)args[a],
                                                                  ((StaxTensor *)args[a])->dtype, 1)
                                    : NULL;
            if (has < 0 || (has == 0 && (cp == NULL || PyDict_SetItem(d, k, cp) < 0))) {
                Py_CLEAR(d);
            }
            Py_XDECREF(k);
            Py_XDECREF(cp);
        }
    }
    return d;
}

/* a runtime check failed: undo the writes to the inputs and the random
 * draws, then raise eager's error, marked `_stax_rerun` so that the
 * driver runs the call eagerly (the error and the writes made before it
 * are then exactly eager's; gather's message names the first bad index) */
static void
check_failed(lw_ctx *c, int kind, PyObject *const *args, PyObject *snaps,
             const uint64_t *gen_offs)
{
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (snaps != NULL && PyDict_Next(snaps, &pos, &k, &v)) {
        Py_ssize_t a = PyLong_AsSsize_t(k);
        if (stax_tensor_copy_from((StaxTensor *)args[a], v) < 0) {
            return;
        }
    }
    /* each generator back to its offset before its first draw (the
     * draws' starts, undone last to first) */
    for (int r = c->nrand - 1; gen_offs != NULL && r >= 0; r--) {
        StaxGenerator *g = c->rand_gen[r] != NULL ? (StaxGenerator *)c->rand_gen[r]
                                                  : stax_default_generator();
        if (g != NULL) {
            g->offset = gen_offs[r];
        }
    }
    PyObject *type = kind == LW_CHECK_GATHER ? PyExc_RuntimeError
                     : kind == LW_CHECK_INDEX ? PyExc_IndexError : PyExc_RuntimeError;
    const char *msg = kind == LW_CHECK_GATHER ? "index out of bounds in gather"
                      : kind == LW_CHECK_INDEX ? "index out of range in self"
                      : "ZeroDivisionError";
    PyObject *e = PyObject_CallFunction(type, "s", msg);
    if (e == NULL) {
        return;
    }
    if (PyObject_SetAttrString(e, "_stax_rerun", Py_True) == 0) {
        PyErr_SetObject(type, e);
    }
    Py_DECREF(e);
}

/* 1 when a fallback step's result is read by a later step (its shape,
 * if it depends on the values, is checked: normalize_result) */
static int
has_sized_fallback(const lw_ctx *c)
{
    for (int i = 0; i < c->nsteps; i++) {
        const step_t *s = &c->steps[i];
        if ((s->kind == ST_FALLBACK || s->kind == ST_EXTRACT) && s->out >= 0
            && s->out < c->npbufs && c->pbufs[s->out].last > i) {
            return 1;
        }
    }
    return 0;
}

/* a step failed with normalize_result's rerun mark: the inputs and
 * generators back as the call found them, the error kept */
static void
shape_rerun_undo(lw_ctx *c, PyObject *const *args, PyObject *snaps, const uint64_t *gen_offs)
{
    PyObject *et, *ev, *tb;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    if (!PyErr_Occurred()) {
        return;
    }
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    if (ev == NULL || !PyObject_HasAttrString(ev, "_stax_rerun")) {
        PyErr_Restore(et, ev, tb);
        return;
    }
    while (snaps != NULL && PyDict_Next(snaps, &pos, &k, &v)) {
        Py_ssize_t a = PyLong_AsSsize_t(k);
        if (stax_tensor_copy_from((StaxTensor *)args[a], v) < 0) {
            PyErr_Clear();
        }
    }
    for (int r = c->nrand - 1; gen_offs != NULL && r >= 0; r--) {
        StaxGenerator *g = c->rand_gen[r] != NULL ? (StaxGenerator *)c->rand_gen[r]
                                                  : stax_default_generator();
        if (g != NULL) {
            g->offset = gen_offs[r];
        }
    }
    PyErr_Restore(et, ev, tb);
}

/* the host clock of auto's measurement (program_graph.c) */
static double
now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

PyObject *
lw_program_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                      PyObject *kwnames)
{
    Program *p = (Program *)self;
    lw_ctx *c = &p->c;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *stack_slots[32];
    PyObject **slots = stack_slots;
    PyObject *result = NULL;
    PyObject *snaps = NULL;     /* runtime checks: inputs the steps write */
    PyObject *host_back = NULL; /* (input, device copy) of written host
                                   scalars (lw_host_scalar) */
    int cg_act = LW_CG_DIRECT, cg_open = 0;
    double t0 = 0.0;
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
            if (lw_input_ok(p, pb->input, args[pb->input]) < 0) {
                if (p->dynamic) {
                    Program *q = lw_find_variant(p, args, nargs);
                    if (q != NULL) {
                        Py_INCREF(q);
                        result = lw_program_vectorcall((PyObject *)q, args, nargsf, kwnames);
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
            if (lw_host_scalar(p, pb->input, args[pb->input])) {
                /* before any recording opens: the copy is no graph's */
                PyObject *pair = NULL;
                slots[b] = (PyObject *)stax_tensor_to_device(
                    (StaxTensor *)args[pb->input], STAX_DEV_CUDA);
                if (slots[b] == NULL) {
                    goto done;
                }
                if (input_written(c, pb->input)) {
                    if (host_back == NULL && (host_back = PyList_New(0)) == NULL) {
                        goto done;
                    }
                    pair = Py_BuildValue("(iO)", pb->input, slots[b]);
                    if (pair == NULL || PyList_Append(host_back, pair) < 0) {
                        Py_XDECREF(pair);
                        goto done;
                    }
                    Py_DECREF(pair);
                }
                continue;
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
    uint64_t gen_offs[32];
    const uint64_t *gen_undo = NULL;
    int64_t local_syms[LW_MAX_SYMS];
    if (c->nrand > 0) {
        memcpy(local_syms, c->syms, sizeof(int64_t) * (size_t)c->nsyms);
        for (int r = 0; r < c->nrand; r++) {
            StaxGenerator *g = c->rand_gen[r] != NULL ? (StaxGenerator *)c->rand_gen[r]
                                                      : stax_default_generator();
            if (g == NULL) {
                PyErr_SetString(PyExc_RuntimeError, "stax: no default generator");
                goto done;
            }
            gen_offs[r] = g->offset;
            local_syms[c->rand_seed_sym[r]] = (int64_t)g->seed;
            local_syms[c->rand_off_sym[r]] = (int64_t)stax_generator_reserve(g, c->rand_words[r]);
        }
        syms = local_syms;
        gen_undo = gen_offs;
    }
    if (c->nzchecks > 0 || has_sized_fallback(c)) {
        snaps = snapshot_inputs(c, args, nargs);
        if (snaps == NULL) {
            goto done;
        }
    }
    /* CUDA programs: the kernels' launches may be recorded for one graph
     * launch after the steps (program_graph.c) */
    cg_act = lw_cgraph_begin(p);
    if (cg_act < 0) {
        cg_act = LW_CG_DIRECT;
        goto done;
    }
    if (cg_act == LW_CG_MEASURE_DIRECT || cg_act == LW_CG_MEASURE_GRAPH) {
        t0 = now_us();
    }
    cg_open = cg_act == LW_CG_GRAPH || cg_act == LW_CG_MEASURE_GRAPH;
    for (int i = 0; i < c->nsteps; i++) {
        step_t *s = &c->steps[i];
        for (int q = 0; q < s->nalloc; q++) {
            int b = s->alloc[q];
            slots[b] = lw_new_buffer(p, &c->pbufs[b]);
            if (slots[b] == NULL) {
                goto done;
            }
        }
        switch (s->kind) {
        case ST_KERNEL:
            for (int q = 0; q < s->nbump; q++) {
                if (StaxTensor_Check(args[s->bump[q]])) {
                    stax_tensor_will_write((StaxTensor *)args[s->bump[q]]);
                }
            }
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
            if (c->be->device != NULL) {
                /* this step's cuBLAS product may join the call's graph */
                stax_cuda_record_products(1);
                slots[s->out] = device_matmul(p, s, slots);
                stax_cuda_record_products(0);
                if (slots[s->out] == NULL) {
                    goto done;
                }
                break;
            }
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
                PyArrayObject *ba = (PyArrayObject *)bt;
                double flops = 2.0 * (double)PyArray_SIZE((PyArrayObject *)a)
                               * (double)(PyArray_NDIM(ba) > 0
                                          ? PyArray_DIM(ba, PyArray_NDIM(ba) - 1) : 1);
                /* our AVX-512 GEMM: one thread's products, and a single
                 * product that gets threads split by rows over the kernel
                 * pool (OpenBLAS here runs its AVX2 kernels); a batch of
                 * products that gets threads stays with OpenBLAS */
                int nthr = blas_threads_for(flops);
                if (nthr <= 1 || blas_threads == 0) {   /* not when TENSORPLAY_BLAS_THREADS asks OpenBLAS */
                    r = own_matmul((PyArrayObject *)a, ba, nthr > 1);
                }
                if (r == NULL && !PyErr_Occurred()) {
                    int prev = blas_enter(flops);
                    r = PyNumber_MatrixMultiply(a, bt);
                    blas_leave(prev);
                }
            }
            Py_XDECREF(a);
            Py_XDECREF(b);
            Py_XDECREF(bt);
            r = r ? from_array(p, r, c->pbufs[s->out].dtype) : NULL;
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
                r = normalize_result(p, r, &c->pbufs[s->out], c->pbufs[s->out].last > i);
            }
            if (r == NULL) {
                shape_rerun_undo(c, args, snaps, gen_undo);
                goto done;
            }
            slots[s->out] = r;
            break;
        }
        case ST_SCATTER: {
            PyObject *r = run_scatter(p, s, slots);
            if (r == NULL) {
                goto done;
            }
            slots[s->out] = r;
            break;
        }
        case ST_EXTRACT: {
            PyObject *r = PySequence_GetItem(slots[s->src], s->index);
            if (r != NULL) {
                r = normalize_result(p, r, &c->pbufs[s->out], c->pbufs[s->out].last > i);
            }
            if (r == NULL) {
                shape_rerun_undo(c, args, snaps, gen_undo);
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
    if (cg_open) {
        cg_open = 0;
        if (lw_cgraph_end(p, cg_act, 1) < 0) {
            goto done;
        }
    }
    for (int q = 0; q < c->nzchecks; q++) {
        PyObject *f = slots[c->zchecks[q]];
        int hit = 0;
        if (f != NULL && StaxTensor_Check(f) && stax_tensor_is_cuda((StaxTensor *)f)) {
            /* the one host read of the call: it waits for the stream */
            PyObject *v = stax_tensor_item_object((StaxTensor *)f);
            hit = v == NULL ? -1 : PyObject_IsTrue(v);
            Py_XDECREF(v);
            if (hit < 0) {
                goto done;
            }
        }
        else if (f != NULL) {
            hit = *(const unsigned char *)data_ptr(f);
        }
        if (hit) {
            check_failed(c, c->zkind[q], args, snaps, gen_undo);
            goto done;
        }
    }
    /* host scalars the kernels wrote: their device copies go back */
    for (Py_ssize_t q = 0; host_back != NULL && q < PyList_GET_SIZE(host_back); q++) {
        PyObject *pair = PyList_GET_ITEM(host_back, q);
        int a = (int)PyLong_AsLong(PyTuple_GET_ITEM(pair, 0));
        if (stax_tensor_copy_from((StaxTensor *)args[a], PyTuple_GET_ITEM(pair, 1)) < 0) {
            goto done;
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
    if (result != NULL && p->rg_extra != NULL && PyTuple_Check(p->rg_extra)
        && PyTuple_GET_SIZE(p->rg_extra) == 3) {
        PyObject *wt = PyTuple_GET_ITEM(p->rg_extra, 0);
        PyObject *ft = PyTuple_GET_ITEM(p->rg_extra, 1);
        PyObject *mt = PyTuple_GET_ITEM(p->rg_extra, 2);
        if (ft != Py_None) {
            Py_SETREF(result, fresh_apply(ft, result, rg, args, nargs));
        }
        if (result != NULL && rg != 0 && stax_grad_enabled()) {
            if (wt != Py_None) {
                rg_extra_apply(wt, result, rg, args, nargs);
            }
            if (mt != Py_None && PyTuple_Check(mt)) {
                mutated_apply(mt, rg, args, nargs);
            }
        }
    }
done:
    if (cg_open) {
        lw_cgraph_end(p, cg_act, 0);   /* launches what was recorded */
    }
    Py_XDECREF(snaps);
    Py_XDECREF(host_back);
    for (int b = 0; b < c->npbufs; b++) {
        Py_XDECREF(slots[b]);
    }
    if (slots != stack_slots) {
        free(slots);
    }
    if (result != NULL && t0 > 0.0) {
        lw_cgraph_done(p, cg_act, now_us() - t0);
    }
    return result;
}

static PyObject *
program_get_op_graph(Program *p, void *closure)
{
    (void)closure;
    return Py_NewRef(p->gm);     /* what was lowered: always the op graph */
}

/* kernels whose back end gave no source at compile time get it now, on
 * the first look (stax_backend.kernel_source) */
static PyObject *
program_get_kernels(Program *p, void *closure)
{
    lw_ctx *c = &p->c;
    Py_ssize_t j = 0;
    (void)closure;
    if (c->be == NULL || c->be->kernel_source == NULL) {
        return Py_NewRef(p->kernels);
    }
    for (int i = 0; i < c->nsteps && j < PyList_GET_SIZE(p->kernels); i++) {
        step_t *s = &c->steps[i];
        if (s->kind != ST_KERNEL) {
            continue;
        }
        PyObject *ki = PyList_GET_ITEM(p->kernels, j++);
        if (PyStructSequence_GET_ITEM(ki, 1) != Py_None || s->handle == NULL) {
            continue;
        }
        PyObject *src = c->be->kernel_source(c->be, s->handle, s->k);
        if (src == NULL) {
            return NULL;
        }
        PyObject *nk = PyStructSequence_New(lw_kernel_info_type);
        if (nk == NULL) {
            Py_DECREF(src);
            return NULL;
        }
        for (int f = 0; f < 5; f++) {
            PyStructSequence_SET_ITEM(nk, f, f == 1 ? src
                                      : Py_NewRef(PyStructSequence_GET_ITEM(ki, f)));
        }
        PyList_SetItem(p->kernels, j - 1, nk);   /* steals nk, drops ki */
    }
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
    static const char *names[] = {"kernel", "library", "fallback", "extract", "scatter"};
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

/* the buffer plan: every buffer that exists when the program runs (inputs,
 * constants, and each buffer some step writes), as
 * (kind, sizes, dtype, first step, last step) */
static PyObject *
program_get_buffer_plan(Program *p, void *closure)
{
    (void)closure;
    static const char *kinds[] = {"input", "temp", "extern", "const"};
    PyObject *l = PyList_New(0);
    for (int b = 0; l && b < p->c.npbufs; b++) {
        pbuf_t *pb = &p->c.pbufs[b];
        if (pb->kind != PB_INPUT && pb->kind != PB_CONST && pb->first < 0) {
            continue;   /* nothing writes it: never allocated */
        }
        PyObject *sz = PyTuple_New(pb->ndim > 0 ? pb->ndim : 0);
        for (int d = 0; sz && d < pb->ndim; d++) {
            PyTuple_SET_ITEM(sz, d, PyLong_FromLongLong(pb->sizes[d]));
        }
        PyObject *e = sz ? Py_BuildValue("(sNsii)", kinds[pb->kind], sz,
                                         stax_dtype_name(pb->dtype), pb->first, pb->last)
                         : NULL;
        if (e == NULL || PyList_Append(l, e) < 0) {
            Py_XDECREF(e);
            Py_DECREF(l);
            return NULL;
        }
        Py_DECREF(e);
    }
    return l;
}

/* a SlotRef of the output template as (buffer kind, slot) */
static PyObject *
slot_kind_leaf(PyObject *t, void *ctx)
{
    static const char *kinds[] = {"input", "temp", "extern", "const"};
    Program *p = ctx;
    int i = stax_lower_slotref_index(t);
    if (i < 0) {
        return NULL;
    }
    if (i >= p->c.npbufs) {
        PyErr_SetString(PyExc_RuntimeError, "stax: output slot out of range");
        return NULL;
    }
    return Py_BuildValue("(si)", kinds[p->c.pbufs[i].kind], i);
}

static PyObject *
program_get_output_slots(Program *p, void *closure)
{
    (void)closure;
    return stax_graph_map_leaves(p->out_template, 1, slot_kind_leaf, p);
}

static PyObject *
program_get_cuda_graph(Program *p, void *closure)
{
    (void)closure;
    return lw_cgraph_info(p);
}

static PyObject *
program_get_cuda_graphs(Program *p, void *closure)
{
    (void)closure;
    return lw_cgraph_get_mode(p);
}

static int
program_set_cuda_graphs(Program *p, PyObject *v, void *closure)
{
    (void)closure;
    return lw_cgraph_set_mode(p, v);
}

static PyObject *
program_get_backend(Program *p, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(p->c.be != NULL ? p->c.be->name : "");
}

static PyGetSetDef program_getset[] = {
    {"backend", (getter)program_get_backend, NULL,
     "name of the back end that compiled the kernels (chosen by the "
     "inputs' device: 'llvm' for cpu)", NULL},
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
    {"cuda_graph", (getter)program_get_cuda_graph, NULL,
     "dict: what CUDA graphs did for this program -- mode ('on', 'off', "
     "'auto'), state ('off', 'warm-up', 'measuring', 'graph', 'direct'), "
     "reason (why no graph, or None), kernels (launches per call), calls, "
     "direct_calls (calls launching kernel by kernel), graph_replays, "
     "builds (graphs instantiated), node_updates (kernel nodes given a "
     "call's new arguments), nodes, direct_us / graph_us (auto's medians "
     "of the whole call, host clock, or None)", NULL},
    {"cuda_graphs", (getter)program_get_cuda_graphs,
     (setter)program_set_cuda_graphs,
     "this program's own CUDA graph mode: None (default: "
     "tp.compiler.config.cuda_graphs), True, False or 'auto'", NULL},
    {"buffer_plan", (getter)program_get_buffer_plan, NULL,
     "the buffers that exist at run time: (kind, sizes, dtype, first step, "
     "last step) of inputs, constants and every buffer a step writes", NULL},
    {"output_slots", (getter)program_get_output_slots, NULL,
     "the output pytree with each returned buffer as (kind, slot): kind "
     "'input' (the input object itself), 'const' (a tensor the program "
     "holds: the same object on every call), 'extern' (a library call's or "
     "eager step's result, possibly a view) or 'temp' (memory the program "
     "allocates for this call); one slot at two places is one tensor", NULL},
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

static PyObject *
num_threads_fn(PyObject *mod, PyObject *noargs)
{
    (void)mod;
    (void)noargs;
    return PyLong_FromLong(stax_lower_num_threads());
}

static PyObject *
prefault_pages_fn(PyObject *mod, PyObject *noargs)
{
    (void)mod;
    (void)noargs;
    return PyLong_FromUnsignedLongLong(lw_prefault_pages());
}

/* _prefault_helper(nbytes): start the helper on one block of nbytes, as a
 * compile does (0: stop it and pool its block; < 0: neither); returns
 * whether it runs */
static PyObject *
prefault_helper_fn(PyObject *mod, PyObject *arg)
{
    long long n = PyLong_AsLongLong(arg);
    (void)mod;
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (n == 0) {
        lw_prefault_end();
    }
    else if (n > 0) {
        lw_prefault_start_bytes((size_t)n);
    }
    return PyBool_FromLong(lw_prefault_running());
}

static PyMethodDef program_methods[] = {
    {"stax_backend", (PyCFunction)(void (*)(void))lw_stax_backend_fn,
     METH_VARARGS | METH_KEYWORDS,
     "stax_backend(gm, example_inputs, strict_native=False, **options) -> "
     "CompiledProgram\n\nThe Stax back end (seed 1.2): lowers the graph to "
     "loop-level IR, fuses, compiles kernels with LLVM and returns a callable."},
    {"_stax_num_threads", num_threads_fn, METH_NOARGS, "thread pool size"},
    {"_prefault_pages", prefault_pages_fn, METH_NOARGS,
     "pages of first-run output blocks a helper thread touched while kernels "
     "compiled (since start)"},
    {"_prefault_helper", prefault_helper_fn, METH_O,
     "_prefault_helper(nbytes) -> running: start the first-run prefault helper on "
     "one block as a compile does (0 stops it, < 0 only asks); the fork tests' handle"},
    {NULL, NULL, 0, NULL},
};

int
stax_lower_program_init(PyObject *m)
{
    SlotRef_Type = (PyTypeObject *)PyType_FromSpec(&slotref_spec);
    if (SlotRef_Type == NULL) {
        return -1;
    }
    lw_program_type = (PyTypeObject *)PyType_FromSpec(&program_spec);
    if (lw_program_type == NULL) {
        return -1;
    }
    lw_kernel_info_type = PyStructSequence_NewType(&kinfo_desc);
    if (lw_kernel_info_type == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "CompiledProgram", (PyObject *)lw_program_type) < 0
        || PyModule_AddObjectRef(m, "StaxKernel", (PyObject *)lw_kernel_info_type) < 0) {
        return -1;
    }
    if (lw_cgraph_module_init(m) < 0) {
        return -1;
    }
    return PyModule_AddFunctions(m, program_methods);
}
