"""Public op functions (tp.exp, tp.sum, tp.matmul, tp.cat, tp.where, ...), from the op table.

Owned by the ops room (placeholder until it lands)."""
