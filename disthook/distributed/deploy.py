"""Placing a model on workers, on the client: ``deploy`` (its stages: contiguous children
or parts over the module tree, each loaded on a worker) and ``attached_model`` (a model
rebuilt here, placed on a published deployment's stages). Both place the model in place
(``placed``) and keep its ``Deployment``. What runs where follows from the layout and the
model's class alone (see ``Deployment`` and ``placement.chains_its_children``)."""
from __future__ import annotations

from collections import OrderedDict

from disthook.distributed import (
    global_writes,
    glue,
    hook_sync,
    pinning,
    placed,
    placement,
    placing,
    shared_form,
    shipping,
    tree,
)
from disthook.distributed.aliases import client_aliases
from disthook.distributed.deployment import Deployment
from disthook.distributed.placement import (
    chains_its_children,
    check_options,
    choose_workers,
    forward_times,
)
from disthook.distributed.tree import Layout
from disthook.nn.modules.container import Sequential
from disthook.nn.modules.module import Module
from disthook.service.rpc import WorkerLost

__all__ = ["attached_model", "deploy"]


def deploy(cluster, module: Module, stages: int, split_points=None,
           balance: str = "params", sample_input=None, chunks: int = 1,
           schedule: str = "gpipe", placement: dict | None = None, writable: bool = False,
           hooks_ahead: bool = True, _exclude: set | None = None,
           _place: bool = True, public: bool = False):
    """Place ``module`` on the cluster's workers: contiguous stages of its children where
    they can make them, else its parts over the module tree (``placement``, or
    ``tree.auto_placement``). What runs where follows from that and the model's class: a
    root whose forward is ``nn.Sequential``'s runs its stages worker to worker (micro-batches
    pipeline); any other root's forward runs on the client as written, each placed part on
    its worker when it is called (``glue``); a model with no children runs whole on one.
    ``writable``: clients other than this one may change its weights (once it is
    published). ``public``: it is to be published, so every client may use it (with keys,
    one that is not is its deployer's key's alone). ``hooks_ahead``: a forward or backward
    may run ahead of the answers of client hooks that only look (False: every firing waits
    for its answer)."""
    if not isinstance(hooks_ahead, bool):
        raise TypeError(f"hooks_ahead must be True or False, got {hooks_ahead!r}")
    if not isinstance(module, Module):
        raise TypeError(f"deploy() takes a disthook.nn.Module, got {type(module).__name__}")
    if _place:
        _check_not_deployed(module)
    check_options(chunks, schedule, balance, split_points, sample_input)
    lay = stage_modules = None
    if not module._modules:  # nothing to cut: the whole model goes to one worker
        if stages != 1 or placement is not None or split_points is not None:
            raise ValueError(f"{type(module).__name__} has no children to place in "
                             f"{stages} stages: deploy it whole (stages=1)")
        if chunks > 1:
            raise NotImplementedError(f"chunks={chunks}: a model with no children runs whole "
                                      "on one worker; deploy it with chunks=1")
        lay, stage_modules = Layout([[""]], []), [module]
    elif placement is not None:
        if split_points is not None:
            raise ValueError("deploy() takes placement or split_points, not both")
        if not isinstance(placement, dict) or not placement:
            raise ValueError(f"placement must be a non-empty dict of module paths to stage "
                             f"numbers, got {placement!r}")
        stages = _placement_stages(placement, stages)
    else:
        stage_modules = _children_stages(module, stages, split_points, balance, sample_input)
        if stage_modules is not None and split_points is None and balance == "params":
            placement = _finer_placement(module, stage_modules, stages)
            if placement is not None:
                stage_modules = None
        if stage_modules is None and placement is None:
            # the children alone do not make the stages: the tree
            if balance == "time":
                raise ValueError(
                    f"balance='time' cuts the children of {type(module).__name__} into "
                    f"{stages} stages, which they cannot make (too few, tied across stages, "
                    "or the root holds parameters): use balance='params', or placement=")
            placement = tree.auto_placement(module, stages)
    if placement is not None:
        lay = tree.layout(module, placement, stages)
        stage_modules = [tree.stage_module(module, paths) for paths in lay.stages]
    alive = [w for w in cluster.workers() if w.alive and w.address not in (_exclude or ())]
    busy: dict[str, set] = {}  # worker id -> stages this client placed there a moment ago
    for other in list(getattr(cluster, "_deployments", {}).values()):
        if not other._closed:
            for i, w in enumerate(other._workers):
                busy.setdefault(w.id, set()).add(f"stage {i} of {other._model_id}")
    workers = choose_workers(alive, stages, busy)
    # the stages' modules with their code, where every worker takes code (a cluster this
    # program owns), else as data (a shared service)
    stage_fields = shipping.stage_fields(module, stage_modules,
                                         code=all(w.code for w in workers))
    if all(w.code for w in workers):
        global_writes.warn_of_global_writes(stage_modules)
    remote = Deployment(
        cluster, module, stage_modules, workers, timeout=cluster.timeout, chunks=chunks,
        schedule=schedule, layout=lay, placement=placement)
    object.__setattr__(remote, "_writable", bool(writable))
    object.__setattr__(remote, "_hooks_ahead", hooks_ahead)
    aliases = client_aliases()  # `import torch` in the model's files means what it means here
    try:
        for i, (fields, w) in enumerate(zip(stage_fields, workers)):
            remote._hub.request(w.address, "load_stage", {
                "stage": i, **fields, "aliases": aliases or None,
                "prev": workers[i - 1].address if i > 0 else None,
                "next": workers[i + 1].address if i + 1 < stages else None,
                "writable": bool(writable), "public": bool(public),
                **_neighbour_links(workers, i),
            }, what=f"load_stage {i} on {w.id}")
    except WorkerLost as exc:  # it died loading its stage: its last words say why
        remote.close()
        pid = {w.id: w.pid for w in workers}.get(exc.worker)
        lines = cluster._last_stderr(pid) if pid is not None else []
        if not lines:
            raise
        raise WorkerLost(exc.worker, exc.stage, exc.what, exc.context, stderr=lines) from None
    except BaseException:
        _drop_loaded(remote)  # the stages loaded so far are dropped again
        raise
    if not _place:
        return remote  # recover: the model is placed already, on this deployment
    placing.place(remote, module)
    try:
        glue.carry_hooks(remote, module)  # hooks registered before the deploy go there too
        hook_sync.sync_all(remote)
    except BaseException:
        remote.close()
        raise
    return module


