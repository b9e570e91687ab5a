/* Room init and the back-end vtable of the NVRTC back end.
 *
 * stax_nvrtc_backend ("nvrtc"), registered with lower's registry, renders
 * the loop IR that lower makes, like the LLVM back end does:
 *   compile_kernel  render the kernel as CUDA C, compile it to PTX with
 *                   NVRTC (no GPU needed); the handle keeps source and PTX
 *   launch          needs a GPU: copies the buffers to the device, runs a
 *                   CUBIN built for the device's arch, copies outputs back;
 *                   without a CUDA driver it raises a clear RuntimeError
 *   free, supports_op (the loop-IR primitives the renderer can render)
 * Which programs it compiles is the device table's business (lower.h):
 * today it serves _C.nvrtc_render, which lowers a GraphModule with the
 * lower room and passes this back end in place of the device's.
 * Nothing is loaded at import: libnvrtc / libcuda are dlopen()ed on first
 * use. */
#include "backend_nvrtc/nvrtc_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* STAX_NVRTC_TIMING=1: each kernel's render, NVRTC and module-load times on
 * stderr (as STAX_LLVM_TIMING does for the CPU back end): where a first
 * call's compile goes */
static int
nv_timing(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("STAX_NVRTC_TIMING");
        on = e != NULL && *e && *e != '0';
    }
    return on;
}

/* what compile_kernel does (the vtable's state) */
typedef struct {
    const char *arch;          /* PTX target of compile_kernel */
    int compile;               /* 0: render only (CUBIN at first launch) */
    int resident;              /* 1: buffers are device addresses (CUDA
                                  tensors): CUBIN for the device at compile
                                  time, launches on the stream, no copies */
} nvrtc_config;

static nvrtc_config compile_config = {"compute_90", 1, 0};
static nvrtc_config render_config = {"compute_90", 0, 0};
static nvrtc_config resident_config = {NULL, 1, 1};

/* ------------------------------------------------------------ handle */

typedef struct {
    int buf;
    const stax_ix *index;
} access_t;

typedef struct {
    char name[64];
    PyObject *source;          /* str, CUDA C */
    PyObject *ptx;             /* str */
    PyObject *cubin;           /* bytes, built at first launch */
    void *module, *fn;         /* resident: loaded once */
    int reads_output;          /* a buffer it writes is also read: not
                                  idempotent, never launched twice */
    int tuned;                 /* launch configuration searched */
    int64_t best_block;        /* threads per row found best, 0: default */
    int64_t rc_bytes;          /* row cache bytes per row element, 0: none */
    int64_t max_threads;       /* most threads a block of fn can have, 0:
                                * not asked yet */
    int rr_blocks;             /* block sizes of the register row path (bit
                                * BX set), whose launches need no row cache */
    int64_t rc_limit;          /* most dynamic shared memory a launch may
                                  pass; -1: not asked yet */
    int nbufs;
    stax_dtype_t dtype[STAX_NVRTC_MAX_BUFS];
    int is_output[STAX_NVRTC_MAX_BUFS];
    int nsizes;
    /* what a launch needs to size the device buffers (own copies) */
    stax_arena *arena;
    stax_kernel shape;         /* nouter, ninner, dims only */
    int naccess;
    access_t *access;
    /* tiered compilation (tier_compile): */
    stax_nvrtc_job *job;       /* the final CUBIN compiling in the
                                  background; NULL: fn is final */
    void *quick_module;        /* the first version's module, kept until
                                  the handle goes (a graph may name it) */
    stax_object_sink *sink;    /* where the final CUBIN goes (the cache) */
    void *pend_prev, *pend_next;   /* the handles holding a sink */
    int attention;             /* an attention stage: fmad on, no tiers */
    int first;                 /* compiled as a first version: its object
                                  is never the compile cache's */
} nvrtc_handle;

/* Bounds of an integer value expression that lowering clamped with
 * constants (gather / index_select / embedding clamp their indices with
 * min(max(i, 0), n - 1)): 2 with both *lo and *hi, 1 with *lo only (a
 * max with a constant), 0 if not bounded that way. */
static int
lval_bounds(const stax_lval *v, int64_t *lo, int64_t *hi)
{
    int64_t al = 0, ah = 0, bl = 0, bh = 0;
    int ka, kb;
    if (v == NULL) {
        return 0;
    }
    if (v->kind == STAX_LV_CONST && !stax_nvrtc_is_float(v->dtype)) {
        *lo = *hi = v->i;
        return 2;
    }
    if (v->kind == STAX_LV_CAST && !stax_nvrtc_is_float(v->dtype)
        && !stax_nvrtc_is_float(v->args[0]->dtype)) {
        return lval_bounds(v->args[0], lo, hi);
    }
    if (v->kind != STAX_LV_PRIM
        || (v->prim != STAX_PRIM_MIN && v->prim != STAX_PRIM_MAX)) {
        return 0;
    }
    ka = lval_bounds(v->args[0], &al, &ah);
    kb = lval_bounds(v->args[1], &bl, &bh);
    if (v->prim == STAX_PRIM_MAX) {
        /* max(x, y) >= either's lower bound; <= the larger upper bound */
        if (ka == 0 && kb == 0) {
            return 0;
        }
        *lo = ka == 0 ? bl : kb == 0 ? al : (al > bl ? al : bl);
        if (ka == 2 && kb == 2) {
            *hi = ah > bh ? ah : bh;
            return 2;
        }
        return 1;
    }
    /* min(x, y) <= either's upper bound; >= the smaller lower bound */
    if (ka == 0 || kb == 0 || (ka == 1 && kb == 1)) {
        return 0;
    }
    *lo = al < bl ? al : bl;
    *hi = ka == 2 && kb == 2 ? (ah < bh ? ah : bh) : ka == 2 ? ah : bh;
    return 2;
}

static const stax_ix *
ix_copy(stax_arena *a, const stax_ix *ix)
{
    stax_ix *c;
    if (ix == NULL) {
        return NULL;
    }
    c = stax_arena_alloc(a, sizeof(*c));
    if (c == NULL) {
        return NULL;
    }
    c->kind = ix->kind;
    c->v = ix->v;
    c->val = NULL;
    if (ix->kind == STAX_IX_VALUE) {
        /* the copy keeps only the value's bounds, as two constants that
         * stax_nvrtc_ix_bounds reads; none: it stays unboundable */
        int64_t lo, hi;
        if (lval_bounds(ix->val, &lo, &hi) == 2) {
            stax_ix *l = stax_arena_alloc(a, sizeof(*l));
            stax_ix *h = stax_arena_alloc(a, sizeof(*h));
            if (l == NULL || h == NULL) {
                return NULL;
            }
            l->kind = h->kind = STAX_IX_CONST;
            l->v = lo;
            h->v = hi;
            c->a = l;
            c->b = h;
        }
        return c;
    }
    if (ix->kind >= STAX_IX_ADD && ix->kind <= STAX_IX_MOD) {
        if ((c->a = ix_copy(a, ix->a)) == NULL
            || (c->b = ix_copy(a, ix->b)) == NULL) {
            return NULL;
        }
    }
    return c;
}

