"""The backward engine: a dependency-counted walk of the graph, like torch's.

Two phases. First the graph reachable from the roots is counted (how many edges point at
each node) and, when ``inputs`` are given, pruned to the nodes that lead to them. Then nodes
run from a ready heap (newest node first, AccumulateGrad before anything), each in the order
hook_semantics.md §10 gives: tensor hooks, retain_grad, node pre-hooks, the node, node
post-hooks, then its gradients travel along its edges. No recursion, so deep graphs work.
"""
from __future__ import annotations

import numpy as np

from disthook.autograd import grad_mode
from disthook.autograd.graph import AccumulateGrad, Node, gradient_edge


def _hook_name(hook) -> str:
    return getattr(hook, "__name__", None) or type(hook).__name__


def _legacy(t) -> str:
    return t.dtype.legacy_type


def run_tensor_hooks(hooks, grad):
    """Chain a tensor's hooks over ``grad``; each non-None result replaces it, validated."""
    from disthook.tensor import Tensor

    for hook in list(hooks.values()):
        result = hook(grad)
        if result is None:
            continue
        if not isinstance(result, Tensor):
            raise TypeError(f"expected Variable, but hook returned '{type(result).__name__}'")
        if grad is not None:
            if result.shape != grad.shape:
                raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the size of value")
            if result._data.dtype != grad._data.dtype:
                raise RuntimeError(
                    f"hook '{_hook_name(hook)}' has changed the type of value "
                    f"(was {_legacy(grad)} got {_legacy(result)})"
                )
        grad = result
    return grad


def run_tuple_hooks(hooks, call, expected: int) -> tuple | None:
    """Chain node hooks whose results replace a tuple; validates the type and length."""
    out = None
    for hook in list(hooks.values()):
        result = call(hook, out)
        if result is None:
            continue
        if not isinstance(result, tuple):
            raise TypeError(f"expected tuple, but hook returned '{type(result).__name__}'")
        if len(result) != expected:
            raise RuntimeError(
                f"hook '{_hook_name(hook)}' has returned an incorrect number of values "
                f"(got {len(result)}, but expected {expected})"
            )
        out = result
    return out


def accumulate_into_grad(t, grad) -> None:
    """Add ``grad`` into leaf ``t.grad``: in place, or out of place under create_graph."""
    if grad is None:
        return
    if t._grad is None:
        if grad_mode.is_grad_enabled():
            t._grad = grad
        else:
            # a fresh buffer owned by .grad, never an alias of a gradient used elsewhere
            t._grad = grad.detach().clone() if _is_shared(grad) else grad.detach()
    elif grad_mode.is_grad_enabled():
        t._grad = t._grad + grad
    else:
        np.add(t._grad._data, grad._data, out=t._grad._data, casting="unsafe")
        t._grad._vc[0] += 1


def _is_shared(grad) -> bool:
    # gradients produced by ops are fresh arrays; views or tensors users still hold are not
    return grad._base is not None or grad._data.base is not None or not grad._data.flags.writeable


def inplace_error(saved, node: Node) -> RuntimeError:
    t = saved.tensor
    shape = list(saved.data.shape if t is None else t.shape)
    legacy = (saved.data.dtype if t is None else t._data.dtype)
    from disthook._dtype import from_numpy_dtype

    where = f"output {saved.output_nr} of {node.name()}" if saved.is_output else (
        f"output {t._output_nr} of {t._grad_fn.name()}" if t._grad_fn is not None
        else "a leaf tensor"
    )
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: [{from_numpy_dtype(legacy).legacy_type} {shape}], which is {where}, is at "
        f"version {saved.vc[0]}; expected version {saved.version} instead. Hint: the backtrace "
        "further above can point at the operation that failed to compute its gradient. The "
        "variable in question was changed in there or anywhere later. Good luck!"
    )


def _check_grad(node: Node, j: int, g, meta):
    """Make gradient j of ``node`` fit its input: sum away broadcast dims, cast dtype."""
    shape, np_dtype = meta
    if g.shape != shape:
        from disthook.ops.base import sum_to

        try:
            g = sum_to(g, shape)
        except ValueError:
            raise RuntimeError(
                f"Function {node.name()} returned an invalid gradient at index {j} - got "
                f"{list(g.shape)} but expected shape compatible with {list(shape)}"
            ) from None
    if g._data.dtype != np_dtype:
        g = g.to(np_dtype)
    return g


