"""Learning-rate schedulers: StepLR, CosineAnnealingLR, LambdaLR (torch's
chainable forms, so the numbers match torch step for step)."""
import math

__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR", "LambdaLR"]


class LRScheduler:
    """Base: records each group's initial_lr, applies get_lr() at step()."""

    def __init__(self, optimizer, last_epoch=-1):
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] "
                                   "when resuming an optimizer")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self._initial_step()

    def _initial_step(self):
        self._step_count = 0
        self.step()

    @property
    def _is_initial(self):
        return self.last_epoch == 0

    def get_lr(self):
        raise NotImplementedError

    def get_last_lr(self):
        """The learning rates the last step() set, one per group."""
        return self._last_lr

    def step(self, epoch=None):
        """Advance one epoch and set every group's lr."""
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            values = self._closed_form() if hasattr(self, "_closed_form") else self.get_lr()
        for g, lr in zip(self.optimizer.param_groups, values):
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)


class StepLR(LRScheduler):
    """Multiply each group's lr by gamma every step_size epochs."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [g["lr"] for g in self.optimizer.param_groups]
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]

    def _closed_form(self):
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2,
    computed recursively from the current lr as torch does."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        groups = self.optimizer.param_groups
        if self._is_initial:
            return [g["lr"] for g in groups]
        if self._step_count == 1 and self.last_epoch > 0:
            return [self.eta_min + (b - self.eta_min) *
                    (1 + math.cos(self.last_epoch * math.pi / self.T_max)) / 2
                    for b in self.base_lrs]
        if (self.last_epoch - 1 - self.T_max) % (2 * self.T_max) == 0:
            return [g["lr"] + (b - self.eta_min) * (1 - math.cos(math.pi / self.T_max)) / 2
                    for b, g in zip(self.base_lrs, groups)]
        return [(1 + math.cos(math.pi * self.last_epoch / self.T_max)) /
                (1 + math.cos(math.pi * (self.last_epoch - 1) / self.T_max)) *
                (g["lr"] - self.eta_min) + self.eta_min for g in groups]

    def _closed_form(self):
        return [self.eta_min + (b - self.eta_min) *
                (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for b in self.base_lrs]


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch); lr_lambda: a function or one per
    group (ValueError when the count differs)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        n = len(optimizer.param_groups)
        if not isinstance(lr_lambda, (list, tuple)):
            self.lr_lambdas = [lr_lambda] * n
        else:
            if len(lr_lambda) != n:
                raise ValueError(f"Expected {n} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [b * f(self.last_epoch) for f, b in zip(self.lr_lambdas, self.base_lrs)]
