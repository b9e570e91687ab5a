/* Private to the lower room: the lowering context, virtual buffers, kernel
 * drafts, program buffers and steps. */
#ifndef STAX_LOWER_INTERNAL_H
#define STAX_LOWER_INTERNAL_H

#include "lower/lower.h"
#include "graph/graph.h"

#define LW_MAX_STAGES 32
#define LW_MAX_ACCS 64
#define LW_MAX_STORES 64
/* buffers one kernel may take: the code generators' limit (a fusion that
 * would pass it stays two kernels) */
#define LW_MAX_KBUFS 64
#define LW_MAX_SYMS 1024

/* what a graph node lowered to */
typedef enum {
    VB_TENSOR = 0,    /* body over vars 0..ndim-1 */
    VB_TUPLE,         /* items */
    VB_PYOBJ          /* a runtime Python object in slot `pbuf` (fallback
                         result that is not a tensor) or a constant `obj` */
} vb_kind_t;

typedef struct vbuf {
    vb_kind_t kind;
    int ndim;
    int64_t sizes[STAX_MAX_DIMS];
    stax_dtype_t dtype;
    const stax_lval *body;     /* LOAD.buf = program buffer ids */
    int pbuf;                  /* materialized as this program buffer, or -1 */
    int nitems;
    struct vbuf **items;
    PyObject *obj;             /* VB_PYOBJ constant (borrowed from graph) */
    const char *label;         /* ops inlined into the body ("add_relu") */
} vbuf;

/* program buffers */
typedef enum {
    PB_INPUT = 0,     /* placeholder i */
    PB_TEMP,          /* allocated by the runtime before its first writer */
    PB_EXTERN,        /* produced by a library call / fallback step */
    PB_CONST          /* a tensor held by the program (get_attr) */
} pb_kind_t;

typedef struct {
    pb_kind_t kind;
    int input;                 /* PB_INPUT: placeholder index */
    int ndim;
    int64_t sizes[STAX_MAX_DIMS];
    int64_t strides[STAX_MAX_DIMS];
    stax_dtype_t dtype;
    PyObject *obj;             /* PB_CONST: strong */
    int first, last;           /* buffer plan: first writer, last reader */
    int is_output;
    int ordered;               /* written by several kernels in turn (the
                                  scatter family's copy of self, then its
                                  combining stores): like an input's, its
                                  writes keep their place and join no
                                  other kernel */
    int requires_grad;         /* output: eager's result requires grad */
    uint64_t deps;             /* inputs it depends on (bit i: input i;
                                  bit 63: input >= 63) */
} pbuf_t;

/* kernel drafts (before finalization into a stax_kernel) */
typedef struct {
    int alive;
    int nouter, ninner;
    int64_t dimv[2 * STAX_MAX_DIMS];
    int nstages;
    stax_stage stages[LW_MAX_STAGES];
    int naccs;
    stax_lacc accs[LW_MAX_ACCS];
    int nstores;
    stax_lstore stores[LW_MAX_STORES];   /* .buf = program buffer id */
    char label[48];
} kdraft;

typedef enum {
    ST_KERNEL = 0,
    ST_MATMUL,        /* a @ b (b transposed if flag) (+ nothing) */
    ST_FALLBACK,      /* target(*args, **kwargs) eagerly */
    ST_EXTRACT,       /* slot[out] = slot[src][index] */
    ST_SCATTER        /* out = self, then each indexed element of src
                         combined into it, in order (scatter family) */
} step_kind_t;

/* ST_SCATTER's combine */
enum { LW_SC_SET, LW_SC_ADD, LW_SC_MUL, LW_SC_AMAX, LW_SC_AMIN, LW_SC_MEAN };

