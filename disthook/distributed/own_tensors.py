"""A placed part's own parameters and buffers, watched for writes that bypass its methods.

Library code edits a module's dicts directly: ``module._parameters["weight"] = Parameter(..)``
(tying, pruning and quantization tools), ``module._parameters["bias"] = None``,
``module._buffers["running_mean"] = t``, ``module._buffers.pop("total_ops")`` (thop). The
worker's copy would not see such a write, and the part would compute with what it was
deployed with. So a placed part's ``_parameters`` and ``_buffers`` are ``OwnTensors``: a tensor
put there that is not the one its worker holds makes the part's forward run here, with that
tensor, as ``setattr`` does (``PartPlacement.set_attr``); putting the deployed one back undoes
it. A buffer removed from the dict is removed on the worker too, as ``del module.name`` does.
What the deployment itself writes there (a buffer registered or deleted through the module)
goes through ``set_deployed``, which changes what the worker holds without a mark.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from disthook.distributed.placed import PartPlacement

__all__ = ["OwnTensors", "set_deployed", "watch_writes"]

GONE = object()  # set_deployed's value for a name the worker's copy no longer has


class OwnTensors(dict):
    """``kind`` ("parameters" or "buffers") of a placed part; ``deployed``: what its worker's
    copy holds by name (the same objects, placed)."""

    def __init__(self, tensors: dict, placement: PartPlacement, kind: str):
        super().__init__(tensors)
        self.deployed, self.placement, self.kind = dict(tensors), placement, kind

    def __reduce__(self):  # a copy or a pickle of the module holds a plain dict
        return (dict, (dict(self),))

    def _changed(self) -> None:
        if self.kind == "buffers":  # removed here: removed there (del module.name's way)
            for name in [n for n in self.deployed if n not in self]:
                self.placement._module_op("del_attr", name)
                del self.deployed[name]
        differs = self.keys() != self.deployed.keys() or any(
            t is not self.deployed[n] for n, t in self.items())
        self.placement._mark(f"its {self.kind} (written in its dict)", differs)


def watch_writes(cls: type) -> type:
    """``cls``, a dict class, calls its ``_changed()`` after every write of its items."""
    def noting(method):
        def changed(self, *args, **kwargs):
            out = method(self, *args, **kwargs)
            self._changed()
            return out

        changed.__name__ = method.__name__
        return changed

    for name in ("__setitem__", "__delitem__", "pop", "popitem", "clear", "update",
                 "setdefault"):
        setattr(cls, name, noting(getattr(dict, name)))
    return cls


watch_writes(OwnTensors)


def set_deployed(table: dict, name: str, value=GONE) -> None:
    """``table[name] = value`` (or its removal) where the worker's copy changed the same way:
    no mark, for the deployment's own writes."""
    if value is GONE:
        dict.pop(table, name, None)
    else:
        dict.__setitem__(table, name, value)
    if isinstance(table, OwnTensors):
        if value is GONE:
            table.deployed.pop(name, None)
        else:
            table.deployed[name] = value
