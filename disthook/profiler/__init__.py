"""``torch.profiler``: only ``record_function`` (a region's label, with no effect while no
profiler records, which is always here); ``profile``, ``schedule`` and the rest refuse at use."""
from disthook.autograd.profiler import record_function

__all__ = ["record_function"]
