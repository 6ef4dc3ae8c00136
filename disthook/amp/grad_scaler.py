"""``torch.amp.GradScaler``: scales the loss so that small gradients survive, unscales the
gradients before the optimizer step, skips steps whose gradients are not finite, and adapts
the scale (backoff after an overflow, growth after ``growth_interval`` clean steps).

On the CPU (``GradScaler("cpu")``) every method does what torch's does, in the same float32
arithmetic. For "cuda" (the default device, and ``torch.cuda.amp.GradScaler``) torch finds no
CUDA, warns and disables the scaler, so does this one: then ``scale`` returns its input,
``step`` calls ``optimizer.step()`` and the other methods do nothing, as torch's.
"""
from __future__ import annotations

import inspect
import warnings
from collections import defaultdict
from collections.abc import Iterable
from enum import Enum
from typing import Any

import numpy as np

__all__ = ["GradScaler", "OptState"]


class OptState(Enum):
    """Where an optimizer is in the iteration: nothing done, gradients unscaled, stepped."""

    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _refresh_per_optimizer_state() -> dict[str, Any]:
    return {"stage": OptState.READY, "found_inf_per_device": {}}


def _non_finite_check_and_unscale_(grads: list, found_inf, inv_scale) -> None:
    """Multiply every gradient by ``inv_scale`` in place; set ``found_inf`` to 1 if any
    holds an inf or a NaN (torch's ``_amp_foreach_non_finite_check_and_unscale_``)."""
    for grad in grads:
        if not np.isfinite(grad._data).all():
            found_inf.fill_(1.0)
        grad.mul_(inv_scale)


