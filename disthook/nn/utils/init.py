"""``torch.nn.utils.skip_init``: make a module without its initialisation cost mattering."""
from __future__ import annotations

import inspect

__all__ = ["skip_init"]


def skip_init(module_cls, *args, **kwargs):
    """``module_cls(*args, **kwargs)`` whose parameter values are not to be relied on (torch
    leaves them uninitialised; disthook initialises them, which a caller may not count on)."""
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    return module_cls(*args, **kwargs)
