"""A model deployed on workers, as seen from the client: ``RemoteModel`` and its autograd node.

``Cluster.deploy(module, stages=N)`` cuts the module's children into N contiguous stages
(balanced by parameter count, or at ``split_points``) and places each on a worker. Calling
the ``RemoteModel`` sends the input to the first stage; activations go worker to worker
directly and the last stage answers the client. The output is an ordinary Tensor whose
``grad_fn`` is a ``RemoteBackward`` node: when the client's backward reaches it, the gradient
goes to the last stage, travels back worker to worker, and the first stage answers with the
gradient for the input (when the input requires grad). Parameters' gradients accumulate on
the workers, in ``.grad`` of the real parameters, as in one process.

A forward with grad enabled opens a context on every stage; backward without
``retain_graph`` closes it, and a context whose output tensor is dropped without backward is
released by the client at its next call (workers also expire contexts after a deadline).
"""
from __future__ import annotations

import contextlib
import copy
import itertools
import os
import sys
import time
import uuid
import warnings
import weakref
from collections import OrderedDict

import numpy as np
import zmq

from disthook import autograd as torch_autograd
from disthook import wire
from disthook.autograd import engine, grad_mode
from disthook.autograd.graph import SECOND_BACKWARD_MSG, Node, gradient_edge
from disthook.distributed.hooks import WorkerHook
from disthook.distributed.rpc import (
    DEFAULT_TIMEOUT,
    ClusterError,
    RemoteTimeout,
    WorkerLost,
    raise_error,
)
from disthook.distributed.spec import class_path, main_script_of, module_spec
from disthook.distributed.values import pack, unpack
from disthook.nn.modules.container import Sequential
from disthook.nn.modules.module import Module
from disthook.tensor import Tensor

__all__ = ["DistributedOptimizer", "RemoteBackward0", "RemoteModel", "partition"]

_request_ids = itertools.count(1)


def partition(sizes: list[int], stages: int) -> list[int]:
    """Split points (indices where stages 2..N start) for contiguous stages of ``sizes``
    whose largest total is as small as possible; every stage gets at least one item."""
    n = len(sizes)
    if not 1 <= stages <= n:
        raise ValueError(f"cannot cut {n} children into {stages} stages: need 1 <= stages <= {n}")
    prefix = [0, *itertools.accumulate(sizes)]

    def cuts_for(limit: int) -> list[int] | None:  # greedy: fill each stage up to the limit
        cuts, start = [], 0
        for k in range(stages - 1):
            end = start + 1
            # leave at least one item for each of the stages after this one
            while end < n - (stages - 1 - k) and prefix[end + 1] - prefix[start] <= limit:
                end += 1
            cuts.append(end)
            start = end
        return cuts if prefix[n] - prefix[start] <= limit else None

    lo, hi = max(sizes, default=0), prefix[n]
    while lo < hi:
        mid = (lo + hi) // 2
        if cuts_for(mid) is None:
            lo = mid + 1
        else:
            hi = mid
    return cuts_for(lo)


