"""tensorplay.random: the Philox generator's state and fork_rng().

The stream (Philox4x32-10, counter layout, transforms to uniform/normal) is
documented in docs/rng.md and csrc/tensor/tensor.h."""
import contextlib
import threading

from tensorplay import _C

__all__ = ["manual_seed", "seed", "initial_seed", "get_rng_state", "set_rng_state",
           "fork_rng", "default_generator"]

default_generator = _C.default_generator


# while tp.compile traces a function: the manual_seed calls it makes, as
# (seed, whether the generator had moved since the trace began) (the
# compile driver replays them on every call of the compiled function)
_trace_seeds = threading.local()


def manual_seed(seed):
    """Seed the default generator; returns it."""
    s = int(seed)
    log = getattr(_trace_seeds, "log", None)
    if log is not None and _C.is_tracing():
        log.append((s, default_generator.get_state().tolist() != _trace_seeds.state0))
    return default_generator.manual_seed(s)


def seed():
    return default_generator.seed()


def initial_seed():
    return default_generator.initial_seed()


def get_rng_state():
    """16-byte uint8 tensor: little-endian seed then Philox offset."""
    return default_generator.get_state()


def set_rng_state(new_state):
    default_generator.set_state(new_state)


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices",
             device_type="cpu"):
    """Save the default generator's state and restore it on exit."""
    if not enabled:
        yield
        return
    state = default_generator.get_state()
    try:
        yield
    finally:
        default_generator.set_state(state)
