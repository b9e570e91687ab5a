"""tensorplay.compile: the entry point (function, bound method or nn.Module; decorator).

Owned by the guards room (placeholder until it lands)."""
