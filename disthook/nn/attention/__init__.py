"""``torch.nn.attention``: choosing the kernels of ``scaled_dot_product_attention``.
disthook has one (the math one), so ``sdpa_kernel`` only records the choice for its region
(``torch.backends.cuda.flash_sdp_enabled()`` ... read it), as torch's flags do."""
from __future__ import annotations

import enum

from disthook.backends import cuda as _cuda

__all__ = ["SDPBackend", "sdpa_kernel"]


class SDPBackend(enum.IntEnum):
    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


_FLAG = {SDPBackend.MATH: "math", SDPBackend.FLASH_ATTENTION: "flash",
         SDPBackend.EFFICIENT_ATTENTION: "mem_efficient", SDPBackend.CUDNN_ATTENTION: "cudnn"}


def sdpa_kernel(backends, set_priority: bool = False):
    """A context manager: only ``backends`` (one SDPBackend or a list) are enabled inside."""
    chosen = [backends] if isinstance(backends, SDPBackend) else backends
    if not isinstance(chosen, (list, tuple)) or not all(
            isinstance(b, SDPBackend) for b in chosen):
        raise AssertionError("Backend must be an instance of SDPBackend or a list of "
                             f"SDPBackend instances, got {type(backends).__name__}")
    return _cuda.sdp_kernels(**{flag: backend in chosen for backend, flag in _FLAG.items()})
