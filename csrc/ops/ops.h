/* Public header of the ops room: THE op table (ops.def), the eager
 * dispatcher, and the installer giving Tensor its methods and number slots.
 *
 * ops.def is an X-macro list, one row per op:
 *   STAX_OP(ID, name, KIND, arity, "schema", "overloads",
 *           "inplace_twin"|NULL, "formula"|NULL, "decomposition"|NULL, flags)
 * schema: PyTorch-style argument list, e.g.
 *   "(Tensor self, Tensor other, *, Scalar alpha=1)"; stax_op_bind() uses it
 *   to turn any (args, kwargs) of a call into the canonical argument tuple.
 * Every macro defaults to empty where it is included; #undef at its end.
 *
 * Formula / decomposition language: S-expressions.
 *   atoms: a b c d (tensor operands by position), numbers (1.5, 0, -2,
 *          inf, nan), $name (a scalar argument of the op, e.g. $alpha,
 *          $negative_slope, $min, $max).
 *   formula: (prim arg ...) over the loop-IR scalar primitives
 *     add sub mul div neg abs sign exp exp2 expm1 log log2 log10 log1p sqrt
 *     rsqrt sin cos tan tanh sinh cosh asin acos atan atan2 erf erfc floor
 *     ceil round trunc pow fmod remainder floordiv max min maxnan minnan
 *     eq ne lt le gt ge and or xor not where isnan isinf isfinite
 *     bitand bitor bitxor bitnot shl shr
 *     (maxnan/minnan propagate NaN as PyTorch's maximum/relu/clamp do;
 *      arithmetic is done in the op's computation dtype).
 *   decomposition: (op arg ...) over op-table names (mul, sub, exp, where,
 *     gt, expm1, ...), used by the graph room's DecomposePass; constants
 *     appear where the math puts them (normalization moves them right).
 *     A decomposition holds for the schema defaults of the arguments it
 *     does not mention ($name): a pass must skip the rule when such an
 *     argument differs from its default (e.g. mse_loss with reduction='sum').
 *     An argument of an op in a decomposition is positional in the schema
 *     order of that op: (clamp a 0 6) = clamp(a, min=0, max=6).
 *   (case $arg v1 e1 v2 e2 ...): the expression chosen by a string/None
 *     argument (gelu's approximate, div's rounding_mode), in formulas only.
 *   Reductions: the formula is the combine function (a = accumulator,
 *     b = element); mean/var/std/norm/logsumexp finish as their names say.
 *   Atom-only formulas ("a") are copies/casts (clone, _to_copy, contiguous).
 *
 * In-place ops: every row with an in-place twin ("add_") also answers
 * stax_op_by_name("add_") with an info whose flags hold STAX_OPF_INPLACE,
 * whose id is the out-of-place row's id and whose .inplace names the
 * out-of-place op ("add"). Rows that only exist in place (copy_) carry
 * STAX_OPF_INPLACE themselves; the mutated argument is always argument 0.
 */
#ifndef STAX_OPS_H
#define STAX_OPS_H

#include "tensor/tensor.h"

typedef enum {
    STAX_OPK_POINTWISE = 0,
    STAX_OPK_REDUCTION,
    STAX_OPK_VIEW,
    STAX_OPK_COMPOSITE,   /* has a decomposition or a fused lowering */
    STAX_OPK_RANDOM,
    STAX_OPK_EXTERN,      /* library call: matmul, ... */
    STAX_OPK_OTHER        /* creation, indexing, cat, ... */
} stax_op_kind_t;

/* flags */
#define STAX_OPF_COMMUTATIVE   (1u << 0)
#define STAX_OPF_IDENTITY_0    (1u << 1)  /* x op 0 == x (add, sub)   */
#define STAX_OPF_IDENTITY_1    (1u << 2)  /* x op 1 == x (mul, div)   */
#define STAX_OPF_INPLACE       (1u << 3)  /* the row is an in-place op */
#define STAX_OPF_COMPARISON    (1u << 4)  /* result dtype bool */
#define STAX_OPF_FLOAT_RESULT  (1u << 5)  /* ints promote to default float (exp, div, ...) */
#define STAX_OPF_NONDETERMINISTIC (1u << 6) /* random: never CSE'd */
#define STAX_OPF_OPERATOR      (1u << 7)  /* has a Python operator (operator.add ...) */
#define STAX_OPF_METHOD        (1u << 8)  /* Tensor method */
#define STAX_OPF_FUNCTION      (1u << 9)  /* tensorplay.<name> / tensorplay.functional.<name> */
#define STAX_OPF_NNF           (1u << 10) /* listed in tensorplay.nn.functional's surface */
#define STAX_OPF_MULTI_OUT     (1u << 11) /* returns a tuple (max.dim, var_mean, native_layer_norm, split) */
#define STAX_OPF_INT_OK        (1u << 12) /* integral inputs keep their dtype (floor, abs, ...) */
#define STAX_OPF_KEEP_WHOLE    (1u << 13) /* DecomposePass keeps it whole (numerics, or a fused kernel) */
/* the layout of an elementwise result when it is not TensorIterator's (the
 * operands' stride order): torch builds these on empty_like(self) (its
 * strides when dense) or on a row-major clone of self */
