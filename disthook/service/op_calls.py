"""An op of the engine called on a worker, for a client whose operands live there
(``disthook.distributed.remote_values``): the op is named by its class's module and name, which
must be a subclass of ``disthook.ops.base.Op`` (nothing else is looked up; the one import is
of a module of the ``disthook.ops`` package itself that this process has not loaded yet, as
``gather_reduce`` loads on first use), and its keyword parameters travel as plain data.

Parameters are what ops take besides tensors: None, bools, numbers, strings, dtypes, slices,
``...``, numpy arrays and scalars, the engine's own named tuples (``_named_params``: a
convolution's ``ConvSpec``), and tuples, lists and str-keyed dicts of them. Anything else is
not sent (``Unsendable``): the client then computes the op itself.
"""
from __future__ import annotations

import numpy as np

from disthook import wire

__all__ = ["Unsendable", "decode_params", "encode_params", "op_function", "op_name"]


class Unsendable(Exception):
    """A parameter of an op that cannot travel as data."""


def op_name(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def encode_params(params: dict) -> dict:
    return {"dict": {k: _encode(v) for k, v in params.items()}}


def _named_params() -> dict[str, type]:
    """The named tuples ops take as parameters, by name: they travel as their fields and come
    back as the same type (a plain tuple would lose the field names the op reads)."""
    from disthook.ops.conv import ConvSpec

    return {"ConvSpec": ConvSpec}


def _encode(v):
    from disthook._dtype import dtype as DType

    if v is None or type(v) in (bool, int, float, str):
        return v
    if isinstance(v, tuple) and hasattr(v, "_fields"):
        if _named_params().get(type(v).__name__) is not type(v):
            raise Unsendable(type(v).__name__)
        return {"named": [type(v).__name__, [_encode(x) for x in v]]}
    if isinstance(v, np.generic):
        return {"scalar": np.asarray(v)}
    if isinstance(v, np.ndarray):
        return {"array": wire.c_order(v)}
    if isinstance(v, tuple):
        return {"tuple": [_encode(x) for x in v]}
    if isinstance(v, list):
        return {"list": [_encode(x) for x in v]}
    if isinstance(v, dict) and all(isinstance(k, str) for k in v):
        return {"dict": {k: _encode(x) for k, x in v.items()}}
    if isinstance(v, slice):
        return {"slice": [_encode(v.start), _encode(v.stop), _encode(v.step)]}
    if v is Ellipsis:
        return {"ellipsis": True}
    if isinstance(v, DType):
        return {"dtype": str(v)}
    if isinstance(v, np.dtype):
        return {"npdtype": v.str}
    raise Unsendable(type(v).__name__)


def decode_params(data) -> dict:
    return _decode(data)


def _decode(data):
    if data is None or type(data) in (bool, int, float, str):
        return data
    if not isinstance(data, dict) or len(data) != 1:
        raise ValueError(f"not an op parameter: {data!r:.80}")
    (tag, payload), = data.items()
    if tag == "scalar":
        return np.asarray(payload)[()]
    if tag == "array":
        return np.asarray(payload)
    if tag == "tuple":
        return tuple(_decode(x) for x in payload)
    if tag == "named":
        name, fields = payload
        cls = _named_params().get(name)
        if cls is None:
            raise ValueError(f"not an op parameter: a {name!r}")
        return cls(*(_decode(x) for x in fields))
    if tag == "list":
        return [_decode(x) for x in payload]
    if tag == "dict":
        return {str(k): _decode(x) for k, x in payload.items()}
    if tag == "slice":
        return slice(*(_decode(x) for x in payload))
    if tag == "ellipsis":
        return Ellipsis
    if tag == "dtype":
        import disthook

        dt = getattr(disthook, str(payload).removeprefix("torch."), None)
        if dt is None or type(dt).__name__ != "dtype":
            raise ValueError(f"unknown dtype {payload!r}")
        return dt
    if tag == "npdtype":  # ("<V2", bfloat16's str, is a plain void to np.dtype)
        return wire.dtype_named(str(payload))
    raise ValueError(f"not an op parameter: {data!r:.80}")


_OPS: dict[str, type] = {}


def _all_ops() -> dict[str, type]:
    from disthook.ops.base import Op

    todo = [Op]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__dict__.get("_in_float32"):
                continue  # a bfloat16 op's float32 twin (ops/_bf16.py), of its op's name
            if cls.__dict__.get("_node_cls") is not sub:  # not the node class of its op
                _OPS[op_name(sub)] = sub
            todo.append(sub)
    return _OPS


def _load_op_module(name: str) -> bool:
    """Import the ``disthook.ops`` module ``name`` names, if it is one and is not loaded."""
    import importlib
    import pkgutil
    import sys

    import disthook.ops

    module = name.rpartition(".")[0]
    package, _, leaf = module.rpartition(".")
    if package != "disthook.ops" or module in sys.modules:
        return False
    if leaf not in {m.name for m in pkgutil.iter_modules(disthook.ops.__path__)}:
        return False
    importlib.import_module(module)
    return True


def op_function(name: str, params):
    """``f(*tensors)``: the op ``name`` applied with ``params`` (encoded)."""
    cls = _OPS.get(name) or _all_ops().get(name)
    if cls is None and _load_op_module(name):
        cls = _all_ops().get(name)
    if cls is None:
        raise LookupError(f"no op {name!r} in this worker's disthook (an op of another "
                          "version of disthook?)")
    kwargs = decode_params(params) if params is not None else {}

    def apply(*tensors):
        return cls.apply(*tensors, **kwargs)

    return apply
