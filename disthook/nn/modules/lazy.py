"""Lazy layers: their input size (``in_channels``, ``num_features``) is read from the first
input; then they allocate and initialise their parameters and become the ordinary layer (the
same parameter objects, now with their shapes), as torch's do."""
from __future__ import annotations

from disthook.nn.modules.batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d
from disthook.nn.modules.conv import (
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
)
from disthook.nn.modules.instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from disthook.nn.parameter import UninitializedBuffer, UninitializedParameter
from disthook.tensor import Tensor


class LazyModuleMixin:
    """The first call sizes the parameters from the input (``initialize_parameters``) and
    turns the module into ``cls_to_become``, whose forward runs it and every later call."""

    cls_to_become: type | None = None

    def has_uninitialized_params(self) -> bool:
        raise NotImplementedError

    def initialize_parameters(self, *args, **kwargs) -> None:
        raise NotImplementedError

    def _sizes_from_loaded(self) -> None:
        """Set the input size from parameters a state dict gave their shapes."""
        raise NotImplementedError

    def forward(self, *args, **kwargs):
        if self.has_uninitialized_params():
            self.initialize_parameters(*args, **kwargs)
        self.__dict__.pop("_factory", None)
        self.__class__ = self.cls_to_become
        return self.forward(*args, **kwargs)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs) -> None:
        """A state dict loaded before the first call gives the empty parameters and buffers
        its shapes (then its values), as torch's lazy modules take them."""
        if self.has_uninitialized_params():
            loaded = False
            for name, t in (*self._parameters.items(), *self._buffers.items()):
                key = prefix + name
                if isinstance(t, (UninitializedParameter, UninitializedBuffer)) and \
                        key in state_dict:
                    t.materialize(tuple(state_dict[key].shape))
                    loaded = True
            if loaded:
                self._sizes_from_loaded()
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)


def _size(t: Tensor | None, shape: tuple) -> None:
    """Give a placeholder parameter or buffer its shape (values set after)."""
    if isinstance(t, (UninitializedParameter, UninitializedBuffer)):
        t.materialize(shape)


def _placeholders(module, names: tuple, kind: type, factory: dict) -> None:
    """Replace the named empty parameters (or buffers) by uninitialised ones."""
    for name in names:
        if getattr(module, name, None) is not None:
            requires_grad = kind is UninitializedParameter
            setattr(module, name, kind(requires_grad=requires_grad, **factory))


# ---- convolutions ------------------------------------------------------------------------------

class _LazyConvMixin(LazyModuleMixin):
    def __init__(self, out_channels: int, kernel_size, stride=1, padding=0, *args,
                 device=None, dtype=None, **kwargs) -> None:
        self._factory = {"dtype": dtype, "device": device}
        # in_channels 0: the weight is empty until the first input says how many there are
        self.cls_to_become.__init__(self, 0, out_channels, kernel_size, stride, padding,
                                    *args, device=device, dtype=dtype, **kwargs)
        _placeholders(self, ("weight", "bias"), UninitializedParameter, self._factory)

    def reset_parameters(self) -> None:
        if self.in_channels:
            self.cls_to_become.reset_parameters(self)

    def has_uninitialized_params(self) -> bool:
        return self.in_channels == 0

    def _sizes_from_loaded(self) -> None:
        w = self.weight
        self.in_channels = w.shape[0] if self.transposed else w.shape[1] * self.groups

    def initialize_parameters(self, input: Tensor, *args, **kwargs) -> None:
        unbatched = input.ndim == self.dims + 1
        self.in_channels = input.shape[0 if unbatched else 1]
        if self.in_channels % self.groups:
            raise ValueError("in_channels must be divisible by groups")
        if self.transposed:
            shape = (self.in_channels, self.out_channels // self.groups, *self.kernel_size)
        else:
            shape = (self.out_channels, self.in_channels // self.groups, *self.kernel_size)
        _size(self.weight, shape)
        _size(self.bias, (self.out_channels,))
        self.reset_parameters()


class LazyConv1d(_LazyConvMixin, Conv1d):
    cls_to_become = Conv1d


class LazyConv2d(_LazyConvMixin, Conv2d):
    cls_to_become = Conv2d


class LazyConv3d(_LazyConvMixin, Conv3d):
    cls_to_become = Conv3d


class _LazyConvTransposeMixin(_LazyConvMixin):
    def __init__(self, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros",
                 device=None, dtype=None) -> None:
        super().__init__(out_channels, kernel_size, stride, padding, output_padding, groups,
                         bias, dilation, padding_mode, device=device, dtype=dtype)


class LazyConvTranspose1d(_LazyConvTransposeMixin, ConvTranspose1d):
    cls_to_become = ConvTranspose1d


class LazyConvTranspose2d(_LazyConvTransposeMixin, ConvTranspose2d):
    cls_to_become = ConvTranspose2d


class LazyConvTranspose3d(_LazyConvTransposeMixin, ConvTranspose3d):
    cls_to_become = ConvTranspose3d


# ---- normalisation -----------------------------------------------------------------------------

class _LazyNormMixin(LazyModuleMixin):
    def __init__(self, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None) -> None:
        self._factory = {"dtype": dtype, "device": device}
        self.cls_to_become.__init__(self, 0, eps, momentum, affine, track_running_stats,
                                    device, dtype)
        _placeholders(self, ("weight", "bias"), UninitializedParameter, self._factory)
        _placeholders(self, ("running_mean", "running_var"), UninitializedBuffer, self._factory)

    def reset_parameters(self) -> None:
        if self.num_features:
            self.cls_to_become.reset_parameters(self)

    def has_uninitialized_params(self) -> bool:
        return self.num_features == 0

    def _sizes_from_loaded(self) -> None:
        sized = self.weight if self.weight is not None else self.running_mean
        if sized is not None:
            self.num_features = sized.shape[0]

    def initialize_parameters(self, input: Tensor) -> None:
        batched = getattr(self, "dims", None)
        unbatched = batched is not None and input.ndim == batched + 1
        self.num_features = input.shape[0 if unbatched else 1]
        c = (self.num_features,)
        for t in (self.weight, self.bias, self.running_mean, self.running_var):
            _size(t, c)
        self.reset_parameters()


class LazyBatchNorm1d(_LazyNormMixin, BatchNorm1d):
    cls_to_become = BatchNorm1d


class LazyBatchNorm2d(_LazyNormMixin, BatchNorm2d):
    cls_to_become = BatchNorm2d


class LazyBatchNorm3d(_LazyNormMixin, BatchNorm3d):
    cls_to_become = BatchNorm3d


class LazyInstanceNorm1d(_LazyNormMixin, InstanceNorm1d):
    cls_to_become = InstanceNorm1d


class LazyInstanceNorm2d(_LazyNormMixin, InstanceNorm2d):
    cls_to_become = InstanceNorm2d


class LazyInstanceNorm3d(_LazyNormMixin, InstanceNorm3d):
    cls_to_become = InstanceNorm3d
