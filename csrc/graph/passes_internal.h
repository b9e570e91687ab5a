/* Private header of the graph room's transformation files (passes*.c,
 * decompose_table.c, oplevel.c, functionalize.c). Not part of the room's
 * public surface: only graph.h is.
 *
 * The helpers work on StaxGraph/StaxNode through graph.h's C API
 * (stax_graph_insert_before, stax_node_set_args, ...); the Python Graph and
 * Node objects are views of the same structs for users. */
#ifndef STAX_GRAPH_PASSES_INTERNAL_H
#define STAX_GRAPH_PASSES_INTERNAL_H

#include "graph/graph.h"

/* ---- node opcodes ---------------------------------------------------- */
typedef enum {
    P_PLACEHOLDER = 0,
    P_GET_ATTR,
    P_CALL_FUNCTION,
    P_CALL_METHOD,
    P_CALL_MODULE,
    P_OUTPUT,
    P_UNKNOWN
} p_opcode_t;

/* -1 + TypeError unless graph is a StaxGraph (what the passes edit) */
int stax_graph_p_learn_node_type(PyObject *graph);
int stax_graph_p_is_node(PyObject *o);

p_opcode_t stax_graph_p_opcode(PyObject *node);          /* P_UNKNOWN + err */
const char *stax_graph_p_opcode_str(p_opcode_t op);
PyObject *stax_graph_p_nodes(PyObject *graph);          /* new list */
PyObject *stax_graph_p_attr(PyObject *o, const char *name); /* new ref */
int stax_graph_p_users_count(PyObject *node);          /* -1 on error */
PyObject *stax_graph_p_val(PyObject *node);   /* borrowed meta['val'] or NULL */


/* ---- the op table ----------------------------------------------------- */
const stax_op_info *stax_graph_p_op_by_name(const char *name);
/* The op a node calls. *inplace set when the node calls the in-place twin
 * (add_, operator.iadd). *getitem set for operator.getitem. Returns NULL
 * (no exception) when the target is unknown. */
typedef struct {
    const stax_op_info *info;   /* functional row (or the in-place row) */
    int inplace;                /* node mutates its first argument */
    int is_operator;            /* target is a function of `operator` */
    int getitem;                /* operator.getitem */
    int setitem;                /* operator.setitem */
    int random;                 /* draws random numbers (table or name) */
    int inplace_arg;            /* functional op called with inplace=True */
    const stax_call_info *call; /* a name without an op row (zero_, rand) */
    char name[64];              /* name as written (add_, truediv...) */
} p_opref;
int stax_graph_p_node_opref(PyObject *node, p_opref *out); /* 1 known, 0 not */

/* Schema binding: new tuple of every schema argument (defaults filled). */
PyObject *stax_graph_p_bind(const stax_op_info *op, PyObject *args,
                            PyObject *kwargs);
/* number of schema params; names/types/defaults (borrowed, may be NULL) */
int stax_graph_p_schema_len(const stax_op_info *op);
const char *stax_graph_p_schema_name(const stax_op_info *op, int i);
const char *stax_graph_p_schema_type(const stax_op_info *op, int i);
PyObject *stax_graph_p_schema_default(const stax_op_info *op, int i);
int stax_graph_p_schema_kwonly(const stax_op_info *op, int i);

/* ---- values ---------------------------------------------------------- */
/* Run a call (opcode, target, args, kwargs) on the sample values of the
 * argument nodes. New reference, or NULL with NO exception set when a val
 * is missing or the call fails. */
PyObject *stax_graph_p_run_on_vals(p_opcode_t op, PyObject *target,
                                   PyObject *args, PyObject *kwargs);
/* The same for an op of the table, run through the ops room (what calling
 * its tp.ops.<name>.<overload> object does, without the Python hop). */
PyObject *stax_graph_p_run_op_on_vals(const stax_op_info *op, PyObject *args,
                                      PyObject *kwargs);
/* fn(node) for graph.h's stax_graph_map_arg */
typedef PyObject *(*p_map_fn)(PyObject *node, void *ctx);  /* new ref */
int stax_graph_p_same_meta(PyObject *a, PyObject *b); /* dtype&shape eq */
/* 1 if two sample tensors share storage, 0 if not, -1 unknown */
int stax_graph_p_shares_storage(PyObject *a, PyObject *b);

/* ---- edits ----------------------------------------------------------- */
/* Create a node before `before` (NULL = at the current insert point). */
PyObject *stax_graph_p_insert(PyObject *graph, PyObject *before,
                              const char *opcode, PyObject *target,
                              PyObject *args, PyObject *kwargs,
                              int compute_val);
int stax_graph_p_set_args(PyObject *node, PyObject *args, PyObject *kwargs);
/* Replace every use of node by value (a Node or a constant). */
int stax_graph_p_replace_uses(PyObject *node, PyObject *value);
int stax_graph_p_erase(PyObject *graph, PyObject *node);
/* 1 when the node can raise on values its operands' metadata do not fix
 * (an integer division by zero, an index tensor out of range): DCE keeps
 * it even when its result is dead, since eager raises there too. */
int stax_graph_p_may_raise(PyObject *node);
/* 1 when a tensor operand of the node has a dynamic (symbolic) size: its
 * shape checks (a view's, an index's bounds) hold at the sample's sizes
 * only, so a dead one stays for the next size's shape propagation. */
int stax_graph_p_symbolic_operand(PyObject *node);
/* copy meta['stack'] (the user's source line) from src to dst */
int stax_graph_p_copy_stack(PyObject *dst, PyObject *src);

