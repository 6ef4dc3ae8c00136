"""What a worker keeps for its clients, capped per client: forward graphs (by count and by
bytes), hooks and capture buffers; and the ``waits`` request, which says what it runs,
waits for and has queued (a stall's diagnosis).

A client is counted as who it authenticated as: with keys, every connection of one key
shares one allowance (opening more connections gets no more); without keys, each
connection is a client of its own (nothing tells them apart). Past a cap the request is
refused with a ``RuntimeError`` that says what is held and what to do.
"""
from __future__ import annotations

import numpy as np

from disthook.autograd.graph import _SavedTensor
from disthook.tensor import Tensor

__all__ = ["MAX_GRAPH_BYTES", "MAX_MODELS", "MAX_MODEL_BYTES", "MAX_OPTIMIZERS", "MAX_STAGE_NAMES_BYTES", "MAX_UNREAD_BYTES", "LimitChecks", "add_limit_options", "graph_nbytes",
           "limit_arguments", "mib"]

MAX_GRAPH_BYTES = 1 << 30  # the arrays one client's kept forward graphs may hold, per worker
MAX_MODELS = 64  # stages of models one client keeps loaded on one worker
MAX_MODEL_BYTES = 8 << 30  # the weights (parameters and buffers) of those stages
MAX_UNREAD_BYTES = 256 << 20  # answers ZeroMQ holds for one connection that reads none
# optimizers' shares one client keeps on one stage: each holds what the client chose for its
# param groups (a header's worth) and its state, until the client's connection closes
MAX_OPTIMIZERS = 256
# the names of the stages of all clients together on one worker, in UTF-8 bytes: each
# heartbeat names every one ("stage N of <model id>", an id of up to 256 characters), and
# one past the coordinator's 1 MiB header cap had the worker listed dead and every model on
# it no longer live (about 3700 stages of ASCII ids did: 60 keys' --max-models)
MAX_STAGE_NAMES_BYTES = 768 << 10


def _root(arr: np.ndarray) -> np.ndarray:
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr


