"""Autograd Functions used by the module machinery."""
from __future__ import annotations

from disthook.autograd.function import Function


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
