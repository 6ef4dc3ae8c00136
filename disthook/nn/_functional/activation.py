"""Activations of ``nn.functional`` beyond relu / gelu / silu / elu: their functional and
in-place forms, each one op of ``disthook.ops.activation`` or a composition torch also uses."""
from __future__ import annotations

import warnings

import numpy as np

from disthook import random
from disthook.amp import cpu_policy
from disthook.ops import activation as A
from disthook.ops import elementwise as E
from disthook.tensor import Tensor

__all__ = [
    "celu", "celu_", "elu_", "glu", "gumbel_softmax", "hardshrink", "hardsigmoid", "hardtanh",
    "hardtanh_", "leaky_relu_", "logsigmoid", "prelu", "relu6", "relu_", "rrelu", "rrelu_",
    "selu", "selu_", "softmin", "softshrink", "softsign", "tanhshrink", "threshold",
    "threshold_",
]

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _apply(op, input: Tensor, inplace: bool, **params) -> Tensor:
    """``op`` on ``input``, or written into it (under torch's node of the in-place form)."""
    if inplace:
        return input._inplace(A.INPLACE.get(op, op), **params)
    return op.apply(input, **params)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    """``input`` clipped to ``[min_val, max_val]``."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _apply(A.Hardtanh, input, inplace, min_val=min_val, max_val=max_val)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """``min(max(0, x), 6)``: a hardtanh, as in torch."""
    return hardtanh(input, 0.0, 6.0, inplace)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``input`` where greater than ``threshold``, ``value`` elsewhere."""
    return _apply(A.Threshold, input, inplace, threshold=threshold, value=value)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:
    return _apply(A.Threshold, input, True, threshold=threshold, value=value)


def relu_(input: Tensor) -> Tensor:
    return input.relu_()


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return input._inplace(E.EluInplace, alpha=alpha)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    return input._inplace(A.LeakyReluInplace, negative_slope=negative_slope)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """``scale * elu(x, alpha)`` with the self-normalising constants."""
    return _apply(A.ScaledElu, input, inplace, alpha=SELU_ALPHA, scale=SELU_SCALE)


def selu_(input: Tensor) -> Tensor:
    return selu(input, inplace=True)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError")
    return _apply(A.Celu, input, inplace, alpha=alpha, input_scale=1.0 / alpha)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return celu(input, alpha, inplace=True)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    return _apply(A.Hardsigmoid, input, inplace)


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    return A.Hardshrink.apply(input, lambd=lambd)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    return A.Softshrink.apply(input, lambd=lambd)


def logsigmoid(input: Tensor) -> Tensor:
    return A.LogSigmoid.apply(input)


def softsign(input: Tensor) -> Tensor:
    """``x / (1 + |x|)``."""
    return input / (input.abs() + 1)


def tanhshrink(input: Tensor) -> Tensor:
    """``x - tanh(x)``."""
    return input - input.tanh()


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3,
            dtype=None) -> Tensor:
    """``softmax(-input)`` along ``dim``."""
    from disthook.nn.functional import _softmax_dim

    if dim is None:
        dim = _softmax_dim("softmin", input.ndim, _stacklevel)
    return (-input).softmax(dim, dtype=dtype)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """``a * sigmoid(b)``, ``a`` and ``b`` the halves of ``input`` along ``dim``."""
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    dim = dim + input.ndim if dim < 0 else dim
    if input.shape[dim] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim} is size "
                           f"{input.shape[dim]}")
    return A.Glu.apply(input, dim=dim)


@cpu_policy.covered(cpu_policy.LOWER)
def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """``x`` where positive, ``weight * x`` elsewhere, one slope per channel (dim 1)."""
    n = weight.numel()
    if n != 1:
        if input.ndim == 0:
            raise RuntimeError("Not allow zero-dim input tensor.")
        channels = input.shape[1] if input.ndim >= 2 else 1
        if weight.ndim > 1 or n != channels:
            raise RuntimeError(
                "Mismatch of parameter numbers and input channel size. Found parameter "
                f"numbers = {n} and channel size = {channels}.")
    if weight.dtype != input.dtype:
        weight = weight.to(input.dtype)
    return A.PreluKernel.apply(input, weight)


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3,
          training: bool = False, inplace: bool = False) -> Tensor:
    """Leaky ReLU whose negative slope is drawn uniformly from ``[lower, upper]`` for each
    element in training, and is their mean in eval."""
    if lower > upper:
        raise RuntimeError("Lower bound should be less than or equal to the upper bound")
    dtype = input._data.dtype
    if training:
        noise = random.gen().uniform(lower, upper, size=input.shape).astype(dtype)
        noise[input._data > 0] = 1  # (the noise torch returns holds 1 where x > 0)
    else:
        noise = np.asarray((lower + upper) / 2, dtype=dtype)
    return _apply(A.RreluWithNoise, input, inplace, noise=noise)


def rrelu_(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3,
           training: bool = False) -> Tensor:
    return rrelu(input, lower, upper, training, inplace=True)


def gumbel_softmax(logits: Tensor, tau: float = 1, hard: bool = False, eps: float = 1e-10,
                   dim: int = -1) -> Tensor:
    """A sample of the Gumbel-softmax distribution: ``softmax((logits + g) / tau)`` with
    ``g`` Gumbel noise from disthook's generator; ``hard`` returns the one-hot of its argmax
    with the soft sample's gradient (straight-through)."""
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", UserWarning,
                      stacklevel=2)
    exponential = random.gen().exponential(size=logits.shape).astype(logits._data.dtype)
    gumbels = logits.new_tensor(-np.log(exponential))
    soft = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return soft
    index = soft._data.argmax(axis=dim)
    hard_sample = np.zeros(soft.shape, dtype=soft._data.dtype)
    np.put_along_axis(hard_sample, np.expand_dims(index, dim), 1.0, axis=dim)
    return soft.new_tensor(hard_sample) - soft.detach() + soft