def graph_nbytes(context, skip: set[int]) -> int:
    """The bytes of the arrays a kept forward graph holds: its inputs and outputs and what
    its nodes saved for the backward, each array counted once, those in ``skip`` (ids of
    the stage's weights, which are not the client's) not at all."""
    counted: dict[int, int] = {}
    kinds = _WHAT

    def add(value, depth: int = 0) -> None:
        what = kinds.get(type(value))
        if what is None:
            what = kinds[type(value)] = _what(type(value))
        if what == _NOTHING:
            return
        if what == _TENSOR:
            value = value._data
            if not isinstance(value, np.ndarray):
                return
            what = _ARRAY
        if what == _ARRAY:
            root = value if value.base is None else _root(value)
            if id(root) not in skip:
                counted[id(root)] = root.nbytes
        elif what == _SAVED:  # what a node keeps for its backward
            add(_saved_value(value))
        elif depth < 3:  # a tuple or a list
            for v in value:
                add(v, depth + 1)

    outputs = context.output if isinstance(context.output, list) else [context.output]
    add(context.inputs)
    add(outputs)
    seen: set[int] = set()
    todo = [o.grad_fn for o in outputs if isinstance(o, Tensor) and o.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        attrs = getattr(node, "__dict__", None)
        if attrs:
            for value in attrs.values():
                if type(value) is tuple:  # (a node's saved tensors, mostly)
                    for v in value:
                        if type(v) is _SavedTensor:
                            add(_saved_value(v))
                        elif kinds.get(type(v)) != _NOTHING:
                            add(v, 1)
                elif kinds.get(type(value)) != _NOTHING:
                    add(value)
        for fn, _ in node.next_functions:
            todo.append(fn)
    return sum(counted.values())


def _saved_value(saved: _SavedTensor):
    """What a saved tensor holds: the array of a node's own output, else the tensor (None
    under pack hooks). Its other slot is None or was never set (``_SavedTensor``'s
    invariant), and a read of an unset slot costs an exception."""
    return getattr(saved, "data" if saved.is_output else "tensor", None)


# what graph_nbytes finds in a value, by its type (decided once per type): most of what
# nodes keep is neither a tensor nor an array (shapes, flags, dims), skipped at once
_NOTHING, _TENSOR, _ARRAY, _SAVED, _SEQUENCE = range(5)
_WHAT: dict[type, int] = {}


def _what(t: type) -> int:
    if issubclass(t, Tensor):
        return _TENSOR
    if issubclass(t, np.ndarray):
        return _ARRAY
    if issubclass(t, _SavedTensor):
        return _SAVED
    if issubclass(t, (tuple, list)):
        return _SEQUENCE
    return _NOTHING


class LimitChecks:
    """The per-client caps of ``Worker`` (a mixin: it uses the worker's peers, state and
    stages)."""

    def _fellows(self, client: bytes) -> set[bytes]:
        """The connections counted with ``client``: with keys, all of its key's."""
        name = self.peers.names.get(client)
        if name is None:
            return {client}
        return {who for who, n in self.peers.names.items() if n == name} | {client}

    def check_contexts(self, st, client: bytes) -> None:
        """Refuse another kept graph past ``--max-contexts`` for the client on the stage."""
        fellows = self._fellows(client)
        held = sum(1 for (m, who, _) in self.state.contexts if m == st.model and who in fellows)
        if held >= self.max_contexts:
            raise RuntimeError(
                f"this client keeps {held} forward graphs of {st.name} waiting for their "
                "backward, the most one client may (--max-contexts): run backward, drop the "
                "outputs it does not need, or call under no_grad()")

    def check_graph_bytes(self, st, client: bytes, context) -> None:
        """Refuse to keep ``context`` when the client's kept graphs on this worker would
        hold more than ``--max-graph-mb``; its size is noted on it. The forwards its
        training steps here keep for their backward count too (``keep_step_graph``)."""
        skip = {id(_root(t._data)) for t in st.versions.tensors}
        context.nbytes = graph_nbytes(context, skip)
        fellows = self._fellows(client)
        held = self._graph_bytes(fellows) + self._grad_copies(fellows)
        if held + context.nbytes > self.max_graph_bytes:
            raise RuntimeError(
                f"this client's forward graphs kept on this worker for their backward hold "
                f"{mib(held)}, and this call's {mib(context.nbytes)} more would pass the cap "
                f"of {mib(self.max_graph_bytes)} (--max-graph-mb): run backward on the "
                "outputs it keeps (or drop them), or call under no_grad()")

    def _graph_bytes(self, fellows: set[bytes]) -> int:
        """What the kept forward graphs of ``fellows`` (one client's connections) hold here,
        those its training steps keep included."""
        held = sum(c.nbytes for (_, who, _), c in self.state.contexts.items() if who in fellows)
        return held + sum(sum(kept.values()) for (_, who, _), kept
                          in self.state.step_graphs.items() if who in fellows)

    def _grad_copies(self, fellows: set[bytes], adding: tuple = ()) -> int:
        """The bytes of the gradients ``fellows`` (one key's connections) hold on this
        worker's stages past the largest copy of each stage (``adding``: (a stage, the bytes
        of a copy more there)): each connection of a client has gradients of its own, and
        one copy per stage is the client's as in one process; more are weighed as graphs."""
        if len(fellows) < 2:
            return 0
        total = 0
        for st in self.stages.values():
            copies = [n for n in (grad_bytes(st, c) for c in fellows) if n]
            if adding and adding[0] is st:
                copies.append(adding[1])
            total += sum(copies) - max(copies, default=0)
        return total

    def check_grad_copy(self, st, client: bytes) -> None:
        """Refuse a request that would give ``client`` gradients on stage ``st`` (a backward,
        a training step, a gradient set) when its key's other connections hold some there
        already and that copy more would pass ``--max-graph-mb`` with the key's kept graphs.
        Before, every connection of a key kept a copy of a stage's gradients of its own,
        unweighed: 30 connections of one key that each ran a backward through a published
        model of 8 MiB of weights grew its worker by 259 MiB
        (tests/integration/test_s12_grad_copies.py),
        and the per-key caps were for nothing against them."""
        fellows = self._fellows(client)
        if len(fellows) < 2 or grad_bytes(st, client):  # (it has its copy: adds to it)
            return
        copy = sum(p._data.nbytes for p in st.params if p.requires_grad)
        before = self._grad_copies(fellows)
        more = self._grad_copies(fellows, (st, copy)) - before
        held = self._graph_bytes(fellows) + before
        if more and held + more > self.max_graph_bytes:
            raise RuntimeError(
                f"this client's connections hold gradients of {st.name} already, and a copy "
                f"more for this connection ({mib(copy)}), with the {mib(held)} its graphs "
                f"and other copies hold on this worker, would pass the cap of "
                f"{mib(self.max_graph_bytes)} (--max-graph-mb): each connection keeps "
                "gradients of its own; take them on fewer connections, or free them "
                "(zero_grad(), which sets them to None) on those that no longer need them")

    def keep_step_graph(self, st, client: bytes, step: str, mb: int, kept: tuple) -> None:
        """Count the forward of micro-batch ``mb`` that ``client``'s training ``step`` keeps
        on stage ``st`` for its backward (``kept``: its input and output, and what its nodes
        saved) as a kept graph is: refused past ``--max-graph-mb``, with its error. Before,
        a step whose gradients never came (a client that sent it to the first stage only)
        held its activations up to ``PIPE_TIMEOUT_S`` uncounted. ``drop_step_graph``
        forgets them at the backward and at the step's end (done, failed, its client gone,
        its wait past its deadline)."""
        context = _StepForward(kept[0], kept[1])
        self.check_graph_bytes(st, client, context)
        self.state.step_graphs.setdefault((st.model, client, step), {})[mb] = context.nbytes

    def drop_step_graph(self, model: str, client: bytes, step: str, mb: int | None = None):
        """Forget what ``keep_step_graph`` counted: one micro-batch's, or (None) the step's."""
        if mb is None:
            self.state.step_graphs.pop((model, client, step), None)
        else:
            self.state.step_graphs.get((model, client, step), {}).pop(mb, None)

    def step_graph_bytes(self, model: str | None = None) -> dict[bytes, int]:
        """Per client, the bytes its training steps keep here (of ``model``'s stage)."""
        out: dict[bytes, int] = {}
        for (m, who, _), kept in self.state.step_graphs.items():
            if model is None or m == model:
                out[who] = out.get(who, 0) + sum(kept.values())
        return out

    def on_waits(self, job):
        """What this worker runs, waits for and has queued now, per client (named as status
        names them): what a stalled call is stuck behind. With keys, a key reads its own
        (the cluster's own keys: everyone's), as in ``status``: before, any key read every
        client's calls, their models' ids and whose they were, as they ran."""
        mine, own = self.view_of(job.client)  # (with keys, a key's own: workers/status.py)
        return {"id": self.id, **self.state.describe(self.peers.label, own),
                "versions": {st.name: {"forks": st.versions.forks,
                                       "kept": len(st.versions.pending),
                                       "announced": len(st.versions.announced)}
                             for st in self.stages.values() if mine(st.keeper)}}

    def keeper(self, client: bytes) -> bytes | str:
        """Who a stage ``client`` loads is counted against: with keys its key's name (so
        the stages a key's connections loaded count after they went, and a client that
        reconnects gets no more), without keys its connection."""
        return self.peers.account(client)

    def check_models(self, client: bytes, model: str, nbytes: int) -> None:
        """Refuse a stage of ``nbytes`` of weights that ``client`` loads past what one
        client may keep loaded here (``--max-models``, ``--max-model-mb``); the stage of
        ``model`` it replaces does not count."""
        named = sum(len(st.name.encode()) for st in self.stages.values() if st.model != model)
        if named + len(model.encode()) + 32 > MAX_STAGE_NAMES_BYTES:  # (32: "stage N of ")
            raise RuntimeError(
                f"this worker holds {len(self.stages)} stages of its clients' models, whose "
                f"names take {named} bytes of each heartbeat, the most they may "
                f"({MAX_STAGE_NAMES_BYTES}): deploy on other workers, or unload a model no "
                "longer needed")
        keeper = self.keeper(client)
        held = [st for st in self.stages.values() if st.keeper == keeper and st.model != model]
        if len(held) >= self.max_models:
            raise RuntimeError(
                f"this client keeps {len(held)} models' stages loaded on this worker, the "
                f"most one client may (--max-models): unload one it no longer needs (close() "
                f"its deployment) before deploying another")
        kept = sum(st.nbytes for st in held)
        if kept + nbytes > self.max_model_bytes:
            raise RuntimeError(
                f"this client's models loaded on this worker hold {mib(kept)} of weights, "
                f"and this stage's {mib(nbytes)} more would pass the cap of "
                f"{mib(self.max_model_bytes)} (--max-model-mb): unload a model it no longer "
                "needs (close() its deployment), or place this one on more stages")

    def check_optimizers(self, st, client: bytes) -> None:
        """Refuse a new optimizer's share on the stage past ``MAX_OPTIMIZERS`` for the
        client: a share is never dropped before the client goes, and one that stepped
        nothing (a zero_grad, a state read) held 900 KiB of param-group keys the client chose,
        so that a read-only client grew a worker without bound."""
        fellows = self._fellows(client)
        held = sum(1 for who, _ in st.optimizers if who in fellows)
        if held >= MAX_OPTIMIZERS:
            raise RuntimeError(
                f"this client keeps the shares of {held} optimizers on {st.name}, the most "
                "one client may: each keeps its state on the worker until the client "
                "disconnects; make one optimizer and reuse it (its param groups' lr and "
                "state can be changed), or connect again to start afresh")

    def check_hooks(self, st, client: bytes, adding: int) -> None:
        fellows = self._fellows(client)
        held = sum(1 for who, _ in st.hooks if who in fellows)
        if held + adding > self.max_hooks:
            raise RuntimeError(
                f"this client holds {held} hooks on {st.name}; {adding} more would pass "
                f"{self.max_hooks}, the most one client may (--max-hooks): remove the hooks "
                "it no longer needs (handle.remove())")


def grad_bytes(st, client: bytes) -> int:
    """The bytes of ``client``'s gradients on stage ``st``: in its parameters' ``.grad``
    while it is the stage's installed client, else kept aside (``Stage.use_client``)."""
    grads = [p._grad for p in st.params] if client == st.installed else st.grads.get(client, ())
    return sum(g._data.nbytes for g in grads if g is not None)


class _StepForward:
    """A training step's forward of one micro-batch as ``graph_nbytes`` reads a context."""

    def __init__(self, inputs, output):
        self.inputs, self.output, self.nbytes = inputs, output, 0


def add_limit_options(p) -> None:
    """The worker command line's per-client caps (``argparse`` parser ``p``)."""
    from workers.queues import MAX_QUEUED, MAX_QUEUED_BYTES
    from workers.state import HOOK_TIMEOUT_S
    from workers.values import MAX_VALUE_BYTES

    p.add_argument("--max-contexts", type=int, default=4096, metavar="N",
                   help="forward graphs one client may keep on one model here, waiting for "
                        "their backward (default 4096); a forward past it is refused")
    p.add_argument("--max-hooks", type=int, default=4096, metavar="N",
                   help="hooks one client may register on one model here (default 4096)")
    p.add_argument("--max-capture-mb", type=int, default=256, metavar="MIB",
                   help="what one client's capture buffers may hold here (default 256)")
    p.add_argument("--max-graph-mb", type=int, default=MAX_GRAPH_BYTES >> 20, metavar="MIB",
                   help="what one client's forward graphs kept here may hold (default 1024)")
    p.add_argument("--max-models", type=int, default=MAX_MODELS, metavar="N",
                   help="stages of models one client may keep loaded here, also after its "
                        "connection went (default 64)")
    p.add_argument("--max-model-mb", type=int, default=MAX_MODEL_BYTES >> 20, metavar="MIB",
                   help="what the weights of the models one client keeps loaded here may "
                        "hold (default 8192)")
    p.add_argument("--max-queued", type=int, default=MAX_QUEUED, metavar="N",
                   help="requests one client may have waiting here behind its running ones "
                        "(default 4096); past it (or --max-queued-mb) a request is refused")
    p.add_argument("--max-queued-mb", type=int, default=MAX_QUEUED_BYTES >> 20, metavar="MIB",
                   help="what those waiting requests may hold, their arrays and their "
                        "headers as decoded (default 1024)")
    p.add_argument("--max-value-mb", type=int, default=MAX_VALUE_BYTES >> 20, metavar="MIB",
                   help="what the values one client keeps here (outputs of its calls that "
                        "stay on the worker) may hold (default 1024)")
    p.add_argument("--hook-timeout", type=float, default=HOOK_TIMEOUT_S, metavar="S",
                   help="seconds a call waits for its client's hook to answer (default "
                        "300); what waits for that call (the deployer's train()/eval(), a "
                        "reload) waits as long at most")
    p.add_argument("--max-unread-mb", type=int, default=MAX_UNREAD_BYTES >> 20, metavar="MIB",
                   help="what the answers one client (with keys, one key) has not read yet "
                        "may hold here "
                        "(default 256); past it an answer is dropped, its request answered "
                        "with an error")


def limit_arguments(args) -> dict:
    """``Worker``'s keyword arguments for the caps ``add_limit_options`` parsed."""
    return {"max_contexts": args.max_contexts, "max_hooks": args.max_hooks,
            "max_capture_bytes": args.max_capture_mb << 20,
            "max_graph_bytes": args.max_graph_mb << 20,
            "max_value_bytes": args.max_value_mb << 20,
            "max_models": args.max_models, "max_model_bytes": args.max_model_mb << 20,
            "max_queued": args.max_queued, "max_queued_bytes": args.max_queued_mb << 20,
            "max_unread_bytes": args.max_unread_mb << 20, "hook_timeout": args.hook_timeout}


def mib(n: int) -> str:
    """``n`` bytes in MiB, for messages."""
    return f"{n / (1 << 20):.1f} MiB"