static int
add_access(nvrtc_handle *h, int *cap, int buf, const stax_ix *ix)
{
    if (h->naccess == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        access_t *na = stax_arena_alloc(h->arena, sizeof(*na) * (size_t)nc);
        if (na == NULL) {
            return -1;
        }
        if (h->naccess) {
            memcpy(na, h->access, sizeof(*na) * (size_t)h->naccess);
        }
        h->access = na;
        *cap = nc;
    }
    h->access[h->naccess].buf = buf;
    if ((h->access[h->naccess].index = ix_copy(h->arena, ix)) == NULL) {
        return -1;
    }
    h->naccess++;
    return 0;
}

static int collect_ix(nvrtc_handle *h, int *cap, const stax_ix *ix, lv_seen *seen);

static int
collect_lval(nvrtc_handle *h, int *cap, const stax_lval *v, lv_seen *seen)
{
    /* the value DAG's nodes once each: walked as a tree, a kernel whose
     * values share subtrees (polygamma's series) took hours here */
    if (v == NULL || !stax_nvrtc_seen_add(seen, v)) {
        return 0;
    }
    if (v->kind == STAX_LV_LOAD) {
        if (add_access(h, cap, v->buf, v->index) < 0
            || collect_ix(h, cap, v->index, seen) < 0
            || collect_lval(h, cap, v->mask, seen) < 0) {
            return -1;
        }
        return 0;
    }
    if (v->kind == STAX_LV_INDEX && collect_ix(h, cap, v->index, seen) < 0) {
        return -1;
    }
    for (int i = 0; i < v->nargs; i++) {
        if (collect_lval(h, cap, v->args[i], seen) < 0) {
            return -1;
        }
    }
    return 0;
}

static int
collect_ix(nvrtc_handle *h, int *cap, const stax_ix *ix, lv_seen *seen)
{
    if (ix == NULL) {
        return 0;
    }
    if (ix->kind == STAX_IX_VALUE) {
        return collect_lval(h, cap, ix->val, seen);
    }
    if (ix->kind >= STAX_IX_ADD && ix->kind <= STAX_IX_MOD) {
        return collect_ix(h, cap, ix->a, seen) < 0 ? -1 : collect_ix(h, cap, ix->b, seen);
    }
    return 0;
}

static int lval_reads_output(const stax_kernel *k, const stax_lval *v, lv_seen *seen);

static int
ix_reads_output_s(const stax_kernel *k, const stax_ix *ix, lv_seen *seen)
{
    if (ix == NULL) {
        return 0;
    }
    if (ix->kind == STAX_IX_VALUE) {
        return lval_reads_output(k, ix->val, seen);
    }
    if (ix->kind >= STAX_IX_ADD && ix->kind <= STAX_IX_MOD) {
        return ix_reads_output_s(k, ix->a, seen) || ix_reads_output_s(k, ix->b, seen);
    }
    return 0;
}

static int
lval_reads_output(const stax_kernel *k, const stax_lval *v, lv_seen *seen)
{
    /* a DAG: a value already walked answered 0 there (a 1 ends the walk) */
    if (v == NULL || !stax_nvrtc_seen_add(seen, v)) {
        return 0;
    }
    if (v->kind == STAX_LV_LOAD) {
        return k->bufs[v->buf].is_output || ix_reads_output_s(k, v->index, seen)
               || lval_reads_output(k, v->mask, seen);
    }
    if (v->kind == STAX_LV_INDEX && ix_reads_output_s(k, v->index, seen)) {
        return 1;
    }
    for (int i = 0; i < v->nargs; i++) {
        if (lval_reads_output(k, v->args[i], seen)) {
            return 1;
        }
    }
    return 0;
}

static int tier_take(nvrtc_handle *h, PyObject **cubin);
static void tier_drop(nvrtc_handle *h);
static int tier_orphan(nvrtc_handle *h);

static void
handle_free(nvrtc_handle *h)
{
    if (h == NULL) {
        return;
    }
    Py_XDECREF(h->source);
    Py_XDECREF(h->ptx);
    Py_XDECREF(h->cubin);
    if (h->job != NULL) {
        /* a handle may go while an exception propagates: kept */
        PyObject *cubin = NULL, *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (tier_take(h, &cubin) == 0 && tier_orphan(h) < 0) {
            tier_drop(h);      /* stored if done; still compiling: at exit */
        }
        Py_XDECREF(cubin);
        PyErr_Restore(et, ev, tb);
    }
    stax_cuda_module_unload(h->module);
    stax_cuda_module_unload(h->quick_module);
    if (h->arena != NULL) {
        stax_arena_free(h->arena);
    }
    free(h);
}

/* ------------------------------------------------------------ vtable */

/* ------------------------------------------------------------ tiers
 *
 * A kernel's compile is nearly all of a compiled function's first call on
 * CUDA (Example 1.1 at 16384x16384 on the H200: 134-147 ms of NVRTC, of a
 * 150-180 ms call; softmax 540-790 ms). So a resident kernel the compile
 * cache does not have is compiled twice at once: its final version (the
 * options below) on the background worker (stax_nvrtc_job_submit), and a
 * first version on the caller's thread with --Ofast-compile=mid (NVRTC >=
 * 12.8), which compiled Example 1.1 in 72-81 ms and softmax in 200-207 ms
 * there. Launches run the first version until the final one is done, then
 * load and run that (tier_up). Both versions compute the same bits:
 * --fmad=false for both (and for every kernel, tiered or not) leaves the
 * compiler no contraction to choose, and neither reorders floating point;
 * the H200 measured --fmad=false at the same speed (bench cases within
 * 0.5%). An attention kernel (dot products: the fma matters) keeps fmad
 * and is compiled once, as before. The compile cache stores only final
 * versions (defer_object). TENSORPLAY_NVRTC_TIERS=0/off/false/no: compile
 * the final version on the caller's thread; "quick": first versions only
 * (tests compare them with the final ones). */
#define TIERS_OFF 0
#define TIERS_ON 1
#define TIERS_QUICK 2

static int
tier_mode(void)
{
    const char *e = getenv("TENSORPLAY_NVRTC_TIERS");
    if (e == NULL || *e == '\0') {
        return TIERS_ON;
    }
    if (strcmp(e, "0") == 0 || strcasecmp(e, "off") == 0
        || strcasecmp(e, "false") == 0 || strcasecmp(e, "no") == 0) {
        return TIERS_OFF;
    }
    return strcasecmp(e, "quick") == 0 ? TIERS_QUICK : TIERS_ON;
}

/* NVRTC >= 12.8 knows --Ofast-compile */
static int
has_fast_compile(void)
{
    static int has = -1;
    if (has < 0) {
        PyObject *v = stax_nvrtc_py_version(NULL, NULL);
        int major = 0, minor = 0;
        if (v == NULL || !PyArg_ParseTuple(v, "ii", &major, &minor)) {
            PyErr_Clear();
            Py_XDECREF(v);
            return 0;
        }
        Py_DECREF(v);
        has = major > 12 || (major == 12 && minor >= 8);
    }
    return has;
}

static struct {
    long long first, final_queued, tiered_up, final_failed;
} tier_stats;

