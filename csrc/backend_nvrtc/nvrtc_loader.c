/* Compiler and runtime of the NVRTC back end: libnvrtc (CUDA C -> PTX /
 * CUBIN) and libcuda (driver API: module load, alloc, copy, launch), both
 * dlopen()ed on first use, never linked. Every status code becomes a Python
 * exception in one place, nvrtc_check() / cuda_check(); the NVRTC one
 * attaches the compile log. */
#include "backend_nvrtc/nvrtc_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

PyObject *stax_nvrtc_error = NULL;

/* ------------------------------------------------------------ NVRTC */

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

static struct {
    int tried;
    void *lib;
    char path[4096];
    char why[2048];            /* what was tried, when nothing loaded */
    nvrtcResult (*Version)(int *, int *);
    const char *(*GetErrorString)(nvrtcResult);
    nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *,
                                 int, const char *const *,
                                 const char *const *);
    nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetPTX)(nvrtcProgram, char *);
    nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *);  /* optional */
    nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);        /* optional */
    nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
    nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
    nvrtcResult (*DestroyProgram)(nvrtcProgram *);
} nv;

static void
why_add(char *why, size_t cap, const char *what)
{
    size_t n = strlen(why), w = strlen(what);
    if (n && n + 2 < cap) {
        memcpy(why + n, "; ", 2);
        n += 2;
    }
    if (n + w >= cap) {
        w = cap - n - 1;
    }
    memcpy(why + n, what, w);
    why[n + w] = '\0';
}

static void *
try_open(const char *path, char *why, size_t cap)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        why_add(why, cap, e ? e : path);
    }
    return h;
}

/* The pip wheels put libnvrtc under <site-packages>/nvidia/...: ask Python
 * for sys.path and try each entry. Returns a handle or NULL. */
static void *
try_pip_wheels(char *out_path, size_t cap)
{
    static const char *const rel[] = {
        "nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
        "nvidia/cuda_nvrtc/lib/libnvrtc.so.13",
        "nvidia/cu13/lib/libnvrtc.so.13",
        "nvidia/cuda_nvrtc/lib/libnvrtc.so.11.2",
        NULL,
    };
    PyObject *path = PySys_GetObject("path");   /* borrowed */
    if (path == NULL || !PyList_Check(path)) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(path); i++) {
        PyObject *e = PyList_GET_ITEM(path, i);
        const char *dir = PyUnicode_Check(e) ? PyUnicode_AsUTF8(e) : NULL;
        if (dir == NULL) {
            PyErr_Clear();
            continue;
        }
        for (int j = 0; rel[j] != NULL; j++) {
            char full[4096];
            snprintf(full, sizeof(full), "%s/%s", *dir ? dir : ".", rel[j]);
            FILE *f = fopen(full, "rb");
            if (f == NULL) {
                continue;
            }
            fclose(f);
            void *h = try_open(full, nv.why, sizeof(nv.why));
            if (h != NULL) {
                snprintf(out_path, cap, "%s", full);
                return h;
            }
        }
    }
    return NULL;
}

static void *
nvrtc_open(void)
{
    static const char *const names[] = {
        "/usr/local/cuda/lib64/libnvrtc.so",
        "/usr/local/cuda/lib64/libnvrtc.so.13",
        "/usr/local/cuda/lib64/libnvrtc.so.12",
        NULL,
    };
    static const char *const plain[] = {
        "libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2",
        NULL,
    };
    void *h = NULL;
    const char *env = getenv("TENSORPLAY_NVRTC");
    if (env != NULL && *env) {
        char full[4096];
        size_t n = strlen(env);
        /* a directory: look for libnvrtc.so* inside */
        snprintf(full, sizeof(full), "%s", env);
        if (n > 0 && env[n - 1] == '/') {
            snprintf(full, sizeof(full), "%slibnvrtc.so", env);
        }
        if ((h = try_open(full, nv.why, sizeof(nv.why))) != NULL) {
            snprintf(nv.path, sizeof(nv.path), "%s", full);
            return h;
        }
    }
    for (int i = 0; names[i] != NULL; i++) {
        if ((h = try_open(names[i], nv.why, sizeof(nv.why))) != NULL) {
            snprintf(nv.path, sizeof(nv.path), "%s", names[i]);
            return h;
        }
    }
    if ((h = try_pip_wheels(nv.path, sizeof(nv.path))) != NULL) {
        return h;
    }
    for (int i = 0; plain[i] != NULL; i++) {
        if ((h = try_open(plain[i], nv.why, sizeof(nv.why))) != NULL) {
            snprintf(nv.path, sizeof(nv.path), "%s", plain[i]);
            return h;
        }
    }
    return NULL;
}

