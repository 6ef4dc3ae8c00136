"""Small custom Functions torch keeps in ``torch.autograd._functions`` (``Resize``)."""
from __future__ import annotations

import math

from disthook.autograd.function import Function

__all__ = ["Resize"]


class Resize(Function):
    """``Resize.apply(t, sizes)``: ``t`` with shape ``sizes`` (same number of elements), as
    a new tensor on the same data, not a view; the gradient takes ``t``'s shape back."""

    @staticmethod
    def forward(ctx, tensor, sizes):
        from disthook.tensor import Tensor

        numel = math.prod(sizes)
        if tensor.numel() != numel:
            raise RuntimeError(
                f"requested resize to {'x'.join(map(str, sizes))} ({numel} elements in total), "
                f"but the given tensor has a size of {'x'.join(map(str, tensor.size()))} "
                f"({tensor.numel()} elements). autograd's resize can only change the shape of "
                "a given tensor, while preserving the number of elements. ")
        ctx.input_sizes = tensor.size()
        return Tensor._make(tensor._data.reshape(tuple(sizes)), None, 0)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.contiguous().view(ctx.input_sizes), None
