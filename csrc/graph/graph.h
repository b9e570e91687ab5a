/* Public header of the graph room: Graph, Node, GraphModule (FX-style),
 * the front-end passes, the op-level graph, decomposition and
 * functionalization.
 *
 * Core (trace room): a Graph owns a Python list of its nodes in
 * (topological) order; every Node keeps `users` up to date when its args or
 * kwargs change; names are unique in a graph (rule: the base name if it is
 * free and shadows no Python builtin/keyword, else the first free
 * base_0, base_1, ...; erasing a node frees its name). */
#ifndef STAX_GRAPH_H
#define STAX_GRAPH_H

#include <stdint.h>
#include "ops/ops.h"

typedef enum {
    STAX_NODE_PLACEHOLDER = 0,
    STAX_NODE_GET_ATTR,
    STAX_NODE_CALL_FUNCTION,
    STAX_NODE_CALL_METHOD,
    STAX_NODE_CALL_MODULE,
    STAX_NODE_OUTPUT
} stax_node_op_t;

struct StaxGraph;

typedef struct StaxNode {
    PyObject_HEAD
    stax_node_op_t op;
    PyObject *name;      /* str, unique in its graph */
    PyObject *target;    /* callable (call_function) or str */
    PyObject *args;      /* tuple; may nest Nodes in tuples/lists/dicts */
    PyObject *kwargs;    /* dict */
    PyObject *users;     /* dict Node -> None, kept up to date */
    PyObject *meta;      /* dict: 'val' (sample value), 'stack', 'region' */
    struct StaxGraph *graph;   /* borrowed; NULL once erased or graph gone */
} StaxNode;

typedef struct StaxGraph {
    PyObject_HEAD
    PyObject *nodes;        /* list of StaxNode in order (strong) */
    PyObject *names;        /* set of names in use */
    PyObject *insert_node;  /* anchor of the insertion point or NULL */
    int insert_mode;        /* 0: append at end, 1: before anchor, 2: after */
    uint64_t version;       /* bumped by every change (GraphModule recompile) */
    PyObject *weakreflist;
} StaxGraph;

typedef struct {
    PyObject_HEAD
    PyObject *graph;       /* StaxGraph (strong) */
    PyObject *dict;        /* attributes: get_attr targets, user data */
    PyObject *code;        /* cached source or NULL */
    PyObject *forward;     /* cached function forward(self, ...) or NULL */
    PyObject *globals;     /* globals of the generated code */
    uint64_t code_version;
    PyObject *weakreflist;
} StaxGraphModule;

extern PyTypeObject *StaxNode_Type;
extern PyTypeObject *StaxGraph_Type;
extern PyTypeObject *StaxGraphModule_Type;

#define StaxNode_Check(o) PyObject_TypeCheck((o), StaxNode_Type)
#define StaxGraph_Check(o) PyObject_TypeCheck((o), StaxGraph_Type)
#define StaxGraphModule_Check(o) PyObject_TypeCheck((o), StaxGraphModule_Type)

/* "placeholder", "call_function", ... (static C string) */
const char *stax_node_op_name(stax_node_op_t op);
/* -1 + ValueError for an unknown opcode string */
int stax_node_op_from_name(const char *s, stax_node_op_t *out);

/* New reference: list of the graph's nodes in (topological) order. */
PyObject *stax_graph_node_list(PyObject *graph);

/* New (empty) graph; new reference. */
PyObject *stax_graph_new(void);

/* Create a node at the graph's insertion point. target: borrowed; args: a
 * tuple or NULL; kwargs: a dict or NULL; name: base name hint or NULL
 * (derived from the target). New reference (the graph holds another). */
StaxNode *stax_graph_create_node(StaxGraph *g, stax_node_op_t op,
                                 PyObject *target, PyObject *args,
                                 PyObject *kwargs, PyObject *name);
/* The same, created right before `before` (NULL: at the graph's insertion
 * point); the insertion point is left as it was. */
StaxNode *stax_graph_insert_before(StaxGraph *g, StaxNode *before,
                                   stax_node_op_t op, PyObject *target,
                                   PyObject *args, PyObject *kwargs,
                                   PyObject *name);
/* Remove a node without users; -1 + RuntimeError if it still has users. */
int stax_graph_erase_node(StaxGraph *g, StaxNode *n);
/* Set args/kwargs (either may be NULL = unchanged), users kept up to date. */
int stax_node_set_args(StaxNode *n, PyObject *args, PyObject *kwargs);
/* Redirect every use of n to repl (a Node or a constant). */
int stax_node_replace_all_uses_with(StaxNode *n, PyObject *repl);
/* The one walk over nested containers (trace, graph and program use it):
 * leaf(o, ctx) returns o's replacement (new reference), or NULL with no
 * exception set when o is no leaf; then tuples, lists, dict values and
 * slice fields are walked (exact: only exact tuple/list/dict, subclasses
 * are kept; else subclasses too, rebuilt as the base type) and anything
 * else is kept. New reference or NULL + exception. */
