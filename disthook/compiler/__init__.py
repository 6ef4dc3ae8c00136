"""``torch.compile`` and ``torch.compiler``: disthook has no compiler, so a compiled model or
function is the one given, run eagerly (the same results, no speed-up); the first use in a
process says so in a ``UserWarning``. Queries answer "not compiling"."""
from __future__ import annotations

import warnings
from collections.abc import Callable

__all__ = ["allow_in_graph", "assume_constant_result", "compile", "disable", "is_compiling",
           "is_dynamo_compiling", "is_exporting", "list_backends", "reset"]

_warned: set = set()


def warn_eager(what: str) -> None:
    """One ``UserWarning`` per process and per stand-in: ``what`` runs eagerly."""
    if what not in _warned:
        _warned.add(what)
        warnings.warn(f"disthook has no compiler: {what} returns what it was given, which runs "
                      "eagerly (same results, no speed-up)", UserWarning, stacklevel=3)


def compile(model: Callable | None = None, *, fullgraph: bool = False, dynamic=None,
            backend=None, mode=None, options=None, name=None, disable: bool = False,
            **kwargs):
    """``torch.compile``: the model or function itself (also as ``@compile(...)``)."""
    if model is None:
        return lambda fn: compile(fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend,
                                  mode=mode, options=options, name=name, disable=disable)
    if not callable(model):  # torch raises this, with this text
        raise AssertionError(  # noqa: TRY004
            f"A callable function is expected, but {type(model)} is provided.")
    if not disable:
        warn_eager("torch.compile")
    return model


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
