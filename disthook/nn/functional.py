"""``torch.nn.functional``: layers and losses as functions, built from disthook ops.

``linear`` records the same graph torch does (``AddmmBackward0`` for 2-D input with bias,
``ViewBackward0`` around it otherwise), so a legacy module backward hook, which sees only
the last node of ``forward``, gets the same ``grad_input`` as under torch.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from disthook import _dtype, random
from disthook._dtype import c_type_name, scalar_type_name
from disthook.amp import cpu_policy
from disthook.autograd import grad_mode, inference
from disthook.nn import _linear_ops
from disthook.nn import _unpool as UnpoolOps
from disthook.ops import activation as ActivationOps
from disthook.ops import conv as ConvOps
from disthook.ops import elementwise as E
from disthook.ops import embedding as EmbeddingOps
from disthook.ops import linalg as L
from disthook.ops import loss as LossOps
from disthook.ops import norm as NormOps
from disthook.ops import pad as PadOps
from disthook.ops import pool as PoolOps
from disthook.ops import resample as ResampleOps
from disthook.ops import shape as ShapeOps
from disthook.ops.base import binary_operands, check_broadcast
from disthook.ops.loss import REDUCTIONS
from disthook.tensor import Tensor, cat

# ---- linear --------------------------------------------------------------------------------

@cpu_policy.covered(cpu_policy.LOWER)
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias`` over the last dim of ``input``."""
    if not isinstance(input, Tensor):  # a forward hook upstream returned something else
        raise TypeError(f"linear(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    _check_linear_dtypes(input, weight, bias)
    in_features = weight.shape[-1]
    if input.ndim == 2:
        rows = input
    elif input.ndim == 1:
        rows = input.reshape(1, -1) if bias is not None else input.unsqueeze(0)
    else:
        rows = input.reshape(-1, input.shape[-1])
    if rows.shape[1] != in_features:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({rows.shape[0]}x{rows.shape[1]} and "
            f"{weight.shape[1]}x{weight.shape[0]})")
    out_shape = (*input.shape[:-1], weight.shape[0])
    if bias is not None:
        out = L.Addmm.apply(bias, rows, weight.t())
        return out if input.ndim == 2 else out.reshape(out_shape)
    out = L.Mm.apply(rows, weight.t())
    if input.ndim == 2:
        return out
    if input.ndim == 1:
        return _linear_ops.SqueezeDim.apply(out, dims=(0,))
    return _linear_ops.UnsafeView.apply(out, shape=out_shape)


def _check_linear_dtypes(input: Tensor, weight: Tensor, bias: Tensor | None) -> None:
    """Linear does not promote: RuntimeError worded as torch's kernel words it, addmm's with
    a bias (the input, else the bias against the weight) and mm's without."""
    from disthook._dtype import c_type_name
    from disthook._dtype import scalar_type_name as name

    if bias is None:
        if input._data.dtype != weight._data.dtype:
            raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                               f"{c_type_name(input.dtype)} != {c_type_name(weight.dtype)}")
    elif input._data.dtype != weight._data.dtype:
        raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got "
                           f"{name(input.dtype)} and {name(weight.dtype)}")
    elif bias._data.dtype != weight._data.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got "
                           f"{name(bias.dtype)} and {name(weight.dtype)}")


# ---- activations ---------------------------------------------------------------------------

def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.relu_() if inplace else input.relu()


def sigmoid(input: Tensor) -> Tensor:
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    return input.tanh()


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
            dtype=None) -> Tensor:
    if dim is None:
        dim = _softmax_dim("softmax", input.ndim, _stacklevel)
    return input.softmax(dim, dtype=dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
                dtype=None) -> Tensor:
    if dim is None:
        dim = _softmax_dim("log_softmax", input.ndim, _stacklevel)
    return input.log_softmax(dim, dtype=dtype)


# ---- activations beyond relu / sigmoid / tanh ----------------------------------------------

