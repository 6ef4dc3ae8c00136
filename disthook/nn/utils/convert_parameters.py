"""All parameters as one flat vector, and back."""
from __future__ import annotations

from disthook.tensor import Tensor, cat


def parameters_to_vector(parameters) -> Tensor:
    """The parameters flattened and joined in order (differentiable, a copy)."""
    return cat([p.view(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters) -> None:
    """Make each parameter's data the next slice of ``vec`` (views of ``vec``, as in torch)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    pointer = 0
    for param in parameters:
        n = param.numel()
        param.data = vec[pointer:pointer + n].view_as(param).data
        pointer += n
