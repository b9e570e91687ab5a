/* Room init of csrc/graph: the core (Graph, Node, GraphModule: trace room)
 * first, then the passes (graph room) register here. */
#include "graph/graph.h"

int
stax_graph_module_init(PyObject *m)
{
    if (stax_graph_core_init(m) < 0) {
        return -1;
    }
    if (stax_graph_passes_init(m) < 0) {
        return -1;
    }
    return stax_graph_partition_init(m);
}
