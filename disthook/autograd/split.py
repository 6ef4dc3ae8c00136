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

``backward_split(..., shallow=True)`` leaves less for later: only the weights' own nodes,
so that the second part is the products that give the weights' gradients.
``run_together(parts)`` runs several such parts (a stage's micro-batches, zb-batched) as
one where nothing watches the weights: each weight gets their sum once, a Linear's as one
product over the micro-batches' rows stacked.
"""
from __future__ import annotations

import contextlib

from disthook.autograd import anomaly_mode, engine, grad_mode, saved_hooks
from disthook.autograd.graph import AccumulateGrad, gradient_edge
from disthook.ops.shape import T

__all__ = ["WeightGrads", "backward_split", "run_together"]


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
        self._take()
        records, self._records = self._records, []
        _deliver(records, self._retain, lambda i: _own_pairs(records[i], self._retain))

    def _take(self) -> None:
        if self._done:
            raise RuntimeError("the weight gradients of this backward were already computed")
        self._done = True


def _own_pairs(record, retain: bool) -> list:
    """(edge, gradient) of one record's deferred edges: computed now for a node that left
    them for later (and its saved tensors freed then, unless the graph is kept)."""
    if record[0] != "later":
        return record[2]
    _, node, grads, edges = record
    out = _apply_edges(node, grads, edges)
    if not retain:
        node._release()
    return [(j, out[j]) for j in edges]


def _apply_edges(node, grads: list, edges) -> tuple:
    """The node's gradients of ``edges`` only (its ``needs_input_grad`` says so for the
    call)."""
    needs = node.needs_input_grad
    node.needs_input_grad = tuple([n and j in edges for j, n in enumerate(needs)])
    try:
        return engine._apply(node, grads)
    finally:
        node.needs_input_grad = needs


def _deliver(records: list, retain: bool, pairs_of) -> None:
    """Run the deferred part of ``records`` (``pairs_of(i)``: the gradients record ``i``
    brings, computed when its turn comes) through the engine."""
    task = engine._GraphTask(retain, True)
    buffers = task.buffers
    # what each deferred node waits for: the gradients the records bring it, and those of
    # the deferred nodes that lead to it
    expected: dict = {}
    for record in records:
        for j in _edges(record):
            nxt = record[1].next_functions[j][0]
            expected[nxt] = expected.get(nxt, 0) + 1
    deps = task.deps = engine._count_dependencies(list(expected))
    for node, count in expected.items():
        deps[node] = deps.get(node, 0) + count
    task.roots = list(expected)
    with _running(task):
        for i, record in enumerate(records):
            node = record[1]
            pairs = pairs_of(i)
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
            del pairs, g  # the deferred nodes' buffers hold them now (and may hand them to
            # .grad without a copy)
            if ready:
                engine._run(task, ready, None, False)


def _edges(record) -> list:
    return list(record[3]) if record[0] == "later" else [j for j, _ in record[2]]


def run_together(parts: list) -> None:
    """Run the deferred parts of several backwards of one graph's shape (a stage's
    micro-batches) as one: each weight gets the sum of their gradients once, and a node that
    declares it (``stacked_rows``: Linear's product) computes that sum as one product over
    the micro-batches' rows stacked, where each would take a product of its own rows.

    Only where nothing can tell the difference: every deferred node is a weight's
    ``AccumulateGrad`` or a ``.t()`` of the weight (``Linear``), with no hook of any kind
    (tensor hooks on the weights, post-accumulate hooks, node hooks, ``retain_grad``), the
    parts' records alike (node classes, edges, the weights they reach), and anomaly mode
    off. Otherwise each part runs in
    turn, as ``run()`` runs it. The sums differ from those part by part by rounding only."""
    for part in parts:
        if part._done:
            raise RuntimeError("the weight gradients of this backward were already "
                               "computed")
    plan = _together(parts)
    if plan is None:
        for part in parts:
            part.run()
        return
    for part in parts:
        part._take()
    retain = any(part._retain for part in parts)
    columns = [part._records for part in parts]
    for part in parts:
        part._records = []
    first = columns[0]

    def pairs_of(i: int) -> list:
        records = [column[i] for column in columns]
        summed = _stacked(records) if plan[i] else None
        if summed is None:
            summed = {}
            for record in records:
                for j, g in _own_pairs(record, retain):
                    if g is not None:
                        summed[j] = g if summed.get(j) is None else summed[j] + g
        elif not retain:
            for record in records:
                record[1]._release()
        for record in records:  # each part's gradients are in the sum now
            if record[0] == "later":
                record[2].clear()
        return [(j, summed.get(j)) for j in _edges(first[i])]

    _deliver(first, retain, pairs_of)


def _together(parts: list) -> list | None:
    """Whether ``parts`` may run as one (see ``run_together``): per record, whether its node
    takes the stacked product; None when they may not."""
    if len(parts) < 2 or anomaly_mode.is_anomaly_enabled():
        return None
    columns = [part._records for part in parts]
    if len({len(c) for c in columns}) != 1:
        return None
    plan = []
    for records in zip(*columns):
        kind, node = records[0][0], records[0][1]
        edges = _edges(records[0])
        for record in records:
            if (record[0] != kind or type(record[1]) is not type(node)
                    or _edges(record) != edges):
                return None
            for j in edges:
                if _weight_of(record[1].next_functions[j][0]) is None:
                    return None
        for j in edges:  # every part's edge ends at the same weight
            if len({id(_weight_of(r[1].next_functions[j][0])) for r in records}) != 1:
                return None
        stacked = getattr(node, "stacked_rows", None)
        plan.append(kind == "later" and stacked is not None and set(edges) <= stacked[1])
    return plan


def _weight_of(node):
    """The weight whose gradient ``node`` leads to and nothing else, with nothing watching
    on the way: a hook-free ``AccumulateGrad``, or a hook-free ``.t()`` leading to one;
    else None."""
    if _watched(node):
        return None
    if type(node) is T._node_cls:
        node = node.next_functions[0][0]
        if node is None or _watched(node):
            return None
    if type(node) is not AccumulateGrad:
        return None
    variable = node.variable
    if variable._backward_hooks or variable._post_acc_hooks:
        return None
    return variable


def _watched(node) -> bool:
    return bool(node._pre_hooks or node._post_hooks or node._tensor_hooks or node._retains)


def _stacked(records: list) -> dict | None:
    """The summed gradients of the records' deferred edges as one product over the
    micro-batches' rows stacked (the node's ``stacked_rows``: the saved tensor that holds
    the rows, and the edges whose gradient sums over rows); None when the records do not
    fit it (another shape or layout), and then they are computed one by one."""
    node = records[0][1]
    position, _ = node.stacked_rows
    rows, grads = [], []
    for _, other, given, _ in records:
        # (a built-in node answers saved_tensors only inside its own backward)
        saved = other._unpack_saved()
        x = saved[position] if position < len(saved) else None
        if x is None or len(given) != 1 or given[0] is None:
            return None
        rows.append(x)
        grads.append(given[0])
    out = node.stack_rows(node, rows, grads, _edges(records[0]))
    if out is not None:  # each fitted to its input, as the engine fits a node's gradients
        for j, g in out.items():
            meta = node._input_meta[j]
            if g._data.shape != meta[0] or g._data.dtype != meta[1]:
                out[j] = engine._check_grad(node, j, g, meta)
    return out


def backward_split(outputs: list, grads: list | None, weights, *,
                   retain_graph: bool = False, shallow: bool = False) -> WeightGrads:
    """``autograd.backward(outputs, grads)`` but for the gradients of ``weights`` (leaf
    tensors), which ``run()`` of the result computes later. ``grads``: one per output (None:
    a scalar output's ones). ``shallow``: of the part that leads only to the weights, only
    the weights' own nodes wait (their ``AccumulateGrad``, and a ``.t()`` of a weight, as
    ``Linear`` takes it), so that what waits is the products that give the weights'
    gradients and the rest of the backward runs now (``run_together`` then takes several
    micro-batches' products as one)."""
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
    if shallow:
        task.weight_only = {node for node in task.weight_only
                            if type(node) is AccumulateGrad or (
                                type(node) is T._node_cls
                                and type(node.next_functions[0][0]) is AccumulateGrad)}
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
