/* Public header of the graph room: Graph, Node, GraphModule (FX-style),
 * the front-end passes, the op-level graph, decomposition and
 * functionalization. */
#ifndef STAX_GRAPH_H
#define STAX_GRAPH_H

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
    struct StaxGraph *graph;   /* borrowed; NULL once erased */
} StaxNode;

extern PyTypeObject *StaxNode_Type;
extern PyTypeObject *StaxGraph_Type;
extern PyTypeObject *StaxGraphModule_Type;

/* New reference: list of the graph's nodes in (topological) order. */
PyObject *stax_graph_node_list(PyObject *graph);

int stax_graph_module_init(PyObject *m);

/* ---- passes (owned by the passes room: passes*.c, oplevel.c,
 * functionalize.c, decompose_table.c) ----------------------------------
 * Registers tensorplay._C.run_frontend_passes and make_op_graph and checks
 * the decomposition table for cycles; called by stax_graph_module_init. */
int stax_graph_passes_init(PyObject *m);

#endif
