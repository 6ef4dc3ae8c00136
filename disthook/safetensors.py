"""safetensors files, as ``safetensors.torch`` reads and writes them, on disthook's tensors.

``from disthook.safetensors import load_file, save_file`` where torch programs write
``from safetensors.torch import load_file, save_file``. disthook reads and writes the format
itself (see ``disthook._serialization.safetensors``): no dependency, nothing pickled, every
header checked against the bytes the file holds.
"""
from disthook._serialization.safetensors import (
    SafetensorError,
    load,
    load_file,
    load_model,
    safe_open,
    save,
    save_file,
    save_model,
)

__all__ = ["SafetensorError", "load", "load_file", "load_model", "safe_open", "save",
           "save_file", "save_model"]
