/* Public header of the lower room: loop-level IR, lowering rules, fusion,
 * scheduling, buffer plan, the compiled-program runtime and thread pool, and
 * the back-end vtable.
 *
 * LOOP-LEVEL IR (what a back end renders)
 * =======================================
 * A kernel is a loop nest over an iteration space of `nouter + ninner`
 * dimensions.  Loop variable k (0 <= k < nouter + ninner) is
 *   x<k>           for k <  nouter   (outer, "pointwise" dims), and
 *   r<k - nouter>  for k >= nouter   (inner, "reduction" dims).
 * The outermost dimension (k == 0) is the parallel one: the kernel ABI's
 * (start, end) bound it, every other loop runs 0 .. dims[k].
 *
 *   for x0 in [start, end):  for x1 ...  for x<nouter-1> ...:
 *       stage 0; stage 1; ...          (in order)
 *
 * A stage is one of
 *   STAX_STAGE_REDUCE  loop over all inner dims and fold values into
 *                      accumulators (stax_lacc), e.g. acc0 = sum(...);
 *   STAX_STAGE_INNER   loop over all inner dims and store values (they may
 *                      read the accumulators of earlier stages: softmax's
 *                      exp(x - acc0) / acc1);
 *   STAX_STAGE_OUTER   no inner loop: store values (typically out[x0] =
 *                      acc0).  With ninner == 0 a pointwise kernel is just
 *                      one OUTER stage.
 * Accumulators are reset at the start of each REDUCE stage that fills them
 * (i.e. once per outer point).
 *
 * ATTENTION KERNELS (STAX_STAGE_ATTENTION, lower_attention.c)
 *   out[b, i, e] = sum_j softmax_j(score(b, i, j)) * v(b, j, e)
 * with the L x S scores never in memory: a kernel whose first stage is
 * STAX_STAGE_ATTENTION has nouter == 2, ninner == 3 and the loop variables
 *   x0 = b (flattened batch dims), x1 = i (query, < L),
 *   r0 = j (key, < S), r1 = c (< E, the q/k head dim), r2 = e (< Ev);
 * its accumulators (stage.first .. +3) say what is computed, not how:
 *   acc0 = sum[acc dtype](q(b,i,c) * k(b,j,c))      the dot product
 *   acc1 = max[acc dtype](score(b,i,j))             the online softmax's
 *          running maximum of the score (an expression reading acc0); its
 *          `index`, when not NULL, is a causal bound: keys j > index(i)
 *          are known masked (-inf) and may be skipped whole
 *   acc2 = sum[acc dtype](v(b,j,e))                 weighted by the softmax
 * and the following OUTER stage stores out[...] = acc2 / the softmax's sum
 * (the store's value is written acc2 / acc1 in the IR).  The back end owns
 * the schedule: the ABI's [start, end) run over query blocks of
 * stage.tile_q rows, block x = b * ceil(L / tile_q) + i / tile_q; each block
 * makes one pass over K and V in tiles of stage.tile_k keys, keeping for
 * every row the monoid state (m, l, acc[Ev]) of the online softmax:
 *   (m, l, a) . (m', l', a') = (M, l e^(m-M) + l' e^(m'-M),
 *                               a e^(m-M) + a' e^(m'-M)),  M = max(m, m').
 * A row whose scores are all -inf ends with l == 0 and stores 0/0 = NaN,
 * as the decomposed softmax does, or 0 when stage.zero_empty is set
 * (_safe_softmax, what SDPA computes).
 *
 * Index expressions (stax_ix) are int64 trees over loop variables, kernel
 * size arguments (STAX_IX_SYM k = sizes[k] of the ABI) and constants, with
 * + * floordiv mod (operands of div/mod are non-negative).  A view is just an
 * index map: strides (0 for broadcasting), a storage offset term, and
 * reshape of non-contiguous data through div/mod; no input is ever copied to
 * be contiguous.  Buffer pointers passed to a kernel already include the
 * tensor's own storage offset, and indices are in ELEMENTS of the buffer's
 * dtype.
 *
 * Value expressions (stax_lval) are typed scalar trees: load, constant,
 * index-as-value, accumulator read, cast, and the scalar primitives of
 * ops.h's formula language (STAX_PRIM list below).  Arithmetic of a PRIM
 * node is done in the node's dtype; operands already have that dtype
 * (lowering inserts CASTs); comparisons and isnan/isinf/isfinite produce
 * STAX_BOOL (i1 semantics, stored as one byte 0/1).
 *
 * All IR of one program lives in one arena (stax_arena) and is freed with it.
 *
 * KERNEL ABI (CPU back ends)
 *   void kernel(char **bufs, const int64_t *sizes, int64_t start,
 *               int64_t end);
 * bufs[i] is the base pointer of the kernel's buffer i (stax_kernel.bufs),
 * sizes the program's size arguments, [start, end) the range of x0.
 *
 * BACK ENDS plug in through struct stax_backend, registered from their own
 * init function with stax_lower_register_backend(); lower never includes a
 * back end's header.
 */