#define STAX_OPF_LAYOUT_LIKE   (1u << 14) /* nan_to_num, hardtanh, relu6 */
#define STAX_OPF_LAYOUT_CONTIG (1u << 15) /* masked_fill */
/* shorthands used in ops.def */
#define STAX_OPF_MF  (STAX_OPF_METHOD | STAX_OPF_FUNCTION)
#define STAX_OPF_FP  (STAX_OPF_METHOD | STAX_OPF_FUNCTION | STAX_OPF_FLOAT_RESULT)
#define STAX_OPF_CMP (STAX_OPF_METHOD | STAX_OPF_FUNCTION | STAX_OPF_COMPARISON)
#define STAX_OPF_ACT (STAX_OPF_FUNCTION | STAX_OPF_NNF | STAX_OPF_FLOAT_RESULT)

typedef enum {
#define STAX_OP(ID, name, KIND, arity, schema, ovl, inpl, formula, decomp, flags) STAX_OP_##ID,
#include "ops/ops.def"
    STAX_OP_COUNT,
    STAX_OP_NONE = -1      /* a Python operator no op means (lshift) */
} stax_op_id_t;

typedef struct {
    stax_op_id_t id;
    const char *name;          /* PyTorch name */
    stax_op_kind_t kind;
    int arity;                 /* tensor operands */
    const char *schema;        /* "(Tensor self, int[]? dim=None, ...)" */
    const char *overloads;     /* comma list: "Tensor,Scalar" */
    const char *inplace;       /* in-place twin or NULL */
    const char *formula;       /* scalar formula or NULL */
    const char *decomp;        /* decomposition or NULL */
    unsigned flags;
} stax_op_info;

extern const stax_op_info stax_op_table[STAX_OP_COUNT];

/* The derivative column (STAX_OP_DERIV rows of ops.def), indexed by op id:
 * every op has one ("nondiff", "notimpl" or a formula; the language is
 * described in ops.def). csrc/autograd/ parses it. */
extern const char *const stax_op_derivative[STAX_OP_COUNT];

/* 1 when the op's derivative row is "nondiff": its outputs never require
 * grad (detach, comparisons, zeros_like, rand_like, ...). */
int stax_op_nondiff(const stax_op_info *op);

/* The lowering column (STAX_OP_LOWER rows of ops.def): the rule of
 * csrc/lower/ that lowers an op, indexed by op id. */
typedef enum {
    STAX_LOWER_NONE = 0,      /* no rule: decomposed first, else eager */
    STAX_LOWER_FORMULA,       /* pointwise: the op's scalar formula */
    STAX_LOWER_CAST,          /* a copy in the result dtype (to, clone, ...) */
    STAX_LOWER_REDUCTION,
    STAX_LOWER_SOFTMAX,       /* softmax, log_softmax */
    STAX_LOWER_LAYER_NORM,    /* layer_norm, native_layer_norm */
    STAX_LOWER_BATCH_NORM,
    STAX_LOWER_VIEW,          /* an index map (getitem of a tuple: its item) */
    STAX_LOWER_MATMUL,        /* an extern library call */
    STAX_LOWER_CAT,           /* cat, stack */
    STAX_LOWER_PAD,
    STAX_LOWER_GATHER,        /* index_select, gather, embedding */
    STAX_LOWER_SCATTER,       /* slice_scatter, select_scatter */
    STAX_LOWER_TRI,           /* tril, triu */
    STAX_LOWER_FILL_LIKE,     /* zeros_like, ones_like, full_like */
    STAX_LOWER_ONE_HOT,       /* (x == j) at the new last index */
    STAX_LOWER_UNFOLD,        /* im2col: a masked index map */
    STAX_LOWER_RANDOM
} stax_lower_rule_t;
extern const stax_lower_rule_t stax_op_lower[STAX_OP_COUNT];

/* An S-expression of the formula / decomposition language (above): a list
 * of items, or an atom's text. */
typedef struct stax_sexp stax_sexp;
struct stax_sexp {
    int is_list;
    char *atom;            /* atom text when !is_list */
    int n;                 /* list length */
    stax_sexp **items;
};
/* Parse one expression of text (the rest is ignored): a new tree, or NULL
 * (malformed; MemoryError set when out of memory). */
