"""A model deployed on workers, as seen from the client: ``RemoteModel`` and ``deploy``,
which places it (its autograd node ``RemoteBackward0`` is in ``autograd_node``).

``Cluster.deploy(module, stages=N)`` cuts the module's children into N contiguous stages
(``placement``: balanced by parameter count or forward time, or at ``split_points``) and
places each on a worker. Calling the ``RemoteModel`` sends the input to the first stage
(over ``channel``); activations go worker to worker directly and the last stage answers the
client. The output is an ordinary Tensor whose ``grad_fn`` is a ``RemoteBackward0`` node:
when the client's backward reaches it, the gradient goes to the last stage, travels back
worker to worker, and the first stage answers with the gradient for the input (when the
input requires grad). Parameters' gradients accumulate on the workers, in ``.grad`` of the
real parameters, as in one process.

A forward with grad enabled opens a context on every stage; backward without
``retain_graph`` closes it, and the workers free the contexts of a graph that the client
drops (its output and node collected): the node's finalizer releases them (workers also
expire contexts after a deadline). The proxies of the model's parts are in ``proxies``, the
distributed optimizer in ``optimizer``, the checkpoint layout in ``checkpoint``.
"""
from __future__ import annotations

import contextlib
import copy
import itertools
import time
import uuid
from collections import OrderedDict

import numpy as np

from disthook.autograd import grad_mode
from disthook.distributed import checkpoint, glue, placement
from disthook.distributed.aliases import client_aliases
from disthook.distributed.autograd_node import RemoteBackward0
from disthook.distributed.channel import _Hub
from disthook.distributed.hooks import WorkerHook
from disthook.distributed.optimizer import DistributedOptimizer
from disthook.distributed.placement import (
    check_chain,
    check_options,
    choose_workers,
    forward_times,
    micro_batch_sizes,
    partition,
    split_rows,
)
from disthook.distributed.proxies import RemoteHandle, RemoteModule, RemoteParameter
from disthook.distributed.rpc import DEFAULT_TIMEOUT, ClusterError, WorkerLost
from disthook.distributed.spec import main_script_of, module_spec
from disthook.nn.modules.container import Sequential
from disthook.nn.modules.module import Module
from disthook.tensor import Tensor

# public API kept importable from here; the rest lives in the modules named above
__all__ = ["DistributedOptimizer", "RemoteBackward0", "RemoteModel", "partition"]