#ifndef STAX_LOWER_H
#define STAX_LOWER_H

#include "tensor/tensor.h"   /* dtypes, STAX_MAX_DIMS: a back end needs no graph or op table */

/* ---------------------------------------------------------------- prims */
/* X-macro: STAX_PRIM(ID, "name", arity).  Names match ops.h's formula
 * language.  No include guard needed: the list is a macro. */
#define STAX_PRIM_LIST(X) \
    X(ADD, "add", 2) X(SUB, "sub", 2) X(MUL, "mul", 2) X(DIV, "div", 2) \
    X(NEG, "neg", 1) X(ABS, "abs", 1) X(SIGN, "sign", 1) \
    X(EXP, "exp", 1) X(EXP2, "exp2", 1) X(EXPM1, "expm1", 1) \
    X(LOG, "log", 1) X(LOG2, "log2", 1) X(LOG10, "log10", 1) \
    X(LOG1P, "log1p", 1) X(SQRT, "sqrt", 1) X(RSQRT, "rsqrt", 1) \
    X(SIN, "sin", 1) X(COS, "cos", 1) X(TAN, "tan", 1) X(TANH, "tanh", 1) \
    X(SINH, "sinh", 1) X(COSH, "cosh", 1) X(ASIN, "asin", 1) \
    X(ACOS, "acos", 1) X(ATAN, "atan", 1) X(ATAN2, "atan2", 2) \
    X(ERF, "erf", 1) X(ERFC, "erfc", 1) X(FLOOR, "floor", 1) \
    X(CEIL, "ceil", 1) X(ROUND, "round", 1) X(TRUNC, "trunc", 1) \
    X(POW, "pow", 2) X(FMOD, "fmod", 2) X(REMAINDER, "remainder", 2) \
    X(FLOORDIV, "floordiv", 2) X(MAX, "max", 2) X(MIN, "min", 2) \
    X(MAXNAN, "maxnan", 2) X(MINNAN, "minnan", 2) \
    X(EQ, "eq", 2) X(NE, "ne", 2) X(LT, "lt", 2) X(LE, "le", 2) \
    X(GT, "gt", 2) X(GE, "ge", 2) X(AND, "and", 2) X(OR, "or", 2) \
    X(XOR, "xor", 2) X(NOT, "not", 1) X(WHERE, "where", 3) \
    X(ISNAN, "isnan", 1) X(ISINF, "isinf", 1) X(ISFINITE, "isfinite", 1) \
    X(BITAND, "bitand", 2) X(BITOR, "bitor", 2) X(BITXOR, "bitxor", 2) \
    X(BITNOT, "bitnot", 1) X(SIGMOID, "sigmoid", 1) \
    X(SHL, "shl", 2) X(SHR, "shr", 2) X(FMA, "fma", 3) \
    X(PHILOX, "philox", 3)
