"""The helpers ``torch.nn.functional`` exposes for writing functionals: argument checks,
``boolean_dispatch`` (one name, two functions, picked by a flag) and the
``__torch_function__`` protocol (``has_torch_function*``, ``handle_torch_function``), with
which a tensor-like class can take over a function call."""
from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "assert_int_or_pair", "boolean_dispatch", "handle_torch_function", "has_torch_function",
    "has_torch_function_unary", "has_torch_function_variadic",
]


def assert_int_or_pair(arg, arg_name: str, message: str) -> None:
    if not (isinstance(arg, int) or len(arg) == 2):
        raise AssertionError(message.format(arg_name))


def boolean_dispatch(arg_name: str, arg_index: int, default: bool, if_true, if_false,
                     module_name: str | None, func_name: str):
    """A function that calls ``if_true`` or ``if_false`` as its argument ``arg_name`` (keyword,
    or positional at ``arg_index``, else ``default``) is true or false."""

    def dispatched(*args, **kwargs):
        if arg_name in kwargs:
            flag = kwargs[arg_name]
        elif arg_index < len(args):
            flag = args[arg_index]
        else:
            flag = default
        return if_true(*args, **kwargs) if flag else if_false(*args, **kwargs)

    dispatched.__doc__ = if_true.__doc__ or if_false.__doc__
    if module_name is not None:
        dispatched.__module__ = module_name
    dispatched.__name__ = func_name
    dispatched.__qualname__ = func_name
    return dispatched


def _overloaded(args: Iterable) -> list:
    """The arguments whose type defines ``__torch_function__``, one per type, subclasses
    before their bases, as the protocol orders them."""
    types, found = [], []
    for arg in args:
        kind = type(arg)
        if kind in types or getattr(kind, "__torch_function__", None) is None:
            continue
        index = len(found)
        for i, other in enumerate(types):
            if issubclass(kind, other):
                index = i
                break
        types.insert(index, kind)
        found.insert(index, arg)
    return found


def has_torch_function(relevant_args: Iterable) -> bool:
    """Whether any argument's type overrides function calls (``__torch_function__``)."""
    return bool(_overloaded(relevant_args))


def has_torch_function_unary(arg) -> bool:
    return has_torch_function((arg,))


def has_torch_function_variadic(*args) -> bool:
    return has_torch_function(args)


def handle_torch_function(public_api, relevant_args: Iterable, *args, **kwargs):
    """Call ``public_api`` through the ``__torch_function__`` of the overriding arguments,
    the first that does not return NotImplemented answering."""
    overloaded = _overloaded(relevant_args)
    types = tuple(type(arg) for arg in overloaded)
    for arg in overloaded:
        result = type(arg).__torch_function__(public_api, types, args, kwargs)
        if result is not NotImplemented:
            return result
    name = getattr(public_api, "__module__", "") + "." + getattr(public_api, "__name__", "?")
    raise TypeError(f"no implementation found for '{name}' on types that implement "
                    f"__torch_function__: {[type(arg) for arg in overloaded]}")
