"""einops over disthook tensors: ``rearrange``, ``repeat``, ``reduce``, ``einsum`` and ``pack``
take them as they take torch's (lucidrains' models: ``import disthook as torch`` with
``from einops import rearrange``). einops finds a backend by itself among the subclasses of
its ``AbstractBackend`` whose framework is loaded; this one is defined when disthook is
imported with einops installed. Every operation is a disthook op, so the graph, the hooks and
a deployed model's values are as with the same steps written by hand."""
from __future__ import annotations

import numpy as np
from einops._backends import AbstractBackend

import disthook


class DisthookBackend(AbstractBackend):
    framework_name = "disthook"

    def is_appropriate_type(self, tensor) -> bool:
        return isinstance(tensor, disthook.Tensor)

    def from_numpy(self, x: np.ndarray):
        t = disthook.from_numpy(x)
        return t.requires_grad_(True) if self.is_float_type(t) else t

    def to_numpy(self, x) -> np.ndarray:
        return x.detach().numpy()

    def arange(self, start: int, stop: int):
        return disthook.arange(start, stop, dtype=disthook.int64)

    def shape(self, x) -> tuple:
        return tuple(x.shape)

    def reshape(self, x, shape):
        return x.reshape(shape)

    def transpose(self, x, axes):
        return x.permute(axes)

    def reduce(self, x, operation: str, axes):
        if operation in ("min", "max"):
            return getattr(x, "a" + operation)(dim=axes)
        if operation in ("sum", "mean"):
            return getattr(x, operation)(dim=axes)
        if operation in ("any", "all", "prod"):  # one dim at a time, the last first
            for dim in sorted(axes, reverse=True):
                x = getattr(x, operation)(dim=dim)
            return x
        raise NotImplementedError(f"einops reduction {operation!r} over disthook tensors")

    def stack_on_zeroth_dimension(self, tensors: list):
        return disthook.stack(tensors)

    def add_axis(self, x, new_position: int):
        return x.unsqueeze(new_position)

    def add_axes(self, x, n_axes: int, pos2len: dict):
        sizes = [-1] * n_axes
        for position, length in pos2len.items():
            x = x.unsqueeze(position)
            sizes[position] = length
        return x.expand(sizes)

    def tile(self, x, repeats):
        return x.repeat(repeats)

    def concat(self, tensors, axis: int):
        return disthook.cat(tensors, dim=axis)

    def is_float_type(self, x) -> bool:
        return x.is_floating_point()

    def einsum(self, pattern: str, *x):
        return disthook.einsum(pattern, *x)
