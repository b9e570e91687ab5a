"""Stochastic gradient descent (torch.optim.SGD's update, step for step)."""
import tensorplay as _tp
from tensorplay.optim.optimizer import Optimizer, required

__all__ = ["SGD"]


class SGD(Optimizer):
    """SGD(params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
    nesterov=False, *, maximize=False). Per parameter p with gradient g:
    g += weight_decay * p; with momentum, buf = g (first step) else
    buf = momentum * buf + (1 - dampening) * g, and g = g + momentum * buf
    (nesterov) or buf; p -= lr * g (+= with maximize). ValueError for
    negative lr/momentum/weight_decay or nesterov without momentum and zero
    dampening."""

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False,
                 fused=None):
        if lr is not required and lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))

    def step(self, closure=None):
        """One update of every parameter that has a .grad; returns closure().
        With fused=True, each group's update is one compiled program."""
        if any(g.get("fused") for g in self.param_groups):
            return self._fused_step(self._fused_runner(), closure)
        loss = self._closure(closure)
        with _tp.no_grad():
            for g in self.param_groups:
                lr, mom, damp = g["lr"], g["momentum"], g["dampening"]
                wd, nest, maxim = g["weight_decay"], g["nesterov"], g["maximize"]
                for p in g["params"]:
                    if p.grad is None:
                        continue
                    d = p.grad if not maxim else -p.grad
                    if wd != 0:
                        d = d.add(p, alpha=wd)
                    if mom != 0:
                        st = self._state(p)
                        buf = st.get("momentum_buffer")
                        if buf is None:
                            buf = d.clone().detach()
                            st["momentum_buffer"] = buf
                        else:
                            buf.mul_(mom).add_(d, alpha=1 - damp)
                        d = d.add(buf, alpha=mom) if nest else buf
                    p.add_(d, alpha=-lr)
        return loss

    def _fused_step(self, runner, closure=None):
        from tensorplay.optim._fused import sgd_update
        loss = self._closure(closure)
        fn = runner._fn(sgd_update)
        with _tp.no_grad():
            for g in self.param_groups:
                lr, mom, damp = g["lr"], g["momentum"], g["dampening"]
                wd, nest, maxim = g["weight_decay"], g["nesterov"], g["maximize"]
                ts, first = [], None
                for p in g["params"]:
                    if p.grad is None:
                        continue
                    ts += [p, p.grad]
                    if mom != 0:
                        st = self._state(p)
                        f = st.get("momentum_buffer") is None
                        if f:
                            st["momentum_buffer"] = _tp.zeros_like(p)
                        if first is not None and f != first:
                            raise RuntimeError("fused optimizer step: the parameters of a group "
                                               "are at different steps; use fused=False")
                        first = f
                        ts.append(st["momentum_buffer"])
                if not ts:
                    continue
                s = _tp.tensor([-lr], dtype=ts[0].dtype, device=ts[0].device)
                fn(s, mom, damp, wd, nest, maxim, bool(first), len(ts) // (3 if mom != 0 else 2), *ts)
        return loss
