"""tensorplay.compiler: config, set_logs, NativeCompileError, register_backend, list_backends.

Owned by the guards room (placeholder until it lands)."""
