"""``InstanceNorm1d`` and ``InstanceNorm2d``: each sample's channels normalised over their
own spatial dims; running statistics only with ``track_running_stats``."""
from __future__ import annotations

import warnings

from disthook.nn import functional as F
from disthook.nn.modules.batchnorm import _NormBase
from disthook.tensor import Tensor


class _InstanceNorm(_NormBase):
    """Built like batch norm (parameters, buffers, repr); torch's defaults differ: no affine
    parameters and no running statistics."""

    dims = 0  # spatial dims of a batched input

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = False, track_running_stats: bool = False, device=None,
                 dtype=None, *, bias: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs) -> None:
        """A state dict without a version (torch before 0.4) may hold running statistics an
        instance norm without ``track_running_stats`` has not: they are dropped, with an
        error that says why, as in torch."""
        stale = [prefix + name for name in ("running_mean", "running_var")
                 if prefix + name in state_dict]
        if local_metadata.get("version") is None and not self.track_running_stats and stale:
            klass = type(self).__name__
            error_msgs.append(
                "Unexpected running stats buffer(s) {} for {} with track_running_stats=False. "
                "If state_dict is a checkpoint saved before 0.4.0, this may be expected "
                "because {} does not track running stats by default since 0.4.0. Please "
                "remove these keys from state_dict. If the running stats are actually needed, "
                "instead set track_running_stats=True in {} to enable them. See the "
                "documentation of {} for details.".format(
                    " and ".join(f'"{k}"' for k in stale), klass, klass, klass, klass))
            for key in stale:
                state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)

    def forward(self, input: Tensor) -> Tensor:
        batched = self.dims + 2
        if input.ndim not in (batched - 1, batched):
            raise ValueError(f"expected {batched - 1}D or {batched}D input (got {input.ndim}D "
                             "input)")
        channel = 1 if input.ndim == batched else 0
        if input.shape[channel] != self.num_features:
            if self.affine:
                raise ValueError(
                    f"expected input's size at dim={channel} to match num_features "
                    f"({self.num_features}), but got: {input.shape[channel]}.")
            warnings.warn(
                f"input's size at dim={channel} does not match num_features. You can silence "
                "this warning by not passing in num_features, which is not used because "
                "affine=False", UserWarning, stacklevel=3)
        x = input if input.ndim == batched else input.unsqueeze(0)
        out = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                              self.training or not self.track_running_stats, self.momentum
                              if self.momentum is not None else 0.0, self.eps)
        return out if input.ndim == batched else out.squeeze(0)


class InstanceNorm1d(_InstanceNorm):
    """Over ``(N, C, L)`` or ``(C, L)`` input."""

    dims = 1


class InstanceNorm2d(_InstanceNorm):
    """Over ``(N, C, H, W)`` or ``(C, H, W)`` input."""

    dims = 2


class InstanceNorm3d(_InstanceNorm):
    """Over ``(N, C, D, H, W)`` or ``(C, D, H, W)`` input."""

    dims = 3
