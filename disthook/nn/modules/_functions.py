"""Autograd Functions used by the module machinery."""
from __future__ import annotations

from disthook import _dtype
from disthook.autograd import grad_mode
from disthook.autograd.function import BackwardCFunction, Function, _alias, _as_custom_view
from disthook.autograd.graph import gradient_edge
from disthook.tensor import Tensor


class BackwardHookFunction(Function):
    """Identity on tensors; its node is where a module's full backward hooks run.

    Inputs that need no gradient are marked non-differentiable. The others come back as
    views of themselves, so an in-place change to them raises (torch does the same).
    """

    @staticmethod
    def forward(ctx, *args):
        ctx.mark_non_differentiable(*[a for a in args if not a.requires_grad])
        return args

    @staticmethod
    def backward(ctx, *grads):
        return grads

    @classmethod
    def apply(cls, *args):
        """``Function.apply`` for the case the module machinery has, twice per call of a
        module with full backward hooks: tensors only, grad mode on, one of them needing a
        gradient. It builds the same node and outputs (a view per tensor that needs a
        gradient, an alias per other) without the general path's bookkeeping; anything
        else takes the general path."""
        needs = []
        for a in args:
            if not isinstance(a, Tensor) or a._requires_grad and _dtype.kind(a._data.dtype) != "f":
                return super().apply(*args)
            needs.append(a._requires_grad)
        if True not in needs or not grad_mode._state.enabled:
            return super().apply(*args)
        node = cls._backward_cls()
        node.needs_input_grad = needs = tuple(needs)
        node._non_differentiable = tuple([a for a, n in zip(args, needs) if not n])
        node._is_tensor_arg = (True,) * len(args)
        node.next_functions = tuple([gradient_edge(a) for a in args])
        node._input_meta = node._output_meta = tuple([(a._data.shape, a._data.dtype)
                                                      for a in args])
        name = cls.__name__
        return tuple([_as_custom_view(Tensor._make(a._data, None, 0), a, node, i, name)
                      if n else _alias(a) for i, (a, n) in enumerate(zip(args, needs))])


def _pass_through(node, grads: list) -> tuple:
    """The node's ``_backward`` (see ``BackwardCFunction``): the gradients as they came, an
    absent one made zeros as materialized gradients are; what the general path returns for
    this identity, without its checks, which it cannot fail."""
    for g in grads:
        if g is None:
            return BackwardCFunction._backward(node, grads)
    return tuple(grads)


BackwardHookFunction._backward_cls._backward = _pass_through