def _drop_loaded(remote) -> None:
    """A deploy that failed before its model was placed: the stages loaded so far are
    unloaded and nothing comes back (nothing left: the model here is as it was), so that
    the failure raised is the deploy's own. Before, a close asked every worker for its
    stage's values, and a worker refusing the model's class (a shared service's) made the
    deploy fail saying it held no stage of the model, was it closed?, with the stages
    loaded before still loaded (tests/integration/test_s7_refused_deploy.py)."""
    object.__setattr__(remote, "_closed", True)
    remote._hub.close()


def _neighbour_links(workers: list, i: int) -> dict:
    """The local links (path and host token) of stage ``i``'s neighbours, where their
    workers registered one: a worker on the same host dials it rather than ZeroMQ."""
    out = {}
    for side, j in (("prev", i - 1), ("next", i + 1)):
        w = workers[j] if 0 <= j < len(workers) else None
        if w is not None and getattr(w, "link", None) and getattr(w, "link_host", None):
            out[f"{side}_link"], out[f"{side}_link_host"] = w.link, w.link_host
    return out


def _check_not_deployed(module: Module) -> None:
    """A model (or any module of it) already deployed is refused, naming it."""
    for path, m in module.named_modules():
        dep = placed.deployment_of(m)
        where = f"its module {path!r}" if path else "it"
        if dep is not None and dep._closed:  # closed, but its values never came back
            raise ValueError(
                f"this {type(module).__name__} cannot be deployed: {where} was deployed as "
                f"{dep._model_id}, whose workers were lost before its values came back, so "
                "its parameters have no values here. Load a checkpoint instead "
                "(cluster.load(path), or load_checkpoint on a fresh model once deployed)")
        if dep is not None and path:  # a module shared with a model deployed before
            raise ValueError(
                f"this {type(module).__name__} cannot be deployed: {where} is deployed "
                f"already (as part of {dep._model_id}), and a module is placed once. To "
                "deploy models that share a module, deploy one module that holds them all "
                "(nn.ModuleDict({'encoder': encoder, 'decoder': decoder}): the parts that "
                "share a tensor go to one worker, and each model is called as before), or "
                f"keep this {type(module).__name__} here, where {path!r} runs on its worker")
        if dep is not None:
            raise ValueError(
                f"this {type(module).__name__} cannot be deployed: {where} is deployed "
                f"already (as {dep._model_id}); close that deployment first "
                "(model.close()), which brings the model back here")


