"""``bilinear``, ``conv_tbc`` and ``grouped_mm``: compositions of matmul and convolution."""
from __future__ import annotations

import numpy as np

import disthook.nn.functional as F
from disthook._dtype import scalar_type_name
from disthook.tensor import Tensor, cat, stack

__all__ = ["bilinear", "conv_tbc", "grouped_mm"]


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


def grouped_mm(mat_a: Tensor, mat_b: Tensor, *, offs: Tensor | None = None,
               bias: Tensor | None = None, out_dtype=None) -> Tensor:
    """Matrix products of groups (a mixture of experts' tokens and weights): 3-d by 3-d is
    one product per group; with 2-d operands ``offs`` (cumulative group ends) cuts the
    2-d operand's grouped dim: the rows of ``a`` (2-d by 3-d), the columns of ``b`` (3-d by
    2-d), or the shared dim (2-d by 2-d, one ``(M, N)`` product per group)."""
    if mat_a.ndim not in (2, 3) or mat_b.ndim not in (2, 3):
        raise RuntimeError(f"grouped_mm: mat_a and mat_b must be 2D or 3D, got "
                           f"{mat_a.ndim}D and {mat_b.ndim}D")
    for name, t in (("mat_a", mat_a), ("mat_b", mat_b)):
        if t._data.dtype not in (np.float32, np.float16) and t.dtype.name != "bfloat16":
            raise RuntimeError(f"Expected {name} to be Float32, BFloat16 or Float16 matrix, "
                               f"got {scalar_type_name(t.dtype)}")
    if bias is not None:
        raise RuntimeError("grouped_mm: bias is not supported yet")
    both_3d = mat_a.ndim == 3 and mat_b.ndim == 3
    if both_3d != (offs is None):
        raise RuntimeError("grouped_mm: offs must be given exactly when an operand is 2D")
    if both_3d:
        out = mat_a @ mat_b
    else:
        ends = [int(e) for e in offs._data.reshape(-1)]
        starts = [0] + ends[:-1]
        if mat_a.ndim == 2 and mat_b.ndim == 3:
            out = cat([mat_a[s:e] @ mat_b[g] for g, (s, e) in enumerate(zip(starts, ends))])
        elif mat_a.ndim == 3:
            out = cat([mat_a[g] @ mat_b[:, s:e] for g, (s, e) in enumerate(zip(starts, ends))],
                      dim=1)
        else:
            out = stack([mat_a[:, s:e] @ mat_b[s:e] for s, e in zip(starts, ends)])
    return out if out_dtype is None else out.to(out_dtype)
