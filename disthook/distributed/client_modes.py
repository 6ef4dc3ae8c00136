"""The modes of the modules a published model keeps on its deployer's client (a dropout
between two placed parts, the root and the modules whose parts are on several workers,
whose forwards run there), for the clients attached to it.

The workers know only the modules they hold; these modes are the deployer's alone. So the
deployer sends them to every stage (a ``module_op`` "client_modes": path -> training),
whenever one changes: ``train()``/``eval()`` of the model, or of such a module (each gets a
``HerePlacement`` when the model is published), ``module.training = ...``, or anything
else that changed one before the deployer's next call. A stage counts it in its form
(``workers/form.py``), and an attached client whose model's forward runs on its client asks
the first stage for its form before each call, so that a client-side module that runs
before any placed part computes in the deployer's mode in that very call
(``shared_form.check``)."""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from disthook.nn.modules.module import Module, Placement
from disthook.service.values import pack

if TYPE_CHECKING:
    from disthook.distributed.deployment import Deployment

__all__ = ["HerePlacement", "install", "modes", "publish"]


def modes(dep: Deployment) -> dict[str, bool]:
    """path -> training of every module of the model that is not on a worker (the root's
    the stages know: ``train()`` of the model sets theirs)."""
    layout = dep._layout
    return {path: m.training for path, m in dep._local.named_modules()
            if path and layout.stage_of(path) is None}


def publish(dep: Deployment) -> None:
    """Send the client-side modes to every stage where they changed since last sent (a
    published deployer's only; one request per stage)."""
    if not dep.__dict__.get("_published") or dep.__dict__.get("_modes_held", 0):
        return
    now = modes(dep)
    if not now or now == dep.__dict__.get("_modes_sent"):
        return
    dep.__dict__["_modes_sent"] = now
    dep._hub.request_all([(a, {"path": "", "op": "client_modes", "name": "modes",
                               "value": pack(now)}) for a in dict.fromkeys(dep._addresses)],
                         "module_op", what="the client-side modules' modes")


@contextlib.contextmanager
def held(dep: Deployment):
    """Changes made meanwhile are sent once, at the end."""
    dep.__dict__["_modes_held"] = dep.__dict__.get("_modes_held", 0) + 1
    try:
        yield
    finally:
        dep.__dict__["_modes_held"] -= 1
    publish(dep)


def install(dep: Deployment) -> None:
    """Give the client-side modules of a published model (the root aside: it has its own
    placement) a ``HerePlacement``, and send their modes."""
    for path, module in dep._local.named_modules():
        if path and dep._layout.stage_of(path) is None and "_placement" not in module.__dict__:
            module.__dict__["_placement"] = HerePlacement(dep).own(module)
    publish(dep)


def uninstall(dep: Deployment) -> None:
    for module in dep._local.modules():
        if isinstance(module.__dict__.get("_placement"), HerePlacement):
            del module.__dict__["_placement"]


class HerePlacement(Placement):
    """A module of a published model that lives on its deployer's client: everything runs
    here as for any module; a change of its mode is also sent to the stages."""

    def __init__(self, dep: Deployment):
        self.deployment = dep

    def forward_for(self, module: Module, args: tuple = (), kwargs: dict | None = None):
        return module.forward

    def set_attr(self, module: Module, name: str, value) -> bool:
        if name != "training":
            return False
        module.__dict__["training"] = value
        publish(self.deployment)
        return True

    def train(self, module: Module, mode: bool) -> None:
        with held(self.deployment):
            module.__dict__["training"] = mode
            for child in module.children():
                child.train(mode)

    def register_buffer(self, module: Module, name: str, tensor, persistent: bool) -> None:
        Module.register_buffer(_plain(module), name, tensor, persistent)

    def apply(self, module: Module, fn) -> None:
        for child in module.children():
            child._apply(fn)
        plain = _plain(module)
        plain.__dict__["_modules"] = {}
        Module._apply(plain, fn)

    def save_state(self, module: Module, destination, prefix: str, keep_vars: bool) -> None:
        Module._save_to_state_dict(_plain(module), destination, prefix, keep_vars)

    def load_state(self, module: Module, state_dict, prefix: str, local_metadata,
                   missing_keys: list, unexpected_keys: list, error_msgs: list,
                   strict: bool) -> None:
        plain = _plain(module)
        plain.__dict__["_load_state_dict_pre_hooks"] = {}  # they ran already
        Module._load_from_state_dict(plain, state_dict, prefix, local_metadata, strict,
                                     missing_keys, unexpected_keys, error_msgs)

    def __deepcopy__(self, memo):
        return None

    def __reduce__(self):
        return (type(None), ())


def _plain(module: Module) -> Module:
    from disthook.distributed.placed import _without_placement

    return _without_placement(module)