#define NV_SYM(field, sym, required)                                     \
    do {                                                                 \
        *(void **)&nv.field = dlsym(nv.lib, sym);                        \
        if (nv.field == NULL && (required)) {                            \
            why_add(nv.why, sizeof(nv.why), "missing symbol " sym);      \
            goto fail;                                                   \
        }                                                                \
    } while (0)

int
stax_nvrtc_load(void)
{
    if (!nv.tried) {
        nv.tried = 1;
        nv.lib = nvrtc_open();
        if (nv.lib == NULL) {
            goto fail;
        }
        NV_SYM(Version, "nvrtcVersion", 1);
        NV_SYM(GetErrorString, "nvrtcGetErrorString", 1);
        NV_SYM(CreateProgram, "nvrtcCreateProgram", 1);
        NV_SYM(CompileProgram, "nvrtcCompileProgram", 1);
        NV_SYM(GetPTXSize, "nvrtcGetPTXSize", 1);
        NV_SYM(GetPTX, "nvrtcGetPTX", 1);
        NV_SYM(GetCUBINSize, "nvrtcGetCUBINSize", 0);
        NV_SYM(GetCUBIN, "nvrtcGetCUBIN", 0);
        NV_SYM(GetProgramLogSize, "nvrtcGetProgramLogSize", 1);
        NV_SYM(GetProgramLog, "nvrtcGetProgramLog", 1);
        NV_SYM(DestroyProgram, "nvrtcDestroyProgram", 1);
        return 0;
    fail:
        if (nv.lib != NULL) {
            dlclose(nv.lib);
            nv.lib = NULL;
        }
        nv.path[0] = '\0';
    }
    if (nv.lib != NULL) {
        return 0;
    }
    PyErr_Format(stax_nvrtc_error,
                 "libnvrtc not found (tried $TENSORPLAY_NVRTC, "
                 "/usr/local/cuda/lib64, the nvidia-cuda-nvrtc-cu12 pip wheel "
                 "under sys.path, then the loader's path): %s. Install it "
                 "with `pip install nvidia-cuda-nvrtc-cu12` or set "
                 "TENSORPLAY_NVRTC to the library's path", nv.why);
    return -1;
}

/* ------------------------------------------------------------ compile worker
 *
 * One background thread compiles CUDA C to CUBIN off the caller's path; it
 * serves two clients:
 *
 * - The warm-up. A process's first NVRTC compile pays for NVRTC's own start
 *   (loading its builtins library, first use of its code): on the H200
 *   machine the first Example 1.1 kernel of a process compiled in 38-45 ms,
 *   the same kernel after one small compile in 20-31 ms. So when CUDA first
 *   comes up (the first CUDA tensor, before a compiled function's first
 *   call in any real script) the worker compiles one small kernel made of
 *   the rendered kernels' helpers (stax_nvrtc_warm_source), first in its
 *   queue. TENSORPLAY_NVRTC_WARMUP=0/false/off/no turns it off.
 * - Tiered compilation (backend_nvrtc_init.c): a kernel's first version is
 *   compiled quickly on the caller's thread and its final one here
 *   (stax_nvrtc_job_submit), swapped in at a later launch.
 *
 * The worker touches no Python object and nothing another compile shares
 * (NVRTC programs are independent); jobs are plain C memory under q.mu.
 * Interpreter exit stops it and joins it after the compile in progress
 * (Py_AtExit), so that libnvrtc's thread-local state is torn down before
 * the process's; a fork waits until no compile is in progress
 * (pthread_atfork), and in the child, which has no worker, every job
 * counts as failed. */
enum { JOB_QUEUED, JOB_RUNNING, JOB_OK, JOB_FAILED };

#define JOB_MAX_OPTS 16

struct stax_nvrtc_job {
    struct stax_nvrtc_job *next;   /* the queue's order */
    int refs;                      /* the queue's and the owner's */
    int state;
    int warm;                      /* the warm-up: reports into warm */
    char *src;
    char name[64];
    char archopt[64];
    int nopt;
    char *opts[JOB_MAX_OPTS];
    char *out;                     /* CUBIN, malloc'ed */
    size_t nout;
    int status;                    /* the failing nvrtcResult */
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;             /* new work, stop, or a job finished */
    int started;                   /* under the GIL: 0 not yet, -1 could
                                      not start, 1 running, 2 joined */
    pthread_t th;
    pid_t pid;                     /* a forked child has no worker */
    int stop, busy;
    int forking;                   /* a fork waits: start no new job */
    struct stax_nvrtc_job *head, *tail;
} q = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* what the warm-up reports, under q.mu */
static struct {
    int started;                   /* under the GIL: 0 not yet, -1 tried
                                      and not started, 1 queued */
    char arch[32];
    int done;
    double ms;                     /* its compile's wall time */
    int status;                    /* its nvrtcResult */
} warm;

