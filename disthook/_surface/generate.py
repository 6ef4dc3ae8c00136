"""Regenerate ``torch_names.json``: torch's public names per namespace and its public modules.

Run with torch installed (the names are torch 2.13's): ``python -m disthook._surface.generate``.
The file is data the refusals and the coverage table read; disthook never imports torch.
"""
from __future__ import annotations

import importlib
import json
import os
import types
import warnings
from pathlib import Path

DATA = Path(__file__).with_name("torch_names.json")

# namespaces whose names are recorded (the coverage table reads the first group)
COVERED = (
    "torch", "torch.Tensor", "torch.nn", "torch.nn.functional", "torch.nn.init",
    "torch.nn.utils", "torch.optim", "torch.optim.lr_scheduler", "torch.autograd",
    "torch.utils.data", "torch.distributions", "torch.linalg", "torch.fft", "torch.special",
)
RECORDED = COVERED + (
    "torch.accelerator", "torch.amp", "torch.autograd.functional", "torch.autograd.graph",
    "torch.autograd.function", "torch.backends", "torch.compiler", "torch.cpu", "torch.cuda",
    "torch.distributed", "torch.distributed.tensor", "torch.export", "torch.func", "torch.fx",
    "torch.futures", "torch.hub", "torch.jit", "torch.library", "torch.masked", "torch.mps",
    "torch.multiprocessing", "torch.nested", "torch.nn.attention", "torch.nn.modules",
    "torch.nn.parallel", "torch.nn.parameter", "torch.nn.utils.parametrizations",
    "torch.nn.utils.parametrize", "torch.nn.utils.rnn", "torch.onnx", "torch.optim.swa_utils",
    "torch.profiler", "torch.random", "torch.serialization", "torch.sparse", "torch.testing",
    "torch.types", "torch.utils", "torch.utils.checkpoint", "torch.utils.data.dataloader",
    "torch.utils.data.dataset", "torch.utils.data.distributed", "torch.utils.data.sampler",
    "torch.utils.data._utils.collate", "torch.utils.hooks",
    "torch.distributed._tensor.experimental", "torch.distributed._composable.fsdp",
)
# private modules that programs import by name (their public names are recorded like any):
# opacus imports the last four as it loads, for its FSDP paths
PRIVATE_MODULES = ("torch.utils.data._utils", "torch.utils.data._utils.collate",
                   "torch.distributed._tensor", "torch.distributed._tensor.experimental",
                   "torch.distributed._composable", "torch.distributed._composable.fsdp")


def _kind(obj) -> str:
    if isinstance(obj, type):
        return "class"
    if callable(obj):
        return "function"
    return "value"


def _defined_by_torch(obj) -> bool:
    owner = getattr(obj, "__module__", None) if isinstance(obj, (type, types.FunctionType,
                                                                 types.BuiltinFunctionType)) \
        else None
    owner = owner or type(obj).__module__
    return owner.startswith("torch")


def tensor_names(tensor_class) -> dict:
    """{name: kind} of torch.Tensor's public methods ("function") and properties ("value")."""
    out = {}
    for name in dir(tensor_class):
        if not name.startswith("_"):
            attr = getattr(tensor_class, name)
            out[name] = "function" if callable(attr) else "value"
    return dict(sorted(out.items()))


def public_names(namespace) -> dict:
    """{name: kind} of a namespace's public names: its ``__all__``, and the names it defines
    (not the ones it imports from the standard library or typing), submodules left out."""
    listed = set(getattr(namespace, "__all__", ()) or ())
    out = {}
    for name in dir(namespace):
        if name.startswith("_"):
            continue
        try:
            obj = getattr(namespace, name)
        except (ImportError, AttributeError, RuntimeError):  # needs an optional package
            continue
        if isinstance(obj, types.ModuleType):
            continue
        if name in listed or _defined_by_torch(obj):
            out[name] = _kind(obj)
    return dict(sorted(out.items()))


def public_modules(torch) -> list[str]:
    """Every module of the torch package whose dotted path has no private part."""
    root = Path(torch.__file__).parent
    found = set(PRIVATE_MODULES)
    for folder, dirs, files in os.walk(root):
        parts = Path(folder).relative_to(root.parent).parts
        if any(p.startswith("_") for p in parts[1:]) or (
                folder != str(root) and "__init__.py" not in files):
            dirs[:] = []
            continue
        found.add(".".join(parts))
        found.update(".".join(parts + (f[:-3],)) for f in files
                     if f.endswith(".py") and not f.startswith("_"))
    return sorted(found)


def generate() -> dict:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated names warn when read
        return _generate(torch)


def _generate(torch) -> dict:
    namespaces = {}
    for name in RECORDED:
        namespaces[name] = tensor_names(torch.Tensor) if name == "torch.Tensor" else \
            public_names(importlib.import_module(name))
    nn_modules = sorted(n for n, k in namespaces["torch.nn"].items()
                        if k == "class" and issubclass(getattr(torch.nn, n), torch.nn.Module))
    return {"torch_version": torch.__version__.split("+")[0], "namespaces": namespaces,
            "nn_module_classes": nn_modules, "modules": public_modules(torch)}


if __name__ == "__main__":
    DATA.write_text(json.dumps(generate(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {DATA}")
