"""tensorplay.amp.GradScaler: torch's dynamic loss scaling for float16
training (scale the loss, unscale the gradients before the step, skip the
step when a gradient is inf/NaN, grow or back off the scale)."""
import math

__all__ = ["GradScaler"]


class GradScaler:
    """GradScaler(device="cuda", init_scale=2.**16, growth_factor=2.0,
    backoff_factor=0.5, growth_interval=2000, enabled=True): scale(loss),
    unscale_(optimizer), step(optimizer), update(new_scale=None),
    get_scale(), is_enabled(), state_dict(), load_state_dict(). Disabled,
    every method is a pass-through (scale returns its argument)."""

    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000, enabled=True):
        if growth_factor <= 1.0:
            raise ValueError("The growth factor must be > 1.0.")
        if backoff_factor >= 1.0:
            raise ValueError("The backoff factor must be < 1.0.")
        self._device = device
        self._enabled = bool(enabled)
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._per_opt = {}

    def is_enabled(self):
        return self._enabled

    def get_scale(self):
        return self._scale if self._enabled else 1.0

    def scale(self, outputs):
        """outputs * scale (a tensor, or nested lists/tuples of tensors)."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        return outputs * self._scale

    def _state(self, optimizer):
        return self._per_opt.setdefault(id(optimizer), {"unscaled": False, "found_inf": None,
                                                        "stepped": False})

    def unscale_(self, optimizer):
        """Divide optimizer's gradients by the scale in place (once per step;
        a second call raises torch's RuntimeError)."""
        if not self._enabled:
            return
        st = self._state(optimizer)
        if st["unscaled"]:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        if st["stepped"]:
            raise RuntimeError("unscale_() is being called after step().")
        import tensorplay as tp
        inv = 1.0 / self._scale
        found = False
        with tp.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    p.grad.mul_(inv)
                    if not found and not bool(p.grad.isfinite().all()):
                        found = True
        st["unscaled"] = True
        st["found_inf"] = found

    def step(self, optimizer, *args, **kwargs):
        """unscale_ (if not done), then optimizer.step() unless a gradient
        is inf/NaN. Returns step's result (None when skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        st = self._state(optimizer)
        if st["stepped"]:
            raise RuntimeError("step() has already been called since the last update().")
        if not st["unscaled"]:
            self.unscale_(optimizer)
        st["stepped"] = True
        if st["found_inf"]:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):
        """Back off the scale after a skipped step, grow it after
        growth_interval good ones; new_scale sets it directly."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if hasattr(new_scale, "item") else new_scale)
        else:
            found = any(st["found_inf"] for st in self._per_opt.values())
            if found:
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    grown = self._scale * self._growth_factor
                    if math.isfinite(grown):
                        self._scale = grown
                    self._growth_tracker = 0
        self._per_opt = {}

    def state_dict(self):
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
