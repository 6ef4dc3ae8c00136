"""A backward in two parts, for zero-bubble pipeline schedules: first the gradients that
flow on (to the inputs, B), later those of chosen leaves, the weights (W).

``backward_split(outputs, grads, weights)`` runs the backward of ``outputs`` except the
part of the graph that leads only to ``weights``: the nodes whose every edge ends at one of
their AccumulateGrad nodes (``weight.t()``'s node, the weight's own). A node that runs and
has edges into that part computes the gradients of its other inputs only (its
``needs_input_grad`` says so for the call) and keeps its saved tensors and the gradients it
got; ``WeightGrads.run()`` later computes the rest from them and runs the deferred part as
the engine would have: the same values reach the same hooks (tensor hooks on the weights,
post-accumulate hooks, node hooks of the deferred nodes), summed in the same order, so
``.grad`` is what one backward gives, bit for bit. Only when hooks of the two parts fire
differs: the weights' hooks fire in ``run()``, after every hook of the first part.

A node with post-hooks computes all its gradients in the first part (its hooks see them
all); those of the deferred edges wait for ``run()`` to be delivered.
"""
from __future__ import annotations

import contextlib

from disthook.autograd import engine, grad_mode, saved_hooks
from disthook.autograd.graph import AccumulateGrad, gradient_edge

__all__ = ["WeightGrads", "backward_split"]


def _weight_only(roots: list, weights: set) -> set:
    """The nodes reachable from ``roots`` all of whose edges lead to AccumulateGrad nodes of
    ``weights`` (ids of tensors), those nodes included; never a root."""
    order, seen = [], set(roots)
    stack = [(root, iter(root.next_functions)) for root in roots]
    while stack:  # post-order: a node after every node it leads to
        node, edges = stack[-1]
        for nxt, _ in edges:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, iter(nxt.next_functions)))
                break
        else:
            stack.pop()
            order.append(node)
    found: set = set()
    for node in order:
        if type(node) is AccumulateGrad:
            if id(node.variable) in weights:
                found.add(node)
            continue
        nexts = [n for n, _ in node.next_functions if n is not None]
        if nexts and all(n in found for n in nexts):
            found.add(node)
    return found - set(roots)


class WeightGrads:
    """The deferred part of a ``backward_split``: ``run()`` once to compute it."""

    def __init__(self, records: list, retain_graph: bool):
        self._records = records
        self._retain = retain_graph
        self._done = False

    def run(self) -> None:
        """Compute the deferred gradients and run the deferred nodes (hooks, ``.grad``),
        node by node in the order the first part left them: each node's gradients reach
        the deferred nodes, and those that have all theirs run before the next node's are
        computed (one weight's gradient alive at a time, as in one backward)."""
        if self._done:
            raise RuntimeError("the weight gradients of this backward were already computed")
        self._done = True
        records, self._records = self._records, []
        task = engine._GraphTask(self._retain, True)
        buffers = task.buffers
        # what each deferred node waits for: the gradients the records bring it, and those of
        # the deferred nodes that lead to it
        expected: dict = {}
        for record in records:
            edges = record[3] if record[0] == "later" else [j for j, _ in record[2]]
            for j in edges:
                nxt = record[1].next_functions[j][0]
                expected[nxt] = expected.get(nxt, 0) + 1
        deps = task.deps = engine._count_dependencies(list(expected))
        for node, count in expected.items():
            deps[node] = deps.get(node, 0) + count
        task.roots = list(expected)
        with _running(task):
            for record in records:
                node = record[1]
                if record[0] == "later":
                    _, _, grads, edges = record
                    needs = node.needs_input_grad
                    node.needs_input_grad = tuple([n and j in edges
                                                   for j, n in enumerate(needs)])
                    try:
                        out = engine._apply(node, grads)
                    finally:
                        node.needs_input_grad = needs
                    pairs = [(j, out[j]) for j in edges]
                    if not self._retain:
                        node._release()
                else:
                    pairs, out = record[2], None
                ready, g = [], None
                for j, g in pairs:
                    nxt, nr = node.next_functions[j]
                    buf = buffers.get(nxt)
                    if buf is None:
                        buf = buffers[nxt] = [None] * engine._num_outputs(nxt)
                    if g is not None:
                        buf[nr] = g if buf[nr] is None else buf[nr] + g
                    deps[nxt] -= 1
                    if deps[nxt] == 0:
                        ready.append(nxt)
                del pairs, out, g  # the deferred nodes' buffers hold them now (and may
                # hand them to .grad without a copy)
                if ready:
                    engine._run(task, ready, None, False)


def backward_split(outputs: list, grads: list | None, weights, *,
                   retain_graph: bool = False) -> WeightGrads:
    """``autograd.backward(outputs, grads)`` but for the gradients of ``weights`` (leaf
    tensors), which ``run()`` of the result computes later. ``grads``: one per output (None:
    a scalar output's ones)."""
    from disthook import autograd

    outputs = list(outputs)
    seeds = autograd._make_grads(tuple(outputs), tuple(grads or [None] * len(outputs)))
    task = engine._GraphTask(retain_graph, True)
    root_nodes = []
    for t, g in zip(outputs, seeds):
        if not t.requires_grad:
            raise RuntimeError("element of outputs does not require grad and does not have a "
                               "grad_fn")
        node, nr = gradient_edge(t)
        buf = task.buffers.get(node)
        if buf is None:
            buf = task.buffers[node] = [None] * engine._num_outputs(node)
            root_nodes.append(node)
        buf[nr] = g if buf[nr] is None else buf[nr] + g
    task.deps = engine._count_dependencies(root_nodes)
    task.roots = root_nodes
    task.weight_only = _weight_only(root_nodes, {id(w) for w in weights})
    task.split_edges = {}
    for node in task.deps.keys() | set(root_nodes):
        if node in task.weight_only:
            continue
        edges = tuple(j for j, (n, _) in enumerate(node.next_functions)
                      if n is not None and n in task.weight_only)
        if edges:
            task.split_edges[node] = edges
    task.deferred = []
    with _running(task):
        engine._run(task, root_nodes, None, len(outputs) == 1)
    return WeightGrads(task.deferred, retain_graph)


@contextlib.contextmanager
def _running(task):
    """Run the engine on ``task`` as ``engine.execute`` does: without recording a graph,
    saved-tensor hooks entered inside it ending with it, the task known as running."""
    prev = grad_mode.is_grad_enabled()
    grad_mode._state.enabled = False
    prev_hooks = saved_hooks.snapshot()
    running = engine._running.__dict__.setdefault("tasks", [])
    running.append(task)
    try:
        yield
    finally:
        running.pop()
        grad_mode._state.enabled = prev
        saved_hooks.restore(prev_hooks)
