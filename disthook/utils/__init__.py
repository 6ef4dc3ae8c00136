"""``torch.utils``: hook handles, activation checkpointing, data loading.

``checkpoint`` and ``data`` are imported on first use: the engine imports ``utils.hooks``
while it is itself being loaded, before they could be.
"""
import importlib

from disthook.utils import hooks  # noqa: F401

_LAZY = ("checkpoint", "data", "_pytree")  # torch reaches torch.utils._pytree too


def swap_tensors(t1, t2) -> None:
    """``torch.utils.swap_tensors``: ``t1`` and ``t2`` exchange all they hold (values, dtype,
    shape, autograd state, ``.grad``, class, attributes) while each object stays itself, so
    whatever refers to ``t1`` (a module, an optimizer) sees the other's contents. As in
    torch, a tensor something holds a weak reference to cannot be swapped."""
    import weakref

    from disthook.tensor import Tensor

    for name, t in (("t1", t1), ("t2", t2)):
        if not isinstance(t, Tensor):
            raise TypeError(f"swap_tensors(): {name} must be a tensor, not "
                            f"{type(t).__name__}")
        if weakref.getweakrefcount(t):
            raise RuntimeError(f"Cannot swap {name} because it has weakref associated with it")
    unset = object()
    for slot in Tensor.__slots__:
        if slot in ("__weakref__", "__dict__"):
            continue
        member = vars(Tensor)[slot]
        one, two = member.__get__(t1, Tensor) if hasattr(t1, slot) else unset, \
            member.__get__(t2, Tensor) if hasattr(t2, slot) else unset
        for target, value in ((t1, two), (t2, one)):
            if value is unset:
                member.__delete__(target)
            else:
                member.__set__(target, value)
    attrs1, attrs2 = dict(vars(t1)), dict(vars(t2))
    vars(t1).clear()
    vars(t1).update(attrs2)
    vars(t2).clear()
    vars(t2).update(attrs1)
    t1.__class__, t2.__class__ = t2.__class__, t1.__class__


def __getattr__(name: str):
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
