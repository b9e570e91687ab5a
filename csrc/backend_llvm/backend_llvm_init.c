/* Room init and the LLVM back end's runtime: one ORC LLJIT per process, a
 * cached host target machine for the O3 pipeline, one resource tracker per
 * kernel so that freeing a compiled program frees its code.  LLVM errors
 * become RuntimeError carrying LLVM's message. */
#include "backend_llvm/backend_llvm.h"

#ifdef STAX_HAVE_LLVM
#include "backend_llvm/llvm_internal.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
/* this thread's CPU time: on a shared machine the wall clock of a stage
 * says more about the other processes than about the stage */
static double
cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
static int timing = -1;
static double c0;
#define TMARK(label) do { if (timing) { double t_ = now_ms(), c_ = cpu_ms(); \
    fprintf(stderr, "[stax llvm] %-10s %.2f ms (cpu %.2f ms)\n", label, t_ - t0, c_ - c0); \
    t0 = t_; c0 = c_; } } while (0)

typedef struct llvm_handle {
    LLVMOrcResourceTrackerRef rt;
    stax_kernel_fn fn;
    /* kernels of the persistent cache: their entry symbol is derived from
     * the cache key, so one symbol = one kernel; a second program asking
     * for it shares the loaded code (refs) -- defining it twice in the
     * JIT's dylib would be a duplicate-symbol error */
    char *sym;
    int refs;
    PyObject *source;
    struct llvm_handle *next;
    /* linked without ORC (rt is NULL then): llvm_elf.c */
    stax_llvm_elf_image img;
} llvm_handle;

#define LOADED_BUCKETS 512
static llvm_handle *loaded[LOADED_BUCKETS];

static unsigned
sym_bucket(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++) {
        h = (h ^ (unsigned char)*s) * 16777619u;
    }
    return h % LOADED_BUCKETS;
}

/* kernels compiled by the JIT or loaded from the cache since start
 * (tensorplay._C._jit_compile_count) */
static unsigned long long jit_compiles;
/* cached kernels linked without ORC (_llvm_state()["direct_loads"]) */
static unsigned long long direct_loads;

/* the kernel already loaded under sym, with one more reference (it counts
 * as a compile, as _jit_compile_count promises); NULL when none is */
static llvm_handle *
reuse_loaded(const char *sym)
{
    for (llvm_handle *h = loaded[sym_bucket(sym)]; h != NULL; h = h->next) {
        if (strcmp(h->sym, sym) == 0) {
            h->refs++;
            jit_compiles++;
            return h;
        }
    }
    return NULL;
}

static LLVMOrcLLJITRef jit;
static LLVMTargetMachineRef tm;
/* emits the object files of cached kernels: the same settings as the
 * JIT's own code generator, so a cached kernel is the code the JIT would
 * have produced */
static LLVMTargetMachineRef otm;
static int codegen_level;
static char *host_cpu, *host_features, *host_triple;
static LLVMTargetDataRef host_layout;
static unsigned long kernel_counter;

static int
check(LLVMErrorRef e, const char *what)
{
    if (e == NULL) {
        return 0;
    }
    char *msg = LLVMGetErrorMessage(e);
    PyErr_Format(PyExc_RuntimeError, "LLVM %s failed: %s", what, msg);
    LLVMDisposeErrorMessage(msg);
    return -1;
}


/* fptrunc double -> half lowers to a call of compiler-rt/libgcc's
 * __truncdfhf2 on CPUs without AVX512-FP16. libgcc links it into this
 * extension with hidden visibility, where the process symbol generator
 * cannot see it: hand the JIT its address. */
static _Float16
stax_llvm_truncdfhf2(double d)
{
    return (_Float16)d;
}

