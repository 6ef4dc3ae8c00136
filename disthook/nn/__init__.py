"""Neural-network layers with PyTorch's module hooks (``torch.nn``)."""
from disthook.nn import functional, init
from disthook.nn.modules import (
    Identity,
    L1Loss,
    Linear,
    Module,
    ModuleList,
    MSELoss,
    ReLU,
    Sequential,
    Sigmoid,
    Tanh,
)
from disthook.nn.parameter import Parameter

__all__ = [
    "Identity",
    "L1Loss",
    "Linear",
    "MSELoss",
    "Module",
    "ModuleList",
    "Parameter",
    "ReLU",
    "Sequential",
    "Sigmoid",
    "Tanh",
    "functional",
    "init",
]
