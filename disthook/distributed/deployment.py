"""A model deployed on workers, as seen from the client: ``Deployment`` (placed by
``deploy``; its autograd node ``RemoteBackward0`` is in ``autograd_node``).

``Cluster.deploy(module, stages=N)`` places the module's parts on N workers. What runs where
follows from the placement and the model's class: a root whose forward is
``nn.Sequential``'s runs its stages worker to worker (``chain``: the input goes to the first
stage over ``channel``, activations go worker to worker, the last stage answers the client);
any other root runs its forward here, each placed part on its worker (``glue``). An output
is an ordinary Tensor whose ``grad_fn`` is a ``RemoteBackward0`` node: when the client's
backward reaches it, the gradient goes back to the workers that made it, and they answer
with the gradient for the input (when the input requires grad). Parameters' gradients
accumulate on the workers, in ``.grad`` of the real parameters, as in one process.

A forward with grad enabled opens a context on every stage; backward without
``retain_graph`` closes it, and the workers free the contexts of a graph that the client
drops (its output and node collected): the node's finalizer releases them (workers also
expire contexts after a deadline). The proxies of the model's parts are in ``proxies``, the
distributed optimizer in ``optimizer``, the checkpoint layout in ``checkpoint``.
"""
from __future__ import annotations

import contextlib
import copy
import time
import uuid
import warnings
import weakref
from collections import OrderedDict

import numpy as np

from disthook.distributed import chain, checkpoint, client_modes, glue, hook_sync, placed
from disthook.distributed import placing, remote_values, state_entries
from disthook.distributed.autograd_node import RemoteBackward0
from disthook.distributed.channel import _Hub
from disthook.distributed.dropped import close_when_dropped
from disthook.distributed.hook_table import HookTable
from disthook.distributed.optimizer import DistributedOptimizer
from disthook.distributed.parameters import RemoteParameter, RemoteStorage
from disthook.distributed.placement import chains_its_children, partition
from disthook.distributed.tree import Layout
from disthook.nn.modules.module import Module, _first_tensor
from disthook.service.rpc import DEFAULT_TIMEOUT, ClusterError, RemoteError, RemoteTimeout
from disthook.tensor import Tensor

# public API kept importable from here; the rest lives in the modules named above
__all__ = ["Deployment", "DistributedOptimizer", "RemoteBackward0", "partition"]