typedef struct {
    step_kind_t kind;
    kdraft *draft;             /* ST_KERNEL (during lowering) */
    stax_kernel *k;            /* ST_KERNEL (after finalization) */
    void *handle;
    stax_kernel_fn fn;
    int *bufmap;               /* kernel buf i -> program buffer */
    int64_t par_n, work;
    int a, b, transpose_b;     /* ST_MATMUL operands (program buffers) */
    struct {
        int on, ndim;
        int64_t sizes[STAX_MAX_DIMS], strides[STAX_MAX_DIMS], offset;
    } view[2];                 /* ST_MATMUL: operand = strided view of a/b */
    PyObject *target;          /* ST_FALLBACK: callable or method name */
    PyObject *args, *kwargs;   /* templates: SlotRef -> runtime value */
    int is_method;
    int src;
    Py_ssize_t index;          /* ST_EXTRACT */
    int out;                   /* ST_MATMUL/FALLBACK/EXTRACT/SCATTER result */
    struct {
        int index, src;        /* program buffers (contiguous); src -1: value */
        int dim, mode, include_self, index1d, ndim;
        double value, alpha;   /* the scalar source; index_add's alpha */
        int64_t ssizes[STAX_MAX_DIMS];   /* self / out */
        int64_t isizes[STAX_MAX_DIMS];   /* the elements visited: index's
                                            shape (index1d: source's) */
        int64_t srcsizes[STAX_MAX_DIMS];
    } scat;                    /* ST_SCATTER (a = self's buffer) */
    int nalloc, *alloc;        /* program buffers allocated before */
    int nfree, *frees;         /* program buffers released after */
    PyObject *stack;           /* fallback: the user's source line */
    PyObject *source;          /* ST_KERNEL: generated source (strong) */
    int nbump, *bump;          /* inputs written (version counters) */
    PyObject *hcap;            /* symbolic (dynamic) mode: capsule owning
                                  `handle`, shared through the kernel cache
                                  (handle is then not freed by the step) */
} step_t;

typedef struct lw_ctx {
    stax_arena *arena;
    stax_backend *be;
    int strict;
    int numpy_io;              /* inputs are NumPy arrays: so are outputs */
    pbuf_t *pbufs;
    int npbufs, cappbufs;
    step_t *steps;
    int nsteps, capsteps;
    int64_t syms[LW_MAX_SYMS];
    int nsyms;
    int nfallbacks;
    int ninputs;
    int kcount;
    /* random draws, in node order: their seed/offset size arguments are
     * filled per call from the default generator */
    int no_random;
    int nrand;
    int rand_seed_sym[32], rand_off_sym[32];
    int64_t rand_words[32];
    /* per draw: the explicit generator= it draws from (strong), NULL for
     * the default generator; cur_gen (borrowed) is the one of the random
     * node being lowered */
    PyObject *rand_gen[32];
    PyObject *cur_gen;
    unsigned char sym_reserved[LW_MAX_SYMS];
    /* dynamic=True: every size-dependent quantity of a kernel (extents,
     * strides, offsets, div/mod operands, numel divisors, cat/gather
     * bounds) is a size argument, not a constant; compiled kernels are
     * shared through `kcache` (borrowed; key: the kernel's structure with
     * those quantities as size-argument slots) across the size variants */
    int symbolic;
    PyObject *kcache;
    /* runtime checks of eager's errors: 0-d bool buffers, any(divisor ==
     * 0) of an integer division (LW_CHECK_ZERO), any(index out of range)
     * of gather / index_select / embedding (LW_CHECK_INDEX, _GATHER).
     * When one is set the program undoes its writes to the inputs and
     * raises (marked for the driver to rerun the call eagerly, so the
     * error and the writes before it are eager's) */
    int nzchecks;
    int zchecks[32];
    int zkind[32];
    /* an index check's index (its body, shape, wrap): a second use of one
     * index tensor with the same bound and kind shares the first's check */
    const stax_lval *zidx[32];
    int zndim[32], zwrap[32];
    int64_t zn[32], zsizes[32][STAX_MAX_DIMS];
    /* dynamic shapes: the values of symbolic-size nodes (x.size(1), t + 1),
     * constants of this program (each size variant is lowered for its own
     * sizes); list owning them, or NULL */
    PyObject *symvals;
} lw_ctx;

