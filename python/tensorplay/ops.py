"""tp.ops.<name>.<overload>: op overload objects of the op table.

Owned by the ops room (placeholder until it lands)."""