static int
define_runtime_helpers(LLVMOrcLLJITRef j)
{
    LLVMOrcCSymbolMapPair sym = {
        LLVMOrcLLJITMangleAndIntern(j, "__truncdfhf2"),
        {(LLVMOrcJITTargetAddress)(uintptr_t)&stax_llvm_truncdfhf2,
         {LLVMJITSymbolGenericFlagsExported
              | LLVMJITSymbolGenericFlagsCallable, 0}},
    };
    LLVMOrcMaterializationUnitRef mu = LLVMOrcAbsoluteSymbols(&sym, 1);
    return check(LLVMOrcJITDylibDefine(LLVMOrcLLJITGetMainJITDylib(j), mu),
                 "runtime helper symbols") ? -1 : 0;
}

/* Three levels, each made on first need: a cache hit in a new process
 * needs the host's description (the cache tag) and the JIT that links the
 * object, never the code generators that compile IR -- creating those is
 * part of a warm first call's fixed cost, so they wait for a miss. */
static LLVMTargetRef host_target;

/* the native target and the host's triple, CPU and features */
static int
ensure_host(void)
{
    if (host_target != NULL) {
        return 0;
    }
    LLVMInitializeNativeTarget();
    LLVMInitializeNativeAsmPrinter();
    LLVMInitializeNativeAsmParser();
    if (host_cpu == NULL) {
        host_cpu = LLVMGetHostCPUName();
        host_features = LLVMGetHostCPUFeatures();
        host_triple = LLVMGetDefaultTargetTriple();
    }
    /* the JIT's own code generator: the IR is already O3-optimized, so a
     * lighter instruction-selection / register-allocation level keeps the
     * compile time of a first call low */
    codegen_level = getenv("STAX_LLVM_CODEGEN_O2") ? LLVMCodeGenLevelDefault : LLVMCodeGenLevelLess;
    LLVMTargetRef target;
    char *err = NULL;
    if (LLVMGetTargetFromTriple(host_triple, &target, &err)) {
        PyErr_Format(PyExc_RuntimeError, "LLVM target lookup failed: %s", err);
        LLVMDisposeMessage(err);
        return -1;
    }
    host_target = target;
    return 0;
}

/* the JIT (links compiled and cached object code) */
static int
ensure_jit(void)
{
    if (jit != NULL) {
        return 0;
    }
    if (timing < 0) {
        timing = getenv("STAX_LLVM_TIMING") != NULL;
    }
    double t0 = timing ? now_ms() : 0;
    c0 = timing ? cpu_ms() : 0;
    if (ensure_host() < 0) {
        return -1;
    }
    TMARK("host");
    LLVMTargetMachineRef jtm = LLVMCreateTargetMachine(
        host_target, host_triple, host_cpu, host_features, (LLVMCodeGenOptLevel)codegen_level,
        LLVMRelocDefault, LLVMCodeModelJITDefault);
    LLVMOrcJITTargetMachineBuilderRef jtmb =
        LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(jtm);
    LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(jb, jtmb);
    LLVMOrcLLJITRef j = NULL;
    if (check(LLVMOrcCreateLLJIT(&j, jb), "LLJIT creation")) {
        return -1;
    }
    LLVMOrcDefinitionGeneratorRef gen = NULL;
    if (check(LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
                  &gen, LLVMOrcLLJITGetGlobalPrefix(j), NULL, NULL),
              "process symbol generator")) {
        LLVMOrcDisposeLLJIT(j);
        return -1;
    }
    LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(j), gen);
    if (define_runtime_helpers(j) < 0) {
        LLVMOrcDisposeLLJIT(j);
        return -1;
    }
    jit = j;
    TMARK("jit");
    return 0;
}

/* the JIT and the code generators of a compile: the O3 pipeline's target
 * machine (tm, host_layout) and the object emitter of cached kernels (otm:
 * the JIT's own settings, so a cached kernel is the code the JIT would
 * have produced) */