/* construction (arena) */
const stax_ix *lw_ix_const(lw_ctx *c, int64_t v);
const stax_ix *lw_ix_var(lw_ctx *c, int v);
const stax_ix *lw_ix_bin(lw_ctx *c, stax_ix_kind_t k, const stax_ix *a,
                         const stax_ix *b);
const stax_ix *lw_ix_value(lw_ctx *c, const stax_lval *v);
const stax_lval *lw_const(lw_ctx *c, stax_dtype_t dt, double f);
const stax_lval *lw_const_int(lw_ctx *c, stax_dtype_t dt, int64_t i, double f);
const stax_lval *lw_num_const(lw_ctx *c, stax_dtype_t dt, PyObject *o, double dflt);
const stax_lval *lw_load(lw_ctx *c, int pbuf, const stax_ix *ix,
                         const stax_lval *mask);
const stax_lval *lw_cast(lw_ctx *c, const stax_lval *v, stax_dtype_t dt);
const stax_lval *lw_prim(lw_ctx *c, stax_prim_t p, stax_dtype_t dt,
                         const stax_lval *a, const stax_lval *b,
                         const stax_lval *d);
const stax_lval *lw_acc(lw_ctx *c, int acc, stax_dtype_t dt);
const stax_lval *lw_index(lw_ctx *c, const stax_ix *ix, stax_dtype_t dt);
/* a size-derived number (mean's divisor, layer_norm's row length): a
 * constant in static mode, a size argument in symbolic (dynamic) mode */
const stax_lval *lw_size_const(lw_ctx *c, stax_dtype_t dt, int64_t n);

/* rewriting: substitute vars, shift accs, replace loads */
typedef struct lw_rw {
    const stax_ix *const *vars;   /* new ix for var k (NULL: keep) */
    int nvars;
    int acc_shift;
    int (*load_hook)(struct lw_rw *rw, const stax_lval *load,
                     const stax_lval **out);  /* 1 replaced, 0 keep, -1 err */
    void *hook_ctx;
    const int *bufmap;            /* program -> kernel buffer, or NULL */
    int nbufmap;
    /* loop extents of the result's vars (NULL: unknown): div/mod nodes
     * are simplified by interval arithmetic (lower_simplify.c) */
    const int64_t *ranges;
    int nranges;
    /* value replacing accumulator k (NULL: keep), or NULL */
    const struct stax_lval *const *accs;
    int naccs;
    void *memo;
} lw_rw;
const stax_lval *lw_rewrite(lw_ctx *c, lw_rw *rw, const stax_lval *v);
const stax_ix *lw_rewrite_ix(lw_ctx *c, lw_rw *rw, const stax_ix *ix);
void lw_rw_done(lw_rw *rw);
/* affine form of an index: coefficients of vars 0..nv-1 and a constant; 0
 * if not affine with constant coefficients */
int lw_ix_affine(const stax_ix *ix, int nv, int64_t *coef, int64_t *cst);
int lw_ix_equal(const stax_ix *a, const stax_ix *b, int nv);

/* buffers and steps */
int lw_new_pbuf(lw_ctx *c, pb_kind_t kind, int ndim, const int64_t *sizes,
                stax_dtype_t dt);
step_t *lw_new_step(lw_ctx *c, step_kind_t kind);
const stax_lval *lw_contig_load(lw_ctx *c, int pbuf);
/* v becomes the tensor value of program buffer pb: the buffer's shape and
 * dtype, pbuf = pb, body = its lw_contig_load. 0, or -1 + exception. */
int lw_vb_over_pbuf(lw_ctx *c, vbuf *v, int pb);
const stax_ix *lw_contig_index(lw_ctx *c, int ndim, const int64_t *sizes,
                               const stax_ix *const *ix);
int lw_dtype_size(stax_dtype_t dt);
int lw_is_float(stax_dtype_t dt);

/* make v a real buffer (a pointwise kernel if needed): program buffer id */
int lw_materialize(lw_ctx *c, vbuf *v);
kdraft *lw_new_kernel(lw_ctx *c, const char *label);
/* A new kernel writing one value per point of the ndim loops `sizes` (one
 * OUTER stage, one store: stores[0] is the caller's to fill); vars receive
 * the loop variables. NULL + exception. */
