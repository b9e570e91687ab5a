/* Room init and the back-end vtable of the NVRTC back end.
 *
 * stax_nvrtc_backend ("nvrtc"), registered with lower's registry:
 *   compile_kernel  render the loop IR as CUDA C, compile it to PTX with
 *                   NVRTC (no GPU needed); the handle keeps source and PTX
 *   launch          needs a GPU: copies the buffers to the device, runs a
 *                   CUBIN built for the device's arch, copies outputs back;
 *                   without a CUDA driver it raises a clear RuntimeError
 *   free, supports_op (the loop-IR primitives the renderer can render)
 * Nothing is loaded at import: libnvrtc / libcuda are dlopen()ed on first
 * use. */
#include "backend_nvrtc/nvrtc_internal.h"

#include <stdlib.h>
#include <string.h>

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
    int nbufs;
    stax_dtype_t dtype[STAX_NVRTC_MAX_BUFS];
    int is_output[STAX_NVRTC_MAX_BUFS];
    int nsizes;
    /* what a launch needs to size the device buffers (own copies) */
    stax_arena *arena;
    stax_kernel shape;         /* nouter, ninner, dims only */
    int naccess;
    access_t *access;
} nvrtc_handle;

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
    c->val = NULL;   /* STAX_IX_VALUE stays unboundable */
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

static int collect_ix(nvrtc_handle *h, int *cap, const stax_ix *ix);

static int
collect_lval(nvrtc_handle *h, int *cap, const stax_lval *v)
{
    if (v == NULL) {
        return 0;
    }
    if (v->kind == STAX_LV_LOAD) {
        if (add_access(h, cap, v->buf, v->index) < 0
            || collect_ix(h, cap, v->index) < 0
            || collect_lval(h, cap, v->mask) < 0) {
            return -1;
        }
        return 0;
    }
    if (v->kind == STAX_LV_INDEX && collect_ix(h, cap, v->index) < 0) {
        return -1;
    }
    for (int i = 0; i < v->nargs; i++) {
        if (collect_lval(h, cap, v->args[i]) < 0) {
            return -1;
        }
    }
    return 0;
}

static int
collect_ix(nvrtc_handle *h, int *cap, const stax_ix *ix)
{
    if (ix == NULL) {
        return 0;
    }
    if (ix->kind == STAX_IX_VALUE) {
        return collect_lval(h, cap, ix->val);
    }
    if (ix->kind >= STAX_IX_ADD && ix->kind <= STAX_IX_MOD) {
        return collect_ix(h, cap, ix->a) < 0 ? -1 : collect_ix(h, cap, ix->b);
    }
    return 0;
}

static void
handle_free(nvrtc_handle *h)
{
    if (h == NULL) {
        return;
    }
    Py_XDECREF(h->source);
    Py_XDECREF(h->ptx);
    Py_XDECREF(h->cubin);
    if (h->arena != NULL) {
        stax_arena_free(h->arena);
    }
    free(h);
}

/* ------------------------------------------------------------ vtable */

