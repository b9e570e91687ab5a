#include "graph/graph.h"
int
stax_graph_module_init(PyObject *m)
{
    (void)m;
    return 0;
}
