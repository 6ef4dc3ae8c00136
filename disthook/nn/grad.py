"""Gradients of a convolution with respect to its input and its weight, as functions
(``torch.nn.grad``): each is the vector-Jacobian product of the convolution, computed by the
engine's own backward of the same convolution."""
from __future__ import annotations

from disthook import autograd
from disthook.autograd import grad_mode
from disthook.nn import functional as F
from disthook.tensor import Tensor, zeros

__all__ = ["conv1d_input", "conv1d_weight", "conv2d_input", "conv2d_weight", "conv3d_input",
           "conv3d_weight"]

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _input_grad(dims: int, input_size, weight: Tensor, grad_output: Tensor, stride, padding,
                dilation, groups) -> Tensor:
    with grad_mode.enable_grad():
        x = zeros(tuple(input_size), dtype=grad_output.dtype, requires_grad=True)
        out = _CONV[dims](x, weight.detach(), None, stride, padding, dilation, groups)
        _check(out, grad_output)
        (grad,) = autograd.grad(out, x, grad_output)
    return grad


def _weight_grad(dims: int, input: Tensor, weight_size, grad_output: Tensor, stride, padding,
                 dilation, groups) -> Tensor:
    with grad_mode.enable_grad():
        w = zeros(tuple(weight_size), dtype=grad_output.dtype, requires_grad=True)
        out = _CONV[dims](input.detach(), w, None, stride, padding, dilation, groups)
        _check(out, grad_output)
        (grad,) = autograd.grad(out, w, grad_output)
    return grad


def _check(out: Tensor, grad_output: Tensor) -> None:
    if tuple(out.shape) != tuple(grad_output.shape):
        raise RuntimeError(f"grad_output of shape {list(grad_output.shape)} does not match the "
                           f"convolution's output shape {list(out.shape)}")


def conv1d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _input_grad(1, input_size, weight, grad_output, stride, padding, dilation, groups)


def conv1d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _weight_grad(1, input, weight_size, grad_output, stride, padding, dilation, groups)


def conv2d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _input_grad(2, input_size, weight, grad_output, stride, padding, dilation, groups)


def conv2d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _weight_grad(2, input, weight_size, grad_output, stride, padding, dilation, groups)


def conv3d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _input_grad(3, input_size, weight, grad_output, stride, padding, dilation, groups)


def conv3d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    return _weight_grad(3, input, weight_size, grad_output, stride, padding, dilation, groups)
