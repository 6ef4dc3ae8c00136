"""``RemoteTapBackward0``: the client-side node of a tensor a client hook got from a worker
(a "tap"), through which a backward here reaches the worker's graph of that call: down to
the call's inputs, and to the tensors hooks got earlier in the same call."""
from __future__ import annotations

import contextlib
import threading
import weakref

import numpy as np

from disthook.autograd import engine, grad_mode
from disthook.autograd.graph import Node, gradient_edge
from disthook.distributed import attr_changes
from disthook.tensor import Tensor

__all__ = ["LiveEdges", "RemoteTapBackward0", "kept_result_left_out", "kept_result_only",
           "serving_vjp", "unlinked_taps_refused", "workers_keep", "workers_keeping"]


class _Vjp(threading.local):
    running = False  # a worker asked for a hook result's vector-Jacobian product here
    keeps = False  # the worker's pass that may ask for one keeps its graph for another pass


_vjp = _Vjp()


@contextlib.contextmanager
def workers_keeping(retain: bool):
    """While a backward request is in flight whose pass on the worker keeps the graph
    (``retain``: another pass through the call follows): a hook result's vjp the worker asks
    for keeps the client's part of that graph too, since the next pass asks for it again."""
    _vjp.keeps, before = retain, _vjp.keeps
    try:
        yield
    finally:
        _vjp.keeps = before


def workers_keep() -> bool:
    """Whether the backward request in flight keeps the worker's graph (workers_keeping)."""
    return _vjp.keeps


@contextlib.contextmanager
def serving_vjp():
    """While the client computes a vjp a worker asked for: gradients reach the stand-ins of
    the hook's tensors by design (and go back to the worker)."""
    _vjp.running, before = True, _vjp.running
    try:
        yield
    finally:
        _vjp.running = before


class LiveEdges(Node):
    """A node that stands for a worker's graph: its edges are its inputs' (set as a node's
    are), then one per tensor here that the worker's backward may also reach and that is
    still alive when the engine reads them as a graph starts (``_live_edges``: (key, node,
    output_nr, shape, dtype) each); the engine counts, feeds and checks those too."""

    _live: tuple = ()  # (each node sets its list as it is made)

    def _live_edges(self) -> list:
        raise NotImplementedError

    @property
    def next_functions(self) -> tuple:
        self._live = self._live_edges()
        return self._edges + tuple((node, nr) for _, node, nr, _, _ in self._live)

    @next_functions.setter
    def next_functions(self, edges: tuple) -> None:
        self._edges = edges

    @property
    def needs_input_grad(self) -> tuple:
        return self._needs + (True,) * len(self._live)

    @needs_input_grad.setter
    def needs_input_grad(self, needs: tuple) -> None:
        self._needs = needs

    @property
    def _input_meta(self) -> tuple:
        return self._meta + tuple((shape, dtype) for _, _, _, shape, dtype in self._live)

    @_input_meta.setter
    def _input_meta(self, meta: tuple) -> None:
        self._meta = meta


