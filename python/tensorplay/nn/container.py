"""torch.nn.ParameterList and torch.nn.ParameterDict: list- and dict-like
modules whose tensor entries are registered parameters (a plain tensor put
in becomes a Parameter), so parameters(), state_dict() ("0", "1", ... or the
dict's keys) and optimizers see them. Entries that are not tensors are kept
as plain attributes, as torch keeps them."""
import collections
import collections.abc
import operator

from tensorplay import _C
from tensorplay.nn.modules import Module, Parameter

__all__ = ["ParameterList", "ParameterDict"]


def _as_param(value):
    if isinstance(value, _C.Tensor) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


def _entry_repr(k, p):
    if isinstance(p, _C.Tensor):
        size = "x".join(str(s) for s in p.shape)
        dev = f" ({p.device})" if getattr(p.device, "type", "cpu") == "cuda" else ""
        kind = "Parameter" if isinstance(p, Parameter) else "Tensor"
        return f"  ({k}): {kind} containing: [{p.dtype} of size {size}{dev}]"
    return f"  ({k}): Object of type: {type(p).__name__}"


class ParameterList(Module):
    """A list of parameters: indexing by int (negative too) or slice (a new
    ParameterList), append, extend, +=, len, iteration. IndexError for an
    index out of range; TypeError for extend with a non-iterable or a
    Tensor. Calling it raises RuntimeError."""

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        if values is not None:
            self += values

    def _key(self, idx):
        idx = operator.index(idx)
        if not -len(self) <= idx < len(self):
            raise IndexError(f"index {idx} is out of range")
        return str(idx + len(self) if idx < 0 else idx)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            out = type(self)()
            for i in range(*idx.indices(len(self))):
                out.append(self[i])
            return out
        return getattr(self, self._key(idx))

    def __setitem__(self, idx, param):
        setattr(self, self._key(idx), _as_param(param))

    def __len__(self):
        return self._size

    def __iter__(self):
        return iter([self[i] for i in range(len(self))])

    def __iadd__(self, parameters):
        return self.extend(parameters)

    def __dir__(self):
        return [k for k in super().__dir__() if not k.isdigit()]

    def append(self, value):
        """Adds value at the end (a Tensor becomes a Parameter); returns self."""
        self._size += 1
        self[self._size - 1] = value
        return self

    def extend(self, values):
        """Appends every item of an iterable (not a Tensor); returns self."""
        if not isinstance(values, collections.abc.Iterable) or isinstance(values, _C.Tensor):
            raise TypeError("ParameterList.extend should be called with an iterable, "
                            "but got " + type(values).__name__)
        for v in values:
            self.append(v)
        return self

    def extra_repr(self):
        return "\n".join(_entry_repr(k, p) for k, p in enumerate(self))

    def __repr__(self):
        return type(self).__name__ + "(\n" + self.extra_repr() + "\n)"

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterList should not be called.")


class ParameterDict(Module):
    """An ordered dict of parameters keyed by strings: [], in, len,
    iteration over keys, keys/values/items, get, pop, popitem, setdefault,
    clear, copy, fromkeys, update (from a mapping or an iterable of pairs),
    |, |=. A Tensor put in becomes a Parameter. TypeError for a key that is
    not a str. Calling it raises RuntimeError."""

    def __init__(self, parameters=None):
        super().__init__()
        self._keys = {}
        if parameters is not None:
            self.update(parameters)

    @staticmethod
    def _attr(key):
        if not isinstance(key, str):
            raise TypeError("Index given to ParameterDict cannot be used as a key as it is "
                            f"not a string (type is '{type(key).__name__}'). Open an issue "
                            "on github if you need non-string keys.")
        return key

    def __getitem__(self, key):
        return getattr(self, self._attr(key))

    def __setitem__(self, key, value):
        attr = self._attr(key)
        self._keys[key] = None
        setattr(self, attr, _as_param(value))

    def __delitem__(self, key):
        del self._keys[key]
        delattr(self, self._attr(key))

    def __len__(self):
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __reversed__(self):
        return reversed(self._keys)

    def __contains__(self, key):
        return key in self._keys

    def copy(self):
        """A new ParameterDict holding the same parameters (not copies)."""
        return ParameterDict(collections.OrderedDict((k, self[k]) for k in self._keys))

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def clear(self):
        for k in list(self._keys):
            del self[k]

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def popitem(self):
        k, _ = self._keys.popitem()
        # back in, so that __delitem__ removes the attribute too
        self._keys[k] = None
        v = self[k]
        del self[k]
        return k, v

    def get(self, key, default=None):
        return self[key] if key in self else default

    def fromkeys(self, keys, default=None):
        return ParameterDict((k, default) for k in keys)

    def keys(self):
        return self._keys.keys()

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def values(self):
        return (self[k] for k in self._keys)

    def update(self, parameters):
        """Adds the entries of a mapping (a plain dict in its order, an
        OrderedDict/ParameterDict in theirs) or of an iterable of (key,
        value) pairs. TypeError for anything else, ValueError for an item
        that is not a pair."""
        if not isinstance(parameters, collections.abc.Iterable):
            raise TypeError("ParametersDict.update should be called with an iterable of "
                            "key/value pairs, but got " + type(parameters).__name__)
        if isinstance(parameters, (collections.OrderedDict, ParameterDict)):
            for k, v in parameters.items():
                self[k] = v
        elif isinstance(parameters, collections.abc.Mapping):
            for k, v in sorted(parameters.items()):
                self[k] = v
        else:
            for j, p in enumerate(parameters):
                if not isinstance(p, collections.abc.Iterable):
                    raise TypeError("ParameterDict update sequence element #" + str(j)
                                    + " should be Iterable; is" + type(p).__name__)
                if len(p) != 2:
                    raise ValueError("ParameterDict update sequence element #" + str(j)
                                     + " has length " + str(len(p)) + "; 2 is required")
                self[p[0]] = p[1]

    def extra_repr(self):
        return "\n".join(_entry_repr(k, p) for k, p in self.items())

    def __repr__(self):
        return type(self).__name__ + "(\n" + self.extra_repr() + "\n)"

    def __call__(self, input):
        raise RuntimeError("ParameterDict should not be called.")

    def __or__(self, other):
        out = self.copy()
        out.update(other)
        return out

    def __ror__(self, other):
        out = other.copy()
        out.update(self)
        return out

    def __ior__(self, other):
        self.update(other)
        return self
