"""The layers of ``disthook.nn``, one file per family, as in ``torch.nn.modules``."""
from disthook.nn.modules.activation import (
    ELU,
    GELU,
    Hardswish,
    LeakyReLU,
    LogSoftmax,
    Mish,
    MultiheadAttention,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Tanh,
)
from disthook.nn.modules.batchnorm import BatchNorm1d, BatchNorm2d
from disthook.nn.modules.container import ModuleDict, ModuleList, Sequential
from disthook.nn.modules.conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from disthook.nn.modules.distance import CosineSimilarity
from disthook.nn.modules.dropout import Dropout
from disthook.nn.modules.flatten import Flatten, Unflatten
from disthook.nn.modules.instancenorm import InstanceNorm1d, InstanceNorm2d
from disthook.nn.modules.linear import (
    Identity,
    LazyLinear,
    Linear,
    NonDynamicallyQuantizableLinear,
)
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
from disthook.nn.modules.normalization import GroupNorm, LayerNorm
from disthook.nn.modules.pixelshuffle import PixelShuffle, PixelUnshuffle
from disthook.nn.modules.pooling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
)
from disthook.nn.modules.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from disthook.nn.modules.sparse import Embedding
from disthook.nn.modules.transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from disthook.nn.modules.upsampling import Upsample

__all__ = [
    "GELU",
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "BCELoss",
    "BCEWithLogitsLoss",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "CosineSimilarity",
    "CrossEntropyLoss",
    "Dropout",
    "ELU",
    "Embedding",
    "Flatten",
    "GRU",
    "GRUCell",
    "GroupNorm",
    "Hardswish",
    "HuberLoss",
    "Identity",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "L1Loss",
    "LSTM",
    "LSTMCell",
    "LayerNorm",
    "LazyLinear",
    "LeakyReLU",
    "Linear",
    "LogSoftmax",
    "MSELoss",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "Mish",
    "Module",
    "ModuleDict",
    "ModuleList",
    "MultiheadAttention",
    "NLLLoss",
    "NonDynamicallyQuantizableLinear",
    "PixelShuffle",
    "PixelUnshuffle",
    "RNN",
    "RNNBase",
    "RNNCell",
    "RNNCellBase",
    "ReLU",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "SmoothL1Loss",
    "Softmax",
    "Softplus",
    "Tanh",
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "Unflatten",
    "Upsample",
]
