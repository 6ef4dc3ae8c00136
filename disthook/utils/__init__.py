"""``torch.utils``: hook handles, activation checkpointing, data loading.

``checkpoint`` and ``data`` are imported on first use: the engine imports ``utils.hooks``
while it is itself being loaded, before they could be.
"""
import importlib

from disthook.utils import hooks  # noqa: F401

_LAZY = ("checkpoint", "data")


def __getattr__(name: str):
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