double
stax_nvrtc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void
job_free(struct stax_nvrtc_job *j)
{
    for (int i = 0; i < j->nopt; i++) {
        free(j->opts[i]);
    }
    free(j->src);
    free(j->out);
    free(j);
}

/* one reference less, under q.mu */
static void
job_unref_locked(struct stax_nvrtc_job *j)
{
    if (--j->refs == 0) {
        job_free(j);
    }
}

static void
job_run(struct stax_nvrtc_job *j)
{
    nvrtcProgram prog = NULL;
    const char *opts[JOB_MAX_OPTS + 2];
    double t0 = stax_nvrtc_now_ms();
    int st, n = 0;
    size_t nout = 0;
    char *out = NULL;
    opts[n++] = j->archopt;
    opts[n++] = "--std=c++17";
    for (int i = 0; i < j->nopt; i++) {
        opts[n++] = j->opts[i];
    }
    st = nv.CreateProgram(&prog, j->src, j->name, 0, NULL, NULL);
    if (st == 0) {
        st = nv.CompileProgram(prog, n, opts);
        if (st == 0 && !j->warm) {
            st = nv.GetCUBINSize(prog, &nout);
            if (st == 0 && nout == 0) {
                st = -1;           /* no CUBIN (-dlto makes LTO IR) */
            }
            if (st == 0 && (out = malloc(nout)) == NULL) {
                st = -1;
            }
            if (st == 0) {
                st = nv.GetCUBIN(prog, out);
            }
        }
        nv.DestroyProgram(&prog);
    }
    pthread_mutex_lock(&q.mu);
    if (j->warm) {
        warm.status = st;
        warm.ms = stax_nvrtc_now_ms() - t0;
        warm.done = 1;
    }
    if (st == 0) {
        j->out = out;
        j->nout = nout;
        out = NULL;
    }
    j->status = st;
    j->state = st == 0 ? JOB_OK : JOB_FAILED;
    q.busy = 0;
    job_unref_locked(j);           /* the queue's */
    pthread_cond_broadcast(&q.cv);
    pthread_mutex_unlock(&q.mu);
    free(out);
}

static void *
worker_main(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&q.mu);
    for (;;) {
        struct stax_nvrtc_job *j;
        while (!q.stop && (q.head == NULL || q.forking)) {
            pthread_cond_wait(&q.cv, &q.mu);
        }
        if (q.stop) {
            break;
        }
        j = q.head;
        q.head = j->next;
        if (q.head == NULL) {
            q.tail = NULL;
        }
        j->next = NULL;
        j->state = JOB_RUNNING;
        q.busy = 1;
        pthread_mutex_unlock(&q.mu);
        job_run(j);
        pthread_mutex_lock(&q.mu);
    }
    pthread_mutex_unlock(&q.mu);
    return NULL;
}

/* a fork waits until no compile is in progress and holds q.mu across it:
 * a child forked while NVRTC held its locks in the worker would hang in
 * its first compile. q.forking keeps the worker from starting the next
 * job meanwhile (without it os.fork, GIL held, waited for the whole
 * queue: the worker retakes q.mu first) */
static void
fork_prepare(void)
{
    pthread_mutex_lock(&q.mu);
    q.forking++;
    while (q.busy && q.pid == getpid()) {
        pthread_cond_wait(&q.cv, &q.mu);
    }
}

static void
fork_parent(void)
{
    q.forking--;
    if (q.pid == getpid()) {
        /* the worker's process: in a forked child q.cv may count waiters
         * that live only in its parent, and a broadcast waits for them */
        pthread_cond_broadcast(&q.cv);
    }
    pthread_mutex_unlock(&q.mu);
}

static void
fork_child(void)
{
    /* no worker here (q.pid says so): queued jobs stay queued, and
     * stax_nvrtc_job_poll calls them failed */
    q.forking = 0;
    pthread_cond_init(&q.cv, NULL);    /* the parent's waiters are not here */
    pthread_mutex_unlock(&q.mu);
}

/* interpreter exit (only daemon threads left, none with the GIL): queued
 * jobs are never compiled (their memory goes with the process), the
 * compile in progress finishes, the worker is joined */
static void
worker_join(void)
{
    if (q.started != 1 || q.pid != getpid()) {
        return;
    }
    pthread_mutex_lock(&q.mu);
    q.stop = 1;
    pthread_cond_broadcast(&q.cv);
    pthread_mutex_unlock(&q.mu);
    pthread_join(q.th, NULL);
    pthread_mutex_lock(&q.mu);     /* a daemon thread may still read it */
    q.started = 2;
    pthread_mutex_unlock(&q.mu);
}

