"""The persistent compile cache's Python face (docs/cache.md).

The cache itself is the C cache room (csrc/cache/): content-addressed
entries of object code, keyed by XXH3-128 over the kernel's loop IR, the back
end, the target and the compiler's build. This module pushes
``tp.compiler.config`` (cache, cache_dir, cache_size_mb) to it before every
compilation, routes its log lines to the ``cache`` topic, and gives
``cache_info()``, ``save_cache_artifacts()`` and ``load_cache_artifacts()``."""
import os
import struct

from tensorplay import _C
from . import _logs
from ._config import config

__all__ = ["cache_info", "save_cache_artifacts", "load_cache_artifacts", "sync", "counters"]

_pushed = None
_said_relative = set()


def _log(line):
    if _logs.enabled("cache"):
        _logs.logger("cache").info(line)


def sync():
    """Push config.cache / cache_dir / cache_size_mb to the C cache room
    (cheap when nothing changed). Called before each compilation."""
    global _pushed
    state = (bool(config.cache), config.cache_dir, int(float(config.cache_size_mb) * 2 ** 20))
    if state == _pushed:
        return
    given = getattr(config, "_cache_dir_given", config.cache_dir)
    if not os.path.isabs(os.path.expanduser(given)) and given not in _said_relative:
        _said_relative.add(given)
        _log(f"cache_dir {given!r} is relative: using {config.cache_dir} (resolved against the "
             "working directory when it was read)")
    if state[2] < 0:
        raise ValueError(f"config.cache_size_mb must be >= 0, got {config.cache_size_mb}")
    _C._cache_configure(state[1], state[0], state[2])
    _pushed = state
    _log(f"cache {'on' if state[0] else 'off'}: {state[1]} (cap {config.cache_size_mb} MB)")


def counters():
    """(cache_hits, cache_misses, backend_compiles) of this process."""
    return _C._cache_counters()


def cache_info():
    """The persistent compile cache: a dict with ``dir`` (absolute path),
    ``enabled``, ``entries`` (valid-looking entry files), ``bytes`` (their
    total size), ``size_limit_bytes`` (config.cache_size_mb) and
    ``build_id`` (the compiler build whose entries this process loads),
    ``store_scans`` (directory scans this process's stores made: the first
    store into a directory without its size index ``kernels.bytes``, and
    evictions; a store otherwise reads and updates the index)."""
    sync()
    return _C._cache_info()


_MAGIC = b"TPCACHEA"


def save_cache_artifacts():
    """Every valid entry of the cache directory as one bytes object, for
    ``load_cache_artifacts`` in another process or on another machine of the
    same target (torch.compiler.save_cache_artifacts). Returns
    ``(data, info)``, ``info`` as ``cache_info()`` for what was saved, or
    None when the cache holds nothing."""
    sync()
    entries = _C._cache_export()
    if not entries:
        return None
    parts = [_MAGIC, struct.pack("<Q", len(entries))]
    total = 0
    for name, blob in entries:
        nb = name.encode()
        parts += [struct.pack("<I", len(nb)), nb, struct.pack("<Q", len(blob)), blob]
        total += len(blob)
    info = dict(cache_info(), entries=len(entries), bytes=total)
    return b"".join(parts), info


def load_cache_artifacts(data):
    """Store the entries of ``save_cache_artifacts()``'s bytes in this
    process's cache directory (torch.compiler.load_cache_artifacts). Each
    entry is checked (header, compiler build, checksum) before it is
    written, atomically; entries of another build or damaged ones are left
    out (logged under ``cache``). Returns a dict: ``loaded`` and
    ``rejected`` counts. Raises ValueError if ``data`` is not such bytes
    (wrong magic or truncated)."""
    sync()
    mv = memoryview(data).cast("B")
    if len(mv) < 16 or bytes(mv[:8]) != _MAGIC:
        raise ValueError("load_cache_artifacts: not the bytes of save_cache_artifacts()")
    (n,) = struct.unpack_from("<Q", mv, 8)
    off, loaded, rejected = 16, 0, 0
    for _ in range(n):
        try:
            (ln,) = struct.unpack_from("<I", mv, off)
            name = bytes(mv[off + 4: off + 4 + ln]).decode()
            off += 4 + ln
            (lb,) = struct.unpack_from("<Q", mv, off)
            off += 8
            if off + lb > len(mv):
                raise struct.error("entry runs past the end")
            blob = bytes(mv[off: off + lb])
            off += lb
        except (struct.error, UnicodeDecodeError) as e:
            raise ValueError(f"load_cache_artifacts: truncated or damaged data ({e})") from None
        if _C._cache_import(name, blob):
            loaded += 1
        else:
            rejected += 1
    _log(f"load_cache_artifacts: {loaded} entries stored, {rejected} rejected")
    return {"loaded": loaded, "rejected": rejected}


_C._cache_set_log(_log)
sync()
