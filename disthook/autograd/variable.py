"""``Variable``, the pre-0.4 API kept for old programs: every Tensor counts as a Variable."""
from __future__ import annotations

import warnings


class _VariableMeta(type):
    def __instancecheck__(cls, other) -> bool:
        from disthook.tensor import Tensor

        return isinstance(other, Tensor)


class Variable(metaclass=_VariableMeta):
    """``Variable(t, requires_grad=False)``: a new leaf sharing ``t``'s memory and version
    counter (``t`` itself is left alone), requiring grad only when asked, as in torch."""

    def __new__(cls, data=None, requires_grad: bool = False, volatile: bool = False):
        from disthook.tensor import FACTORY_REQUIRES_GRAD_MSG, Tensor, tensor

        if volatile:
            warnings.warn("volatile was removed and now has no effect. Use `with "
                          "torch.no_grad():` instead.", UserWarning, stacklevel=2)
        if data is None:
            data = tensor([])
        elif not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        t = data.detach()
        if requires_grad:
            if not t.is_floating_point():
                raise RuntimeError(FACTORY_REQUIRES_GRAD_MSG)
            t._requires_grad = True
        return t
