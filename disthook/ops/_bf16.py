"""bfloat16 ops computed as torch's CPU kernels compute them: in float32, rounded once.

A bfloat16 tensor keeps its values in an ``ml_dtypes.bfloat16`` array (two bytes an element,
so storage, strides and ``view(dtype)`` are torch's). No op computes on those arrays
directly: numpy's loops for them would round every partial sum of a reduction or a product
to bfloat16, where torch accumulates in float32. Instead ``Op.apply`` hands an op with a
bfloat16 input to ``compute_in_float32``: the op's own ``forward`` runs on float32 copies of
the bfloat16 inputs, and each float32 array it returns is rounded to bfloat16 (round to
nearest even, as torch's conversion). The graph node, the saved tensors and the gradients'
dtypes are those of the bfloat16 tensors, so the backward pass computes the same way.
"""
from __future__ import annotations

import numpy as np

from disthook._dtype import BF16

F32 = np.dtype(np.float32)
_wrapped: dict = {}  # op class -> its float32-computing twin


class _Ctx:
    """The node as the op's forward sees it: attributes go to the node; a float32 stand-in
    it saves is saved as the bfloat16 tensor it stands for."""

    __slots__ = ("_node", "_origin")

    def __init__(self, node, origin: dict) -> None:
        object.__setattr__(self, "_node", node)
        object.__setattr__(self, "_origin", origin)

    def __getattr__(self, name):
        return getattr(self._node, name)

    def __setattr__(self, name, value) -> None:
        setattr(self._node, name, value)

    def save_for_backward(self, *tensors) -> None:
        origin = self._origin
        self._node.save_for_backward(*[origin.get(id(t), t) for t in tensors])


def _stand_in(t):
    """A float32 tensor with ``t``'s values and place in the graph (for the forward's reads
    of ``requires_grad`` and the like); never recorded as an input of anything."""
    s = t.__class__._make(t._data.astype(F32), None, 0)
    s._requires_grad, s._grad_fn, s._output_nr, s._vc = (
        t._requires_grad, t._grad_fn, t._output_nr, t._vc)
    return s


def _round(out, all_bf16: bool):
    if not all_bf16:
        return out
    if type(out) is tuple:
        return tuple([_round(o, True) for o in out])
    if isinstance(out, (np.ndarray, np.float32)) and out.dtype == F32:
        return np.asarray(out).astype(BF16)
    return out


# op families torch 2.13 has no bfloat16 CPU kernels for: the decompositions and solvers
# ("lu_cpu" not implemented for 'BFloat16', ...) and the FFTs ("Unsupported dtype BFloat16")
_REFUSED = {"disthook.ops.decomp": NotImplementedError, "disthook.ops.fft": RuntimeError}


def refuse(name: str, kind=NotImplementedError):
    """torch's error for an op it has no bfloat16 kernel for (``name``: torch's name)."""
    if kind is RuntimeError:
        raise RuntimeError(f"Unsupported dtype BFloat16 ({name}); convert to float32 first "
                           "(t.float()) and back after, if you want bfloat16")
    raise NotImplementedError(f'"{name}" not implemented for \'BFloat16\'; convert to '
                              "float32 first (t.float())")


def compute_in_float32(cls, inputs: tuple, params: dict):
    """Run op ``cls`` on ``inputs`` (some bfloat16) as torch's CPU kernel does."""
    kind = _REFUSED.get(cls.__module__)
    if kind is not None:
        refuse(cls.__name__, kind)
    twin = _wrapped.get(cls)
    if twin is None:
        twin = _wrapped[cls] = _make_twin(cls)
    return twin.apply(*inputs, **params)


# ops whose torch kernel rounds a python-float operand to bfloat16 first (add's and sub's
# "other" and alpha); the others (mul, div, ...) take it in float32 (measured, torch 2.13)
_ROUNDS_SCALAR = frozenset({"Add", "Sub", "Rsub", "RsubScalar"})
# ops whose torch CPU kernel takes float32 parameters beside a bfloat16 input and returns the
# input's dtype (its first output; the saved statistics stay float32)
_OUTPUT_AS_INPUT = frozenset({"NativeLayerNorm", "NativeBatchNorm", "NativeGroupNorm"})