/* fma(a, b, c): a * b + c, rounded once for floats (torch's CPU add/sub
 * with alpha: vec::fmadd(other, alpha, self)); integers wrap.
 * shl(a, b) / shr(a, b): integer shifts with torch's results for any b:
 * a shift by b < 0 or b >= the width gives 0 (shl, and shr of an unsigned
 * or non-negative a) or -1 (shr of a negative a).
 * philox(seed, offset, j): int64 args and result; word j (0, 1, 2, ...) of
 * the Philox4x32-10 stream of docs/rng.md for a draw starting at `offset`
 * (in words) of generator `seed`: key = (lo32(seed), hi32(seed)), counter
 * c = offset/4 + j/4, result = philox4x32(key, (lo32(c), hi32(c), 0, 0))
 * [j % 4], a value in [0, 2^32).  Random ops read seed and offset from two
 * size arguments that the runtime fills per call (stax_generator_reserve). */

typedef enum {
#define STAX_PRIM_ENUM_(ID, name, arity) STAX_PRIM_##ID,
    STAX_PRIM_LIST(STAX_PRIM_ENUM_)
#undef STAX_PRIM_ENUM_
    STAX_PRIM_COUNT
} stax_prim_t;

const char *stax_prim_name(stax_prim_t p);
int stax_prim_arity(stax_prim_t p);
int stax_prim_from_name(const char *name);   /* -1 if unknown */

/* ---------------------------------------------------------------- arena */
typedef struct stax_arena stax_arena;
stax_arena *stax_arena_new(void);
void *stax_arena_alloc(stax_arena *a, size_t n);   /* zeroed; NULL+MemoryError */
void stax_arena_free(stax_arena *a);

/* ------------------------------------------------------ index expressions */
typedef enum {
    STAX_IX_CONST = 0,   /* v */
    STAX_IX_VAR,         /* loop variable number v */
    STAX_IX_SYM,         /* sizes[v], a kernel size argument */
    STAX_IX_ADD,         /* a + b */
    STAX_IX_MUL,         /* a * b */
    STAX_IX_DIV,         /* a / b, floor division, a >= 0, b > 0 */
    STAX_IX_MOD,         /* a % b, a >= 0, b > 0 */
    STAX_IX_VALUE        /* the (integer) value expression `val`, already
                            clamped to the valid range by lowering
                            (index_select / gather / embedding) */
} stax_ix_kind_t;

struct stax_lval;

typedef struct stax_ix {
    stax_ix_kind_t kind;
    int64_t v;
    const struct stax_ix *a, *b;
    const struct stax_lval *val;   /* STAX_IX_VALUE */
} stax_ix;

/* ------------------------------------------------------ value expressions */
typedef enum {
    STAX_LV_LOAD = 0,    /* bufs[buf][index], dtype = the buffer's dtype */
    STAX_LV_CONST,       /* f (floating dtypes) or i (integral / bool) */
    STAX_LV_INDEX,       /* index (an stax_ix) converted to dtype */
    STAX_LV_ACC,         /* current value of accumulator acc */
    STAX_LV_CAST,        /* args[0] converted to dtype (bool: != 0) */
    STAX_LV_PRIM         /* prim(args[0..arity-1]) */
} stax_lval_kind_t;

typedef struct stax_lval {
    stax_lval_kind_t kind;
    stax_dtype_t dtype;
    stax_prim_t prim;
    int nargs;
    const struct stax_lval *args[3];
    int buf;                    /* LOAD: kernel buffer number */
    const stax_ix *index;       /* LOAD, INDEX */
    const struct stax_lval *mask; /* LOAD: optional bool; where false the
                                   load reads nothing and yields 0 (cat,
                                   pad: both arms of a where are evaluated,
                                   so out-of-range loads must be masked) */
    double f;                   /* CONST */
    int64_t i;                  /* CONST */
    int acc;                    /* ACC */
} stax_lval;