stax_sexp *stax_sexp_parse(const char *text);
void stax_sexp_free(stax_sexp *s);
/* The row's scalar formula / decomposition, parsed once and cached per op
 * (an in-place twin's info answers its row's); NULL when the row has none
 * or it does not parse. Borrowed, lives as long as the process. */
const stax_sexp *stax_op_formula_tree(const stax_op_info *op);
const stax_sexp *stax_op_decomp_tree(const stax_op_info *op);

/* NULL if none; "add_" gives the in-place info of add (see above). */
const stax_op_info *stax_op_by_name(const char *name);
/* NULL if name is not one of op's overloads ("Tensor", "default", ...) */
int stax_op_has_overload(const stax_op_info *op, const char *overload);
/* Map a graph node's (opcode, target) to its op: "call_function" with
 * operator.add / tensorplay.functional.relu / tp.ops.add.Tensor, or
 * "call_method" with "sum". Borrowed; NULL (no exception) if unknown. */
const stax_op_info *stax_op_for_target(const char *opcode, PyObject *target);

/* Bind a call's (args, kwargs) to the op's schema: new reference to a
 * tuple holding every schema argument in order, defaults filled in.
 * -1/NULL + TypeError naming the op and the argument on mismatch. */
PyObject *stax_op_bind(const stax_op_info *op, PyObject *args, PyObject *kwargs);

/* Run the op eagerly (what tensorplay.<name>(*args, **kwargs) does,
 * __tensor_function__ included). New reference or NULL. */
PyObject *stax_op_call(const stax_op_info *op, PyObject *args, PyObject *kwargs);

/* The public function object of an op (tensorplay.functional.<name>), or
 * the tp.ops.<name> packet; borrowed, NULL (no exception) if none. */
PyObject *stax_op_function(const stax_op_info *op);

/* The row named name itself (never an in-place twin's info); NULL if none.
 * "copy_" finds its row, "add_" does not (add_ is add's twin). */
const stax_op_info *stax_op_row(const char *name);
/* The row of an op-level node's overload tag (meta['op_overload']):
 * "add.Scalar" -> add's row, *overload (may be NULL) pointing at "Scalar"
 * inside tag ("" when tag has no dot). Rows only, as stax_op_row: NULL for
 * "add_.Tensor" and for names of no row. */
const stax_op_info *stax_op_by_overload(const char *tag, const char **overload);
/* An op's schema, parsed once at load (what stax_op_bind binds with). */
#define STAX_OP_MAX_PARAMS 12

typedef struct {
    char name[32];
    char type[24];        /* "Tensor", "int[1]", "Scalar?" */
    PyObject *dflt;       /* strong; NULL = required */
    char dflt_text[32];   /* the default as ops.def writes it ("[]", "'mean'") */
    unsigned kwonly : 1;
    unsigned is_tensor : 1;
    unsigned is_tensor_list : 1;
    unsigned is_list : 1;
    unsigned optional : 1;
} stax_op_param;

typedef struct {
    int n;        /* parameters */
    int npos;     /* positional ones (before '*') */
    stax_op_param params[STAX_OP_MAX_PARAMS];
} stax_op_schema;

/* The parsed schema of op (an in-place twin's is its row's); borrowed. */
const stax_op_schema *stax_ops_schema(const stax_op_info *op);
/* The position of the parameter `name` in op's schema ("dim" of sum: 1),
 * -1 if it has none; the position of its value in stax_op_bind's tuple. */
int stax_op_param_index(const stax_op_info *op, const char *name);
/* The in-place twin's info of a row ("add" -> "add_"), NULL if none. */
const stax_op_info *stax_op_inplace(const stax_op_info *op);

/* ---- Python operators (the STAX_PYOP rows of ops.def) ---- */
#define STAX_PYOPF_FOLD     (1u << 0)  /* ConstFold may run it on constants */
#define STAX_PYOPF_SLOT     (1u << 1)  /* a number slot / rich comparison   */

typedef enum {
#define STAX_PYOP(KEY, fn, ifn, OP, sym, arity, flags) STAX_PYOP_##KEY,
#include "ops/ops.def"
    STAX_PYOP_COUNT
} stax_pyop_key_t;

typedef struct {
    stax_pyop_key_t key;
    const char *fn;        /* operator.<fn>: "add", "and_", "pos" */
    const char *ifn;       /* operator.<ifn>, the in-place form, or NULL */
    stax_op_id_t op;       /* the op it means, STAX_OP_NONE if none */
    const char *sym;       /* "+", "//", "~": how printers spell it; or NULL */
    int arity;             /* operands of operator.<fn> */
    unsigned flags;        /* STAX_PYOPF_* */
} stax_pyop_info;

