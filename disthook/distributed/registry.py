"""Deployed models shared by name: the record a deployer publishes on the coordinator, and
the twin an attaching client makes from it.

``cluster.deploy(model, stages=N, name="gpt")`` publishes a record (``wire`` schema
``published_model``): the model id the workers know the deployment by, the root's class
path, the owner, where each stage is, how the tree is laid out, and the module tree's
*structure*: its spec (``spec.module_spec``) with every array replaced by its shape and
dtype. ``cluster.attach("gpt")`` looks the record up, makes a twin of the tree from that
structure (paths, shapes, dtypes and module classes, and the root's forward code when it
runs on the client) whose arrays are zero-memory, read-only placeholders, and binds a
``Deployment`` to the same model id and workers over sockets of its own. No weight crosses:
a published model holds none on the client (``check_publishable``), so the twin's are never
used to compute. The twin's classes must be importable here, or defined in this script.
"""
from __future__ import annotations

import sys
import time

import numpy as np

from disthook.distributed import client_modes, pinning, placed
from disthook.distributed.checkpoint import _structure, with_arrays
from disthook.distributed.parameters import RemoteStorage
from disthook.distributed.spec import SpecError, build_module
from disthook.service.rpc import ClusterError, RemoteError, RemoteTimeout

__all__ = ["NameTaken", "UnknownModel", "attach", "check_name", "check_publishable",
           "publish", "record", "structure", "twin"]

LEAVE_TIMEOUT_S = 2.0  # unpublish/detach on close: the coordinator may be gone by then


class NameTaken(ClusterError):
    """A deploy's ``name`` is published by another deployment that is live."""


class UnknownModel(KeyError):
    """No model is published under the name asked for; the message lists those that are."""

    def __str__(self) -> str:
        return str(self.args[0])


# ---- the record -----------------------------------------------------------------------------

def structure(module) -> dict:
    """The module tree's spec without weights: each tensor entry holds ``shape`` and ``dtype``
    instead of ``data`` (as a checkpoint's manifest describes its model)."""
    return _structure(module)


def check_publishable(remote) -> None:
    """A deployment that keeps parameters or buffers on the client cannot be shared: other
    clients would see neither them nor their changes. ``ValueError`` naming them."""
    held = [name for name, _ in remote._client_parameters()]
    held += [name for name, b in remote._local.named_buffers()
             if not isinstance(b, RemoteStorage)]
    if held:
        listed = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
        raise ValueError(
            f"cannot publish the deployed {remote._class_name}: it keeps {len(held)} "
            f"parameter(s) or buffer(s) on this client ({listed}), which clients attaching "
            "to it would not see; place every module that holds them on a worker "
            "(placement= naming their paths), then publish")


def record(remote, name: str, *, owner: str, writable: bool) -> dict:
    """The ``published_model`` record of a deployed model: its tree described as data, or,
    when its modules hold code, pickled by value (without its tensors' values)."""
    layout = remote._layout
    # a tree placement is always recorded (given or chosen); contiguous children have none
    kind = "whole" if remote._whole else "chain" if remote._placement_given is None else "tree"
    return {
        "name": name, "model": remote._model_id,
        "class": _class_path(type(remote._local)), "owner": owner, "created": time.time(),
        "writable": bool(writable),
        "workers": [{"stage": i, "worker": w.id, "address": w.address}
                    for i, w in enumerate(remote._workers)],
        "layout": {"kind": kind, "stages": [list(p) for p in remote._stage_names],
                   "split": list(layout.split), "client": list(layout.client),
                   "placement": remote._placement_given, "chunks": remote._chunks,
                   "schedule": remote._schedule},
        **_description(remote._local),
    }


def _description(module) -> dict:
    try:
        return {"structure": structure(module)}
    except SpecError:
        from disthook.distributed import shipping

        return {"structure": None, "code": shipping.dumps_structure(module)}


def _class_path(cls: type) -> str:
    from disthook.distributed.spec import class_path

    return class_path(cls)


def client_id(remote) -> str:
    """Who a deployment's (or an attachment's) client is, as it says: the identity of its
    sockets to the workers, in hex. With keys the coordinator names it by the key it
    authenticated with instead (the owner and clients ``models()`` lists)."""
    return remote._hub.reply_to


# ---- the twin -------------------------------------------------------------------------------

def twin(struct: dict, *, name: str = "", main=None):
    """The module tree a structure describes, each parameter and buffer a read-only,
    zero-memory placeholder of its shape and dtype (``np.broadcast_to`` of one zero).
    Classes of ``__main__`` are taken from ``main`` (default: this process's script)."""
    shapes: dict[str, tuple] = {}

    def small(full: str, shape: tuple, dtype) -> np.ndarray:
        shapes[full] = (shape, dtype)
        return np.zeros(0, dtype)  # built small, swapped below

    main = sys.modules.get("__main__") if main is None else main
    try:
        module = build_module(with_arrays(struct, small), main=main)
    except SpecError as exc:
        what = f"the model published as {name!r}" if name else "the published model"
        raise SpecError(
            f"cannot make a twin of {what} here: {exc}. An attaching client needs the "
            f"model's classes ({struct.get('class')} and those of its parts): import the "
            "module that defines them, or define them in this script under the same names"
        ) from None
    for full, tensor in [*module.named_parameters(remove_duplicate=False),
                         *module.named_buffers(remove_duplicate=False)]:
        if full in shapes:  # not a tied name (its tensor is the one of the first name)
            shape, dtype = shapes[full]
            tensor._data = np.broadcast_to(np.zeros((), dtype), shape)  # read-only, no memory
    return module