/* The options of a kernel's compile (besides arch and the standard):
 * TENSORPLAY_NVRTC_OPTIONS split at spaces, --fmad=false unless the kernel
 * has an attention stage, --Ofast-compile=mid for a first version. The
 * strings live in buf (cap bytes) or are literals; the count, or -1 when
 * they do not fit. */
#define KERNEL_MAX_OPTS 14

static int
kernel_options(const nvrtc_handle *h, int quick, const char **opts, char *buf, size_t cap)
{
    const char *e = stax_nvrtc_extra_options();
    int n = 0;
    if (strlen(e) >= cap) {
        return -1;
    }
    strcpy(buf, e);
    char *save = NULL;
    for (char *t = strtok_r(buf, " \t", &save); t != NULL;
         t = strtok_r(NULL, " \t", &save)) {
        if (n >= KERNEL_MAX_OPTS - 2) {
            return -1;
        }
        opts[n++] = t;
    }
    if (!h->attention) {
        opts[n++] = "--fmad=false";
    }
    if (quick) {
        opts[n++] = "--Ofast-compile=mid";
    }
    return n;
}

/* NVRTC on the handle's source with its options, on this thread */
static PyObject *
kernel_compile(nvrtc_handle *h, const char *arch, int quick)
{
    const char *opts[KERNEL_MAX_OPTS];
    char buf[512];
    int n = kernel_options(h, quick, opts, buf, sizeof buf);
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "TENSORPLAY_NVRTC_OPTIONS: too many or too long "
                        "options");
        return NULL;
    }
    return stax_nvrtc_compile(PyUnicode_AsUTF8(h->source), h->name, arch, opts, n);
}

/* The CUBIN of a resident kernel the cache did not have: the final version
 * on the worker and a first version here (tiers on), or the final one here */
static PyObject *
tier_compile(nvrtc_handle *h, const char *arch)
{
    int mode = tier_mode();
    if (mode == TIERS_OFF || h->attention || !has_fast_compile()) {
        return kernel_compile(h, arch, 0);
    }
    if (mode == TIERS_ON) {
        const char *opts[KERNEL_MAX_OPTS];
        char buf[512];
        int n = kernel_options(h, 0, opts, buf, sizeof buf);
        h->job = n < 0 ? NULL
                       : stax_nvrtc_job_submit(PyUnicode_AsUTF8(h->source), h->name, arch,
                                               opts, n);
        if (h->job == NULL) {
            return kernel_compile(h, arch, 0);   /* no worker: the final one now */
        }
        tier_stats.final_queued++;
    }
    tier_stats.first++;
    h->first = 1;
    return kernel_compile(h, arch, 1);
}

/* The handle of kernel k: its CUDA C rendered, and `image` (PTX from the
 * compile cache, entry point `entry`) or, without one, NVRTC's PTX when the
 * back end compiles. */
static void *
handle_new(stax_backend *be, const stax_kernel *k, const char *entry,
           PyObject *image, PyObject **source)
{
    nvrtc_handle *h = NULL;
    int cap = 0, nd = k->nouter + k->ninner;
    const nvrtc_config *cfg = be->state;

    if (k->nbufs > STAX_NVRTC_MAX_BUFS || nd > 2 * STAX_MAX_DIMS) {
        PyErr_Format(PyExc_NotImplementedError, "NVRTC back end: kernel %s "
                     "has too many buffers or loops", k->name);
        return NULL;
    }
    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    snprintf(h->name, sizeof(h->name), "%s", entry != NULL ? entry : k->name);
    h->nsizes = stax_nvrtc_kernel_nsizes(k);
    h->rc_bytes = stax_nvrtc_row_cache_bytes(k);
    h->rr_blocks = stax_nvrtc_reg_row_blocks(k);
    h->rc_limit = -1;
    h->attention = k->nstages > 0 && k->stages[0].kind == STAX_STAGE_ATTENTION;
    double t0 = nv_timing() ? stax_nvrtc_now_ms() : 0, t1 = t0, t2 = t0;
    h->source = stax_nvrtc_render_kernel(k, h->nsizes);
    if (h->source == NULL) {
        goto error;
    }
    if (cfg->resident) {
        /* CUDA tensors exist, so a device does: one NVRTC run, for it */
        char arch[32];
        if (stax_nvrtc_device_arch(arch, sizeof(arch)) < 0) {
            goto error;
        }
        t1 = nv_timing() ? stax_nvrtc_now_ms() : 0;
        h->cubin = image != NULL && PyBytes_Check(image)
                       ? Py_NewRef(image)    /* the compile cache's CUBIN */
                       : tier_compile(h, arch);
        t2 = nv_timing() ? stax_nvrtc_now_ms() : 0;
        if (h->cubin == NULL
            || stax_cuda_module_function(PyBytes_AS_STRING(h->cubin), h->name,
                                         &h->module, &h->fn) < 0) {
            goto error;
        }
        if (nv_timing()) {
            double t3 = stax_nvrtc_now_ms();
            fprintf(stderr, "[stax nvrtc] %s: render %.2f ms, %s %.2f ms "
                    "(source %zd bytes), module load %.2f ms\n", h->name,
                    t1 - t0, image != NULL && PyBytes_Check(image)
                                 ? "cached cubin" : "nvrtc",
                    t2 - t1, PyUnicode_GET_LENGTH(h->source), t3 - t2);
        }
    }
    else if (image != NULL) {
        h->ptx = Py_NewRef(image);
    }
    else if (cfg->compile) {
        h->ptx = kernel_compile(h, cfg->arch, 0);
        if (h->ptx == NULL) {
            goto error;
        }
    }
    {
        lv_seen seen = {NULL, 0, 0};
        for (int i = 0; i < k->nstores && !h->reads_output; i++) {
            h->reads_output = k->stores[i].combine != STAX_COMBINE_NONE
                              || lval_reads_output(k, k->stores[i].value, &seen)
                              || ix_reads_output_s(k, k->stores[i].index, &seen);
        }
        for (int i = 0; i < k->naccs && !h->reads_output; i++) {
            h->reads_output = lval_reads_output(k, k->accs[i].value, &seen)
                              || ix_reads_output_s(k, k->accs[i].index, &seen);
        }
        PyMem_Free(seen.slot);
    }
    h->nbufs = k->nbufs;
    for (int i = 0; i < k->nbufs; i++) {
        h->dtype[i] = k->bufs[i].dtype;
        h->is_output[i] = k->bufs[i].is_output;
    }
    if ((h->arena = stax_arena_new()) == NULL) {
        goto error;
    }
    h->shape.nouter = k->nouter;
    h->shape.ninner = k->ninner;
    if (k->nstages > 0 && k->stages[0].kind == STAX_STAGE_ATTENTION) {
        /* the launch sizes its grid from the query blocks */
        stax_stage *st = stax_arena_alloc(h->arena, sizeof(stax_stage));
        if (st == NULL) {
            goto error;
        }
        *st = k->stages[0];
        h->shape.stages = st;
        h->shape.nstages = 1;
    }
    for (int d = 0; d < nd; d++) {
        if ((h->shape.dims[d] = ix_copy(h->arena, k->dims[d])) == NULL) {
            goto error;
        }
    }
    {
        lv_seen seen = {NULL, 0, 0};
        int bad = 0;
        for (int i = 0; i < k->nstores && !bad; i++) {
            bad = add_access(h, &cap, k->stores[i].buf, k->stores[i].index) < 0
                  || collect_ix(h, &cap, k->stores[i].index, &seen) < 0
                  || collect_lval(h, &cap, k->stores[i].value, &seen) < 0;
        }
        for (int i = 0; i < k->naccs && !bad; i++) {
            bad = collect_lval(h, &cap, k->accs[i].value, &seen) < 0
                  || collect_ix(h, &cap, k->accs[i].index, &seen) < 0;
        }
        PyMem_Free(seen.slot);
        if (bad) {
            goto error;
        }
    }
    if (source != NULL) {
        *source = Py_NewRef(h->source);
    }
    return h;
error:
    handle_free(h);
    return NULL;
}

