"""``torch.onnx``: disthook records no graph to export, so ``export`` and the rest refuse at
use, saying to export from PyTorch; ``is_in_onnx_export()`` (which models ask) is False."""
from __future__ import annotations

__all__ = ["is_in_onnx_export"]


def is_in_onnx_export() -> bool:
    return False