/* under the GIL: the worker running (0), or -1 with no exception */
static int
worker_start(void)
{
    static int hooks;
    pthread_attr_t attr;
    sigset_t all, old;
    int rc;
    if (q.started != 0) {
        return q.started == 1 && q.pid == getpid() ? 0 : -1;
    }
    q.started = -1;            /* tried: never twice */
    q.pid = getpid();
    if (!hooks) {
        if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0
            || Py_AtExit(worker_join) != 0) {
            return -1;
        }
        hooks = 1;
    }
    /* NVRTC's compiler recurses deeply: a main thread's stack, not the
     * 2 MiB a thread gets by default; signals stay with Python's threads */
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)16 << 20);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&q.th, &attr, worker_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        return -1;
    }
    q.started = 1;
    return 0;
}

/* under the GIL: a new job (one reference for the queue, one for the
 * caller) at the queue's tail, or the warm-up (the queue's reference only:
 * it reports into warm) at its head; NULL with no exception when it could
 * not be made or queued */
static struct stax_nvrtc_job *
job_queue(const char *src, const char *name, const char *arch,
          const char *const *opts, int nopt, int warm_job)
{
    struct stax_nvrtc_job *j;
    if (nopt > JOB_MAX_OPTS || stax_nvrtc_load() < 0 || nv.GetCUBIN == NULL
        || worker_start() < 0) {
        PyErr_Clear();
        return NULL;
    }
    if ((j = calloc(1, sizeof(*j))) == NULL || (j->src = strdup(src)) == NULL) {
        free(j);
        return NULL;
    }
    snprintf(j->name, sizeof(j->name), "%s", name);
    snprintf(j->archopt, sizeof(j->archopt), "--gpu-architecture=%s", arch);
    for (int i = 0; i < nopt; i++) {
        if ((j->opts[i] = strdup(opts[i])) == NULL) {
            job_free(j);
            return NULL;
        }
        j->nopt = i + 1;
    }
    j->warm = warm_job;
    j->refs = warm_job ? 1 : 2;    /* the warm-up reports into warm */
    pthread_mutex_lock(&q.mu);
    if (warm_job) {
        j->next = q.head;
        q.head = j;
        if (q.tail == NULL) {
            q.tail = j;
        }
    }
    else {
        if (q.tail != NULL) {
            q.tail->next = j;
        }
        else {
            q.head = j;
        }
        q.tail = j;
    }
    pthread_cond_broadcast(&q.cv);
    pthread_mutex_unlock(&q.mu);
    return j;
}

stax_nvrtc_job *
stax_nvrtc_job_submit(const char *src, const char *name, const char *arch,
                      const char *const *opts, int nopt)
{
    return job_queue(src, name, arch, opts, nopt, 0);
}

int
stax_nvrtc_job_poll(stax_nvrtc_job *j, char **out, size_t *n, int *status)
{
    int rc;
    pthread_mutex_lock(&q.mu);
    if (q.pid != getpid()) {
        rc = -1;               /* a forked child: no worker */
        *status = -1;
    }
    else if (j->state == JOB_OK) {
        *out = j->out;
        *n = j->nout;
        j->out = NULL;
        rc = 1;
    }
    else if (j->state == JOB_FAILED) {
        *status = j->status;
        rc = -1;
    }
    else {
        rc = 0;
    }
    pthread_mutex_unlock(&q.mu);
    return rc;
}

void
stax_nvrtc_job_wait(stax_nvrtc_job *j)
{
    pthread_mutex_lock(&q.mu);
    while (q.pid == getpid() && q.started == 1 && !q.stop
           && (j->state == JOB_QUEUED || j->state == JOB_RUNNING)) {
        pthread_cond_wait(&q.cv, &q.mu);
    }
    pthread_mutex_unlock(&q.mu);
}

void
stax_nvrtc_jobs_wait_all(void)
{
    pthread_mutex_lock(&q.mu);
    while (q.pid == getpid() && q.started == 1 && !q.stop
           && (q.head != NULL || q.busy)) {
        pthread_cond_wait(&q.cv, &q.mu);
    }
    pthread_mutex_unlock(&q.mu);
}

void
stax_nvrtc_job_release(stax_nvrtc_job *j)
{
    if (j == NULL) {
        return;
    }
    int drop = 1;
    pthread_mutex_lock(&q.mu);
    if (j->state == JOB_QUEUED && q.pid == getpid()) {
        /* no one wants it any more: out of the queue, never compiled */
        struct stax_nvrtc_job **p = &q.head, *prev = NULL;
        while (*p != NULL && *p != j) {
            prev = *p;
            p = &(*p)->next;
        }
        if (*p == j) {
            *p = j->next;
            if (q.tail == j) {
                q.tail = prev;
            }
            j->state = JOB_FAILED;
            drop = 2;              /* the queue's too */
        }
    }
    j->refs -= drop;
    if (j->refs == 0) {
        job_free(j);
    }
    pthread_mutex_unlock(&q.mu);
}

