"""tensorplay.nn.functional: the same functions as tensorplay.functional.

Owned by the ops room (placeholder until it lands)."""