kdraft *lw_new_pointwise_kernel(lw_ctx *c, const char *label, int ndim,
                                const int64_t *sizes, const stax_ix **vars);

/* compile one kernel with c->be, through the persistent compile cache
 * when it is on and the back end supports it (lower_cache.c): a handle, or
 * NULL + exception; *source as stax_backend.compile_kernel */
void *lw_compile_kernel(lw_ctx *c, const stax_kernel *k, PyObject **source);

/* finalize: merge/fuse, build stax_kernels, buffer plan, compile */
int lw_finalize(lw_ctx *c, const int *outputs, int noutputs);
void lw_ctx_clear(lw_ctx *c);
/* lower_simplify.c: div/mod of ix that interval arithmetic over the loop
 * extents ext[0..n) proves exact, removed (ix itself if none; NULL on
 * memory error) */
const stax_ix *lw_ix_simplify(lw_ctx *c, const stax_ix *ix, const int64_t *ext, int n);
/* split loop vars reached through div/mod into two loops each, where that
 * removes div/mod nodes (CPU back end); 0 or -1 + exception */
int lw_split_loops(lw_ctx *c, kdraft *d);
/* a float max/min reduction over a few elements (pooling windows) as one
 * unrolled maxnan/minnan expression of the outer loops; 0 or -1 */
int lw_unroll_small_reductions(lw_ctx *c, kdraft *d);

/* node rules (lower_rules.c: dispatch and shared helpers; per op kind in
 * lower_pointwise.c, lower_reduce.c, lower_view.c, lower_movement.c,
 * lower_extern.c, lower_random.c): 1 lowered, 0 unsupported (reason set in
 * *why), -1 error */
struct lw_node_in {
    const char *opname;
    const stax_op_info *op;
    PyObject *node;          /* borrowed */
    PyObject *args, *kwargs; /* borrowed; Node objects replaced by vbufs via
                                lw_arg_vbuf */
    PyObject *val;           /* meta['val'] (borrowed) */
    vbuf **vb_of_node;       /* lookup by node index */
    PyObject *node_index;    /* dict node -> int */
};
int lw_lower_node(lw_ctx *c, struct lw_node_in *in, vbuf **out,
                  const char **why);
/* functionalized input mutation: dest (a placeholder) <- src, in place;
 * 1 lowered, 0 unsupported */
int lw_lower_copy_into(lw_ctx *c, vbuf *dest, vbuf *src);
/* 1 if body loads program buffer buf, 0 not, -1 error */
int lw_body_reads(lw_ctx *c, const stax_lval *body, int buf);
int lw_val_info(PyObject *val, int *ndim, int64_t *sizes, int64_t *strides,
                stax_dtype_t *dt);

/* shared by the rule files (lower_rules.c) */
#define UNSUPPORTED(msg) do { *why = (msg); return 0; } while (0)
vbuf *lw_vb_new(lw_ctx *c);
/* the vbuf of a Node argument, or NULL (not a node) */
vbuf *lw_arg_vb(struct lw_node_in *in, PyObject *o);
PyObject *lw_bound_arg(PyObject *bound, const stax_op_info *op,
                       const char *name);
/* body of v, broadcast to an output of ndim dims (right aligned) */
const stax_lval *lw_bcast(lw_ctx *c, vbuf *v, int ndim, const int64_t *sizes,
                          const stax_ix *const *ovars);
void lw_ident_vars(lw_ctx *c, int n, const stax_ix **vars);
int lw_norm_dim(int64_t d, int n);
double lw_num(PyObject *o, double dflt);
/* a stage of a kernel draft (lower_reduce.c) */
int lw_add_stage(kdraft *k, stax_stage_kind_t kind, int first, int n);
/* views (lower_view.c): out dims -> input var map, then rewrite x's body */
int lw_view_map(lw_ctx *c, vbuf *x, vbuf *out, const stax_ix *const *map);
int lw_int_list(PyObject *o, int64_t *v, int max);