class RemoteTapBackward0(LiveEdges):
    """The part of a worker's graph from a call's inputs to a tensor a client forward hook
    got (a "tap"): the client's copy of that tensor is made from this node's output, so
    ``autograd.grad(kept.sum(), x)`` (Captum's neuron attributions) runs the worker's
    backward from that tensor down to the inputs and brings their gradients here.

    When the backward of the call's own output (its ``RemoteBackward0``) runs in the same
    backward, the workers did the whole graph already: the gradient reaching here may only
    be the one they sent for the tensor; more (a use of the kept tensor here, in what the
    backward differentiates) would need both at once and is refused."""

    def __init__(self, hub, address: str, ctx_id: str, key: str, inputs: list):
        super().__init__()
        self.next_functions = tuple(gradient_edge(t) for t in inputs)
        self.needs_input_grad = tuple(t._requires_grad for t in inputs)
        self._input_meta = tuple((t._data.shape, t._data.dtype) for t in inputs)
        self._hub, self._address, self._ctx_id, self._key = hub, address, ctx_id, key
        self._keeps = None  # the call's RemoteBackward0, once made: it holds the graph
        self._live: list[tuple] = []  # the earlier taps alive when the edges were read

    # the live edges: those of the tensors hooks got earlier in the same call (a layer's
    # input, kept by the hook that keeps its output: BackPACK's input0), which the worker's
    # backward from this tensor may reach
    def _live_edges(self) -> list:
        return [(key, *gradient_edge(t), shape, dtype)
                for key, t, shape, dtype in self._earlier_taps()]

    def _earlier_taps(self) -> list:
        """(key, tensor, shape, dtype) of the live taps of this call's context that came
        before this one (a DAG: only those can lie below it on the worker)."""
        if self._keeps is not None:
            entries = [(key, ref(), shape, dtype) for key, ref, shape, dtype
                       in self._keeps._taps]
        else:  # the call has not answered yet (a forward hook differentiates)
            entries = [(key, t, t._data.shape, t._data.dtype)
                       for key, t, _ in self._hub.taps.get(self._ctx_id, ())]
        earlier = []
        for key, t, shape, dtype in entries:
            if key == self._key:
                return earlier
            if t is not None and t._requires_grad and "#" in key and not key.endswith("@"):
                earlier.append((key, t, shape, dtype))
        return []  # (this tensor is not among them: nothing is known to lie below it)

    _ran_in = None  # the id of the backward it last ran in

    def _siblings_to_come(self) -> bool:
        """Whether the running backward still runs the node of another tap of this call
        (two loss terms from two layers' hooks, the output's backward done before): the
        workers keep the call's graph for it."""
        tasks = getattr(engine._running, "tasks", None)
        task = tasks[-1] if tasks else None
        return task is not None and any(
            tap is not self and tap._ctx_id == self._ctx_id and tap._ran_in != task.id
            for tap in engine.nodes_of(task, RemoteTapBackward0))

    def _done_after(self, node) -> None:
        """This tap needs no backward of its own after all: the workers let the call's
        graph go once no other is to come (unless the client's backward keeps it)."""
        node._after.discard(self._key)
        if not node._after and not engine.retains_graph():
            node._finalizer()  # (it asks the workers to release the contexts, once)
            for ctx_id in node._ctx_ids:
                self._hub.drop_context(ctx_id)

    def _wanted_taps(self) -> list[str]:
        """The keys of the earlier taps this backward differentiates to."""
        tasks = getattr(engine._running, "tasks", None)
        task = tasks[-1] if tasks else None
        if task is None or task.needed is None:
            return []
        return [key for key, node, _, _, _ in self._live if engine.will_execute(task, node)]

    def _inputs_wanted(self, task) -> bool:
        """Whether this backward needs the call's inputs' gradients too (a vjp between two
        tensors of one call, a layer's output to its input, does not: the worker stops at
        the taps, and the hooks below them do not fire)."""
        return task is None or task.needed is None or task.accumulate or any(
            node is not None and engine.will_execute(task, node) for node, _ in self._edges)

    def _backward(self, grads: list) -> tuple:
        (g,) = grads
        none = (None,) * (len(self._edges) + len(self._live))
        node = self._keeps  # the output's RemoteBackward0 (None: the output needs no grad)
        self._ran_in = engine.current_task_id()
        if _vjp.running or g is None:
            if g is None and node is not None and self._key in node._after:
                self._done_after(node)
            return none  # a vjp a worker asked for: the gradient goes back to it already
        # whether no backward from another tap of the call follows in this one
        last = not self._siblings_to_come()
        if node is not None and node._ran_in == engine.current_task_id():
            given = node._given.get(self._key)
            if not g._data.any() or (given is not None and (
                    g is given or np.array_equal(g._data, given._data))):
                return none  # what the workers sent: they did this part already
            if self._key not in node._after:
                raise RuntimeError(_CLIENT_USE)
            # the part this program's use here adds: the workers kept the graph for it
            node._after.discard(self._key)
            last = not node._after
            if given is not None:
                g = Tensor._make(g._data - given._data, None, 0)
        if grad_mode.is_grad_enabled():
            raise NotImplementedError(_CREATE_GRAPH)
        if node is None and self._hub.firing and self._hub.firing_ctx == self._ctx_id:
            # a hook of the call, before it answered (a tensor an earlier hook of the call
            # got links the two here): the worker has no graph of the call yet
            raise NotImplementedError(_UNLINKED.format(what="a forward hook"))
        stage = self._hub.holders.get(self._address, (None, 0))[1]
        tasks = getattr(engine._running, "tasks", None)
        task = tasks[-1] if tasks else None
        wanted = self._wanted_taps()
        hub = self._hub  # from inside a hook of a request there: it runs at once, nested
        within = hub.firing_ctx if hub.firing else None
        retain = engine.retains_graph() or not last
        with workers_keeping(retain):
            (reply,) = self._hub.request_all(
                [(self._address, {"stage": stage, "grads": [g._data], "start": self._key,
                                  "taps": wanted or None, "within": within,
                                  "inputs": not wanted or self._inputs_wanted(task),
                                  "retain_graph": retain, "reply_to": self._hub.reply_to,
                                  "accumulate": task is None or (task.accumulate
                                                                 and task.needed is None)},
                  self._ctx_id)],
                "backward", what="backward from a tensor a hook kept")
        if node is not None:  # what the hooks that fired set on their modules there
            attr_changes.apply(node._model, reply["result"].get("attrs"))
            if node._ran_in == engine.current_task_id() and last \
                    and not engine.retains_graph():
                node._finalizer.detach()  # the workers closed the contexts themselves
                for ctx_id in node._ctx_ids:
                    self._hub.drop_context(ctx_id)
        tapped = reply["result"].get("tapped") or {}
        return tuple(None if gx is None else Tensor._make(np.array(gx, dtype), None, 0)
                     for gx, dtype in [*((gx, None) for gx in reply["result"]["grads"]),
                                       *((tapped.get(key) if key in wanted else None, dtype)
                                         for key, _, _, _, dtype in self._live)])



