"""``torch.nn.parallel``: stand-ins for a CPU-only engine.

``DataParallel`` replicates a module over GPUs; with none (always, in disthook) torch
itself just calls the module, and so does this one. ``DistributedDataParallel`` needs
torch.distributed's process groups, which disthook does not have: constructing it raises
and says so (disthook spreads one model over processes by stages instead: see
``disthook.distributed``).
"""
from __future__ import annotations

from disthook.nn.modules.module import Module
from disthook.nn.parallel.scatter_gather import gather, scatter

__all__ = ["DataParallel", "DistributedDataParallel", "data_parallel", "gather", "scatter"]

DDP_MSG = (
    "DistributedDataParallel is not supported by disthook: it needs torch.distributed process "
    "groups and replicas on several devices, and disthook runs one CPU process per stage. To "
    "spread a model over processes use disthook.distributed (pipeline stages); in one process "
    "use the module itself."
)


class DataParallel(Module):
    """Holds ``module`` and runs it as is: there are no devices to scatter over."""

    def __init__(self, module: Module, device_ids=None, output_device=None,
                 dim: int = 0) -> None:
        super().__init__()
        # as torch on a machine without GPUs: device_ids are ignored, nothing is replicated
        self.module = module
        self.device_ids: list = []
        self.output_device = output_device
        self.dim = dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


def data_parallel(module, inputs, device_ids=None, output_device=None, dim: int = 0,
                  module_kwargs=None):
    """``module(*inputs)``: the functional DataParallel, with no devices to use."""
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    return DataParallel(module, device_ids, output_device, dim)(*inputs,
                                                              **(module_kwargs or {}))


class DistributedDataParallel(Module):
    def __init__(self, module: Module, *args, **kwargs) -> None:
        raise RuntimeError(DDP_MSG)
