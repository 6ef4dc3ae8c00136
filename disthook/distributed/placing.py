"""Placing a model and bringing it back: ``place`` gives the model its ``RootPlacement``
and each module that lives on a worker its ``PartPlacement``, adopting their parameters and
buffers as storages there, and watches each placed module's children (``_Children``) for the
program's changes; ``unplace`` makes every placed tensor a local one again and takes the
placements away. The placements themselves are in ``placed``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from disthook.distributed import code_changes
from disthook.distributed.adopting import adopt, adopt_buffer, release
from disthook.distributed.own_tensors import OwnTensors, watch_writes
from disthook.distributed.parameters import RemoteBuffer, RemoteParameter, RemoteStorage
from disthook.distributed.placed import PartPlacement, RootPlacement
from disthook.nn.modules.module import Module
from disthook.tensor import Tensor

if TYPE_CHECKING:
    from disthook.distributed.deployment import Deployment
    from disthook.distributed.placed import _Placed

__all__ = ["place", "unplace"]


def place(dep: Deployment, root: Module) -> None:
    """Give ``root`` (the model) its ``RootPlacement`` and every module on a worker its
    ``PartPlacement``, their parameters and buffers storages there (``adopt``)."""
    placed = []
    for path, module in root.named_modules():
        if path == "" and not dep._whole:
            continue
        stage = dep._layout.stage_of(path) if path else 0
        if stage is None:
            continue
        placed.append((path, module))
        for name, p in list(module._parameters.items()):
            full = f"{path}.{name}" if path else name
            if p is not None and not isinstance(p, RemoteParameter):
                adopt(p, dep, dep._canonical.get(full, full))
        for name, b in list(module._buffers.items()):
            full = f"{path}.{name}" if path else name
            if b is not None and not isinstance(b, RemoteBuffer):
                adopt_buffer(b, dep, full)
    paths_of: dict[int, list[str]] = {}  # a module held twice (block.conv and block.net[0])
    for path, module in root.named_modules(remove_duplicate=False):
        paths_of.setdefault(id(module), []).append(path)
    for path, module in placed:
        if path:
            shared = {k for k in module.__dict__ if not k.startswith("_")}
            aliases = tuple(p for p in paths_of[id(module)] if p != path)
            placement = PartPlacement(dep, path, shared, aliases).own(module)
            module.__dict__["_placement"] = placement
            module.__dict__["_modules"] = _Children(module._modules, placement)
            for kind in ("parameters", "buffers"):
                key = f"_{kind}"
                module.__dict__[key] = OwnTensors(module.__dict__[key], placement, kind)
            for name in _recomputed_here(module):
                placement._mark(name, True)
    root.__dict__["_placement"] = RootPlacement(dep, "").own(root)
    root.__dict__["_modules"] = _Children(root._modules, root.__dict__["_placement"])
    dep.__dict__["_placed_modules"] = placed
    dep.__dict__["_synced"] = {}
    code_changes.snapshot(dep, placed if dep._whole else [("", root), *placed])


def _recomputed_here(module: Module) -> list[str]:
    """The names of ``module``'s tensors that a forward pre-hook of a reparametrization
    recomputes before each call (weight_norm, spectral_norm, pruning), or that hold a graph
    to its parameters: its forward runs here, where the graph of each call is made. So does
    the forward of a module holding a ``Generator`` (a sampler's own): it draws from the
    program's generator, which the program may reseed or read, not from a copy."""
    from disthook.nn.utils.prune import BasePruningMethod
    from disthook.nn.utils.spectral_norm import SpectralNorm
    from disthook.nn.utils.weight_norm import WeightNorm
    from disthook.random import Generator

    names = [getattr(h, "name", None) or getattr(h, "_tensor_name", None)
             for h in module._forward_pre_hooks.values()
             if isinstance(h, (BasePruningMethod, SpectralNorm, WeightNorm))]
    names += [k for k, v in module.__dict__.items()
              if (isinstance(v, Tensor) and v.grad_fn is not None) or isinstance(v, Generator)]
    return [n for n in dict.fromkeys(names) if n]


@watch_writes
class _Children(dict):
    """The children of a placed module, as deployed (``original``). A change here (a child
    assigned, deleted, added, reordered) is the program's: its placement hears of it
    (``children_changed``), and the module's forward runs here from then on, each child
    where it lives, as in one process; putting the deployed children back undoes that."""

    def __init__(self, children: dict, placement: _Placed):
        super().__init__(children)
        self.original, self.placement = dict(children), placement

    def __reduce__(self):
        return (dict, (dict(self),))

    def _changed(self) -> None:
        self.placement.children_changed(self)


def unplace(dep: Deployment, values: dict | None) -> None:
    """Bring the model back here: each placed tensor a local one holding ``values`` (its
    worker's last value by name); the placements go. With ``values`` None (the workers are
    gone), the placements stay, and every use says the deployment is closed."""
    root = dep._local
    if values is None:
        return
    for _, module in dep.__dict__.get("_placed_modules", ()):
        module.__dict__.pop("_placement", None)
        for key in ("_modules", "_parameters", "_buffers"):
            module.__dict__[key] = dict(module.__dict__[key])
        for t in (*module._parameters.values(), *module._buffers.values()):
            if isinstance(t, RemoteStorage) and t.__dict__.get("_model") is dep:
                if t._path not in values:  # a non-persistent buffer: asked by name
                    values[t._path] = dep._states(names=[t._path])["state"][t._path]
                release(t, values[t._path])
    root.__dict__.pop("_placement", None)
    root.__dict__["_modules"] = dict(root.__dict__["_modules"])
    dep.__dict__["_placed_modules"] = []
    from disthook.distributed import client_modes

    client_modes.uninstall(dep)
