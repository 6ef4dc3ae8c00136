"""``torch.nn.functional``: layers and losses as functions, built from disthook ops.

``linear`` records the same graph torch does (``AddmmBackward0`` for 2-D input with bias,
``ViewBackward0`` around it otherwise), so a legacy module backward hook, which sees only
the last node of ``forward``, gets the same ``grad_input`` as under torch.
"""
from __future__ import annotations

import warnings

from disthook.nn import _linear_ops
from disthook.nn._loss_ops import REDUCTIONS, MseLoss
from disthook.ops import linalg as L
from disthook.ops.base import binary_operands
from disthook.tensor import Tensor

# ---- linear --------------------------------------------------------------------------------

def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias`` over the last dim of ``input``."""
    if input._data.dtype != weight._data.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                           f"{_c_name(input)} != {_c_name(weight)}")
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


def _c_name(t: Tensor) -> str:
    return {"float64": "double", "float32": "float", "float16": "c10::Half"}.get(
        t._data.dtype.name, t._data.dtype.name)


# ---- activations ---------------------------------------------------------------------------

def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return input.relu_() if inplace else input.relu()


def sigmoid(input: Tensor) -> Tensor:
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    return input.tanh()


def softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    return input.softmax(dim, dtype=dtype)


def log_softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    return input.log_softmax(dim, dtype=dtype)


# ---- losses --------------------------------------------------------------------------------

def _check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _broadcast_pair(input: Tensor, target: Tensor, stacklevel: int = 3) -> tuple:
    if target.shape != input.shape:
        warnings.warn(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}). This will likely lead to incorrect results due to "
            "broadcasting. Please ensure they have the same size.", UserWarning,
            stacklevel=stacklevel)
        from disthook import broadcast_tensors

        input, target = broadcast_tensors(input, target)
    return input, target


def mse_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
             reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
    """Mean (or sum, or elementwise) squared error: one ``MseLossBackward0`` node."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    input, target = _broadcast_pair(input, target)
    input, target = binary_operands(input, target)
    return MseLoss.apply(input, target, reduction=reduction)


def l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
            reduction: str = "mean") -> Tensor:
    """Mean (or sum, or elementwise) absolute error, as torch composes it: sub, abs, reduce."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    input, target = _broadcast_pair(input, target)
    loss = (input - target).abs()
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _legacy_reduction(size_average, reduce, reduction: str) -> str:
    """The old ``size_average`` / ``reduce`` flags, mapped to ``reduction`` as torch does."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"