class _Hub:
    """The client's sockets to the workers of one deployment, all with one identity, so that
    whichever worker finishes a pipelined request can answer the client directly."""

    def __init__(self, model: str, addresses: list[str], timeout: float,
                 holders: dict[str, tuple[str, int]] | None = None, keys=None,
                 heartbeat: float | None = None):
        self.model = model  # every message to a worker names the model it is for
        self.holders = holders or {}  # address -> (worker id, stage) for WorkerLost
        self.monitors: dict[zmq.Socket, str] = {}  # connection events -> address
        self.lost: dict[str, str] = {}  # address -> what was in flight when it went
        self.identity = f"client-{os.getpid()}-{uuid.uuid4().hex[:12]}".encode()
        self.ctx = zmq.Context.instance()
        self.timeout = timeout
        self.poller = zmq.Poller()
        self.socks: dict[str, zmq.Socket] = {}
        for address in addresses:
            if address not in self.socks:
                sock = self.ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.IDENTITY, self.identity)
                if keys is not None:
                    keys.dial(sock)
                # a worker that stops answering (hung, cut off) is dropped after
                # LOST_AFTER_BEATS intervals without a ping answer: calls end with WorkerLost
                if heartbeat:
                    ivl = max(1, int(heartbeat * 1000))
                    sock.setsockopt(zmq.HEARTBEAT_IVL, ivl)
                    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, wire.LOST_AFTER_BEATS * ivl)
                    sock.setsockopt(zmq.HEARTBEAT_TTL, wire.LOST_AFTER_BEATS * ivl)
                # a worker that dies closes its connection: the monitor reports it at once
                monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
                self.poller.register(monitor, zmq.POLLIN)
                self.monitors[monitor] = address
                sock.connect(address)
                self.poller.register(sock, zmq.POLLIN)
                self.socks[address] = sock
        self._pid = os.getpid()
        self.pending_releases: list[str] = []
        # DistributedOptimizer.zero_grad() calls not sent yet: the next forward through every
        # stage carries them (no round trip of their own); any other request sends them first
        self.pending_zero_grads: list[tuple] = []  # (optimizer, set_to_none)
        # hook id -> (callable, kind, module proxy, its add_hook fields), in registration order
        self.hooks: dict[int, tuple] = {}
        self.vjps: dict[str, tuple] = {}  # key -> (result tensor, leaves) for "vjp" events
        self.watched: dict[str, list] = {}  # key -> a hook's tensors that got tensor hooks
        self.hook_error: BaseException | None = None

    def _serve_event(self, sock: zmq.Socket, event: wire.Message) -> None:
        """Run the hook a worker asked for and answer it on the socket the event came on."""
        try:
            result = self._run_hook(event)
            frames = wire.encode("hook_reply", {"hook": event["hook"], "result": result},
                                 req=event.req, ctx=event.ctx)
        except Exception as exc:  # noqa: BLE001 - the worker must hear; we re-raise it later
            self.hook_error = exc
            frames = wire.encode("error", {"kind": type(exc).__name__, "message": str(exc)},
                                 req=event.req, ctx=event.ctx)
        sock.send_multipart(frames, copy=False)

    def _run_hook(self, event: wire.Message):
        kind = event["kind"]
        if kind == "retained":  # the gradient a worker's tensor retained, after its backward
            key, _, index = event["path"].rpartition("#")
            (grad,) = [unpack(a) for a in event["args"][1:]]
            self.watched[key][int(index)]._grad = grad
            return None
        if kind == "leaf_hook":
            key, _, index = event["path"].rpartition("#")
            leaf = self.watched[key][int(index)]
            (grad,) = [unpack(a) for a in event["args"][1:]]
            out = engine.run_tensor_hooks(leaf._backward_hooks, grad)
            return None if out is grad else pack(out)
        if kind == "vjp":
            result, leaves = self.vjps[event["path"]]
            (grad,) = [unpack(a) for a in event["args"][1:]]
            wanted = [t for t in leaves if t.requires_grad]
            grads = torch_autograd.grad(result, wanted, grad, allow_unused=True)
            return pack(list(grads))
        entry = self.hooks.get(event["hook"])
        if entry is None:
            raise RuntimeError(f"hook {event['hook']} was removed on the client")
        fn, _, proxy, _ = entry
        diff = event["args"][0]["diff"]
        leaves: list[Tensor] = []

        def leaf(array, requires_grad):
            t = Tensor._make(np.array(array), None, 0)
            if diff and requires_grad:
                t.requires_grad_(True)
            ref = weakref.ref(t)
            t.retain_grad = lambda: _retain_on_worker(ref())  # acts on the worker's tensor
            leaves.append(t)
            return t

        args = [unpack(a, leaf) for a in event["args"][1:]]
        if kind == "tensor":
            out = fn(*args)
        else:
            with grad_mode.set_grad_enabled(diff):
                out = fn(proxy, *args)
        key = f"{event.ctx}:{event.req}:{event['hook']}"
        value = None if out is None else self._pack_result(out, leaves, key)
        # tensors the hook put tensor hooks on (the Grad-CAM pattern): the worker hooks the
        # real tensors, and their gradients come here to run these hooks
        watch = [i for i, t in enumerate(leaves) if t._backward_hooks]
        retain = [i for i, t in enumerate(leaves) if t.__dict__.get("_retain_on_worker")]
        if watch or retain:
            self.watched[key] = leaves
            return {"value": value, "watch": watch, "retain": retain, "key": key}
        return value

    def _pack_result(self, value, leaves: list, key: str):
        """A hook's result: a leaf itself as ``{"same": i}``, a tensor computed from leaves
        with a key for its vector-Jacobian product, containers element by element."""
        if isinstance(value, Tensor):
            for i, t in enumerate(leaves):
                if value is t:
                    return {"same": i}
            if value.requires_grad and value.grad_fn is not None:
                k = f"{key}:{len(self.vjps)}"
                self.vjps[k] = (value, leaves)
                return {"tensor": value.detach()._data, "vjp": k}
            return pack(value)
        if isinstance(value, (tuple, list)):
            items = [self._pack_result(v, leaves, f"{key}.{i}") for i, v in enumerate(value)]
            return {"tuple" if isinstance(value, tuple) else "list": items}
        return pack(value)

    @property
    def reply_to(self) -> str:
        return self.identity.hex()

    def send(self, address: str, msg_type: str, fields: dict, *, req: int = 0,
             ctx: str | None = None) -> None:
        if not self.socks:
            raise RuntimeError(f"the deployed model {self.model} is closed; deploy it again "
                               "to use it")
        self.socks[address].send_multipart(
            wire.encode(msg_type, {"model": self.model, **fields}, req=req, ctx=ctx),
            copy=False)

    def request(self, address: str, msg_type: str, fields: dict, *, ctx: str | None = None,
                what: str = "") -> wire.Message:
        """Send to ``address``; wait for the reply with the same id from any worker."""
        return self.request_all([(address, fields)], msg_type, ctx=ctx, what=what)[0]

    def request_all(self, calls: list[tuple], msg_type: str, *,
                    ctx: str | None = None, what: str = "",
                    carries_zero_grads: bool = False) -> list[wire.Message]:
        """Send one request per (address, fields) or (address, fields, context) at once,
        then wait for every reply (from any worker), so the workers serve them side by side
        (and micro-batches flow through the stages as a pipeline); the replies in call
        order. The first error reply is raised once all have come."""
        self.flush_releases()
        if self.pending_zero_grads and not carries_zero_grads:
            self.flush_zero_grads()
        if self.lost:  # a worker of this model went away earlier
            self._raise_lost(next(iter(self.lost)), what or msg_type, ctx)
        try:
            return self._exchange(calls, msg_type, ctx, what)
        except KeyboardInterrupt:  # Ctrl-C: no stage may keep waiting for the others
            if msg_type == "train_step":
                self._abort_step(ctx, "the client was interrupted")
            raise

    def _exchange(self, calls: list[tuple], msg_type: str, ctx: str | None,
                  what: str) -> list[wire.Message]:
        reqs = []
        for call in calls:
            address, fields = call[0], call[1]
            reqs.append(next(_request_ids))
            self.send(address, msg_type, fields, req=reqs[-1],
                      ctx=call[2] if len(call) > 2 else ctx)
        replies: dict[int, wire.Message] = {}
        deadline = time.monotonic() + self.timeout
        while len(replies) < len(reqs):
            left = deadline - time.monotonic()
            events = dict(self.poller.poll(max(0, int(left * 1000)) + 1)) if left > 0 else {}
            if not events and time.monotonic() >= deadline:
                raise RemoteTimeout(f"no answer to {what or msg_type!r} within "
                                    f"{self.timeout:g} s")
            for sock in events:
                if sock in self.monitors:
                    if self._disconnected(sock):
                        address = self.monitors[sock]
                        self.lost[address] = what or msg_type
                        if msg_type == "train_step":  # the other stages must stop waiting
                            worker = self.holders.get(address, (address, -1))[0]
                            self._abort_step(ctx, f"worker {worker} is lost", skip=address)
                        in_flight = [c[2] if len(c) > 2 else ctx for c in calls]
                        self._raise_lost(address, what or msg_type,
                                         ", ".join(c for c in in_flight if c) or None)
                    continue
                try:
                    reply = wire.decode(sock.recv_multipart(copy=False))
                except wire.WireError:
                    continue
                if reply.type == "hook_event":  # a worker runs one of our hooks meanwhile
                    self._serve_event(sock, reply)
                    deadline = time.monotonic() + self.timeout  # the worker is alive
                    continue
                if reply.type == "warning":
                    _issue_warning(reply)
                    continue
                if reply.req in reqs:  # anything else: a late answer to a timed-out request
                    replies[reply.req] = reply
        # warnings a stage sent before passing its result on may still be on their way on
        # another socket than the last answer's: take those that are here (with one socket
        # they came before the answer, in order)
        for sock in dict(self.poller.poll(0)) if len(self.socks) > 1 else ():
            if sock in self.monitors:
                if self._disconnected(sock):
                    self.lost[self.monitors[sock]] = "no call (between calls)"
                continue
            try:
                late = wire.decode(sock.recv_multipart(copy=False))
            except wire.WireError:
                continue
            if late.type == "warning":
                _issue_warning(late)
        for req in reqs:
            reply = replies[req]
            if reply.type == "error":
                if self.hook_error is not None:  # our own hook failed: raise that
                    exc, self.hook_error = self.hook_error, None
                    raise exc
                raise_error(reply)
        return [replies[req] for req in reqs]

    @staticmethod
    def _disconnected(monitor: zmq.Socket) -> bool:
        from zmq.utils.monitor import recv_monitor_message

        try:
            event = recv_monitor_message(monitor, zmq.NOBLOCK)
        except zmq.Again:
            return False
        return event["event"] == zmq.EVENT_DISCONNECTED

    def _raise_lost(self, address: str, what: str, ctx: str | None):
        worker, stage = self.holders.get(address, (address, -1))
        raise WorkerLost(worker, stage, what, ctx)

    def _abort_step(self, step: str | None, reason: str, skip: str | None = None) -> None:
        """Tell every stage (but ``skip``) to give up training step ``step``."""
        for address in self.socks:
            if address != skip and step is not None:
                self.send(address, "pipe", {"step": step, "kind": "abort", "mb": -1,
                                            "reason": reason})

    def drop_context(self, ctx_id: str) -> None:
        """Forget the client-side hook graphs of a context whose backward is over."""
        prefix = f"{ctx_id}:"
        for store in (self.vjps, self.watched):
            for key in [k for k in store if k.startswith(prefix)]:
                del store[key]

    def flush_zero_grads(self) -> None:
        """Send this model's zero_grad() calls that no forward has carried, and wait."""
        pending, self.pending_zero_grads = self.pending_zero_grads, []
        for optimizer, set_to_none in pending:
            optimizer._each("zero_grad", set_to_none=set_to_none, only=self.model)

    def take_zero_grads(self, model) -> tuple[list, list[list[dict]] | None]:
        """The pending zero_grad() calls, taken, and the same as a forward field: per stage
        of ``model``, the optimizer specs of its share (None when nothing is pending)."""
        pending, self.pending_zero_grads = self.pending_zero_grads, []
        if not pending:
            return pending, None
        per_stage: list[list[dict]] = [[] for _ in model._addresses]
        for optimizer, set_to_none in pending:
            shares = optimizer.shares
            for index, address in enumerate(model._addresses):
                names = shares.get((id(model), address))
                if names:
                    per_stage[index].append(optimizer._spec(names, "zero_grad",
                                                            set_to_none=set_to_none))
        return pending, per_stage

    def flush_releases(self) -> None:
        if self.pending_releases and self.socks:
            contexts, self.pending_releases = self.pending_releases, []
            for ctx_id in contexts:
                self.drop_context(ctx_id)
            first = next(iter(self.socks))
            self.send(first, "release", {"contexts": contexts})

    def close(self, unload: bool = True) -> None:
        """Close the sockets; with ``unload`` the workers first drop the model's stages (sent
        without waiting: a worker that is gone has nothing left to drop)."""
        if os.getpid() == self._pid:
            for sock in self.socks.values():
                sock.disable_monitor()
            for monitor in self.monitors:
                monitor.close(linger=0)
            for address, sock in self.socks.items():
                if unload and address not in self.lost:
                    self.send(address, "unload", {})
                sock.close(linger=500 if unload else 0)
        self.socks = {}