static void *
nvrtc_compile_kernel(stax_backend *be, const stax_kernel *k,
                     PyObject **source)
{
    return handle_new(be, k, NULL, NULL, source);
}

/* The compile cache (lower_cache.c): the object is "PTX1", the entry
 * point's name and a NUL, then the PTX; for the resident back end (CUDA
 * tensors) "CBN1", the name, a NUL, then the CUBIN NVRTC built for the
 * device's arch (the tag names it: another GPU is another key). The entry
 * point is the name the kernel had when it was compiled: a kernel with the
 * same loop IR under another name (another function) launches it by that
 * name. */
static const char ptx_magic[4] = {'P', 'T', 'X', '1'};
static const char cubin_magic[4] = {'C', 'B', 'N', '1'};

static const char *
nvrtc_cache_tag(stax_backend *be)
{
    static char tag[1024];     /* the knob tag whole: options that differ are other keys */
    const nvrtc_config *cfg = be->state;
    PyObject *v = stax_nvrtc_py_version(NULL, NULL);
    int major = 0, minor = 0;
    if (v == NULL || !PyArg_ParseTuple(v, "ii", &major, &minor)) {
        Py_XDECREF(v);
        return NULL;
    }
    Py_DECREF(v);
    if (cfg->resident) {
        char arch[32];
        if (stax_nvrtc_device_arch(arch, sizeof(arch)) < 0) {
            return NULL;
        }
        snprintf(tag, sizeof tag, "NVRTC %d.%d; arch %s; CUBIN; fmad off but attention; row unroll %s%s", major,
                 minor, arch, stax_nvrtc_unroll_tag(), stax_nvrtc_knob_tag());
        return tag;
    }
    snprintf(tag, sizeof tag, "NVRTC %d.%d; arch %s; PTX; fmad off but attention; row unroll %s%s", major,
             minor, cfg->arch, stax_nvrtc_unroll_tag(), stax_nvrtc_knob_tag());
    return tag;
}

/* the compile cache's object: the magic, the entry's name, a NUL, the
 * image; NULL + exception */
static PyObject *
object_bytes(const char *magic, const char *name, const char *img, size_t n)
{
    size_t ln = strlen(name);
    PyObject *o = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(4 + ln + 1 + n));
    if (o != NULL) {
        char *p = PyBytes_AS_STRING(o);
        memcpy(p, magic, 4);
        memcpy(p + 4, name, ln + 1);
        memcpy(p + 4 + ln + 1, img, n);
    }
    return o;
}

static void *
nvrtc_compile_object(stax_backend *be, const stax_kernel *k, const char *sym,
                     PyObject **source, PyObject **object)
{
    nvrtc_handle *h = handle_new(be, k, NULL, NULL, source);
    Py_ssize_t n = 0;
    const char *ptx, *magic = ptx_magic;
    (void)sym;
    if (h == NULL) {
        return NULL;
    }
    if (h->cubin != NULL && PyBytes_Check(h->cubin)) {
        ptx = PyBytes_AS_STRING(h->cubin);
        n = PyBytes_GET_SIZE(h->cubin);
        magic = cubin_magic;
    }
    else {
        ptx = h->ptx != NULL && PyUnicode_Check(h->ptx)
                  ? PyUnicode_AsUTF8AndSize(h->ptx, &n) : NULL;
    }
    if (ptx == NULL) {
        PyErr_Clear();
        return h;     /* nothing to store (no PTX): *object stays NULL */
    }
    *object = object_bytes(magic, h->name, ptx, (size_t)n);
    if (*object == NULL) {
        handle_free(h);
        return NULL;
    }
    return h;
}

/* The handles that hold a sink (their final version goes into the compile
 * cache when done). A process that exits before a launch swapped a final
 * version in still stores it: at exit (the atexit module, while Python
 * runs) flush_at_exit waits for each one's compile and stores it, so the
 * next process loads final versions and compiles nothing. */
static void *pending;

/* the final versions of handles that went while they compiled (a compiled
 * function dropped right after its first call): stored at exit too */
typedef struct orphan {
    struct orphan *next;
    stax_nvrtc_job *job;
    stax_object_sink *sink;
    char name[64];
} orphan;

static orphan *orphans;

/* a final version's CUBIN into the compile cache, as compile_object
 * would have given it; no exception */
static void
sink_store(stax_object_sink *sink, const char *name, const char *img, size_t n)
{
    PyObject *o = object_bytes(cubin_magic, name, img, n);
    if (o == NULL) {
        PyErr_Clear();         /* the cache misses it; the kernel runs */
        return;
    }
    sink->put(sink, PyBytes_AS_STRING(o), (size_t)PyBytes_GET_SIZE(o));
    Py_DECREF(o);
}

static PyObject *
flush_at_exit(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    for (;;) {
        /* each wait lets the GIL go, and another thread (a daemon) may
         * free a handle or drop its job meanwhile: what is waited for is
         * first moved to the orphans, owned here alone */
        while (pending != NULL) {
            nvrtc_handle *h = pending;
            PyObject *cubin = NULL;
            if (tier_orphan(h) < 0 && tier_take(h, &cubin) == 0) {
                tier_drop(h);  /* no memory for an orphan: stored only if done */
            }
            Py_XDECREF(cubin);
        }
        if (orphans == NULL) {
            break;
        }
        orphan *o = orphans;
        char *img = NULL;
        size_t n = 0;
        int status = 0;
        orphans = o->next;
        Py_BEGIN_ALLOW_THREADS
        stax_nvrtc_job_wait(o->job);
        Py_END_ALLOW_THREADS
        if (stax_nvrtc_job_poll(o->job, &img, &n, &status) > 0) {
            sink_store(o->sink, o->name, img, n);
            free(img);
        }
        stax_nvrtc_job_release(o->job);
        o->sink->release(o->sink);
        free(o);
    }
    Py_RETURN_NONE;
}

static PyMethodDef flush_def = {"_nvrtc_flush_final_versions", flush_at_exit, METH_NOARGS,
                                "store the final versions of tiered kernels (at exit)"};

