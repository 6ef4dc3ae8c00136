"""``Linear``, ``Bilinear`` and ``Identity``."""
from __future__ import annotations

import math

from disthook.nn import functional as F
from disthook.nn import init
from disthook.nn.modules.module import Module
from disthook.nn.parameter import Parameter, UninitializedParameter
from disthook.tensor import Tensor, empty


class Identity(Module):
    """Returns its input; takes and ignores any constructor arguments."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """``y = x @ weight.T + bias``; torch's default init (kaiming-uniform, a=sqrt(5))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(empty((out_features, in_features), dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class NonDynamicallyQuantizableLinear(Linear):
    """A Linear by another name: MultiheadAttention's output projection, named as in torch
    (its repr and type show the name)."""


class LazyLinear(Linear):
    """A Linear whose ``in_features`` is taken from its first input; it then becomes a
    ``Linear`` (the same parameter objects, now with their shapes), as torch's does."""

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        Module.__init__(self)
        self.in_features = 0
        self.out_features = out_features
        self.weight = UninitializedParameter(dtype=dtype, device=device)
        if bias:
            self.bias = UninitializedParameter(dtype=dtype, device=device)
        else:
            self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        if self.in_features:
            super().reset_parameters()

    def has_uninitialized_params(self) -> bool:
        return self.in_features == 0

    def initialize_parameters(self, input: Tensor) -> None:
        """Give the parameters their shapes from ``input``'s last dim, initialise them as
        Linear does and become a Linear."""
        self.in_features = input.shape[-1]
        self.weight.materialize((self.out_features, self.in_features))
        if self.bias is not None:
            self.bias.materialize((self.out_features,))
        self.reset_parameters()
        self.__class__ = Linear

    def forward(self, input: Tensor) -> Tensor:
        self.initialize_parameters(input)
        return F.linear(input, self.weight, self.bias)


class Bilinear(Module):
    """``y = x1^T A x2 + b`` with ``A`` of shape ``(out, in1, in2)``; both uniform in
    +-1/sqrt(in1) at init, as torch's."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        self.weight = Parameter(empty((out_features, in1_features, in2_features), dtype=dtype,
                                      device=device))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