/* ------------------------------------------------------------- kernels */
typedef enum {
    STAX_RED_SUM = 0,   /* init 0; float sums are blocked: vector partial
                           sums over <= STAX_RED_BLOCK elements added into a
                           double, so the float32 sum of 2^24 elements stays
                           within 1e-6 relative of float64 */
    STAX_RED_PROD,      /* init 1 */
    STAX_RED_MAX,       /* NaN-propagating; init -inf / INT_MIN */
    STAX_RED_MIN,       /* NaN-propagating; init +inf / INT_MAX */
    STAX_RED_ARGMAX,    /* value + first index (NaN counts as maximal) */
    STAX_RED_ARGMIN,
    STAX_RED_ANY,       /* bool */
    STAX_RED_ALL
} stax_red_t;

#define STAX_RED_BLOCK 4096

typedef struct {
    stax_red_t op;
    stax_dtype_t dtype;          /* accumulator (= result) dtype; ARG*: int64 */
    const stax_lval *value;      /* folded value (already in the value dtype) */
    const stax_ix *index;        /* ARGMAX/ARGMIN: the index to record */
} stax_lacc;

/* how a store meets the element already there.  NONE: buf[index] = value
 * (a plain store; two stores of one element in one kernel leave either).
 * The others read, combine and write the element atomically with respect
 * to every other store of the kernel (the scatter family on a GPU: one
 * thread per visited element, duplicates of an index meeting at one
 * element), in an unspecified order: ADD old + value, MUL old * value
 * (integers wrap), MAX maxnan(value, old), MIN minnan(value, old) (NaN
 * propagates).  Only back ends with STAX_BE_ATOMIC_STORES get them, for
 * float32/float64/int32/int64 buffers. */
typedef enum {
    STAX_COMBINE_NONE = 0,
    STAX_COMBINE_ADD,
    STAX_COMBINE_MUL,
    STAX_COMBINE_MAX,
    STAX_COMBINE_MIN
} stax_combine_t;

typedef struct {
    int buf;                     /* kernel buffer number */
    const stax_ix *index;
    const stax_lval *value;      /* dtype == the buffer's dtype */
    stax_combine_t combine;
} stax_lstore;

typedef enum {
    STAX_STAGE_REDUCE = 0,       /* accs[acc0 .. acc0+n) over the inner dims */
    STAX_STAGE_INNER,            /* stores[...] inside the inner loops */
    STAX_STAGE_OUTER,            /* stores[...] at the outer level */
    STAX_STAGE_ATTENTION         /* accs[first..first+3): see ATTENTION
                                    KERNELS above */
} stax_stage_kind_t;

typedef struct {
    stax_stage_kind_t kind;
    int first, n;                /* REDUCE/ATTENTION: accs[first..first+n);
                                    INNER/OUTER: stores[first..first+n) */
    int tile_q, tile_k;          /* ATTENTION: query rows per block (the
                                    parallel unit), keys per K/V tile */
    int zero_empty;              /* ATTENTION: a row whose scores are all
                                    -inf stores 0 (_safe_softmax: SDPA), not
                                    0/0 (the written softmax) */
} stax_stage;

typedef struct {
    int id;                      /* program buffer id (stax_lower internal) */
    stax_dtype_t dtype;
    int is_output;               /* the kernel writes it */
    int noalias;                 /* proven not to overlap any other buffer */
} stax_kbuf;

typedef struct stax_kernel {
    char name[64];               /* "kernel0_fused_add_relu_mul_sum" */
    int nouter, ninner;
    const stax_ix *dims[2 * STAX_MAX_DIMS];   /* extent of each loop var */
    int nstages;
    stax_stage *stages;
    int naccs;
    stax_lacc *accs;
    int nstores;
    stax_lstore *stores;
    int nbufs;
    stax_kbuf *bufs;
    int64_t bytes_read, bytes_written;   /* per call, at the example sizes */
    int64_t work;                /* estimated elements touched (threading) */
} stax_kernel;

/* Human-readable loop IR (new str reference). */
PyObject *stax_lower_kernel_str(const stax_kernel *k);
/* Append the rendering of an index / value expression to a buffer. */
typedef struct { char *p; size_t n, cap; int oom; } stax_strbuf;
void stax_strbuf_printf(stax_strbuf *sb, const char *fmt, ...);
void stax_lower_ix_render(stax_strbuf *sb, const stax_ix *ix);
void stax_lower_lval_render(stax_strbuf *sb, const stax_lval *v);

