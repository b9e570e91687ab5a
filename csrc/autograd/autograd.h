/* Public header of the autograd room: the eager engine (grad_fn graph of
 * Nodes, backward, accumulation into leaves' .grad, tensor hooks, version
 * checks on saved tensors) and the derivative formulas (the op table's
 * derivative column, STAX_OP_DERIV rows of ops.def keyed by op id). The room hooks the ops room's dispatcher
 * (stax_ops_set_autograd_hook) so every op records its history when grad
 * mode is on, and wraps the tensor room's view methods and indexing slots. */
#ifndef STAX_AUTOGRAD_H
#define STAX_AUTOGRAD_H

#include "ops/ops.h"

/* Node: tensorplay.autograd.graph.Node (grad_fn objects) */
extern PyTypeObject *StaxGradNode_Type;

/* room init: Node type, formulas, dispatcher hook, wrapped Tensor methods,
 * _C._autograd_* functions. After the ops room's init. */
int stax_autograd_module_init(PyObject *m);

#endif
