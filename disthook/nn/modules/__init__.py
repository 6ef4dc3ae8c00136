"""The layers of ``disthook.nn``, one file per family, as in ``torch.nn.modules``."""
from disthook.nn.modules.activation import (
    GELU,
    LeakyReLU,
    LogSoftmax,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from disthook.nn.modules.batchnorm import BatchNorm1d, BatchNorm2d
from disthook.nn.modules.container import ModuleDict, ModuleList, Sequential
from disthook.nn.modules.conv import Conv1d, Conv2d
from disthook.nn.modules.dropout import Dropout
from disthook.nn.modules.flatten import Flatten, Unflatten
from disthook.nn.modules.linear import Identity, Linear
from disthook.nn.modules.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from disthook.nn.modules.module import Module
from disthook.nn.modules.normalization import LayerNorm
from disthook.nn.modules.pooling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AvgPool1d,
    AvgPool2d,
    MaxPool1d,
    MaxPool2d,
)
from disthook.nn.modules.sparse import Embedding
from disthook.nn.modules.upsampling import Upsample

__all__ = [
    "GELU",
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AvgPool1d",
    "AvgPool2d",
    "BCELoss",
    "BCEWithLogitsLoss",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv1d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "Flatten",
    "HuberLoss",
    "Identity",
    "L1Loss",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "LogSoftmax",
    "MSELoss",
    "MaxPool1d",
    "MaxPool2d",
    "Module",
    "ModuleDict",
    "ModuleList",
    "NLLLoss",
    "ReLU",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "SmoothL1Loss",
    "Softmax",
    "Tanh",
    "Unflatten",
    "Upsample",
]
