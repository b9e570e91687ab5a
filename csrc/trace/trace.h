/* Public header of the trace room: the Proxy type, the hybrid tracer, data
 * gates, gate(), stand-ins, side-effect isolation.
 *
 * Python surface: tensorplay._C.trace(fn, args, kwargs=None, names=None)
 * -> TraceResult (graph_module, gates, shape_reads, replay, mutated_inputs,
 * constants); tensorplay._C.gate(v); tensorplay._C.Proxy;
 * tensorplay._C.is_tracing(). */
#ifndef STAX_TRACE_H
#define STAX_TRACE_H

#include "graph/graph.h"

typedef struct StaxTracer StaxTracer;

/* A proxy: a node of the graph being traced plus (in node->meta['val'])
 * its value on the sample. */
typedef struct {
    PyObject_HEAD
    StaxTracer *tracer;   /* strong */
    StaxNode *node;       /* strong */
} StaxProxy;

extern PyTypeObject *StaxProxy_Type;
#define StaxProxy_Check(o) PyObject_TypeCheck((o), StaxProxy_Type)

/* tensorplay._C.trace(fn, args, kwargs, names, lazy, symenv): run fn on
 * stand-ins of args/kwargs (kwargs, names, symenv may be NULL or None)
 * recording its graph (lazy: sample values deferred; symenv: the dynamic
 * shapes' ShapeEnv); a new TraceResult or NULL + the exception fn (or
 * tracing) raised. */
PyObject *stax_trace_run(PyObject *fn, PyObject *args, PyObject *kwargs,
                         PyObject *names, int lazy, PyObject *symenv);

/* Layout-keeping copies of the tensors of seq (the stand-ins of tracing;
 * tensors sharing a storage share one copied storage), other items as
 * they are: a new list, or NULL + exception. A guard replay that writes
 * aliased inputs runs on them. */
PyObject *stax_trace_stand_ins(PyObject *seq);

/* 1 while some trace is running in this interpreter. */
int stax_trace_active(void);

int stax_trace_module_init(PyObject *m);

#endif
