"""Adam and AdamW (torch.optim.Adam / AdamW's single-tensor update)."""
import tensorplay as _tp
from tensorplay.optim.optimizer import Optimizer

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    amsgrad=False, *, maximize=False, decoupled_weight_decay=False).

    Per parameter (step t, gradient g, negated with maximize):
    decoupled: p *= 1 - lr * weight_decay, else g += weight_decay * p;
    m = lerp(m, g, 1 - beta1); v = beta2 * v + (1 - beta2) * g * g;
    denom = sqrt(max(v) with amsgrad, else v) / sqrt(1 - beta2**t) + eps;
    p -= lr / (1 - beta1**t) * m / denom. State: step (float32 0-d tensor),
    exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad). ValueError for bad
    hyper-parameters."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach,
                                      capturable=capturable, differentiable=differentiable,
                                      fused=fused, decoupled_weight_decay=decoupled_weight_decay))

    def step(self, closure=None):
        """One update of every parameter that has a .grad; returns closure().
        With fused=True, each group's update is one compiled program."""
        if any(g.get("fused") for g in self.param_groups):
            return self._fused_step(self._fused_runner(), closure)
        loss = self._closure(closure)
        with _tp.no_grad():
            for g in self.param_groups:
                lr, (b1, b2), eps = g["lr"], g["betas"], g["eps"]
                wd, ams, maxim = g["weight_decay"], g["amsgrad"], g["maximize"]
                decoupled = g["decoupled_weight_decay"]
                for p in g["params"]:
                    if p.grad is None:
                        continue
                    grad = p.grad if not maxim else -p.grad
                    st = self._state(p)
                    if len(st) == 0:
                        st["step"] = _tp.tensor(0.0)
                        st["exp_avg"] = _tp.zeros_like(p)
                        st["exp_avg_sq"] = _tp.zeros_like(p)
                        if ams:
                            st["max_exp_avg_sq"] = _tp.zeros_like(p)
                    st["step"].add_(1)
                    if wd != 0:
                        if decoupled:
                            p.mul_(1 - lr * wd)
                        else:
                            grad = grad.add(p, alpha=wd)
                    m, v = st["exp_avg"], st["exp_avg_sq"]
                    m.lerp_(grad, 1 - b1)
                    v.mul_(b2).add_(grad * (1 - b2) * grad)
                    t = st["step"].item()
                    bc1 = 1 - b1 ** t
                    bc2_sqrt = (1 - b2 ** t) ** 0.5
                    if ams:
                        mx = st["max_exp_avg_sq"]
                        mx.copy_(_tp.maximum(mx, v))
                        denom = (mx.sqrt() / bc2_sqrt).add_(eps)
                    else:
                        denom = (v.sqrt() / bc2_sqrt).add_(eps)
                    p.add_(m * (-(lr / bc1)) / denom)
        return loss


    def _fused_step(self, runner, closure=None):
        from tensorplay.optim._fused import adam_update
        loss = self._closure(closure)
        fn = runner._fn(adam_update)
        with _tp.no_grad():
            for g in self.param_groups:
                lr, (b1, b2), eps = g["lr"], g["betas"], g["eps"]
                wd, ams, maxim = g["weight_decay"], g["amsgrad"], g["maximize"]
                decoupled = g["decoupled_weight_decay"]
                ts, t = [], None
                for p in g["params"]:
                    if p.grad is None:
                        continue
                    st = self._state(p)
                    if len(st) == 0:
                        st["step"] = _tp.tensor(0.0, device=p.device)  # fused: read on the device
                        st["exp_avg"] = _tp.zeros_like(p)
                        st["exp_avg_sq"] = _tp.zeros_like(p)
                        if ams:
                            st["max_exp_avg_sq"] = _tp.zeros_like(p)
                    tp_ = st["step"].item() + 1
                    if t is not None and tp_ != t:
                        raise RuntimeError("fused optimizer step: the parameters of a group are at "
                                           "different steps; use fused=False")
                    t = tp_
                    ts += [p, p.grad, st["exp_avg"], st["exp_avg_sq"], st["step"]]
                    if ams:
                        ts.append(st["max_exp_avg_sq"])
                if t is None:
                    continue
                s = _tp.tensor([1 - lr * wd, (1 - b2 ** t) ** 0.5, -(lr / (1 - b1 ** t))],
                               dtype=ts[0].dtype, device=ts[0].device)
                fn(s, b1, b2, eps, wd, decoupled, ams, maxim, len(ts) // (6 if ams else 5), *ts)
        return loss


class AdamW(Adam):
    """AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
    amsgrad=False, *, maximize=False): Adam with decoupled weight decay
    (p *= 1 - lr * weight_decay before the Adam step)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
