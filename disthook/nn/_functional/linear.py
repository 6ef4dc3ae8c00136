"""``bilinear`` and ``conv_tbc``: compositions of matmul and convolution."""
from __future__ import annotations

import disthook.nn.functional as F
from disthook.tensor import Tensor

__all__ = ["bilinear", "conv_tbc"]


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor,
             bias: Tensor | None = None) -> Tensor:
    """``y[..., o] = sum over i, j of input1[..., i] * weight[o, i, j] * input2[..., j]
    (+ bias[o])``."""
    if weight.ndim != 3:
        raise RuntimeError(f"bilinear(): weight must be 3-dimensional, got {weight.ndim}")
    out, in1, in2 = weight.shape
    if input1.shape[-1] != in1:
        raise RuntimeError(f"bilinear(): input1 size does not match weight size: got "
                           f"{input1.shape[-1]} but expected {in1}")
    if input2.shape[-1] != in2:
        raise RuntimeError(f"bilinear(): input2 size does not match weight size: got "
                           f"{input2.shape[-1]} but expected {in2}")
    if tuple(input1.shape[:-1]) != tuple(input2.shape[:-1]):
        raise RuntimeError("bilinear(): input batch dimensions do not match: got "
                           f"{list(input1.shape[:-1])} and {list(input2.shape[:-1])}")
    # input1 @ W viewed (in1, out * in2), then the dot with input2 per output
    left = input1 @ weight.transpose(0, 1).reshape(in1, out * in2)
    y = (left.reshape(*input1.shape[:-1], out, in2) * input2.unsqueeze(-2)).sum(-1)
    return y + bias if bias is not None else y


def conv_tbc(input: Tensor, weight: Tensor, bias: Tensor, pad: int = 0) -> Tensor:
    """1-d convolution of time-batch-channel input ``(T, B, C_in)`` with ``(K, C_in, C_out)``
    weight, zero-padded by ``pad`` frames at each end: ``(T + 2 pad - K + 1, B, C_out)``."""
    if input.ndim != 3:
        raise RuntimeError("Input must have 3 dims: time, batch, in_channel")
    if weight.ndim != 3:
        raise RuntimeError("Weight tensor must have 3 dims: kernel_width, in_channels, "
                           "out_channels.")
    if bias.ndim != 1:
        raise RuntimeError("Bias must be 1-D")
    if input.shape[2] != weight.shape[1]:
        raise RuntimeError("Input dim 2 (input channels) is not == dim 1 in the weight tensor")
    if weight.shape[2] != bias.shape[0]:
        raise RuntimeError("Bias size must equal dim 2 in the weight tensor (output channels).")
    out = F.conv1d(input.permute(1, 2, 0), weight.permute(2, 1, 0), bias, padding=pad)
    return out.permute(2, 0, 1)
