"""Logging topics of the compiler, through Python's logging.

TENSORPLAY_LOGS=recompiles,graph,passes,kernels,guards,cache,dynamic,partition (comma list) or
tp.compiler.set_logs(recompiles=True, ...). Each topic is the logger
``tensorplay.<topic>``; a StreamHandler to stderr is put on the ``tensorplay``
logger once, if it has none."""
import logging
import os
import sys

__all__ = ["set_logs", "TOPICS", "logger", "enabled"]

TOPICS = ("recompiles", "graph", "passes", "kernels", "guards", "cache", "dynamic", "partition")
_on = {t: False for t in TOPICS}
_root = logging.getLogger("tensorplay")
_loggers = {t: logging.getLogger("tensorplay." + t) for t in TOPICS}


class _StderrHandler(logging.StreamHandler):
    """Writes to the sys.stderr of the moment (so redirection works)."""

    def __init__(self):
        super().__init__()

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _ensure_handler():
    if not _root.handlers:
        h = _StderrHandler()
        h.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
        _root.addHandler(h)


def set_logs(**topics):
    """Turn topics on or off: set_logs(recompiles=True, graph=False)."""
    for name, on in topics.items():
        if name not in _on:
            raise ValueError(f"unknown log topic {name!r}; topics: {', '.join(TOPICS)}")
        _on[name] = bool(on)
        _loggers[name].setLevel(logging.INFO if on else logging.WARNING)
    if any(_on.values()):
        _ensure_handler()
        if _root.level == logging.NOTSET or _root.level > logging.INFO:
            _root.setLevel(logging.INFO)


def enabled(topic):
    return _on[topic]


def logger(topic):
    return _loggers[topic]


def _from_env():
    spec = os.environ.get("TENSORPLAY_LOGS", "")
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if "all" in names:
        names = list(TOPICS)
    unknown = [n for n in names if n not in _on and n != "all"]
    if unknown:
        import warnings
        warnings.warn(f"TENSORPLAY_LOGS={spec!r}: unknown topic(s) {', '.join(map(repr, unknown))} "
                      f"ignored; topics: all, {', '.join(TOPICS)}", RuntimeWarning, stacklevel=2)
    known = {n: True for n in names if n in _on}
    if known:
        set_logs(**known)


_from_env()
