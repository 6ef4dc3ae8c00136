"""``torch.nn.utils.spectral_norm``: the weight divided by its largest singular value,
estimated by power iteration (one step per training forward, on the buffers ``weight_u`` and
``weight_v``); the parameter itself is ``weight_orig``. The first ``u`` and ``v`` are drawn
from disthook's generator, so they differ from torch's; load torch's buffers (the state dict)
to get torch's numbers."""
from __future__ import annotations

from disthook.autograd.grad_mode import no_grad
from disthook.nn.modules.module import Module
from disthook.nn.parameter import Parameter
from disthook.nn.utils.weight_norm import remove_hook_of
from disthook.tensor import Tensor

__all__ = ["remove_spectral_norm", "spectral_norm"]


def random_vector(size: int, like: Tensor) -> Tensor:
    """A standard normal vector of ``like``'s dtype, from disthook's generator."""
    import disthook

    return disthook.randn(size, dtype=like.dtype)


def normalize(x: Tensor, eps: float) -> Tensor:
    return x / x.norm().clamp(min=eps)


def weight_matrix(weight: Tensor, dim: int) -> Tensor:
    """``weight`` as a matrix whose rows run along ``dim``."""
    if dim != 0:
        order = [dim] + [d for d in range(weight.ndim) if d != dim]
        weight = weight.permute(*order)
    return weight.reshape(weight.shape[0], -1)


def power_iteration(matrix: Tensor, u: Tensor, v: Tensor, steps: int, eps: float,
                    u_first: bool = False) -> None:
    """``steps`` rounds of power iteration, written into ``u`` and ``v`` in place; each round
    updates ``v`` from ``u`` then ``u`` from ``v`` (the other way round with ``u_first``, as
    torch's parametrization does)."""
    with no_grad():
        for _ in range(steps):
            if u_first:
                u.copy_(normalize(matrix.mv(v), eps))
            v.copy_(normalize(matrix.t().mv(u), eps))
            if not u_first:
                u.copy_(normalize(matrix.mv(v), eps))


class SpectralNorm:
    """The forward pre-hook of ``spectral_norm`` on one parameter."""

    def __init__(self, name: str, n_power_iterations: int, dim: int, eps: float) -> None:
        if n_power_iterations <= 0:
            raise ValueError("Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.name, self.n_power_iterations, self.dim, self.eps = (
            name, n_power_iterations, dim, eps)

    def compute_weight(self, module: Module, do_power_iteration: bool) -> Tensor:
        weight = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        matrix = weight_matrix(weight, self.dim)
        if do_power_iteration:
            power_iteration(matrix, u, v, self.n_power_iterations, self.eps)
            u, v = u.clone(), v.clone()  # backward must see these values, not later ones
        sigma = u.dot(matrix.mv(v))
        return weight / sigma

    @staticmethod
    def apply(module: Module, name: str, n_power_iterations: int, dim: int,
              eps: float) -> SpectralNorm:
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two spectral_norm hooks on the same "
                                   f"parameter {name}")
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters[name]
        with no_grad():
            rows, cols = weight_matrix(weight, dim).shape
            u = normalize(random_vector(rows, weight), eps)
            v = normalize(random_vector(cols, weight), eps)
        del module._parameters[name]
        module.register_parameter(name + "_orig", weight)
        setattr(module, name, weight.detach())
        module.register_buffer(name + "_u", u)
        module.register_buffer(name + "_v", v)
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module: Module) -> None:
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        del module._buffers[self.name + "_u"]
        del module._buffers[self.name + "_v"]
        del module._parameters[self.name + "_orig"]
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module, module.training))


def default_dim(module: Module) -> int:
    from disthook.nn import modules

    transposed = tuple(getattr(modules, n) for n in ("ConvTranspose1d", "ConvTranspose2d",
                                                      "ConvTranspose3d") if hasattr(modules, n))
    return 1 if transposed and isinstance(module, transposed) else 0


def spectral_norm(module: Module, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Module:
    """Divide ``module.<name>`` by its spectral norm before each call (see the module doc)."""
    SpectralNorm.apply(module, name, n_power_iterations,
                       default_dim(module) if dim is None else dim, eps)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Undo ``spectral_norm``: ``<name>`` is a parameter again, holding the normalised weight."""
    return remove_hook_of(module, SpectralNorm, name, "spectral_norm")