static int
flush_at_exit_registered(void)
{
    static int done;
    PyObject *mod = NULL, *fn = NULL, *r = NULL;
    if (done) {
        return 0;
    }
    if ((mod = PyImport_ImportModule("atexit")) != NULL
        && (fn = PyCFunction_New(&flush_def, NULL)) != NULL) {
        r = PyObject_CallMethod(mod, "register", "O", fn);
    }
    Py_XDECREF(mod);
    Py_XDECREF(fn);
    if (r == NULL) {
        PyErr_Clear();         /* no sink then: the kernel is compiled, not cached */
        return -1;
    }
    Py_DECREF(r);
    done = 1;
    return 0;
}

static void
pending_remove(nvrtc_handle *h)
{
    nvrtc_handle *prev = h->pend_prev, *next = h->pend_next;
    if (prev != NULL) {
        prev->pend_next = next;
    }
    else if (pending == h) {
        pending = next;
    }
    if (next != NULL) {
        next->pend_prev = prev;
    }
    h->pend_prev = h->pend_next = NULL;
}

/* the vtable's defer_object: a first version's handle takes the sink; one
 * with no final version coming (TENSORPLAY_NVRTC_TIERS=quick) stores
 * nothing, so that a later process never loads a first version */
static int
nvrtc_defer_object(stax_backend *be, void *handle, stax_object_sink *sink)
{
    nvrtc_handle *h = handle;
    (void)be;
    if (!h->first) {
        return 0;              /* final: the cache stores it now */
    }
    if (h->job == NULL || h->sink != NULL) {
        sink->release(sink);
        return 1;
    }
    /* without the exit hook it is stored at the swap or when h goes */
    (void)flush_at_exit_registered();
    h->sink = sink;
    h->pend_next = pending;
    if (pending != NULL) {
        ((nvrtc_handle *)pending)->pend_prev = h;
    }
    pending = h;
    return 1;
}

static void *
nvrtc_load_object(stax_backend *be, const stax_kernel *k, const char *sym,
                  const char *data, size_t n)
{
    const char *end = data + n, *name = data + 4, *nul;
    const nvrtc_config *cfg = be->state;
    PyObject *image;
    void *h;
    (void)sym;
    nul = n > 4 ? memchr(name, 0, (size_t)(end - name)) : NULL;
    if (n < 5 || memcmp(data, cfg->resident ? cubin_magic : ptx_magic, 4) != 0
        || nul == NULL || (size_t)(nul - name) >= sizeof(((nvrtc_handle *)0)->name)) {
        PyErr_Format(PyExc_ValueError, "not a %s object of the NVRTC back end",
                     cfg->resident ? "CUBIN" : "PTX");
        return NULL;
    }
    image = cfg->resident
                ? PyBytes_FromStringAndSize(nul + 1, (Py_ssize_t)(end - nul - 1))
                : PyUnicode_DecodeUTF8(nul + 1, (Py_ssize_t)(end - nul - 1), "strict");
    if (image == NULL) {
        return NULL;
    }
    h = handle_new(be, k, name, image, NULL);
    Py_DECREF(image);
    return h;
}

/* bytes of each buffer the kernel may touch at these sizes (interval
 * bounds of its index expressions); 1 if the iteration space is empty */
static int
handle_extents(nvrtc_handle *h, const int64_t *sizes, int64_t start,
               int64_t end, int64_t *nbytes)
{
    static const int64_t zero[2 * STAX_MAX_DIMS] = {0};
    int64_t vlo[2 * STAX_MAX_DIMS], vhi[2 * STAX_MAX_DIMS], lo, hi;
    int nd = h->shape.nouter + h->shape.ninner;

    memset(nbytes, 0, sizeof(int64_t) * (size_t)h->nbufs);
    if (end <= start) {
        return 1;
    }
    for (int d = 0; d < nd; d++) {
        if (stax_nvrtc_ix_bounds(h->shape.dims[d], sizes, zero, zero, &lo,
                                 &hi) < 0) {
            return -1;
        }
        if (hi <= 0) {
            return 1;     /* empty iteration space */
        }
        vlo[d] = 0;
        vhi[d] = hi - 1;
    }
    if (h->shape.nouter > 0 && h->shape.nstages == 0) {
        vlo[0] = start;
        vhi[0] = end - 1;   /* attention: [start, end) are query blocks */
    }
    for (int i = 0; i < h->naccess; i++) {
        const access_t *a = &h->access[i];
        int isz = stax_nvrtc_dtype_size(h->dtype[a->buf]);
        if (stax_nvrtc_ix_bounds(a->index, sizes, vlo, vhi, &lo, &hi) < 0) {
            return -1;
        }
        if ((hi + 1) * isz > nbytes[a->buf]) {
            nbytes[a->buf] = (hi + 1) * isz;
        }
    }
    return 0;
}

static int
launch_sized(nvrtc_handle *h, char **bufs, const int64_t *nbytes,
             const int64_t *sizes, int64_t start, int64_t end)
{
    int64_t grid[3], block[3];
    if (stax_nvrtc_launch_config(&h->shape, sizes, start, end, grid, block)
        < 0) {
        return -1;
    }
    if (h->cubin == NULL) {
        char arch[32];
        if (stax_nvrtc_device_arch(arch, sizeof(arch)) < 0) {
            return -1;
        }
        h->cubin = stax_nvrtc_compile_source(PyUnicode_AsUTF8(h->source),
                                             h->name, arch, NULL);
        if (h->cubin == NULL) {
            return -1;
        }
    }
    return stax_nvrtc_launch_image(h->cubin, h->name, h->nbufs, bufs, nbytes,
                                   h->is_output, sizes, h->nsizes, start, end,
                                   grid, block);
}

/* size each buffer from its accesses at these sizes, then launch */
static int
launch_locked(nvrtc_handle *h, char **bufs, const int64_t *sizes,
              int64_t start, int64_t end)
{
    int64_t nbytes[STAX_NVRTC_MAX_BUFS];
    int rc = handle_extents(h, sizes, start, end, nbytes);
    if (rc != 0) {
        return rc < 0 ? -1 : 0;
    }
    return launch_sized(h, bufs, nbytes, sizes, start, end);
}

static int
nvrtc_launch(stax_backend *be, void *handle, char **bufs,
             const int64_t *sizes, int64_t start, int64_t end)
{
    PyGILState_STATE g = PyGILState_Ensure();
    int rc;
    (void)be;
    rc = launch_locked(handle, bufs, sizes, start, end);
    PyGILState_Release(g);
    return rc;
}

/* TENSORPLAY_NVRTC_TUNE=0 turns the launch-configuration search off */
static int
tune_enabled(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("TENSORPLAY_NVRTC_TUNE");
        on = !(e != NULL && *e == '0');
    }
    return on;
}

/* Bytes of dynamic shared memory a resident launch passes: the row cache
 * (nvrtc_render.c) of a row at these sizes when the kernel has one, runs
 * one row per block, and the row fits under TENSORPLAY_NVRTC_ROW_CACHE
 * bytes (default 110 KiB: two blocks of 1024 threads per H100/H200
 * multiprocessor; 0 turns the cache off) and the device's opt-in limit;
 * else 0, and every row loop reads global memory. */