extern const stax_pyop_info stax_pyop_table[STAX_PYOP_COUNT];

/* The row of operator.<name>; *inplace (may be NULL) set when name is the
 * in-place form ("iadd"). NULL if name is no operator of the table. */
const stax_pyop_info *stax_pyop_by_fn(const char *name, int *inplace);
/* The row of the function object operator.<fn> (identity); NULL if none. */
const stax_pyop_info *stax_pyop_for_target(PyObject *target, int *inplace);
/* The first row meaning op (out of place), NULL if none: bitwise_not ->
 * invert, div -> truediv. */
const stax_pyop_info *stax_pyop_of_op(stax_op_id_t op);
/* operator.<fn> (or operator.<ifn> when inplace), borrowed; NULL when the
 * row has no such form. */
PyObject *stax_pyop_function(const stax_pyop_info *p, int inplace);
/* The op a row means: the out-of-place row, or its in-place twin's info
 * when inplace; NULL if none (lshift, imatmul). */
const stax_op_info *stax_pyop_op(const stax_pyop_info *p, int inplace);

/* ---- call targets without a row (the STAX_CALL rows of ops.def) ---- */
typedef enum {
    STAX_CALLK_ALIAS,      /* another spelling of op (x.divide, x.float)  */
    STAX_CALLK_FACTORY,    /* zeros/ones/full/empty/rand/randn/arange     */
    STAX_CALLK_VIEW,       /* movedim/moveaxis/diagonal                   */
    STAX_CALLK_FILL,       /* zero_/fill_: a constant written in place    */
    STAX_CALLK_SIZE,       /* x.size(...)                                 */
    STAX_CALLK_RANDOM,     /* randint/normal/random_...: draws            */
} stax_call_kind_t;

typedef enum {
    STAX_CALL_NONE = -1,
#define STAX_CALL(KEY, name, OP, KIND) STAX_CALL_##KEY,
#include "ops/ops.def"
    STAX_CALL_COUNT
} stax_call_key_t;

typedef struct {
    stax_call_key_t key;
    const char *name;
    stax_op_id_t op;       /* ALIAS: the op; FACTORY: its random op; NONE */
    stax_call_kind_t kind;
} stax_call_info;

extern const stax_call_info stax_call_table[STAX_CALL_COUNT];

/* The row of a call target's name ("divide", "zeros", "zero_"; an
 * ".overload" suffix is ignored); NULL if none. Resolve once per node, then
 * switch on ->key / ->kind. */
const stax_call_info *stax_call_by_name(const char *name);

/* Autograd: when a hook is set and grad mode is on, every op call (after
 * __tensor_function__ dispatch) goes through the hook, which runs the op
 * through `kernel` and records the result's history (csrc/autograd/). */
typedef PyObject *(*stax_op_kernel_t)(const stax_op_info *op, PyObject *func,
                                      PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames);
typedef PyObject *(*stax_autograd_hook_t)(const stax_op_info *op,
                                          PyObject *func,
                                          PyObject *const *args,
                                          size_t nargsf, PyObject *kwnames,
                                          stax_op_kernel_t kernel);
void stax_ops_set_autograd_hook(stax_autograd_hook_t hook);

/* Read hook (the tracer's check of eager reads of tensors it holds as
 * constants): while set on this thread, every op call that runs its kernel
 * (no __tensor_function__ override among its operands) first passes each
 * tensor operand (also those in a list or tuple argument) to hook(t). The
 * hook must not raise. NULL removes it. */
typedef void (*stax_ops_read_hook_t)(StaxTensor *t);
void stax_ops_set_read_hook(stax_ops_read_hook_t hook);

/* Meta evaluation (the tracer's deferred samples): calls
 * callable(*args, **kwargs) when the call goes straight to an op of the
 * table whose eager C kernel can give its result's metadata without
 * computing it (pointwise and reduction ops out of place: every check and
 * error of eager, the result allocated with eager's shape, dtype and
 * strides, its elements left unset). New reference to the result, or NULL
 * with eager's own error, or Py_NotImplemented (new reference) when the call
 * needs the operands' values (an integer division's zero check, a Python
 * implementation, an in-place op, __tensor_function__): nothing ran then.
 * stax_ops_meta_target says whether a call target may go through it. */
PyObject *stax_ops_meta_call(PyObject *callable, PyObject *args,
                             PyObject *kwargs);
int stax_ops_meta_target(PyObject *target);

/* tp.autocast: 1 while a Python autocast hook is installed (some thread
 * is inside an enabled autocast region). Compiled functions take their
 * Python dispatch path then (csrc/guards/dispatch.c), which runs such
 * calls eagerly. */
int stax_ops_autocast_active(void);

int stax_ops_module_init(PyObject *m);

#endif
