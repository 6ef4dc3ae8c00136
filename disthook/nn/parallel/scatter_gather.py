"""``torch.nn.parallel.scatter_gather``: split inputs over GPUs and bring outputs back.

Containers are walked as torch walks them (tuples, lists, dicts and named tuples per
device; any other object referenced once per device), so calls holding no tensor give
torch's results. A tensor would have to be copied to a GPU, and disthook has none:
``scatter`` raises saying so, and ``gather`` raises the AssertionError torch raises for CPU
tensors. In one process, call the module on the whole batch (``DataParallel`` does).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from disthook.tensor import Tensor

__all__ = ["gather", "scatter", "scatter_kwargs"]


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_asdict") and hasattr(obj, "_fields")


def scatter(inputs: Any, target_gpus: Sequence, dim: int = 0) -> Any:
    """One share of ``inputs`` per device in ``target_gpus``; objects that are not tensors
    are referenced by every share."""

    def scatter_map(obj):
        if isinstance(obj, Tensor):
            raise RuntimeError(
                f"scatter: disthook has no GPUs to split a tensor of shape {list(obj.shape)} "
                f"over (target_gpus={list(target_gpus)}); call the module on the whole batch "
                "instead")
        if _is_namedtuple(obj):
            return [type(obj)(*args) for args in zip(*map(scatter_map, obj))]
        if isinstance(obj, tuple) and len(obj) > 0:
            return list(zip(*map(scatter_map, obj)))
        if isinstance(obj, list) and len(obj) > 0:
            return [list(i) for i in zip(*map(scatter_map, obj))]
        if isinstance(obj, dict) and len(obj) > 0:
            return [type(obj)(i) for i in zip(*map(scatter_map, obj.items()))]
        return [obj for _ in target_gpus]

    return scatter_map(inputs)


def scatter_kwargs(inputs: tuple, kwargs: dict | None, target_gpus: Sequence,
                   dim: int = 0) -> tuple[tuple, tuple]:
    """``scatter`` of the positional and of the keyword arguments, padded to one pair per
    device."""
    scattered_inputs = scatter(inputs, target_gpus, dim) if inputs else []
    scattered_kwargs = scatter(kwargs, target_gpus, dim) if kwargs else []
    if len(scattered_inputs) < len(scattered_kwargs):
        scattered_inputs.extend(() for _ in range(len(scattered_kwargs) - len(scattered_inputs)))
    elif len(scattered_kwargs) < len(inputs):
        scattered_kwargs.extend({} for _ in range(len(scattered_inputs) - len(scattered_kwargs)))
    return tuple(scattered_inputs), tuple(scattered_kwargs)


def gather(outputs: Any, target_device, dim: int = 0) -> Any:
    """The outputs of every device as one object on ``target_device``."""

    def gather_map(outputs):
        out = outputs[0]
        if isinstance(out, Tensor):
            # torch's Gather refuses CPU tensors, and every disthook tensor is on the CPU
            raise AssertionError("Gather function not implemented for CPU tensors")
        if out is None:
            return None
        if isinstance(out, dict):
            if not all(len(out) == len(d) for d in outputs):
                raise ValueError("All dicts must have the same number of keys")
            return type(out)((k, gather_map([d[k] for d in outputs])) for k in out)
        if _is_namedtuple(out):
            return type(out)._make(map(gather_map, zip(*outputs, strict=True)))
        return type(out)(map(gather_map, zip(*outputs, strict=True)))

    return gather_map(outputs)
