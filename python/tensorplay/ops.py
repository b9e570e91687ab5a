"""tp.ops.<name>.<overload>: op overload objects of the op table.

``tp.ops.add.Tensor(x, y)`` runs add eagerly; ``str(tp.ops.add.Tensor)`` is
``tp.add.Tensor`` (the spelling of the seed's op-level graphs, Examples 4.3
and 4.4), and ``tp.add.Tensor is tp.ops.add.Tensor`` where tp.add exists.
Each overload has ``.op_name``, ``.overload``, ``.schema``, ``.kind``,
``.formula``, ``.decomposition``, ``.inplace``."""
from tensorplay import _C

__all__ = ["OpOverload", "OpOverloadPacket", "op_table", "get"]


class OpOverload:
    __slots__ = ("op_name", "overload", "schema", "kind", "formula",
                 "decomposition", "inplace", "flags", "_stax_op",
                 "__name__", "__qualname__")

    def __init__(self, row, overload):
        self.op_name = row["name"]
        self._stax_op = row["name"]
        self.overload = overload
        self.schema = row["schema"]
        self.kind = row["kind"]
        self.formula = row["formula"]
        self.decomposition = row["decomposition"]
        self.inplace = row["inplace"]
        self.flags = row["flags"]
        self.__name__ = f"{self.op_name}.{overload}"
        self.__qualname__ = self.__name__

    def __call__(self, *args, **kwargs):
        return _C._op_call(self.op_name, args, kwargs)

    def __repr__(self):
        return f"tp.{self.op_name}.{self.overload}"

    __str__ = __repr__

    def __reduce__(self):
        return (_get_overload, (self.op_name, self.overload))


class OpOverloadPacket:
    def __init__(self, row):
        self.op_name = row["name"]
        self._stax_op = row["name"]
        self.schema = row["schema"]
        self._row = row
        self.overloads = [o for o in (row["overloads"] or "default").split(",") if o]
        for o in self.overloads:
            setattr(self, o, OpOverload(row, o))
        if "default" not in self.overloads:
            self.default = OpOverload(row, "default")

    def __call__(self, *args, **kwargs):
        return _C._op_call(self.op_name, args, kwargs)

    def __repr__(self):
        return f"tp.{self.op_name}"

    def __getattr__(self, name):
        raise AttributeError(f"'tp.ops.{self.op_name}' has no overload '{name}'")


def _get_overload(name, overload):
    return getattr(globals()[name], overload)


op_table = _C._op_table()
_names = []
for _row in op_table:
    _p = OpOverloadPacket(_row)
    globals()[_row["name"]] = _p
    _names.append(_row["name"])

# tp.add.Tensor is tp.ops.add.Tensor: hang the overloads on the function objects
for _name, _fn in _C._op_functions().items():
    _p = globals()[_name]
    for _o in _p.overloads + ["default"]:
        try:
            setattr(_fn, _o, getattr(_p, _o))
        except AttributeError:
            pass


def get(name):
    """The OpOverloadPacket of an op name ('add', 'add_', ...)."""
    return globals()[name]


__all__ += _names
