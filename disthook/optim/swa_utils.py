"""``torch.optim.swa_utils``: weight averaging as torch's training scripts use it.

``AveragedModel`` keeps a copy of a model whose parameters (and, with ``use_buffers``, buffers)
are a running average of the model's: equal weights (SWA) by default, or the rule an
``avg_fn`` (one tensor at a time) or ``multi_avg_fn`` (lists of tensors, in place) gives, such
as ``get_ema_multi_avg_fn(0.999)``. ``SWALR`` anneals each group's learning rate to its
``swa_lr``; ``update_bn`` recomputes batch-norm statistics with one pass over a loader.
A deployed model is averaged like a local one: the copy is a plain local model holding the
workers' values (``copy.deepcopy`` of a deployed model gives that), updated from them.
"""
from __future__ import annotations

import copy
import itertools
import math
import warnings

from disthook._dtype import int64
from disthook.autograd.grad_mode import no_grad
from disthook.nn.modules.batchnorm import _BatchNorm
from disthook.nn.modules.module import Module
from disthook.optim.lr_scheduler import _GET_LR_WARNING, LRScheduler, _per_group
from disthook.tensor import Tensor, tensor

__all__ = ["SWALR", "AveragedModel", "get_ema_avg_fn", "get_ema_multi_avg_fn",
           "get_swa_avg_fn", "get_swa_multi_avg_fn", "update_bn"]


# ---- averaging rules ------------------------------------------------------------------------

_INTEGER_ADDCDIV = (
    "Integer division with addcdiv is no longer supported, and in a future  release addcdiv "
    "will perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be "
    "implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for "
    "integer inputs and as (input + value * tensor1 / tensor2) for float inputs. The future "
    "addcdiv behavior is just the latter implementation: (input + value * tensor1 / tensor2), "
    "for all dtypes.")

def _check_decay(decay) -> None:
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in "
                         "[0,1] range.")


def get_ema_multi_avg_fn(decay=0.999):
    """In place over lists: ``ema <- decay * ema + (1 - decay) * current``."""
    _check_decay(decay)

    @no_grad()
    def ema_update(ema_param_list, current_param_list, _num_averaged) -> None:
        if ema_param_list[0].is_floating_point():
            for p_ema, p_model in zip(ema_param_list, current_param_list, strict=True):
                p_ema.lerp_(p_model, 1 - decay)
        else:  # lerp takes floating tensors only: integer buffers by the formula
            for p_ema, p_model in zip(ema_param_list, current_param_list, strict=True):
                p_ema.copy_(p_ema * decay + p_model * (1 - decay))

    return ema_update


def get_swa_multi_avg_fn():
    """In place over lists: the equally weighted mean of the ``num_averaged`` models seen
    and the current one."""

    @no_grad()
    def swa_update(averaged_param_list, current_param_list, num_averaged) -> None:
        count = num_averaged + 1
        if averaged_param_list[0].is_floating_point():
            weight = 1 / (count.item() if isinstance(count, Tensor) else count)
            for p_avg, p_model in zip(averaged_param_list, current_param_list, strict=True):
                p_avg.lerp_(p_model, weight)
        elif isinstance(num_averaged, Tensor):
            # torch divides in place with addcdiv_, which integer tensors refuse
            raise RuntimeError(_INTEGER_ADDCDIV)
        else:
            for p_avg, p_model in zip(averaged_param_list, current_param_list, strict=True):
                p_avg.add_(p_model - p_avg, alpha=1.0 / count)

    return swa_update


def get_ema_avg_fn(decay=0.999):
    """One tensor: ``decay * ema + (1 - decay) * current`` (returned, not written)."""
    _check_decay(decay)

    @no_grad()
    def ema_update(ema_param, current_param, num_averaged):
        return decay * ema_param + (1 - decay) * current_param

    return ema_update


def get_swa_avg_fn():
    """One tensor: the running equal-weight mean after ``num_averaged`` models."""

    @no_grad()
    def swa_update(averaged_param, current_param, num_averaged):
        return averaged_param + (current_param - averaged_param) / (num_averaged + 1)

    return swa_update


# ---- the averaged model -----------------------------------------------------------------------