static int
warm_disabled(void)
{
    const char *e = getenv("TENSORPLAY_NVRTC_WARMUP");
    return e != NULL && (strcmp(e, "0") == 0 || strcasecmp(e, "false") == 0
                         || strcasecmp(e, "off") == 0
                         || strcasecmp(e, "no") == 0);
}

/* queue the warm-up for arch (NULL: the device's); 0, or -1 with no
 * exception when it did not start */
static int
warm_start_for(const char *arch)
{
    PyObject *et, *ev, *tb;
    const char *src;
    struct stax_nvrtc_job *j = NULL;
    if (warm.started || warm_disabled()) {
        return warm.started > 0 ? 0 : -1;
    }
    warm.started = -1;         /* tried: never twice */
    PyErr_Fetch(&et, &ev, &tb);
    if (arch != NULL) {
        snprintf(warm.arch, sizeof(warm.arch), "%s", arch);
    }
    if (stax_nvrtc_load() == 0
        && (arch != NULL || stax_cuda_arch(warm.arch, sizeof(warm.arch)) == 0)
        && (src = stax_nvrtc_warm_source()) != NULL) {
        j = job_queue(src, "stax_warm.cu", warm.arch, NULL, 0, 1);
    }
    PyErr_Clear();             /* the first real compile says what failed */
    PyErr_Restore(et, ev, tb);
    if (j == NULL) {
        return -1;
    }
    warm.started = 1;
    return 0;
}

void
stax_nvrtc_warm_start(void)
{
    (void)warm_start_for(NULL);
}

PyObject *
stax_nvrtc_py_warmup_info(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"wait", "start_arch", NULL};
    int wait = 0;
    const char *start_arch = NULL;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|pz:_nvrtc_warmup", kwlist,
                                     &wait, &start_arch)) {
        return NULL;
    }
    if (start_arch != NULL && strncmp(start_arch, "sm_", 3) != 0) {
        PyErr_Format(PyExc_ValueError, "_nvrtc_warmup: start_arch must be "
                     "'sm_XY', got '%s'", start_arch);
        return NULL;
    }
    if (start_arch != NULL && !warm.started) {
        (void)warm_start_for(start_arch);
    }
    {
        int done, status, started = warm.started;   /* the GIL's: read with it */
        double ms;
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&q.mu);
        while (wait && started == 1 && !warm.done && q.pid == getpid()
               && q.started == 1 && !q.stop) {
            pthread_cond_wait(&q.cv, &q.mu);
        }
        done = warm.done;
        status = warm.status;
        ms = warm.ms;
        pthread_mutex_unlock(&q.mu);
        Py_END_ALLOW_THREADS
        return Py_BuildValue("{sOsOsdsiss}", "started",
                             started > 0 ? Py_True : Py_False, "done",
                             done ? Py_True : Py_False, "ms",
                             done ? ms : -1.0, "status", done ? status : 0,
                             "arch", warm.arch);
    }
}

static PyObject *
program_log(nvrtcProgram prog)
{
    size_t n = 0;
    char *buf = NULL;
    PyObject *res = NULL;
    if (prog == NULL || nv.GetProgramLogSize(prog, &n) != 0 || n == 0) {
        return PyUnicode_FromString("");
    }
    buf = PyMem_Malloc(n + 1);
    if (buf == NULL) {
        return PyErr_NoMemory();
    }
    buf[0] = '\0';
    if (nv.GetProgramLog(prog, buf) == 0) {
        buf[n] = '\0';
        res = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
    }
    else {
        res = PyUnicode_FromString("");
    }
    PyMem_Free(buf);
    return res;
}

/* THE check: a non-zero NVRTC status becomes NVRTCError("<what>: <status>
 * \n<compile log>") with .log (str) and .status (int) attributes. */
static int
nvrtc_check(nvrtcResult r, const char *what, nvrtcProgram prog)
{
    PyObject *log = NULL, *msg = NULL, *exc = NULL;
    if (r == 0) {
        return 0;
    }
    log = program_log(prog);
    if (log == NULL) {
        return -1;
    }
    msg = PyUnicode_FromFormat("%s failed: %s (status %d)%s%U", what,
                               nv.GetErrorString(r), r,
                               PyUnicode_GET_LENGTH(log) ? "\n" : "", log);
    if (msg == NULL) {
        goto done;
    }
    exc = PyObject_CallOneArg(stax_nvrtc_error, msg);
    if (exc == NULL) {
        goto done;
    }
    PyObject *st = PyLong_FromLong(r);
    if (st == NULL || PyObject_SetAttrString(exc, "log", log) < 0
        || PyObject_SetAttrString(exc, "status", st) < 0) {
        Py_XDECREF(st);
        goto done;
    }
    Py_DECREF(st);
    PyErr_SetObject(stax_nvrtc_error, exc);
done:
    Py_XDECREF(log);
    Py_XDECREF(msg);
    Py_XDECREF(exc);
    return -1;
}

