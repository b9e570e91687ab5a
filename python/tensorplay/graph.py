"""tensorplay.graph: Graph, Node, GraphModule (torch.fx-style, in C), the
tracer entry point and gate().

gate(v): inside tracing, keeps a 0-d tensor value as a run-time tensor of the
graph instead of a data gate (seed section 3.6); outside tracing returns v.
"""
from tensorplay import _C

Graph = _C.Graph
Node = _C.Node
GraphModule = _C.GraphModule


def gate(v):
    """Declare that v (a 0-d tensor) only flows into tensor operations: it
    stays a run-time input of the graph; only int()/float() freezes it."""
    g = getattr(_C, "gate", None)
    return v if g is None else g(v)


def trace(fn, args=(), kwargs=None, names=None):
    """Trace fn on stand-ins of args; returns a TraceResult (see docs/capture.md)."""
    return _C.trace(fn, tuple(args), kwargs, names)


__all__ = ["Graph", "Node", "GraphModule", "gate", "trace"]