def attached_model(cluster, module: Module, workers: list, record: dict) -> Module:
    """``module`` placed on a published deployment (``registry.attach``): ``module`` is the
    twin of its tree, ``workers`` hold its stages, ``record`` is what the deployer
    published. It shares the deployer's model id and stages, with sockets (and so a client
    identity on the workers) of its own; nothing is loaded, and closing it unloads nothing."""
    lay = record["layout"]
    layout = stage_modules = None
    if lay["kind"] == "chain":  # as deploy() made it: contiguous children
        stage_modules = [Sequential(OrderedDict((n, module._modules[n]) for n in names))
                         for names in lay["stages"]]
    else:
        layout = Layout([list(p) for p in lay["stages"]], list(lay["split"]),
                        list(lay["client"]))
    remote = Deployment(
        cluster, module, stage_modules or [], workers, timeout=cluster.timeout,
        chunks=lay["chunks"], schedule=lay["schedule"], layout=layout,
        placement=lay.get("placement"), model_id=record["model"])
    object.__setattr__(remote, "_attached", record["name"])
    object.__setattr__(remote, "_writable", bool(record["writable"]))
    pinning.share(remote)  # the deployer (and others) may write it meanwhile
    placing.place(remote, module)
    try:
        shared_form.follow(remote)  # its modes, dtypes and buffers now, and as they change
    except BaseException:
        remote.close()
        raise
    return module


def _children_stages(module: Module, stages: int, split_points, balance: str,
                     sample_input) -> list[Sequential] | None:
    """Contiguous stages of the root's children (``nn.Sequential``s named as in the model),
    or None when they cannot make them and no ``split_points`` ask for them: fewer
    children than stages, a tensor shared across stages, or a root holding parameters or
    buffers of its own."""
    children = list(module._modules.items())
    own = [*module._parameters, *module._buffers]
    if split_points is None and (own or len(children) < stages):
        return None
    if own:
        raise ValueError(f"{type(module).__name__} has parameters or buffers of its own "
                         f"({', '.join(own)}), which split_points cannot place: leave "
                         "split_points out (the root's own stay on the client), or move them "
                         "into a child module")
    if split_points is None and balance == "time":
        sizes = forward_times(module, sample_input)
    else:
        sizes = [sum(p.numel() for p in child.parameters()) if child is not None else 0
                 for _, child in children]
    cuts = placement.split_points(sizes, stages, split_points)
    bounds = [0, *cuts, len(children)]
    stage_modules = [Sequential(OrderedDict(children[a:b])) for a, b in zip(bounds, bounds[1:])]
    for m in stage_modules:
        m.training = module.training  # (its children keep their own modes)
    try:
        placement.check_ties(stage_modules)
    except ValueError:
        if split_points is not None:
            raise
        return None  # the tree can keep the tied parts together
    return stage_modules


def _finer_placement(module: Module, stage_modules: list, stages: int) -> dict | None:
    """The tree's placement, where the root's forward runs on the client (so cutting among
    its children gains nothing over cutting deeper) and the children alone balance the
    stages badly: a GPT's children are its embeddings, one ``ModuleList`` of every block and
    its head, which put every block on one worker. None where the children do as well (within
    a quarter) or the tree cannot place the model."""
    if stages < 2 or chains_its_children(module):
        return None
    try:
        finer = tree.auto_placement(module, stages)
    except ValueError:
        return None
    by_stage = [0] * stages
    mods = dict(module.named_modules())
    for path, stage in finer.items():
        by_stage[stage] += sum(p.numel() for p in mods[path].parameters())
    coarse = max(sum(p.numel() for p in m.parameters()) for m in stage_modules)
    return finer if max(by_stage) * 1.25 < coarse else None


def _placement_stages(given: dict, stages: int) -> int:
    """The stages a placement uses (its largest stage number + 1), checked against
    ``stages`` when that says more than 1."""
    numbers = [v for v in given.values() if isinstance(v, int) and not isinstance(v, bool)]
    used = max(numbers, default=-1) + 1
    if stages not in (1, used):
        raise ValueError(f"placement uses stages 0 to {used - 1}, but stages={stages}: give "
                         "one or the other, or make them agree")
    return max(used, 1)