/* the rule of each op kind, called by lw_lower_node */
/* a pointwise op: its formula tree (stax_op_formula_tree) over the loop IR */
int lw_lower_formula(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                     vbuf *out, const char **why);
int lw_lower_reduction(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                       vbuf *x, vbuf *out, const char **why);
/* zeros/ones/full/empty/rand/randn (no op-table row: the value gives the
 * shape and dtype): 1 lowered into *outp, 0 refused (*why), -1 error */
int lw_lower_factory(lw_ctx *c, const stax_call_info *call, PyObject *args, PyObject *kwargs,
                     PyObject *val, vbuf **outp, const char **why);
/* movedim / moveaxis / diagonal (no op-table row): index-map views of the
 * node's first argument; 1 lowered into *outp, 0 refused (*why), -1 error */
int lw_lower_extra_view(lw_ctx *c, const stax_call_info *call, struct lw_node_in *in,
                        vbuf **outp, const char **why);
/* integer division, remainder or fmod in the body of v (the value of a
 * node of op `op`, checked for floor_divide/remainder/fmod/div only):
 * a kernel flagging a zero divisor (lw_ctx.zchecks); 0, or -1 + error */
int lw_zero_check(lw_ctx *c, const stax_op_info *op, vbuf *v);
enum { LW_CHECK_ZERO = 0, LW_CHECK_INDEX, LW_CHECK_GATHER };
/* a kernel flagging an index of idx (a VB_TENSOR of integers) outside
 * [0, n) (lw_ctx.zchecks, kind LW_CHECK_INDEX or LW_CHECK_GATHER); 0, or
 * -1 + error */
int lw_index_check(lw_ctx *c, vbuf *idx, int64_t n, int kind);
/* the same for an index that may count from the end: [-n, n) */
int lw_index_check_wrap(lw_ctx *c, vbuf *idx, int64_t n, int kind);
/* lw_index_check also where the back end's loads need none
 * (STAX_BE_DEVICE_INDEX_CHECK): the index of a store */
int lw_index_check_store(lw_ctx *c, vbuf *idx, int64_t n, int kind);
int lw_lower_softmax(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                     vbuf *x, vbuf *out, int logsm, const char **why);
int lw_lower_layer_norm(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                        vbuf *x, vbuf *out, int native, const char **why);
int lw_lower_batch_norm(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                        vbuf *x, vbuf *out, const char **why);
int lw_lower_view(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                  vbuf *x, vbuf *out, const char **why);
int lw_lower_cat(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                 vbuf *out, int stack, const char **why);
int lw_lower_one_hot(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                     vbuf *out, const char **why);
int lw_lower_unfold(lw_ctx *c, struct lw_node_in *in, PyObject *bound, vbuf *x,
                    vbuf *out, const char **why);
int lw_lower_pad(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                 vbuf *x, vbuf *out, const char **why);
int lw_lower_gather(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                    vbuf *out, const char **why);
/* scatter / scatter_add / scatter_reduce / index_add / index_copy /
 * index_fill as an ST_SCATTER step (lower_movement.c) */
int lw_lower_scatter_seq(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                         vbuf *x, vbuf *out, const char **why);
int lw_lower_scatter(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                     vbuf *x, vbuf *out, const char **why);
int lw_lower_matmul(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                    vbuf *out, const char **why);
/* attention (lower_attention.c): a matmul(softmax(X, -1), v) whose X is a
 * pointwise chain over the scores q @ kT (found by program_build.c before
 * lowering; the scores node lowers to a load of `phantom`, a program buffer
 * nothing ever writes).  Builds the attention kernel (lower.h) writing
 * out's buffer.  q: (..., L, E), kt: (..., E, S), v: (..., S, Ev), x the
 * scores chain (..., L, S); causal: keys j > i + causal_off are known
 * masked; zero_empty: the softmax is _safe_softmax (a row of -inf scores
 * is 0).  1 lowered, -1 error */
int lw_lower_attention(lw_ctx *c, vbuf *q, vbuf *kt, vbuf *v, vbuf *x,
                       int phantom, int causal, int64_t causal_off,
                       int zero_empty, vbuf *out);
