"""``torch.nn.utils.parametrizations``: ``weight_norm`` as a parametrization (the weight is
``g * v / ||v||``, the norm taken over every dimension but ``dim``). ``spectral_norm`` and
``orthogonal`` are not provided (they refuse at use)."""
from __future__ import annotations

from disthook.nn.modules.module import Module
from disthook.nn.utils import parametrize
from disthook.tensor import Tensor

__all__ = ["weight_norm"]


def _norm_except_dim(v: Tensor, dim: int) -> Tensor:
    """The 2-norm of ``v`` over all dimensions but ``dim`` (kept, as size-1 dims); over all of
    them when ``dim`` is -1."""
    if dim == -1:
        return v.pow(2).sum().sqrt()
    others = tuple(d for d in range(v.ndim) if d != dim)
    return v.pow(2).sum(dim=others, keepdim=True).sqrt() if others else v.abs()


class _WeightNorm(Module):
    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return weight_v * (weight_g / _norm_except_dim(weight_v, self._dim(weight_v)))

    def right_inverse(self, weight: Tensor):
        return _norm_except_dim(weight, self._dim(weight)), weight

    def _dim(self, v: Tensor) -> int:
        return self.dim if self.dim == -1 else self.dim % v.ndim


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Reparametrize ``module.<name>`` as magnitude ``original0`` (g) times direction
    ``original1`` (v) over its norm."""
    return parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
