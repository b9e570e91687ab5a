"""tensorplay.save / tensorplay.load: torch.save's and torch.load's calls for
checkpoints (state_dicts, optimizer states, dicts of tensors and numbers).

The file is a pickle (protocol 4 by default). A tensor travels as its
values (a NumPy array), its dtype, its class (Parameter stays Parameter)
and requires_grad; one tensor referenced twice is one object again after
loading, and two tensor objects that were the same view of the same memory
(a state_dict's tied weights) load as two objects sharing memory. A tensor on a device other than the CPU is
saved with its device and comes back there (``map_location`` moves it).
Other views are saved as their own copies (torch keeps every shared
storage; here only identical views stay shared).

``load(weights_only=True)`` (torch's default since 2.6) unpickles only
containers, numbers, strings, tensors, dtypes, devices, Sizes and the
globals given to ``add_safe_globals``: anything else raises
``pickle.UnpicklingError`` instead of running code from the file.

A file written by torch.save (a zip archive) is not read: ``load`` raises
RuntimeError saying so (load it with torch and convert the tensors with
``tp.tensor(t.numpy())`` or ``tp.from_dlpack(t)``)."""
import contextlib
import io
import os
import pickle

import tensorplay as _tp

__all__ = ["save", "load", "add_safe_globals", "get_safe_globals", "clear_safe_globals",
           "safe_globals", "DEFAULT_PROTOCOL"]

DEFAULT_PROTOCOL = 4

_user_safe = []


def add_safe_globals(safe_globals):
    """Allow these classes/functions in ``load(weights_only=True)``
    (a list of objects, or of (object, "module.name") pairs)."""
    _user_safe.extend(safe_globals)


def get_safe_globals():
    """The globals add_safe_globals allowed, in order."""
    return list(_user_safe)


def clear_safe_globals():
    """Forget every global add_safe_globals allowed."""
    _user_safe.clear()


@contextlib.contextmanager
def safe_globals(safe_globals):
    """Allow ``safe_globals`` in ``load(weights_only=True)`` within a with-block."""
    n = len(_user_safe)
    _user_safe.extend(safe_globals)
    try:
        yield
    finally:
        del _user_safe[n:]


def _as_class(t, requires_grad, cls):
    """t (a fresh tensor object) as a ``cls`` (Tensor, Parameter or another
    Tensor subclass) that requires grad as saved."""
    if cls is not _tp.Tensor:
        from tensorplay.nn import Parameter
        if cls is Parameter:
            return Parameter(t, requires_grad)
        return _tp.Tensor._make_subclass(cls, t, requires_grad)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _rebuild_on_device(cpu, device, requires_grad, cls):
    """Unpickle a tensor saved from ``device``: move it there (or where the
    running load's map_location sends it)."""
    t = cpu.to(_map_device(device))
    return _as_class(t, requires_grad, cls)


def _rebuild_cpu(*args):
    """_tensor._rebuild_tensor, then map_location (a CPU tensor's saved device is 'cpu')."""
    from tensorplay._tensor import _rebuild_tensor
    t = _rebuild_tensor(*args)
    dev = _map_device("cpu")
    if str(dev) == "cpu":
        return t
    return _as_class(t.detach().to(dev), t.requires_grad, type(t))


_map_stack = []
_CPU_STORAGE = object()   # what a map_location callable gets as its "storage"


def _map_device(saved):
    """Where a tensor saved on ``saved`` (a device string) goes under the
    map_location of the load in progress."""
    ml = _map_stack[-1] if _map_stack else None
    if ml is None:
        return _tp.device(saved)
    if isinstance(ml, dict):
        return _tp.device(ml.get(saved, saved))
    if callable(ml):
        # torch calls it with (storage, location); `lambda storage, loc: storage`
        # (the usual "load on the CPU") returns the first argument unchanged
        r = ml(_CPU_STORAGE, saved)
        if r is _CPU_STORAGE:
            return _tp.device("cpu")
        return _tp.device(saved if r is None else r)
    return _tp.device(ml)


def _alias(base, requires_grad, cls):
    """Unpickle a second tensor object that viewed the same memory as
    ``base`` when saved (state_dict()'s detached tied weights): a new
    tensor object sharing base's memory, as torch's shared storages load."""
    t = base.detach()
    return _as_class(t, requires_grad, cls)


class _Pickler(pickle.Pickler):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._views = {}

    def reducer_override(self, obj):
        if not isinstance(obj, _tp.Tensor):
            return NotImplemented
        key = (obj.data_ptr(), tuple(obj.shape), obj.stride(), obj.dtype, str(obj.device))
        first = self._views.setdefault(key, obj)
        if first is not obj:
            return (_alias, (first, obj.requires_grad, type(obj)))
        if obj.device.type != "cpu":
            cpu = obj.detach().to("cpu")
            return (_rebuild_on_device, (cpu, str(obj.device), obj.requires_grad, type(obj)))
        return NotImplemented


