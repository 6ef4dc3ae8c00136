"""``torch.nn.utils.parametrizations``: ``weight_norm`` (the weight is ``g * v / ||v||``, the
norm over every dimension but ``dim``) and ``spectral_norm`` (the weight over its largest
singular value, by power iteration on buffers ``_u`` and ``_v``, 15 rounds at registration
and one per training forward) and ``orthogonal`` (an orthogonal matrix, or one with
orthonormal columns or rows, from an unconstrained one by the matrix exponential, the Cayley
map or Householder reflections) as parametrizations."""
from __future__ import annotations

import disthook as dh
from disthook._limits import finfo
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

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


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


# ---- orthogonal ---------------------------------------------------------------------------

_ORTHOGONAL_MAPS = ("matrix_exp", "cayley", "householder")


def _is_orthogonal(q: Tensor) -> bool:
    n, k = q.shape[-2], q.shape[-1]
    eye = dh.eye(k, dtype=q.dtype)
    return bool(dh.allclose(q.mT @ q, eye, atol=10.0 * n * finfo(q.dtype).eps))


def _orthogonalized(a: Tensor) -> Tensor:
    """The Q of a tall ``a`` = QR whose R has a non-negative diagonal."""
    x, tau = dh.geqrf(a)
    return dh.linalg.householder_product(x, tau) * x.diagonal(dim1=-2, dim2=-1).sgn().unsqueeze(-2)


class _Orthogonal(Module):
    """Maps an unconstrained matrix (batch of matrices) to one with orthonormal columns (or
    rows, when it is wide); with ``use_trivialization`` the result is multiplied by a
    buffer ``base``, set from the weight the parametrization is registered with, so that the
    optimizer moves around that point."""

    def __init__(self, weight: Tensor, orthogonal_map: str, *,
                 use_trivialization: bool = True) -> None:
        super().__init__()
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, x: Tensor) -> Tensor:
        n, k = x.shape[-2], x.shape[-1]
        wide = n < k
        if wide:
            x, (n, k) = x.mT, (k, n)
        if self.orthogonal_map == "householder":
            a = x.tril(diagonal=-1)
            q = dh.linalg.householder_product(a, 2.0 / (1.0 + (a * a).sum(dim=-2)))
            # the reflections give det +1 or -1 columns by the sign of x's diagonal
            q = q * x.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        else:  # a skew-symmetric matrix from the lower triangle, mapped to the group
            x = x.tril()
            if n != k:
                x = dh.cat([x, x.new_zeros(n, n - k).expand(*x.shape[:-2], -1, -1)],
                                   dim=-1)
            a = x - x.mT
            if self.orthogonal_map == "matrix_exp":
                q = dh.linalg.matrix_exp(a)
            else:
                eye = dh.eye(n, dtype=a.dtype)
                q = dh.linalg.solve(dh.add(eye, a, alpha=-0.5),
                                 dh.add(eye, a, alpha=0.5))
            if n != k:
                q = q[..., :k]
        if hasattr(self, "base"):
            q = self.base @ q
        return q.mT if wide else q

    def right_inverse(self, q: Tensor) -> Tensor:
        with no_grad():
            return self._right_inverse(q)

    def _right_inverse(self, q: Tensor) -> Tensor:
        if q.shape != self.shape:
            raise ValueError(f"Expected a matrix or batch of matrices of shape {self.shape}. "
                             f"Got a tensor of shape {q.shape}.")
        given = q
        n, k = q.shape[-2], q.shape[-1]
        wide = n < k
        if wide:
            q, (n, k) = q.mT, (k, n)
        if not hasattr(self, "base"):
            if self.orthogonal_map != "householder":
                raise NotImplementedError(
                    "It is not possible to assign to the matrix exponential or the Cayley "
                    "parametrizations when use_trivialization=False.")
            # the Householder vectors of q's QR, signed so that forward gives q back
            a, tau = dh.geqrf(q)
            a.diagonal(dim1=-2, dim2=-1).sign_()
            a.diagonal(dim1=-2, dim2=-1)[tau == 0.0] *= -1
            return a.mT if wide else a
        if n == k:
            q = q.clone() if _is_orthogonal(q) else _orthogonalized(q)
        else:  # completed to a square matrix by random columns
            extra = dh.randn(*(q.shape[:-2] + (n, n - k)), dtype=q.dtype)
            q = _orthogonalized(dh.cat([q, extra], dim=-1))
        self.base = q
        # forward then gives base @ Q(-I) = base with its first k columns negated, which
        # matches the sign convention of torch's trivialization
        neg_eye = dh.zeros_like(given)
        neg_eye.diagonal(dim1=-2, dim2=-1).fill_(-1.0)
        return neg_eye


def orthogonal(module: Module, name: str = "weight", orthogonal_map: str | None = None, *,
               use_trivialization: bool = True) -> Module:
    """Reparametrize ``module.<name>`` (a matrix or a batch of them) as an orthogonal one:
    ``orthogonal_map`` "matrix_exp" (the default for square weights), "cayley" or
    "householder" (the default otherwise)."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(  # noqa: TRY004  # torch's type and text
            f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError("Expected a matrix or batch of matrices. "
                         f"Got a tensor of {weight.ndim} dimensions.")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    if orthogonal_map not in _ORTHOGONAL_MAPS:
        raise ValueError('orthogonal_map has to be one of "matrix_exp", "cayley", '
                         f'"householder". Got: {orthogonal_map}')
    parametrization = _Orthogonal(weight, orthogonal_map,
                                  use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, parametrization, unsafe=True)
    return module