int
stax_nvrtc_option_strings(PyObject *options, const char **opts, int cap, PyObject **keep)
{
    Py_ssize_t n;
    *keep = NULL;
    if (options == NULL || options == Py_None) {
        return 0;
    }
    if (PyUnicode_Check(options)) {
        /* it would be read as its characters */
        PyErr_SetString(PyExc_TypeError, "options must be a sequence of str, not str");
        return -1;
    }
    if ((*keep = PySequence_Fast(options, "options must be a sequence of str")) == NULL) {
        return -1;
    }
    n = PySequence_Fast_GET_SIZE(*keep);
    if (n > cap) {
        PyErr_Format(PyExc_ValueError, "too many options (%d at most)", cap);
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = 0;
        if ((opts[i] = PyUnicode_AsUTF8AndSize(PySequence_Fast_GET_ITEM(*keep, i), &len))
            == NULL) {
            goto error;
        }
        if (strlen(opts[i]) != (size_t)len) {
            /* NVRTC would read it cut at the NUL */
            PyErr_SetString(PyExc_ValueError, "embedded null character in an option");
            goto error;
        }
    }
    return (int)n;
error:
    Py_CLEAR(*keep);
    return -1;
}

#define COMPILE_MAX_OPTS 64

PyObject *
stax_nvrtc_compile_source(const char *src, const char *name,
                          const char *arch, PyObject *options)
{
    const char *opts[COMPILE_MAX_OPTS - 2];
    PyObject *keep = NULL, *res;
    int n = stax_nvrtc_option_strings(options, opts, COMPILE_MAX_OPTS - 2, &keep);
    if (n < 0) {
        return NULL;
    }
    res = stax_nvrtc_compile(src, name, arch, opts, n);
    Py_XDECREF(keep);     /* the option strings lived as long as it */
    return res;
}

