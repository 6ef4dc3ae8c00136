"""``torch.nn.utils.weight_norm`` (deprecated in torch for the parametrization): the weight
becomes parameters ``weight_g`` (magnitude) and ``weight_v`` (direction), and a forward
pre-hook recomputes ``weight = g * v / ||v||`` before each call."""
from __future__ import annotations

import warnings

from disthook.nn.modules.module import Module
from disthook.nn.parameter import Parameter
from disthook.tensor import Tensor

__all__ = ["remove_weight_norm", "weight_norm"]


def norm_except_dim(v: Tensor, dim: int) -> Tensor:
    """The 2-norm of ``v`` over all dimensions but ``dim`` (kept as size-1 dims); over all of
    them when ``dim`` is -1."""
    if dim == -1:
        return v.pow(2).sum().sqrt()
    dim = dim % v.ndim
    others = tuple(d for d in range(v.ndim) if d != dim)
    return v.pow(2).sum(dim=others, keepdim=True).sqrt() if others else v.abs()


class WeightNorm:
    """The forward pre-hook of ``weight_norm`` on one parameter."""

    def __init__(self, name: str, dim: int) -> None:
        self.name, self.dim = name, dim

    def compute_weight(self, module: Module) -> Tensor:
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return v * (g / norm_except_dim(v, self.dim))

    @staticmethod
    def apply(module: Module, name: str, dim: int | None) -> WeightNorm:
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two weight_norm hooks on the same "
                                   f"parameter {name}")
        fn = WeightNorm(name, -1 if dim is None else dim)
        weight = getattr(module, name)
        del module._parameters[name]
        module.register_parameter(name + "_g",
                                  Parameter(norm_except_dim(weight, fn.dim).detach()))
        module.register_parameter(name + "_v", Parameter(weight.detach()))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module: Module) -> None:
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Split ``module.<name>`` into ``<name>_g`` and ``<name>_v`` (see the module doc)."""
    warnings.warn("`torch.nn.utils.weight_norm` is deprecated in favor of "
                  "`torch.nn.utils.parametrizations.weight_norm`.", FutureWarning,
                  stacklevel=2)
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Undo ``weight_norm``: ``<name>`` is a parameter again, holding the current weight."""
    return remove_hook_of(module, WeightNorm, name, "weight_norm")


def remove_hook_of(module: Module, kind: type, name: str, what: str) -> Module:
    """Undo the forward pre-hook of type ``kind`` that reparametrizes ``name``, or torch's
    ValueError naming ``what`` when there is none."""
    for key, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, kind) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[key]
            return module
    raise ValueError(f"{what} of '{name}' not found in {module}")
