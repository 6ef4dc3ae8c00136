"""``torch.nn.utils.prune``: zero parts of a parameter through a mask kept beside it.

Pruning ``name`` of a module moves the parameter to ``<name>_orig``, keeps a ``<name>_mask``
buffer (1 kept, 0 pruned) and makes ``<name>`` a plain attribute, ``mask * orig``, that the
pruning method (itself the forward pre-hook) recomputes before each call, so gradients reach
``<name>_orig`` only where the mask is 1. A second pruning of the same tensor makes a
``PruningContainer``, whose new mask is computed on the part not pruned yet. ``remove`` makes
the pruned tensor a parameter again. Masks are computed in numpy; the random methods draw
from disthook's generator (reproducible under ``manual_seed``, not torch's stream).
"""
from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable

import numpy as np

import disthook
from disthook.nn.modules.module import Module
from disthook.tensor import Tensor

__all__ = ["BasePruningMethod", "CustomFromMask", "Identity", "L1Unstructured",
           "LnStructured", "PruningContainer", "RandomStructured", "RandomUnstructured",
           "custom_from_mask", "global_unstructured", "identity", "is_pruned",
           "l1_unstructured", "ln_structured", "random_structured", "random_unstructured",
           "remove"]


# ---- numpy <-> Tensor ---------------------------------------------------------------------

def _array(t) -> np.ndarray:
    """The value of ``t`` (a Tensor, or anything numpy takes) as a numpy array."""
    return t.detach()._data if isinstance(t, Tensor) else np.asarray(t)


def _tensor(a: np.ndarray) -> Tensor:
    return disthook.from_numpy(np.ascontiguousarray(a).copy())


# ---- the methods --------------------------------------------------------------------------

class BasePruningMethod(ABC):
    """A way to choose what to prune. ``compute_mask`` is the one method a new kind needs;
    an instance is also the forward pre-hook that recomputes the pruned tensor."""

    PRUNING_TYPE: str = "unstructured"  # "unstructured", "structured" (needs .dim), "global"
    _tensor_name: str | None = None

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self._tensor_name, self.apply_mask(module))

    @abstractmethod
    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        """The mask for ``t`` (same shape), pruning on top of ``default_mask``."""

    def apply_mask(self, module: Module) -> Tensor:
        """``<name>_mask * <name>_orig`` of ``module``: the pruned tensor, differentiable in
        ``<name>_orig``."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned first: this "
                                 f"{type(self).__name__} was never applied to a tensor")
        mask = getattr(module, self._tensor_name + "_mask")
        orig = getattr(module, self._tensor_name + "_orig")
        return mask.to(dtype=orig.dtype) * orig

    @classmethod
    def apply(cls, module: Module, name: str, *args, importance_scores=None, **kwargs):
        """Prune ``module.<name>`` with ``cls(*args, **kwargs)`` (combined with a pruning
        already there into a ``PruningContainer``); returns the method now acting on it.
        When it fails, the module is left as it was (torch drops the earlier pruning's
        hook when a second one fails, leaving the pruned tensor stale)."""
        hooks_before = dict(module._forward_pre_hooks)
        methods_before = {k: h._pruning_methods for k, h in hooks_before.items()
                          if isinstance(h, PruningContainer)}
        try:
            return _prune(cls, module, name, args, kwargs, importance_scores)
        except Exception:
            module._forward_pre_hooks.clear()
            module._forward_pre_hooks.update(hooks_before)
            for k, methods in methods_before.items():
                hooks_before[k]._pruning_methods = methods
            raise

    def prune(self, t: Tensor, default_mask: Tensor | None = None,
              importance_scores: Tensor | None = None) -> Tensor:
        """``t`` times its mask (computed on ``importance_scores`` when given), without
        touching any module."""
        if importance_scores is not None:
            if tuple(importance_scores.shape) != tuple(t.shape):
                raise AssertionError("importance_scores should have the same shape as tensor "
                                     f"t, got {importance_scores.shape} vs {t.shape}")
        else:
            importance_scores = t
        if default_mask is None:
            default_mask = disthook.ones_like(t)
        return t * self.compute_mask(importance_scores, default_mask=default_mask)

    def remove(self, module: Module) -> None:
        """Make the pruned tensor the parameter ``<name>`` again (what was pruned stays 0);
        ``<name>_orig``, ``<name>_mask`` go. The forward pre-hook is the caller's to drop."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned before pruning can be "
                                 "removed")
        name = self._tensor_name
        pruned = self.apply_mask(module)
        if name in module.__dict__:
            delattr(module, name)
        orig = module._parameters[name + "_orig"]
        orig.data = pruned.data
        del module._parameters[name + "_orig"]
        del module._buffers[name + "_mask"]
        setattr(module, name, orig)


