"""``torch.cuda.amp``: torch's deprecated names for ``torch.amp`` on "cuda". Each warns as
torch's does (a FutureWarning naming the new spelling), then, there being no CUDA, the scaler
and autocast warn again and disable themselves."""
from __future__ import annotations

import functools
import warnings

from disthook import _dtype
from disthook.amp import autocast_mode, grad_scaler

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd"]


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"`torch.cuda.amp.{old}(args...)` is deprecated. Please use "
                  f"`{new}` instead.", FutureWarning, stacklevel=3)


class GradScaler(grad_scaler.GradScaler):
    """``torch.amp.GradScaler("cuda", ...)``: disabled, with torch's warnings."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True) -> None:
        _deprecated("GradScaler", "torch.amp.GradScaler('cuda', args...)")
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


class autocast(autocast_mode.autocast):
    """``torch.amp.autocast("cuda", ...)``: disabled, with torch's warnings."""

    def __init__(self, enabled: bool = True, dtype=_dtype.float16,
                 cache_enabled: bool = True) -> None:
        _deprecated("autocast", "torch.amp.autocast('cuda', args...)")
        super().__init__("cuda", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


def custom_fwd(fwd=None, *, cast_inputs=None):
    """``torch.amp.custom_fwd(..., device_type="cuda")``."""
    _deprecated("custom_fwd", "torch.amp.custom_fwd(args..., device_type='cuda')")
    return functools.partial(autocast_mode.custom_fwd, device_type="cuda")(
        fwd=fwd, cast_inputs=cast_inputs)


def custom_bwd(bwd):
    """``torch.amp.custom_bwd(..., device_type="cuda")``."""
    _deprecated("custom_bwd", "torch.amp.custom_bwd(args..., device_type='cuda')")
    return functools.partial(autocast_mode.custom_bwd, device_type="cuda")(bwd)