class Deployment(HookTable):
    """One deployment of a model, on the client: its model (placed in place: ``placed``),
    layout, workers, channel (``_hub``: sockets, the table of client hooks, pending
    optimizer calls and releases) and its public operations (``save``, ``load_checkpoint``,
    ``recover``, ``train_step``, ``workers``, ``named_gradients``, ``to_local``, ``close``;
    the model answers them too, where its class has no such name). Placements, the
    autograd node, optimizers, checkpoints and the registry reach the workers through it."""

    def __init__(self, cluster, module: Module, stage_modules: list[Module],
                 workers: list, timeout: float = DEFAULT_TIMEOUT, chunks: int = 1,
                 schedule: str = "gpipe", layout: Layout | None = None,
                 placement: dict | None = None, model_id: str | None = None):
        whole = layout is not None and layout.stages == [[""]]  # the model on one worker
        tree = layout is not None and not whole
        if layout is None:  # contiguous stages of the root's children
            layout = Layout([list(m._modules) for m in stage_modules], [""])
        fields = {
            "_cluster": cluster,
            "_layout": layout,
            "_stage_names": layout.stages,  # the paths each stage holds whole
            # the placement it was deployed with (None: contiguous children), for recover()
            "_placement_given": placement,
            # a parameter's first name in the model: tied names are one RemoteParameter
            "_canonical": _first_names(module),
            "_addresses": [w.address for w in workers],
            "_workers": workers,
            "_class_name": type(module).__name__,
            "_local": module,  # the tree's shape (names, kinds); its weights go stale
            # an attached client's is the deployer's (attached_model)
            # (a worker takes ids of at most 256 characters: a class's long name is cut)
            "_model_id": model_id or f"{type(module).__name__[:128]}-{uuid.uuid4().hex[:8]}",
            "_closed": False,
            # the root's forward runs here, each placed part on its worker, unless it is
            # nn.Sequential's own (the stages run worker to worker) or the model is placed
            # whole: decided by the model's class and placement, never by running it
            "_glue": not whole and (tree or not chains_its_children(module)),
            "_whole": whole,  # a model with no children, placed whole (forward: one call)
            "_chunks": chunks,  # micro-batches per call (split along dim 0)
            "_schedule": schedule,  # of train_step: "gpipe" or "1f1b"
            "step_stats": [],  # of the last train_step, per stage (busy, wall, peak_rss)
            "_checkpoint": None,  # the last checkpoint saved or loaded, for recover()
            # sharing (registry): the name this deployment is published under, the name of
            # the deployment this client attached to (its stages are not its to unload), and
            # whether clients other than the deployer may write its weights
            "_published": None,
            "_attached": None,
            "_writable": False,
            # whether passes may run ahead of the answers of client hooks that only look
            # (see workers/speculation.py): entries of hooks registered say so
            "_hooks_ahead": True,
        }
        holders = {w.address: (w.id, i) for i, w in enumerate(workers)}
        fields["_hub"] = _Hub(fields["_model_id"], fields["_addresses"], timeout, holders,
                              keys=cluster.keys, heartbeat=cluster.heartbeat,
                              max_answer_mb=cluster.max_answer_mb)
        if not fields["_glue"] and not whole:  # a chain: its writes travel it (write_all)
            fields["_hub"].chain = fields["_addresses"]
        # dropped unclosed, its sockets close and the stages it loaded (none when it
        # attached to a published model: given that model's id) unload
        close_when_dropped(fields["_hub"], unload=model_id is None)
        for name, value in fields.items():  # plain attributes, not submodules
            object.__setattr__(self, name, value)

    @property
    def training(self) -> bool:
        """The model's mode (which the workers' copies follow)."""
        return self._local.training

    # ---- calling ------------------------------------------------------------------------------
    def _route_root_legacy_hooks(self) -> None:
        """Legacy backward hooks on the model: routed to where the last op of its forward
        runs (a chain's last worker; for a forward run here, the placed part whose output
        the model returns: ``glue.route_node_hooks``)."""
        if self._glue:
            glue.route_node_hooks(self)
        else:
            self._route_legacy_hooks()

    def _route_legacy_hooks(self) -> None:
        """A legacy backward hook on the model sees the gradients of the last op of its
        forward, which for a chain runs on the last worker: one hook there (on the last
        child, whose output is the model's) runs the model's legacy hooks, those it held
        when the call that fires began (as one process registers them on that call's output
        node: kept by ``forward``; as they are now for a call that did not go through it),
        with the model as their module."""
        if self.__dict__.get("_legacy_router") is not None or not self._local._backward_hooks:
            return
        model = self._local
        calls = self.__dict__.setdefault("_legacy_calls", weakref.WeakValueDictionary())

        def run_legacy_hooks(module, grad_input, grad_output):
            changed = None
            node = calls.get(self._hub.firing_ctx)
            for hook in (node._legacy_hooks if node is not None
                         else list(model._backward_hooks.values())):
                result = hook(model, grad_input if changed is None else changed, grad_output)
                if result is not None:
                    changed = result
            return changed

        last = self._stage_names[-1][-1]  # "": the whole model
        object.__setattr__(self, "_legacy_router",
                           self._add_hook("backward", last, run_legacy_hooks,
                                          self.get_submodule(last)))

    def forward(self, *args, **kwargs):
        """The model's forward where it does not run here as written (``RootPlacement``): a
        root whose forward is ``nn.Sequential``'s runs its stages worker to worker; a model
        placed whole, on its worker."""
        if self._whole:
            return glue.call_placed(self, "", args, kwargs)
        if len(args) != 1 or kwargs:
            raise TypeError(f"this deployed {self._class_name} chains its children: it takes "
                            f"one Tensor, got {len(args)} argument(s)"
                            f"{' and keywords ' + ', '.join(kwargs) if kwargs else ''}")
        out = chain.run_stages(self, args[0])
        # the model's legacy backward hooks as this call began (RootPlacement), for its node
        hooks = self.__dict__.pop("_legacy_now", [])
        first = _first_tensor(out) if "_legacy_calls" in self.__dict__ else None
        node = first.grad_fn if first is not None else None
        if "_legacy_calls" in self.__dict__ and isinstance(node, RemoteBackward0):
            node.__dict__["_legacy_hooks"] = hooks
            for ctx_id in node._ctx_ids:
                self._legacy_calls[ctx_id] = node
        return out

    def _run_until(self, x: Tensor, path: str):
        """``hooks.run_until``: the stages up to the one holding ``path``, or, for a forward
        that runs here, that forward up to the part's output (``glue.run_until``)."""
        return glue.run_until(self, x, path) if self._glue else chain.run_stages(self, x, path)

    def train_step(self, x: Tensor, target: Tensor, loss_fn, scale_grads: bool = True):
        """One training step. A chain pipelines it with the loss on the last stage: ``x``
        and ``target`` cut into the model's ``chunks`` micro-batches, each stage running the
        model's ``schedule`` (GPipe or 1F1B); ``loss_fn`` a loss module
        (``nn.CrossEntropyLoss()``) or a function of ``disthook.nn.functional``; with
        ``scale_grads`` each micro-batch's loss weighted by its share of the rows
        (``chain.train_step``). A model whose forward runs here takes one process's step
        (``micro_batches.train_step``: with ``chunks``, its micro-batches in the
        schedule's order). Gradients accumulate in ``.grad``; returns the micro-batch
        losses."""
        for name, t in (("x", x), ("target", target)):
            if not isinstance(t, Tensor) or t._data.ndim == 0:
                raise TypeError(f"train_step(): {name} must be a Tensor with a batch "
                                f"dimension, got {type(t).__name__}")
        if len(target._data) != len(x._data):
            raise ValueError(f"train_step(): x has {len(x._data)} rows but target has "
                             f"{len(target._data)}")
        hook_sync.sync_all(self)  # hooks edited in place, global hooks added or removed
        if self._glue or placed.changed_here(self._local):  # (a chain whose stages would not
            # run a forward set on one of its modules takes the step from here too)
            from disthook.distributed import micro_batches

            return micro_batches.train_step(self, x, target, loss_fn, scale_grads)
        return chain.train_step(self, x, target, loss_fn, scale_grads)

    def train(self, mode: bool = True) -> Deployment:
        """Switch every stage to training (or, with False, evaluation) mode, and every
        module of the model here."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self._hub.writes += 1  # a module attribute (from a hook: what follows it changes)
        self._hub.request_all([(a, {"mode": mode}) for a in self._addresses], "train",
                              what="train()")
        for module in self._local.modules():
            module.__dict__["training"] = mode
        client_modes.publish(self)  # (those of the modules here, where it is published)
        return self

    # ---- the module tree ------------------------------------------------------------------------
    def get_submodule(self, target: str) -> Module:
        """The model's own module at ``target`` (placed or not)."""
        return self._local.get_submodule(target)

    def _owner(self, path: str) -> str:
        """The address of the worker holding the module (or tensor) at ``path``."""
        stage = self._layout.stage_of(path)
        if stage is None:
            raise ValueError(f"{path!r} of the deployed {self._class_name} is on the client, "
                             "not on a worker")
        return self._addresses[stage]

    def _owner_name(self, path: str) -> str:
        """"stage i, worker W" for the part at ``path`` ("the client" for one here)."""
        stage = self._layout.stage_of(path)
        if stage is None:
            return "the client"
        return f"stage {stage}, worker {self._workers[stage].id}"

    def _captured(self, name: str) -> list[dict]:
        """``cluster.captured(name, details=True)`` from this model's workers only, over the
        model's own connections, all asked at once."""
        from disthook.distributed.cluster import captured_items

        replies = self._hub.request_all([(a, {"name": name}) for a in dict.fromkeys(
            self._addresses)], "captured", what=f"captured({name!r})")
        return captured_items([item for r in replies for item in r["result"]], details=True)

    # ---- state --------------------------------------------------------------------------------
    def _states(self, names: list[str] | None = None):
        """Every stage's state and gradients; with ``names``, just those (one worker asked)."""
        if names is not None:
            return self._hub.request(self._owner(names[0]), "get_state", {"names": names},
                                     what="get_state")["result"]
        replies = self._hub.request_all([(a, {}) for a in self._addresses], "get_state",
                                        what="get_state")
        return [r["result"] for r in replies]

    def _all_states(self) -> tuple[dict, dict]:
        """Every placed tensor's value and every gradient, by name, from every worker."""
        fetched, grads = {}, {}
        for state in self._states():
            fetched.update(state["state"])
            grads.update(state["grads"])
        return fetched, grads

    @contextlib.contextmanager
    def _fetching(self, fetched: dict, grads: dict | None = None):
        """While the model's state is read here: the workers' values (and gradients), which
        its placed tensors read instead of asking."""
        object.__setattr__(self, "_fetched", fetched)
        object.__setattr__(self, "_fetched_grads", grads)
        try:
            yield
        finally:
            object.__setattr__(self, "_fetched", None)
            object.__setattr__(self, "_fetched_grads", None)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self._local.load_state_dict(state_dict, strict=strict, assign=assign)

    def _raw_state(self) -> OrderedDict:
        """Every parameter and buffer by its name, without running any hook."""
        fetched = self._all_states()[0]
        out = OrderedDict()
        for path, module in self._local.named_modules(remove_duplicate=False):
            d = module.__dict__
            own = [*d["_parameters"].items(), *((n, b) for n, b in d["_buffers"].items()
                                               if n not in d["_non_persistent_buffers_set"])]
            for name, t in own:
                if t is None:
                    continue
                full = f"{path}.{name}" if path else name
                key = t._path if isinstance(t, RemoteStorage) else None
                out[full] = (Tensor._make(np.array(fetched[key]), None, 0) if key is not None
                             else t.detach())
        return out

    def named_gradients(self) -> OrderedDict:
        """``.grad`` of every parameter that has one, fetched from its worker (or here)."""
        fetched = {}
        for state in self._states():
            fetched.update(state["grads"])
        out = OrderedDict()
        for name, p in self._local.named_parameters():
            if name in fetched:
                out[name] = Tensor._make(np.array(fetched[name]), None, 0)
            elif self._layout.stage_of(name) is None and p.grad is not None:
                out[name] = p.grad.detach()
        return out

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True):
        """(full name, parameter) for every parameter, in the model's order: a
        ``RemoteParameter`` for one on a worker, the parameter itself for one here."""
        if not recurse:
            yield from self._local.named_parameters(prefix, recurse, remove_duplicate)
            return
        for name, p in self._local.named_parameters(remove_duplicate=remove_duplicate):
            yield (f"{prefix}.{name}" if prefix else name), (
                RemoteParameter(self, name) if isinstance(p, RemoteStorage) else p)

    def _client_parameters(self):
        """(name, parameter) of the parameters here: kept here at the deploy, or of a part
        replaced here since (its worker's copy is stale)."""
        return [(n, p) for n, p in self._local.named_parameters()
                if not isinstance(p, RemoteStorage)]

    def save(self, path: str, *, optimizer=None, step: int | None = None,
             code: bool = False) -> None:
        """A checkpoint of the model (and of ``optimizer``'s state: a DistributedOptimizer
        or a plain optimizer) in directory ``path``: one .npz per stage and a manifest
        (disthook.distributed.checkpoint); written atomically, so an interrupted save leaves
        the previous checkpoint intact. ``code``: keep the model's code too (a model whose
        modules hold lambdas needs it for ``cluster.load``)."""
        checkpoint.save(self, path, optimizer=optimizer, step=step, code=code)
        object.__setattr__(self, "_checkpoint", path)

    def load_checkpoint(self, path: str, *, optimizer=None):
        """Restore parameters and buffers (and ``optimizer``'s state) saved by ``save``;
        the model must have the structure it was saved with. Returns the saved step."""
        step = checkpoint.load(self, path, optimizer=optimizer)
        object.__setattr__(self, "_checkpoint", path)
        return step

    def recover(self, *, optimizer=None) -> int | None:
        """After ``WorkerLost``: place the stages again on live workers (a replacement from
        ``local_cluster(restart=True)``, or any other) and load the last checkpoint this
        model saved or loaded (and ``optimizer``'s state from it); the hooks registered on
        the model's modules and parameters are registered again, in their order, and their
        handles keep working. Returns the checkpoint's step."""
        if self._attached:
            raise ClusterError(f"cannot recover the deployed {self._class_name}: it is attached to "
                               f"{self._attached!r}, whose deployer recovers it; attach again "
                               "once it has")
        path = self._checkpoint
        if path is None:
            lost = ", ".join(f"stage {self._hub.holders.get(a, (a, '?'))[1]} on worker "
                             f"{self._hub.holders.get(a, (a, '?'))[0]}" for a in self._hub.lost)
            raise ClusterError(f"cannot recover the deployed {self._class_name}: "
                               f"{lost or 'a stage'} is lost and the model has no checkpoint "
                               "(remote.save(path))")
        stages = len(self._addresses)
        lost = set(self._hub.lost)
        deadline = time.monotonic() + 60
        while (live := len([w for w in self._cluster.workers()
                            if w.alive and w.address not in lost])) < stages:
            if self._cluster._processes and self._cluster._restarter is None:  # none coming
                raise ClusterError(
                    f"cannot recover the deployed {self._class_name}: {live} live worker(s) for "
                    f"{stages} stage(s), and this local_cluster starts no replacement; start "
                    "it with local_cluster(..., restart=True), or add a worker (disthook "
                    f"worker --coordinator {self._cluster.address}), then recover()")
            if time.monotonic() > deadline:
                raise ClusterError(f"cannot recover the deployed {self._class_name}: fewer than "
                                   f"{stages} live workers within 60 s; add a worker (disthook "
                                   f"worker --coordinator {self._cluster.address})")
            time.sleep(0.1)
        from disthook.distributed.deploy import deploy

        self._hub.close(unload=True)  # the surviving stages are dropped
        if self._placement_given is not None:
            fresh = deploy(self._cluster, self._local, stages, placement=self._placement_given,
                           writable=self._writable, hooks_ahead=self._hooks_ahead,
                           _exclude=lost, _place=False, public=bool(self._published))
        else:
            sizes = [len(names) for names in self._stage_names]
            cuts = [sum(sizes[:i]) for i in range(1, stages)]
            fresh = deploy(self._cluster, self._local, stages, split_points=cuts,
                           chunks=self._chunks, schedule=self._schedule,
                           writable=self._writable, hooks_ahead=self._hooks_ahead,
                           _exclude=lost, _place=False, public=bool(self._published))
        hooks = self._hub.hooks
        for name in ("_layout", "_stage_names", "_addresses", "_workers", "_model_id", "_hub"):
            object.__setattr__(self, name, fresh.__dict__[name])
        object.__setattr__(self, "_closed", False)
        self._hub.hooks.update(hooks)
        if hooks:  # in registration order: the same firing order
            self._register_hooks([entry[3] for entry in hooks.values()])
        step = self.load_checkpoint(path, optimizer=optimizer)
        if self._published:  # the name now means the new stages (attached clients re-attach)
            from disthook.distributed import registry

            registry.publish(self._cluster, self, self._published, writable=self._writable)
        return step

    def _stage_of(self, name: str) -> int:
        stage = self._layout.stage_of(name)
        if stage is None:
            raise ValueError(f"{name!r} of the deployed {self._class_name} is on the client, "
                             "not on a worker")
        return stage

    def to_local(self) -> Module:
        """An ordinary module, a copy of the model with the workers' current parameters,
        buffers and gradients (the model itself stays deployed)."""
        with self._fetching(*self._all_states()):
            return copy.deepcopy(self._local)

    def stats(self, reset: bool = False) -> dict:
        """Where this model's data went since it was deployed (or since the last
        ``stats(reset=True)``): the requests the client sent and the ones it waited on,
        the bytes it sent to and took from the workers, and the bytes the workers sent one
        another (activations, gradients and kept values) and sent the client when it read a
        kept value. Per training step: call ``stats(reset=True)`` before it and after it."""
        hub = self._hub
        counted = dict(hub.stats)  # stats()'s own requests are not counted
        between = to_client = 0
        try:
            for address in dict.fromkeys(self._addresses):
                if address in hub.lost:
                    continue
                reply = hub.request(address, "status", {}, what="stats()")
                data = reply["result"].get("data", {}).get(self._model_id, {})
                between += data.get("bytes_to_peers", 0)
                to_client += data.get("bytes_to_client", 0)
        finally:
            hub.stats.update(counted)
        base = self.__dict__.setdefault("_stats_base", {"between": 0, "to_client": 0})
        out = {"requests": hub.stats["requests"], "waited": hub.stats["waits"],
               "bytes_to_workers": hub.stats["bytes_out"],
               "bytes_from_workers": hub.stats["bytes_in"],
               "bytes_between_workers": between - base["between"],
               "bytes_of_values_read": to_client - base["to_client"]}
        if reset:
            hub.stats.update(requests=0, waits=0, bytes_out=0, bytes_in=0)
            base.update(between=between, to_client=to_client)
        return out

    def workers(self) -> list[tuple[int, str, list[str]]]:
        """(stage, worker id, names of the children it holds) per stage."""
        return [(i, w.id, names) for i, (w, names)
                in enumerate(zip(self._workers, self._stage_names))]

    def close(self, unload: bool = True) -> None:
        """Disconnect; the workers drop the model's stages unless ``unload`` is False. A
        published model is unpublished; an attached client only leaves (the stages are the
        deployer's)."""
        if not self._closed:
            from disthook.distributed import registry

            detach = self.__dict__.get("_detach_when_dropped")  # (Cluster.attach's)
            if detach is not None:
                detach.detach()  # left now
            registry.leave(self)
            unload = unload and not self._attached
            values = grads = None
            if not self._hub.lost and self._hub.socks:
                try:  # the model comes back here with its current values: nothing is lost
                    values, grads = self._all_states()
                except (ClusterError, RemoteTimeout):
                    values = None
                except RemoteError:  # an attached model its deployer unloaded: gone
                    if not self._attached:
                        raise
                    values = None
                try:  # ... nor are the values the program holds
                    remote_values.fetch_held(self)
                except (ClusterError, RemoteError, RemoteTimeout):
                    pass  # a call that made them failed: reading one says so
            if values is None and not self._attached:
                _say_not_home(self)
            params = [(p, p._path) for p in self._local.parameters()
                      if isinstance(p, RemoteStorage)]
            placing.unplace(self, values)
            if values is not None:  # ... nor their gradients, and the p.grad it holds
                state_entries.grads_home(self, params, grads)
            self._closed = True
            try:
                if not unload:
                    self._hub.pending_releases.clear()
                    if self._hub.pending_optimizer:  # the stages stay: the last steps land
                        try:
                            self._hub.flush_optimizer_calls()
                        except (ClusterError, RemoteTimeout):
                            pass  # the workers are gone or do not answer: so are the stages
            finally:
                self._cluster._forget(self)
                self._hub.flush_releases()
                self._hub.close(unload)

    def __repr__(self) -> str:
        """The module tree as torch prints it, each placed part marked with its stage and
        worker, each part kept here marked so."""
        where = {name: f"stage {stage} on {wid}" for stage, wid, names in self.workers()
                 for name in names}
        split = set(self._layout.split)

        def lines_of(module, path: str, head: str) -> list[str]:
            children = module._modules
            lines = [head if children else head + ")"]
            for name, child in children.items():
                sub = f"{path}.{name}" if path else name
                if sub in split:
                    first, *rest = lines_of(child, sub, f"{type(child).__name__}(")
                    first += "  # split: runs on the client"
                else:
                    first, *rest = repr(child).split("\n")
                    first += f"  # {where.get(sub, 'on the client')}"
                lines.append(f"  ({name}): {first}")
                lines += [f"  {line}" for line in rest]
            return lines + ([")"] if children else [])

        return "\n".join(lines_of(self._local, "",
                                   f"{self._class_name}(  # deployed as {self._model_id}"))


def _first_names(module: Module) -> dict[str, str]:
    """Each parameter's name -> the first name of the same tensor (tied weights)."""
    first: dict[int, str] = {}
    return {name: first.setdefault(id(p), name)
            for name, p in module.named_parameters(remove_duplicate=False)}


def _say_not_home(dep: Deployment) -> None:
    """``close()`` could not bring the model back (a worker holding a stage is lost, or none
    answered): say so, where before it returned as if the model were the program's again."""
    lost = ", ".join(f"stage {dep._hub.holders.get(a, (a, '?'))[1]} on worker "
                     f"{dep._hub.holders.get(a, (a, '?'))[0]}" for a in dep._hub.lost)
    why = (f"{lost} is lost with its weights" if lost
           else "its workers did not answer with its weights")
    warnings.warn(
        f"close() of the deployed {dep._class_name} could not bring the model back to this "
        f"program: {why}; the module is not usable here (each use raises). Make the model "
        "again and load a checkpoint into it, or recover() the deployment from its last "
        "checkpoint (remote.save(path) makes one)",
        RuntimeWarning, stacklevel=3)

