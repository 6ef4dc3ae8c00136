"""``torch.accelerator``: disthook runs on the CPU only, so there is never an accelerator.

Queries answer as torch's CPU build does (no accelerator, 0 devices); calls that need a
device raise torch's RuntimeError.
"""
from __future__ import annotations

__all__ = ["current_accelerator", "current_device_idx", "current_device_index",
           "current_stream", "device_count", "empty_cache", "is_available",
           "max_memory_allocated", "memory_allocated", "set_device_idx", "set_device_index",
           "set_stream", "synchronize"]

NO_ACCELERATOR_MSG = "Cannot access accelerator device when none is available."


def is_available() -> bool:
    return False


def current_accelerator(check_available: bool = False):
    """None: there is no accelerator (torch's answer on a CPU-only machine)."""
    return None


def device_count() -> int:
    return 0


def _no_device(*args, **kwargs):
    raise RuntimeError(NO_ACCELERATOR_MSG)


current_device_index = current_device_idx = _no_device
set_device_index = set_device_idx = _no_device
current_stream = set_stream = synchronize = _no_device
memory_allocated = max_memory_allocated = _no_device


def empty_cache() -> None:
    """Nothing to free: no accelerator memory exists."""