def _prune(cls, module: Module, name: str, args: tuple, kwargs: dict, importance_scores):
    """``BasePruningMethod.apply`` once the hooks are saved: the new method (or container)
    computes the mask; the parameter moves to ``<name>_orig`` on the first pruning."""
    method = _compose(cls, module, name, args, kwargs)
    current = getattr(module, name)
    if importance_scores is not None:
        if tuple(importance_scores.shape) != tuple(current.shape):
            raise AssertionError(
                f"importance_scores should have the same shape as parameter {name} of "
                f"{module}, got {importance_scores.shape} vs {current.shape}")
    else:
        importance_scores = current
    first = not isinstance(method, PruningContainer)
    if first:
        module.register_parameter(name + "_orig", current)
        del module._parameters[name]
        default_mask = disthook.ones_like(current)
    else:
        default_mask = _tensor(_array(getattr(module, name + "_mask")))
    try:
        mask = method.compute_mask(importance_scores, default_mask=default_mask)
        module.register_buffer(name + "_mask", mask)
        setattr(module, name, method.apply_mask(module))
        module.register_forward_pre_hook(method)
    except Exception:
        if first:  # the parameter back under its name
            if name in module.__dict__:
                delattr(module, name)
            module._buffers.pop(name + "_mask", None)
            module.register_parameter(name, module._parameters.pop(name + "_orig"))
        raise
    return method


def _compose(cls, module: Module, name: str, args: tuple, kwargs: dict) -> BasePruningMethod:
    """A new ``cls`` method on ``name``; with a pruning already there, its hook leaves the
    module and the two become one container."""
    found = [(k, hook) for k, hook in module._forward_pre_hooks.items()
             if isinstance(hook, BasePruningMethod) and hook._tensor_name == name]
    if len(found) > 1:
        raise AssertionError(f"Avoid adding multiple pruning hooks to the same tensor {name} "
                             f"of module {module}: {len(found)} were found; a "
                             "PruningContainer holds several")
    for k, _ in found:
        del module._forward_pre_hooks[k]
    method = cls(*args, **kwargs)
    method._tensor_name = name
    if not found:
        return method
    old = found[0][1]
    if isinstance(old, PruningContainer):
        old.add_pruning_method(method)
        return old
    container = PruningContainer(old)
    container.add_pruning_method(method)
    return container