def _make_twin(cls):
    forward = cls.forward
    rounds_scalar = cls.__name__ in _ROUNDS_SCALAR
    output_as_input = cls.__name__ in _OUTPUT_AS_INPUT

    def float32_forward(ctx, *inputs, **params):
        origin, args, floats = {}, [], set()
        for t in inputs:
            if t._data.dtype == BF16:
                s = _stand_in(t)
                origin[id(s)] = t
                t = s
            elif "_wrapped_number" in t.__dict__:  # a python scalar, float32 (see _as)
                if rounds_scalar:
                    t = t.__class__._make(t._data.astype(BF16).astype(F32), None, 0)
            elif t._data.dtype.kind in "fc":
                floats.add(t._data.dtype)
            args.append(t)
        # an op told its result dtype (sum(dtype=...), to(...)) gives that dtype; an op with
        # float32 inputs beside bfloat16 ones gives float32, as torch's mixed kernels
        keep = params.get("dtype") is not None or floats
        if rounds_scalar and not floats:
            for name in ("alpha", "other"):
                if name in params:
                    params[name] = scalar_as_bfloat16(params[name])
        node = ctx if not origin or not ctx.needs_input_grad else _Ctx(ctx, origin)
        out = forward(node, *args, **params)
        if output_as_input and floats and inputs[0]._data.dtype == BF16:
            return (_round(out[0], True), *out[1:]) if type(out) is tuple else _round(out, True)
        return _round(out, not keep)

    twin = type(cls.__name__, (cls,), {"__slots__": (), "__module__": cls.__module__,
                                        "_in_float32": True,
                                        "forward": staticmethod(float32_forward)})
    twin._node_cls = cls._node_cls  # the op's own node: its name and its backward
    return twin


def wrapped_in_bfloat16(t):
    """A python number's wrapped tensor ``t`` rounded to bfloat16: torch's kernels take a
    number that comes first (-6.1 % x, 1.1 ** x) in the bfloat16 tensor's dtype."""
    out = t.__class__._make(t._data.astype(BF16), None, 0)
    out.__dict__["_wrapped_number"] = True
    return out


def mixed_float(a, b) -> bool:
    """Whether tensors ``a`` and ``b`` are a bfloat16 one and one of another float dtype
    (whose op ``compute_in_float32`` runs as torch's mixed kernel, in the wider dtype)."""
    da, db = a._data.dtype, getattr(b, "_data", None)
    if db is None:
        return False
    db = db.dtype
    return da != db and (da == BF16 and db.kind == "f" or db == BF16 and da.kind == "f")


def rounded_once(fn, *tensors):
    """``fn(*tensors)`` for a composite op that torch computes as one kernel (addmm, lerp):
    when the first is bfloat16 it runs on float32 copies of the bfloat16 ones and its result
    is rounded once to bfloat16, as torch's kernel; otherwise it is ``fn`` itself."""
    if tensors[0]._data.dtype != BF16:
        return fn(*tensors)
    return fn(*[t.float() if t._data.dtype == BF16 else t for t in tensors]).to(BF16)


def scalar_as_bfloat16(value):
    """A float scalar as torch's bfloat16 kernels take one that scales an operand (add's
    alpha): rounded to bfloat16 first."""
    return float(np.float32(value).astype(BF16)) if isinstance(value, float) else value


HALVES = (BF16, np.dtype(np.float16))


def half_in_float32(fn, *tensors):
    """``fn(*tensors)`` for a formula torch's CPU kernel computes in float32 for bfloat16 and
    float16 tensors alike, rounding its result once (the backward kernels of tanh, silu,
    gelu, softmax, log_softmax, and sigmoid's for bfloat16): when the first is of either half dtype, ``fn`` runs
    on float32 copies of the tensors of that dtype and its result is rounded back; otherwise
    it is ``fn`` itself. The copies and the rounding are ops, so the formula stays
    differentiable (``create_graph``)."""
    dtype = tensors[0]._data.dtype
    if dtype not in HALVES:
        return fn(*tensors)
    return fn(*[t.float() if t._data.dtype == dtype else t for t in tensors]).to(dtype)


def half_up(x: np.ndarray) -> np.ndarray:
    """A float16 (or bfloat16) array as float32 (torch's CPU kernels compute float16's
    sigmoid, silu, gelu, softmax and log_softmax in float32 and round the result once;
    numpy's float16 loops round every step); any other array as it is."""
    return x.astype(np.float32) if x.dtype in HALVES else x
