"""``torch.nn.utils.parametrizations``: ``weight_norm`` (the weight is ``g * v / ||v||``, the
norm over every dimension but ``dim``) and ``spectral_norm`` (the weight over its largest
singular value, by power iteration on buffers ``_u`` and ``_v``, 15 rounds at registration
and one per training forward) as parametrizations. ``orthogonal`` is not provided (it refuses
at use)."""
from __future__ import annotations

from disthook.autograd.grad_mode import no_grad
from disthook.nn.modules.module import Module
from disthook.nn.utils import parametrize
from disthook.nn.utils.spectral_norm import (
    default_dim,
    normalize,
    power_iteration,
    random_vector,
    weight_matrix,
)
from disthook.nn.utils.weight_norm import norm_except_dim
from disthook.tensor import Tensor

__all__ = ["spectral_norm", "weight_norm"]


class _WeightNorm(Module):
    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return weight_v * (weight_g / norm_except_dim(weight_v, self.dim))

    def right_inverse(self, weight: Tensor):
        return norm_except_dim(weight, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Reparametrize ``module.<name>`` as magnitude ``original0`` (g) times direction
    ``original1`` (v) over its norm."""
    return parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)


class _SpectralNorm(Module):
    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0,
                 eps: float = 1e-12) -> None:
        super().__init__()
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.dim = dim % weight.ndim if weight.ndim else 0
        self.eps, self.n_power_iterations = eps, n_power_iterations
        if weight.ndim > 1:
            with no_grad():
                rows, cols = weight_matrix(weight, self.dim).shape
                self.register_buffer("_u", normalize(random_vector(rows, weight), eps))
                self.register_buffer("_v", normalize(random_vector(cols, weight), eps))
                power_iteration(weight_matrix(weight, self.dim), self._u, self._v, 15, eps,
                                u_first=True)

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            return normalize(weight, self.eps)
        matrix = weight_matrix(weight, self.dim)
        if self.training:
            power_iteration(matrix, self._u, self._v, self.n_power_iterations, self.eps,
                            u_first=True)
        u, v = self._u.clone(), self._v.clone()
        return weight / u.dot(matrix.mv(v))

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Module:
    """Reparametrize ``module.<name>`` as itself over its spectral norm."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(  # noqa: TRY004  # torch's type and text
            f"Module '{module}' has no parameter or buffer with name '{name}'")
    parametrization = _SpectralNorm(weight, n_power_iterations,
                                    default_dim(module) if dim is None else dim, eps)
    return parametrize.register_parametrization(module, name, parametrization)