/* ---- decomposition (decompose_table.c) ------------------------------- */
typedef stax_sexp p_sexp;  /* the ops room's one parser (ops.h) */
/* parsed decomposition of an op, or NULL if none (no exception) */
const p_sexp *stax_graph_p_decomp(const stax_op_info *op);
int stax_graph_p_decomp_check_cycles(void);   /* -1 + RuntimeError */
PyObject *stax_graph_p_check_decompositions_py(PyObject *self, PyObject *args);
/* does the op draw random numbers */
int stax_graph_p_is_random(const stax_op_info *op);
/* the rule may replace this call: every non-tensor argument the rule
 * does not name has its default value */
int stax_graph_p_decomp_applicable(const stax_op_info *op, const p_sexp *t,
                                   PyObject *bound);
/* Evaluate a rule: emit(opname, args, ctx) creates one node (new ref). */
typedef PyObject *(*p_emit_fn)(const char *opname, PyObject *args,
                               void *ctx);
PyObject *stax_graph_p_eval_decomp(const p_sexp *t, const stax_op_info *op,
                                   PyObject *bound, p_emit_fn emit,
                                   void *ctx);

/* ---- the passes ------------------------------------------------------ */
typedef struct {
    PyObject *gm;
    PyObject *graph;
    PyObject *msg;       /* list of str: what changed (for the log) */
    int round;
} p_pass_ctx;

int stax_graph_p_decompose_pass(p_pass_ctx *c);   /* 1 changed, 0, -1 */
int stax_graph_p_cse(p_pass_ctx *c);

/* message helpers */
int stax_graph_p_note(p_pass_ctx *c, const char *fmt, ...);

/* ---- op level (oplevel*.c, functionalize.c) -------------------------- */
PyObject *stax_graph_p_make_op_graph(PyObject *self, PyObject *args,
                                     PyObject *kwargs);

typedef struct {
    PyObject *graph;        /* the new op graph */
    PyObject *basis;        /* set of op names, or NULL: the default basis */
    PyObject *state;        /* key -> list, see functionalize.c */
    PyObject *ver;          /* root key -> int (mutations so far) */
    PyObject *alias;        /* Python node -> Python node it aliases */
    PyObject *placeholders; /* list of (key, op placeholder) in order */
    PyObject *cur_py;       /* Python node being lowered (borrowed) */
    int depth;              /* decomposition depth (Prop. 4.3 guard) */
    PyObject *known_val;    /* the traced value of the op the next
                               p_emit_op emits as one node (borrowed, or
                               NULL: emitting computes it on the samples) */
    int keep_dead;          /* skip DCE (values overwritten in place stay) */
} p_op_ctx;

/* oplevel.c: one node tp.ops.<opname>.<ovl>(*args, **kwargs). mutating:
 * the node writes into args[0] (no val computed by running it). */
PyObject *stax_graph_p_emit(p_op_ctx *c, const char *opname, const char *ovl,
                            PyObject *args, PyObject *kwargs, int mutating);
/* oplevel_overload.c: basis, overloads, argument lists */
int stax_graph_p_in_basis(p_op_ctx *c, const stax_op_info *op);
int stax_graph_p_is_number(PyObject *o);
void stax_graph_p_choose_overload(const stax_op_info *op, PyObject *bound,
                                  char *buf, size_t n);
/* positional args and kwargs of the call, trailing defaults dropped */
int stax_graph_p_call_args(const stax_op_info *op, const char *ovl,
                           PyObject *bound, PyObject **pargs,
                           PyObject **pkw);
/* marks an op-graph node whose arguments are sizes of the samples
 * (as_strided of a view outside the table): the graph holds at those sizes
 * only (see stax_graph_op_graph_sample_sized) */
int stax_graph_p_mark_sample_sized(PyObject *node);
/* oplevel_print.c: the OpGraphModule type (borrowed, made once) */
PyObject *stax_graph_p_opgm(void);
/* oplevel_index.c */
/* one view step: value = op(current(parent), *tail); registers key */
PyObject *stax_graph_p_view_step(p_op_ctx *c, PyObject *key,
                                 PyObject *parent, const char *op,
                                 const char *ovl, PyObject *tail,
                                 PyObject *view_val);
/* x[idx] on a tensor: a chain of select / slice / unsqueeze views */
int stax_graph_p_lower_index(p_op_ctx *c, PyObject *n, PyObject *x,
                             PyObject *idx);
/* functionalize.c */
int stax_graph_fz_root(p_op_ctx *c, PyObject *key, PyObject *value);
int stax_graph_fz_view(p_op_ctx *c, PyObject *key, PyObject *parent,
                       const char *opname, const char *ovl, PyObject *tail,
                       PyObject *value, PyObject *view_val);
PyObject *stax_graph_fz_current(p_op_ctx *c, PyObject *key);   /* new */
int stax_graph_fz_assign(p_op_ctx *c, PyObject *key, PyObject *value);
int stax_graph_fz_alias(p_op_ctx *c, PyObject *key, PyObject *target);
PyObject *stax_graph_fz_resolve(p_op_ctx *c, PyObject *key);   /* borrowed */
int stax_graph_fz_writeback(p_op_ctx *c);
/* 1 when key's value is a view functionalization tracks, 0 a root */
int stax_graph_fz_is_view(p_op_ctx *c, PyObject *key);
/* -1 with the error stax_graph_fz_unsafe_write() recognizes */
int stax_graph_fz_unsafe_raise(PyObject *what);

#endif
