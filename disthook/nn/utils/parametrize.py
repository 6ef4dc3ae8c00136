"""``torch.nn.utils.parametrize``: a parameter or buffer computed from others by modules.

``register_parametrization(module, "weight", p)`` moves ``module.weight`` to
``module.parametrizations.weight.original`` (the same Parameter object; through
``p.right_inverse`` first, when ``p`` has one) and makes ``module.weight`` a property computing
``p(original)`` at each read (once per ``cached()`` block). Setting ``module.weight = X`` stores
``right_inverse(X)``. As in torch, the module's class becomes a subclass made for it
(``ParametrizedLinear``), and ``remove_parametrizations`` undoes all of it.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from contextlib import contextmanager

from disthook.autograd.grad_mode import no_grad
from disthook.nn.modules.container import ModuleDict, ModuleList
from disthook.nn.modules.module import Module
from disthook.nn.parameter import Parameter
from disthook.tensor import Tensor

__all__ = ["ParametrizationList", "cached", "is_parametrized", "register_parametrization",
           "remove_parametrizations", "type_before_parametrizations"]

_cache_enabled = 0
_cache: dict = {}


@contextmanager
def cached():
    """Within the block, each parametrized tensor is computed once, at its first read."""
    global _cache_enabled
    _cache_enabled += 1
    try:
        yield
    finally:
        _cache_enabled -= 1
        if not _cache_enabled:
            _cache.clear()


def _keep_in(holder: Module, name: str, like: Tensor, value: Tensor) -> None:
    """``value`` registered on ``holder`` as ``name``, a Parameter when ``like`` is one."""
    if isinstance(like, Parameter):
        holder.register_parameter(name, Parameter(value, like.requires_grad))
    else:
        holder.register_buffer(name, value)


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order, and the tensor(s) they start
    from: ``original``, or ``original0``, ``original1``, ... when ``right_inverse`` of the first
    gives several."""

    def __init__(self, modules: Sequence[Module], original: Tensor, unsafe: bool = False):
        if len(modules) == 0:
            raise ValueError("ParametrizationList requires one or more modules.")
        super().__init__(modules)
        self.unsafe = unsafe
        with no_grad():
            new = original
            for module in reversed(self):
                if hasattr(module, "right_inverse"):
                    try:
                        new = module.right_inverse(new)
                    except NotImplementedError:  # as torch: that one is taken as the identity
                        pass
        if not isinstance(new, (Tensor, Sequence)):
            raise ValueError(  # noqa: TRY004  # torch's type and text
                "'right_inverse' must return a Tensor or a Sequence of tensors (list, "
                f"tuple...). Got {type(new).__name__}")
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            if not unsafe:
                _same_kind(original, new, "When `right_inverse` outputs one tensor, it may "
                                          "not change the {}.", "original", "right_inverse"
                                          "(original)")
            with no_grad():  # the same object: optimizers made before still hold it
                original.set_(new.detach().clone())
            _keep_original(self, "original", original)
        else:
            for i, value in enumerate(new):
                if not isinstance(value, Tensor):
                    raise ValueError(  # noqa: TRY004  # torch's type and text
                        "'right_inverse' must return a Tensor or a Sequence of tensors (list, "
                        f"tuple...). Got element {i} of the sequence with type "
                        f"{type(value).__name__}.")
                _keep_in(self, f"original{i}", original, value.detach().clone())
        if not unsafe:
            _check_forward(self, original)

    def right_inverse(self, value: Tensor) -> None:
        """Store what gives ``value`` back: the right inverses, last parametrization first."""
        with no_grad():
            for module in reversed(self):
                if hasattr(module, "right_inverse"):
                    value = module.right_inverse(value)
                elif len(self) > 1 or not self.is_tensor:
                    raise RuntimeError(f"parametrization {type(module).__name__} does not "
                                       "implement right_inverse.")
            if self.is_tensor:
                if not isinstance(value, Tensor):
                    raise ValueError(f"`right_inverse` should return a tensor. Got "
                                     f"{type(value).__name__}")
                self.original.set_(value.detach().clone().to(self.original.dtype))
            else:
                if not isinstance(value, Sequence) or len(value) != self.ntensors:
                    raise ValueError(f"'right_inverse' must return a sequence of tensors of "
                                     f"length {self.ntensors}. Got {type(value).__name__}")
                for i, v in enumerate(value):
                    getattr(self, f"original{i}").set_(v.detach().clone())

    def forward(self) -> Tensor:
        if self.is_tensor:
            x = self[0](self.original)
        else:
            x = self[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for module in list(self)[1:]:
            x = module(x)
        return x


def _keep_original(holder: Module, name: str, original: Tensor) -> None:
    if isinstance(original, Parameter):
        holder.register_parameter(name, original)
    else:
        holder.register_buffer(name, original)


def _same_kind(before: Tensor, after, template: str, before_name: str, after_name: str):
    if not isinstance(after, Tensor):
        raise ValueError(  # noqa: TRY004  # torch's type and text
            f"A parametrization must return a tensor. Got {type(after).__name__}.")
    if after.dtype != before.dtype:
        raise ValueError(template.format("dtype") + f"\n{before_name}.dtype: {before.dtype}\n"
                         f"{after_name}.dtype: {after.dtype}")
    if after.shape != before.shape:
        raise ValueError(template.format("shape") + f"\n{before_name}.shape: {before.shape}\n"
                         f"{after_name}.shape: {after.shape}")


def _check_forward(parametrizations: ParametrizationList, original: Tensor) -> None:
    value = parametrizations()
    if not isinstance(value, Tensor):
        raise ValueError(  # noqa: TRY004  # torch's type and text
            f"A parametrization must return a tensor. Got {type(value).__name__}.")
    if value.dtype != original.dtype:
        raise ValueError("Registering a parametrization may not change the dtype of the tensor, "
                         "unless `unsafe` flag is enabled.\nunparametrized dtype: "
                         f"{original.dtype}\nparametrized dtype: {value.dtype}")
    if value.shape != original.shape:
        raise ValueError("Registering a parametrization may not change the shape of the tensor, "
                         "unless `unsafe` flag is enabled.\nunparametrized shape: "
                         f"{original.shape}\nparametrized shape: {value.shape}")


# ---- the module's class and property -------------------------------------------------------

def _inject_class(module: Module) -> None:
    cls = module.__class__

    def __getstate__(self):
        raise RuntimeError("Serialization of parametrized modules is only supported through "
                           "state_dict(). Save `module.state_dict()` and load it into a module "
                           "parametrized the same way.")

    def __deepcopy__(self, memo):
        # pickling is refused above, but a copy in memory keeps the parametrizations (torch's
        # rule): the same injected class, the state copied as any module's
        if id(self) in memo:
            return memo[id(self)]
        replica = object.__new__(type(self))
        memo[id(self)] = replica
        replica.__setstate__(copy.deepcopy(cls.__getstate__(self), memo))
        return replica

    members = {"__getstate__": __getstate__, "_parametrized_from": cls,
               "__module__": cls.__module__}
    if not hasattr(cls, "__deepcopy__"):
        members["__deepcopy__"] = __deepcopy__
    module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), members)


