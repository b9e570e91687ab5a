#include "graph/graph.h"
int
stax_graph_module_init(PyObject *m)
{
    (void)m;
    return stax_graph_passes_init(m);
}
