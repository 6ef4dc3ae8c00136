"""The layers of ``disthook.nn``, one file per family, as in ``torch.nn.modules``."""
from disthook.nn.modules.activation import ReLU, Sigmoid, Tanh
from disthook.nn.modules.container import ModuleList, Sequential
from disthook.nn.modules.linear import Identity, Linear
from disthook.nn.modules.loss import L1Loss, MSELoss
from disthook.nn.modules.module import Module

__all__ = [
           "Identity",
           "L1Loss",
           "Linear",
           "MSELoss",
           "Module",
           "ModuleList",
           "ReLU",
           "Sequential",
           "Sigmoid",
           "Tanh",
]