class AveragedModel(Module):
    """A copy of ``model`` (``self.module``) whose parameters ``update_parameters(model)``
    averages with the model's; ``n_averaged`` (a long buffer, saved in the state dict) counts
    the models averaged so far. Calling it calls the copy."""

    def __init__(self, model: Module, device=None, avg_fn=None, multi_avg_fn=None,
                 use_buffers: bool = False) -> None:
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = copy.deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", tensor(0, dtype=int64, device=device))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _averaged_tensors(self, model: Module) -> tuple[list, list]:
        if self.use_buffers:
            return (list(itertools.chain(self.module.parameters(), self.module.buffers())),
                    list(itertools.chain(model.parameters(), model.buffers())))
        # torch pairs ``self.parameters()`` (the copy's, n_averaged being a buffer) with the
        # model's parameters, stopping at the shorter list
        return list(self.parameters()), list(model.parameters())

    @no_grad()
    def update_parameters(self, model: Module) -> None:
        """Average ``model``'s current values into the copy: the first call copies them."""
        mine, theirs = self._averaged_tensors(model)
        followed = [] if self.use_buffers else list(model.buffers())
        values = _current(theirs + followed)  # (a deployed model's: read at once)
        pairs = [(p.detach(), q.to(p.device)) for p, q in zip(mine, values)]
        first = bool(self.n_averaged == 0)
        if first:
            for p, q in pairs:
                p.copy_(q)
        else:
            self._average(pairs)
        if not self.use_buffers:
            # buffers are not averaged: they follow the model's
            for b_mine, b_model in zip(self.module.buffers(), values[len(theirs):],
                                       strict=True):
                b_mine.detach().copy_(b_model.to(b_mine.device))
        self.n_averaged += 1

    def _average(self, pairs: list) -> None:
        if self.avg_fn is not None:
            for p, q in pairs:
                p.copy_(self.avg_fn(p, q, self.n_averaged))
            return
        # the list rule goes over each dtype's tensors together, as torch groups them
        groups: dict = {}
        for p, q in pairs:
            mine, theirs = groups.setdefault((p.device, p.dtype), ([], []))
            mine.append(p)
            theirs.append(q)
        for mine, theirs in groups.values():
            if self.multi_avg_fn is not None:
                self.multi_avg_fn(mine, theirs, self.n_averaged)
            else:  # torch's default on the CPU: the one-tensor SWA rule, tensor by tensor
                swa = get_swa_avg_fn()
                for p, q in zip(mine, theirs):
                    p.copy_(swa(p, q, self.n_averaged))


def _current(tensors: list) -> list:
    """Each tensor's current value, detached. Tensors kept elsewhere (a deployed model's,
    whose class reads many at once: ``_read_together``) are read together, one request per
    place, instead of one per tensor."""
    out = [None] * len(tensors)
    elsewhere: dict = {}
    for i, t in enumerate(tensors):
        reader = getattr(type(t), "_read_together", None)
        if reader is None:
            out[i] = t.detach()
        else:
            elsewhere.setdefault(reader, []).append(i)
    for reader, where in elsewhere.items():
        for i, value in zip(where, reader([tensors[i] for i in where])):
            out[i] = value
    return out


# ---- batch-norm statistics --------------------------------------------------------------------

@no_grad()
def update_bn(loader, model: Module, device=None) -> None:
    """Recompute the running statistics of ``model``'s batch norms with one pass over
    ``loader`` (tensors, or lists/tuples whose first item is the input): statistics reset,
    a cumulative average (momentum None) meanwhile, then momenta and training mode restored."""
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    try:
        for batch in loader:
            if isinstance(batch, (list, tuple)):
                batch = batch[0]
            if device is not None:
                batch = batch.to(device)
            model(batch)
    finally:
        for module, momentum in momenta.items():
            module.momentum = momentum
        model.train(was_training)


# ---- the learning-rate schedule ----------------------------------------------------------------

class SWALR(LRScheduler):
    """Anneals each group's learning rate to its ``swa_lr`` over ``anneal_epochs`` steps
    (cosine or linear), then holds it there."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos",
                 last_epoch=-1) -> None:
        swa_lrs = [lr.clone() if isinstance(lr, Tensor) else lr
                   for lr in _per_group("swa_lr", optimizer, swa_lr)]
        for lr, group in zip(swa_lrs, optimizer.param_groups, strict=True):
            group["swa_lr"] = lr
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        """The learning rate the annealing started from, given where it is now."""
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def _set_anneal_func(self, anneal_strategy: str) -> None:
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal

    def get_lr(self) -> list:
        if not self._get_lr_called_within_step:
            warnings.warn(_GET_LR_WARNING, UserWarning, stacklevel=2)
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        groups = self.optimizer.param_groups
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        start = [self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha) for g in groups]
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        return [g["swa_lr"] * alpha + lr * (1 - alpha) for g, lr in zip(groups, start)]

    def state_dict(self) -> dict:
        """Everything but the optimizer and the annealing function (rebuilt on load)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
