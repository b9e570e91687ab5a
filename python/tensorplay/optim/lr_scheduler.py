"""Learning-rate schedulers: StepLR, MultiStepLR, ExponentialLR,
ConstantLR, LinearLR, PolynomialLR, MultiplicativeLR, LambdaLR,
CosineAnnealingLR, CosineAnnealingWarmRestarts, OneCycleLR,
ReduceLROnPlateau, SequentialLR and ChainedScheduler (torch's chainable
forms, so the numbers match torch step for step)."""
import bisect
import collections
import math

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "ConstantLR", "LinearLR",
           "PolynomialLR", "MultiplicativeLR", "CosineAnnealingLR", "LambdaLR",
           "CosineAnnealingWarmRestarts", "OneCycleLR", "ReduceLROnPlateau", "SequentialLR",
           "ChainedScheduler"]


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


def _lambdas_per_group(optimizer, lr_lambda):
    """One function per param group: lr_lambda for each, or the list given
    (ValueError when its length is not the number of groups)."""
    n = len(optimizer.param_groups)
    if not isinstance(lr_lambda, (list, tuple)):
        return [lr_lambda] * n
    if len(lr_lambda) != n:
        raise ValueError(f"Expected {n} lr_lambdas, but got {len(lr_lambda)}")
    return list(lr_lambda)


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch); lr_lambda: a function or one per
    group (ValueError when the count differs)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        self.lr_lambdas = _lambdas_per_group(optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [b * f(self.last_epoch) for f, b in zip(self.lr_lambdas, self.base_lrs)]


def _lrs(sched):
    return [g["lr"] for g in sched.optimizer.param_groups]


class MultiStepLR(LRScheduler):
    """Multiply each group's lr by gamma at each epoch in ``milestones``
    (a milestone given twice multiplies twice)."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones = collections.Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return _lrs(self)
        return [lr * self.gamma ** self.milestones[self.last_epoch] for lr in _lrs(self)]

    def _closed_form(self):
        ms = sorted(self.milestones.elements())
        return [b * self.gamma ** bisect.bisect_right(ms, self.last_epoch) for b in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply each group's lr by gamma every epoch."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return _lrs(self)
        return [lr * self.gamma for lr in _lrs(self)]

    def _closed_form(self):
        return [b * self.gamma ** self.last_epoch for b in self.base_lrs]


class ConstantLR(LRScheduler):
    """lr = base_lr * factor until epoch ``total_iters``, then base_lr.
    ValueError unless 0 <= factor <= 1."""

    def __init__(self, optimizer, factor=1.0 / 3, total_iters=5, last_epoch=-1):
        if factor > 1.0 or factor < 0:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor = factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [lr * self.factor for lr in _lrs(self)]
        if self.last_epoch != self.total_iters:
            return _lrs(self)
        return [lr * (1.0 / self.factor) for lr in _lrs(self)]

    def _closed_form(self):
        return [b * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor))
                for b in self.base_lrs]


class LinearLR(LRScheduler):
    """lr goes linearly from base_lr * start_factor to base_lr * end_factor
    over ``total_iters`` epochs, then stays. ValueError for a start_factor
    outside (0, 1] or an end_factor outside [0, 1]."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1):
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 and "
                             "less or equal to 1.")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in _lrs(self)]
        if self.last_epoch > self.total_iters:
            return _lrs(self)
        d = self.end_factor - self.start_factor
        return [lr * (1.0 + d / (self.total_iters * self.start_factor + (self.last_epoch - 1) * d))
                for lr in _lrs(self)]

    def _closed_form(self):
        return [b * (self.start_factor + (self.end_factor - self.start_factor) *
                     min(self.total_iters, self.last_epoch) / self.total_iters)
                for b in self.base_lrs]


class PolynomialLR(LRScheduler):
    """lr = base_lr * (1 - epoch / total_iters) ** power until total_iters."""

    def __init__(self, optimizer, total_iters=5, power=1.0, last_epoch=-1):
        self.total_iters = total_iters
        self.power = power
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch > self.total_iters:
            return _lrs(self)
        f = ((1.0 - self.last_epoch / self.total_iters) /
             (1.0 - (self.last_epoch - 1) / self.total_iters)) ** self.power
        return [lr * f for lr in _lrs(self)]

    def _closed_form(self):
        return [b * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
                for b in self.base_lrs]