class _ReadyQueue:
    """A max-heap on the node's sequence number, newest node first.

    It is the same binary heap as the C++ standard library's priority_queue that torch's
    engine uses (hole-based sift-down), so nodes with equal priority (all AccumulateGrad
    sinks) come out in the same order as in torch, and leaf hooks fire in torch's order.
    """

    __slots__ = ("items",)

    def __init__(self):
        self.items: list = []

    def __bool__(self) -> bool:
        return bool(self.items)

    def push(self, node: Node) -> None:
        items = self.items
        items.append(node)
        self._sift_up(len(items) - 1, 0, node)

    def _sift_up(self, hole: int, top: int, node: Node) -> None:
        items = self.items
        seq = node._seq
        parent = (hole - 1) // 2
        while hole > top and items[parent]._seq < seq:
            items[hole] = items[parent]
            hole = parent
            parent = (hole - 1) // 2
        items[hole] = node

    def pop(self) -> Node:
        items = self.items
        top = items[0]
        last = items.pop()
        n = len(items)
        if n:
            hole = 0
            child = 0
            while child < (n - 1) // 2:
                child = 2 * (child + 1)
                if items[child]._seq < items[child - 1]._seq:
                    child -= 1
                items[hole] = items[child]
                hole = child
            if n % 2 == 0 and child == (n - 2) // 2:
                child = 2 * (child + 1)
                items[hole] = items[child - 1]
                hole = child - 1
            self._sift_up(hole, 0, last)
        return top


class _GraphTask:
    """State of one backward call."""

    def __init__(self, retain_graph: bool, accumulate: bool):
        self.retain_graph = retain_graph
        self.accumulate = accumulate
        self.deps: dict = {}
        self.buffers: dict = {}
        self.needed: set | None = None
        self.captures: dict = {}  # (node, output_nr) -> slot index in results


def _count_dependencies(roots) -> dict:
    deps: dict = {}
    seen = set()
    stack = [n for n in roots]
    for n in roots:
        seen.add(n)
    while stack:
        node = stack.pop()
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            deps[nxt] = deps.get(nxt, 0) + 1
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return deps


def _needed_nodes(roots, targets: set) -> set:
    """Nodes from which some target is reachable (targets included), iteratively."""
    needed: set = set()
    state: dict = {}
    for root in roots:
        if root in state:
            continue
        stack = [(root, iter(root.next_functions))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            advanced = False
            for nxt, _ in it:
                if nxt is None:
                    continue
                if nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, iter(nxt.next_functions)))
                    advanced = True
                    break
                if nxt in needed:
                    needed.add(node)
            if advanced:
                continue
            stack.pop()
            if node in targets:
                needed.add(node)
            if node in needed and stack:
                needed.add(stack[-1][0])
    return needed


def execute(roots, grads, *, retain_graph: bool, create_graph: bool, inputs=None,
            accumulate: bool = True) -> list:
    """Run backward from ``roots`` (tensors) seeded with ``grads`` (tensors).

    ``inputs``: tensors to restrict to (``backward(inputs=)``) or to return gradients for
    (``autograd.grad``, ``accumulate=False``). Returns the captured gradients per input.
    """
    task = _GraphTask(retain_graph, accumulate)
    root_nodes = []
    for t, g in zip(roots, grads):
        node, nr = gradient_edge(t)
        buf = task.buffers.get(node)
        if buf is None:
            buf = task.buffers[node] = [None] * _num_outputs(node)
            root_nodes.append(node)
        buf[nr] = g if buf[nr] is None else buf[nr] + g
    task.deps = _count_dependencies(root_nodes)

    results = None
    if inputs is not None:
        results = [None] * len(inputs)
        targets = set()
        for i, t in enumerate(inputs):
            node, nr = gradient_edge(t)
            task.captures.setdefault((node, nr), []).append(i)
            if accumulate:
                # backward(inputs=): the input's node runs; under autograd.grad it runs only
                # when another input further up needs it
                targets.add(node)
        capture_nodes = {n for n, _ in task.captures}
        task.needed = _needed_nodes(root_nodes, targets | capture_nodes)
        task.capture_nodes = capture_nodes
        task.targets = targets

    prev = grad_mode.is_grad_enabled()
    grad_mode._state.enabled = create_graph
    try:
        _run(task, root_nodes, results, inputs)
    finally:
        grad_mode._state.enabled = prev
    return results


def _num_outputs(node: Node) -> int:
    return 1 if node._output_meta is None else len(node._output_meta)