/* 1 if kernel draft k is an attention kernel */
int lw_is_attention(const kdraft *k);

/* gemm.c: C (m x n, row stride ldc) = A (m x k) @ B (k x n), float32,
 * element strides (ar, ac) and (br, bc); single-threaded AVX-512.
 * lw_sgemm_available: this CPU runs it (STAX_NO_SGEMM turns it off);
 * lw_sgemm: 0, or -1 with nothing set when it cannot (out of memory) */
int lw_sgemm_available(void);
int lw_sgemm(int64_t m, int64_t n, int64_t k, const float *A, int64_t ar, int64_t ac,
             const float *B, int64_t br, int64_t bc, float *C, int64_t ldc);
int lw_lower_random(lw_ctx *c, struct lw_node_in *in, PyObject *bound,
                    vbuf *x, vbuf *out, const char **why);

/* CUDA graphs of a CUDA program (program_graph.c). A program whose steps
 * are all NVRTC kernels, with no runtime check read back per call, has its
 * launches recorded and replayed as one graph (device.h), under the mode
 * of tp.compiler.config.cuda_graphs (or the program's own cuda_graphs):
 * off, on, or auto -- the first call runs as before (it loads and tunes
 * the kernels); auto then times LW_CG_SAMPLES calls each way (host clock,
 * whole call) and keeps the faster. */
enum { LW_CG_OFF = 0, LW_CG_ON = 1, LW_CG_AUTO = 2 };
enum { LW_CG_DIRECT = 0, LW_CG_GRAPH, LW_CG_MEASURE_DIRECT, LW_CG_MEASURE_GRAPH };
#define LW_CG_SAMPLES 5
struct stax_cuda_graph;
typedef struct lw_cgraph {
    struct stax_cuda_graph *g;
    int checked, eligible;     /* structure looked at; graphs possible */
    int nkernels;
    int decided;               /* auto's outcome: 0 none yet, else an action */
    int breaks;                /* calls whose recording broke */
    long long calls, direct_calls, graph_calls;
    int nd, ng;                /* auto's samples (µs per call) */
    double td[LW_CG_SAMPLES], tg[LW_CG_SAMPLES + 1];
    int skip_sample;           /* this call is no sample of auto's */
    char why[256];             /* why never a graph ("" none) */
    char auto_why[160];        /* auto's reason for direct launches */
} lw_cgraph;
/* the action for a call of a program of nkernels launches: mode, calls
 * made before, auto's samples so far (nd direct, ng graph; the first graph
 * sample, which builds it, is not compared); *why (static or why_buf)
 * says why not a graph, NULL otherwise */
int lw_cgraph_plan(int mode, int nkernels, long long calls, int nd,
                   const double *td, int ng, const double *tg, char *why_buf,
                   size_t why_cap, const char **why);
/* the process-wide mode (tp.compiler.config.cuda_graphs) */
extern int lw_cuda_graphs_mode;

/* the CompiledProgram (program.c: type and call path; program_build.c:
 * building one from a graph; program_shapes.c: shape propagation and the
 * dynamic size variants; bufpool.c: its output/temporary buffers) */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    lw_ctx c;
    PyObject *kernels;        /* list of StaxKernel */
    PyObject *out_template;   /* output pytree with SlotRefs */
    int out_single;           /* template is one SlotRef: its index */
    PyObject *gm;             /* the op-level graph it lowers */
    int64_t lower_bound;
    int64_t *in_sizes;        /* per input: ndim, sizes, strides (checked) */
    int *in_ndim;
    stax_dtype_t *in_dtype;
    int dynamic;              /* other sizes: a variant per size class */
    int strict;
    PyObject *variants;       /* list of Programs (dynamic) */
    PyObject *kcache;         /* dynamic: kernel structure -> (capsule,
                                 source), shared with the variants */
    PyObject *rg_extra;       /* mutating graphs: NULL or the 3-tuple
                                 (written, fresh, mutated) of input masks
                                 described above rg_extra_apply
                                 (program.c), built by rg_extra_template */
    lw_cgraph *cg;            /* CUDA programs: graph state (lazily) */
    int cg_mode;              /* its own cuda_graphs: 0 the config's, else LW_CG_* + 1 */
    PyObject *py_gm;          /* the Python-level graph when gm (the op
                                 graph) holds at its samples' sizes only
                                 (stax_graph_op_graph_sample_sized): size
                                 variants take their op graph from it */
} Program;
extern PyTypeObject *lw_program_type;
extern PyTypeObject *lw_kernel_info_type;
PyObject *lw_slotref_new(int i);
/* a SlotRef's slot index, or -1 if o is not a SlotRef */
int stax_lower_slotref_index(PyObject *o);
PyObject *lw_program_vectorcall(PyObject *self, PyObject *const *args,
                                size_t nargsf, PyObject *kwnames);