/* ------------------------------------------------------------ back ends */
typedef void (*stax_kernel_fn)(char **bufs, const int64_t *sizes,
                               int64_t start, int64_t end);

/* Where a back end puts a kernel's final object code when it has it only
 * after compile_object returned (tiered compilation: the NVRTC back end
 * launches a quickly compiled first version while the final one compiles
 * in the background).  put: the object (the bytes compile_object would
 * have given) goes into the compile cache under the kernel's key; release:
 * frees the sink.  Both under the GIL; put at most once, then release. */
typedef struct stax_object_sink {
    void (*put)(struct stax_object_sink *s, const char *obj, size_t n);
    void (*release)(struct stax_object_sink *s);
} stax_object_sink;

typedef struct stax_backend {
    const char *name;            /* "llvm", "nvrtc" */
    /* Compile one kernel.  Returns an opaque handle (NULL + exception on
     * failure, e.g. LLVM's message as RuntimeError).  *source (if not
     * NULL) receives a new str: the generated source (LLVM IR after O3 /
     * CUDA C). */
    void *(*compile_kernel)(struct stax_backend *be, const stax_kernel *k,
                            PyObject **source);
    /* Run the kernel over [start, end) of dim 0.  0, or -1 + exception.
     * CPU back ends: callable without the GIL, from any thread. */
    int (*launch)(struct stax_backend *be, void *handle, char **bufs,
                  const int64_t *sizes, int64_t start, int64_t end);
    void (*free)(struct stax_backend *be, void *handle);
    /* Optional (may be NULL = all): can this back end render prim p? */
    int (*supports_op)(struct stax_backend *be, int prim);
    /* Optional: direct entry point (CPU) so the runtime can skip launch. */
    stax_kernel_fn (*kernel_fn)(struct stax_backend *be, void *handle);
    /* Optional, all three or none: the persistent compile cache
     * (lower_cache.c, docs/cache.md).  cache_tag: everything outside the
     * loop IR that changes this back end's code (its version, the target
     * triple / CPU / features or GPU arch, code-generation knobs); a string
     * owned by the back end, or NULL + exception.  compile_object: like
     * compile_kernel, but the kernel's entry symbol is `sym` and *object
     * receives a new bytes (the relocatable object code) -- or stays NULL
     * when `sym` is already loaded in this process and the handle is
     * shared.  load_object: a handle for object code that compile_object
     * produced (possibly in another process) for a kernel with k's loop IR
     * (a GPU back end sizes its launches from k); NULL + exception if it
     * cannot be loaded.  Handles of both are freed with `free`. */
    const char *(*cache_tag)(struct stax_backend *be);
    void *(*compile_object)(struct stax_backend *be, const stax_kernel *k,
                            const char *sym, PyObject **source,
                            PyObject **object);
    void *(*load_object)(struct stax_backend *be, const stax_kernel *k,
                         const char *sym, const char *data, size_t n);
    void *state;
    /* Where the buffers it launches on live: NULL (host memory, the CPU
     * ABI) or "cuda": device addresses of CUDA tensors; the runtime then
     * allocates outputs and temporaries as CUDA tensors, runs matmul steps
     * on the device, and reads flags back with a synchronizing copy. */
    const char *device;
    unsigned caps;               /* STAX_BE_* below */
    /* Optional: the source of a compiled kernel, made when asked (a new
     * str, or NULL + exception). A back end whose compile gives no source
     * (LLVM: printing each module's IR cost 1-2.5 ms of a compile that no
     * one reads) builds it here again from the loop IR: kernels[i].source
     * and the kernels log ask for it. */
    PyObject *(*kernel_source)(struct stax_backend *be, void *handle, const stax_kernel *k);
    /* Optional: 1 when the handle compile_object just made runs a first
     * version whose final object comes later; the back end then owns the
     * sink (put when the final object exists, release when the handle
     * goes) and the cache stores nothing now.  0: the object is final,
     * the sink stays the caller's. */
    int (*defer_object)(struct stax_backend *be, void *handle, stax_object_sink *sink);
} stax_backend;

