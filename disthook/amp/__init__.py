"""``torch.amp``: autocast regions and gradient scaling (see ``autocast_mode`` for what an
enabled CPU autocast does in disthook, and ``grad_scaler``)."""
from disthook.amp.autocast_mode import (
    autocast,
    custom_bwd,
    custom_fwd,
    is_autocast_available,
)
from disthook.amp.grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd", "is_autocast_available"]