static int
ensure_codegen(void)
{
    if (ensure_jit() < 0) {
        return -1;
    }
    if (otm != NULL) {
        return 0;
    }
    tm = LLVMCreateTargetMachine(host_target, host_triple, host_cpu, host_features,
                                 LLVMCodeGenLevelAggressive, LLVMRelocDefault,
                                 LLVMCodeModelJITDefault);
    host_layout = LLVMCreateTargetDataLayout(tm);
    otm = LLVMCreateTargetMachine(host_target, host_triple, host_cpu, host_features,
                                  (LLVMCodeGenOptLevel)codegen_level, LLVMRelocDefault,
                                  LLVMCodeModelJITDefault);
    if (tm == NULL || host_layout == NULL || otm == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "LLVM target machine creation failed");
        return -1;
    }
    return 0;
}

static PyObject *
jit_compile_count(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    return PyLong_FromUnsignedLongLong(jit_compiles);
}

/* which parts of LLVM this process has set up: a warm cache's hits need
 * the host description and the JIT, a compile also the code generators */
static PyObject *
llvm_state(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    return Py_BuildValue("{sOsOsOsK}", "host", host_target ? Py_True : Py_False,
                         "jit", jit ? Py_True : Py_False,
                         "codegen", otm ? Py_True : Py_False,
                         "direct_loads", direct_loads);
}

static PyMethodDef llvm_methods[] = {
    {"_llvm_state", llvm_state, METH_NOARGS,
     "dict host/jit/codegen: whether this process has set up LLVM's native target, "
     "the JIT, and the code generators that compile IR (only a compile needs them); "
     "direct_loads: cached kernels linked without the JIT"},
    {"_jit_compile_count", jit_compile_count, METH_NOARGS,
     "number of kernels the LLVM JIT has compiled or loaded (from the persistent "
     "compile cache) for programs of this process; the compiles alone are "
     "_cache_counters()[2]"},
    {NULL, NULL, 0, NULL},
};

/* the kernel's LLVM module after the O3 pipeline, in its own context
 * (*tscp); NULL + exception.  *source (if not NULL) receives the IR. */
static LLVMModuleRef
optimized_module(const stax_kernel *k, const char *sym, LLVMOrcThreadSafeContextRef *tscp,
                 PyObject **source)
{
    double t0 = timing ? now_ms() : 0;
    c0 = timing ? cpu_ms() : 0;
    LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
    LLVMContextRef cx = LLVMOrcThreadSafeContextGetContext(tsc);
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext(sym, cx);
    LLVMSetTarget(mod, host_triple);
    LLVMSetModuleDataLayout(mod, host_layout);
    const char *cerr = NULL;
    char *msg = NULL;
    if (stax_llvm_build_module(cx, mod, k, sym, host_cpu, host_features, &cerr) < 0) {
        PyErr_Format(PyExc_RuntimeError, "LLVM code generation of %s: %s", k->name, cerr);
        goto error;
    }
    if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
        PyErr_Format(PyExc_RuntimeError, "LLVM verifier rejected %s: %s", k->name, msg);
        LLVMDisposeMessage(msg);
        goto error;
    }
    LLVMDisposeMessage(msg);
    TMARK("build");
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(po, 1);
    LLVMPassBuilderOptionsSetSLPVectorization(po, 1);
    LLVMPassBuilderOptionsSetLoopUnrolling(po, 1);
    LLVMErrorRef e = LLVMRunPasses(mod, "default<O3>", tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (check(e, "O3 pipeline")) {
        goto error;
    }
    TMARK("O3");
    if (source != NULL) {
        char *ir = LLVMPrintModuleToString(mod);
        Py_XSETREF(*source, PyUnicode_FromString(ir));
        LLVMDisposeMessage(ir);
        if (*source == NULL) {
            goto error;
        }
    }
    TMARK("print");
    *tscp = tsc;
    return mod;
error:
    if (source != NULL) {
        Py_CLEAR(*source);
    }
    LLVMDisposeModule(mod);
    LLVMOrcDisposeThreadSafeContext(tsc);
    return NULL;
}