PyObject *
stax_nvrtc_compile(const char *src, const char *name, const char *arch,
                   const char *const *extra, int nextra)
{
    nvrtcProgram prog = NULL;
    const char *opts[COMPILE_MAX_OPTS];
    char archopt[64];
    int nopt = 0, cubin = 0;
    nvrtcResult r;
    size_t n = 0;
    char *buf = NULL;
    PyObject *res = NULL;

    if (nextra > COMPILE_MAX_OPTS - 2) {
        PyErr_Format(PyExc_ValueError, "too many options (%d at most)",
                     COMPILE_MAX_OPTS - 2);
        return NULL;
    }
    if (stax_nvrtc_load() < 0) {
        return NULL;
    }
    if (arch == NULL || *arch == '\0') {
        arch = "compute_90";
    }
    cubin = strncmp(arch, "sm_", 3) == 0;
    if (!cubin && strncmp(arch, "compute_", 8) != 0) {
        PyErr_Format(PyExc_ValueError,
                     "nvrtc_compile: arch must be 'compute_XY' (PTX) or "
                     "'sm_XY' (CUBIN), got '%s'", arch);
        return NULL;
    }
    if (cubin && nv.GetCUBIN == NULL) {
        PyErr_SetString(stax_nvrtc_error, "this libnvrtc cannot emit CUBIN "
                        "(nvrtcGetCUBIN missing); use arch='compute_XY'");
        return NULL;
    }
    snprintf(archopt, sizeof(archopt), "--gpu-architecture=%s", arch);
    opts[nopt++] = archopt;
    opts[nopt++] = "--std=c++17";
    for (int i = 0; i < nextra; i++) {
        opts[nopt++] = extra[i];
    }
    if (nvrtc_check(nv.CreateProgram(&prog, src, name, 0, NULL, NULL),
                    "nvrtcCreateProgram", NULL) < 0) {
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    r = nv.CompileProgram(prog, nopt, opts);
    Py_END_ALLOW_THREADS
    if (nvrtc_check(r, "nvrtcCompileProgram", prog) < 0) {
        goto done;
    }
    if (nvrtc_check(cubin ? nv.GetCUBINSize(prog, &n)
                          : nv.GetPTXSize(prog, &n), "nvrtcGetPTXSize",
                    prog) < 0) {
        goto done;
    }
    if (cubin && n == 0) {
        /* an option such as -dlto: LTO IR, which no module load takes */
        PyErr_SetString(stax_nvrtc_error, "NVRTC made no CUBIN (an option such as -dlto "
                        "asks for LTO IR instead)");
        goto done;
    }
    buf = PyMem_Malloc(n + 1);
    if (buf == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (nvrtc_check(cubin ? nv.GetCUBIN(prog, buf) : nv.GetPTX(prog, buf),
                    "nvrtcGetPTX", prog) < 0) {
        goto done;
    }
    if (cubin) {
        res = PyBytes_FromStringAndSize(buf, (Py_ssize_t)n);
    }
    else {
        buf[n] = '\0';
        res = PyUnicode_FromString(buf);
    }
done:
    PyMem_Free(buf);
    if (prog != NULL) {
        nv.DestroyProgram(&prog);
    }
    return res;
}

PyObject *
stax_nvrtc_py_available(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (stax_nvrtc_load() < 0) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

PyObject *
stax_nvrtc_py_version(PyObject *self, PyObject *unused)
{
    int major = 0, minor = 0;
    (void)self;
    (void)unused;
    if (stax_nvrtc_load() < 0
        || nvrtc_check(nv.Version(&major, &minor), "nvrtcVersion", NULL) < 0) {
        return NULL;
    }
    return Py_BuildValue("(ii)", major, minor);
}

PyObject *
stax_nvrtc_py_library_path(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (stax_nvrtc_load() < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return PyUnicode_FromString(nv.path);
}

PyObject *
stax_nvrtc_py_compile(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"source", "name", "arch", "options", NULL};
    const char *src = NULL, *name = "kernel.cu", *arch = "compute_90";
    PyObject *options = NULL;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|szO:nvrtc_compile",
                                     kwlist, &src, &name, &arch, &options)) {
        return NULL;
    }
    return stax_nvrtc_compile_source(src, name, arch, options);
}

/* ------------------------------------------------------------ driver API
 * The device room owns libcuda, the context, the stream and the memory;
 * this back end only loads modules and launches. */

static double last_kernel_ms = -1.0;   /* GPU time of the last launch */

int
stax_nvrtc_cuda_load(void)
{
    if (stax_cuda_init() < 0) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyErr_Format(PyExc_RuntimeError,
                     "NVRTC back end: launching needs an NVIDIA GPU and its "
                     "driver (libcuda); none usable here (%S). Rendering and "
                     "compiling to PTX work without one.", v ? v : Py_None);
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
        return -1;
    }
    return 0;
}

PyObject *
stax_nvrtc_py_last_kernel_ms(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (last_kernel_ms < 0) {
        Py_RETURN_NONE;
    }
    return PyFloat_FromDouble(last_kernel_ms);
}

double
stax_nvrtc_last_ms(void)
{
    return last_kernel_ms;
}

PyObject *
stax_nvrtc_py_cuda_available(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyBool_FromLong(stax_cuda_is_available());
}

int
stax_nvrtc_device_arch(char *out, size_t cap)
{
    return stax_nvrtc_cuda_load() < 0 ? -1 : stax_cuda_arch(out, cap);
}

/* time one launch with events when TENSORPLAY_NVRTC_TIME is set or the
 * caller asks (the host-copy path below always does) */
int64_t
stax_nvrtc_smem_optin(void *fn, int64_t want)
{
    typedef int (*attr_t)(int *, int, int);
    typedef int (*fattr_t)(void *, int, int);
    attr_t dev_attr = (attr_t)stax_cuda_symbol("cuDeviceGetAttribute");
    fattr_t fn_attr = (fattr_t)stax_cuda_symbol("cuFuncSetAttribute");
    int optin = 0;
    /* CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN (97) of device
     * 0, less 2 KiB for the kernel's static shared memory */
    if (dev_attr == NULL || dev_attr(&optin, 97, 0) != 0 || optin <= 2048) {
        optin = 48 * 1024;
    }
    if (want > optin - 2048) {
        want = optin - 2048;
    }
    if (want > 46 * 1024) {
        /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (8): past 48 KiB
         * a kernel must ask for it */
        if (fn_attr == NULL || fn_attr(fn, 8, (int)want) != 0) {
            want = 46 * 1024;
        }
    }
    return want;
}

int64_t
stax_nvrtc_max_threads(void *fn)
{
    typedef int (*fget_t)(int *, int, void *);
    fget_t fn_get = (fget_t)stax_cuda_symbol("cuFuncGetAttribute");
    int n = 0;
    /* CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK (0): what the kernel's
     * registers and launch bounds allow */
    if (fn_get == NULL || fn_get(&n, 0, fn) != 0 || n < 32) {
        return 1024;
    }
    return n;
}