class PruningContainer(BasePruningMethod):
    """Successive prunings of one tensor, in order: each new mask is computed on the entries
    (unstructured) or channels (structured) the earlier ones kept."""

    def __init__(self, *args) -> None:
        """``PruningContainer(method, ...)`` or ``PruningContainer([method, ...])``: the
        tensor they act on is the first one's."""
        self._pruning_methods: tuple = ()
        methods = args
        if (len(args) == 1 and isinstance(args[0], Iterable)
                and not isinstance(args[0], BasePruningMethod)):
            methods = tuple(args[0])
        if methods and isinstance(methods[0], BasePruningMethod):
            self._tensor_name = methods[0]._tensor_name
        for method in methods:
            self.add_pruning_method(method)

    def add_pruning_method(self, method) -> None:
        if method is not None and not isinstance(method, BasePruningMethod):
            raise TypeError(f"{type(method)} is not a BasePruningMethod subclass")
        if method is not None and self._tensor_name != method._tensor_name:
            raise ValueError(
                f"Can only add pruning methods acting on the parameter named "
                f"'{self._tensor_name}' to PruningContainer {self}. Found "
                f"'{method._tensor_name}'")
        self._pruning_methods += (method,)

    def __len__(self) -> int:
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, idx):
        return self._pruning_methods[idx]

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        """``default_mask`` (the masks so far) with the last method's mask written over the
        part of ``t`` it still keeps."""
        method = self._pruning_methods[-1]
        values, mask = _array(t), _array(default_mask).astype(_array(t).dtype)
        where = _still_kept(method, values, mask)
        partial = method.compute_mask(_tensor(values[where]), default_mask=_tensor(mask[where]))
        mask[where] = _array(partial).astype(mask.dtype)
        return _tensor(mask)


def _still_kept(method: BasePruningMethod, values: np.ndarray, mask: np.ndarray):
    """The index of what ``method`` may still prune: entries kept so far (unstructured),
    channels along ``method.dim`` with an entry kept (structured), everything (global)."""
    kind = method.PRUNING_TYPE
    if kind == "unstructured":
        return mask == 1
    if kind == "global":
        return (slice(None),) * values.ndim
    if kind != "structured":
        raise ValueError(f"Unrecognized PRUNING_TYPE {kind!r} of {type(method).__name__}: "
                         "expected 'unstructured', 'structured' or 'global'")
    if not hasattr(method, "dim"):
        raise AttributeError(f"{type(method).__name__} has PRUNING_TYPE 'structured' and no "
                             "attribute `dim`: a structured pruning method needs the "
                             "dimension of its channels as `dim`")
    dim = method.dim + values.ndim if method.dim < 0 else method.dim
    if dim < 0:
        raise IndexError(f"Index {method.dim} is out of bounds for tensor with dimensions "
                         f"{values.ndim}")
    others = tuple(d for d in range(values.ndim) if d != dim)
    index: list = [slice(None)] * values.ndim
    index[dim] = mask.sum(axis=others) != 0
    return tuple(index)


