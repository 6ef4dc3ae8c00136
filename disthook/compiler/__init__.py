"""``torch.compile`` and ``torch.compiler``: disthook has no compiler, so a compiled model or
function runs eagerly (the same results, no speed-up); the first use in a process says so in a
``UserWarning``. A function comes back as it is; a module comes back held by an
``OptimizedModule``, as in torch, so that ``_orig_mod`` and the ``_orig_mod.`` prefix of its
state dict keys are there for the programs that unwrap it or load its checkpoints. Queries
answer "not compiling"."""
from __future__ import annotations

import warnings
from collections.abc import Callable

from disthook.nn.modules.module import Module

__all__ = ["OptimizedModule", "allow_in_graph", "assume_constant_result", "compile", "disable",
           "is_compiling", "is_dynamo_compiling", "is_exporting", "list_backends", "reset"]

_warned: set = set()
_patched = False  # what torch's first compile changes in the process, done


def warn_eager(what: str) -> None:
    """One ``UserWarning`` per process and per stand-in: ``what`` runs eagerly."""
    if what not in _warned:
        _warned.add(what)
        warnings.warn(f"disthook has no compiler: what {what} is given runs eagerly (same "
                      "results, no speed-up)", UserWarning, stacklevel=3)


def compile(model: Callable | None = None, *, fullgraph: bool = False, dynamic=None,
            backend=None, mode=None, options=None, name=None, disable: bool = False,
            **kwargs):
    """``torch.compile``: a module held by an ``OptimizedModule``, a function as it is (also as
    ``@compile(...)``); ``disable=True`` gives back what it was given."""
    if model is None:
        return lambda fn: compile(fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend,
                                  mode=mode, options=options, name=name, disable=disable)
    if not callable(model):  # torch raises this, with this text
        raise AssertionError(  # noqa: TRY004
            f"A callable function is expected, but {type(model)} is provided.")
    if disable:
        return model
    warn_eager("torch.compile")
    global _patched
    if not _patched:  # as torch's first compile in a process does: the distributions'
        _patched = True  # argument checks off from then on
        from disthook.distributions import Distribution

        Distribution.set_default_validate_args(False)
    return OptimizedModule(model) if isinstance(model, Module) else model


class OptimizedModule(Module):
    """What ``torch.compile(module)`` gives: ``_orig_mod`` is the module, a call runs it
    (hooks on both fire, the module's first), and every other attribute is read from,
    written to and deleted from it, as torch's wrapper does."""

    def __init__(self, mod: Module) -> None:
        super().__init__()
        self._modules["_orig_mod"] = mod

    def _held(self) -> Module | None:
        return self.__dict__.get("_modules", {}).get("_orig_mod")

    @property
    def training(self) -> bool:
        held = self._held()
        return True if held is None else held.training

    @training.setter
    def training(self, mode: bool) -> None:
        held = self._held()
        if held is not None:
            held.training = mode

    def forward(self, *args, **kwargs):
        return self._orig_mod(*args, **kwargs)

    def __len__(self) -> int:
        if not hasattr(type(self._orig_mod), "__len__"):  # torch's words
            raise TypeError(f"{type(self._orig_mod).__name__} does not support len()")
        return len(self._orig_mod)

    def __getattr__(self, name: str):
        held = self._held()
        if name == "_orig_mod" or held is None:
            return super().__getattr__(name)
        return getattr(held, name)

    def __setattr__(self, name: str, value) -> None:
        held = self._held()
        if held is None or hasattr(type(self), name):
            super().__setattr__(name, value)
        else:
            setattr(held, name, value)

    def __delattr__(self, name: str) -> None:
        held = self._held()
        if held is None or name in self.__dict__:
            super().__delattr__(name)
        else:
            delattr(held, name)


def disable(fn=None, recursive: bool = True, *, reason=None):
    """``torch.compiler.disable``: nothing is compiled, so ``fn`` as it is."""
    return (lambda f: f) if fn is None else fn


def allow_in_graph(fn):
    return fn


def assume_constant_result(fn):
    return fn


def is_compiling() -> bool:
    return False


def is_dynamo_compiling() -> bool:
    return False


def is_exporting() -> bool:
    return False


def list_backends(exclude_tags=("debug", "experimental")) -> list[str]:
    return []


def reset() -> None:
    """Nothing was compiled; nothing to forget."""
