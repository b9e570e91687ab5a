/* Private to the graph core (graph_core.c, graph_node.c): helpers shared
 * by the Graph and Node types. */
#ifndef STAX_GRAPH_INTERNAL_H
#define STAX_GRAPH_INTERNAL_H

#include "graph/graph.h"

/* New reference: dict (ordered set) of the Nodes inside args and kwargs. */
PyObject *stax_graph_input_set(PyObject *args, PyObject *kwargs);
/* New reference: a free name for hint, registered in g->names. */
PyObject *stax_graph_unique_name(StaxGraph *g, PyObject *hint);
/* Position of node n in g's list, or -1. */
Py_ssize_t stax_graph_index(StaxGraph *g, PyObject *n);
/* New empty Node (users and meta allocated), GC-tracked. */
PyObject *stax_graph_node_new_raw(void);
extern PyType_Spec stax_graph_node_spec;

#endif