static int
row_cache_smem(nvrtc_handle *h, const int64_t *sizes, const int64_t block[3],
               int64_t *smem)
{
    int64_t rn;
    *smem = 0;
    if (h->rc_bytes <= 0 || block[1] != 1 || (h->rr_blocks & block[0])) {
        return 0;                /* no cache, or the row in registers */
    }
    if (h->rc_limit < 0) {
        const char *e = getenv("TENSORPLAY_NVRTC_ROW_CACHE");
        int64_t want = e != NULL && *e ? atoll(e) : 110 * 1024;
        h->rc_limit = want > 0 ? stax_nvrtc_smem_optin(h->fn, want) : 0;
    }
    if (stax_nvrtc_row_length(&h->shape, sizes, &rn) < 0) {
        return -1;
    }
    if (rn > 0 && rn <= h->rc_limit / h->rc_bytes) {
        *smem = rn * h->rc_bytes;
    }
    return 0;
}

/* Halve the block until the kernel can run it: a kernel whose registers
 * leave fewer than block[0] * block[1] threads a block (ptxas's count,
 * read once from the driver) fails to launch (out of resources: a float64
 * softmax at the 1024 threads the search or TENSORPLAY_NVRTC_THREADS asks
 * for). Every kernel steps its rows and points by the block's size, so a
 * smaller block computes the same. */
static void
fit_block(const nvrtc_handle *h, int64_t block[3])
{
    while (block[0] * block[1] > h->max_threads && block[1] > 1) {
        block[1] /= 2;
    }
    while (block[0] * block[1] > h->max_threads && block[0] > 32) {
        block[0] /= 2;
    }
}

/* h gives up its final version (job and sink) */
static void
tier_drop(nvrtc_handle *h)
{
    stax_nvrtc_job_release(h->job);
    h->job = NULL;
    if (h->sink != NULL) {
        h->sink->release(h->sink);
        h->sink = NULL;
        pending_remove(h);
    }
}

/* h goes while its final version compiles: the job and the sink move to
 * the orphans, stored at exit; 0, or -1 (no sink, or no memory) */
static int
tier_orphan(nvrtc_handle *h)
{
    orphan *o = h->sink != NULL ? calloc(1, sizeof(*o)) : NULL;
    if (o == NULL) {
        return -1;
    }
    o->job = h->job;
    o->sink = h->sink;
    snprintf(o->name, sizeof o->name, "%s", h->name);
    o->next = orphans;
    orphans = o;
    pending_remove(h);
    h->job = NULL;
    h->sink = NULL;
    return 0;
}

/* The final version of h if the worker is done with it: 1 and *cubin (new
 * bytes), stored in the compile cache when h holds a sink; 0 while it
 * compiles; -1 when it failed (the first version stays: it computes the
 * same; STAX_NVRTC_TIMING says so). Past 0, h has no job and no sink, and
 * h may be gone: the store runs the cache's log hook (Python code) that
 * may free h (a pending handle at exit, whose program is garbage), so the
 * caller touches h again only if it owns it. No exception in any case. */
static int
tier_take(nvrtc_handle *h, PyObject **cubin)
{
    char *img = NULL, name[sizeof(h->name)];
    size_t n = 0;
    int status = 0, rc = h->job != NULL ? stax_nvrtc_job_poll(h->job, &img, &n, &status) : -1;
    stax_object_sink *sink = h->sink;
    if (rc == 0) {
        return 0;
    }
    /* h lets go of the job and the sink before any Python code runs */
    stax_nvrtc_job_release(h->job);
    h->job = NULL;
    if (sink != NULL) {
        h->sink = NULL;
        pending_remove(h);
    }
    snprintf(name, sizeof name, "%s", h->name);
    h = NULL;
    if (rc > 0) {
        *cubin = PyBytes_FromStringAndSize(img, (Py_ssize_t)n);
        free(img);
        if (*cubin == NULL) {
            PyErr_Clear();
            rc = -1;
        }
    }
    if (rc > 0 && sink != NULL) {
        sink_store(sink, name, PyBytes_AS_STRING(*cubin), (size_t)PyBytes_GET_SIZE(*cubin));
    }
    if (sink != NULL) {
        sink->release(sink);
    }
    if (rc < 0) {
        tier_stats.final_failed++;
        if (nv_timing()) {
            fprintf(stderr, "[stax nvrtc] %s: the final version failed (status %d); the "
                    "first one stays\n", name, status);
        }
    }
    return rc;
}

/* At a launch: once the final version is done, load it and launch it from
 * now on (its launch configuration is searched again: registers differ).
 * One that does not load leaves the first version running. 0, or -1 +
 * exception. */
static int
tier_up(nvrtc_handle *h)
{
    PyObject *cubin = NULL;
    void *mod = NULL, *fn = NULL;
    if (tier_take(h, &cubin) <= 0) {
        return 0;
    }
    if (stax_cuda_module_function(PyBytes_AS_STRING(cubin), h->name, &mod, &fn) < 0) {
        if (nv_timing()) {
            PyErr_Print();
        }
        PyErr_Clear();
        Py_DECREF(cubin);
        tier_stats.final_failed++;
        return 0;
    }
    h->quick_module = h->module;
    h->module = mod;
    h->fn = fn;
    Py_SETREF(h->cubin, cubin);
    h->max_threads = 0;
    h->rc_limit = -1;
    h->tuned = 0;
    h->best_block = 0;
    tier_stats.tiered_up++;
    if (nv_timing()) {
        fprintf(stderr, "[stax nvrtc] %s: the final version runs from now on\n", h->name);
    }
    return 0;
}

/* buffers are device addresses already: launch on the stream and return
 * (the stream orders what follows; a host read synchronizes) */