class GradScaler:
    """Dynamic loss scaling with torch's arguments, state and checks."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        self._device = device
        self._enabled = enabled
        if self._device == "cuda" and enabled:
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  "
                          "Disabling.", stacklevel=2)
            self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
            self._init_scale = init_scale
            self._scale = None  # made by the first scale(), as torch does
            self._growth_factor = growth_factor
            self._backoff_factor = backoff_factor
            self._growth_interval = growth_interval
            self._init_growth_tracker = 0
            self._growth_tracker = None
            self._per_optimizer_states: dict[int, dict[str, Any]] = defaultdict(
                _refresh_per_optimizer_state)

    def _check_scale_growth_tracker(self, funcname: str) -> tuple:
        fix = ("This may indicate your script did not use scaler.scale(loss or outputs) "
               "earlier in the iteration.")
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  " + fix)
        if self._growth_tracker is None:
            raise AssertionError(f"Attempted {funcname} but _growth_tracker is None.  " + fix)
        return self._scale, self._growth_tracker

    def _lazy_init_scale_growth_tracker(self) -> None:
        from disthook import float32, full, int32

        if self._growth_tracker is not None:
            raise AssertionError("_growth_tracker initialized before _scale")
        self._scale = full((), self._init_scale, dtype=float32)
        self._growth_tracker = full((), self._init_growth_tracker, dtype=int32)

    def scale(self, outputs):
        """``outputs`` (a tensor, or tensors in lists, tuples and iterables) times the scale;
        unchanged when disabled."""
        from disthook.tensor import Tensor

        if not self._enabled:
            return outputs

        def apply_scale(val):
            if isinstance(val, Tensor):
                if self._scale is None:
                    self._lazy_init_scale_growth_tracker()
                return val * self._scale
            if isinstance(val, Iterable):
                scaled = map(apply_scale, val)
                return type(val)(scaled) if isinstance(val, (list, tuple)) else scaled
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")

        return apply_scale(outputs)

    def _unscale_grads_(self, optimizer, inv_scale, found_inf, allow_fp16: bool) -> dict:
        """Unscale the gradients of ``optimizer``'s parameters, a call per device and dtype;
        ``{device: found_inf}``."""
        from disthook import autograd, float16
        from disthook.tensor import Tensor

        per_device_and_dtype = defaultdict(lambda: defaultdict(list))
        with autograd.no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if not isinstance(param, Tensor):
                        raise AssertionError(
                            f"expected param to be torch.Tensor, got {type(param).__name__}")
                    if param.grad is None:
                        continue
                    if not allow_fp16 and param.grad.dtype == float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    per_device_and_dtype[param.grad.device][param.grad.dtype].append(param.grad)
            for per_dtype in per_device_and_dtype.values():
                for grads in per_dtype.values():
                    _non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        return {device: found_inf for device in per_device_and_dtype}

    def unscale_(self, optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale, once per iteration, recording
        whether any is inf or NaN."""
        from disthook import float32, full

        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        if optimizer_state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the "
                               "last update().")
        if optimizer_state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        # the reciprocal in float64, then float32, as torch
        inv_scale = full((), np.float32(1.0 / np.float64(self._scale.item())), dtype=float32)
        found_inf = full((), 0.0, dtype=float32)
        optimizer_state["found_inf_per_device"] = self._unscale_grads_(
            optimizer, inv_scale, found_inf, False)
        optimizer_state["stage"] = OptState.UNSCALED

    def _maybe_opt_step(self, optimizer, optimizer_state: dict, *args, **kwargs):
        if not sum(v.item() for v in optimizer_state["found_inf_per_device"].values()):
            return optimizer.step(*args, **kwargs)
        return None

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step(*args, **kwargs)`` on unscaled gradients, skipped when any
        gradient is inf or NaN; its return value (None when skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        self._check_scale_growth_tracker("step")
        optimizer_state = self._per_optimizer_states[id(optimizer)]
        if optimizer_state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            return self._step_scaling_optimizer(optimizer, optimizer_state, *args, **kwargs)
        if optimizer_state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if len(optimizer_state["found_inf_per_device"]) == 0:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        retval = self._maybe_opt_step(optimizer, optimizer_state, *args, **kwargs)
        optimizer_state["stage"] = OptState.STEPPED
        return retval

    def _step_scaling_optimizer(self, optimizer, optimizer_state: dict, *args, **kwargs):
        """The step of an optimizer that unscales by itself (``_step_supports_amp_scaling``):
        it gets the scaler as ``grad_scaler=`` if its step takes one (torch's deprecation
        warning), else ``grad_scale`` and ``found_inf`` as attributes for the call."""
        has_grad_scaler_kwarg = "grad_scaler" in inspect.signature(optimizer.step).parameters
        if has_grad_scaler_kwarg:
            warnings.warn(
                "GradScaler is going to stop passing itself as a keyword argument to the passed "
                "optimizer. In the near future GradScaler registers `grad_scale: Tensor` and "
                "`found_inf: Tensor` to the passed optimizer and let the optimizer use them "
                "directly.", FutureWarning, stacklevel=3)
            kwargs["grad_scaler"] = self
        else:
            if optimizer_state["stage"] is OptState.READY:
                self._check_inf_per_device(optimizer)
            optimizer.grad_scale = (
                getattr(optimizer, "grad_scale", None)
                if optimizer_state["stage"] == OptState.UNSCALED
                else self._scale * getattr(optimizer, "grad_scale", 1))
            optimizer.found_inf = sum(optimizer_state["found_inf_per_device"].values())
        retval = optimizer.step(*args, **kwargs)
        optimizer_state["stage"] = OptState.STEPPED
        if not has_grad_scaler_kwarg:
            del optimizer.grad_scale
            del optimizer.found_inf
        return retval

    def update(self, new_scale=None) -> None:
        """Set the scale for the next iteration: ``new_scale`` if given; else times
        ``backoff_factor`` if any step this iteration met an inf or NaN, times
        ``growth_factor`` after ``growth_interval`` clean iterations in a row."""
        from disthook.tensor import Tensor

        if not self._enabled:
            return
        _scale, _growth_tracker = self._check_scale_growth_tracker("update")
        if new_scale is not None:
            if isinstance(new_scale, float):
                _scale.fill_(new_scale)
            else:
                reason = ("new_scale should be a float or a 1-element torch.cuda.FloatTensor or "
                          "torch.FloatTensor with requires_grad=False.")
                if not isinstance(new_scale, Tensor) or new_scale.device.type != self._device:
                    raise AssertionError(reason)
                if new_scale.numel() != 1 or new_scale.requires_grad is True:
                    raise AssertionError(reason)
                _scale.copy_(new_scale)
        else:
            found_infs = [found_inf for state in self._per_optimizer_states.values()
                          for found_inf in state["found_inf_per_device"].values()]
            if len(found_infs) == 0:
                raise AssertionError("No inf checks were recorded prior to update.")
            self._update_scale(sum(f.item() for f in found_infs))
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def _update_scale(self, found_inf: float) -> None:
        """torch's ``_amp_update_scale_``: the products in float64, stored as float32; a
        growth that would overflow leaves the scale as it is."""
        scale = float(self._scale.item())
        if found_inf:
            self._scale.fill_(float(np.float32(scale * self._backoff_factor)))
            self._growth_tracker.fill_(0)
            return
        successful = int(self._growth_tracker.item()) + 1
        if successful == self._growth_interval:
            grown = np.float32(scale * self._growth_factor)
            if np.isfinite(grown):
                self._scale.fill_(float(grown))
            successful = 0
        self._growth_tracker.fill_(successful)

    def get_scale(self) -> float:
        """The current scale; 1.0 when disabled."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale.item())

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = new_interval

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        if self._growth_tracker is None:
            return self._init_growth_tracker
        return int(self._growth_tracker.item())

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict[str, Any]:
        """scale, growth_factor, backoff_factor, growth_interval, _growth_tracker; empty when
        disabled."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._init_scale = state_dict["scale"]
        if self._scale is not None:
            self._scale.fill_(state_dict["scale"])
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._init_growth_tracker = state_dict["_growth_tracker"]
        if self._growth_tracker is not None:
            self._growth_tracker.fill_(state_dict["_growth_tracker"])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._enabled:
            if len(self._per_optimizer_states) != 0:
                raise AssertionError("A GradScaler instance may only be pickled at the beginning "
                                     "of an iteration, or at the end after scaler.update().")
            # the scale travels as numbers; the tensors are made again by the next scale()
            state["_init_scale"] = self.get_scale()
            state["_init_growth_tracker"] = self._get_growth_tracker()
            state["_scale"] = None
            state["_growth_tracker"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _check_inf_per_device(self, optimizer) -> dict:
        """Record, without unscaling, whether ``optimizer``'s gradients hold an inf or NaN."""
        from disthook import float32, full

        self._check_scale_growth_tracker("_check_inf_per_device")
        dummy_inv_scale = full((), 1.0, dtype=float32)
        found_inf = full((), 0.0, dtype=float32)
        self._per_optimizer_states[id(optimizer)]["found_inf_per_device"] = (
            self._unscale_grads_(optimizer, dummy_inv_scale, found_inf, True))
        return self._per_optimizer_states[id(optimizer)]["found_inf_per_device"]

    def _found_inf_per_device(self, optimizer) -> dict:
        return self._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