static void *
nvrtc_compile_kernel(stax_backend *be, const stax_kernel *k,
                     PyObject **source)
{
    nvrtc_handle *h = NULL;
    int cap = 0, nd = k->nouter + k->ninner;
    const char *arch = be->state ? (const char *)be->state : "compute_90";

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
    snprintf(h->name, sizeof(h->name), "%s", k->name);
    h->nsizes = stax_nvrtc_kernel_nsizes(k);
    h->source = stax_nvrtc_render_kernel(k, h->nsizes);
    if (h->source == NULL) {
        goto error;
    }
    h->ptx = stax_nvrtc_compile_source(PyUnicode_AsUTF8(h->source), h->name,
                                       arch, NULL);
    if (h->ptx == NULL) {
        goto error;
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
    for (int d = 0; d < nd; d++) {
        if ((h->shape.dims[d] = ix_copy(h->arena, k->dims[d])) == NULL) {
            goto error;
        }
    }
    for (int i = 0; i < k->nstores; i++) {
        if (add_access(h, &cap, k->stores[i].buf, k->stores[i].index) < 0
            || collect_ix(h, &cap, k->stores[i].index) < 0
            || collect_lval(h, &cap, k->stores[i].value) < 0) {
            goto error;
        }
    }
    for (int i = 0; i < k->naccs; i++) {
        if (collect_lval(h, &cap, k->accs[i].value) < 0
            || collect_ix(h, &cap, k->accs[i].index) < 0) {
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
    if (h->shape.nouter > 0) {
        vlo[0] = start;
        vhi[0] = end - 1;
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

PyObject *
stax_nvrtc_handle_ptx(void *handle)
{
    return ((nvrtc_handle *)handle)->ptx;
}

static stax_backend stax_nvrtc_backend = {
    .name = "nvrtc",
    .compile_kernel = nvrtc_compile_kernel,
    .launch = nvrtc_launch,
    .free = nvrtc_free,
    .supports_op = nvrtc_supports_op,
    .kernel_fn = NULL,
    .state = NULL,     /* PTX arch for compile_kernel: NULL = compute_90 */
};

/* ------------------------------------------------------------ shadow */

/* nvrtc_shadow(True): wrap the registered "llvm" back end so that every
 * kernel the lower room compiles for the CPU is also rendered as CUDA C and
 * compiled to PTX by NVRTC (a null device for the GPU path: the same loop
 * IR through both back ends). Each kernel appends a dict {name, loop_ir,
 * source, ok, error} to the list nvrtc_shadow() returns. CPU results are
 * unchanged: compile/launch/kernel_fn forward to the real back end. */
static stax_backend *shadow_inner = NULL;   /* the real "llvm" */
static PyObject *shadow_log = NULL;         /* list */
static int shadow_gpu = 0;                  /* also run each kernel on GPU */

typedef struct {
    void *cpu;              /* the llvm handle */
    nvrtc_handle *gpu;      /* ours, or NULL */
    PyObject *entry;        /* its log dict (strong) */
} shadow_pair;
static shadow_pair *pairs = NULL;
static int npairs = 0, cappairs = 0;

static void *nvrtc_compile_kernel(stax_backend *be, const stax_kernel *k,
                                  PyObject **source);
static stax_backend stax_nvrtc_backend;

static PyObject *shadow_last = NULL;   /* the last log dict */

static void
shadow_record(const stax_kernel *k)
{
    PyObject *src = NULL, *ptx = NULL, *ir = NULL, *err = NULL, *d = NULL;
    PyObject *et = NULL, *ev = NULL, *tb = NULL;
    int ns = stax_nvrtc_kernel_nsizes(k), ok;

    src = stax_nvrtc_render_kernel(k, ns);
    if (src != NULL) {
        ptx = stax_nvrtc_compile_source(PyUnicode_AsUTF8(src), k->name,
                                        "compute_90", NULL);
    }
    if (PyErr_Occurred()) {
        PyErr_Fetch(&et, &ev, &tb);
        err = ev ? PyObject_Str(ev) : PyUnicode_FromString("?");
        PyErr_Clear();
    }
    ir = stax_lower_kernel_str(k);
    PyErr_Clear();
    ok = ptx != NULL && err == NULL && PyUnicode_Check(ptx)
         && strstr(PyUnicode_AsUTF8(ptx), ".entry") != NULL;
    d = Py_BuildValue("{s:s,s:O,s:O,s:O,s:O}", "name", k->name,
                      "loop_ir", ir ? ir : Py_None,
                      "source", src ? src : Py_None,
                      "ok", ok ? Py_True : Py_False,
                      "error", err ? err : Py_None);
    if (d != NULL && shadow_log != NULL) {
        PyList_Append(shadow_log, d);
    }
    PyErr_Clear();
    Py_XSETREF(shadow_last, d);
    Py_XDECREF(src);
    Py_XDECREF(ptx);
    Py_XDECREF(ir);
    Py_XDECREF(err);
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
}

static void *
shadow_compile_kernel(stax_backend *be, const stax_kernel *k,
                      PyObject **source)
{
    (void)be;
    void *h = shadow_inner->compile_kernel(shadow_inner, k, source);
    if (h != NULL) {
        shadow_record(k);
        if (shadow_gpu && shadow_last != NULL) {
            nvrtc_handle *g = nvrtc_compile_kernel(&stax_nvrtc_backend, k,
                                                   NULL);
            PyErr_Clear();
            if (npairs == cappairs) {
                int nc = cappairs ? 2 * cappairs : 64;
                shadow_pair *np_ = realloc(pairs, sizeof(*np_) * (size_t)nc);
                if (np_ == NULL) {
                    handle_free(g);
                    return h;
                }
                pairs = np_;
                cappairs = nc;
            }
            pairs[npairs].cpu = h;
            pairs[npairs].gpu = g;
            pairs[npairs].entry = Py_NewRef(shadow_last);
            npairs++;
        }
    }
    return h;
}

/* max |gpu - cpu| / (1 + |cpu|) over an output buffer; inf if NaNs
 * differ; integers and bool exact (|difference|) */
static double
compare_buf(stax_dtype_t dt, const char *g, const char *c, int64_t nbytes)
{
    double m = 0;
    int64_t n = nbytes / stax_nvrtc_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) {
        double a, b;
        switch (dt) {
        case STAX_FLOAT32: a = ((const float *)g)[i];
                           b = ((const float *)c)[i]; break;
        case STAX_FLOAT64: a = ((const double *)g)[i];
                           b = ((const double *)c)[i]; break;
        case STAX_INT64: a = (double)((const int64_t *)g)[i];
                         b = (double)((const int64_t *)c)[i]; break;
        case STAX_INT32: a = ((const int32_t *)g)[i];
                         b = ((const int32_t *)c)[i]; break;
        case STAX_INT16: case STAX_FLOAT16:
            a = ((const int16_t *)g)[i];
            b = ((const int16_t *)c)[i]; break;
        default: a = ((const unsigned char *)g)[i];
                 b = ((const unsigned char *)c)[i]; break;
        }
        if ((a != a) != (b != b)) {
            return 1e300;
        }
        if (a == a && a != b) {
            double e = (a > b ? a - b : b - a) / (1.0 + (b < 0 ? -b : b));
            m = e > m ? e : m;
        }
    }
    return m;
}

static void
entry_note(PyObject *entry, const char *key, PyObject *v)
{
    if (v != NULL) {
        PyDict_SetItemString(entry, key, v);
        Py_DECREF(v);
    }
    PyErr_Clear();
}

/* GPU run on copies of the buffers, then the CPU run, then compare */
static int
shadow_differential(shadow_pair *pr, char **bufs, const int64_t *sizes,
                    int64_t start, int64_t end)
{
    nvrtc_handle *g = pr->gpu;
    int64_t nbytes[STAX_NVRTC_MAX_BUFS];
    char *copy[STAX_NVRTC_MAX_BUFS] = {NULL};
    int rc, gpu_rc = -1;
    double err = 0;
    stax_kernel_fn fn = shadow_inner->kernel_fn
        ? shadow_inner->kernel_fn(shadow_inner, pr->cpu) : NULL;

    rc = handle_extents(g, sizes, start, end, nbytes);
    if (rc == 0) {
        gpu_rc = 0;
        for (int i = 0; i < g->nbufs && gpu_rc == 0; i++) {
            copy[i] = malloc(nbytes[i] ? (size_t)nbytes[i] : 1);
            if (copy[i] == NULL) {
                gpu_rc = -1;
            }
            else if (nbytes[i]) {
                memcpy(copy[i], bufs[i], (size_t)nbytes[i]);
            }
        }
        if (gpu_rc == 0) {
            gpu_rc = launch_sized(g, copy, nbytes, sizes, start, end);
        }
        if (gpu_rc < 0) {
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            entry_note(pr->entry, "gpu_error",
                       ev ? PyObject_Str(ev) : PyUnicode_FromString("?"));
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(tb);
        }
    }
    else if (rc < 0) {
        PyErr_Clear();
    }
    /* the CPU result, as without the shadow */
    if (fn != NULL) {
        fn(bufs, sizes, start, end);
        rc = 0;
    }
    else {
        rc = shadow_inner->launch(shadow_inner, pr->cpu, bufs, sizes, start,
                                  end);
    }
    if (rc == 0 && gpu_rc == 0) {
        PyObject *prev = PyDict_GetItemString(pr->entry, "gpu_max_err");
        for (int i = 0; i < g->nbufs; i++) {
            if (g->is_output[i] && nbytes[i] > 0) {
                double e = compare_buf(g->dtype[i], copy[i], bufs[i],
                                       nbytes[i]);
                err = e > err ? e : err;
            }
        }
        if (prev != NULL && PyFloat_Check(prev)
            && PyFloat_AS_DOUBLE(prev) > err) {
            err = PyFloat_AS_DOUBLE(prev);
        }
        entry_note(pr->entry, "gpu_max_err", PyFloat_FromDouble(err));
        prev = PyDict_GetItemString(pr->entry, "gpu_launches");
        entry_note(pr->entry, "gpu_launches", PyLong_FromLong(
            (prev ? PyLong_AsLong(prev) : 0) + 1));
    }
    for (int i = 0; i < STAX_NVRTC_MAX_BUFS; i++) {
        free(copy[i]);
    }
    return rc;
}

static int
shadow_launch(stax_backend *be, void *handle, char **bufs,
              const int64_t *sizes, int64_t start, int64_t end)
{
    (void)be;
    for (int i = 0; i < npairs; i++) {
        if (pairs[i].cpu == handle && pairs[i].gpu != NULL) {
            PyGILState_STATE st = PyGILState_Ensure();
            int rc = shadow_differential(&pairs[i], bufs, sizes, start, end);
            PyGILState_Release(st);
            return rc;
        }
    }
    return shadow_inner->launch(shadow_inner, handle, bufs, sizes, start,
                                end);
}

static void
shadow_free(stax_backend *be, void *handle)
{
    (void)be;
    shadow_inner->free(shadow_inner, handle);
}

static int
shadow_supports_op(stax_backend *be, int prim)
{
    (void)be;
    return shadow_inner->supports_op == NULL
           || shadow_inner->supports_op(shadow_inner, prim);
}

static stax_kernel_fn
shadow_kernel_fn(stax_backend *be, void *handle)
{
    (void)be;
    if (shadow_gpu) {
        return NULL;   /* the runtime then calls shadow_launch */
    }
    return shadow_inner->kernel_fn ? shadow_inner->kernel_fn(shadow_inner,
                                                             handle)
                                   : NULL;
}

static stax_backend shadow_backend = {
    .name = "llvm",
    .compile_kernel = shadow_compile_kernel,
    .launch = shadow_launch,
    .free = shadow_free,
    .supports_op = shadow_supports_op,
    .kernel_fn = shadow_kernel_fn,
};

/* Without LLVM (a GPU machine lacking llvm-19): the NVRTC back end itself
 * serves lower's programs under the name "llvm", so tp.compile runs on the
 * GPU (one launch per kernel, host buffers copied in and out). */
static void *
gpu_program_compile(stax_backend *be, const stax_kernel *k,
                    PyObject **source)
{
    void *h = nvrtc_compile_kernel(be, k, source);
    if (h != NULL) {
        shadow_record(k);
        if (shadow_last != NULL) {
            entry_note(shadow_last, "mode", PyUnicode_FromString("gpu"));
        }
    }
    return h;
}

static stax_backend gpu_program_backend = {
    .name = "llvm",
    .compile_kernel = gpu_program_compile,
    .launch = nvrtc_launch,
    .free = nvrtc_free,
    .supports_op = nvrtc_supports_op,
    .kernel_fn = NULL,
};

static PyObject *
nvrtc_py_shadow(PyObject *self, PyObject *args)
{
    int on = 1, gpu = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "|pp:nvrtc_shadow", &on, &gpu)) {
        return NULL;
    }
    if (on && gpu && stax_nvrtc_cuda_load() < 0) {
        return NULL;
    }
    shadow_gpu = on && gpu;
    if (on) {
        stax_backend *cur = stax_lower_get_backend("llvm");
        if ((cur == NULL || cur == &gpu_program_backend) && gpu) {
            if (cur == NULL
                && stax_lower_register_backend(&gpu_program_backend) < 0) {
                return NULL;
            }
            Py_XSETREF(shadow_log, PyList_New(0));
            return Py_XNewRef(shadow_log);
        }
        if (cur == NULL || cur == &gpu_program_backend) {
            PyErr_SetString(PyExc_RuntimeError, "nvrtc_shadow: no \"llvm\" "
                            "back end registered (built without LLVM)");
            return NULL;
        }
        if (cur != &shadow_backend) {
            shadow_inner = cur;
            shadow_backend.state = cur->state;
            if (stax_lower_register_backend(&shadow_backend) < 0) {
                return NULL;
            }
        }
        Py_XSETREF(shadow_log, PyList_New(0));
        return Py_XNewRef(shadow_log);
    }
    if (shadow_inner != NULL
        && stax_lower_get_backend("llvm") == &shadow_backend
        && stax_lower_register_backend(shadow_inner) < 0) {
        return NULL;
    }
    /* shadow_inner stays set: programs built meanwhile still call through */
    return shadow_log ? Py_NewRef(shadow_log) : PyList_New(0);
}

/* ------------------------------------------------------------ Python */

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

static PyMethodDef nvrtc_methods[] = {
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
    {"nvrtc_last_kernel_ms", stax_nvrtc_py_last_kernel_ms, METH_NOARGS,
     "nvrtc_last_kernel_ms() -> float or None: GPU time (CUDA events) of "
     "the last kernel launched by this back end, copies excluded."},
    {"cuda_available", stax_nvrtc_py_cuda_available, METH_NOARGS,
     "cuda_available() -> bool: a CUDA driver and a GPU are usable."},
    {"nvrtc_render_expr",
     (PyCFunction)(void (*)(void))stax_nvrtc_py_render_expr,
     METH_VARARGS | METH_KEYWORDS,
     "nvrtc_render_expr(expr, inputs, reduce=None, dims=None, keepdim=False, "
     "name='stax_kernel')\n--\n\nLower a loop-IR S-expression over inputs "
     "a b c ... (tensors, arrays or (dtype, shape) pairs), optionally "
     "reduced (sum, mean, amax, argmax, any, ...) over dims, to ONE kernel "
     "and render it as CUDA C. Returns the kernel record."},
    {"nvrtc_render_stages",
     (PyCFunction)(void (*)(void))stax_nvrtc_py_render_stages,
     METH_VARARGS | METH_KEYWORDS,
     "nvrtc_render_stages(inputs, stages, dims=-1, keepdim=False, "
     "name='stax_kernel', compile=False)\n--\n\nOne multi-stage kernel of "
     "the loop IR: stages ('reduce', op, expr) fill acc0, acc1, ...; "
     "('inner', expr) stores the full shape, ('outer', expr) the reduced "
     "shape (e.g. softmax: reduce amax, reduce sum of exp(a - acc0), inner "
     "exp(a - acc0) / acc1). Returns the kernel record (.outputs lists "
     "(shape, dtype) per output)."},
    {"nvrtc_render_graph",
     (PyCFunction)(void (*)(void))stax_nvrtc_py_render_graph,
     METH_VARARGS | METH_KEYWORDS,
     "nvrtc_render_graph(gm, example_inputs, name=None)\n--\n\nLower a "
     "GraphModule (a pointwise chain, optionally ending in one reduction) "
     "to one fused kernel of the loop IR and render it as CUDA C: a list of "
     "kernel records (.name, .source, .loop_ir, .grid, .block, ...)."},
    {"nvrtc_shadow", nvrtc_py_shadow, METH_VARARGS,
     "nvrtc_shadow(on=True, gpu=False) -> list\n--\n\nWhile on, every "
     "kernel that tp.compile's native back end (LLVM) compiles for the CPU "
     "is also rendered as CUDA C and compiled to PTX by NVRTC; the returned "
     "list "
     "collects {name, loop_ir, source, ok, error} per kernel. With gpu=True "
     "(needs a GPU) each launch also runs the CUDA kernel on copies of the "
     "buffers and records gpu_max_err (max |gpu-cpu|/(1+|cpu|)), "
     "gpu_launches or gpu_error. CPU results are unchanged. Built without "
     "LLVM, gpu=True instead makes the NVRTC back end run tp.compile's "
     "programs on the GPU (entries get mode='gpu'; it stays so)."},
    {"nvrtc_supported_prims", nvrtc_py_supported_prims, METH_NOARGS,
     "nvrtc_supported_prims() -> tuple of str: the loop-IR primitives the "
     "CUDA C renderer can render (what the NVRTC back end's supports_op "
     "accepts); kernels using any other primitive must run another way."},
    {"nvrtc_launch", (PyCFunction)(void (*)(void))stax_nvrtc_py_launch,
     METH_VARARGS | METH_KEYWORDS,
     "nvrtc_launch(kernel, inputs, arch=None)\n--\n\nCompile a kernel record "
     "for this GPU, run it on the inputs (driver API) and return the output "
     "as a NumPy array. Needs a GPU; RuntimeError otherwise."},
    {NULL, NULL, 0, NULL},
};

int
stax_nvrtc_module_init(PyObject *m)
{
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
    return stax_lower_register_backend(&stax_nvrtc_backend);
}