class MultiplicativeLR(LRScheduler):
    """Each epoch after the first, lr *= lr_lambda(epoch) (one function, or
    one per group: ValueError when the count differs)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        self.lr_lambdas = _lambdas_per_group(optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch > 0:
            return [lr * f(self.last_epoch) for f, lr in zip(self.lr_lambdas, _lrs(self))]
        return _lrs(self)


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from base_lr to eta_min over T_i epochs, restarting
    at base_lr; T_0 the first period, each next one T_mult times longer.
    ``step(epoch)`` may take a fractional epoch (per-batch stepping).
    ValueError for a T_0 that is not a positive int or a T_mult that is not
    an int >= 1."""

    def __init__(self, optimizer, T_0, T_mult=1, eta_min=0.0, last_epoch=-1):
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        self.T_0 = T_0
        self.T_i = T_0
        self.T_mult = T_mult
        self.eta_min = eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i))
                / 2 for b in self.base_lrs]

    def step(self, epoch=None):
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur - self.T_i
                self.T_i = self.T_i * self.T_mult
        else:
            if epoch < 0:
                raise ValueError(f"Expected non-negative epoch, but got {epoch}")
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self.last_epoch = math.floor(epoch)
        self._step_count += 1
        for g, lr in zip(self.optimizer.param_groups, self.get_lr()):
            g["lr"] = lr
        self._last_lr = _lrs(self)