def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    if inplace:
        return input._inplace(ActivationOps.LeakyReluInplace, negative_slope=negative_slope)
    return E.LeakyRelu.apply(input, negative_slope=negative_slope)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")
    return E.Gelu.apply(input, approximate=approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return input._inplace(E.Silu) if inplace else E.Silu.apply(input)


def _softmax_dim(name: str, ndim: int, stacklevel: int) -> int:
    """The dim torch picks when softmax is called without one (deprecated)."""
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  "to include dim=X as an argument.", UserWarning, stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


# ---- layer arguments ------------------------------------------------------------------------

def _ntuple(value, n: int) -> tuple:
    """``value`` as an ``n``-tuple: one number is repeated, a sequence is kept as it is."""
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return (value,) * n


# ---- convolution ----------------------------------------------------------------------------

@cpu_policy.covered(cpu_policy.LOWER)
def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """1-d convolution of ``(N, C_in, L)`` (or unbatched ``(C_in, L)``) input."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1)


@cpu_policy.covered(cpu_policy.LOWER)
def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """2-d convolution of ``(N, C_in, H, W)`` (or unbatched ``(C_in, H, W)``) input."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2)


@cpu_policy.covered(cpu_policy.LOWER)
def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """3-d convolution of ``(N, C_in, D, H, W)`` (or unbatched ``(C_in, D, H, W)``) input."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 3)


def _conv(input, weight, bias, stride, padding, dilation, groups, dims: int) -> Tensor:
    if input.ndim not in (dims + 1, dims + 2):
        raise RuntimeError(
            f"Expected {dims + 1}D (unbatched) or {dims + 2}D (batched) input to conv{dims}d, "
            f"but got input of size: {list(input.shape)}")
    batched = input.ndim == dims + 2
    x = input if batched else input.unsqueeze(0)
    out = _convolution(x, weight, bias, stride, padding, dilation, groups, dims)
    return out if batched else out.squeeze(0)


def _conv_arg(value, name: str, dims: int, k: int) -> tuple:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * dims
    if len(values) == 1:
        values = values * k
    if len(values) != k:
        raise RuntimeError(
            f"expected {name} to be a single integer value or a list of {k} values to match "
            f"the convolution dimensions, but got {name}={values}")
    return tuple(int(v) for v in values)


def _convolution(x, weight, bias, stride, padding, dilation, groups, dims) -> Tensor:
    """Checks in torch's order, then one ``ConvolutionBackward0`` node."""
    if weight.ndim < 3:
        raise RuntimeError("weight should have at least three dimensions")
    k = weight.ndim - 2
    stride = _conv_arg(stride, "stride", dims, k)
    dilation = _conv_arg(dilation, "dilation", dims, k)
    kernel = tuple(weight.shape[2:])
    if isinstance(padding, str):
        if padding == "valid":
            pads = ((0, 0),) * k
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            totals = [d * (n - 1) for d, n in zip(dilation, kernel)]
            if any(t % 2 for t in totals):
                warnings.warn("Using padding='same' with even kernel lengths and odd dilation "
                              "may require a zero-padded copy of the input be created",
                              UserWarning, stacklevel=4)
            pads = tuple((t // 2, t - t // 2) for t in totals)
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    else:
        pads = tuple((p, p) for p in _conv_arg(padding, "padding", dims, k))
    if any(lo < 0 for lo, _ in pads):
        raise RuntimeError("negative padding is not supported")
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    w_size = list(weight.shape)
    if weight.ndim != x.ndim:
        raise RuntimeError(
            f"Expected {weight.ndim}-dimensional input for {weight.ndim}-dimensional weight "
            f"{w_size}, but got {x.ndim}-dimensional input of size {list(x.shape)} instead")
    if weight.shape[0] % groups:
        raise RuntimeError(
            f"Given groups={groups}, expected weight to be divisible by {groups} at dimension "
            f"0, but got weight of size [{w_size}] instead")
    if x.shape[1] != weight.shape[1] * groups:
        raise RuntimeError(
            f"Given groups={groups}, weight of size {w_size}, expected input{list(x.shape)} to "
            f"have {weight.shape[1] * groups} channels, but got {x.shape[1]} channels instead")
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != weight.shape[0]):
        raise RuntimeError(
            f"Given weight of size {w_size}, expected bias to be 1-dimensional with "
            f"{weight.shape[0]} elements, but got bias of size {list(bias.shape)} instead")
    padded = [n + lo + hi for n, (lo, hi) in zip(x.shape[2:], pads)]
    spans = [d * (n - 1) + 1 for d, n in zip(dilation, kernel)]
    if any(p < s for p, s in zip(padded, spans)):
        raise RuntimeError(
            f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). "
            f"Kernel size: ({' x '.join(map(str, spans))}). Kernel size can't be greater than "
            "actual input size")
    if bias is not None and bias.dtype != x.dtype:
        raise RuntimeError(f"Input type ({c_type_name(x.dtype)}) and bias type "
                           f"({c_type_name(bias.dtype)}) should be the same")
    if weight.dtype != x.dtype:
        raise RuntimeError(f"expected scalar type {scalar_type_name(x.dtype)} but found "
                           f"{scalar_type_name(weight.dtype)}")
    return ConvOps.convolve(x, weight, bias, ConvOps.ConvSpec(stride, pads, dilation, groups))


# ---- padding --------------------------------------------------------------------------------

def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad the last ``len(pad) // 2`` dims, the last dim first: ``(left, right, top, ...)``.
    Modes 'constant' (with ``value``), 'reflect', 'replicate' and 'circular'."""
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    k = len(pad) // 2
    if k > input.ndim:
        raise RuntimeError("Padding length should be less than or equal to two times the "
                           f"input dimension but got padding length {len(pad)} and input of "
                           f"dimension {input.ndim}")
    if mode == "constant":
        return ShapeOps.ConstantPad.apply(input, pad=pad, value=0.0 if value is None else value)
    if value is not None and value != 0:
        raise RuntimeError(f"Padding mode \"{mode}\" doesn't take in value argument")
    if mode not in PadOps.MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if k not in (1, 2, 3) or input.ndim not in (k + 1, k + 2):
        raise NotImplementedError(
            f"Padding size {len(pad)} is not supported for {input.ndim}D input tensor.\n"
            "Supported combinations for non-constant padding:\n"
            "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
            "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
            "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")
    indices = []
    for i in range(k):  # dims in order, their pads from the end of ``pad``
        dim = input.ndim - k + i
        before, after = pad[2 * (k - 1 - i)], pad[2 * (k - 1 - i) + 1]
        n = input.shape[dim]
        if mode == "reflect" and (before >= n or after >= n):
            raise RuntimeError("Padding size should be less than the corresponding input "
                               f"dimension, but got: padding ({before}, {after}) at dimension "
                               f"{dim} of input {list(input.shape)}")
        if mode == "circular" and (before > n or after > n):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        indices.append(PadOps.source_index(n, before, after, mode))
    if (mode, k) in _PADS_IN_FLOAT32:
        return _pad_in_float32(PadOps.OPS[mode, k], input, tuple(indices))
    return PadOps.OPS[mode, k].apply(input, indices=tuple(indices))


# the pads torch's CPU autocast runs in float32 (reflection 1-d and 2-d, replication 1-3-d)
_PADS_IN_FLOAT32 = {("reflect", 1), ("reflect", 2), ("replicate", 1), ("replicate", 2),
                    ("replicate", 3)}


@cpu_policy.covered(cpu_policy.FP32)
def _pad_in_float32(op, input: Tensor, indices: tuple) -> Tensor:
    return op.apply(input, indices=indices)


# ---- pooling --------------------------------------------------------------------------------

def _pool_arg(value, name: str, fn: str, default=None) -> tuple:
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0 and default):
        return default
    values = _ntuple(value, 2)
    if len(values) == 1:
        values = values * 2
    if len(values) != 2:
        what = {"kernel_size": "must either be a single int, or a tuple of two ints",
                "stride": "must either be omitted, a single int, or a tuple of two ints",
                "padding": "must either be a single int, or a tuple of two ints",
                "dilation": "must be either a single int, or a tuple of two ints"}[name]
        raise RuntimeError(f"{fn}: {name} {what}")
    return tuple(int(v) for v in values)


def _pool_geometry(input: Tensor, fn: str, kernel_size, stride, padding, dilation,
                   ceil_mode: bool) -> tuple:
    """Checks of a 2-d pooling's arguments and input, in torch's order; the output size."""
    kernel = _pool_arg(kernel_size, "kernel_size", fn)
    stride = _pool_arg(stride, "stride", fn, default=kernel)
    padding = _pool_arg(padding, "padding", fn)
    dilation = _pool_arg(dilation, "dilation", fn)
    if any(k <= 0 for k in kernel) and all(s != 0 for s in stride):
        raise RuntimeError(f"kernel size should be greater than zero, but got kH: {kernel[0]} "
                           f"kW: {kernel[1]}")
    if any(s == 0 for s in stride):
        raise RuntimeError("stride should not be zero")
    if any(d <= 0 for d in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got dilationH: "
                           f"{dilation[0]} dilationW: {dilation[1]}")
    for p in padding:
        if p < 0:
            raise RuntimeError(f"pad must be non-negative, but got pad: {p}")
    for k, p, d in zip(kernel, padding, dilation):
        if p > (d * (k - 1) + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got "
                               f"pad={p}, kernel_size={k} and dilation={d}")
    spatial = tuple(input.shape[-2:])
    out = tuple(PoolOps.pool_output_size(n, k, s, p, d, ceil_mode)
                for n, k, s, p, d in zip(spatial, kernel, stride, padding, dilation))
    if any(o < 1 for o in out):
        c = input.shape[-3]
        raise RuntimeError(f"Given input size: ({c}x{spatial[0]}x{spatial[1]}). Calculated "
                           f"output size: ({c}x{out[0]}x{out[1]}). Output size is too small")
    return kernel, stride, padding, dilation, out


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    """Max over each window of the last two dims; with ``return_indices`` also the flat
    index (into H*W) of each maximum."""
    if input.ndim not in (3, 4) or 0 in input.shape[1:]:
        raise RuntimeError("non-empty 3D or 4D (batch mode) tensor expected for input")
    geometry = _pool_geometry(input, "max_pool2d", kernel_size, stride, padding, dilation,
                              ceil_mode)
    return _max_pool(PoolOps.MaxPool2d, input, geometry, return_indices)


def _max_pool(op, input: Tensor, geometry: tuple, return_indices: bool):
    """Run a max-pooling op; the indices it returns carry no history."""
    kernel, stride, padding, dilation, out = geometry
    params = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation,
              "out": out}
    if not return_indices:
        return op.apply(input, **params)
    values, indices = op.apply(input, **params, return_indices=True)
    return values, Tensor._make(indices._data, None, 0)


def max_pool1d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    """Max pooling of the last dim, as torch does it: 2-d pooling of a height-1 view."""
    if input.ndim not in (2, 3):
        raise RuntimeError("max_pool1d: Expected 2D or 3D (batch mode) tensor with optional 0 "
                           f"dim batch size for input, but got:{list(input.shape)}")
    k = _pool1d_arg(kernel_size)
    s = _pool1d_arg(stride) if stride not in (None, [], ()) else k
    p, d = _pool1d_arg(padding), _pool1d_arg(dilation)
    if k > 0 and s > 0 and d > 0 and 0 <= p <= (d * (k - 1) + 1) // 2:
        o = PoolOps.pool_output_size(input.shape[-1], k, s, p, d, ceil_mode)
        if o < 1:
            raise RuntimeError(f"max_pool1d() Invalid computed output size: {o}")
    result = max_pool2d(input.unsqueeze(-2), (1, k), (1, s), (0, p), (1, d), ceil_mode,
                        return_indices)
    if return_indices:
        return result[0].squeeze(-2), result[1].squeeze(-2)
    return result.squeeze(-2)


def _pool1d_arg(value) -> int:
    values = _ntuple(value, 1)
    if len(values) != 1:
        raise RuntimeError("pool1d: arguments must be a single int or a tuple of one int")
    return int(values[0])


def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """Mean over each window of the last two dims (padding counts as zeros unless
    ``count_include_pad=False``; ``divisor_override`` replaces the window size)."""
    if input.ndim < 3:
        input.size(-3)  # IndexError, worded by the tensor, as in torch
    if input.ndim != 4 and input.ndim != 3 or 0 in input.shape[1:]:
        raise RuntimeError("Expected 3D or 4D (batch mode) tensor with optional 0 dim batch "
                           f"size for input, but got:{list(input.shape)}")
    kernel, stride, padding, _, out = _pool_geometry(
        input, "avg_pool2d", kernel_size, stride, padding, 1, ceil_mode)
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    divisor = PoolOps.avg_divisor(tuple(input.shape[-2:]), kernel, stride, padding, out,
                                  count_include_pad, divisor_override)
    return PoolOps.AvgPool2d.apply(input, kernel=kernel, stride=stride, padding=padding,
                                   out=out, divisor=divisor)


def avg_pool1d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """Mean pooling of the last dim: 2-d pooling of a height-1 view, as in torch."""
    if input.ndim not in (2, 3):
        raise RuntimeError(f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional "
                           "tensor for argument #1 'self' (while checking arguments for "
                           "avg_pool1d)")
    k = _pool1d_arg(kernel_size)
    s = _pool1d_arg(stride) if stride not in (None, [], ()) else k
    out = avg_pool2d(input.unsqueeze(-2), (1, k), (1, s), (0, _pool1d_arg(padding)),
                     ceil_mode, count_include_pad)
    return out.squeeze(-2)


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Average pooling to a fixed output size (``None`` keeps that dim's size)."""
    if input.ndim not in (3, 4):
        raise RuntimeError(
            f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got {list(input.shape)}")
    sizes = _ntuple(output_size, 2)
    if not isinstance(output_size, int) and len(input.shape) <= len(sizes):
        raise ValueError(f"Input dimension should be at least {len(sizes) + 1}")
    if len(sizes) != 2:
        raise RuntimeError("adaptive_avg_pool2d: output_size must be 2")
    sizes = tuple(n if s is None else int(s) for n, s in zip(input.shape[-2:], sizes))
    if 0 in input.shape[1:]:
        raise RuntimeError(
            "adaptive_avg_pool2d(): Expected input to have non-zero size for non-batch "
            f"dimensions, but input has sizes {list(input.shape)} with dimension "
            f"{list(input.shape).index(0, 1)} being empty")
    if sizes == (1, 1):
        return input.mean(dim=(-1, -2), keepdim=True)
    return PoolOps.AdaptiveAvgPool2d.apply(input, out=sizes)


def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    if input.ndim not in (2, 3):
        raise RuntimeError(f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional "
                           "tensor for argument #1 'self' (while checking arguments for "
                           "adaptive_avg_pool1d)")
    (size,) = _ntuple(output_size, 1)
    return adaptive_avg_pool2d(input.unsqueeze(-2), (1, size)).squeeze(-2)


# ---- normalisation --------------------------------------------------------------------------

def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each channel (dim 1) by the batch's statistics (``training``, which also
    moves the running ones by ``momentum``, the variance unbiased) or the running ones."""
    if training:
        per_channel = input.numel() // input.shape[1] if input.ndim > 1 else 1
        if per_channel == 1:
            raise ValueError("Expected more than 1 value per channel when training, got input "
                             f"size {input.shape}")
    c = input.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var),
                    ("weight", weight), ("bias", bias)):
        if t is not None and t.numel() != c:
            raise RuntimeError(f"{name} should contain {c} elements not {t.numel()}")
    if not training:
        for name, t in (("running_mean", running_mean), ("running_var", running_var)):
            if t is None:
                raise RuntimeError(f"{name} must be defined in evaluation mode")
    x = input._data
    axes = (0, *range(2, x.ndim))
    if training:
        mean, var = NormOps.moments(x, axes)
        mean, var = mean.reshape(c), var.reshape(c)
        n = x.size // c
        with grad_mode.no_grad():
            if running_mean is not None:
                running_mean.mul_(1 - momentum).add_(_like(mean * momentum, running_mean))
            if running_var is not None:
                unbiased = var * (n / (n - 1))
                running_var.mul_(1 - momentum).add_(_like(unbiased * momentum, running_var))
    else:
        mean, var = running_mean._data, running_var._data
    invstd = (1 / np.sqrt(var + eps)).astype(x.dtype, copy=False)
    return NormOps.NativeBatchNorm.apply(
        input, *NormOps.affine_operands(input, weight, bias),
        mean=mean.astype(x.dtype, copy=False), invstd=invstd, training=training, eps=eps,
        has_weight=weight is not None, has_bias=bias is not None)


def _like(array: np.ndarray, t: Tensor) -> Tensor:
    return Tensor._make(np.asarray(array, dtype=t._data.dtype), None, 0)


def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` dims of each sample."""
    shape = tuple(_ntuple(normalized_shape, 1))
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != shape:
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but "
                               f"got {name} of shape {list(t.shape)} and normalized_shape = "
                               f"{list(shape)}")
    n = len(shape)
    if input.ndim < n or tuple(input.shape[input.ndim - n:]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, shape))}], but got input of size"
                           f"{list(input.shape)}")
    return NormOps.NativeLayerNorm.apply(
        input, *NormOps.affine_operands(input, weight, bias), normalized_ndim=n, eps=eps,
        has_weight=weight is not None, has_bias=bias is not None)


