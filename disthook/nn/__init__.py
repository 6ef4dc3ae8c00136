"""Neural-network layers with PyTorch's module hooks (``torch.nn``)."""
from disthook.nn import functional, init, modules, utils
from disthook.nn.modules import *
from disthook.nn.parameter import Parameter

__all__ = ["Parameter", "functional", "init", "modules", "utils"]
__all__ += modules.__all__  # every layer, as torch.nn has them