typedef PyObject *(*stax_leaf_fn)(PyObject *o, void *ctx);
PyObject *stax_graph_map_leaves(PyObject *obj, int exact, stax_leaf_fn leaf,
                                void *ctx);
/* New reference: obj with every Node replaced by fn(node, ctx) (new ref). */
PyObject *stax_graph_map_arg(PyObject *obj,
                             PyObject *(*fn)(PyObject *node, void *ctx),
                             void *ctx);
/* Append to `out` (a dict used as ordered set) every Node inside obj. */
int stax_graph_collect_nodes(PyObject *obj, PyObject *out);
/* 0 ok, -1 + RuntimeError describing the first inconsistency */
int stax_graph_lint(StaxGraph *g);
/* 1 if the node writes its first argument: an in-place op (add_, setitem,
 * zero_ ...) or a functional op called with inplace=True; else 0 */
int stax_graph_node_is_inplace(PyObject *node);
/* What a node writes, by the op table: its first argument through an
 * in-place op (an in-place twin or row: add_, copy_, uniform_; operator.iadd;
 * an unknown name ending in one '_': zero_), through operator.setitem, or
 * through a functional op's inplace=True; NONE when it writes nothing. */
typedef enum {
    STAX_WRITES_NONE = 0,
    STAX_WRITES_INPLACE,
    STAX_WRITES_SETITEM,
    STAX_WRITES_INPLACE_ARG
} stax_node_writes_t;
stax_node_writes_t stax_graph_node_writes(PyObject *node);

/* GraphModule over a graph (borrowed); new reference. */
PyObject *stax_graph_module_new(PyObject *graph);

int stax_graph_module_init(PyObject *m);

/* internal to the graph core (graph_*.c) */
int stax_graph_core_init(PyObject *m);   /* registers Node/Graph/GraphModule */
int stax_graph_print_init(PyObject *m);
int stax_graph_gm_init(PyObject *m);
PyObject *stax_graph_format_node(StaxNode *n);
PyObject *stax_graph_str(StaxGraph *g);
/* New reference: Python source of forward; fills globals (a dict). */
PyObject *stax_graph_codegen(StaxGraph *g, PyObject *globals);

/* ---- passes (owned by the passes room: passes*.c, oplevel.c,
 * functionalize.c, decompose_table.c) ----------------------------------
 * Registers tensorplay._C.run_frontend_passes and make_op_graph and checks
 * the decomposition table for cycles; called by stax_graph_module_init. */
int stax_graph_passes_init(PyObject *m);
/* tensorplay._C.run_frontend_passes(gm, log, max_rounds, lint): rewrites gm
 * (a GraphModule or a Graph) in place; log: callable taking one str per
 * change, or NULL. New reference to gm or NULL. */
PyObject *stax_graph_run_frontend_passes(PyObject *gm, PyObject *log,
                                         int max_rounds, int lint);
/* tensorplay._C.make_op_graph(gm, basis): the op-level graph (seed 4.8), a
 * new GraphModule calling tp.ops overloads only, functionalized and
 * decomposed against basis (an iterable of op names, or NULL/None for
 * the op table's). New reference or NULL. */
PyObject *stax_graph_make_op_graph(PyObject *gm, PyObject *basis);
/* make_op_graph of gm at other samples: vals maps gm's nodes to their
 * values for other inputs (shape propagation), NULL: the traced ones */
PyObject *stax_graph_make_op_graph_at(PyObject *gm, PyObject *vals);
/* 1 when an op graph holds nodes whose arguments are its samples' sizes
 * (as_strided standing for a view outside the op table, an expand to a
 * written view's shape): it is that size's graph only, and other sizes
 * need make_op_graph_at; 0; -1 with an exception */
int stax_graph_op_graph_sample_sized(PyObject *og);
/* 1 when the error set is make_op_graph's for an in-place write through a
 * view functionalization has no inverse for (an expanded view): lowering
 * must not fall back to the Python-level graph, which would write a copy */
int stax_graph_fz_unsafe_write(void);

/* tensorplay._C.min_cut_partition and _maxflow (partition.c): the
 * rematerialization min cut of a joint forward+backward graph */
int stax_graph_partition_init(PyObject *m);

#endif