_WARNING_CLASSES = {cls.__name__: cls for cls in (
    Warning, UserWarning, DeprecationWarning, PendingDeprecationWarning, SyntaxWarning,
    RuntimeWarning, FutureWarning, ImportWarning, UnicodeWarning, BytesWarning,
    ResourceWarning)}


def _issue_warning(msg: wire.Message) -> None:
    """A worker's warning, as the client's own (its category kept when it is a built-in)."""
    category = _WARNING_CLASSES.get(msg["category"], UserWarning)
    warnings.warn(msg["message"], category, stacklevel=4)


def _retain_on_worker(t: Tensor) -> None:
    """``retain_grad()`` of a tensor a client hook got: the worker's tensor retains its
    gradient, which comes here when that worker's backward is done."""
    if not t._requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    t._retain_on_worker = True


class RemoteBackward0(Node):
    """The client-side node of one remote forward: backward crosses to the workers. With
    micro-batches, one context per micro-batch: their backwards are sent at once and flow
    back through the stages as a pipeline."""

    def __init__(self, model: RemoteModel, ctx_ids: list[str], x: Tensor,
                 sizes: list[int] | None, stage: int | None = None):
        super().__init__()
        # the stage whose output this is: the last, or the one a run_until stopped at
        self._stage = len(model._addresses) - 1 if stage is None else stage
        self.next_functions = (gradient_edge(x),)
        self.needs_input_grad = (x._requires_grad,)
        self._input_meta = ((x._data.shape, x._data.dtype),)
        self._model = model
        self._ctx_ids = ctx_ids
        self._sizes = sizes  # rows of each micro-batch (None: one, the whole batch)
        # a graph dropped without backward: release its contexts at the next call
        self._finalizer = weakref.finalize(self, model._hub.pending_releases.extend, ctx_ids)

    def name(self) -> str:
        return "RemoteBackward0"

    def _backward(self, grads: list) -> tuple:
        if self._freed:
            raise RuntimeError(SECOND_BACKWARD_MSG)
        (g,) = grads
        # the workers keep their graphs exactly when this backward keeps the client's
        retain = engine.retains_graph()
        model = self._model
        parts = [g._data] if self._sizes is None else _split_rows(g._data, self._sizes)
        replies = model._hub.request_all(
            [(model._addresses[self._stage], {"stage": self._stage, "grads": [part],
                                     "retain_graph": retain, "reply_to": model._hub.reply_to,
                                     "mb": None if self._sizes is None else i}, ctx_id)
             for i, (part, ctx_id) in enumerate(zip(parts, self._ctx_ids))],
            "backward", what="backward through the remote stages")
        if not retain:
            self._finalizer.detach()  # the workers closed the contexts themselves
            for ctx_id in self._ctx_ids:
                model._hub.drop_context(ctx_id)
        gxs = [r["result"]["grads"][0] for r in replies]
        if all(gx is None for gx in gxs):
            return (None,)
        gxs = [np.zeros(p.shape, g._data.dtype) if gx is None else np.asarray(gx)
               for gx, p in zip(gxs, parts)]
        return (Tensor._make(np.concatenate(gxs) if len(gxs) > 1 else np.array(gxs[0]),
                             None, 0),)

    def _release(self) -> None:
        self._freed = True


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
    def forward(self, x: Tensor) -> Tensor:
        return self._run_stages(x)

    def _run_stages(self, x: Tensor, stop: str | None = None) -> Tensor:
        """The stages' forward on ``x``; with ``stop`` (a module path), only up to the stage
        holding that module, whose output is returned (the later stages do no work)."""
        if not isinstance(x, Tensor):
            raise TypeError(f"a RemoteModel takes one Tensor, got {type(x).__name__}")
        if not self._chain_checked:
            self._check_chain(x)
        grad = grad_mode.is_grad_enabled()
        rows = x._data.shape[0] if x._data.ndim else 0
        chunks = min(self._chunks, rows) if rows > 1 else 1
        sizes = None  # one micro-batch: the whole input
        if chunks > 1:
            sizes = _micro_batch_sizes(rows, chunks)
        parts = [x._data] if sizes is None else _split_rows(x._data, sizes)
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
        if not self._chain_checked:
            self._check_chain(x)
        rows = len(x._data)
        m = min(self._chunks, rows)
        sizes = _micro_batch_sizes(rows, m)
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
                fields["inputs"] = _split_rows(x._data, sizes)
            if s == len(self._addresses) - 1:
                fields.update(targets=_split_rows(target._data, sizes), loss=loss,
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
        sure, once, that the root's forward does exactly that (each child called once, in
        order, on the previous one's output; the last one's output returned), by running a
        copy of the module here with recording hooks."""
        twin = _bare_copy(self._local)
        calls = []
        for name, child in twin.named_children():
            child.register_forward_hook(
                lambda m, args, out, name=name: calls.append((name, args, out)))
        with grad_mode.no_grad():
            result = twin(x)
        names = list(twin._modules)
        chained = ([c[0] for c in calls] == names
                   and len(calls[0][1]) == 1 and calls[0][1][0] is x
                   and all(len(args) == 1 and args[0] is prev[2]
                           for prev, (_, args, _) in zip(calls, calls[1:]))
                   and result is calls[-1][2])
        if not chained:
            order = " -> ".join(c[0] for c in calls) or "no child"
            raise RuntimeError(
                f"{self._class_name}.forward does not just chain its children "
                f"{' -> '.join(names)} (it called {order}, or changed values between them): "
                "a deployed model runs its children one after the other, so it would compute "
                "something else. Deploy an nn.Sequential of the steps instead")
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
        from disthook.distributed import checkpoint

        shards = [{f"param/{n}": np.asarray(a) for n, a in st["state"].items()}
                  for st in self._states()]
        manifest = {"step": step, "class": class_path(type(self._local)),
                    "fingerprint": checkpoint.fingerprint(self._local),
                    "stages": self._stage_names, "chunks": self._chunks,
                    "schedule": self._schedule, "structure": _structure(self._local)}
        if optimizer is not None:
            if set(optimizer.models) != {id(self)}:
                raise ValueError("save(optimizer=...) takes an optimizer of this model's "
                                 "parameters only")
            state, groups = optimizer.state_by_name()
            scalars = {}
            for name, entries in state.items():
                shard = shards[self._stage_of(name)]
                for key, value in entries.items():
                    if isinstance(value, np.ndarray):
                        shard[f"opt/{name}/{key}"] = value
                    else:
                        scalars.setdefault(name, {})[key] = value
            manifest["optimizer"] = {"class": optimizer.class_name,
                                     "kwargs": optimizer.kwargs, "param_groups": groups,
                                     "scalars": scalars}
        checkpoint.write(path, manifest, shards)
        object.__setattr__(self, "_checkpoint", path)

    def load_checkpoint(self, path: str, *, optimizer: DistributedOptimizer | None = None):
        """Restore parameters and buffers (and ``optimizer``'s state) saved by ``save``;
        the model must have the structure it was saved with. Returns the saved step."""
        from disthook.distributed import checkpoint

        manifest, shards = checkpoint.read(path)
        if manifest["fingerprint"] != checkpoint.fingerprint(self._local):
            raise checkpoint.CheckpointError(
                f"{path} holds a checkpoint of another model ({manifest['class']}, other "
                f"parameter names or shapes) than this {self._class_name}")
        arrays = {k: v for shard in shards for k, v in shard.items()}
        self.load_state_dict({k[len("param/"):]: v for k, v in arrays.items()
                              if k.startswith("param/")})
        if optimizer is not None:
            saved = manifest.get("optimizer")
            if saved is None:
                raise checkpoint.CheckpointError(f"{path} was saved without optimizer state")
            if saved["class"] != optimizer.class_name:
                raise checkpoint.CheckpointError(
                    f"{path} holds {saved['class']} state, not {optimizer.class_name}")
            state: dict = {}
            for key, value in arrays.items():
                if key.startswith("opt/"):
                    name, _, entry = key[4:].rpartition("/")
                    state.setdefault(name, {})[entry] = value
            for name, entries in saved["scalars"].items():
                state.setdefault(name, {}).update(entries)
            optimizer.load_state_by_name(state, saved["param_groups"])
            if isinstance(manifest["step"], int):
                optimizer.steps = manifest["step"]  # its count goes on from the checkpoint's
        object.__setattr__(self, "_checkpoint", path)
        return manifest["step"]

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
        lines = [f"Remote{self._class_name}(id={self._model_id},"]
        for stage, wid, names in self.workers():
            lines.append(f"  stage {stage} on {wid}: {', '.join(names)}")
        return "\n".join(lines) + "\n)"


_hook_ids = itertools.count(1)


def _bare_copy(module: Module) -> Module:
    """A copy of ``module`` without the user's hooks, to run here for a check or a timing."""
    twin = copy.deepcopy(module)
    for m in twin.modules():
        for hooks in (m._forward_hooks, m._forward_pre_hooks, m._backward_hooks,
                      m._backward_pre_hooks):
            hooks.clear()
    return twin


def _forward_times(module: Module, x: Tensor, repeats: int = 3) -> list[int]:
    """Each child's forward time on ``x`` (chained, no_grad, best of ``repeats``), in
    microseconds, for balancing stages by time."""
    twin = _bare_copy(module)
    best = [float("inf")] * len(twin._modules)
    with grad_mode.no_grad():
        for _ in range(repeats):
            h = x
            for i, child in enumerate(twin._modules.values()):
                t0 = time.perf_counter()
                h = child(h)
                best[i] = min(best[i], time.perf_counter() - t0)
    return [max(1, int(t * 1e6)) for t in best]


def _structure(module: Module) -> dict:
    """The module's spec with every tensor's data replaced by its shape and dtype: the
    checkpoint's description of the model, rebuilt with the saved arrays by ``load``."""
    def strip(spec):
        for kind in ("params", "buffers"):
            for entry in spec[kind].values():
                if entry is not None and "data" in entry:
                    arr = entry.pop("data")
                    entry["shape"], entry["dtype"] = list(arr.shape), arr.dtype.str
        for child in spec["children"].values():
            if child is not None:
                strip(child)
        return spec

    return strip(module_spec(module))


def rebuild(structure: dict, shards: list[dict]) -> Module:
    """The module a checkpoint describes, with its saved arrays (buffers that are not saved,
    the non-persistent ones, start as zeros)."""
    from disthook.distributed.spec import build_module

    arrays = {k[len("param/"):]: v for shard in shards for k, v in shard.items()
              if k.startswith("param/")}

    def fill(spec, path):
        spec = dict(spec)
        for kind in ("params", "buffers"):
            entries = {}
            for name, entry in spec[kind].items():
                if entry is not None and "shape" in entry:
                    full = f"{path}.{name}" if path else name
                    entry = {k: v for k, v in entry.items() if k not in ("shape", "dtype")}
                    entry["data"] = arrays.get(full, np.zeros(spec[kind][name]["shape"],
                                                              spec[kind][name]["dtype"]))
                entries[name] = entry
            spec[kind] = entries
        spec["children"] = {n: None if c is None else fill(c, f"{path}.{n}" if path else n)
                            for n, c in spec["children"].items()}
        return spec

    # classes of the client's own script resolve to it, as they did when it saved
    return build_module(fill(structure, ""), main=sys.modules.get("__main__"))


def _micro_batch_sizes(rows: int, chunks: int) -> list[int]:
    """Rows per micro-batch, as torch.tensor_split cuts: the first rows % chunks get one
    more."""
    return [rows // chunks + (i < rows % chunks) for i in range(chunks)]


def _split_rows(arr: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    """``arr`` cut along dim 0 into consecutive parts of ``sizes`` rows (views)."""
    bounds = np.cumsum([0, *sizes])
    return [arr[a:b] for a, b in zip(bounds, bounds[1:])]


def _array(t) -> np.ndarray:
    return t.detach()._data if isinstance(t, Tensor) else np.asarray(t)


_optimizer_ids = itertools.count(1)


class DistributedOptimizer:
    """An optimizer of ``disthook.optim`` whose state and steps live with the parameters:
    each worker steps its own share, exactly as the local optimizer would.

    With ``checkpoint_every=K`` and ``checkpoint=PATH`` every K-th ``step()`` ends by saving
    the model with this optimizer's state to PATH (``remote.save``, atomic), tagged with the
    number of steps taken, which ``remote.recover(optimizer=...)`` returns after a loss."""

    def __init__(self, optimizer_class, params, *, checkpoint_every: int | None = None,
                 checkpoint: str | None = None, **kwargs):
        from disthook import optim

        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, optim.Optimizer)
                and getattr(optim, optimizer_class.__name__, None) is optimizer_class):
            raise TypeError(f"DistributedOptimizer takes an optimizer class of disthook.optim, "
                            f"got {optimizer_class!r}")
        params = list(params)
        if not params or not all(isinstance(p, RemoteParameter) for p in params):
            raise TypeError("DistributedOptimizer takes the parameters of a deployed model "
                            "(remote.parameters())")
        self.id = next(_optimizer_ids)
        self.class_name = optimizer_class.__name__
        self.kwargs = kwargs
        self.params = [(p._model, p._path) for p in params]
        self.models = {id(p._model): p._model for p in params}
        if (checkpoint_every is None) != (checkpoint is None):
            raise ValueError("DistributedOptimizer: checkpoint_every=K and checkpoint=PATH go "
                             f"together, got checkpoint_every={checkpoint_every!r}, "
                             f"checkpoint={checkpoint!r}")
        if checkpoint_every is not None:
            if (not isinstance(checkpoint_every, int) or isinstance(checkpoint_every, bool)
                    or checkpoint_every < 1):
                raise ValueError("DistributedOptimizer: checkpoint_every must be an int >= 1, "
                                 f"got {checkpoint_every!r}")
            if len(self.models) != 1:
                raise ValueError("DistributedOptimizer: checkpoint_every saves one model; "
                                 f"these parameters belong to {len(self.models)} models")
        self.checkpoint_every, self.checkpoint = checkpoint_every, checkpoint
        self.steps = 0  # step() calls so far (recover() sets it back to the checkpoint's)

    @property
    def shares(self) -> dict[tuple, list[str]]:
        """(model id, address) -> parameter names: where each share lives now (a recovered
        model's stages may have moved to other workers)."""
        shares: dict[tuple, list[str]] = {}
        for model, path in self.params:
            shares.setdefault((id(model), model._owner(path)), []).append(path)
        return shares

    def _each(self, action: str, per_share=None, only: str | None = None, **extra) -> dict:
        """Every worker's share at once (per model, or of the model whose id is ``only``),
        then wait for all of them; the results by (model id, address). ``per_share(names)``
        adds fields for one share."""
        results = {}
        shares = self.shares
        for model_id, model in self.models.items():
            if only is not None and model._model_id != only:
                continue
            keys = [key for key in shares if key[0] == model_id]
            calls = [(address, {"optimizer": self._spec(
                shares[(mid, address)], action, **extra,
                **(per_share(shares[(mid, address)]) if per_share else {}))})
                for mid, address in keys]
            replies = model._hub.request_all(calls, "step", what=f"optimizer {action}")
            results.update({key: r.get("result") for key, r in zip(keys, replies)})
        return results

    def _spec(self, names: list[str], action: str, **extra) -> dict:
        """The ``optimizer`` field of a step message for the share holding ``names``."""
        return {"id": self.id, "class": self.class_name, "kwargs": self.kwargs,
                "params": names, "action": action, **extra}

    def state_by_name(self) -> tuple[dict, list]:
        """({parameter name: {key: value}}, param_groups' hyperparameters) of all shares."""
        state, groups = {}, []
        for result in self._each("state").values():
            state.update(result["state"])
            groups = result["param_groups"]
        return state, groups

    def load_state_by_name(self, state: dict, param_groups: list) -> None:
        """Restore what ``state_by_name`` gave (each share takes its parameters' part)."""
        self._each("load", per_share=lambda names: {"state": {
            "state": {n: s for n, s in state.items() if n in names},
            "param_groups": param_groups}})

    def step(self) -> None:
        self._each("step")
        self.steps += 1
        if self.checkpoint_every and self.steps % self.checkpoint_every == 0:
            (model,) = self.models.values()
            model.save(self.checkpoint, optimizer=self, step=self.steps)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """As the local optimizer's. Sent with the model's next forward (which every stage
        sees before it computes a gradient), or before any other request to its workers:
        a training step pays no round trip for it."""
        for model in self.models.values():
            model._hub.pending_zero_grads.append((self, set_to_none))


class RemoteHandle:
    """Removes a client hook from the worker that fires it (idempotent, a context manager)."""

    def __init__(self, model: RemoteModel, hook_id: int, path: str):
        self.id, self._model, self._path = hook_id, model, path

    def remove(self) -> None:
        self._model._remove_hooks([self.id])

    def __enter__(self) -> RemoteHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


class RemoteModule:
    """A submodule of a deployed model, by its path; hooks registered here fire on its
    worker and run here, with exactly the signatures and return rules of one process."""

    def __init__(self, model: RemoteModel, path: str):
        self._model, self._path = model, path

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        target = f"{self._path}.{name}"
        twin = self._model._local.get_submodule(self._path)
        if name in twin._parameters:
            return RemoteParameter(self._model, target)
        if name in twin._modules:
            return RemoteModule(self._model, target)
        if name in twin._buffers:  # a buffer's current value (running stats change remotely)
            state = self._model._states(names=[target])["state"]
            return Tensor._make(np.array(state[target]), None, 0)
        if name == "training":
            return self._model.training
        if name in twin.__dict__ and not callable(twin.__dict__[name]):
            return twin.__dict__[name]  # a plain attribute (in_features, eps, ...)
        raise AttributeError(f"'{type(twin).__name__}' object (remote, at {self._path!r}) "
                             f"has no attribute '{name}'")

    def __getitem__(self, idx) -> RemoteModule:
        names = list(self._model._local.get_submodule(self._path)._modules)
        return RemoteModule(self._model, f"{self._path}.{names[idx]}")

    def register_forward_pre_hook(self, hook, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemoteHandle:
        return self._model._add_hook("forward_pre", self._path, hook, self, prepend=prepend,
                                     with_kwargs=with_kwargs)

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemoteHandle:
        return self._model._add_hook("forward", self._path, hook, self, prepend=prepend,
                                     with_kwargs=with_kwargs, always_call=always_call)

    def register_full_backward_hook(self, hook, prepend: bool = False) -> RemoteHandle:
        return self._model._add_hook("full_backward", self._path, hook, self, prepend=prepend)

    def register_backward_hook(self, hook) -> RemoteHandle:
        """The legacy hook: sees the gradients of the last op of the module's forward."""
        return self._model._add_hook("backward", self._path, hook, self)

    def register_full_backward_pre_hook(self, hook, prepend: bool = False) -> RemoteHandle:
        return self._model._add_hook("full_backward_pre", self._path, hook, self,
                                     prepend=prepend)

    def __repr__(self) -> str:
        local = self._model._local.get_submodule(self._path)
        return f"Remote({self._path}: {local!r})"


class RemoteParameter:
    """A parameter of a deployed model, living on its worker. It reads like a tensor (each
    read fetches the current value), takes tensor hooks that fire on the worker, and takes
    in-place updates that run on the worker: under ``no_grad()`` or through ``.data``, as for
    a local parameter (``p.copy_(t)``, ``p.data.fill_(0)``, ``p.requires_grad_(False)``)."""

    def __init__(self, model: RemoteModel, path: str, *, _data: bool = False):
        self._model, self._path, self._is_data = model, path, _data

    # ---- what it is, without a round trip (from the model's local twin) --------------------
    @property
    def _twin(self):
        return self._model._local.get_parameter(self._path)

    @property
    def shape(self):
        return self._twin.shape

    @property
    def dtype(self):
        return self._twin.dtype

    @property
    def device(self):
        return self._twin.device

    @property
    def requires_grad(self) -> bool:
        return False if self._is_data else self._twin.requires_grad

    @property
    def is_leaf(self) -> bool:
        return True

    def size(self, dim=None):
        return self._twin.size(dim) if dim is not None else self._twin.size()

    def dim(self) -> int:
        return self._twin.dim()

    @property
    def ndim(self) -> int:
        return self._twin.dim()

    def numel(self) -> int:
        return self._twin.numel()

    def __len__(self) -> int:
        return len(self._twin)

    # ---- reading: the current value from the worker -----------------------------------------
    def detach(self) -> Tensor:
        """A local tensor holding the parameter's current value."""
        state = self._model._states(names=[self._path])
        return Tensor._make(np.array(state["state"][self._path]), None, 0)

    @property
    def data(self) -> RemoteParameter:
        """The parameter without autograd: reads fetch, in-place ops write to the worker."""
        return RemoteParameter(self._model, self._path, _data=True)

    @property
    def grad(self) -> Tensor | None:
        grads = self._model._states(names=[self._path])["grads"]
        arr = grads.get(self._path)
        return None if arr is None else Tensor._make(np.array(arr), None, 0)

    def numpy(self) -> np.ndarray:
        if self.requires_grad and grad_mode.is_grad_enabled():
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                               "tensor.detach().numpy() instead.")
        return self.detach()._data

    def __array__(self, dtype=None, copy=None):
        arr = self.detach()._data
        return arr if dtype is None else arr.astype(dtype)

    def register_hook(self, hook) -> RemoteHandle:
        return self._model._add_hook("tensor", self._path, hook, self)

    # ---- in place, on the worker ---------------------------------------------------------------
    def requires_grad_(self, requires_grad: bool = True) -> RemoteParameter:
        self._inplace("requires_grad_", (bool(requires_grad),), {})
        self._twin.requires_grad_(bool(requires_grad))
        return self

    def _inplace(self, op: str, args: tuple, kwargs: dict) -> RemoteParameter:
        if (op != "requires_grad_" and not self._is_data and self.requires_grad
                and grad_mode.is_grad_enabled()):
            raise RuntimeError("a leaf Variable that requires grad is being used in an "
                               "in-place operation.")
        args = tuple(a.detach() if isinstance(a, RemoteParameter) else a for a in args)
        kwargs = {k: a.detach() if isinstance(a, RemoteParameter) else a
                  for k, a in kwargs.items()}
        self._model._hub.request(self._model._owner(self._path), "param_op", {
            "name": self._path, "op": op, "args": pack(list(args)), "kwargs": pack(kwargs)},
            what=f"{self._path}.{op}()")
        return self

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        attr = getattr(Tensor, name, None)
        if attr is None:
            raise AttributeError(f"'RemoteParameter' object has no attribute '{name}'")
        if name.endswith("_") and callable(attr):  # an in-place method: runs on the worker
            return lambda *args, **kwargs: self._inplace(name, args, kwargs)
        return getattr(self.detach(), name)  # anything else reads a local copy

    def __repr__(self) -> str:
        return f"RemoteParameter({self._path}, shape={tuple(self.shape)})"


def _reading(name: str):
    def method(self, *args):
        args = tuple(a.detach() if isinstance(a, RemoteParameter) else a for a in args)
        return getattr(self.detach(), name)(*args)  # the operators take no keywords

    method.__name__ = name
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__matmul__", "__rmatmul__", "__pow__", "__neg__",
              "__abs__", "__getitem__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
              "__ge__", "__float__", "__int__", "__bool__", "__iter__"):
    setattr(RemoteParameter, _name, _reading(_name))
