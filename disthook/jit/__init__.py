"""``torch.jit`` as programs use it without needing TorchScript: ``script`` and ``trace`` give
back the module or function, run eagerly (a one-time ``UserWarning`` says so); the decorators
(``ignore``, ``unused``, ``export``, ``interface``, ``script_method``) leave what they decorate
as it is; ``is_scripting`` / ``is_tracing`` are False; ``Final``, ``Attribute`` and ``annotate``
are the plain values; ``fork`` / ``wait`` run the call at once. Saving and loading TorchScript
archives (``save``, ``load``) and the rest of ``torch.jit`` refuse at use."""
from __future__ import annotations

from typing import Final  # torch.jit.Final is typing.Final

from disthook.compiler import warn_eager
from disthook.futures import Future
from disthook.nn import Module

__all__ = ["Attribute", "Final", "ScriptModule", "annotate", "export", "fork", "freeze", "ignore", "interface",
           "is_scripting", "is_tracing", "optimize_for_inference", "script", "script_if_tracing",
           "script_method", "trace", "trace_module", "unused", "wait"]


class ScriptModule(Module):
    """Base of modules written for TorchScript (with ``@script_method``s): here an ordinary
    module, run eagerly. A module that ``script`` gave back is not one (it is what was given).
    """


def script(obj, optimize=None, _frames_up: int = 0, _rcb=None, example_inputs=None):
    """``torch.jit.script``: ``obj`` itself, run eagerly."""
    warn_eager("torch.jit.script")
    return obj


def trace(func, example_inputs=None, optimize=None, check_trace: bool = True, *args,
          **kwargs):
    """``torch.jit.trace``: ``func`` itself, run eagerly (it is not called here)."""
    warn_eager("torch.jit.trace")
    return func


def trace_module(mod, inputs=None, *args, **kwargs):
    warn_eager("torch.jit.trace_module")
    return mod


def freeze(mod, preserved_attrs=None, optimize_numerics: bool = True):
    warn_eager("torch.jit.freeze")
    return mod


def optimize_for_inference(mod, other_methods=None):
    warn_eager("torch.jit.optimize_for_inference")
    return mod


def script_if_tracing(fn):
    return fn


def ignore(drop=False, **kwargs):
    """``@torch.jit.ignore`` and ``@torch.jit.ignore(drop=...)``: the function as it is."""
    if callable(drop):
        return drop
    return lambda fn: fn


def unused(fn):
    return fn


def export(fn):
    return fn


def interface(obj):
    return obj


def script_method(fn):
    return fn


def is_scripting() -> bool:
    return False


def is_tracing() -> bool:
    return False


def Attribute(value, type=None):  # torch's name
    """``torch.jit.Attribute(value, type)``: outside TorchScript, the value."""
    return value


def annotate(the_type, the_value):
    return the_value


def fork(func, *args, **kwargs) -> Future:
    """``torch.jit.fork``: runs ``func`` now; the Future holds its result."""
    future = Future()
    future.set_result(func(*args, **kwargs))
    return future


def wait(future):
    return future.wait()