def _open(f, mode):
    if isinstance(f, (str, os.PathLike)):
        return open(f, mode), True
    return f, False


def save(obj, f, pickle_module=pickle, pickle_protocol=DEFAULT_PROTOCOL,
         _use_new_zipfile_serialization=True, _disable_byteorder_record=False):
    """Write ``obj`` (tensors, modules' state_dicts, optimizers' state_dicts,
    containers of them, numbers, strings) to ``f``: a path (str or
    os.PathLike) or a binary file object with ``write``.

    Raises pickle.PicklingError / TypeError for what pickle cannot write
    (lambdas, open files, ...)."""
    fh, own = _open(f, "wb")
    try:
        if pickle_module is pickle:
            _Pickler(fh, protocol=pickle_protocol).dump(obj)
        else:
            pickle_module.dump(obj, fh, protocol=pickle_protocol)
    finally:
        if own:
            fh.close()


_SAFE_BUILTINS = {"dict", "list", "tuple", "set", "frozenset", "int", "float", "complex",
                  "bool", "str", "bytes", "bytearray", "slice", "range", "NoneType"}
_SAFE = {
    ("collections", "OrderedDict"), ("collections", "defaultdict"), ("_codecs", "encode"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar"),
    ("tensorplay._tensor", "_rebuild_tensor"), ("tensorplay.serialization", "_rebuild_on_device"),
    ("tensorplay.serialization", "_alias"),
    ("tensorplay", "Tensor"), ("tensorplay", "Size"), ("tensorplay", "device"),
    ("tensorplay.nn.modules", "Parameter"), ("tensorplay.nn", "Parameter"),
}


def _qualname(o):
    if isinstance(o, tuple):
        return o[1]
    return f"{getattr(o, '__module__', '?')}.{getattr(o, '__qualname__', getattr(o, '__name__', '?'))}"


class _WeightsUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        full = f"{module}.{name}"
        for g in _user_safe:
            obj = g[0] if isinstance(g, tuple) else g
            if _qualname(g) == full:
                return obj
        if (module == "builtins" and name in _SAFE_BUILTINS) or (module, name) in _SAFE:
            return self._resolve(module, name)
        if module in ("tensorplay", "tensorplay._C"):
            obj = getattr(_tp, name, None)
            if isinstance(obj, _tp.dtype):
                return obj
        if module.startswith("numpy") and name.endswith("DType"):   # numpy.dtypes.Float32DType
            return self._resolve(module, name)
        raise pickle.UnpicklingError(
            "Weights only load failed: the file names the global "
            f"{full}, which load(weights_only=True) does not run. If you trust the file's "
            "source, load it with weights_only=False, or allow that class or function with "
            f"tensorplay.serialization.add_safe_globals([{full}]) (or the "
            "tensorplay.serialization.safe_globals([...]) context manager).")

    def _resolve(self, module, name):
        return _remap(super().find_class(module, name))


class _FullUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        return _remap(super().find_class(module, name))


def _remap(obj):
    from tensorplay._tensor import _rebuild_tensor
    return _rebuild_cpu if obj is _rebuild_tensor else obj


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None,
         **pickle_load_args):
    """Read an object that ``save`` wrote, from a path or a binary file
    object with ``read``/``readline``/``seek``.

    map_location: None (tensors come back on the device they were saved
    from), a device or string ('cpu', 'cuda:0'), a dict {saved: new} of
    device strings, or a callable (storage, saved_location) ->
    device (``lambda storage, loc: storage`` loads on the CPU, as in torch). weights_only: True when None, as in torch 2.6 and later (only
    tensors, containers, numbers, strings and allowed globals; others raise
    pickle.UnpicklingError). mmap is accepted for torch's signature and
    ignored (the file is read).

    Raises RuntimeError for a file written by torch.save (a zip archive)."""
    if weights_only is None:
        weights_only = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0") in ("0", "")
    if weights_only and pickle_module is not None and pickle_module is not pickle:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is "
                           "specified")
    fh, own = _open(f, "rb")
    try:
        start = fh.tell() if hasattr(fh, "tell") else None
        head = fh.read(4)
        if head[:4] == b"PK\x03\x04":
            raise RuntimeError(
                "tensorplay.load: this file is a zip archive, the format torch.save writes; "
                "tensorplay.load reads files that tensorplay.save wrote (a pickle). Load it "
                "with torch.load and convert each tensor with tp.tensor(t.numpy()) or "
                "tp.from_dlpack(t).")
        if start is not None:
            fh.seek(start)
        else:
            fh = io.BytesIO(head + fh.read())
        _map_stack.append(map_location)
        try:
            if pickle_module is not None and pickle_module is not pickle:
                return pickle_module.load(fh, **pickle_load_args)
            cls = _WeightsUnpickler if weights_only else _FullUnpickler
            return cls(fh, **pickle_load_args).load()
        finally:
            _map_stack.pop()
    finally:
        if own:
            fh.close()