def _run(task: _GraphTask, root_nodes, results, inputs) -> None:
    ready = _ReadyQueue()
    deps = task.deps
    buffers = task.buffers
    needed = task.needed
    for node in root_nodes:
        if deps.get(node, 0) == 0:
            ready.push(node)
    while ready:
        node = ready.pop()
        grads = buffers.pop(node)
        if needed is not None and node not in needed:
            continue

        # 1-2. tensor hooks of each output (chained), then retain_grad
        hooks_by_output = (
            {0: node.variable._backward_hooks} if type(node) is AccumulateGrad
            and node.variable._backward_hooks else node._tensor_hooks
        )
        if hooks_by_output:
            for nr, hooks in hooks_by_output.items():
                if hooks:
                    grads[nr] = run_tensor_hooks(hooks, grads[nr])
        if node._retains:
            for nr, ref in node._retains.items():
                t = ref()
                if t is not None and grads[nr] is not None:
                    g = grads[nr]
                    t._grad = g.detach().clone() if t._grad is None else t._grad + g

        if task.captures:
            _capture(task, node, grads, results, inputs)
        if needed is not None and node not in task.targets and not _leads_on(task, node):
            # only wanted for a capture: the node itself does not run
            _release_edges(task, node, ready)
            continue

        # 3. node pre-hooks
        if node._pre_hooks:
            replaced = run_tuple_hooks(
                node._pre_hooks, lambda h, cur: h(cur if cur is not None else tuple(grads)),
                len(grads),
            )
            if replaced is not None:
                grads = list(replaced)

        # 4. the node itself
        if type(node) is AccumulateGrad and not task.accumulate:
            grad_inputs = ()
        else:
            grad_inputs = _apply(node, grads)

        # 5. node post-hooks (grad_inputs first)
        if node._post_hooks:
            grad_outputs = tuple(grads)
            replaced = run_tuple_hooks(
                node._post_hooks,
                lambda h, cur: h(cur if cur is not None else grad_inputs, grad_outputs),
                len(grad_inputs),
            )
            if replaced is not None:
                grad_inputs = replaced
        if not task.retain_graph:
            node._release()

        # 6. along the edges
        for j, (nxt, nr) in enumerate(node.next_functions):
            if nxt is None:
                continue
            if needed is not None and nxt not in needed:
                continue
            g = grad_inputs[j]
            if g is not None:
                buf = buffers.get(nxt)
                if buf is None:
                    buf = buffers[nxt] = [None] * _num_outputs(nxt)
                buf[nr] = g if buf[nr] is None else buf[nr] + g
            elif nxt not in buffers:
                buffers[nxt] = [None] * _num_outputs(nxt)
            left = deps[nxt] - 1
            deps[nxt] = left
            if left == 0:
                ready.push(nxt)


def _leads_on(task: _GraphTask, node: Node) -> bool:
    """Under inputs=: does this node have to run for some input further up?"""
    return any(nxt is not None and nxt in task.needed for nxt, _ in node.next_functions)


def _release_edges(task: _GraphTask, node: Node, ready) -> None:
    # a node that does not run still releases its successors' dependency counts
    for nxt, _ in node.next_functions:
        if nxt is None or nxt not in task.needed:
            continue
        left = task.deps[nxt] - 1
        task.deps[nxt] = left
        task.buffers.setdefault(nxt, [None] * _num_outputs(nxt))
        if left == 0:
            ready.push(nxt)


def _capture(task: _GraphTask, node: Node, grads, results, inputs) -> None:
    for nr in range(len(grads)):
        slots = task.captures.get((node, nr))
        if not slots:
            continue
        g = grads[nr]
        for i in slots:
            results[i] = g
            t = inputs[i]
            if task.accumulate and g is not None and t._grad_fn is not None:
                # backward(inputs=[non-leaf]) accumulates into its .grad like a leaf
                t._grad = g.detach().clone() if t._grad is None else t._grad + g


def _apply(node: Node, grads: list) -> tuple:
    """Call the node's backward and fit each gradient to its input (torch's validate_outputs).

    Multi-output nodes get zeros for outputs with no gradient; gradients for inputs that need
    none are dropped; broadcast gradients are summed back to the input's shape.
    """
    if len(grads) == 1:
        if grads[0] is None:
            return _no_grads(node, grads)
    elif all(g is None for g in grads):
        return _no_grads(node, grads)
    elif node._output_meta is not None and node.materialize_grads:
        grads = [_zeros(meta) if g is None else g for g, meta in zip(grads, node._output_meta)]
    out = node._backward(grads)
    if type(node) is AccumulateGrad:
        return ()
    if type(out) is not tuple:
        out = (out,)
    n = len(node.next_functions)
    if len(out) != n:
        if len(out) > n and all(g is None for g in out[n:]):
            out = out[:n]
        else:
            raise RuntimeError(
                f"function {node.name()} returned an incorrect number of gradients "
                f"(expected {n}, got {len(out)})"
            )
    needs = node.needs_input_grad
    metas = node._input_meta
    fitted = None
    for j, g in enumerate(out):
        if g is None:
            continue
        if not needs[j]:
            if not node.drops_unneeded_grads:
                continue  # kept for post-hooks; the edge is empty so it goes nowhere
            g = None
        else:
            meta = metas[j]
            data = g._data
            if data.shape == meta[0] and data.dtype == meta[1]:
                continue
            g = _check_grad(node, j, g, meta)
        if fitted is None:
            fitted = list(out)
        fitted[j] = g
    return out if fitted is None else tuple(fitted)


def _no_grads(node: Node, grads: list) -> tuple:
    if type(node) is AccumulateGrad:
        node._backward(grads)
        return ()
    return (None,) * len(node.next_functions)


def _zeros(meta):
    from disthook.tensor import Tensor

    return Tensor._make(np.zeros(meta[0], dtype=meta[1]), None, 0)