RemoteParameter.__hash__ = object.__hash__  # __eq__ compares values; identity stays hashable


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
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks must be a positive int, got {chunks!r}")
    if schedule not in ("gpipe", "1f1b"):
        raise ValueError(f"schedule must be 'gpipe' or '1f1b', got {schedule!r}")
    if balance not in ("params", "time"):
        raise ValueError(f"balance must be 'params' or 'time', got {balance!r}")
    if balance == "time" and split_points is None and not isinstance(sample_input, Tensor):
        raise ValueError("balance='time' times the children's forward on an example batch: "
                         "pass sample_input=<a Tensor shaped like the model's input>")
    if split_points is None:
        if balance == "time":
            sizes = _forward_times(module, sample_input)
        else:
            sizes = [sum(p.numel() for p in child.parameters()) if child is not None else 0
                     for _, child in children]
        split_points = partition(sizes, stages)
    else:
        split_points = list(split_points)
        if (len(split_points) != stages - 1 or split_points != sorted(set(split_points))
                or (split_points and not 0 < split_points[0] <= split_points[-1] < len(children))):
            raise ValueError(f"split_points={split_points} must be {stages - 1} increasing "
                             f"indices between 1 and {len(children) - 1}")
    alive = [w for w in cluster.workers() if w.alive and w.address not in (_exclude or ())]
    if len(alive) < stages:
        raise ValueError(f"{stages} stages need {stages} workers; the cluster has {len(alive)}")
    bounds = [0, *split_points, len(children)]
    stage_modules = [Sequential(OrderedDict(children[a:b])) for a, b in zip(bounds, bounds[1:])]
    for m in stage_modules:
        m.train(module.training)
    # the least loaded workers first (by the stages they hold, as reported or as this client
    # placed them a moment ago), in registration order
    placed: dict[str, set] = {}
    for other in getattr(cluster, "_deployments", []):
        if not other._closed:
            for i, w in enumerate(other._workers):
                placed.setdefault(w.id, set()).add(f"stage {i} of {other._model_id}")
    workers = sorted(alive, key=lambda w: len(set(w.stages) | placed.get(w.id, set())))
    workers = workers[:stages]
    remote = RemoteModel(cluster, module, stage_modules, workers, timeout=cluster.timeout,
                         chunks=chunks, schedule=schedule)
    specs = [module_spec(m) for m in stage_modules]
    try:
        for i, (spec, w) in enumerate(zip(specs, workers)):
            remote._hub.request(w.address, "load_stage", {
                "stage": i, "spec": spec, "main": main_script_of(spec),
                "prev": workers[i - 1].address if i > 0 else None,
                "next": workers[i + 1].address if i + 1 < stages else None,
            }, what=f"load_stage {i} on {w.id}")
    except BaseException:
        remote.close()  # the stages loaded so far are dropped again
        raise
    return remote
