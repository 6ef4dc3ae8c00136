"""numpy's keyword names, which torch's argument parser takes for every operator it binds from
C++: ``axis`` for ``dim`` and ``keepdims`` for ``keepdim`` (``x.sum(axis=1, keepdims=True)``,
``torch.cat(xs, axis=0)``), as programs ported from numpy write them. What torch writes in
Python (``Tensor.split``, ``Tensor.norm``, ``torch.unique_consecutive`` ...) never meets that
parser and refuses them; those are listed here and left as they are. (An int list passed by
its name, ``view(size=...)``, is each method's own: ``_tensor_shape.by_keyword``.)
"""
from __future__ import annotations

import functools
import inspect
import types

NUMPY_NAMES = {"axis": "dim", "keepdims": "keepdim"}
# Tensor methods and torch functions torch writes in Python: no aliases there
WRITTEN_IN_PYTHON = frozenset({"norm", "split", "unflatten", "unique", "unique_consecutive",
                               "stft", "istft"})


def torch_keywords(fn):
    """``fn`` taking numpy's names for its ``dim`` / ``keepdim`` too, or ``fn`` itself when it
    has neither parameter."""
    params = inspect.signature(fn).parameters
    renames = {alias: name for alias, name in NUMPY_NAMES.items() if name in params}
    if not renames:
        return fn
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if kwargs:
            for alias, own in renames.items():
                if alias in kwargs:
                    if own in kwargs:  # torch names the alias, which it matched to nothing
                        raise TypeError(f"{name}() got an unexpected keyword argument "
                                        f"'{alias}'")
                    kwargs[own] = kwargs.pop(alias)
        return fn(*args, **kwargs)

    return call


def take_torch_keywords(cls: type) -> None:
    """Give every public method of ``cls`` (its own and its bases') numpy's names."""
    seen = set()
    for klass in cls.__mro__:
        for name, value in list(vars(klass).items()):
            if (name.startswith("_") or name in seen or name in WRITTEN_IN_PYTHON
                    or not isinstance(value, types.FunctionType)):
                seen.add(name)
                continue
            seen.add(name)
            wrapped = torch_keywords(value)
            if wrapped is not value:
                setattr(cls, name, wrapped)


def torch_keywords_in(namespace: dict) -> None:
    """The same for the public functions of a module's namespace (``torch.cat(axis=0)``)."""
    for name, value in list(namespace.items()):
        if (not name.startswith("_") and name not in WRITTEN_IN_PYTHON
                and isinstance(value, types.FunctionType)):
            namespace[name] = torch_keywords(value)
