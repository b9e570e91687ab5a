"""The optimizers' fused multi-tensor step: every parameter of a group
updated by one compiled program (tp.compile of the update over all the
group's tensors, in place). Used by ``Adam/AdamW/SGD(..., fused=True)`` and
by ``tp.compile(opt.step)``.

The per-step numbers that change every step (learning rate, bias
corrections) reach the program as one small tensor, so one version serves
every step; the hyper-parameters that stay fixed (betas, eps, weight decay,
momentum) are constants of the program. The arithmetic is the eager
step's, operation for operation."""
import tensorplay as _tp

__all__ = ["adam_update", "sgd_update", "FusedStep"]


def adam_update(s, b1, b2, eps, wd, decoupled, ams, maxim, n, *ts):
    """ts: per parameter (param, grad, exp_avg, exp_avg_sq, step[, max_exp_avg_sq]);
    s = [1 - lr * wd, sqrt(1 - b2**t), -(lr / (1 - b1**t))]."""
    k = 6 if ams else 5
    for i in range(n):
        p, g, m, v, st = ts[k * i:k * i + 5]
        if maxim:
            g = -g
        st.add_(1)
        if wd != 0:
            if decoupled:
                p.mul_(s[0])
            else:
                g = g.add(p, alpha=wd)
        m.lerp_(g, 1 - b1)
        v.mul_(b2).add_(g * (1 - b2) * g)
        if ams:
            mx = ts[k * i + 5]
            mx.copy_(_tp.maximum(mx, v))
            denom = mx.sqrt() / s[1] + eps
        else:
            denom = v.sqrt() / s[1] + eps
        p.add_(m * s[2] / denom)


def sgd_update(s, mom, damp, wd, nest, maxim, first, n, *ts):
    """ts: per parameter (param, grad[, momentum_buffer]); s = [-lr]."""
    k = 3 if mom != 0 else 2
    for i in range(n):
        p, d = ts[k * i], ts[k * i + 1]
        if maxim:
            d = -d
        if wd != 0:
            d = d.add(p, alpha=wd)
        if mom != 0:
            buf = ts[k * i + 2]
            if first:
                buf.copy_(d)
            else:
                buf.mul_(mom).add_(d, alpha=1 - damp)
            d = d.add(buf, alpha=mom) if nest else buf
        p.add_(d * s[0])


class FusedStep:
    """opt.step as compiled programs: one tp.compile per update rule,
    called with every parameter of a group at once."""

    def __init__(self, opt, strict_native=False):
        self.opt = opt
        self.strict_native = strict_native
        self._fns = {}

    def _fn(self, rule):
        f = self._fns.get(rule.__name__)
        if f is None:
            f = self._fns[rule.__name__] = _tp.compile(
                rule, strict_native=self.strict_native,
                name=f"{type(self.opt).__name__}.step (fused)")
        return f

    @property
    def versions(self):
        return [v for f in self._fns.values() for v in f.versions]

    def __call__(self, closure=None):
        return self.opt._fused_step(self, closure)