class RemoteModel(Module):
    """A module whose stages live on workers. It is a Module itself, so hooks registered on
    it (the whole model) fire here with the model's input and output, as in one process."""

    def __init__(self, cluster, module: Module, stage_modules: list[Sequential],
                 workers: list, timeout: float = DEFAULT_TIMEOUT, chunks: int = 1,
                 schedule: str = "gpipe"):
        super().__init__()
        fields = {
            "_cluster": cluster,
            "_stage_names": [list(m._modules) for m in stage_modules],
            "_addresses": [w.address for w in workers],
            "_workers": workers,
            "_class_name": type(module).__name__,
            "_local": module,  # the tree's shape (names, kinds); its weights go stale
            "_model_id": f"{type(module).__name__}-{uuid.uuid4().hex[:8]}",
            "_closed": False,
            # the root's forward does not run remotely: a non-Sequential root is checked to
            # only chain its children, at the first call (see _check_chain)
            "_chain_checked": isinstance(module, Sequential),
            "_glue": False,  # the root's forward runs here, each child on its worker
            "_chunks": chunks,  # micro-batches per call (split along dim 0)
            "_schedule": schedule,  # of train_step: "gpipe" or "1f1b"
            "step_stats": [],  # of the last train_step, per stage (busy, wall, peak_rss)
            "_checkpoint": None,  # the last checkpoint saved or loaded, for recover()
        }
        holders = {w.address: (w.id, i) for i, w in enumerate(workers)}
        fields["_hub"] = _Hub(fields["_model_id"], fields["_addresses"], timeout, holders,
                              keys=cluster.keys, heartbeat=cluster.heartbeat)
        for name, value in fields.items():  # plain attributes, not submodules
            object.__setattr__(self, name, value)
        object.__setattr__(self, "training", module.training)

    # ---- calling ------------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        """A chain of children runs worker to worker; any other forward (functional code
        between the children, several inputs) runs here with each child on its worker
        (``glue``). Which one is decided at the first call."""
        if not self._chain_checked:
            self._choose_path(args, kwargs)
        if self._glue:
            return glue.run_root_forward(self, args, kwargs)
        if len(args) != 1 or kwargs:
            raise TypeError(f"this deployed {self._class_name} chains its children: it takes "
                            f"one Tensor, got {len(args)} argument(s)"
                            f"{' and keywords ' + ', '.join(kwargs) if kwargs else ''}")
        return self._run_stages(args[0])

    def _choose_path(self, args: tuple, kwargs: dict) -> None:
        use_glue = glue.needs_glue(self._local, args, kwargs)
        if use_glue and self._chunks > 1:
            raise NotImplementedError(
                f"chunks={self._chunks}: {self._class_name}.forward runs on the client "
                "between its children, which are called one by one; deploy it with "
                "chunks=1, or an nn.Sequential of the steps to pipeline micro-batches")
        object.__setattr__(self, "_glue", use_glue)
        object.__setattr__(self, "_chain_checked", True)

    def _refuse_glue(self, what: str) -> None:
        if self._glue:
            raise NotImplementedError(
                f"{what} needs a model whose forward chains its children; "
                f"{self._class_name}.forward runs on the client between its children: call "
                "the model and backward, or deploy an nn.Sequential of the steps")

    def _run_stages(self, x: Tensor, stop: str | None = None) -> Tensor:
        """The stages' forward on ``x``; with ``stop`` (a module path), only up to the stage
        holding that module, whose output is returned (the later stages do no work)."""
        if not isinstance(x, Tensor):
            raise TypeError(f"a RemoteModel takes one Tensor, got {type(x).__name__}")
        if not self._chain_checked:
            self._check_chain(x)
        if stop is not None:
            self._refuse_glue("run_until")
        grad = grad_mode.is_grad_enabled()
        rows = x._data.shape[0] if x._data.ndim else 0
        chunks = min(self._chunks, rows) if rows > 1 else 1
        sizes = None  # one micro-batch: the whole input
        if chunks > 1:
            sizes = micro_batch_sizes(rows, chunks)
        parts = [x._data] if sizes is None else split_rows(x._data, sizes)
        ctx_ids = [uuid.uuid4().hex for _ in parts]
        # optimizer.zero_grad() calls since the last request ride with the first micro-batch,
        # which reaches every stage before anything else of this call (not with stop: the
        # later stages would not hear them)
        taken, zero_grads = self._hub.take_zero_grads(self) if stop is None else ([], None)
        # every micro-batch is sent at once: stage 0 works on the second while stage 1
        # works on the first, and so on (the GPipe fill and drain)
        try:
            replies = self._hub.request_all(
                [(self._addresses[0], {"stage": 0, "inputs": [part], "grad_enabled": grad,
                                       "requires_grad": [x._requires_grad],
                                       "reply_to": self._hub.reply_to,
                                       "mb": None if sizes is None else i, "stop": stop,
                                       "zero_grad": zero_grads if i == 0 else None}, ctx_id)
                 for i, (part, ctx_id) in enumerate(zip(parts, ctx_ids))],
                "forward", what="forward through the remote stages" + (
                    f" up to {stop!r}" if stop else ""), carries_zero_grads=stop is None)
        except BaseException:
            # a stage failed before passing them on: they go again (zeroing twice is the same)
            self._hub.pending_zero_grads[:0] = taken
            raise
        results = [r["result"] for r in replies]
        outs = [np.asarray(r["output"]) for r in results]
        if sizes is not None and any(o.ndim == 0 or len(o) != n for o, n in zip(outs, sizes)):
            raise RuntimeError(
                f"with chunks={chunks} the model's output must keep the batch dimension: "
                f"micro-batches of {sizes} rows gave outputs of shapes "
                f"{[tuple(o.shape) for o in outs]}")
        out = np.concatenate(outs) if len(outs) > 1 else np.array(outs[0])
        if grad and all(r["requires_grad"] for r in results):
            stage = None if stop is None else self._stage_of(stop)
            return Tensor._make(out, RemoteBackward0(self, ctx_ids, x, sizes, stage), 0)
        return Tensor._make(out, None, 0)

    def train_step(self, x: Tensor, target: Tensor, loss_fn, scale_grads: bool = True):
        """One pipelined training step with the loss on the last stage: ``x`` and ``target``
        are cut into the model's ``chunks`` micro-batches, every stage runs its list of the
        model's ``schedule`` (GPipe or 1F1B) against its neighbours, and gradients
        accumulate in ``.grad`` on the workers. With ``scale_grads`` each micro-batch's loss
        is weighted by its share of the rows, so that a mean-reduced ``loss_fn`` gives the
        gradients of the whole batch. ``loss_fn``: a loss module (``nn.CrossEntropyLoss()``)
        or a function of ``disthook.nn.functional``. Returns the micro-batch losses."""
        from disthook.distributed import schedule as schedules
        from disthook.nn import functional

        for name, t in (("x", x), ("target", target)):
            if not isinstance(t, Tensor) or t._data.ndim == 0:
                raise TypeError(f"train_step(): {name} must be a Tensor with a batch "
                                f"dimension, got {type(t).__name__}")
        if len(target._data) != len(x._data):
            raise ValueError(f"train_step(): x has {len(x._data)} rows but target has "
                             f"{len(target._data)}")
        if isinstance(loss_fn, Module):
            loss = {"module": module_spec(loss_fn)}
        elif callable(loss_fn) and getattr(functional, getattr(loss_fn, "__name__", ""),
                                           None) is loss_fn:
            loss = {"function": loss_fn.__name__}
        else:
            raise TypeError("train_step(): loss_fn runs on the last worker, so it must be a "
                            "loss module (nn.CrossEntropyLoss()) or a function of "
                            f"disthook.nn.functional, got {loss_fn!r}")
        self._refuse_glue("train_step")
        if not self._chain_checked:
            self._check_chain(x)
        rows = len(x._data)
        m = min(self._chunks, rows)
        sizes = micro_batch_sizes(rows, m)
        scales = [n / rows if scale_grads else 1.0 for n in sizes]
        plan = schedules.schedule(self._schedule, len(self._addresses), m)
        step = uuid.uuid4().hex
        # optimizer.zero_grad() calls since the last request: each stage gets its own
        taken, zero_grads = self._hub.take_zero_grads(self)
        calls = []
        for s, address in enumerate(self._addresses):
            fields = {"step": step, "schedule": [list(a) for a in plan[s]],
                      "reply_to": self._hub.reply_to,
                      "zero_grad": None if zero_grads is None else zero_grads[s]}
            if s == 0:
                fields["inputs"] = split_rows(x._data, sizes)
            if s == len(self._addresses) - 1:
                fields.update(targets=split_rows(target._data, sizes), loss=loss,
                              scales=scales)
            calls.append((address, fields))
        started = time.perf_counter()
        try:
            replies = self._hub.request_all(calls, "train_step", ctx=step,
                                            what=f"a {self._schedule} training step",
                                            carries_zero_grads=True)
        except BaseException:
            self._hub.pending_zero_grads[:0] = taken  # they go again (see _run_stages)
            raise
        finally:
            for mb in range(m):
                self._hub.drop_context(f"{step}.{mb}")
        wall = time.perf_counter() - started
        # per stage: seconds computing, the step's wall time seen here, the worker's RSS peak
        object.__setattr__(self, "step_stats", [
            {"busy": r["result"]["busy"], "wall": wall, "peak_rss": r["result"]["peak_rss"]}
            for r in replies])
        return Tensor._make(np.array(replies[-1]["result"]["losses"], np.float32), None, 0)

    def _check_chain(self, x: Tensor) -> None:
        """Deployment runs the children one after the other, not the root's forward: make
        sure, once, that the root's forward does exactly that (``placement.check_chain``)."""
        check_chain(self._local, x)
        object.__setattr__(self, "_chain_checked", True)

    def train(self, mode: bool = True) -> RemoteModel:
        """Switch every stage to training (or, with False, evaluation) mode."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self._hub.request_all([(a, {"mode": mode}) for a in self._addresses], "train",
                              what="train()")
        object.__setattr__(self, "training", mode)
        return self

    # ---- the module tree ------------------------------------------------------------------------
    def __getattr__(self, name: str):
        local = self.__dict__.get("_local")
        if local is not None and name in local._modules:
            return RemoteModule(self, name)
        if local is not None and name in local.__dict__ and not callable(local.__dict__[name]):
            return local.__dict__[name]  # a plain attribute of the deployed module
        return super().__getattr__(name)

    def __getitem__(self, idx) -> RemoteModule:
        names = [n for stage in self._stage_names for n in stage]
        if isinstance(idx, int):
            if not -len(names) <= idx < len(names):
                raise IndexError(f"index {idx} is out of range")
            return RemoteModule(self, names[idx])
        raise TypeError(f"RemoteModel indices must be integers, not {type(idx).__name__}")

    def __len__(self) -> int:
        return sum(len(stage) for stage in self._stage_names)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def get_submodule(self, target: str) -> RemoteModule:
        self._local.get_submodule(target)  # the local twin raises torch's errors
        return RemoteModule(self, target)

    def get_parameter(self, target: str) -> RemoteParameter:
        self._local.get_parameter(target)  # the local twin raises torch's errors
        return RemoteParameter(self, target)

    def _owner(self, path: str) -> str:
        """The address of the worker holding the child that ``path`` starts with."""
        top = path.split(".", 1)[0]
        for names, address in zip(self._stage_names, self._addresses):
            if top in names:
                return address
        raise AttributeError(f"no child {top!r} in the deployed {self._class_name}")

    def _owner_name(self, path: str) -> str:
        """"stage i of worker W" for the child that ``path`` starts with."""
        top = path.split(".", 1)[0]
        for stage, wid, names in self.workers():
            if top in names:
                return f"stage {stage}, worker {wid}"
        return "the client"

    def _add_hook(self, kind: str, path: str, fn, proxy, *, tag: str | None = None,
                  **options) -> RemoteHandle:
        """Register ``fn`` as a ``kind`` hook on the worker holding ``path``; ``tag`` says
        who registered it (``"toolkit"``: disthook.hooks), as ``_hooks_on_workers`` tells."""
        return self._add_hooks([(kind, path, fn, proxy, options)], tag=tag)[0]

    def _add_hooks(self, hooks: list[tuple], *, tag: str | None = None) -> list[RemoteHandle]:
        """Register several hooks, each (kind, path, fn, proxy, options), in that order: one
        request per worker, all sent at once. If any fails, none stays registered."""
        entries = []
        for kind, path, fn, proxy, options in hooks:
            if not callable(fn):
                raise TypeError(f"hook must be callable, got {type(fn).__name__}")
            fields = {"hook": next(_hook_ids), "kind": kind, "path": path, "options": options,
                      "tag": tag}
            if isinstance(fn, WorkerHook):
                fields["worker_hook"] = fn.spec()
            entries.append((fn, kind, proxy, fields))
            self._hub.hooks[fields["hook"]] = entries[-1]
        try:
            self._register_hooks([fields for *_, fields in entries])
        except BaseException:
            with contextlib.suppress(Exception):  # those that were registered go again
                self._remove_hooks([fields["hook"] for *_, fields in entries])
            raise
        return [RemoteHandle(self, fields["hook"], fields["path"]) for *_, fields in entries]

    def _register_hooks(self, hooks: list[dict]) -> None:
        """Send add_hooks fields to the workers holding their modules (each worker registers
        its share in order, all or none)."""
        shares: dict[str, list] = {}
        for fields in hooks:
            shares.setdefault(self._owner(fields["path"]), []).append(fields)
        what = ", ".join(f"register a {f['kind']} hook on {f['path']!r}" for f in hooks[:3])
        self._hub.request_all([(address, {"hooks": share, "reply_to": self._hub.reply_to})
                               for address, share in shares.items()], "add_hooks",
                              what=what + (", ..." if len(hooks) > 3 else ""))

    def _remove_hooks(self, hook_ids: list[int]) -> None:
        """Remove client hooks from their workers, one request per worker, sent at once
        (ids removed before are skipped)."""
        shares: dict[str, list] = {}
        for hook_id in hook_ids:
            entry = self._hub.hooks.pop(hook_id, None)
            if entry is not None:
                # asked where the module is now (a recovered model's stages may have moved)
                shares.setdefault(self._owner(entry[3]["path"]), []).append(hook_id)
        if shares and self._hub.socks:
            self._hub.request_all([(address, {"hooks": ids}) for address, ids in shares.items()],
                                  "remove_hooks", what="remove_hooks")

    def _hooks_on_workers(self) -> list[dict]:
        """Every hook the stages hold, asked of their workers: {"hook", "kind", "path",
        "tag", "runs" ("client" or "worker"), "worker" (its id)}, stage by stage."""
        replies = self._hub.request_all([(a, {}) for a in self._addresses], "list_hooks",
                                        what="list_hooks")
        return [{**entry, "worker": w.id} for w, reply in zip(self._workers, replies)
                for entry in reply["result"]]

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

    def state_dict(self) -> OrderedDict:
        """Every stage's parameters and buffers by their names in the full model."""
        out = OrderedDict()
        for state in self._states():
            for name, arr in state["state"].items():
                out[name] = Tensor._make(np.array(arr), None, 0)
        return out

    def named_gradients(self) -> OrderedDict:
        """``.grad`` of every parameter that has one, fetched from its worker."""
        out = OrderedDict()
        for state in self._states():
            for name, arr in state["grads"].items():
                out[name] = Tensor._make(np.array(arr), None, 0)
        return out

    def zero_grad(self) -> None:
        self._hub.request_all([(a, {"zero_grad": True}) for a in self._addresses], "step",
                              what="zero_grad")

    def named_parameters(self):
        """(full name, ``RemoteParameter``) for every parameter, in the model's order."""
        for name, _ in self._local.named_parameters():
            yield name, RemoteParameter(self, name)

    def parameters(self):
        for _, p in self.named_parameters():
            yield p

    def load_state_dict(self, state_dict) -> None:
        """Copy tensors into the workers' parameters and buffers (all names must be known)."""
        own = self.state_dict()
        unknown = [n for n in state_dict if n not in own]
        missing = [n for n in own if n not in state_dict]
        if unknown or missing:
            raise RuntimeError(f"Error(s) in loading state_dict for Remote{self._class_name}: "
                               f"missing keys {missing}, unexpected keys {unknown}")
        calls = [(address, {"state": {n: _array(t) for n, t in state_dict.items()
                                      if n.split(".", 1)[0] in names}})
                 for names, address in zip(self._stage_names, self._addresses)]
        self._hub.request_all(calls, "set_state", what="load_state_dict")

    def save(self, path: str, *, optimizer: DistributedOptimizer | None = None,
             step: int | None = None) -> None:
        """A checkpoint of the model (and of ``optimizer``'s state) in directory ``path``:
        one .npz per stage and a manifest (disthook.distributed.checkpoint); written
        atomically, so an interrupted save leaves the previous checkpoint intact."""
        checkpoint.save(self, path, optimizer=optimizer, step=step)
        object.__setattr__(self, "_checkpoint", path)

    def load_checkpoint(self, path: str, *, optimizer: DistributedOptimizer | None = None):
        """Restore parameters and buffers (and ``optimizer``'s state) saved by ``save``;
        the model must have the structure it was saved with. Returns the saved step."""
        step = checkpoint.load(self, path, optimizer=optimizer)
        object.__setattr__(self, "_checkpoint", path)
        return step

    def recover(self, *, optimizer: DistributedOptimizer | None = None) -> int | None:
        """After ``WorkerLost``: place the stages again on live workers (a replacement from
        ``local_cluster(restart=True)``, or any other) and load the last checkpoint this
        model saved or loaded (and ``optimizer``'s state from it); the hooks registered on
        the model's modules and parameters are registered again, in their order, and their
        handles keep working. Returns the checkpoint's step."""
        path = self._checkpoint
        if path is None:
            lost = ", ".join(f"stage {self._hub.holders.get(a, (a, '?'))[1]} on worker "
                             f"{self._hub.holders.get(a, (a, '?'))[0]}" for a in self._hub.lost)
            raise ClusterError(f"cannot recover Remote{self._class_name}: {lost or 'a stage'} "
                               "is lost and the model has no checkpoint (remote.save(path))")
        stages = len(self._addresses)
        lost = set(self._hub.lost)
        deadline = time.monotonic() + 60
        while len([w for w in self._cluster.workers()
                   if w.alive and w.address not in lost]) < stages:
            if time.monotonic() > deadline:
                raise ClusterError(f"cannot recover Remote{self._class_name}: fewer than "
                                   f"{stages} live workers within 60 s")
            time.sleep(0.1)
        self._hub.close(unload=True)  # the surviving stages are dropped
        sizes = [len(names) for names in self._stage_names]
        cuts = [sum(sizes[:i]) for i in range(1, stages)]
        fresh = deploy(self._cluster, self._local, stages, split_points=cuts,
                       chunks=self._chunks, schedule=self._schedule, _exclude=lost)
        hooks = self._hub.hooks
        for name in ("_stage_names", "_addresses", "_workers", "_model_id", "_hub"):
            object.__setattr__(self, name, fresh.__dict__[name])
        object.__setattr__(self, "_closed", False)
        self._hub.hooks.update(hooks)
        if hooks:  # in registration order: the same firing order
            self._register_hooks([entry[3] for entry in hooks.values()])
        return self.load_checkpoint(path, optimizer=optimizer)

    def _stage_of(self, name: str) -> int:
        top = name.split(".", 1)[0]
        return next(i for i, names in enumerate(self._stage_names) if top in names)

    def to_local(self) -> Module:
        """An ordinary module with the workers' current parameters and buffers."""
        local = copy.deepcopy(self._local)
        local.load_state_dict(self.state_dict())
        return local

    def named_children(self):
        for name in self._local._modules:
            yield name, RemoteModule(self, name)

    def children(self):
        for _, child in self.named_children():
            yield child

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        """This model, then a ``RemoteModule`` per submodule, by the names of the local tree."""
        yield prefix, self
        for path, _ in self._local.named_modules():
            if path:
                yield (f"{prefix}.{path}" if prefix else path), RemoteModule(self, path)

    def modules(self, remove_duplicate: bool = True):
        for _, module in self.named_modules():
            yield module

    def workers(self) -> list[tuple[int, str, list[str]]]:
        """(stage, worker id, names of the children it holds) per stage."""
        return [(i, w.id, names) for i, (w, names)
                in enumerate(zip(self._workers, self._stage_names))]

    def close(self, unload: bool = True) -> None:
        """Disconnect; the workers drop the model's stages unless ``unload`` is False."""
        if not self._closed:
            self._closed = True
            if not unload:
                self._hub.pending_releases.clear()
            self._hub.flush_releases()
            self._hub.close(unload)

    def __repr__(self) -> str:
        """The module tree as torch prints it, each placed child marked with its stage and
        worker."""
        where = {name: f"stage {stage} on {wid}" for stage, wid, names in self.workers()
                 for name in names}
        head = f"{self._class_name}(  # deployed as {self._model_id}"
        lines = [head if self._local._modules else head + ")"]
        for name, child in self._local._modules.items():
            first, *rest = repr(child).split("\n")
            lines.append(f"  ({name}): {first}  # {where.get(name, 'on the client')}")
            lines += [f"  {line}" for line in rest]
        return "\n".join(lines) + ("\n)" if self._local._modules else "")