# ---- embedding and dropout ------------------------------------------------------------------

def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` at the integer ``input``. With ``max_norm``, the rows looked up are
    first renormalised in place, as in torch."""
    if padding_idx is not None:
        if padding_idx > 0:
            if padding_idx >= weight.shape[0]:
                raise AssertionError("Padding_idx must be within num_embeddings")
        elif padding_idx < 0:
            if padding_idx < -weight.shape[0]:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx = weight.shape[0] + padding_idx
    if weight.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    if input._data.dtype.kind not in "iu":
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the "
                           "following scalar types: Long, Int; but got "
                           f"{input.dtype.legacy_type} instead (while checking arguments for "
                           "embedding)")
    indices = input._data
    if indices.size and (indices.min() < 0 or indices.max() >= weight.shape[0]):
        raise IndexError("index out of range in self")
    if max_norm is not None:
        _embedding_renorm(weight, indices, max_norm, norm_type)
    inference.refuse_saved_index(input, weight)
    return EmbeddingOps.Embedding.apply(weight, indices=indices.astype(np.int64, copy=False),
                                        padding_idx=padding_idx,
                                        scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


def _embedding_renorm(weight: Tensor, indices: np.ndarray, max_norm: float,
                      norm_type: float) -> None:
    rows = np.unique(indices)
    w = weight._data[rows]
    norms = np.linalg.norm(w, ord=norm_type, axis=1)
    over = norms > max_norm
    if over.any():
        scale = (max_norm / (norms[over] + 1e-7)).astype(w.dtype)
        with grad_mode.no_grad():
            weight[Tensor._make(rows[over], None, 0)] = _like(w[over] * scale[:, None], weight)


def dropout(input: Tensor, p: float = 0.5, training: bool = True,
            inplace: bool = False) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``, when
    ``training``; the mask comes from disthook's generator."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        mask = np.zeros(input.shape, dtype=input._data.dtype)
    else:
        keep = random.gen().random(input.shape) >= p
        mask = keep * np.asarray(1 / (1 - p), dtype=input._data.dtype)
    mask_t = _like(mask, input)
    return input.mul_(mask_t) if inplace else input * mask_t

# ---- losses --------------------------------------------------------------------------------
# Each checks its arguments in torch's order (so the first problem reported is torch's) and
# then runs one loss op, or composes ops where torch composes them.

def _legacy_reduction(size_average, reduce, reduction: str) -> str:
    """The old ``size_average`` / ``reduce`` flags, mapped to ``reduction`` as torch does."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    reduction = "none" if not reduce else "mean" if size_average else "sum"
    warnings.warn("size_average and reduce args will be deprecated, please use "
                  f"reduction='{reduction}' instead.", UserWarning, stacklevel=3)
    return reduction


def _reduction_arg(size_average, reduce, reduction: str) -> str:
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if reduction == "elementwise_mean":
        warnings.warn("reduction='elementwise_mean' is deprecated. Please use reduction='mean' "
                      "instead.", UserWarning, stacklevel=3)
        return "mean"
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _check_reduction(reduction: str) -> None:
    _reduction_arg(None, None, reduction)


def _warn_target_size(input: Tensor, target: Tensor) -> None:
    if target.shape != input.shape:
        warnings.warn(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}). This will likely lead to incorrect results due to "
            "broadcasting. Please ensure they have the same size.", UserWarning, stacklevel=3)


def _broadcast_pair(input: Tensor, target: Tensor) -> tuple:
    if target.shape == input.shape:
        return input, target
    check_broadcast(tuple(input.shape), tuple(target.shape))
    shape = np.broadcast_shapes(input.shape, target.shape)
    return input.expand(shape), target.expand(shape)


def _weighted(loss: Tensor, weight: Tensor, input: Tensor, reduction: str,
              mean_over_weight: bool = True) -> Tensor:
    """``loss * weight``, reduced; a mean divides by the sum of the weights (mse, l1) or by
    the number of elements (huber), as torch does for each."""
    if weight.shape != input.shape:
        raise ValueError("Weights and input must have the same size.")
    loss = loss * weight
    if reduction == "none":
        return loss
    if reduction == "sum" or not mean_over_weight:
        return loss.sum() if reduction == "sum" else loss.mean()
    return loss.sum() / weight.sum()


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


@cpu_policy.covered(cpu_policy.FP32)
def mse_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
             reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
    """Mean (or sum, or elementwise) squared error: one ``MseLossBackward0`` node."""
    _warn_target_size(input, target)
    reduction = _reduction_arg(size_average, reduce, reduction)
    x, y = _broadcast_pair(input, target)
    if weight is not None:
        return _weighted((x - y).pow(2), weight, input, reduction)
    x, y = binary_operands(x, y)
    return LossOps.MseLoss.apply(x, y, reduction=reduction)


@cpu_policy.covered(cpu_policy.FP32)
def l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
            reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
    """Mean (or sum, or elementwise) absolute error, as torch composes it: sub, abs, reduce."""
    _warn_target_size(input, target)
    reduction = _reduction_arg(size_average, reduce, reduction)
    x, y = _broadcast_pair(input, target)
    if weight is not None:
        return _weighted((x - y).abs(), weight, input, reduction)
    return _reduce((x - y).abs(), reduction)


@cpu_policy.covered(cpu_policy.FP32)
def smooth_l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
                   reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """Squared error below ``beta``, absolute error above; ``beta=0`` is ``l1_loss``."""
    _warn_target_size(input, target)
    reduction = _reduction_arg(size_average, reduce, reduction)
    x, y = _broadcast_pair(input, target)
    if beta == 0.0:
        return _reduce((x - y).abs(), reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    x, y = binary_operands(x, y)
    return LossOps.SmoothL1Loss.apply(x, y, reduction=reduction, beta=beta)


@cpu_policy.covered(cpu_policy.FP32)
def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Tensor | None = None) -> Tensor:
    """Squared error below ``delta``, ``delta``-scaled absolute error above."""
    _warn_target_size(input, target)
    _check_reduction(reduction)
    x, y = _broadcast_pair(input, target)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    x, y = binary_operands(x, y)
    if weight is not None:
        loss = LossOps.HuberLoss.apply(x, y, reduction="none", delta=delta)
        return _weighted(loss, weight, input, reduction, mean_over_weight=False)
    return LossOps.HuberLoss.apply(x, y, reduction=reduction, delta=delta)


def _constant_weight(weight: Tensor | None, fn: str, arg: str = "weight"):
    """The array of a class or element weight, which no gradient may flow into (torch)."""
    if weight is None:
        return None
    if weight.requires_grad and grad_mode.is_grad_enabled():
        raise RuntimeError(f"The function '{fn}' is not differentiable with respect to argument "
                           f"'{arg}'. This input cannot have requires_grad True.")
    return weight._data


@cpu_policy.covered(cpu_policy.FP32)
def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """BCE of probabilities ``input`` against ``target``; the logs are clamped at -100."""
    reduction = _reduction_arg(size_average, reduce, reduction)
    if target.shape != input.shape:
        raise ValueError(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}) is deprecated. Please ensure they have the same size.")
    if weight is not None:
        weight = weight.expand(_broadcast_to_target(target, weight))
    if target.dtype != input.dtype:
        raise RuntimeError(f"Found dtype {scalar_type_name(target.dtype)} but expected "
                           f"{scalar_type_name(input.dtype)}")
    if weight is not None and weight.shape != input.shape:
        raise RuntimeError(f"output with shape {list(input.shape)} doesn't match the "
                           f"broadcast shape {list(weight.shape)}")
    w = _constant_weight(weight, "binary_cross_entropy")
    return LossOps.BinaryCrossEntropy.apply(input, target, weight=w, reduction=reduction)


def _broadcast_to_target(target: Tensor, weight: Tensor) -> tuple:
    """``broadcast_shapes(target, weight)`` with the message torch's gives for ``weight``."""
    ts, ws = tuple(target.shape), tuple(weight.shape)
    for i in range(1, len(ws) + 1):
        if i <= len(ts) and ws[-i] not in (1, ts[-i]) and ts[-i] != 1:
            raise RuntimeError(
                f"Attempting to broadcast a dimension of length {ws[-i]} at -{i}! Mismatching "
                f"argument at index 1 had {weight.shape}; but expected shape should be "
                f"broadcastable to {list(ts)}")
    return np.broadcast_shapes(ts, ws)


@cpu_policy.covered(cpu_policy.FP32)
def binary_cross_entropy_with_logits(input: Tensor, target: Tensor,
                                     weight: Tensor | None = None, size_average=None,
                                     reduce=None, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """BCE of ``sigmoid(input)``, computed from the logits without overflow; ``pos_weight``
    scales the positive term per class."""
    reduction = _reduction_arg(size_average, reduce, reduction)
    if target.shape != input.shape:
        raise ValueError(
            f"Target size ({target.shape}) must be the same as input size ({input.shape})")
    if not target.is_floating_point():
        raise RuntimeError(f"result type {scalar_type_name(input.dtype)} can't be cast to the "
                           f"desired output type {scalar_type_name(target.dtype)}")
    shape = tuple(input.shape)
    if pos_weight is not None:
        check_broadcast(tuple(pos_weight.shape), shape)
    if weight is not None:
        check_broadcast(shape, tuple(weight.shape))
    for extra in (pos_weight, weight):
        if extra is not None and np.broadcast_shapes(shape, extra.shape) != shape:
            raise RuntimeError(f"output with shape {list(shape)} doesn't match the broadcast "
                               f"shape {list(np.broadcast_shapes(shape, extra.shape))}")
    fn = "binary_cross_entropy_with_logits"
    w = _constant_weight(weight, fn)
    pw = _constant_weight(pos_weight, fn, "pos_weight")
    x, y = binary_operands(input, target)
    return LossOps.BinaryCrossEntropyWithLogits.apply(x, y, weight=w, pos_weight=pw,
                                                      reduction=reduction)


@cpu_policy.covered(cpu_policy.FP32)
def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None,
             ignore_index: int = -100, reduce=None, reduction: str = "mean") -> Tensor:
    """Negative log likelihood of class indices ``target`` (any shape ``(N, d1, ...)``) under
    log-probabilities ``input`` (``(N, C, d1, ...)``); a weighted mean divides by the sum of
    the targets' weights."""
    reduction = _reduction_arg(size_average, reduce, reduction)
    return _nll_loss_nd(input, target, weight, reduction, ignore_index, fused=False)


@cpu_policy.covered(cpu_policy.FP32)
def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                  size_average=None, ignore_index: int = -100, reduce=None,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits ``input`` against class indices, or against class
    probabilities when ``target`` has the shape of ``input``."""
    reduction = _reduction_arg(size_average, reduce, reduction)
    if target.shape == input.shape:
        if not target.is_floating_point():
            raise RuntimeError("Expected floating point type for target with class "
                               f"probabilities, got {scalar_type_name(target.dtype)}")
        if ignore_index >= 0:
            raise RuntimeError("ignore_index is not supported for floating point target")
        _check_label_smoothing(label_smoothing)
        return _cross_entropy_with_probabilities(input, target, weight, reduction,
                                                 label_smoothing)
    if label_smoothing > 0.0:
        _check_label_smoothing(label_smoothing)
        return _cross_entropy_smoothed(input, target, weight, reduction, ignore_index,
                                       label_smoothing)
    return _nll_loss_nd(input, target, weight, reduction, ignore_index, fused=True)


def _check_label_smoothing(label_smoothing: float) -> None:
    if label_smoothing > 1.0:
        raise RuntimeError(
            f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing:g}")


def _nll_loss_nd(input: Tensor, target: Tensor, weight, reduction: str, ignore_index: int,
                 fused: bool) -> Tensor:
    """torch's ``nll_loss_nd``: 1-D and 2-D input go to the plain kernel, 4-D to the 2-D
    spatial one, other ranks are viewed as 4-D and back (so the graph has torch's nodes)."""
    if input.ndim < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {input.ndim})")
    target_batch = target.shape[0] if target.ndim else 0
    if input.ndim != 1 and input.shape[0] != target_batch:
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target "
                         f"batch_size ({target_batch}).")
    if fused and not input.is_floating_point():
        kernel = "log_softmax_lastdim_kernel_impl" if input.ndim <= 2 else "log_softmax_kernel_impl"
        raise NotImplementedError(
            f"\"{kernel}\" not implemented for '{scalar_type_name(input.dtype)}'")
    w = _constant_weight(weight, "nll_loss_forward")
    inference.refuse_saved_index(target, input)
    params = {"target": target._data, "weight": w, "reduction": reduction,
              "ignore_index": ignore_index}
    if input.ndim <= 2:
        op = LossOps.CrossEntropy if fused else LossOps.NllLoss
        return op.apply(input, **params)
    op = LossOps.CrossEntropy2D if fused else LossOps.NllLoss2D
    if input.ndim == 4:
        return op.apply(input, **params)
    n, c = input.shape[:2]
    out_size = (n, *input.shape[2:])
    if target.shape[1:] != input.shape[2:]:
        raise RuntimeError(f"Expected target size {list(out_size)}, got {list(target.shape)}")
    spatial = -1 if input.numel() else 0
    params["target"] = target._data.reshape(n, 1 if spatial else 0, spatial)
    out = op.apply(input.reshape(n, c, 1 if spatial else 0, spatial), **params)
    return out.reshape(out_size) if reduction == "none" else out


def _class_shape(input: Tensor, class_dim: int) -> tuple:
    """The shape that puts a per-class vector on ``class_dim`` of ``input``."""
    shape = [1] * input.ndim
    shape[class_dim] = input.shape[class_dim]
    return tuple(shape)


def _cross_entropy_smoothed(input: Tensor, target: Tensor, weight, reduction: str,
                            ignore_index: int, label_smoothing: float) -> Tensor:
    """``(1 - eps) * nll + eps / C * (sum over classes of -log p)``, composed as torch does."""
    class_dim = 1 if input.ndim > 1 else 0
    n_classes = input.shape[class_dim]
    log_probs = input.log_softmax(class_dim)
    nll = _nll_loss_nd(log_probs, target, weight, reduction, ignore_index, fused=False)
    ignored = target == ignore_index
    if weight is not None:
        smooth = -(log_probs * weight.reshape(_class_shape(input, class_dim))).sum(class_dim)
    else:
        smooth = -log_probs.sum(class_dim)
    smooth = smooth.masked_fill(ignored, 0.0)
    if reduction == "mean":
        kept = target._data[~ignored._data]
        total = weight._data[kept].sum() if weight is not None else kept.size
        smooth = smooth.sum() / Tensor._make(np.asarray(total, dtype=smooth._data.dtype), None, 0)
    elif reduction == "sum":
        smooth = smooth.sum()
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / n_classes)


def _cross_entropy_with_probabilities(input: Tensor, target: Tensor, weight, reduction: str,
                                      label_smoothing: float) -> Tensor:
    """``-sum(target * log_softmax(input))`` per sample; a mean divides by the number of
    samples (not by the weights)."""
    class_dim = 1 if input.ndim > 1 else 0
    n_classes = input.shape[class_dim] if input.ndim else 1
    if weight is not None and (weight.ndim != 1 or weight.numel() != n_classes):
        raise RuntimeError(
            f"cross_entropy: weight tensor should be defined either for all {n_classes} classes "
            f"or no classes but got weight tensor of shape: {list(weight.shape)}")
    log_probs = input.log_softmax(class_dim)
    if label_smoothing > 0.0:
        target = target * (1 - label_smoothing) + label_smoothing / n_classes
    if weight is not None:
        log_probs = log_probs * weight.reshape(_class_shape(input, class_dim))
    if reduction == "mean":
        if input.numel() == 0:
            return -(log_probs * target).sum() * math.nan
        total = -(log_probs * target).sum()
        count = Tensor._make(np.asarray(input.numel() / n_classes, total._data.dtype), None, 0)
        return LossOps.DivByCount.apply(total, count)
    if reduction == "sum":
        return -(log_probs * target).sum()
    return -(log_probs * target).sum(class_dim)


# ---- attention --------------------------------------------------------------------------------

@cpu_policy.covered(cpu_policy.LOWER)
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """``softmax(q @ k^T * scale + bias) @ v`` as torch's math path computes it: a boolean
    mask (or ``is_causal``'s lower triangle) marks the keys that may be attended, a float
    mask is added; a query with no key left attends to nothing (zeros, not NaN); dropout
    (disthook's generator) applies whenever ``dropout_p > 0``."""
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise RuntimeError(
            "Expected query, key, and value to all be  at least 2 dimensional, but got "
            f"query.dim: {query.ndim} key.dim: {key.ndim} and value.dim: {value.ndim} instead.")
    if not query.dtype == key.dtype == value.dtype:
        raise RuntimeError(
            "Expected query, key, and value to have the same dtype, but got query.dtype: "
            f"{c_type_name(query.dtype)} key.dtype: {c_type_name(key.dtype)} and value.dtype: "
            f"{c_type_name(value.dtype)} instead.")
    if attn_mask is not None and attn_mask.dtype != query.dtype and \
            attn_mask._data.dtype != np.bool_:
        raise RuntimeError(
            "Expected attn_mask dtype to be bool or float or to match query dtype, but got "
            f"attn_mask.dtype: {c_type_name(attn_mask.dtype)} and  query.dtype: "
            f"{c_type_name(query.dtype)} instead.")
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set "
                           "when is_causal=True")
    if dropout_p < 0.0 or dropout_p > 1.0:  # (a RuntimeError here, unlike F.dropout's)
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got "
                           f"{dropout_p}")
    if enable_gqa and key.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        groups = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(groups, dim=-3)
        value = value.repeat_interleave(groups, dim=-3)
    L, S = query.shape[-2], key.shape[-2]
    _check_batch2(query, key.shape[:-2], query.shape[-1], key.shape[-1])
    _check_batch2(query, value.shape[:-2], S, value.shape[-2])
    factor = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    weights = query @ key.transpose(-2, -1) * factor
    if is_causal:
        allowed = np.tril(np.ones((L, S), dtype=bool))
        weights = weights.masked_fill(Tensor._make(~allowed, None, 0), -math.inf)
    elif attn_mask is not None:
        if attn_mask._data.dtype == np.bool_:
            weights = weights.masked_fill(attn_mask.logical_not(), -math.inf)
        else:
            weights = weights + attn_mask
    if is_causal or attn_mask is not None:
        # a query whose every key is masked attends to nothing (torch's safe softmax)
        empty = np.isneginf(weights._data).all(axis=-1, keepdims=True)
        if empty.any():
            empty_t = Tensor._make(empty, None, 0)
            weights = weights.masked_fill(empty_t, 0.0).softmax(-1).masked_fill(empty_t, 0.0)
            return _attend(weights, value, dropout_p)
    return _attend(weights.softmax(-1), value, dropout_p)


def _attend(weights: Tensor, value: Tensor, dropout_p: float) -> Tensor:
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, training=True)
    return weights @ value


def _check_batch2(query: Tensor, batch: tuple, expected: int, got: int) -> None:
    """The shape error torch's batched product gives inside attention: the second operand's
    leading dim (keys' features, values' positions) must be ``expected``."""
    if tuple(batch) == tuple(query.shape[:-2]) and got != expected:
        n = int(np.prod(query.shape[:-2], dtype=np.int64))
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{n}, {expected}] but got: [{n}, {got}].")


# ---- resampling ---------------------------------------------------------------------------------

INTERPOLATE_MODES = ("nearest", "linear", "bilinear", "bicubic", "trilinear", "area",
                     "nearest-exact")
_LINEAR_MODES = {"linear": 1, "bilinear": 2, "trilinear": 3}


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resize the spatial dims (all after the first two) to ``size`` or by ``scale_factor``
    with 'nearest', 'nearest-exact', '(bi/tri)linear', 'bicubic' (``align_corners`` picks
    whether the corner pixels' centres or edges line up; ``antialias`` widens the bilinear
    or bicubic filter when shrinking) or 'area' (adaptive average pooling)."""
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating "
                             "modes: linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    dims = input.ndim - 2
    spatial = list(input.shape[2:])
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        sizes = list(size) if isinstance(size, (list, tuple)) else [size] * dims
        if len(sizes) != dims:
            raise ValueError(
                "Input and output must have the same number of spatial dimensions, but got "
                f"input with spatial dimensions of {spatial} and output size of {size}. Please "
                "provide input tensor in (N, C, d1, d2, ...,dK) format and output size in (o1, "
                "o2, ...,oK) format.")
        scales = [None] * dims
    elif scale_factor is not None:
        scales = (list(scale_factor) if isinstance(scale_factor, (list, tuple))
                  else [scale_factor] * dims)
        if len(scales) != dims:
            raise ValueError(
                "Input and scale_factor must have the same number of spatial dimensions, but "
                f"got input with spatial dimensions of {spatial} and scale_factor of shape "
                f"{scale_factor}. Please provide input tensor in (N, C, d1, d2, ...,dK) format "
                "and scale_factor in (s1, s2, ...,sK) format.")
        sizes = [math.floor(n * float(s)) for n, s in zip(spatial, scales)]
        if recompute_scale_factor:
            scales = [None] * dims
    else:
        raise ValueError("either size or scale_factor should be defined")
    if antialias and (mode not in ("bilinear", "bicubic") or dims != 2):
        raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos "
                         "modes and requires a 4-D tensor as input")
    linear_dims = _LINEAR_MODES.get(mode)
    if linear_dims is not None and dims != linear_dims and dims in (1, 2, 3):
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs "
                                  f"{linear_dims + 2}D input")
    if mode == "area" and dims in (1, 2, 3):
        pool = (adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d)[dims - 1]
        return pool(input, sizes[0] if dims == 1 else tuple(sizes))
    if dims not in (1, 2, 3) or mode not in ("nearest", "nearest-exact", *_LINEAR_MODES) \
            and not (mode == "bicubic" and dims == 2):
        raise NotImplementedError(
            f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) for "
            "the modes: nearest | linear | bilinear | bicubic | trilinear | lanczos | area | "
            f"nearest-exact (got {mode})")
    if any(n <= 0 for n in sizes) or any(n <= 0 for n in spatial):
        names = ("D", "H", "W")[3 - dims:]
        got_in = ", ".join(f"{k}: {n}" for k, n in zip(names, spatial))
        got_out = ", ".join(f"{k}: {n}" for k, n in zip(names, sizes))
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input "
                           f"({got_in}) output ({got_out})")
    if antialias:
        matrices = tuple(ResampleOps.antialias_matrix(n, o, s, align_corners,
                                                      cubic=mode == "bicubic")
                         for n, o, s in zip(spatial, sizes, scales))
        mode += "-aa"
    elif mode == "bicubic":
        matrices = tuple(ResampleOps.cubic_matrix(n, o, s, align_corners)
                         for n, o, s in zip(spatial, sizes, scales))
    elif linear_dims is not None:
        matrices = tuple(ResampleOps.linear_matrix(n, o, s, align_corners)
                         for n, o, s in zip(spatial, sizes, scales))
    else:
        matrices = tuple(ResampleOps.nearest_matrix(n, o, s, exact=mode == "nearest-exact")
                         for n, o, s in zip(spatial, sizes, scales))
    return ResampleOps.OPS[mode, dims].apply(input, matrices=matrices)


# ---- more activations ---------------------------------------------------------------------------

def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    if inplace:
        return input._inplace(E.EluInplace, alpha=alpha)
    return E.Elu.apply(input, alpha=alpha)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return E.Softplus.apply(input, beta=beta, threshold=threshold)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    return input._inplace(E.Mish) if inplace else E.Mish.apply(input)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    return input._inplace(E.Hardswish) if inplace else E.Hardswish.apply(input)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """``sum(x1 * x2) / (|x1| |x2|)`` along ``dim``, each norm at least ``eps``, after
    broadcasting the two, as torch computes it."""
    shape = np.broadcast_shapes(tuple(x1.shape), tuple(x2.shape))
    a, b = x1.expand(shape), x2.expand(shape)
    return ((a / _norm_at_least(a, dim, eps)) * (b / _norm_at_least(b, dim, eps))).sum(dim=dim)


def _norm_at_least(t: Tensor, dim: int, eps: float) -> Tensor:
    """``t``'s 2-norm along ``dim`` raised to ``eps``, the raise outside the graph (as torch
    clamps it under no_grad): the gradient is the norm's."""
    norm = t.norm(dim=dim, keepdim=True)
    return norm + (norm.detach().clamp_min(eps) - norm.detach())


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    r = int(upscale_factor)
    if input.ndim < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but "
                           f"got input with {input.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    c = input.shape[-3]
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)={c} "
                           f"is not divisible by {r * r}")
    return ShapeOps.PixelShuffle.apply(input, upscale_factor=r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    r = int(downscale_factor)
    if input.ndim < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but "
                           f"got input with {input.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    h, w = input.shape[-2:]
    if h % r:
        raise RuntimeError(f"pixel_unshuffle expects height to be divisible by "
                           f"downscale_factor, but input.size(-2)={h} is not divisible by {r}")
    if w % r:
        raise RuntimeError(f"pixel_unshuffle expects width to be divisible by "
                           f"downscale_factor, but input.size(-1)={w} is not divisible by {r}")
    return ShapeOps.PixelUnshuffle.apply(input, downscale_factor=r)


# ---- group and instance norm --------------------------------------------------------------------

def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise each sample over each group of ``C / num_groups`` channels."""
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received "
                           f"{input.ndim}")
    c = input.shape[1]
    if c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {list(input.shape)} and "
                           f"num_groups={num_groups}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.ndim != 1 or t.numel() != c):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of "
                               f"channels in input, but got {name} of shape {list(t.shape)} "
                               f"and input of shape {list(input.shape)}")
    return NormOps.NativeGroupNorm.apply(
        input, *NormOps.affine_operands(input, weight, bias), group=num_groups, eps=eps,
        has_weight=weight is not None, has_bias=bias is not None)


def instance_norm(input: Tensor, running_mean: Tensor | None = None,
                  running_var: Tensor | None = None, weight: Tensor | None = None,
                  bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each sample's channels over their spatial dims: batch norm of the input
    seen as one sample of ``N * C`` channels, as torch does it; running statistics (when
    given) move by the mean over the batch."""
    if use_input_stats:
        spatial = math.prod(input.shape[2:])
        if spatial == 1:
            raise ValueError(f"Expected more than 1 spatial element when training, got input "
                             f"size {input.shape}")
    n, c = input.shape[:2]
    rm = running_mean.repeat(n) if running_mean is not None else None
    rv = running_var.repeat(n) if running_var is not None else None
    w = weight.repeat(n) if weight is not None else None
    b = bias.repeat(n) if bias is not None else None
    shaped = input.reshape(1, n * c, *input.shape[2:])
    out = batch_norm(shaped, rm, rv, w, b, use_input_stats, momentum, eps)
    if use_input_stats:
        with grad_mode.no_grad():
            if running_mean is not None:
                running_mean.copy_(rm.reshape(n, c).mean(0))
            if running_var is not None:
                running_var.copy_(rv.reshape(n, c).mean(0))
    return out.reshape(input.shape)


# ---- transposed convolution ----------------------------------------------------------------------

@cpu_policy.covered(cpu_policy.LOWER)
def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups,
                           dilation, 1)


@cpu_policy.covered(cpu_policy.LOWER)
def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups,
                           dilation, 2)


@cpu_policy.covered(cpu_policy.LOWER)
def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups,
                           dilation, 3)


def _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation,
                    dims: int) -> Tensor:
    """The adjoint of a convolution with ``weight`` (``(C_in, C_out / groups, *kernel)``):
    each input element spreads the kernel into the output."""
    if input.ndim not in (dims + 1, dims + 2):
        raise RuntimeError(
            f"Expected {dims + 1}D (unbatched) or {dims + 2}D (batched) input to "
            f"conv_transpose{dims}d, but got input of size: {list(input.shape)}")
    batched = input.ndim == dims + 2
    x = input if batched else input.unsqueeze(0)
    stride, padding, output_padding, dilation = (
        _conv_arg(v, name, dims, dims) for v, name in (
            (stride, "stride"), (padding, "padding"), (output_padding, "output_padding"),
            (dilation, "dilation")))
    if x.shape[1] != weight.shape[0]:
        raise RuntimeError(
            f"Given transposed=1, weight of size {list(weight.shape)}, expected input"
            f"{list(x.shape)} to have {weight.shape[0]} channels, but got {x.shape[1]} channels "
            "instead")
    for op, s, d in zip(output_padding, stride, dilation):
        if op >= s and op >= d:
            raise RuntimeError("output padding must be smaller than either stride or dilation, "
                               f"but got output_padding: {op}, stride: {s}, dilation: {d}")
    if weight.dtype != x.dtype:
        raise RuntimeError(f"expected scalar type {scalar_type_name(x.dtype)} but found "
                           f"{scalar_type_name(weight.dtype)}")
    kernel = weight.shape[2:]
    spatial = [(n - 1) * s - 2 * p + d * (k - 1) + op + 1 for n, s, p, d, k, op in
               zip(x.shape[2:], stride, padding, dilation, kernel, output_padding)]
    out_shape = (x.shape[0], weight.shape[1] * groups, *spatial)
    spec = ConvOps.ConvSpec(stride, tuple((p, p) for p in padding), dilation, groups)
    out = ConvOps.conv_transpose(x, weight, bias, spec, out_shape)
    return out if batched else out.squeeze(0)


# ---- 3-d pooling ------------------------------------------------------------------------------------

def _pool3d_geometry(input: Tensor, fn: str, kernel_size, stride, padding, dilation,
                     ceil_mode: bool) -> tuple:
    if input.ndim not in (4, 5):
        raise RuntimeError(f"{fn}: Expected 4D or 5D tensor for input, but got: "
                           f"{list(input.shape)}")
    kernel = tuple(int(k) for k in _ntuple(kernel_size, 3))
    stride = kernel if stride in (None, [], ()) else tuple(int(s) for s in _ntuple(stride, 3))
    padding = tuple(int(p) for p in _ntuple(padding, 3))
    dilation = tuple(int(d) for d in _ntuple(dilation, 3))
    for name, values in (("kernel_size", kernel), ("stride", stride), ("padding", padding),
                         ("dilation", dilation)):
        if len(values) != 3:
            raise RuntimeError(f"{fn}: {name} must be a single int, or a tuple of three ints")
    for k, p, d in zip(kernel, padding, dilation):
        if p > (d * (k - 1) + 1) // 2:
            raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, "
                               f"but got padW = {padding[2]}, padH = {padding[1]}, padT = "
                               f"{padding[0]}, kW = {kernel[2]}, kH = {kernel[1]}, kT = "
                               f"{kernel[0]}")
    out = tuple(PoolOps.pool_output_size(n, k, s, p, d, ceil_mode) for n, k, s, p, d in
                zip(input.shape[-3:], kernel, stride, padding, dilation))
    if any(o < 1 for o in out):
        raise RuntimeError(f"Given input size: ({'x'.join(map(str, input.shape[-4:]))}). "
                           f"Calculated output size: ({input.shape[-4]}x"
                           f"{'x'.join(map(str, out))}). Output size is too small")
    return kernel, stride, padding, dilation, out


def max_pool3d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    """Max over each window of the last three dims."""
    geometry = _pool3d_geometry(input, "max_pool3d", kernel_size, stride, padding, dilation,
                                ceil_mode)
    return _max_pool(PoolOps.MaxPool3d, input, geometry, return_indices)


def avg_pool3d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """Mean over each window of the last three dims."""
    kernel, stride, padding, _, out = _pool3d_geometry(
        input, "avg_pool3d", kernel_size, stride, padding, 1, ceil_mode)
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    divisor = PoolOps.avg_divisor(tuple(input.shape[-3:]), kernel, stride, padding, out,
                                  count_include_pad, divisor_override)
    return PoolOps.AvgPool3d.apply(input, kernel=kernel, stride=stride, padding=padding,
                                   out=out, divisor=divisor)


# ---- max unpooling ------------------------------------------------------------------------------

def max_unpool1d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0,
                 output_size=None) -> Tensor:
    """The partial inverse of ``max_pool1d``: as torch, 2-d unpooling of a width-1 view."""
    size = _unpool_output_size(input, kernel_size, stride, padding, output_size, 1)
    return _max_unpool(UnpoolOps.MaxUnpool2d, input.unsqueeze(-1), indices.unsqueeze(-1),
                       (*size, 1)).squeeze(-1)


def max_unpool2d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0,
                 output_size=None) -> Tensor:
    """The partial inverse of ``max_pool2d``: each value at the flat position (into H*W)
    its index names, zeros elsewhere."""
    size = _unpool_output_size(input, kernel_size, stride, padding, output_size, 2)
    return _max_unpool(UnpoolOps.MaxUnpool2d, input, indices, size)


def max_unpool3d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0,
                 output_size=None) -> Tensor:
    """The partial inverse of ``max_pool3d`` (flat positions into D*H*W)."""
    size = _unpool_output_size(input, kernel_size, stride, padding, output_size, 3)
    stride = _ntuple(kernel_size if stride is None else stride, 3)
    return _max_unpool(UnpoolOps.MaxUnpool3d, input, indices, size, stride)


def _unpool_output_size(input: Tensor, kernel_size, stride, padding, output_size,
                        nd: int) -> tuple:
    """The pooled dims of the output: ``output_size`` (checked against the default, as
    torch), or what the pooling that made ``input`` started from without remainder."""
    kernel = _ntuple(kernel_size, nd)
    stride = kernel if stride is None else _ntuple(stride, nd)
    padding = _ntuple(padding, nd)
    default = [(input.shape[-nd + d] - 1) * stride[d] + kernel[d] - 2 * padding[d]
               for d in range(nd)]
    if output_size is None:
        size = default
    else:
        if len(output_size) == nd + 2:
            output_size = output_size[2:]
        if len(output_size) != nd:
            raise ValueError(f"output_size should be a sequence containing {nd} or {nd + 2} "
                             f"elements, but it has a length of '{len(output_size)}'")
        for d in range(nd):
            low, high = default[d] - stride[d], default[d] + stride[d]
            if not low < output_size[d] < high:
                raise ValueError(f'invalid output_size "{output_size}" (dim {d} must be '
                                 f'between {low} and {high})')
        size = list(output_size)
    for d in range(nd):
        if size[d] < 0:
            raise ValueError("max_unpooling: output_size must contain non-negative spatial "
                             f"dimensions, but got output_size[{d}]={size[d]}")
    return tuple(int(n) for n in size)


def _max_unpool(op, input: Tensor, indices: Tensor, size: tuple, stride=None) -> Tensor:
    """Run an unpooling op after torch's checks of its tensors, in torch's order."""
    nd = len(size)
    if indices._data.dtype != np.int64:
        but = "" if nd == 3 else f" but got: {scalar_type_name(indices.dtype)}"
        raise RuntimeError(f"elements in indices should be type int64{but}")
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"Input to max_unpooling{nd}d should be a {nd + 1}d or {nd + 2}d "
                           f"Tensor, but got a tensor with {input.ndim} dimensions.")
    if tuple(indices.shape) != tuple(input.shape):
        raise RuntimeError(f"Expected shape of indices to be same as that of the input tensor "
                           f"({list(input.shape)}) but got indices tensor with shape: "
                           f"{list(indices.shape)}")
    for i in range(1, input.ndim):
        if input.shape[i] == 0:
            raise RuntimeError(f"max_unpooling{nd}d_forward_out_cpu(): Expected input to have "
                               f"non-zero size for non-batch dimensions, but got "
                               f"{list(input.shape)} with dimension {i} being empty.")
    if stride is not None and any(s <= 0 for s in stride):
        raise RuntimeError(f"strides should be greater than zero, but got stride: "
                           f"{list(stride)}")
    if not input.is_floating_point():
        raise NotImplementedError(f'"max_unpool{nd}d" not implemented for '
                                  f"'{scalar_type_name(input.dtype)}'")
    return op.apply(input, indices=indices._data, output_size=size)


# ---- multi-head attention -------------------------------------------------------------------------

def _float_mask(mask: Tensor | None, name: str, like: Tensor) -> Tensor | None:
    """A boolean mask (True = masked out) as an additive float mask of ``like``'s dtype;
    a float mask is kept."""
    if mask is None:
        return None
    if mask._data.dtype == np.bool_:
        return Tensor._make(np.where(mask._data, -np.inf, 0.0).astype(like._data.dtype),
                            None, 0)
    if _dtype.kind(mask._data.dtype) != "f":
        raise AssertionError(f"only bool and floating types of {name} are supported")
    return mask


def multi_head_attention_forward(query: Tensor, key: Tensor, value: Tensor,
                                 embed_dim_to_check: int, num_heads: int, in_proj_weight,
                                 in_proj_bias, bias_k, bias_v, add_zero_attn: bool,
                                 dropout_p: float, out_proj_weight: Tensor, out_proj_bias,
                                 training: bool = True, key_padding_mask=None,
                                 need_weights: bool = True, attn_mask=None,
                                 use_separate_proj_weight: bool = False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights: bool = True,
                                 is_causal: bool = False) -> tuple:
    """Attention of ``num_heads`` heads over sequence-first input ``(L, N, E)`` (or ``(L, E)``
    unbatched), as torch computes it: project q, k, v; optionally append bias_k/bias_v and
    a zero key; masks (bool True = masked out, or float, added); softmax(q k^T / sqrt(d)),
    dropout when ``training``; the heads joined and projected. Returns (output, weights:
    averaged over heads when ``average_attn_weights``, or None unless ``need_weights``)."""
    if static_k is not None or static_v is not None:
        raise NotImplementedError("static_k / static_v are not supported by disthook")
    batched = query.ndim == 3
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]
    if embed_dim != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but "
                             f"got {embed_dim}")
    head_dim = embed_dim // num_heads
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                           "Transformer module method `generate_square_subsequent_mask` to "
                           "create this mask.")
    key_padding_mask = _float_mask(key_padding_mask, "key_padding_mask", query)
    causal_hint = is_causal and key_padding_mask is None and not need_weights
    attn_mask = None if causal_hint else _float_mask(attn_mask, "attn_mask", query)
    if attn_mask is not None:
        if attn_mask.ndim == 2:
            if tuple(attn_mask.shape) != (tgt_len, src_len):
                raise RuntimeError(f"The shape of the 2D attn_mask is {attn_mask.shape}, but "
                                   f"should be {(tgt_len, src_len)}.")
            attn_mask = attn_mask.unsqueeze(0)
        elif tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
            raise RuntimeError(f"The shape of the 3D attn_mask is {attn_mask.shape}, but "
                               f"should be {(bsz * num_heads, tgt_len, src_len)}.")

    # projections
    if use_separate_proj_weight:
        w_q, w_k, w_v = q_proj_weight, k_proj_weight, v_proj_weight
    else:
        w_q, w_k, w_v = in_proj_weight.chunk(3)
    b_q = b_k = b_v = None
    if in_proj_bias is not None:
        b_q, b_k, b_v = in_proj_bias.chunk(3)
    q, k, v = linear(query, w_q, b_q), linear(key, w_k, b_k), linear(value, w_v, b_v)
    if bias_k is not None and bias_v is not None:
        k = cat([k, bias_k.repeat(1, bsz, 1)], 0)
        v = cat([v, bias_v.repeat(1, bsz, 1)], 0)
        attn_mask = pad(attn_mask, (0, 1)) if attn_mask is not None else None
        key_padding_mask = (pad(key_padding_mask, (0, 1)) if key_padding_mask is not None
                            else None)

    # heads: (N * H, length, head_dim)
    q = q.reshape(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)
    k = k.reshape(k.shape[0], bsz * num_heads, head_dim).transpose(0, 1)
    v = v.reshape(v.shape[0], bsz * num_heads, head_dim).transpose(0, 1)
    if add_zero_attn:
        zeros = Tensor._make(np.zeros((bsz * num_heads, 1, head_dim), q._data.dtype), None, 0)
        k, v = cat([k, zeros], 1), cat([v, zeros], 1)
        attn_mask = pad(attn_mask, (0, 1)) if attn_mask is not None else None
        key_padding_mask = (pad(key_padding_mask, (0, 1)) if key_padding_mask is not None
                            else None)
    src_len = k.shape[1]
    if key_padding_mask is not None:
        kpm = key_padding_mask.reshape(bsz, 1, 1, src_len).expand(
            bsz, num_heads, 1, src_len).reshape(bsz * num_heads, 1, src_len)
        attn_mask = kpm if attn_mask is None else attn_mask + kpm
    if not training:
        dropout_p = 0.0

    if need_weights:
        weights = (q * math.sqrt(1.0 / head_dim)) @ k.transpose(-2, -1)
        if attn_mask is not None:
            weights = weights + attn_mask
        weights = weights.softmax(-1)
        if dropout_p > 0.0:
            weights = dropout(weights, p=dropout_p)
        out = weights @ v
    else:
        if attn_mask is not None:
            attn_mask = (attn_mask.unsqueeze(0) if attn_mask.shape[0] == 1
                         else attn_mask.reshape(bsz, num_heads, -1, src_len))
        out = scaled_dot_product_attention(
            q.reshape(bsz, num_heads, tgt_len, head_dim),
            k.reshape(bsz, num_heads, src_len, head_dim),
            v.reshape(bsz, num_heads, src_len, head_dim), attn_mask, dropout_p, causal_hint)
        out = out.reshape(bsz * num_heads, tgt_len, head_dim)
        weights = None
    out = out.transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
    out = linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, embed_dim)
    if weights is not None:
        weights = weights.reshape(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            weights = weights.mean(dim=1)
    if not batched:
        out = out.squeeze(1)
        weights = weights.squeeze(0) if weights is not None else None
    return out, weights


# ---- the families kept in modules of their own (they read the helpers above) ----------------

from disthook.nn._functional.activation import *
from disthook.nn._functional.dispatch import *
from disthook.nn._functional.dropout import *
from disthook.nn._functional.embedding import *
from disthook.nn._functional.linear import *
from disthook.nn._functional.loss import *
from disthook.nn._functional.normalization import *
from disthook.nn._functional.pooling import *
from disthook.nn._functional.rearrange import *
from disthook.nn._functional.sampling import *
