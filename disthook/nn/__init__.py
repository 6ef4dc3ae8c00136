"""Neural-network layers with PyTorch's module hooks (``torch.nn``)."""
from disthook.nn import (
    common_types,
    functional,
    grad,
    init,
    modules,
    parallel,
    utils,
)
from disthook.nn.modules import *
from disthook.nn.modules.pooling import MaxUnpool1d, MaxUnpool2d, MaxUnpool3d
from disthook.nn.parallel import DataParallel
from disthook.nn.parameter import (
    Buffer,
    Parameter,
    UninitializedBuffer,
    UninitializedParameter,
)

__all__ = ["Buffer", "DataParallel", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "Parameter",
           "UninitializedBuffer", "UninitializedParameter", "common_types", "factory_kwargs",
           "functional", "grad", "init", "modules", "parallel", "utils"]
__all__ += modules.__all__  # every layer, as torch.nn has them


def factory_kwargs(kwargs: dict | None) -> dict:
    """The tensor-factory arguments (``device``, ``dtype``, ``memory_format``) among a
    layer's keyword arguments, merged with a ``factory_kwargs`` dict among them; a key given
    both ways, or any other key, is a TypeError (torch's helper for layer authors)."""
    if kwargs is None:
        return {}
    simple = {"device", "dtype", "memory_format"}
    unexpected = set(kwargs) - simple - {"factory_kwargs"}
    if unexpected:
        raise TypeError(f"unexpected kwargs {unexpected}")
    merged = dict(kwargs.get("factory_kwargs", {}))
    for key in simple & set(kwargs):
        if key in merged:
            raise TypeError(f"{key} specified twice, in **kwargs and in factory_kwargs")
        merged[key] = kwargs[key]
    return merged
