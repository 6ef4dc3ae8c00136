"""``torch._foreach_*``: one op over a list of tensors, as optimizers and EMA helpers (timm's
``ModelEmaV3``: ``_foreach_lerp_``) call it. Each is the tensor method of that name applied
to every tensor in turn, its other operands taken one per tensor where they are lists (or
tuples) and shared where they are a number or a tensor; the out-of-place ones return a
tuple of the results, the in-place ones (``..._``) the list of the tensors they changed.
There is no fused kernel here: the loop is the whole of it, which gives the same values and
gradients, and reaches a deployed model's tensors through their own methods."""
from __future__ import annotations

from disthook.tensor import Tensor

__all__: list[str] = []  # the names are set on the disthook package (see ``install``)

# ops of one tensor: out of place, and in place with a trailing underscore
_UNARY = ("abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
          "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal",
          "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc")
# ops with further operands (numbers, tensors, or lists of either)
_WITH_OPERANDS = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "clamp_min",
                  "clamp_max", "lerp", "addcmul", "addcdiv")


def _check_list(tensors, name: str) -> list:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{name}(): argument 'self' must be a list or tuple of Tensors, not "
                        f"{type(tensors).__name__}")
    return list(tensors)


def _per_tensor(args: tuple, kwargs: dict, n: int):
    """The operands of each of ``n`` calls: lists and tuples one item per call, anything else
    shared by all; a list of another length is torch's RuntimeError."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)) and len(value) != n:
            raise RuntimeError(f"Tensor lists must have the same number of tensors, got {n} "
                               f"and {len(value)}")

    def pick(value, i):
        return value[i] if isinstance(value, (list, tuple)) else value

    for i in range(n):
        yield (tuple(pick(a, i) for a in args), {k: pick(v, i) for k, v in kwargs.items()})


def _out_of_place(op: str):
    def foreach(self, *args, **kwargs):
        name = f"_foreach_{op}"
        if op == "pow" and not isinstance(self, (list, tuple)):  # a number to each power
            exponents = _check_list(args[0], name)
            return tuple(self ** t for t in exponents)
        tensors = _check_list(self, name)
        args, kwargs = _scalars_as_value(op, args, kwargs)
        return tuple(getattr(t, op)(*a, **k)
                     for t, (a, k) in zip(tensors, _per_tensor(args, kwargs, len(tensors))))

    foreach.__name__ = foreach.__qualname__ = f"_foreach_{op}"
    foreach.__doc__ = f"``Tensor.{op}`` of each tensor (a tuple of the results)."
    return foreach


def _scalars_as_value(op: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``addcmul`` and ``addcdiv`` take their scale third, positionally (one number, a list
    of them, or a tensor of them), where the tensor methods take ``value=``."""
    if op in ("addcmul", "addcdiv") and len(args) == 3:
        scale = args[2]
        if isinstance(scale, Tensor) and scale.dim() == 1:
            scale = scale.tolist()
        return args[:2], {**kwargs, "value": scale}
    return args, kwargs


def _in_place(op: str):
    def foreach(self, *args, **kwargs):
        args, kwargs = _scalars_as_value(op, args, kwargs)
        tensors = _check_list(self, f"_foreach_{op}_")
        for t, (a, k) in zip(tensors, _per_tensor(args, kwargs, len(tensors))):
            in_place = getattr(t, f"{op}_", None)
            if in_place is not None:
                in_place(*a, **k)
            else:  # no in-place method of its own (maximum, minimum): the result copied in
                t.copy_(getattr(t, op)(*a, **k))
        return tensors

    foreach.__name__ = foreach.__qualname__ = f"_foreach_{op}_"
    foreach.__doc__ = f"``Tensor.{op}_`` of each tensor, in place (returns the tensors)."
    return foreach


def _foreach_zero_(self):
    """Each tensor filled with zeros, in place."""
    return _in_place("zero")(self)


def _foreach_copy_(self, src, non_blocking: bool = False):
    """Each tensor takes the values of its ``src``, in place."""
    return _in_place("copy")(self, src)


def _foreach_clone(self, *, memory_format=None):
    """A copy of each tensor."""
    return _out_of_place("clone")(self)


def _foreach_norm(self, ord=2, dtype=None):
    """The vector ``ord``-norm of each tensor (over all its elements)."""
    from disthook import linalg

    tensors = _check_list(self, "_foreach_norm")
    return tuple(linalg.vector_norm(t, ord, dtype=dtype) for t in tensors)


def _foreach_max(self):
    """The largest element of each tensor."""
    return tuple(t.max() for t in _check_list(self, "_foreach_max"))


def _foreach_powsum(self, exponent=2, dtype=None):
    """The sum of each tensor's absolute values to the power ``exponent``."""
    tensors = _check_list(self, "_foreach_powsum")
    return tuple(t.abs().pow(exponent).sum(dtype=dtype) for t in tensors)


def _foreach_mm(self, mat2):
    """Each matrix product ``self[i] @ mat2[i]``."""
    return _out_of_place("mm")(self, mat2)


def install(namespace: dict) -> None:
    """Set every ``_foreach_*`` function in ``namespace`` (the disthook package's)."""
    for op in _UNARY + _WITH_OPERANDS:
        namespace[f"_foreach_{op}"] = _out_of_place(op)
        namespace[f"_foreach_{op}_"] = _in_place(op)
    for fn in (_foreach_zero_, _foreach_copy_, _foreach_clone, _foreach_norm, _foreach_max,
               _foreach_powsum, _foreach_mm):
        namespace[fn.__name__] = fn
