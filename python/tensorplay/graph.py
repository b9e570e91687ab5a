"""tensorplay.graph: Graph, Node, GraphModule, gate().

Owned by the trace/graph room (placeholder until it lands)."""
