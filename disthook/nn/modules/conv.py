"""``Conv1d``, ``Conv2d``, ``Conv3d`` and their transposes: torch's arguments, checks, default
initialisation and repr."""
from __future__ import annotations

import math

from disthook.nn import functional as F
from disthook.nn import init
from disthook.nn.modules.module import Module
from disthook.nn.parameter import Parameter
from disthook.tensor import Tensor, empty

PADDING_STRINGS = ("valid", "same")
PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _ConvNd(Module):
    """What Conv1d and Conv2d share; ``dims`` is the number of spatial dims."""

    dims = 0

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None) -> None:
        super().__init__()
        n = self.dims
        kernel_size, stride, dilation = (F._ntuple(v, n) for v in (kernel_size, stride,
                                                                   dilation))
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if isinstance(padding, str):
            if padding not in PADDING_STRINGS:
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 "{'valid', 'same'}")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        else:
            padding = F._ntuple(padding, n)
        if padding_mode not in PADDING_MODES:
            raise ValueError("padding_mode must be one of {'replicate', 'reflect', 'zeros', "
                             f"'circular'}}, but got padding_mode='{padding_mode}'")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.transposed = False
        self.output_padding = (0,) * n
        self.groups = groups
        self.padding_mode = padding_mode
        self._reversed_padding_repeated_twice = self._padding_for_pad()
        self.weight = Parameter(empty((out_channels, in_channels // groups, *kernel_size),
                                      dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def _padding_for_pad(self) -> list:
        """``padding`` in ``F.pad``'s order (last dim first), for padding modes that pad
        before convolving; 'same' splits an odd total with the extra after."""
        pads = []
        for i in reversed(range(self.dims)):
            if self.padding == "valid":
                before = after = 0
            elif self.padding == "same":
                total = self.dilation[i] * (self.kernel_size[i] - 1)
                before, after = total // 2, total - total // 2
            else:
                before = after = self.padding[i]
            pads += [before, after]
        return pads

    def reset_parameters(self) -> None:
        """Kaiming-uniform weight (a=sqrt(5)); bias uniform in +-1/sqrt(fan_in)."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0,) * len(self.padding):
            s += f", padding={self.padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s

    def _conv_forward(self, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        conv = (F.conv1d, F.conv2d, F.conv3d)[self.dims - 1]
        if self.padding_mode != "zeros":
            padded = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv(padded, weight, bias, self.stride, 0, self.dilation, self.groups)
        return conv(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input: Tensor) -> Tensor:
        return self._conv_forward(input, self.weight, self.bias)


class Conv1d(_ConvNd):
    """1-d convolution over ``(N, C_in, L)`` or ``(C_in, L)`` input."""

    dims = 1


class Conv2d(_ConvNd):
    """2-d convolution over ``(N, C_in, H, W)`` or ``(C_in, H, W)`` input."""

    dims = 2


class Conv3d(_ConvNd):
    """3-d convolution over ``(N, C_in, D, H, W)`` or ``(C_in, D, H, W)`` input."""

    dims = 3


class _ConvTransposeNd(_ConvNd):
    """The adjoint of a convolution: weight ``(in_channels, out_channels / groups,
    *kernel)``; ``output_padding`` (or ``output_size`` in forward) adds rows at the end where
    a stride leaves the size ambiguous."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 padding_mode: str = "zeros", device=None, dtype=None) -> None:
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for '
                             f"{type(self).__name__}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)
        self.transposed = True
        self.output_padding = F._ntuple(output_padding, self.dims)
        self.weight = Parameter(empty((in_channels, out_channels // groups, *self.kernel_size),
                                      dtype=dtype, device=device))
        self.reset_parameters()

    def _output_padding(self, input: Tensor, output_size) -> tuple:
        if output_size is None:
            return self.output_padding
        sizes = list(output_size)[-self.dims:]
        spatial = input.shape[-self.dims:]
        pads = []
        for i, (n, want) in enumerate(zip(spatial, sizes)):
            least = ((n - 1) * self.stride[i] - 2 * self.padding[i]
                     + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
            most = least + self.stride[i] - 1
            if not least <= want <= most:
                raise ValueError(f"requested an output size of {sizes}, but valid sizes range "
                                 f"from {[least]} to {[most]} (for an input of "
                                 f"{list(spatial)})")
            pads.append(want - least)
        return tuple(pads)

    def forward(self, input: Tensor, output_size=None) -> Tensor:
        conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[self.dims - 1]
        return conv(input, self.weight, self.bias, self.stride, self.padding,
                    self._output_padding(input, output_size), self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-d convolution over ``(N, C_in, L)`` or ``(C_in, L)`` input."""

    dims = 1


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-d convolution over ``(N, C_in, H, W)`` or ``(C_in, H, W)`` input."""

    dims = 2


class ConvTranspose3d(_ConvTransposeNd):
    """Transposed 3-d convolution over ``(N, C_in, D, H, W)`` or ``(C_in, D, H, W)`` input."""

    dims = 3