/* stax_backend.caps: how the back end's kernels behave where the lowering
 * would otherwise add a check read back on the host.
 * STAX_BE_NO_ZERO_DIV_CHECK: an integer division by zero is no error (CUDA
 *   kernels give an unspecified value, as torch's do); torch raises on the
 *   CPU only.
 * STAX_BE_DEVICE_INDEX_CHECK: the back end's kernels themselves raise
 *   eager's error for a gathered index out of range, so the lowering adds
 *   no range check for its loads (stores are checked regardless).  No back
 *   end sets it: the NVRTC kernels do not assert on the device, so there,
 *   as on the CPU, every data-dependent gather index is clamped into range
 *   (the loads stay in bounds) and checked by a kernel whose flag the
 *   program reads after its last step (a failed check reruns the call
 *   eagerly, which raises eager's error).
 * STAX_BE_ATOMIC_STORES: the back end renders combining stores
 *   (stax_combine_t); the scatter family then lowers to kernels instead
 *   of the runtime's sequential ST_SCATTER step. */
#define STAX_BE_NO_ZERO_DIV_CHECK   (1u << 0)
#define STAX_BE_DEVICE_INDEX_CHECK  (1u << 1)
#define STAX_BE_ATOMIC_STORES       (1u << 2)

/* Back ends register from their init function; the struct must outlive the
 * process.  0, or -1 + exception. */
int stax_lower_register_backend(stax_backend *be);
stax_backend *stax_lower_get_backend(const char *name);   /* NULL if none */

/* Back ends are chosen by device (devices.c): a table maps the device type
 * of a program's tensor inputs to the name of the back end that compiles
 * its kernels ("cpu" -> "llvm"; the GPU runtime adds "cuda" -> "nvrtc").
 * stax_lower_inputs_device: the device type shared by the tensors (and
 * NumPy arrays: "cpu") among examples, "cpu" if there is none; NULL +
 * RuntimeError if they differ.  stax_lower_backend_for_device: the back end
 * registered for it; NULL + RuntimeError saying what is missing. */
const char *stax_lower_inputs_device(PyObject *examples);
stax_backend *stax_lower_backend_for_device(const char *device);

/* Lower a GraphModule for its example inputs (a sequence) and compile every
 * kernel with back end be: a CompiledProgram (callable; .kernels lists each
 * kernel's name, back-end source and loop IR), or NULL + exception.
 * strict: an op lowering cannot take is an error instead of a fallback
 * step; dynamic: kernels take sizes as arguments.  _C.stax_backend calls it
 * with the back end of the inputs' device; a back end's own test helpers
 * may pass themselves. */
PyObject *stax_lower_program(PyObject *gm, PyObject *examples,
                             stax_backend *be, int strict, int dynamic);

/* tensorplay._C.stax_backend(gm, examples, **options): the back end of
 * the inputs' device through stax_lower_program; options (a dict, or
 * NULL/None) may hold strict_native and dynamic, others are ignored. */
PyObject *stax_lower_stax_backend(PyObject *gm, PyObject *examples,
                                  PyObject *options);

/* ------------------------------------------------------------ threads */
/* Run fn(ctx, start, end) over [0, n) split across the pool
 * (TENSORPLAY_NUM_THREADS, default the core count); small n / work runs on
 * the calling thread.  Safe without the GIL. */
typedef void (*stax_parallel_fn)(void *ctx, int64_t start, int64_t end);
void stax_lower_parallel_for(int64_t n, int64_t work, stax_parallel_fn fn,
                             void *ctx);
int stax_lower_num_threads(void);

/* Python-level type of the compiled program, and the exception. */
extern PyObject *stax_lower_NativeCompileError;

int stax_lower_module_init(PyObject *m);

#endif
