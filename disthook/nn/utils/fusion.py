"""``torch.nn.utils`` fusion: fold an eval-mode BatchNorm into the convolution or linear
layer before it (``y = bn(conv(x))`` computed by one layer with new weights)."""
from __future__ import annotations

import copy

from disthook.nn.parameter import Parameter
from disthook.tensor import Tensor, ones_like, zeros_like

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval",
           "fuse_linear_bn_weights"]


def _bn_terms(bn_rm, bn_rv, bn_eps, bn_w, bn_b) -> tuple[Tensor, Tensor]:
    """(scale, shift) of an eval BatchNorm: ``bn(y) = (y - mean) * scale + shift``."""
    bn_w = ones_like(bn_rm) if bn_w is None else bn_w
    bn_b = zeros_like(bn_rm) if bn_b is None else bn_b
    return bn_w * (bn_rv + bn_eps).rsqrt(), bn_b


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b,
                         transpose: bool = False):
    """(weight, bias) of the convolution that computes ``bn(conv(x))``."""
    bias_dtype = conv_b.dtype if conv_b is not None else conv_w.dtype
    conv_b = zeros_like(bn_rm) if conv_b is None else conv_b
    scale, shift = _bn_terms(bn_rm, bn_rv, bn_eps, bn_w, bn_b)
    shape = ([1, -1] if transpose else [-1, 1]) + [1] * (conv_w.ndim - 2)
    fused_w = (conv_w * scale.reshape(shape)).to(conv_w.dtype)
    fused_b = ((conv_b - bn_rm) * scale + shift).to(bias_dtype)
    return Parameter(fused_w, conv_w.requires_grad), Parameter(fused_b, conv_b.requires_grad)


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    """(weight, bias) of the linear layer that computes ``bn(linear(x))``."""
    linear_b = zeros_like(bn_rm) if linear_b is None else linear_b
    scale, shift = _bn_terms(bn_rm, bn_rv, bn_eps, bn_w, bn_b)
    fused_w = linear_w * scale.unsqueeze(-1)
    fused_b = (linear_b - bn_rm) * scale + shift
    return Parameter(fused_w, linear_w.requires_grad), Parameter(fused_b, linear_b.requires_grad)


def _check_eval(layer, bn) -> None:
    if layer.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("BatchNorm must track running statistics to be fused")


def fuse_conv_bn_eval(conv, bn, transpose: bool = False):
    """A copy of ``conv`` (eval mode) computing ``bn(conv(x))``."""
    _check_eval(conv, bn)
    fused = copy.deepcopy(conv)
    fused.weight, fused.bias = fuse_conv_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias,
        transpose)
    return fused


def fuse_linear_bn_eval(linear, bn):
    """A copy of ``linear`` (eval mode) computing ``bn(linear(x))``."""
    _check_eval(linear, bn)
    if not (linear.out_features == bn.num_features or bn.num_features == 1):
        raise AssertionError("To fuse, linear.out_features == bn.num_features or "
                             "bn.num_features == 1")
    fused = copy.deepcopy(linear)
    fused.weight, fused.bias = fuse_linear_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias)
    return fused