static void
drop_tracker(LLVMOrcResourceTrackerRef rt)
{
    LLVMErrorRef e = LLVMOrcResourceTrackerRemove(rt);
    if (e) {
        LLVMConsumeError(e);
    }
    LLVMOrcReleaseResourceTracker(rt);
}

static void *
llvm_compile_kernel(stax_backend *be, const stax_kernel *k, PyObject **source)
{
    (void)be;
    if (timing < 0) {
        timing = getenv("STAX_LLVM_TIMING") != NULL;
    }
    double t0 = timing ? now_ms() : 0;
    c0 = timing ? cpu_ms() : 0;
    if (ensure_codegen() < 0) {
        return NULL;
    }
    TMARK("jit init");
    llvm_handle *h = NULL;
    char sym[128];
    snprintf(sym, sizeof(sym), "%s_%lu", k->name, ++kernel_counter);
    LLVMOrcThreadSafeContextRef tsc = NULL;
    /* no IR text: llvm_kernel_source prints it when asked */
    (void)source;
    LLVMModuleRef mod = optimized_module(k, sym, &tsc, NULL);
    if (mod == NULL) {
        return NULL;
    }
    t0 = timing ? now_ms() : 0;
    c0 = timing ? cpu_ms() : 0;
    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    h->refs = 1;
    /* its name, for the IR printed on demand (not in the loaded table:
     * that holds cached kernels only, looked up by symbol) */
    h->sym = strdup(sym);
    if (h->sym == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(jit);
    h->rt = LLVMOrcJITDylibCreateResourceTracker(jd);
    LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(mod, tsc);
    mod = NULL;   /* owned by tsm */
    LLVMOrcDisposeThreadSafeContext(tsc);
    tsc = NULL;
    if (check(LLVMOrcLLJITAddLLVMIRModuleWithRT(jit, h->rt, tsm), "adding the module")) {
        LLVMOrcDisposeThreadSafeModule(tsm);
        goto error;
    }
    LLVMOrcExecutorAddress addr = 0;
    if (check(LLVMOrcLLJITLookup(jit, &addr, sym), "symbol lookup")) {
        goto error;
    }
    h->fn = (stax_kernel_fn)(uintptr_t)addr;
    jit_compiles++;
    TMARK("codegen");
    return h;
error:
    if (source != NULL) {
        Py_CLEAR(*source);
    }
    if (mod != NULL) {
        LLVMDisposeModule(mod);
    }
    if (tsc != NULL) {
        LLVMOrcDisposeThreadSafeContext(tsc);
    }
    if (h != NULL) {
        if (h->rt != NULL) {
            drop_tracker(h->rt);
        }
        free(h->sym);
        free(h);
    }
    return NULL;
}

/* link object code (buf: owned, consumed) into the JIT under a fresh
 * resource tracker and register it as `sym`; NULL + exception */
static llvm_handle *
add_object(const char *sym, LLVMMemoryBufferRef buf, PyObject *source)
{
    llvm_handle *h = calloc(1, sizeof(*h));
    char *name = strdup(sym);
    if (h == NULL || name == NULL) {
        free(h);
        free(name);
        LLVMDisposeMemoryBuffer(buf);
        PyErr_NoMemory();
        return NULL;
    }
    h->sym = name;
    h->refs = 1;
    h->rt = LLVMOrcJITDylibCreateResourceTracker(LLVMOrcLLJITGetMainJITDylib(jit));
    if (check(LLVMOrcLLJITAddObjectFileWithRT(jit, h->rt, buf), "adding the object file")) {
        goto error;
    }
    LLVMOrcExecutorAddress addr = 0;
    if (check(LLVMOrcLLJITLookup(jit, &addr, sym), "symbol lookup")) {
        goto error;
    }
    h->fn = (stax_kernel_fn)(uintptr_t)addr;
    h->source = Py_XNewRef(source);
    unsigned b = sym_bucket(sym);
    h->next = loaded[b];
    loaded[b] = h;
    jit_compiles++;
    return h;
error:
    drop_tracker(h->rt);
    free(h->sym);
    free(h);
    return NULL;
}

static void *
llvm_compile_object(stax_backend *be, const stax_kernel *k, const char *sym, PyObject **source,
                    PyObject **object)
{
    (void)be;
    if (timing < 0) {
        timing = getenv("STAX_LLVM_TIMING") != NULL;
    }
    if (ensure_codegen() < 0) {
        return NULL;
    }
    llvm_handle *h = reuse_loaded(sym);
    if (h != NULL) {
        if (source != NULL) {
            Py_XSETREF(*source, Py_XNewRef(h->source));
        }
        return h;
    }
    LLVMOrcThreadSafeContextRef tsc = NULL;
    LLVMModuleRef mod = optimized_module(k, sym, &tsc, NULL);
    if (mod == NULL) {
        return NULL;
    }
    double t0 = timing ? now_ms() : 0;
    c0 = timing ? cpu_ms() : 0;
    char *err = NULL;
    LLVMMemoryBufferRef buf = NULL;
    int bad = LLVMTargetMachineEmitToMemoryBuffer(otm, mod, LLVMObjectFile, &err, &buf);
    LLVMDisposeModule(mod);
    LLVMOrcDisposeThreadSafeContext(tsc);
    if (bad) {
        PyErr_Format(PyExc_RuntimeError, "LLVM object emission of %s failed: %s", k->name,
                     err ? err : "?");
        LLVMDisposeMessage(err);
        goto error;
    }
    TMARK("emit obj");
    *object = PyBytes_FromStringAndSize(LLVMGetBufferStart(buf), (Py_ssize_t)LLVMGetBufferSize(buf));
    if (*object == NULL) {
        LLVMDisposeMemoryBuffer(buf);
        goto error;
    }
    h = add_object(sym, buf, source ? *source : NULL);
    if (h == NULL) {
        Py_CLEAR(*object);
        goto error;
    }
    TMARK("link");
    return h;
error:
    if (source != NULL) {
        Py_CLEAR(*source);
    }
    return NULL;
}

/* an undefined symbol of a cached object: the helpers the JIT defines,
 * then the process (libc's memset / memcpy, libm) */
static void *
resolve_symbol(const char *name)
{
    if (strcmp(name, "__truncdfhf2") == 0) {
        return (void *)(uintptr_t)&stax_llvm_truncdfhf2;
    }
    return dlsym(RTLD_DEFAULT, name);
}

/* object code linked by llvm_elf.c, registered as `sym`; NULL (no
 * exception) when the loader does not take it */
static llvm_handle *
load_direct(const char *sym, const char *data, size_t n)
{
    llvm_handle *h = NULL;
    char *name = NULL;
    stax_llvm_elf_image img;
    if (getenv("STAX_LLVM_ORC_LOAD") != NULL || !stax_llvm_elf_load(data, n, sym, resolve_symbol, &img)) {
        return NULL;
    }
    h = calloc(1, sizeof(*h));
    name = strdup(sym);
    if (h == NULL || name == NULL) {
        free(h);
        free(name);
        stax_llvm_elf_unload(&img);
        return NULL;
    }
    h->img = img;
    h->sym = name;
    h->refs = 1;
    h->fn = (stax_kernel_fn)(uintptr_t)img.entry;
    unsigned b = sym_bucket(sym);
    h->next = loaded[b];
    loaded[b] = h;
    jit_compiles++;
    direct_loads++;
    return h;
}

static void *
llvm_load_object(stax_backend *be, const stax_kernel *k, const char *sym, const char *data,
                 size_t n)
{
    (void)be;
    (void)k;    /* object code is self-contained */
    llvm_handle *h = reuse_loaded(sym);
    if (h != NULL) {
        return h;
    }
    if (timing < 0) {
        timing = getenv("STAX_LLVM_TIMING") != NULL;
    }
    double t0 = timing ? now_ms() : 0;
    c0 = timing ? cpu_ms() : 0;
    /* the JIT is made only for an object the direct loader does not take */
    if ((h = load_direct(sym, data, n)) != NULL) {
        TMARK("load direct");
        return h;
    }
    if (ensure_jit() < 0) {
        return NULL;
    }
    LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(data, n, sym);
    if (buf == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    h = add_object(sym, buf, NULL);
    TMARK("load obj");
    return h;
}

static const char *
llvm_cache_tag(stax_backend *be)
{
    (void)be;
    static char tag[4096];
    if (ensure_host() < 0) {
        return NULL;
    }
    unsigned maj = 0, min = 0, pat = 0;
    LLVMGetVersion(&maj, &min, &pat);
    /* every input of the code generator that is not the loop IR */
    snprintf(tag, sizeof tag, "LLVM %u.%u.%u|%s|%s|%s|codegen %d|O3|tile %d|reloc default|jit code model",
             maj, min, pat, host_triple, host_cpu, host_features, codegen_level,
             getenv("STAX_NO_TILE") == NULL);
    return tag;
}

static int
llvm_launch(stax_backend *be, void *handle, char **bufs, const int64_t *sizes,
            int64_t start, int64_t end)
{
    (void)be;
    ((llvm_handle *)handle)->fn(bufs, sizes, start, end);
    return 0;
}

static stax_kernel_fn
llvm_kernel_fn(stax_backend *be, void *handle)
{
    (void)be;
    return ((llvm_handle *)handle)->fn;
}

static void
llvm_free(stax_backend *be, void *handle)
{
    (void)be;
    llvm_handle *h = handle;
    if (h == NULL || --h->refs > 0) {
        return;
    }
    if (h->sym != NULL) {
        for (llvm_handle **pp = &loaded[sym_bucket(h->sym)]; *pp != NULL; pp = &(*pp)->next) {
            if (*pp == h) {
                *pp = h->next;
                break;
            }
        }
    }
    if (h->rt != NULL) {
        drop_tracker(h->rt);
    }
    stax_llvm_elf_unload(&h->img);
    free(h->sym);
    Py_XDECREF(h->source);
    free(h);
}

/* the kernel's IR after O3, built and printed again from its loop IR (a
 * compile prints none): the same text a compile would have printed, under
 * the kernel's own symbol */
static PyObject *
llvm_kernel_source(stax_backend *be, void *handle, const stax_kernel *k)
{
    llvm_handle *h = handle;
    LLVMOrcThreadSafeContextRef tsc = NULL;
    PyObject *src = NULL;
    (void)be;
    if (timing < 0) {
        timing = getenv("STAX_LLVM_TIMING") != NULL;
    }
    if (ensure_codegen() < 0) {
        return NULL;
    }
    LLVMModuleRef mod = optimized_module(k, h != NULL && h->sym != NULL ? h->sym : k->name,
                                         &tsc, &src);
    if (mod == NULL) {
        return NULL;
    }
    LLVMDisposeModule(mod);
    LLVMOrcDisposeThreadSafeContext(tsc);
    return src;
}

static stax_backend llvm_backend = {
    .name = "llvm",
    .compile_kernel = llvm_compile_kernel,
    .launch = llvm_launch,
    .free = llvm_free,
    .supports_op = NULL,
    .kernel_fn = llvm_kernel_fn,
    .cache_tag = llvm_cache_tag,
    .compile_object = llvm_compile_object,
    .load_object = llvm_load_object,
    .kernel_source = llvm_kernel_source,
};

int
stax_llvm_module_init(PyObject *m)
{
    if (PyModule_AddFunctions(m, llvm_methods) < 0) {
        return -1;
    }
    return stax_lower_register_backend(&llvm_backend);
}

#else

int
stax_llvm_module_init(PyObject *m)
{
    (void)m;
    return 0;
}

#endif