static int
nvrtc_launch_resident(stax_backend *be, void *handle, char **bufs,
                      const int64_t *sizes, int64_t start, int64_t end)
{
    nvrtc_handle *h = handle;
    stax_cuptr dptr[STAX_NVRTC_MAX_BUFS];
    void *params[STAX_NVRTC_MAX_BUFS + 3];
    int64_t sz[STAX_NVRTC_MAX_SIZES];
    int64_t grid[3], block[3], st = start, en = end, smem = 0;
    static int timed = -1;
    (void)be;
    if (timed < 0) {
        const char *e = getenv("TENSORPLAY_NVRTC_TIME");
        timed = e != NULL && *e && *e != '0';
    }
    if (h->job != NULL && tier_up(h) < 0) {
        return -1;
    }
    if (stax_nvrtc_launch_config(&h->shape, sizes, start, end, grid, block)
        < 0) {
        return -1;
    }
    for (int i = 0; i < h->nbufs; i++) {
        dptr[i] = (stax_cuptr)(uintptr_t)bufs[i];
        params[i] = &dptr[i];
    }
    for (int i = 0; i < h->nsizes; i++) {
        sz[i] = sizes[i];
    }
    if (h->nsizes == 0) {
        sz[0] = 0;
    }
    params[h->nbufs] = sz;
    params[h->nbufs + 1] = &st;
    params[h->nbufs + 2] = &en;
    if (h->max_threads == 0) {
        h->max_threads = stax_nvrtc_max_threads(h->fn);
    }
    fit_block(h, block);
    if (row_cache_smem(h, sizes, block, &smem) < 0) {
        return -1;
    }
    if (!h->tuned && h->shape.ninner > 0 && block[1] == 1 && block[0] >= 256
        && grid[0] >= 512 && !h->reads_output && tune_enabled()) {
        /* Little's law by measurement: long rows, many of them; time each
         * block size once with events (the launches are idempotent: no
         * buffer it writes is read) and keep the fastest */
        static const int64_t cand[] = {128, 256, 512, 1024};
        double best = 1e30;
        h->tuned = 1;
        /* timed launches synchronize: not inside a recording */
        if (stax_cuda_record_break() < 0) {
            return -1;
        }
        for (int c = 0; c < 4 && cand[c] <= h->max_threads; c++) {
            block[0] = cand[c];
            if (row_cache_smem(h, sizes, block, &smem) < 0
                || stax_nvrtc_launch_fn(h->fn, params, grid, block, smem, 1)
                < 0) {
                return -1;
            }
            if (stax_nvrtc_last_ms() < best) {
                best = stax_nvrtc_last_ms();
                h->best_block = cand[c];
            }
        }
    }
    if (h->best_block > 0 && block[1] == 1) {
        block[0] = h->best_block;
        fit_block(h, block);
        if (row_cache_smem(h, sizes, block, &smem) < 0) {
            return -1;
        }
    }
    if (stax_cuda_recording() && !timed && grid[0] > 0 && grid[1] > 0
        && grid[2] > 0) {
        /* a CUDA graph's program (lower/program.c): kept for one replay */
        size_t psize[STAX_NVRTC_MAX_BUFS + 3];
        int rc;
        for (int i = 0; i < h->nbufs; i++) {
            psize[i] = sizeof(stax_cuptr);
        }
        psize[h->nbufs] = sizeof(int64_t) * (size_t)(h->nsizes > 0 ? h->nsizes : 1);
        psize[h->nbufs + 1] = psize[h->nbufs + 2] = sizeof(int64_t);
        rc = stax_cuda_record_launch(h->fn, grid, block, smem, params,
                                     h->nbufs + 3, psize);
        if (rc != 0) {
            return rc < 0 ? -1 : 0;
        }
    }
    return stax_nvrtc_launch_fn(h->fn, params, grid, block, smem, timed);
}

static void
nvrtc_free(stax_backend *be, void *handle)
{
    (void)be;
    handle_free(handle);
}

/* exactly the primitives the renderer can spell (nvrtc_render.c): anything
 * else is for the caller to run another way */
static int
nvrtc_supports_op(stax_backend *be, int prim)
{
    (void)be;
    return stax_nvrtc_renders_prim(prim);
}

static stax_backend stax_nvrtc_backend = {
    .name = "nvrtc",
    .compile_kernel = nvrtc_compile_kernel,
    .launch = nvrtc_launch,
    .free = nvrtc_free,
    .supports_op = nvrtc_supports_op,
    .kernel_fn = NULL,
    .cache_tag = nvrtc_cache_tag,
    .compile_object = nvrtc_compile_object,
    .load_object = nvrtc_load_object,
    .state = &compile_config,
    .caps = STAX_BE_NO_ZERO_DIV_CHECK | STAX_BE_ATOMIC_STORES,
};

/* the same back end, rendering only: CUDA C without NVRTC (a launch
 * compiles the CUBIN) */
static stax_backend nvrtc_render_backend = {
    .name = "nvrtc",
    .compile_kernel = nvrtc_compile_kernel,
    .launch = nvrtc_launch,
    .free = nvrtc_free,
    .supports_op = nvrtc_supports_op,
    .kernel_fn = NULL,
    .state = &render_config,
    .caps = STAX_BE_NO_ZERO_DIV_CHECK | STAX_BE_ATOMIC_STORES,
};

/* the back end of programs whose inputs are CUDA tensors (the device
 * table's "cuda" row): device buffers in, device buffers out */
static stax_backend nvrtc_cuda_backend = {
    .name = "nvrtc",
    .compile_kernel = nvrtc_compile_kernel,
    .launch = nvrtc_launch_resident,
    .free = nvrtc_free,
    .supports_op = nvrtc_supports_op,
    .kernel_fn = NULL,
    .cache_tag = nvrtc_cache_tag,
    .compile_object = nvrtc_compile_object,
    .load_object = nvrtc_load_object,
    .state = &resident_config,
    .caps = STAX_BE_NO_ZERO_DIV_CHECK | STAX_BE_ATOMIC_STORES,
    .device = "cuda",
    .defer_object = nvrtc_defer_object,
};

/* ------------------------------------------------------------ Python */

static PyObject *
nvrtc_py_render(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"gm", "example_inputs", "compile", "strict",
                             "dynamic", NULL};
    PyObject *gm = NULL, *ex = NULL;
    int compile = 1, strict = 1, dynamic = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|$ppp:nvrtc_render",
                                     kwlist, &gm, &ex, &compile, &strict,
                                     &dynamic)) {
        return NULL;
    }
    if (compile && stax_nvrtc_load() < 0) {
        return NULL;
    }
    return stax_lower_program(gm, ex, compile ? &stax_nvrtc_backend
                                              : &nvrtc_render_backend,
                              strict, dynamic);
}

static PyObject *
nvrtc_py_supported_prims(PyObject *self, PyObject *unused)
{
    PyObject *t = PyList_New(0), *r = NULL;
    (void)self;
    (void)unused;
    if (t == NULL) {
        return NULL;
    }
    for (int p = 0; p < STAX_PRIM_COUNT; p++) {
        if (nvrtc_supports_op(&stax_nvrtc_backend, p)) {
            PyObject *n = PyUnicode_FromString(stax_prim_name((stax_prim_t)p));
            if (n == NULL || PyList_Append(t, n) < 0) {
                Py_XDECREF(n);
                goto done;
            }
            Py_DECREF(n);
        }
    }
    r = PyList_AsTuple(t);
done:
    Py_DECREF(t);
    return r;
}

static PyObject *
nvrtc_py_warm_source(PyObject *self, PyObject *unused)
{
    const char *src = stax_nvrtc_warm_source();
    (void)self;
    (void)unused;
    return src != NULL ? PyUnicode_FromString(src) : PyErr_NoMemory();
}