int
stax_nvrtc_launch_fn(void *fn, void **params, const int64_t grid[3],
                     const int64_t block[3], int64_t smem, int timed)
{
    typedef int (*ev_create_t)(void **, unsigned);
    typedef int (*ev_record_t)(void *, void *);
    typedef int (*ev_sync_t)(void *);
    typedef int (*ev_elapsed_t)(float *, void *, void *);
    typedef int (*ev_destroy_t)(void *);
    static ev_create_t create;
    static ev_record_t record;
    static ev_sync_t sync;
    static ev_elapsed_t elapsed;
    static ev_destroy_t destroy;
    void *ev[2] = {NULL, NULL};
    int rc;
    if (grid[0] <= 0 || grid[1] <= 0 || grid[2] <= 0) {
        return 0;
    }
    /* the events below go on the stream: after what a recording kept */
    if (stax_cuda_record_break() < 0) {
        return -1;
    }
    if (timed && create == NULL) {
        *(void **)&create = stax_cuda_symbol("cuEventCreate");
        *(void **)&record = stax_cuda_symbol("cuEventRecord");
        *(void **)&sync = stax_cuda_symbol("cuEventSynchronize");
        *(void **)&elapsed = stax_cuda_symbol("cuEventElapsedTime");
        *(void **)&destroy = stax_cuda_symbol("cuEventDestroy_v2");
    }
    timed = timed && create && record && sync && elapsed && destroy;
    if (timed && (create(&ev[0], 0) != 0 || create(&ev[1], 0) != 0)) {
        timed = 0;
    }
    if (timed) {
        record(ev[0], stax_cuda_stream());
    }
    rc = stax_cuda_launch_ex(fn, grid, block, smem, params);
    if (timed) {
        float ms = -1.0f;
        record(ev[1], stax_cuda_stream());
        sync(ev[1]);
        if (elapsed(&ms, ev[0], ev[1]) == 0) {
            last_kernel_ms = ms;
        }
    }
    for (int i = 0; i < 2; i++) {
        if (ev[i] != NULL) {
            destroy(ev[i]);
        }
    }
    return rc;
}

int
stax_nvrtc_launch_image(PyObject *image, const char *name, int nbufs,
                        char **host, const int64_t *nbytes,
                        const int *is_output, const int64_t *sizes,
                        int nsizes, int64_t start, int64_t end,
                        const int64_t grid[3], const int64_t block[3])
{
    stax_cuptr dptr[STAX_NVRTC_MAX_BUFS] = {0};
    PyObject *blocks[STAX_NVRTC_MAX_BUFS] = {NULL};
    void *params[STAX_NVRTC_MAX_BUFS + 3];
    int64_t sz[STAX_NVRTC_MAX_SIZES] = {0};
    int64_t st = start, en = end;
    void *mod = NULL, *fn = NULL;
    int rc = -1;

    if (nbufs > STAX_NVRTC_MAX_BUFS || nsizes > STAX_NVRTC_MAX_SIZES) {
        PyErr_SetString(PyExc_ValueError, "NVRTC launch: too many buffers "
                        "or sizes");
        return -1;
    }
    if (stax_nvrtc_cuda_load() < 0) {
        return -1;
    }
    for (int i = 0; i < nsizes; i++) {
        sz[i] = sizes[i];
    }
    const void *img = PyBytes_Check(image)
        ? (const void *)PyBytes_AS_STRING(image)
        : (const void *)PyUnicode_AsUTF8(image);
    if (img == NULL || stax_cuda_module_function(img, name, &mod, &fn) < 0) {
        goto done;
    }
    for (int i = 0; i < nbufs; i++) {
        size_t n = nbytes[i] > 0 ? (size_t)nbytes[i] : 0;
        if ((blocks[i] = stax_cuda_block_new(n, &dptr[i])) == NULL
            || stax_cuda_h2d(dptr[i], host[i], n) < 0) {
            goto done;
        }
        params[i] = &dptr[i];
    }
    params[nbufs] = sz;        /* struct stax_sizes, by value */
    params[nbufs + 1] = &st;
    params[nbufs + 2] = &en;
    if (stax_nvrtc_launch_fn(fn, params, grid, block, 0, 1) < 0) {
        goto done;
    }
    for (int i = 0; i < nbufs; i++) {
        if (is_output[i] && nbytes[i] > 0
            && stax_cuda_d2h(host[i], dptr[i], (size_t)nbytes[i]) < 0) {
            goto done;
        }
    }
    rc = stax_cuda_synchronize();
done:
    for (int i = 0; i < nbufs; i++) {
        Py_XDECREF(blocks[i]);
    }
    stax_cuda_module_unload(mod);
    return rc;
}
