"""Optimizer: parameter groups, per-parameter state, zero_grad and
state_dict / load_state_dict with torch's layout."""
import copy

import tensorplay as _tp
from tensorplay import _C

__all__ = ["Optimizer"]


class _Required:
    def __repr__(self):
        return "<required parameter>"


required = _Required()


class Optimizer:
    """Base class: ``params`` is an iterable of tensors or of dicts (parameter
    groups with per-group options); ``defaults`` fills each group's missing
    options. Raises TypeError / ValueError as torch does for bad params."""

    def __init__(self, params, defaults):
        self.defaults = defaults
        self.state = {}
        self.param_groups = []
        if isinstance(params, _C.Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable "
                            "of Tensors or dicts, but got " + type(params).__name__)
        groups = list(params)
        if len(groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def __repr__(self):
        s = self.__class__.__name__ + " ("
        for i, g in enumerate(self.param_groups):
            s += f"\nParameter Group {i}"
            for k in sorted(g):
                if k != "params":
                    s += f"\n    {k}: {g[k]}"
        return s + "\n)"

    def add_param_group(self, param_group):
        """Add a group (dict with 'params'); options not given take the
        defaults. A parameter may belong to one group only (ValueError)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, _C.Tensor):
            param_group["params"] = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections,"
                            " but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        else:
            param_group["params"] = list(params)
        for p in param_group["params"]:
            if not isinstance(p, _C.Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + type(p).__name__)
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for k, v in self.defaults.items():
            if v is required and k not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {k}")
            param_group.setdefault(k, v)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in param_group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def zero_grad(self, set_to_none=True):
        """Reset every parameter's .grad: to None (default) or to zeros."""
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad = _tp.zeros_like(p.grad)

    def _state(self, p):
        return self.state.setdefault(p, {})

    def state_dict(self):
        """{'state': {index: {name: value}}, 'param_groups': [{..., 'params':
        [index, ...]}]}: parameters are numbered in group order, as torch."""
        index = {}
        groups = []
        for g in self.param_groups:
            pg = {k: v for k, v in g.items() if k != "params"}
            ids = []
            for p in g["params"]:
                if id(p) not in index:
                    index[id(p)] = len(index)
                ids.append(index[id(p)])
            pg["params"] = ids
            groups.append(pg)
        state = {}
        for g in self.param_groups:
            for p in g["params"]:
                if p in self.state:
                    state[index[id(p)]] = {k: (v.clone() if isinstance(v, _C.Tensor) else
                                               copy.deepcopy(v))
                                           for k, v in self.state[p].items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore state_dict(): groups must match in number and sizes
        (ValueError otherwise); tensors are copied to the parameters' device and
        dtype (a "step" keeps its own, except for fused/capturable groups)."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for g, sg in zip(self.param_groups, groups):
            if len(g["params"]) != len(sg["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't "
                                 "match the size of optimizer's group")
        self.state = {}
        for g, sg in zip(self.param_groups, groups):
            for p, ix in zip(g["params"], sg["params"]):
                st = state_dict["state"].get(ix)
                if st is None:
                    continue
                new = {}
                fused = g.get("fused") or g.get("capturable")
                for k, v in st.items():
                    # torch's policy: state follows its parameter's device (a
                    # step counter only for fused/capturable steps, which
                    # read it on the device), values also its dtype
                    if isinstance(v, _C.Tensor):
                        if k == "step":
                            v = (v.to(device=p.device) if fused else v).clone()
                        else:
                            v = v.to(device=p.device, dtype=p.dtype).clone()
                    else:
                        v = copy.deepcopy(v)
                    new[k] = v
                self.state[p] = new
            for k, v in sg.items():
                if k != "params":
                    g[k] = v

    def step(self, closure=None):
        raise NotImplementedError

    def _fused_runner(self, strict_native=False):
        """The compiled programs of this optimizer's fused step (created once)."""
        r = self.__dict__.get("_fused")
        if r is None:
            from tensorplay.optim._fused import FusedStep
            r = self._fused = FusedStep(self, strict_native)
        return r

    def _fused_step(self, runner, closure=None):
        raise NotImplementedError(f"{type(self).__name__} has no fused step")

    def _closure(self, closure):
        if closure is None:
            return None
        with _tp.enable_grad():
            return closure()
