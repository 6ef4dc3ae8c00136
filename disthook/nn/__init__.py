"""Neural-network layers with PyTorch's module hooks (``torch.nn``)."""
from disthook.nn import (
           functional,
           init,
           modules,
           parallel,  # noqa: F401
           utils,
)
from disthook.nn.modules import *
from disthook.nn.modules.pooling import MaxUnpool1d, MaxUnpool2d, MaxUnpool3d
from disthook.nn.parallel import DataParallel
from disthook.nn.parameter import Buffer, Parameter

__all__ = ["Buffer", "DataParallel", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "Parameter",
           "functional", "init", "modules", "parallel", "utils"]
__all__ += modules.__all__  # every layer, as torch.nn has them