_hook_ids = itertools.count(1)


def _array(t) -> np.ndarray:
    return t.detach()._data if isinstance(t, Tensor) else np.asarray(t)


def deploy(cluster, module: Module, stages: int, split_points=None,
           balance: str = "params", sample_input=None, chunks: int = 1,
           schedule: str = "gpipe", _exclude: set | None = None) -> RemoteModel:
    """Place contiguous stages of ``module``'s children on the cluster's workers."""
    if not isinstance(module, Module):
        raise TypeError(f"deploy() takes a disthook.nn.Module, got {type(module).__name__}")
    children = list(module._modules.items())
    if not children:
        raise ValueError(f"{type(module).__name__} has no children to place in stages")
    own = [*module._parameters, *module._buffers]
    if own:
        raise ValueError(f"{type(module).__name__} has parameters or buffers of its own "
                         f"({', '.join(own)}); only its children are placed on workers, so "
                         "move them into a child module")
    check_options(chunks, schedule, balance, split_points, sample_input)
    if split_points is None and balance == "time":
        sizes = forward_times(module, sample_input)
    else:
        sizes = [sum(p.numel() for p in child.parameters()) if child is not None else 0
                 for _, child in children]
    cuts = placement.split_points(sizes, stages, split_points)
    alive = [w for w in cluster.workers() if w.alive and w.address not in (_exclude or ())]
    placed: dict[str, set] = {}  # worker id -> stages this client placed there a moment ago
    for other in getattr(cluster, "_deployments", []):
        if not other._closed:
            for i, w in enumerate(other._workers):
                placed.setdefault(w.id, set()).add(f"stage {i} of {other._model_id}")
    workers = choose_workers(alive, stages, placed)
    bounds = [0, *cuts, len(children)]
    stage_modules = [Sequential(OrderedDict(children[a:b])) for a, b in zip(bounds, bounds[1:])]
    for m in stage_modules:
        m.train(module.training)
    placement.check_ties(stage_modules)
    remote = RemoteModel(cluster, module, stage_modules, workers, timeout=cluster.timeout,
                         chunks=chunks, schedule=schedule)
    specs = [module_spec(m) for m in stage_modules]
    aliases = client_aliases()  # `import torch` in the model's files means what it means here
    try:
        for i, (spec, w) in enumerate(zip(specs, workers)):
            remote._hub.request(w.address, "load_stage", {
                "stage": i, "spec": spec, "main": main_script_of(spec),
                "aliases": aliases or None,
                "prev": workers[i - 1].address if i > 0 else None,
                "next": workers[i + 1].address if i + 1 < stages else None,
            }, what=f"load_stage {i} on {w.id}")
    except WorkerLost as exc:  # it died loading its stage: its last words say why
        remote.close()
        pid = {w.id: w.pid for w in workers}.get(exc.worker)
        lines = cluster._last_stderr(pid) if pid is not None else []
        if not lines:
            raise
        raise WorkerLost(exc.worker, exc.stage, exc.what, exc.context, stderr=lines) from None
    except BaseException:
        remote.close()  # the stages loaded so far are dropped again
        raise
    return remote
