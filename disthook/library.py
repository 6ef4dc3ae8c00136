"""``torch.library``'s Python custom operators: ``custom_op`` makes a function an operator
(``torch.ops.<namespace>.<name>``) whose body autograd does not look into; its gradient is the
one ``register_autograd`` gives, its shape function (``register_fake``) is kept for torch's
compiler and not needed here. The other names (``Library``, ``triton_op``...) refuse."""
from __future__ import annotations

import inspect
import types as _types

from disthook.autograd.function import Function as _Function

__all__ = ["CustomOpDef", "custom_op", "register_autograd", "register_fake", "register_kernel"]

_OPS: dict = {}  # "namespace::name" -> CustomOpDef


class CustomOpDef:
    """An operator made by ``custom_op``: call it as the function it wraps."""

    def __init__(self, qualname: str, fn, mutates_args) -> None:
        namespace, sep, name = qualname.partition("::")
        if not sep or not namespace or not name.isidentifier():
            raise ValueError(f"Expected there to be a namespace in {qualname}, i.e. The "
                             "operator name should look something like ns::foo")
        self._namespace, self._name, self._init_fn = namespace, name, fn
        self._signature = _checked_signature(fn)
        self._mutates_args = mutates_args
        self._kernel, self._fake, self._backward, self._setup_context = fn, None, None, None
        self.__name__, self.__doc__ = name, fn.__doc__
        _OPS[qualname] = self

    def __repr__(self) -> str:
        return f"<CustomOpDef({self._namespace}::{self._name})>"

    def register_fake(self, fn):
        self._fake = fn
        return fn

    def register_kernel(self, device_types, fn=None):
        def register(fn):
            kinds = {device_types} if isinstance(device_types, str) else set(device_types or ())
            if not kinds or "cpu" in kinds:  # the only device here
                self._kernel = fn
            return fn
        return register(fn) if fn is not None else register

    def register_autograd(self, backward, /, *, setup_context=None) -> None:
        self._backward, self._setup_context = backward, setup_context

    def __call__(self, *args, **kwargs):
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return self._function().apply(*bound.arguments.values())

    def _function(self) -> type:
        op = self
        label = f"{self._namespace}.{self._name}.default"

        def forward(*inputs):
            out = op._kernel(*inputs)
            returned = out if isinstance(out, tuple) else (out,)
            given = {id(x) for x in inputs}
            if any(id(o) in given for o in returned):
                raise RuntimeError(
                    f"{label}: the custom operator returned one of its inputs; an operator's "
                    "outputs may not be or alias its inputs: return a clone (x.clone()).")
            return out

        def setup_context(ctx, inputs, output):
            if op._setup_context is not None:
                op._setup_context(ctx, inputs, output)

        def backward(ctx, *grads):
            if op._backward is None:
                raise RuntimeError(f"Trying to backward through {label} but no autograd "
                                   "formula was registered. Please use register_autograd "
                                   "to add one.")
            grads_in = op._backward(ctx, *grads)
            return grads_in if isinstance(grads_in, tuple) else (grads_in,)

        name = f"GeneratedBackwardFor_{self._namespace}_{self._name}_default"
        return type(name, (_Function,), {"forward": staticmethod(forward),
                                        "setup_context": staticmethod(setup_context),
                                        "backward": staticmethod(backward)})

    # an operator travels to a deployment's workers by value and is registered there again
    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        _OPS[f"{self._namespace}::{self._name}"] = self

    @property
    def default(self):  # torch.ops.ns.name.default: the one overload
        return self


def _checked_signature(fn) -> inspect.Signature:
    """``fn``'s signature; as torch's schema inference, every parameter and the return must
    be annotated."""
    signature = inspect.signature(fn)
    for p in signature.parameters.values():
        if p.annotation is inspect.Parameter.empty:
            raise ValueError(f"infer_schema(func): Parameter {p.name} must have a type "
                             f"annotation. Got func with signature {signature})")
    if signature.return_annotation is inspect.Signature.empty:
        raise ValueError("infer_schema(func): No return type annotation was provided. Please "
                         "add one.")
    return signature


def custom_op(name: str, fn=None, /, *, mutates_args, device_types=None, schema=None):
    """``torch.library.custom_op``: a decorator (or a call on ``fn``) making a CustomOpDef."""
    if isinstance(mutates_args, str) and mutates_args != "unknown":
        raise ValueError("mutates_args must be a sequence of argument names or 'unknown'")

    def make(fn):
        return CustomOpDef(name, fn, mutates_args)
    return make(fn) if fn is not None else make


def _op(op) -> CustomOpDef:
    if isinstance(op, CustomOpDef):
        return op
    if op not in _OPS:
        raise RuntimeError(f"{op}: no custom operator of that name was made here (make it "
                           "with torch.library.custom_op first)")
    return _OPS[op]


def register_fake(op, fn=None, /, *, lib=None, _stacklevel: int = 1):
    def register(fn):
        return _op(op).register_fake(fn)
    return register(fn) if fn is not None else register


def register_kernel(op, device_types, fn=None, /, *, lib=None):
    return _op(op).register_kernel(device_types, fn)


def register_autograd(op, backward, /, *, setup_context=None, lib=None) -> None:
    _op(op).register_autograd(backward, setup_context=setup_context)


def _op_namespace(name: str):
    """``torch.ops.<name>``: the operators made under that namespace, as attributes."""
    found = {op._name: op for qualname, op in _OPS.items() if op._namespace == name}
    if not found:
        raise AttributeError(f"module 'disthook.ops' has no attribute {name!r} (no custom "
                             "operator was made in that namespace)")
    return _types.SimpleNamespace(**found)