def _inject_property(module: Module, tensor_name: str) -> None:
    def get(self) -> Tensor:
        if _cache_enabled:
            key = (id(self), tensor_name)
            if key not in _cache:
                _cache[key] = self.parametrizations[tensor_name]()
            return _cache[key]
        return self.parametrizations[tensor_name]()

    def set(self, value: Tensor) -> None:
        self.parametrizations[tensor_name].right_inverse(value)

    setattr(module.__class__, tensor_name, property(get, set))


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    """Whether ``module`` has any parametrization (on ``tensor_name``, when given)."""
    parametrizations = module.__dict__.get("_modules", {}).get("parametrizations")
    if not isinstance(parametrizations, ModuleDict):
        return False
    return len(parametrizations) > 0 if tensor_name is None else \
        tensor_name in parametrizations


def type_before_parametrizations(module: Module) -> type:
    """The module's class before it was parametrized."""
    return type(module).__dict__.get("_parametrized_from", type(module)) \
        if is_parametrized(module) else type(module)


def register_parametrization(module: Module, tensor_name: str, parametrization: Module, *,
                             unsafe: bool = False) -> Module:
    """Make ``module.<tensor_name>`` be ``parametrization(original)`` (see the module doc)."""
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        if not unsafe:
            value = getattr(module, tensor_name)
            out = parametrization(value)
            _same_kind(value, out, "Registering a parametrization may not change the {} of "
                                   "the tensor, unless `unsafe` flag is enabled.",
                       "unparametrized", "parametrized")
        module.parametrizations[tensor_name].append(parametrization)
        module.parametrizations[tensor_name].unsafe |= unsafe
    elif tensor_name in module._parameters or tensor_name in module._buffers:
        original = getattr(module, tensor_name)
        parametrizations = ParametrizationList([parametrization], original, unsafe=unsafe)
        delattr(module, tensor_name)
        if not is_parametrized(module):
            _inject_class(module)
            module.parametrizations = ModuleDict()
        _inject_property(module, tensor_name)
        module.parametrizations[tensor_name] = parametrizations
    else:
        raise ValueError(f"Module '{module}' does not have a parameter, a buffer, or a "
                         f"parametrized element with name '{tensor_name}'")
    return module


def remove_parametrizations(module: Module, tensor_name: str,
                            leave_parametrized: bool = True) -> Module:
    """Undo ``register_parametrization`` on ``tensor_name``: the tensor comes back as a plain
    parameter (or buffer), holding its parametrized value (or, ``leave_parametrized=False``,
    the original)."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    parametrizations = module.parametrizations[tensor_name]
    if parametrizations.is_tensor:
        original = parametrizations.original
        if leave_parametrized:
            with no_grad():
                value = getattr(module, tensor_name)
            with no_grad():
                original.set_(value.detach().clone())
    else:
        if not leave_parametrized:
            raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor "
                             "that is parametrized in terms of a sequence of tensors.")
        with no_grad():
            value = getattr(module, tensor_name).detach().clone()
        first = parametrizations.original0
        original = Parameter(value, first.requires_grad) if isinstance(first, Parameter) \
            else value
    delattr(module.__class__, tensor_name)
    del module.parametrizations[tensor_name]
    _keep_original(module, tensor_name, original)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = type(module).__dict__["_parametrized_from"]
    return module