/* CUDA graphs around one call (program_graph.c): the action of this
 * call (LW_CG_*; DIRECT for a CPU program), opening p's recording for a
 * graph; end closes it after the steps (ok 0: an error is set and the
 * recorded kernels are only launched one by one); -1 + exception.
 * lw_cgraph_done: the call's time, for auto's measurement. */
int lw_cgraph_begin(Program *p);
int lw_cgraph_end(Program *p, int action, int ok);
void lw_cgraph_done(Program *p, int action, double us);
void lw_cgraph_free(Program *p);
PyObject *lw_cgraph_info(Program *p);
int lw_cgraph_set_mode(Program *p, PyObject *v);
PyObject *lw_cgraph_get_mode(Program *p);
int lw_cgraph_module_init(PyObject *m);
/* 0 if input i of the call matches p's example, -1 if not */
int lw_input_ok(Program *p, int i, PyObject *o);
/* 1: o is a 0-d host tensor bound to 0-d placeholder i of a CUDA program */
int lw_host_scalar(Program *p, int i, PyObject *o);
/* a fresh buffer for program buffer b (bufpool.c) */
PyObject *lw_new_buffer(Program *p, pbuf_t *b);
/* around the compile of c's kernels: the big blocks its first run takes
 * from the pool are made and their pages touched by a helper thread while
 * the back end compiles; end stops the helper and pools the blocks
 * (bufpool.c).  lw_prefault_pages: pages touched since start. */
void lw_prefault_begin(lw_ctx *c);
void lw_prefault_end(void);
unsigned long long lw_prefault_pages(void);
/* the helper on one block of nbytes without a compile, and whether it
 * runs (the fork tests' handles; lw_prefault_end stops it) */
int lw_prefault_start_bytes(size_t nbytes);
int lw_prefault_running(void);
/* run the graph eagerly on ex: node -> value (new dict) */
PyObject *lw_shape_prop(PyObject *gm, PyObject *ex);
/* the same over clones of ex's tensors, the generator left as it was
 * (the graph's writes and draws do not happen); meta_ok: ops of the table
 * run in meta mode (only shapes and strides are read from the values);
 * real_inputs: the placeholders' values are ex's tensors, not the clones */
PyObject *lw_shape_prop_isolated(PyObject *gm, PyObject *ex, int meta_ok, int real_inputs);
/* a CompiledProgram lowering the op graph og of the Python-level graph
 * gm at the samples ex (steals og and ex) */
PyObject *lw_program_from_op_graph(PyObject *gm, PyObject *og, PyObject *ex, stax_backend *be,
                                   int strict, int dynamic, int no_random, PyObject *kcache);
/* dynamic mode: the variant compiled for these inputs' sizes (borrowed) */
Program *lw_find_variant(Program *p, PyObject *const *args, Py_ssize_t nargs);
/* be: the back end that compiles the kernels (a size variant: its
 * program's) */
PyObject *lw_build_program(PyObject *gm, PyObject *ex, stax_backend *be,
                           int strict, int dynamic, PyObject *vals,
                           int no_random, PyObject *kcache);
PyObject *lw_stax_backend_fn(PyObject *mod, PyObject *args,
                             PyObject *kwargs);

#endif