class OneCycleLR(LRScheduler):
    """The 1cycle policy, stepped once per batch: lr rises from max_lr /
    div_factor to max_lr over pct_start of ``total_steps`` (or epochs *
    steps_per_epoch), then anneals ('cos' or 'linear') to initial_lr /
    final_div_factor (three_phase: back to the initial lr first); momentum
    (or Adam's beta1) cycles the other way between base_momentum and
    max_momentum when cycle_momentum.

    Raises ValueError for missing/invalid step counts, a pct_start outside
    [0, 1], an unknown anneal_strategy, cycle_momentum on an optimizer
    without momentum or betas, and stepping past total_steps."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False,
                 last_epoch=-1):
        self.optimizer = optimizer
        if total_steps is not None:
            if total_steps <= 0 or not isinstance(total_steps, int):
                raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
            self.total_steps = total_steps
        elif epochs is not None and steps_per_epoch is not None:
            if not isinstance(epochs, int) or epochs <= 0:
                raise ValueError(f"Expected positive integer epochs, but got {epochs}")
            if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
                raise ValueError("Expected positive integer steps_per_epoch, but got "
                                 f"{steps_per_epoch}")
            self.total_steps = epochs * steps_per_epoch
        else:
            raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
        t = self.total_steps
        if three_phase:
            self._phases = [
                (float(pct_start * t) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (float(2 * pct_start * t) - 2, "max_lr", "initial_lr", "base_momentum",
                 "max_momentum"),
                (t - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
            ]
        else:
            self._phases = [
                (float(pct_start * t) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (t - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"),
            ]
        if pct_start < 0 or pct_start > 1 or not isinstance(pct_start, float):
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self._anneal = self._cos if anneal_strategy == "cos" else self._linear
        groups = optimizer.param_groups
        max_lrs = self._per_group(max_lr, "max_lr")
        if last_epoch == -1:
            for lr, g in zip(max_lrs, groups):
                g["initial_lr"] = lr / div_factor
                g["max_lr"] = lr
                g["min_lr"] = g["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError("optimizer must support momentum or beta1 with "
                                 "`cycle_momentum` option enabled")
            self.use_beta1 = "betas" in optimizer.defaults
            maxm = self._per_group(max_momentum, "max_momentum")
            basem = self._per_group(base_momentum, "base_momentum")
            if last_epoch == -1:
                for mm, bm, g in zip(maxm, basem, groups):
                    self._set_momentum(g, mm)
                    g["max_momentum"] = mm
                    g["base_momentum"] = bm
        super().__init__(optimizer, last_epoch)

    def _per_group(self, v, name):
        n = len(self.optimizer.param_groups)
        if isinstance(v, (list, tuple)):
            if len(v) != n:
                raise ValueError(f"expected {n} values for {name}, got {len(v)}")
            return list(v)
        return [v] * n

    def _set_momentum(self, g, m):
        if self.use_beta1:
            g["betas"] = (m, *g["betas"][1:])
        else:
            g["momentum"] = m

    @staticmethod
    def _cos(start, end, pct):
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)

    @staticmethod
    def _linear(start, end, pct):
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total steps "
                             f"is {self.total_steps}")
        lrs = []
        for g in self.optimizer.param_groups:
            start = 0
            for i, (end, lr0, lr1, m0, m1) in enumerate(self._phases):
                if step <= end or i == len(self._phases) - 1:
                    pct = (step - start) / (end - start)
                    lr = self._anneal(g[lr0], g[lr1], pct)
                    if self.cycle_momentum:
                        mom = self._anneal(g[m0], g[m1], pct)
                    break
                start = end
            lrs.append(lr)
            if self.cycle_momentum:
                self._set_momentum(g, mom)
        return lrs


class ReduceLROnPlateau(LRScheduler):
    """Multiply each group's lr by ``factor`` (not below min_lr) when the
    metric given to ``step(metric)`` has not improved for ``patience``
    epochs (mode 'min' or 'max'; threshold relative or absolute), then wait
    ``cooldown`` epochs. ValueError for factor >= 1, an unknown mode or
    threshold_mode, or a min_lr list of the wrong length."""

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8):
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        self.factor = factor
        self.optimizer = optimizer
        n = len(optimizer.param_groups)
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != n:
                raise ValueError(f"expected {n} min_lrs, got {len(min_lr)}")
            self.default_min_lr = None
            self.min_lrs = list(min_lr)
        else:
            self.default_min_lr = min_lr
            self.min_lrs = [min_lr] * n
        if mode not in ("min", "max"):
            raise ValueError("mode " + mode + " is unknown!")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError("threshold mode " + threshold_mode + " is unknown!")
        self.patience = patience
        self.cooldown = cooldown
        self.eps = eps
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.last_epoch = 0
        self._last_lr = _lrs(self)
        self._reset()

    def _reset(self):
        self.best = math.inf if self.mode == "min" else -math.inf
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    @property
    def in_cooldown(self):
        return self.cooldown_counter > 0

    def is_better(self, a, best):
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min":
            return a < best - self.threshold
        if self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def step(self, metrics, epoch=None):
        """Record one epoch's metric (a number or a 0-d tensor)."""
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self.is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            for i, g in enumerate(self.optimizer.param_groups):
                old = float(g["lr"])
                new = max(old * self.factor, self.min_lrs[i])
                if old - new > self.eps:
                    g["lr"] = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = _lrs(self)


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after the other, switching at the epochs in
    ``milestones`` (len(schedulers) - 1 of them). ValueError when the counts
    disagree or a scheduler drives another optimizer."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        if len(schedulers) < 1:
            raise ValueError(f"{type(self).__name__} expects at least one scheduler, but got "
                             "no scheduler.")
        for i, s in enumerate(schedulers):
            if s.optimizer is not optimizer:
                raise ValueError(f"{type(self).__name__} expects all schedulers to belong to the "
                                 f"same optimizer, but got scheduler {type(s).__name__} at index "
                                 f"{i} has {s.optimizer}, which is different from "
                                 f"{optimizer.__class__.__name__}.")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("Sequential Schedulers expects number of schedulers provided to be "
                             f"one more than the number of milestone points, but got number of "
                             f"schedulers {len(schedulers)} and the number of milestones to be "
                             f"equal to {len(milestones)}")
        self._schedulers = schedulers
        self._milestones = milestones
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for g in optimizer.param_groups:
            g["lr"] = g["initial_lr"]
        for s in schedulers:
            s.last_epoch -= 1
        schedulers[0]._initial_step()
        self._last_lr = schedulers[0].get_last_lr()

    def step(self):
        self.last_epoch += 1
        i = bisect.bisect_right(self._milestones, self.last_epoch)
        s = self._schedulers[i]
        if i > 0 and self._milestones[i - 1] == self.last_epoch:
            s.step(0)
        else:
            s.step()
        self._last_lr = s.get_last_lr()

    def state_dict(self):
        d = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        d["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return d

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        subs = state_dict.pop("_schedulers")
        self.__dict__.update(state_dict)
        for s, sd in zip(self._schedulers, subs):
            s.load_state_dict(sd)


class ChainedScheduler(LRScheduler):
    """Step every scheduler in ``schedulers`` at each step() (their effects
    multiply)."""

    def __init__(self, schedulers, optimizer=None):
        if len(schedulers) < 1:
            raise ValueError(f"{type(self).__name__} expects at least one scheduler to be "
                             "chained, but got no scheduler.")
        self.optimizer = optimizer if optimizer is not None else schedulers[0].optimizer
        self._schedulers = schedulers
        self._last_lr = _lrs(self._schedulers[-1])

    def step(self):
        for s in self._schedulers:
            s.step()
        self._last_lr = _lrs(self._schedulers[-1])