def used_here(node) -> set[str]:
    """The keys of the taps of ``node``'s call (a RemoteBackward0 about to run) that the
    running backward differentiates through a use here too (a loss term computed from a
    hook's tensor: DeepInversion's batch-norm statistics, a perceptual or feature-matching
    loss): each tap's node then runs a backward of its own from the tap, with that part of
    its gradient, after the call's, and the workers keep the graph until the last one. The
    gradients are linear in what is given, so the parameters' and inputs' are one process's;
    a hook that a backward fires would fire once per pass and see a part, so with any (a
    module's backward hooks, a parameter's, a tensor hook on a tap) it stays refused."""
    tasks = getattr(engine._running, "tasks", None)
    task = tasks[-1] if tasks else None
    if task is None or task.needed is not None or len(node._ctx_ids) != 1:
        return set()  # (with micro-batches a tap is one micro-batch's, refused as before)
    # (a tap's tensor may be gone, its node held by what was computed from it)
    edges = [tap for _, tap, _, _, _ in node._live]
    taps = [tap for tap in engine.nodes_of(task, RemoteTapBackward0) if tap._keeps is node]
    used = {tap._key for tap in taps if task.deps.get(tap, 0) > edges.count(tap)
            or tap in task.buffers or tap in task.roots}
    if used and (any(tap._tensor_hooks or tap._retains for tap in taps)
                 or _backward_hooks_on(node._model)):
        return set()  # (the tap's own backward refuses, as before)
    return used


def _backward_hooks_on(deployment) -> bool:
    """Whether a client hook that a backward fires is registered on the deployed model
    (a module's, a parameter's, a global module hook), which a second pass would fire
    again."""
    from disthook.nn.modules import module as _module  # (nn imports this package's users)

    if _module._global_backward_hooks or _module._global_backward_pre_hooks:
        return True
    return any(kind not in ("forward", "forward_pre")
               for _, kind, _, _ in deployment._hub.hooks.values())


def unlinked_taps_refused(t: Tensor, ctx_id: str, module, kind: str):
    """``t._reach_from`` of a tensor a client hook got (see autograd's
    ``_reach_inputs_elsewhere``): an ``autograd.grad`` to it from a tensor of the same call
    on the worker (another tensor a hook got in that call: its node has ``_hook_ctx``) whose
    graph does not link to it here is refused, not answered 'not used' (or None): inside the
    forward hook that got both (the worker keeps them in the graph only once the hook
    answered), or in a chain cut into micro-batches."""
    ref = weakref.ref(t)
    what = f"a {kind} hook of {type(module).__name__!r}" if module is not None else "a hook"

    def reach_from(nodes, create_graph: bool) -> None:
        t = ref()
        if t is None or t._grad_fn in nodes:
            return
        if any(n.__dict__.get("_hook_ctx") == ctx_id for n in nodes):
            raise NotImplementedError(_UNLINKED.format(what=what))

    return reach_from