/* _C._nvrtc_compile_in_background: the worker's compile, waited for */
static PyObject *
nvrtc_py_compile_bg(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"source", "name", "arch", "options", NULL};
    const char *src = NULL, *name = "kernel.cu", *arch = "sm_90";
    PyObject *options = Py_None, *seq = NULL, *res = NULL;
    const char *opts[16];
    Py_ssize_t nopt = 0;
    stax_nvrtc_job *j = NULL;
    char *img = NULL;
    size_t n = 0;
    int status = 0, rc;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|ssO:_nvrtc_compile_in_background", kwlist,
                                     &src, &name, &arch, &options)) {
        return NULL;
    }
    if (strncmp(arch, "sm_", 3) != 0) {
        PyErr_Format(PyExc_ValueError, "_nvrtc_compile_in_background: arch must be 'sm_XY' "
                     "(the worker makes CUBIN), got '%s'", arch);
        return NULL;
    }
    if ((nopt = stax_nvrtc_option_strings(options, opts, 16, &seq)) < 0) {
        return NULL;
    }
    j = stax_nvrtc_job_submit(src, name, arch, opts, (int)nopt);
    if (j == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(stax_nvrtc_error, "no background NVRTC worker here (libnvrtc "
                            "without CUBIN, or the thread could not start)");
        }
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    stax_nvrtc_job_wait(j);
    Py_END_ALLOW_THREADS
    rc = stax_nvrtc_job_poll(j, &img, &n, &status);
    if (rc > 0) {
        res = PyBytes_FromStringAndSize(img, (Py_ssize_t)n);
    }
    else {
        /* the log is NVRTC's to give: the same compile on this thread */
        res = stax_nvrtc_compile(src, name, arch, opts, (int)nopt);
        if (res != NULL) {
            Py_CLEAR(res);
            PyErr_Format(stax_nvrtc_error, "the background compile failed (status %d)",
                         status);
        }
    }
done:
    free(img);
    stax_nvrtc_job_release(j);
    Py_XDECREF(seq);
    return res;
}

static PyObject *
nvrtc_py_finish_compiles(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    stax_nvrtc_jobs_wait_all();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *
nvrtc_py_tier_stats(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("{sLsLsLsL}", "first_versions", tier_stats.first,
                         "final_queued", tier_stats.final_queued, "tiered_up",
                         tier_stats.tiered_up, "final_failed", tier_stats.final_failed);
}

static PyMethodDef nvrtc_methods[] = {
    {"_nvrtc_compile_in_background", (PyCFunction)(void (*)(void))nvrtc_py_compile_bg,
     METH_VARARGS | METH_KEYWORDS,
     "_nvrtc_compile_in_background(source, name='kernel.cu', arch='sm_90', options=None) "
     "-> bytes: CUBIN compiled by the background NVRTC worker (the one that compiles "
     "final kernel versions), waited for without the GIL. NVRTCError with the log if "
     "NVRTC rejects it."},
    {"_nvrtc_finish_compiles", nvrtc_py_finish_compiles, METH_NOARGS,
     "_nvrtc_finish_compiles() -> None: wait (without the GIL) until the background "
     "NVRTC worker has nothing queued or compiling."},
    {"_nvrtc_tier_stats", nvrtc_py_tier_stats, METH_NOARGS,
     "_nvrtc_tier_stats() -> dict: tiered compilation of CUDA kernels in this process "
     "(first_versions compiled, final_queued on the worker, tiered_up: final versions "
     "launched, final_failed: final versions that did not compile or load)."},
    {"nvrtc_available", stax_nvrtc_py_available, METH_NOARGS,
     "nvrtc_available() -> bool: libnvrtc could be loaded."},
    {"nvrtc_version", stax_nvrtc_py_version, METH_NOARGS,
     "nvrtc_version() -> (major, minor); NVRTCError if not found."},
    {"nvrtc_library_path", stax_nvrtc_py_library_path, METH_NOARGS,
     "nvrtc_library_path() -> str or None: the libnvrtc that was loaded."},
    {"nvrtc_compile", (PyCFunction)(void (*)(void))stax_nvrtc_py_compile,
     METH_VARARGS | METH_KEYWORDS,
     "nvrtc_compile(source, name='kernel.cu', arch='compute_90', "
     "options=None)\n--\n\nCompile CUDA C with NVRTC: PTX (str) for "
     "arch='compute_XY', CUBIN (bytes) for 'sm_XY'. Raises NVRTCError "
     "carrying the compile log (.log)."},
    {"_nvrtc_warmup", (PyCFunction)(void (*)(void))stax_nvrtc_py_warmup_info,
     METH_VARARGS | METH_KEYWORDS,
     "_nvrtc_warmup(wait=False, start_arch=None) -> dict: the NVRTC warm-up "
     "thread started when CUDA first came up (started, done, ms: its wall "
     "time or -1, status: the warm compile's nvrtcResult, arch). wait=True joins it first; "
     "start_arch='sm_XY' starts it for that architecture if it has not "
     "started (tests without a GPU; ValueError for another form). "
     "TENSORPLAY_NVRTC_WARMUP=0 turns the warm-up off."},
    {"_nvrtc_warmup_source", nvrtc_py_warm_source, METH_NOARGS,
     "_nvrtc_warmup_source() -> str: the CUDA C the warm-up compiles "
     "(entry stax_warm), from the rendered kernels' preambles."},
    {"nvrtc_last_kernel_ms", stax_nvrtc_py_last_kernel_ms, METH_NOARGS,
     "nvrtc_last_kernel_ms() -> float or None: GPU time (CUDA events) of "
     "the last kernel launched by this back end, copies excluded."},
    {"cuda_available", stax_nvrtc_py_cuda_available, METH_NOARGS,
     "cuda_available() -> bool: a CUDA driver and a GPU are usable."},
    {"nvrtc_render", (PyCFunction)(void (*)(void))nvrtc_py_render,
     METH_VARARGS | METH_KEYWORDS,
     "nvrtc_render(gm, example_inputs, *, compile=True, strict=True, "
     "dynamic=False)\n--\n\nLower the GraphModule gm for example_inputs "
     "with the lower room, exactly as the Stax back end does, but compile "
     "every kernel of the loop IR with the NVRTC back end instead of the "
     "inputs' device's: CUDA C, then PTX (compile=True; NVRTCError with the "
     "log if NVRTC rejects it; compile=False renders only and needs no "
     "NVRTC). Returns the CompiledProgram: .backend == 'nvrtc', .kernels "
     "lists (name, source = CUDA C, loop_ir, bytes_read, bytes_written). "
     "Calling it needs a GPU: each kernel runs there on copies of the "
     "buffers (RuntimeError without one). strict: an op lowering cannot "
     "take raises NativeCompileError instead of running eagerly; dynamic: "
     "sizes are kernel arguments."},
    {"nvrtc_supported_prims", nvrtc_py_supported_prims, METH_NOARGS,
     "nvrtc_supported_prims() -> tuple of str: the loop-IR primitives the "
     "CUDA C renderer can render (what the NVRTC back end's supports_op "
     "accepts); kernels using any other primitive must run another way."},
    {NULL, NULL, 0, NULL},
};

int
stax_nvrtc_module_init(PyObject *m)
{
    stax_cuda_set_ready_hook(stax_nvrtc_warm_start);
    if (stax_nvrtc_error == NULL) {
        stax_nvrtc_error = PyErr_NewExceptionWithDoc(
            "tensorplay._C.NVRTCError",
            "NVRTC failed (or is missing); .log holds the compile log.",
            PyExc_RuntimeError, NULL);
        if (stax_nvrtc_error == NULL) {
            return -1;
        }
    }
    if (PyModule_AddObjectRef(m, "NVRTCError", stax_nvrtc_error) < 0
        || PyModule_AddFunctions(m, nvrtc_methods) < 0) {
        return -1;
    }
    return stax_lower_register_backend(&nvrtc_cuda_backend);
}