# ---- the coordinator's side of a deployment ------------------------------------------------

def check_name(cluster, name) -> None:
    """Before a deployment loads: ``name`` is a non-empty str that no live deployment holds
    (``NameTaken``, naming its owner). ``publish`` checks again, for a name taken meanwhile."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"deploy(name=...) takes a non-empty str, got {name!r}")
    for model in cluster.models(calls=False):
        if model["name"] == name and model["live"]:
            raise NameTaken(f"the name {name!r} is taken: {model['class']} (model "
                            f"{model['model']}) published by {model['owner']} is live; its "
                            "deployer's close() frees the name, or choose another")


def publish(cluster, remote, name: str, *, writable: bool) -> None:
    """Publish a deployed model under ``name`` on its cluster's coordinator."""
    check_publishable(remote)
    owner = client_id(remote)
    try:
        cluster._coordinator.request(
            "publish", {"record": record(remote, name, owner=owner, writable=writable)},
            timeout=cluster.timeout)
    except RemoteError as exc:
        if exc.kind == "PermissionError":
            raise NameTaken(exc.message) from None
        raise
    object.__setattr__(remote, "_published", name)
    pinning.share(remote)  # others may use it now: one version of its weights per forward
    client_modes.install(remote)  # its modules here: their modes go to the stages


def attach(cluster, name: str, *, trust_code: bool = False, owner: str | None = None):
    """A ``Deployment`` bound to the deployment published as ``name`` (see the module doc);
    ``trust_code``: run the deployer's code here if the model came as code; ``owner``: only
    if its deployer is that one (``models()``' ``owner``), checked on the record attached to,
    not on a listing read before (between the two its deployer may close it and another
    publish under the name)."""
    from disthook.distributed.deploy import attached_model

    if not isinstance(name, str):
        raise TypeError(f"attach() takes a model's name (a str), got {type(name).__name__}")
    try:
        found = cluster._coordinator.request("lookup", {"name": name},
                                             timeout=cluster.timeout)["result"]
    except RemoteError as exc:
        if exc.kind == "LookupError":
            raise UnknownModel(exc.message) from None
        raise
    if owner is not None and found["owner"] != owner:
        raise PermissionError(
            f"{name!r} is published by {found['owner']!r}, not {owner!r}: nothing was attached "
            f"(the name went to another deployer, or {owner!r} uses another); check "
            "models(), and attach by the name its owner publishes")
    alive = {w.id: w for w in cluster.workers() if w.alive}
    workers = []
    for stage in found["workers"]:
        if stage["worker"] not in alive:
            raise ClusterError(f"cannot attach to {name!r}: worker {stage['worker']}, holding "
                               f"stage {stage['stage']}, is not alive")
        workers.append(alive[stage["worker"]])
    module = twin(found["structure"], name=name) if found.get("structure") is not None \
        else _code_twin(found, name, trust_code)
    model = attached_model(cluster, module, workers, found)
    remote = placed.deployment_of(model)
    try:
        cluster._coordinator.request("attach", {"name": name, "model": found["model"],
                                                "client": client_id(remote)},
                                     timeout=cluster.timeout)
    except BaseException:
        remote.close()
        raise
    return model


def _code_twin(found: dict, name: str, trust_code: bool):
    """The twin of a model published as code: its tree unpickled (the deployer's code runs
    here), each parameter and buffer a read-only, zero-memory placeholder."""
    if not trust_code:
        raise PermissionError(
            f"the model published as {name!r} ({found['class']}) came with its deployer's code "
            "(its modules hold code, such as lambdas or bound methods), and attaching runs "
            f"that code here: attach({name!r}, trust_code=True) if you trust "
            f"{found['owner']!r}, who deployed it")
    from disthook.distributed import shipping

    return shipping.loads_structure(
        found["code"], lambda _, shape, dtype: np.broadcast_to(np.zeros((), dtype), shape))


def leave(remote) -> None:
    """On close: the deployer unpublishes its model, an attached client detaches. The
    coordinator also forgets both when their connection closes, so a failure here (the
    coordinator gone) is not an error."""
    cluster = remote._cluster
    if remote.__dict__.get("_published"):
        msg_type, fields = "unpublish", {"name": remote._published, "model": remote._model_id}
    elif remote.__dict__.get("_attached"):
        msg_type, fields = "detach", {"name": remote._attached, "model": remote._model_id,
                                      "client": client_id(remote)}
    else:
        return
    if cluster._closed:
        return  # the cluster is closing: its connection closes next, which says the same
    try:
        cluster._coordinator.request(msg_type, fields, timeout=LEAVE_TIMEOUT_S)
    except (RemoteTimeout, RemoteError, OSError):
        pass