_UNLINKED = (
    "autograd.grad to a tensor that {what} of a deployed model got, from a tensor of the "
    "same call computed on its worker: the worker's graph does not link the two here (inside "
    "the forward hook that got them, the worker keeps them in its graph only once the hook "
    "has answered; in a chain cut into micro-batches, not at all). Take the product after "
    "the forward, keeping the tensors (module.input0, module.output = args[0], output), or "
    "in the layer's backward hook")


_CREATE_GRAPH = (
    "backward(create_graph=True) or autograd.grad(..., create_graph=True) through a "
    "deployed model: the gradients computed on its workers come back as values, without a "
    "graph, so they cannot be differentiated again (gradient penalties, double backward). "
    "Compute that part in one process (remote.to_local()), or keep create_graph=False")


_CLIENT_USE = (
    "a tensor that a forward hook got from a module on a worker is used on the client in "
    "what this backward differentiates, together with the model's output (a loss term "
    "computed from a hook's output, say), while a hook that a backward fires is on the "
    "deployed model (a module's backward hook, a parameter's hook, a tensor hook on a tensor "
    "a hook got): the workers run the output's part and the hooked tensor's part as two "
    "passes, and that hook would fire in each with a part of the gradient. Remove the "
    "backward hook for this step, compute that term in the model (or in a hook that returns "
    "the changed output), or detach() the hook's tensor")


def kept_result_left_out(key: str, t: Tensor, owner: Node) -> bool:
    """Whether ``t``, a tensor a forward hook computed and returned (its tap key ends in
    "="), is left out of this backward's edges: the vjp the worker asks for gives what it
    is computed from their gradients, and runs its tensor hooks and retain_grad, so an edge
    to it, where no gradient comes, would run those and the hooks past it (a learned
    steering vector's) again with None. It is an edge only for a backward that names its
    inputs (autograd.grad(out, kept), which stops there), and one without hooks of its own
    (naming such a one, autograd.grad finds it unused, as it did before it was a tap), and
    only where the backward names it or what lies between it and the tensors of the call of
    ``owner`` (its RemoteBackward0) the hook was given: else the gradient the engine would
    take through it is the call's own, which the worker's backward and the vjp give, and the
    edge would run the hooks there with None (``_names_within``)."""
    if not key.endswith("="):
        return False
    node = t._grad_fn
    return not engine.names_inputs() or node is None or (
        bool((node._tensor_hooks or {}).get(t._output_nr))
        or t._output_nr in (node._retains or {})) or not _names_within(
        node, engine.named_input_nodes(), owner)


def _names_within(node: Node, named: frozenset, owner: Node) -> bool:
    """Whether the graph of a hook's result, from ``node`` down to the call's tensors the
    hook was given (the taps ``owner`` keeps), holds a node of ``named``; another node
    that stands for a worker's graph there counts too (what lies past it may be named)."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        if n in named:
            return True
        if isinstance(n, LiveEdges):
            if isinstance(n, RemoteTapBackward0) and n._keeps is owner:
                continue  # (the call's own tensor: its graph is the worker's backward)
            return True
        stack.extend(nxt for nxt, _ in n.next_functions)
    return False


def kept_result_only(task, node) -> None:
    """A backward that names a tensor a forward hook returned (its node ``node``) may stop
    there; one that also goes on from it (it names the model's input, a parameter, or a
    tensor the hook's result was computed from, besides it) is refused: the workers give
    those gradients through their own backward, which asks for the hook's vjp, and a
    second route from the kept tensor would count them twice."""
    if task.runs is not None and node in task.runs:
        raise NotImplementedError(
            "a backward (autograd.grad or backward(inputs=...)) names a tensor that a "
            "forward hook of the deployed model returned and kept, and also tensors its "
            "gradient reaches past it (the model's input, its parameters, what the hook "
            "computed it from): the workers give those through their own backward, so one "
            "pass cannot also go on from the kept tensor. Take them in two calls: "
            "autograd.grad(out, kept, retain_graph=True), then autograd.grad(out, others)")
