"""``torch.nn.utils``: gradient clipping, flattening parameters into one vector, weight and
spectral normalisation, BatchNorm fusion; ``rnn``, ``parametrize`` and ``parametrizations``
are submodules."""
from disthook.nn.utils.clip_grad import (
    clip_grad_norm,
    clip_grad_norm_,
    clip_grad_value_,
    clip_grads_with_norm_,
    get_total_norm,
)
from disthook.nn.utils.convert_parameters import parameters_to_vector, vector_to_parameters
from disthook.nn.utils.fusion import (
    fuse_conv_bn_eval,
    fuse_conv_bn_weights,
    fuse_linear_bn_eval,
    fuse_linear_bn_weights,
)
from disthook.nn.utils.init import skip_init
from disthook.nn.utils.spectral_norm import remove_spectral_norm, spectral_norm
from disthook.nn.utils.weight_norm import remove_weight_norm, weight_norm

__all__ = ["clip_grad_norm", "clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_",
           "fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval",
           "fuse_linear_bn_weights", "get_total_norm", "parameters_to_vector",
           "remove_spectral_norm", "remove_weight_norm", "skip_init", "spectral_norm",
           "vector_to_parameters", "weight_norm"]
