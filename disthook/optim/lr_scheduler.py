"""Learning-rate schedules that rewrite ``group["lr"]`` of an optimizer, as torch's do:
``LRScheduler`` (the base: an initial step at construction, ``step``, ``get_last_lr``,
``state_dict``), ``StepLR``, ``ExponentialLR``, ``LambdaLR``, ``ConstantLR``, ``LinearLR``,
``CosineAnnealingLR``, ``OneCycleLR`` (which also cycles momentum), ``SequentialLR``,
``ReduceLROnPlateau`` (stepped with a metric), ``MultiStepLR``, ``MultiplicativeLR``,
``PolynomialLR``, ``CosineAnnealingWarmRestarts``, ``ChainedScheduler`` and ``CyclicLR``."""
from __future__ import annotations

import bisect
import functools
import math
import types
import warnings
import weakref
from collections import Counter

from disthook.optim.optimizer import Optimizer

_EPOCH_DEPRECATION = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated where "
    "possible. Please use `scheduler.step()` to step the scheduler. During the deprecation, if "
    "epoch is different from None, the closed form is used instead of the new chainable form, "
    "where available. Please open an issue if you are unable to replicate your use case: "
    "https://github.com/pytorch/pytorch/issues/new/choose.")
_ORDER_WARNING = (
    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 and "
    "later, you should call them in the opposite order: `optimizer.step()` before "
    "`lr_scheduler.step()`.  Failure to do this will result in PyTorch skipping the first value "
    "of the learning rate schedule. See more details at "
    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate")
_OVERRIDDEN_WARNING = (
    "Seems like `optimizer.step()` has been overridden after learning rate scheduler "
    "initialization. Please, make sure to call `optimizer.step()` before "
    "`lr_scheduler.step()`. See more details at "
    "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate")
_GET_LR_WARNING = "To get the last learning rate computed by the scheduler, please use " \
                  "`get_last_lr()`."


class LRScheduler:
    """Base of the schedules: ``get_lr`` gives the next learning rate of each group."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] when "
                        "resuming scheduler with last_epoch >= 0.\nThis typically happens "
                        "when:\n1. You're trying to resume training from a checkpoint but "
                        "haven't properly loaded the optimizer state\n2. You're using "
                        "last_epoch >= 0 for a fresh training run (not recommended)")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        _track_optimizer_steps(optimizer)
        self._get_lr_called_within_step = False
        self._initial_step()

    _is_initial = False  # True during the step made at construction

    def _initial_step(self) -> None:
        """The step made at construction, which sets the epoch-0 learning rates."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def state_dict(self) -> dict:
        """Everything but the optimizer."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)

    def get_last_lr(self) -> list:
        return self._last_lr

    def get_lr(self) -> list:
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> None:
        self._count_step()
        if epoch is not None:
            warnings.warn(_EPOCH_DEPRECATION, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _count_step(self) -> None:
        """One more step; at the first after construction, torch's warnings when the
        optimizer did not step before it or its ``step`` was replaced."""
        if self._step_count == 1:
            if not getattr(self.optimizer.step, "_wrapped_by_lr_sched", False):
                warnings.warn(_OVERRIDDEN_WARNING, UserWarning, stacklevel=3)
            elif not getattr(self.optimizer, "_opt_called", False):
                warnings.warn(_ORDER_WARNING, UserWarning, stacklevel=3)
        self._step_count += 1

    def _update_lr(self, epoch: int | None = None) -> None:
        """Move to the next epoch (or to ``epoch``, by the closed form where there is one)
        and write each group's new learning rate."""
        self._get_lr_called_within_step = True
        try:
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                closed_form = getattr(self, "_get_closed_form_lr", None)
                values = closed_form() if closed_form is not None else self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _warn_if_called_outside_step(self) -> None:
        if not self._get_lr_called_within_step:
            warnings.warn(_GET_LR_WARNING, UserWarning, stacklevel=3)

    def _lrs(self) -> list:
        return [group["lr"] for group in self.optimizer.param_groups]


def _track_optimizer_steps(optimizer: Optimizer) -> None:
    """Wrap ``optimizer.step`` once so it records that it ran (for the order warning)."""
    if getattr(optimizer.step, "_wrapped_by_lr_sched", False):
        return
    opt_ref = weakref.ref(optimizer)
    func = optimizer.step.__func__

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        opt = opt_ref()
        opt._opt_called = True
        return func.__get__(opt, opt.__class__)(*args, **kwargs)

    wrapper._wrapped_by_lr_sched = True
    optimizer.step = wrapper


class _LRScheduler(LRScheduler):
    """torch's older name of the base, which schedules written against torch 1.x subclass."""


class StepLR(LRScheduler):
    """Multiply each group's learning rate by ``gamma`` every ``step_size`` epochs."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_if_called_outside_step()
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _get_closed_form_lr(self) -> list:
        return [base * self.gamma ** (self.last_epoch // self.step_size)
                for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply each group's learning rate by ``gamma`` every epoch."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_if_called_outside_step()
        if self.last_epoch == 0:
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _get_closed_form_lr(self) -> list:
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


class LambdaLR(LRScheduler):
    """Each group's learning rate is its initial one times ``lr_lambda(epoch)``."""

    def __init__(self, optimizer: Optimizer, lr_lambda, last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        if not isinstance(lr_lambda, (list, tuple)):
            self.lr_lambdas = [lr_lambda] * len(optimizer.param_groups)
        else:
            if len(lr_lambda) != len(optimizer.param_groups):
                raise ValueError(f"Expected {len(optimizer.param_groups)} lr_lambdas, but got "
                                 f"{len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict:
        """As the base, with plain functions left out (only callable objects are saved)."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else fn.__dict__.copy()
                               for fn in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        lr_lambdas = state_dict.pop("lr_lambdas")
        self.__dict__.update(state_dict)
        state_dict["lr_lambdas"] = lr_lambdas
        for i, fn in enumerate(lr_lambdas):
            if fn is not None:
                self.lr_lambdas[i].__dict__.update(fn)

    def get_lr(self) -> list:
        self._warn_if_called_outside_step()
        return [base * fn(self.last_epoch) for fn, base in zip(self.lr_lambdas, self.base_lrs)]


class ConstantLR(LRScheduler):
    """Multiply the learning rates by ``factor`` until epoch ``total_iters``."""

    def __init__(self, optimizer: Optimizer, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1) -> None:
        if factor > 1.0 or factor < 0:
            raise ValueError("Constant multiplicative factor expected to be between 0 and 1.")
        self.factor = factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_if_called_outside_step()
        if self.last_epoch == 0:
            return [lr * self.factor for lr in self._lrs()]
        if self.last_epoch != self.total_iters:
            return self._lrs()
        return [lr * (1.0 / self.factor) for lr in self._lrs()]

    def _get_closed_form_lr(self) -> list:
        done = self.last_epoch >= self.total_iters
        return [base * (self.factor + done * (1 - self.factor)) for base in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale the learning rates by a factor going linearly from ``start_factor`` to
    ``end_factor`` over ``total_iters`` epochs."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3,
                 end_factor: float = 1.0, total_iters: int = 5, last_epoch: int = -1) -> None:
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 and "
                             "less or equal to 1.")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_if_called_outside_step()
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in self._lrs()]
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._lrs()
        change = self.end_factor - self.start_factor
        ratio = 1.0 + change / (self.total_iters * self.start_factor
                                + (self.last_epoch - 1) * change)
        return [lr * ratio for lr in self._lrs()]

    def _get_closed_form_lr(self) -> list:
        frac = min(self.total_iters, self.last_epoch) / self.total_iters
        return [base * (self.start_factor + (self.end_factor - self.start_factor) * frac)
                for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Anneal the learning rates from their initial value to ``eta_min`` along half a
    cosine over ``T_max`` epochs (recursively, as torch does, so outside changes carry)."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,
                 last_epoch: int = -1) -> None:
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_if_called_outside_step()
        t, t_max, eta_min = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return self._lrs()
        if self._step_count == 1 and t > 0:
            return [eta_min + (base - eta_min) * (1 + math.cos(t * math.pi / t_max)) / 2
                    for base in self.base_lrs]
        if (t - 1 - t_max) % (2 * t_max) == 0:
            return [lr + (base - eta_min) * (1 - math.cos(math.pi / t_max)) / 2
                    for lr, base in zip(self._lrs(), self.base_lrs)]
        ratio = (1 + math.cos(math.pi * t / t_max)) / (1 + math.cos(math.pi * (t - 1) / t_max))
        return [ratio * (lr - eta_min) + eta_min for lr in self._lrs()]

    def _get_closed_form_lr(self) -> list:
        return [self.eta_min + (base - self.eta_min)
                * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]


class _CyclesMomentum:
    """What OneCycleLR and CyclicLR share: momentum (or Adam's beta1) cycling opposite to the
    learning rate, between each group's ``base_momentum`` and ``max_momentum``."""

    def _start_momentum_cycle(self, optimizer: Optimizer, cycle_momentum: bool, base_momentum,
                              max_momentum, last_epoch: int) -> None:
        self.cycle_momentum = cycle_momentum
        if not cycle_momentum:
            return
        if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
            raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` "
                             "option enabled")
        self.use_beta1 = "betas" in optimizer.defaults
        tops = _per_group("max_momentum", optimizer, max_momentum)
        bases = _per_group("base_momentum", optimizer, base_momentum)
        if last_epoch == -1:
            for top, base, group in zip(tops, bases, optimizer.param_groups):
                self._set_momentum(group, top)
                group["max_momentum"] = top
                group["base_momentum"] = base

    def _set_momentum(self, group: dict, value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value


class OneCycleLR(_CyclesMomentum, LRScheduler):
    """The 1cycle policy: learning rate up from ``max_lr / div_factor`` to ``max_lr``, then
    down to ``initial / final_div_factor`` (cosine or linear), momentum the other way; one
    step per batch, ``total_steps`` in all."""

    def __init__(self, optimizer: Optimizer, max_lr, total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum=0.85, max_momentum=0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
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
            raise ValueError("You must define either total_steps OR (epochs AND "
                             "steps_per_epoch)")
        up_end = float(pct_start * self.total_steps) - 1
        if three_phase:
            phases = [(up_end, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                      (float(2 * pct_start * self.total_steps) - 2, "max_lr", "initial_lr",
                       "base_momentum", "max_momentum"),
                      (self.total_steps - 1, "initial_lr", "min_lr", "max_momentum",
                       "max_momentum")]
        else:
            phases = [(up_end, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                      (self.total_steps - 1, "max_lr", "min_lr", "base_momentum",
                       "max_momentum")]
        # torch's layout (a dict per phase), which its state dicts carry
        self._schedule_phases = [dict(zip(_PHASE_KEYS, phase)) for phase in phases]
        if pct_start < 0 or pct_start > 1 or not isinstance(pct_start, float):
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self._anneal_func_type = anneal_strategy
        max_lrs = _per_group("max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for group, top in zip(optimizer.param_groups, max_lrs):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self._start_momentum_cycle(optimizer, cycle_momentum, base_momentum, max_momentum,
                                   last_epoch)
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list:
        self._warn_if_called_outside_step()
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total "
                             f"steps is {self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end_step, lr0, lr1, m0, m1 = (phase[key] for key in _PHASE_KEYS)
                if step <= end_step or i == len(self._schedule_phases) - 1:
                    pct = (step - start_step) / (end_step - start_step)
                    lr = self._anneal(group[lr0], group[lr1], pct)
                    momentum = (self._anneal(group[m0], group[m1], pct)
                                if self.cycle_momentum else None)
                    break
                start_step = end_step
            lrs.append(lr)
            if self.cycle_momentum:
                self._set_momentum(group, momentum)
        return lrs


_PHASE_KEYS = ("end_step", "start_lr", "end_lr", "start_momentum", "end_momentum")


def _per_group(name: str, optimizer: Optimizer, value) -> list:
    """One value per parameter group: a list of that length, or one value repeated."""
    if isinstance(value, (list, tuple)):
        if len(value) != len(optimizer.param_groups):
            raise ValueError(f"{name} must have the same length as optimizer.param_groups. "
                             f"{name} has {len(value)} values, param_groups has "
                             f"{len(optimizer.param_groups)}.")
        return list(value)
    return [value] * len(optimizer.param_groups)


def _check_schedulers(name: str, optimizer: Optimizer, schedulers) -> None:
    """torch's checks of the schedulers a composite scheduler runs: each has an optimizer,
    the same one, and none is a ReduceLROnPlateau (it needs a metric)."""
    for i, scheduler in enumerate(schedulers):
        if not hasattr(scheduler, "optimizer"):
            raise TypeError(f"{name} at index {i} should have `optimizer` as its attribute.")
        if isinstance(scheduler, ReduceLROnPlateau):
            raise ValueError(  # noqa: TRY004  # torch's type and text
                f"{name} does not support `ReduceLROnPlateau` scheduler as it requires "
                "additional kwargs to be specified when calling `step`, but got one at "
                f"index {i} in the given schedulers sequence.")
        if optimizer != scheduler.optimizer:
            raise ValueError(
                f"{name} expects all schedulers to belong to the same optimizer, but got "
                f"scheduler {type(scheduler).__name__} at index {i} has "
                f"{scheduler.optimizer}, which is different from "
                f"{type(optimizer).__name__}.")


def _composite_state_dict(self) -> dict:
    """A composite scheduler's state: its own, and each of its schedulers' state dict."""
    state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
    state["_schedulers"] = [s.state_dict() for s in self._schedulers]
    return state


def _composite_load_state_dict(self, state_dict: dict) -> None:
    schedulers = state_dict.pop("_schedulers")
    self.__dict__.update(state_dict)
    state_dict["_schedulers"] = schedulers
    for scheduler, state in zip(self._schedulers, schedulers):
        scheduler.load_state_dict(state)


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after another, switching at the epochs in ``milestones``."""

    def __init__(self, optimizer: Optimizer, schedulers: list, milestones: list,
                 last_epoch: int = -1) -> None:
        name = type(self).__name__
        if len(schedulers) < 1:
            raise ValueError(f"{name} expects at least one scheduler, but got no scheduler.")
        _check_schedulers(name, optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(
                "Sequential Schedulers expects number of schedulers provided to be one more "
                "than the number of milestone points, but got number of schedulers "
                f"{len(schedulers)} and the number of milestones to be equal to "
                f"{len(milestones)}")
        self._schedulers = schedulers
        self._milestones = milestones
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        # undo what the schedulers' own initial steps did, then start the first one again
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self.recursive_undo()
        first = self._schedulers[bisect.bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def recursive_undo(self, sched=None) -> None:
        """Step every (nested) scheduler's epoch back by one."""
        scheds = self if sched is None else sched
        if hasattr(scheds, "_schedulers"):
            for s in scheds._schedulers:
                self.recursive_undo(s)
        elif hasattr(scheds, "last_epoch"):
            scheds.last_epoch -= 1

    def step(self) -> None:
        self.last_epoch += 1
        idx = bisect.bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    state_dict = _composite_state_dict
    load_state_dict = _composite_load_state_dict


class ReduceLROnPlateau(LRScheduler):
    """Divide the learning rates by ``1 / factor`` once ``metrics`` given to ``step`` have
    not improved (by ``threshold``) for more than ``patience`` epochs."""

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1,
                 patience: int = 10, threshold: float = 1e-4, threshold_mode: str = "rel",
                 cooldown: int = 0, min_lr=0, eps: float = 1e-8) -> None:
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        self.factor = factor
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != len(optimizer.param_groups):
                raise ValueError(f"expected {len(optimizer.param_groups)} min_lrs, got "
                                 f"{len(min_lr)}")
            self.default_min_lr = None
            self.min_lrs = list(min_lr)
        else:
            self.default_min_lr = min_lr
            self.min_lrs = [min_lr] * len(optimizer.param_groups)
        self.patience = patience
        self.cooldown = cooldown
        self.eps = eps
        self.last_epoch = 0
        self._last_lr = self._lrs()
        self._init_is_better(mode, threshold, threshold_mode)
        self._reset()

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def step(self, metrics, epoch=None) -> None:
        current = float(metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            warnings.warn(_EPOCH_DEPRECATION, UserWarning, stacklevel=2)
        self.last_epoch = epoch
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = self._lrs()

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise RuntimeError(
                    f"The number of param groups in the `optimizer` ({len(groups)}) differs "
                    f"from when `ReduceLROnPlateau` was initialized ({len(self.min_lrs)}), "
                    "usually due to a new param group being added to the optimizer. Please "
                    "modify the `min_lrs` field to match the length of the `optimizer` param "
                    "groups.")
            self.min_lrs = [self.default_min_lr] * len(groups)
        for group, min_lr in zip(groups, self.min_lrs):
            old = float(group["lr"])
            new = max(old * self.factor, min_lr)
            if old - new > self.eps:
                group["lr"] = new

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def _is_better(self, a: float, best: float) -> bool:
        if self.mode == "min":
            if self.threshold_mode == "rel":
                return a < best * (1.0 - self.threshold)
            return a < best - self.threshold
        if self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        if mode not in {"min", "max"}:
            raise ValueError("mode " + mode + " is unknown!")
        if threshold_mode not in {"rel", "abs"}:
            raise ValueError("threshold mode " + threshold_mode + " is unknown!")
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode = mode
        self.threshold = threshold
        self.threshold_mode = threshold_mode

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
        self._init_is_better(self.mode, self.threshold, self.threshold_mode)


class MultiStepLR(LRScheduler):
    """Multiply each group's learning rate by ``gamma`` at each milestone epoch (a milestone
    listed twice multiplies twice)."""

    def __init__(self, optimizer: Optimizer, milestones, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.milestones = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_if_called_outside_step()
        times = self.milestones.get(self.last_epoch, 0)
        return [lr * self.gamma ** times for lr in self._lrs()]

    def _get_closed_form_lr(self) -> list:
        passed = bisect.bisect_right(sorted(self.milestones.elements()), self.last_epoch)
        return [base * self.gamma ** passed for base in self.base_lrs]


class MultiplicativeLR(LambdaLR):
    """Multiply each group's learning rate by ``lr_lambda(epoch)`` every epoch after the
    first."""

    def get_lr(self) -> list:
        self._warn_if_called_outside_step()
        if self.last_epoch > 0:
            return [lr * fn(self.last_epoch) for fn, lr in zip(self.lr_lambdas, self._lrs())]
        return self._lrs()


class PolynomialLR(LRScheduler):
    """Decay the learning rates to zero over ``total_iters`` epochs along
    ``(1 - epoch / total_iters) ** power``."""

    def __init__(self, optimizer: Optimizer, total_iters: int = 5, power: float = 1.0,
                 last_epoch: int = -1) -> None:
        self.total_iters = total_iters
        self.power = power
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_if_called_outside_step()
        t, total = self.last_epoch, self.total_iters
        if t == 0 or t > total:
            return self._lrs()
        factor = ((1.0 - t / total) / (1.0 - (t - 1) / total)) ** self.power
        return [lr * factor for lr in self._lrs()]

    def _get_closed_form_lr(self) -> list:
        left = 1.0 - min(self.total_iters, self.last_epoch) / self.total_iters
        return [base * left ** self.power for base in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from each group's initial learning rate to ``eta_min`` over ``T_0``
    epochs, then again over ``T_0 * T_mult``, ... (SGDR). ``step(epoch)`` takes fractional
    epochs, for stepping per batch."""

    def __init__(self, optimizer: Optimizer, T_0: int, T_mult: int = 1,
                 eta_min: float = 0.0, last_epoch: int = -1) -> None:
        if T_0 <= 0 or not isinstance(T_0, int):
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if T_mult < 1 or not isinstance(T_mult, int):
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        if not isinstance(eta_min, (float, int)):
            raise ValueError(  # noqa: TRY004  # torch's type and text
                f"Expected float or int eta_min, but got {eta_min} of type "
                f"{type(eta_min).__name__}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list:
        self._warn_if_called_outside_step()
        return [self.eta_min + (base - self.eta_min)
                * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for base in self.base_lrs]

    def step(self, epoch=None) -> None:
        # torch's own step here counts no steps (its _step_count stays 0 in its state dict)
        # and so never warns about the order of the optimizer's and the scheduler's steps
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur -= self.T_i
                self.T_i *= self.T_mult
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
        self._get_lr_called_within_step = True
        try:
            values = self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]


class ChainedScheduler(LRScheduler):
    """Step every one of ``schedulers`` at each step, in order (their effects compose)."""

    def __init__(self, schedulers, optimizer: Optimizer | None = None) -> None:
        if len(schedulers) < 1:
            raise ValueError(f"{type(self).__name__} expects at least one scheduler to be "
                             "chained, but got no scheduler.")
        optimizer = optimizer or schedulers[0].optimizer
        _check_schedulers(type(self).__name__, optimizer, schedulers)
        self._schedulers = list(schedulers)
        self.optimizer = optimizer
        self._last_lr = self._lrs()

    def step(self) -> None:
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = self._lrs()

    state_dict = _composite_state_dict
    load_state_dict = _composite_load_state_dict


class CyclicLR(_CyclesMomentum, LRScheduler):
    """Cycle each group's learning rate between ``base_lr`` and ``max_lr`` (``step`` once per
    batch): up over ``step_size_up`` steps, down over ``step_size_down``, the amplitude scaled
    by ``mode`` ("triangular", "triangular2", "exp_range") or ``scale_fn``; momentum (or Adam's
    beta1) cycles the other way between ``max_momentum`` and ``base_momentum``."""

    def __init__(self, optimizer: Optimizer, base_lr, max_lr, step_size_up: int = 2000,
                 step_size_down: int | None = None, mode: str = "triangular",
                 gamma: float = 1.0, scale_fn=None, scale_mode: str = "cycle",
                 cycle_momentum: bool = True, base_momentum=0.8, max_momentum=0.9,
                 last_epoch: int = -1) -> None:
        base_lrs = _per_group("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                group["lr"] = lr
        self.max_lrs = _per_group("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError("mode is invalid and scale_fn is None")
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom = scale_fn
        self.scale_mode = scale_mode if scale_fn is not None else (
            "iterations" if mode == "exp_range" else "cycle")
        self._start_momentum_cycle(optimizer, cycle_momentum, base_momentum, max_momentum,
                                   last_epoch)
        if cycle_momentum:
            self.base_momentums = [g["base_momentum"] for g in optimizer.param_groups]
            self.max_momentums = [g["max_momentum"] for g in optimizer.param_groups]
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def scale_fn(self, x) -> float:
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self) -> list:
        self._warn_if_called_outside_step()
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        if x <= self.step_ratio:
            factor = x / self.step_ratio
        else:
            factor = (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [base + (high - base) * factor * scale
               for base, high in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for group, low, high in zip(self.optimizer.param_groups, self.base_momentums,
                                        self.max_momentums):
                self._set_momentum(group, high - (high - low) * factor * scale)
        return lrs

    def state_dict(self) -> dict:
        """As the base, with a plain-function ``scale_fn`` left out (as torch)."""
        state = super().state_dict()
        if isinstance(state.get("_scale_fn_custom"), types.FunctionType):
            state["_scale_fn_custom"] = None
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        custom = self._scale_fn_custom
        super().load_state_dict(state_dict)
        if self._scale_fn_custom is None:
            self._scale_fn_custom = custom
