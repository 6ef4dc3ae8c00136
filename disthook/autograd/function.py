"""Custom ops: subclass ``Function`` with ``forward(ctx, ...)`` and ``backward(ctx, ...)``."""
from __future__ import annotations

import numpy as np

from disthook.autograd import grad_mode
from disthook.autograd.graph import Node, gradient_edge

VIEW_INPLACE_MSG = (
    "Output {i} of {name} is a view and is being modified inplace. This view was created "
    "inside a custom Function (or because an input was returned as-is) and the autograd logic "
    "to handle view+inplace would override the custom backward associated with the custom "
    "Function, leading to incorrect gradients. This behavior is forbidden. You can fix this by "
    "cloning the output of the custom Function."
)
VIEW_BASE_INPLACE_MSG = (
    "Output {i} of {name} is a view and its base or another view of its base has been "
    "modified inplace. This view was created inside a custom Function (or because an input "
    "was returned as-is) and the autograd logic to handle view+inplace would override the "
    "custom backward associated with the custom Function, leading to incorrect gradients. "
    "This behavior is forbidden. You can fix this by cloning the output of the custom Function."
)


class BackwardCFunction(Node):
    """The node of a custom Function call; it is also the ``ctx`` its methods receive."""

    _forward_cls = None

    materialize_grads = False  # done here, so that set_materialize_grads(False) holds

    def __init__(self) -> None:
        super().__init__()
        self._materialize = True
        self._dirty = ()
        self._non_differentiable = ()
        self._tensor_positions = ()

    def mark_dirty(self, *tensors) -> None:
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors) -> None:
        self._non_differentiable = tensors

    def set_materialize_grads(self, value: bool) -> None:
        self._materialize = value

    def save_for_forward(self, *tensors) -> None:
        pass

    def _backward(self, grads: list) -> tuple:
        from disthook.tensor import Tensor

        if self._materialize:
            grads = [
                Tensor._make(np.zeros(meta[0], dtype=meta[1]), None, 0) if g is None else g
                for g, meta in zip(grads, self._output_meta)
            ]
        result = self._forward_cls.backward(self, *grads)
        if type(result) is not tuple:
            result = (result,)
        n_args = len(self.needs_input_grad)
        if len(result) != n_args:
            if len(result) > n_args and all(r is None for r in result[n_args:]):
                result = result[:n_args]
            else:
                raise RuntimeError(
                    f"function {self.name()} returned an incorrect number of gradients "
                    f"(expected {n_args}, got {len(result)})")
        out = []
        for pos in self._tensor_positions:
            g = result[pos]
            if g is not None and not isinstance(g, Tensor):
                raise TypeError(
                    f"function {self.name()} returned a gradient different than None at "
                    f"position {pos + 1}, but the corresponding forward input was not a "
                    "Variable")
            out.append(g)
        return tuple(out)


class Function:
    """Base class of user-defined differentiable operations (torch.autograd.Function)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._backward_cls = type(f"{cls.__name__}Backward", (BackwardCFunction,),
                                 {"_forward_cls": cls, "__module__": cls.__module__})

    def __init__(self, *args, **kwargs):
        raise RuntimeError(
            "Legacy autograd function with non-static forward method is deprecated. Please use "
            "new-style autograd function with static forward method. (Example: "
            "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError(
            "You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError(
            "You must implement either the backward or vjp method for your custom "
            "autograd.Function to use it with backward mode AD.")

    vjp = backward

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @classmethod
    def apply(cls, *args, **kwargs):
        from disthook.tensor import Tensor

        ctx = cls._backward_cls()
        needs = tuple(isinstance(a, Tensor) and a._requires_grad for a in args)
        ctx.needs_input_grad = needs
        uses_setup = cls.setup_context is not Function.setup_context
        with grad_mode.no_grad():
            if uses_setup:
                out = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, out)
            else:
                out = cls.forward(ctx, *args, **kwargs)
        records = grad_mode.is_grad_enabled() and any(needs)
        single = not isinstance(out, tuple)
        outs = (out,) if single else out
        if not records:
            return out
        positions = tuple(i for i, a in enumerate(args) if isinstance(a, Tensor))
        ctx._tensor_positions = positions
        ctx.next_functions = tuple(gradient_edge(args[i]) for i in positions)
        ctx._input_meta = tuple((args[i]._data.shape, args[i]._data.dtype) for i in positions)
        ctx.needs_input_grad = needs
        ctx._output_meta = tuple(
            (o._data.shape, o._data.dtype) if isinstance(o, Tensor) else ((), np.float32)
            for o in outs)
        wrapped = []
        input_ids = {id(a) for a in args if isinstance(a, Tensor)}
        dirty = {id(t) for t in ctx._dirty}
        non_diff = {id(t) for t in ctx._non_differentiable}
        for i, o in enumerate(outs):
            if not isinstance(o, Tensor):
                wrapped.append(o)
                continue
            if id(o) in non_diff:
                wrapped.append(o)
                continue
            if id(o) in dirty:
                # modified in place and returned: the tensor itself takes the new history
                o._vc[0] += 1
                o._grad_fn, o._output_nr, o._requires_grad = ctx, i, True
                o._backward_hooks = None
                wrapped.append(o)
                continue
            if id(o) in input_ids:
                # an input returned as-is becomes a view of it; in-place on it is forbidden
                view = Tensor._make(o._data, ctx, i)
                view._vc = o._vc
                view._base = o
                view.__dict__["_custom_view"] = (i, cls.__name__)
                wrapped.append(view)
                continue
            if o._grad_fn is not None or o._base is not None:
                o = Tensor._make(o._data, ctx, i)
            else:
                o._grad_fn, o._output_nr, o._requires_grad = ctx, i, True
            wrapped.append(o)
        return wrapped[0] if single else tuple(wrapped)


class InplaceFunction(Function):
    pass


class NestedIOFunction(Function):
    pass


def once_differentiable(fn):
    """Decorator kept for compatibility: runs ``backward`` without recording a graph."""
    import functools

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with grad_mode.no_grad():
            return fn(ctx, *args)

    return wrapper