class Identity(BasePruningMethod):
    """Prunes nothing: the mask is all ones (a place for hooks, or a start for more)."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        return default_mask

    @classmethod
    def apply(cls, module: Module, name: str):
        return super().apply(module, name)


def _unstructured_mask(amount, t: Tensor, default_mask: Tensor, order) -> Tensor:
    """``default_mask`` with zeros on the ``amount`` entries first in ``order()`` (flat
    indices, the first to prune first; drawn only when something is pruned)."""
    size = t.numel()
    count = _compute_nparams_toprune(amount, size)
    _validate_pruning_amount(count, size)
    mask = _array(default_mask).copy()
    if count:
        mask.reshape(-1)[order()[:count]] = 0
    return _tensor(mask)


class _ByAmount(BasePruningMethod):
    """An unstructured method that prunes ``amount`` entries: a count, or a fraction."""

    PRUNING_TYPE = "unstructured"

    def __init__(self, amount) -> None:
        _validate_pruning_amount_init(amount)
        self.amount = amount


class RandomUnstructured(_ByAmount):
    """Prunes ``amount`` entries (a count, or a fraction of them) chosen at random."""

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        return _unstructured_mask(self.amount, t, default_mask, lambda: np.argsort(
            _array(disthook.rand(t.numel(), dtype=disthook.float64)), kind="stable"))

    @classmethod
    def apply(cls, module: Module, name: str, amount):
        return super().apply(module, name, amount=amount)


class L1Unstructured(_ByAmount):
    """Prunes the ``amount`` entries of smallest absolute value (of ``importance_scores``
    when given)."""

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        return _unstructured_mask(self.amount, t, default_mask, lambda: np.argsort(
            np.abs(_array(t)).reshape(-1), kind="stable"))

    @classmethod
    def apply(cls, module: Module, name: str, amount, importance_scores=None):
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


def _structured_mask(amount, dim: int, t: Tensor, default_mask: Tensor, order) -> Tensor:
    """``default_mask`` times a mask of whole channels along ``dim``: zeros on the ``amount``
    channels first in ``order(channels)`` (channel indices, the first to prune first)."""
    _validate_structured_pruning(t)
    _validate_pruning_dim(t, dim)
    channels = t.shape[dim]
    count = _compute_nparams_toprune(amount, channels)
    _validate_pruning_amount(count, channels)
    if count == 0:
        return default_mask
    default = _array(default_mask)
    mask = np.zeros(tuple(t.shape), default.dtype)
    index: list = [slice(None)] * mask.ndim
    index[dim] = order(channels)[count:]
    mask[tuple(index)] = 1
    return _tensor(mask * default)


class RandomStructured(BasePruningMethod):
    """Prunes ``amount`` whole channels along ``dim``, chosen at random."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, dim: int = -1) -> None:
        _validate_pruning_amount_init(amount)
        self.amount, self.dim = amount, dim

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        return _structured_mask(self.amount, self.dim, t, default_mask, lambda channels: (
            np.argsort(_array(disthook.rand(channels, dtype=disthook.float64)), kind="stable")))

    @classmethod
    def apply(cls, module: Module, name: str, amount, dim: int = -1):
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(BasePruningMethod):
    """Prunes the ``amount`` channels along ``dim`` of smallest ``n``-norm (``n`` as
    ``torch.norm``'s ``p``: a number, ``inf``, ``-inf`` or ``"fro"``)."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, n, dim: int = -1) -> None:
        _validate_pruning_amount_init(amount)
        self.amount, self.n, self.dim = amount, n, dim

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        _validate_structured_pruning(t)
        _validate_pruning_dim(t, self.dim)
        norm = _array(_compute_norm(t, self.n, self.dim))  # a bad n raises, as in torch
        # the smallest norm first; of equal norms, the lower index is kept
        return _structured_mask(self.amount, self.dim, t, default_mask,
                                lambda channels: np.argsort(-norm, kind="stable")[::-1])

    @classmethod
    def apply(cls, module: Module, name: str, amount, n, dim, importance_scores=None):
        return super().apply(module, name, amount=amount, n=n, dim=dim,
                             importance_scores=importance_scores)


class CustomFromMask(BasePruningMethod):
    """Prunes where the given ``mask`` is 0."""

    PRUNING_TYPE = "global"

    def __init__(self, mask) -> None:
        self.mask = mask

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        if tuple(default_mask.shape) != tuple(self.mask.shape):
            raise AssertionError(f"default_mask shape {default_mask.shape} must match "
                                 f"self.mask shape {self.mask.shape}: the custom mask must "
                                 "have the shape of the tensor it prunes")
        default = _array(default_mask)
        return _tensor(default * _array(self.mask).astype(default.dtype))

    @classmethod
    def apply(cls, module: Module, name: str, mask):
        return super().apply(module, name, mask=mask)


# ---- the functions ------------------------------------------------------------------------

def identity(module: Module, name: str) -> Module:
    """Prune nothing of ``module.<name>``, but set up its ``_orig`` / ``_mask`` form."""
    Identity.apply(module, name)
    return module


def random_unstructured(module: Module, name: str, amount) -> Module:
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module: Module, name: str, amount, importance_scores=None) -> Module:
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module: Module, name: str, amount, dim: int) -> Module:
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module: Module, name: str, amount, n, dim: int,
                  importance_scores=None) -> Module:
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs) -> None:
    """Prune the ``(module, name)`` pairs in ``parameters`` as one tensor with the
    unstructured ``pruning_method(**kwargs)`` (L1: the smallest entries of them all)."""
    if not isinstance(parameters, Iterable):
        raise TypeError("global_unstructured(): parameters is not an Iterable: expected "
                        "(module, name) pairs")
    parameters = list(parameters)
    importance_scores = importance_scores if importance_scores is not None else {}
    if not isinstance(importance_scores, dict):
        raise TypeError("global_unstructured(): importance_scores must be of type dict "
                        f"{{(module, name): tensor}}, got {type(importance_scores).__name__}")
    if not parameters:
        raise ValueError("global_unstructured(): parameters is empty: expected at least one "
                         "(module, name) pair")
    scores, masks = [], []
    for module, name in parameters:
        current = getattr(module, name)
        scores.append(_array(importance_scores.get((module, name), current)).reshape(-1))
        mask = getattr(module, name + "_mask", None)
        masks.append(np.ones(current.numel(), _array(current).dtype) if mask is None
                     else _array(mask).reshape(-1))
    method = pruning_method(**kwargs)
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError('Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. '
                        f"Found method {pruning_method} of type {method.PRUNING_TYPE}")
    method._tensor_name = "temp"
    container = PruningContainer(method)
    final = _array(container.compute_mask(_tensor(np.concatenate(scores)),
                                          _tensor(np.concatenate(masks))))
    start = 0
    for module, name in parameters:
        current = getattr(module, name)
        size = current.numel()
        custom_from_mask(module, name, _tensor(final[start:start + size].reshape(current.shape)))
        start += size


def custom_from_mask(module: Module, name: str, mask) -> Module:
    CustomFromMask.apply(module, name, mask)
    return module


def remove(module: Module, name: str) -> Module:
    """Make the pruning of ``module.<name>`` permanent: ``<name>`` is a parameter again."""
    for k, hook in module._forward_pre_hooks.items():
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"Parameter '{name}' of module {module} has to be pruned before pruning "
                     "can be removed")


def is_pruned(module: Module) -> bool:
    """Whether ``module`` or one of its submodules holds a pruning hook."""
    return any(isinstance(hook, BasePruningMethod)
               for sub in module.modules() for hook in sub._forward_pre_hooks.values())


# ---- validation ---------------------------------------------------------------------------

def _validate_pruning_amount_init(amount) -> None:
    if not isinstance(amount, numbers.Real):
        raise TypeError(f"Invalid type for amount: {amount}. Must be int or float.")
    if isinstance(amount, numbers.Integral):
        bad = amount < 0
    else:
        bad = not 0.0 <= float(amount) <= 1.0
    if bad:
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or a "
                         "non-negative integer")


def _validate_pruning_amount(amount: int, tensor_size: int) -> None:
    if isinstance(amount, numbers.Integral) and amount > tensor_size:
        raise ValueError(f"amount={amount} should be smaller than the number of parameters to "
                         f"prune={tensor_size}")


def _validate_structured_pruning(t: Tensor) -> None:
    if len(t.shape) <= 1:
        raise ValueError("Structured pruning can only be applied to multidimensional tensors. "
                         f"Found tensor of shape {t.shape} with {len(t.shape)} dims")


def _compute_nparams_toprune(amount, tensor_size: int) -> int:
    """How many of ``tensor_size`` entries or channels ``amount`` means."""
    if isinstance(amount, numbers.Integral):
        return amount
    return round(amount * tensor_size)


def _validate_pruning_dim(t: Tensor, dim: int) -> None:
    if dim >= t.dim():
        raise IndexError(f"Invalid index {dim} for tensor of size {t.shape}")


def _compute_norm(t: Tensor, n, dim: int) -> Tensor:
    """The ``n``-norm of each channel of ``t`` along ``dim``."""
    dims = list(range(t.dim()))
    dims.remove(dims[dim])
    values = t.detach() if isinstance(t, Tensor) else disthook.tensor(t)
    return disthook.norm(values, p=n, dim=dims)

