"""The backward engine: a dependency-counted walk of the graph, like torch's.

Two phases. First the graph reachable from the roots is counted (how many edges point at
each node) and, when ``inputs`` are given, pruned to the nodes that lead to them. Then nodes
run from a ready heap (newest node first, AccumulateGrad before anything), each in the order
hook_semantics.md §10 gives: tensor hooks, retain_grad, node pre-hooks, the node, node
post-hooks, then its gradients travel along its edges. No recursion, so deep graphs work.
"""
from __future__ import annotations

import itertools
import sys
import threading

# Names from modules that import this one are looked up at call time in sys.modules: they
# are loaded by then, and a from-import inside a hot function costs about 1.7 us per call.
from sys import modules as _loaded

import numpy as np

from disthook import _blas, _strides
from disthook.autograd import grad_mode, saved_hooks
from disthook.autograd.graph import AccumulateGrad, Node, gradient_edge


def _hook_name(hook) -> str:
    """The name torch puts in hook errors: ``__name__`` when it is a string, else <unknown>."""
    name = getattr(hook, "__name__", None)
    return name if isinstance(name, str) else "<unknown>"


def typename(obj) -> str:
    """A type's name as CPython's C level spells it (``float``, ``Foo``, ``numpy.ndarray``),
    which torch's messages quote."""
    t = type(obj)
    if t.__flags__ & (1 << 9) or t.__module__ == "builtins":  # a class made by Python code
        return t.__name__
    return f"{t.__module__}.{t.__name__}"


def _check_hook_result(original, result, hook) -> None:
    """Validate one value a hook returned in place of ``original`` (not None)."""
    Tensor = _loaded["disthook.tensor"].Tensor

    if original is None:
        raise RuntimeError("can't replace a None gradient with a non-None value")
    if not isinstance(result, Tensor):
        raise TypeError(f"expected Variable, but hook returned '{typename(result)}'")
    if result._data.dtype != original._data.dtype:
        raise RuntimeError(
            f"hook '{_hook_name(hook)}' has changed the type of value "
            f"(was {original.dtype.legacy_type} got {result.dtype.legacy_type})")
    if result._data.shape != original._data.shape:
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the size of value")


# the client checks a remote tensor's hook's result itself, naming the user's function (the
# worker's engine would name the stub that stands for it there)
check_hook_result = _check_hook_result


def _call_value_hooks(hooks, value):
    """Chain hooks over ``value``: a result that is neither None nor ``value`` itself replaces
    it, after validation. Returns (value, whether any hook replaced it)."""
    modified = False
    for hook in list(hooks.values()):
        result = hook(value)
        if result is None or result is value:
            continue
        _check_hook_result(value, result, hook)
        value = result
        modified = True
    return value, modified


def run_tensor_hooks(hooks, grad):
    """Chain a tensor's hooks over ``grad``; each non-None result replaces it, validated."""
    return _call_value_hooks(hooks, grad)[0]


def run_post_acc_hooks(hooks, t) -> None:
    """Post-accumulate-grad hooks of leaf ``t``: results are validated, then refused."""
    if _call_value_hooks(hooks, t)[1]:
        raise RuntimeError("Tensor post accumulate grad hooks should return None.")


def run_tuple_hooks(hooks, current: tuple, *extra) -> tuple | None:
    """Chain node hooks ``hook(current, *extra)`` whose results replace the tuple
    ``current``; each result is checked for type and length, and slot by slot against the
    value it replaces."""
    out = None
    for hook in list(hooks.values()):
        result = hook(current, *extra)
        if result is None or result is current:
            continue
        if not isinstance(result, tuple):
            raise TypeError(f"expected tuple, but hook returned '{typename(result)}'")
        if len(result) != len(current):
            raise RuntimeError(
                f"hook '{_hook_name(hook)}' has returned an incorrect number of values "
                f"(got {len(result)}, but expected {len(current)})"
            )
        for old, new in zip(current, result):
            if new is not None:
                _check_hook_result(old, new, hook)
        out = current = result
    return out


def accumulate_into_grad(t, grad, fresh: bool = False) -> None:
    """Add ``grad`` into leaf ``t.grad``: in place, or out of place under create_graph.

    The first gradient becomes ``.grad`` itself only when ``fresh`` (nothing else references
    it: see _take_owned; torch steals the buffer then too); otherwise ``.grad`` gets a copy,
    so it never aliases a seed, a hook's result or a gradient a hook kept.
    """
    if grad is None:
        return
    # a gradient marked sparse (Embedding(sparse=True)) stays so while only such add up
    sparse = grad.is_sparse and (t._grad is None or t._grad.is_sparse)
    if t._grad is None:
        if grad_mode.is_grad_enabled():
            # create_graph: a differentiable copy, as torch's CopyBackwards
            tensor_mod = _loaded["disthook.tensor"]
            CopyFrom, Tensor = tensor_mod.CopyFrom, tensor_mod.Tensor

            t._grad = CopyFrom.apply(Tensor._make(grad._data, None, 0), grad)
        elif fresh:
            t._grad = grad.detach()
        else:  # (a copy laid out as the leaf, torch's layout contract for .grad)
            out = _strides.new_like(_strides.held(t), grad._data.shape, grad._data.dtype)
            np.copyto(out, grad._data)
            t._grad = _loaded["disthook.tensor"].Tensor._make(out, None, 0)
    elif grad_mode.is_grad_enabled():
        t._grad = t._grad + grad
    else:
        np.add(t._grad._data, grad._data, out=t._grad._data, casting="unsafe")
        t._grad._vc[0] += 1
    if sparse or t._grad.is_sparse:
        t._grad.is_sparse = sparse


def _take_owned(grads: list, variable) -> tuple:
    """Take ``grads[0]`` out of the list; may it become ``.grad`` without a copy?

    As in torch, only when nothing else references it: not the tensor object (a seed, a
    gradient passed through clone or ``x + 0``, a tensor a hook returned or kept), not its
    array (another tensor on it, a view of it), and its layout is the parameter's. The
    engine drops its own references first, so the count is this function's alone.
    """
    grad = grads[0]
    grads[0] = None
    if grad is None:
        return None, False
    data = grad._data  # held by grad and by this local
    if (sys.getrefcount(grad) > _LOCAL_REFS or sys.getrefcount(data) > _LOCAL_REFS + 1
            or not data.flags.writeable or data.strides != variable._data.strides):
        return grad, False
    if data.base is None or (  # numpy's own memory, or a product's aligned result alone
            _blas.owns_memory(data) and sys.getrefcount(data.base) <= _LOCAL_REFS):
        return grad, True
    if not _views_all_of_unshared(grad, data):
        return grad, False
    return _loaded["disthook.tensor"].Tensor._make(data, None, 0), True


def _views_all_of_unshared(grad, data) -> bool:
    """Is ``data`` (``grad``'s array, a view) all of the array under it, densely, with
    nothing but ``grad`` (directly or through the tensor it views) holding that array?

    Linear's gradients are such views: the weight's is the product ``g.T @ x`` seen through
    two transposes (its node's and TBackward's), the bias's a sum over rows reshaped. torch
    steals them then too; a copy of a 1024 x 1024 gradient costs a third of the product that
    made it."""
    whole = data.base  # (numpy points a view at the array that holds the memory)
    if (type(whole) is not np.ndarray
            or not (whole.base is None or type(whole.base) is memoryview)
            or grad._grad_fn is not None or grad._requires_grad or whole.nbytes != data.nbytes
            or not (data.flags.c_contiguous or data.flags.f_contiguous)
            or _blas.address(whole) != _blas.address(data)):
        return False
    holders = 2  # data.base and this local
    root = grad._base
    if root is not None:
        if sys.getrefcount(root) > _LOCAL_REFS + 1:
            return False  # (held by grad._base and this local, no more)
        held = root._data
        if held is not whole and (held.base is not whole
                                  or sys.getrefcount(held) > _LOCAL_REFS + 1):
            return False  # (root._data a view of it, held by root and this local only)
        holders += 1  # root._data, or its base
        del held
    del root
    return sys.getrefcount(whole) <= holders + _LOCAL_REFS - 1


def _check_inference_sum(old, g, grads, grad_inputs, j: int) -> None:
    """``old`` (an inference tensor, say a hook's result made in ``inference_mode``) waits
    in a node's input buffer and ``g`` arrives for the same input: torch's engine adds
    ``g`` into ``old`` in place where it holds the last reference to ``old`` and to its
    memory, ``old`` is dense and grad mode is off, and an inference tensor changed in
    place outside the mode is torch's RuntimeError. The references counted are torch's:
    the engine's own locals that torch has released by then (the running node's inputs,
    its gradients already passed on, ``g``'s second name) are taken off."""
    if grad_mode._state.enabled or grad_mode._state.inference:
        return
    refs = sys.getrefcount(old) - _LOCAL_REFS - 2  # (this call, the caller's local, buf)
    refs -= sum(1 for t in grads if t is old) + sum(1 for t in grad_inputs[:j] if t is old)
    if g is old or refs > 0 or not _dense(old._data) or not _memory_alone(old):
        return
    from disthook.autograd import inference

    inference.check_inplace(old)


def _dense(data) -> bool:
    """torch's is_non_overlapping_and_dense: the elements fill the memory they span, once."""
    size = 1
    for stride, n in sorted(zip(map(abs, data.strides), data.shape)):
        if n != 1:
            if stride != size * data.itemsize:
                return False
            size *= n
    return True


def _memory_alone(t) -> bool:
    """Does no other live tensor share ``t``'s memory (torch's storage use count of one)?
    A view made under inference_mode keeps no base tensor, one made outside keeps it."""
    data = t._data
    root = data.base
    if root is None:
        return True
    if type(root) is not np.ndarray or root.base is not None:
        return False  # (memory from elsewhere: a frame, a buffer)
    holders = 1  # data.base
    base = t._base
    if base is not None:
        if sys.getrefcount(base) > _LOCAL_REFS + 1 or base._data is not root:
            return False  # (held by t._base and this local only, and owning the memory)
        holders += 1
    del base
    return sys.getrefcount(root) <= holders + _LOCAL_REFS  # (and this local)


def _local_refcount() -> int:
    """What sys.getrefcount reports for an object only one local variable holds (2 where the
    call's own argument counts, as up to CPython 3.13; less where it is borrowed)."""
    obj = object()
    return sys.getrefcount(obj)


_LOCAL_REFS = _local_refcount()


def inplace_error(saved, node: Node) -> RuntimeError:
    """torch's message for a saved tensor changed in place since it was saved.

    The tensor is named by the node that made it (for a node's own output, that node; else
    the tensor's current grad_fn), without the ``Backward<N>`` suffix; a leaf is not named.
    """
    from_numpy_dtype = _loaded["disthook._dtype"].from_numpy_dtype
    _strip_backward = _loaded["disthook.tensor"]._strip_backward

    t = saved.tensor
    data = saved.data if t is None else t._data
    legacy = from_numpy_dtype(data.dtype).legacy_type
    maker = node if saved.is_output else t._grad_fn
    nr = saved.output_nr if saved.is_output else t._output_nr
    which = "" if maker is None else (
        f", which is output {nr} of {_strip_backward(maker.name())},")
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: [{legacy} {list(data.shape)}]{which} is at version {saved.vc[0]}; "
        f"expected version {saved.version} instead. Hint: enable anomaly detection to find "
        "the operation that failed to compute its gradient, with "
        "torch.autograd.set_detect_anomaly(True, check_nan=False)."
    )


def _check_grad(node: Node, j: int, g, meta):
    """Make gradient j of ``node`` fit its input: sum away broadcast dims, cast dtype."""
    shape, np_dtype = meta
    if g.shape != shape:
        sum_to = _loaded["disthook.ops.base"].sum_to

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


_task_ids = itertools.count()


class _GraphTask:
    """State of one backward call."""

    def __init__(self, retain_graph: bool, accumulate: bool):
        self.id = next(_task_ids)  # torch's graph task id: one per backward call
        self.retain_graph = retain_graph
        self.accumulate = accumulate
        self.deps: dict = {}
        self.buffers: dict = {}
        # under inputs= only (torch's exec_info): nodes that run, and nodes needed at all
        # (running or capturing); None means every node runs
        self.runs: set | None = None
        self.needed: set | None = None
        self.captures: dict = {}  # (node, output_nr) -> slot indices in the results
        self.named: frozenset = frozenset()  # the nodes of the inputs it names
        self.roots: list = []
        # a backward split in two (disthook.autograd.split): the nodes that lead only to the
        # deferred leaves (they do not run here), the edges into them per node that runs,
        # and what each such node left for later (see split.WeightGrads)
        self.weight_only: set | None = None
        self.split_edges: dict | None = None
        self.deferred: list | None = None
        # leaves whose gradient goes elsewhere or comes with more (see holding_leaves)
        self.hold = None
        self.typed: dict = {}  # node class -> the graph's nodes of it (see nodes_of)

    # fn(exc) each, called when the backward fails (see on_error)
    failed: tuple | list = ()


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


def _execution_plan(roots, targets: set, capture_nodes: set) -> tuple:
    """(needed, runs) under ``inputs=``, by an iterative depth-first walk.

    A node runs when it is a target (``backward(inputs=)``) or some node it leads to is
    needed; it is needed when it runs or captures a gradient (``autograd.grad``).
    """
    needed: set = set()
    runs: set = set()
    seen: set = set()
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(root.next_functions))]
        while stack:
            node, it = stack[-1]
            for nxt, _ in it:
                if nxt is None:
                    continue
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, iter(nxt.next_functions)))
                    break
                if nxt in needed:
                    runs.add(node)
            else:
                stack.pop()
                if node in targets:
                    runs.add(node)
                if node in runs or node in capture_nodes:
                    needed.add(node)
                    if stack:
                        runs.add(stack[-1][0])
    return needed, runs


def execute(roots, grads, *, retain_graph: bool, create_graph: bool, inputs=None,
            accumulate: bool = True) -> list | None:
    """Run backward from ``roots`` (tensors) seeded with ``grads`` (tensors).

    ``inputs``: tensors to restrict to (``backward(inputs=)``: their nodes run) or to return
    gradients for (``autograd.grad``, ``accumulate=False``: their gradients are captured).
    Returns the captured gradients per input under ``autograd.grad``.
    """
    task = _GraphTask(retain_graph, accumulate)
    task.hold, _held.spec = _held.spec, None
    _running.preparing = inputs is not None  # (see names_inputs)
    try:  # (a preparation that raises leaves no stale flag for names_inputs)
        if inputs is not None:  # (see named_input_nodes)
            task.named = _running.named = frozenset(gradient_edge(t)[0] for t in inputs)
        root_nodes = []
        for t, g in zip(roots, grads):
            node, nr = gradient_edge(t)
            buf = task.buffers.get(node)
            if buf is None:
                buf = task.buffers[node] = [None] * _num_outputs(node)
                root_nodes.append(node)
            buf[nr] = g if buf[nr] is None else buf[nr] + g
        task.deps = _count_dependencies(root_nodes)
        task.roots = root_nodes

        results = None
        if inputs is not None:
            targets = set()
            for i, t in enumerate(inputs):
                node, nr = gradient_edge(t)
                if accumulate:
                    targets.add(node)  # backward(inputs=): the input's node runs
                else:
                    task.captures.setdefault((node, nr), []).append(i)
            if not accumulate:
                results = [None] * len(inputs)
            task.needed, task.runs = _execution_plan(
                root_nodes, targets, {node for node, _ in task.captures})
    except BaseException:
        _running.preparing = None
        raise

    prev = grad_mode.is_grad_enabled()
    grad_mode._state.enabled = create_graph
    # As torch's engine runs a graph task under a copy of the caller's thread-local state:
    # saved-tensor hooks entered or exited inside backward (in a hook) end with it.
    prev_hooks = saved_hooks.snapshot()
    running = _running.__dict__.setdefault("tasks", [])
    running.append(task)
    _running.preparing = None
    try:
        _run(task, root_nodes, results, len(roots) == 1)
    except Exception as exc:
        _report_anomaly(exc)
        for fn in task.failed:
            fn(exc)
        raise
    finally:
        running.pop()
        grad_mode._state.enabled = prev
        saved_hooks.restore(prev_hooks)
    return results


_running = threading.local()  # the backward calls running in this thread, innermost last


class _Held(threading.local):
    spec = None


_held = _Held()


class holding_leaves:
    """Within: the next backward started in this thread hands the gradient that reaches
    each leaf of ``spec.leaves`` (ids) to ``spec.take(leaf, grads)`` before the leaf's
    hooks run. It answers the gradients to go on with (their sum with gradients of earlier
    backwards, say), or None: the leaf's hooks do not run and its ``.grad`` stays as it is
    (a later backward will bring this gradient with its own). A deployed model's workers use
    it for a parameter that several calls of one forward use, whose backwards run apart:
    one process sums their gradients before the parameter's hooks and ``.grad`` see them."""

    def __init__(self, spec):
        self.spec = spec

    def __enter__(self):
        _held.spec = self.spec
        return self.spec

    def __exit__(self, *exc) -> None:
        _held.spec = None


def retains_graph() -> bool:
    """Whether the backward now running in this thread keeps the graph (retain_graph=True):
    for nodes whose saved state lives elsewhere, like the remote stages of a model."""
    tasks = getattr(_running, "tasks", None)
    if not tasks:
        raise RuntimeError("retains_graph() is only meaningful during a backward")
    return tasks[-1].retain_graph


def current_task_id() -> int:
    """The id of the backward now running in this thread, -1 outside backward."""
    tasks = getattr(_running, "tasks", None)
    return tasks[-1].id if tasks else -1


def names_inputs() -> bool:
    """Whether the backward this thread is preparing (reading its graph's edges), else the
    one running, was given ``inputs`` (autograd.grad, backward(inputs=))."""
    preparing = getattr(_running, "preparing", None)
    if preparing is not None:
        return preparing
    tasks = getattr(_running, "tasks", None)
    return bool(tasks) and tasks[-1].needed is not None


def named_input_nodes() -> frozenset:
    """The nodes of the ``inputs`` that the backward this thread is preparing, else the one
    running, names (empty where it names none)."""
    if getattr(_running, "preparing", None):
        return _running.named
    tasks = getattr(_running, "tasks", None)
    return tasks[-1].named if tasks else frozenset()


def will_execute(task: _GraphTask, node) -> bool:
    """Whether ``node`` runs or gives a gradient in ``task`` (torch's
    ``_will_engine_execute_node``): reached from the roots and, under ``inputs=``, needed."""
    if node is None or not (node in task.deps or node in task.roots):
        return False
    return task.needed is None or node in task.needed


def nodes_of(task: _GraphTask, kind: type) -> list:
    """The nodes of class ``kind`` (or a subclass) in the graph of ``task``, in no order."""
    found = task.typed.get(kind)
    if found is None:
        found = task.typed[kind] = [n for n in dict.fromkeys((*task.roots, *task.deps))
                                    if isinstance(n, kind)]
    return found


def on_error(fn) -> None:
    """Call ``fn(exc)`` should the backward now running in this thread fail (``exc``: what
    it raises), after the node running now: a node whose work cannot be undone says so."""
    task = _running.tasks[-1]
    if not task.failed:
        task.failed = []
    task.failed.append(fn)


def has_run(task: _GraphTask, node) -> bool:
    """Whether ``node`` of ``task``'s graph has run (or runs now): it is no longer owed a
    gradient and holds none."""
    return task.deps.get(node, 0) == 0 and node not in task.buffers


def _num_outputs(node: Node) -> int:
    return 1 if node._output_meta is None else len(node._output_meta)


def _run(task: _GraphTask, root_nodes, results, single_root: bool) -> None:
    ready = _ReadyQueue()
    deps = task.deps
    buffers = task.buffers
    needed = task.needed
    runs = task.runs
    captures = task.captures
    weight_only, split_edges, deferred = task.weight_only, task.split_edges, task.deferred
    retain_graph = task.retain_graph
    hold = task.hold
    for node in root_nodes:
        # torch starts from a lone root's node even when it leads to no input (its tensor
        # hooks fire); of several roots, only those needed
        if deps.get(node, 0) == 0 and (needed is None or single_root or node in needed):
            ready.push(node)
    queued = ready.items
    while queued:
        node = ready.pop()
        grads = buffers.pop(node)
        is_acc = type(node) is AccumulateGrad
        if needed is not None:
            if node not in runs:
                # only reached: its tensor hooks and retain_grad fire, then the captures
                _tensor_pre_hooks(node, grads, is_acc)
                if captures:
                    _capture(captures, node, grads, results)
                continue
            if captures:
                # a node that also runs gives its inputs' gradients before their hooks
                _capture(captures, node, grads, results)

        if hold is not None and is_acc and id(node.variable) in hold.leaves:
            grads = hold.take(node.variable, grads)
            if grads is None:
                continue  # its gradient waits for a later backward's

        # 1-2. tensor hooks of each output (chained), then retain_grad
        if node._tensor_hooks or node._retains or (is_acc and node.variable._backward_hooks):
            _tensor_pre_hooks(node, grads, is_acc)

        # 3. node pre-hooks
        if node._pre_hooks:
            grads = _run_pre_hooks(node, grads)

        # 4. the node itself
        if is_acc:
            # the previous node's gradients may still be referenced from these locals
            grad_inputs = g = None
            if task.accumulate:
                grad, owned = _take_owned(grads, node.variable)
                node.accumulate(grad, owned)
                grads[0] = grad
            grad_inputs = ()
        elif split_edges is not None and node in split_edges:
            grad_inputs = _split_apply(task, node, grads, split_edges[node])
        else:
            grad_inputs = _apply(node, grads)
            if needed is not None and node.drops_unneeded_grads:
                # torch computes only the gradients whose edge leads to a needed node
                grad_inputs = tuple([
                    g if g is None or (nxt is not None and nxt in needed) else None
                    for g, (nxt, _) in zip(grad_inputs, node.next_functions)])

        # 5. node post-hooks (grad_inputs first)
        if node._post_hooks:
            grad_inputs = _run_post_hooks(node, grad_inputs, grads)
        if not retain_graph and not (deferred and deferred[-1][1] is node
                                     and deferred[-1][0] == "later"):
            node._release()  # (one whose weight gradients come later keeps what it saved)

        # 6. along the edges
        for j, (nxt, nr) in enumerate(node.next_functions):
            if nxt is None:
                continue
            if needed is not None and nxt not in needed:
                continue
            if weight_only is not None and nxt in weight_only:
                continue  # its gradients go with the deferred part
            g = grad_inputs[j]
            if g is not None:
                buf = buffers.get(nxt)
                if buf is None:
                    meta = nxt._output_meta
                    buf = buffers[nxt] = [None] if meta is None else [None] * len(meta)
                old = buf[nr]
                if old is None:
                    buf[nr] = g
                else:
                    if type(old._vc) is not list:  # (an inference tensor's)
                        _check_inference_sum(old, g, grads, grad_inputs, j)
                    buf[nr] = old + g
                old = None
            elif nxt not in buffers:
                buffers[nxt] = [None] * _num_outputs(nxt)
            left = deps[nxt] - 1
            deps[nxt] = left
            if left == 0:
                if queued:
                    ready.push(nxt)
                else:  # a chain's next node: nothing to order it against
                    queued.append(nxt)


def _split_apply(task: _GraphTask, node: Node, grads: list, edges: tuple) -> tuple:
    """A node with edges into the deferred part: its gradients for the other edges now, and
    for those edges later (recorded in ``task.deferred``, in the order the nodes run, which
    is the order their gradients would have reached the deferred nodes). A node with
    post-hooks computes every gradient now, as the hooks must see them all."""
    if node._post_hooks:
        out = _apply(node, grads)
        task.deferred.append(("given", node, [(j, out[j]) for j in edges]))
        return out
    needs = node.needs_input_grad
    node.needs_input_grad = tuple([n and j not in edges for j, n in enumerate(needs)])
    try:
        out = _apply(node, grads)
    finally:
        node.needs_input_grad = needs
    task.deferred.append(("later", node, grads, edges))
    return out


def _run_pre_hooks(node: Node, grads: list) -> list:
    replaced = run_tuple_hooks(node._pre_hooks, tuple(grads))
    return grads if replaced is None else list(replaced)


def _run_post_hooks(node: Node, grad_inputs: tuple, grads: list) -> tuple:
    replaced = run_tuple_hooks(node._post_hooks, grad_inputs, tuple(grads))
    return grad_inputs if replaced is None else replaced


def _tensor_pre_hooks(node: Node, grads: list, is_acc: bool) -> None:
    """Steps 1-2 of a node: its outputs' tensor hooks, chained, then retain_grad."""
    if is_acc:
        hooks = node.variable._backward_hooks
        if hooks:
            grads[0] = run_tensor_hooks(hooks, grads[0])
        return
    if node._tensor_hooks:
        for nr, hooks in list(node._tensor_hooks.items()):
            if hooks:
                grads[nr] = run_tensor_hooks(hooks, grads[nr])
    if node._retains:
        for nr, ref in list(node._retains.items()):
            t = ref()
            g = grads[nr]
            if t is not None and g is not None:
                t._grad = g.detach().clone() if t._grad is None else t._grad + g


def _capture(captures: dict, node: Node, grads, results) -> None:
    for nr, g in enumerate(grads):
        slots = captures.get((node, nr))
        if slots:
            for i in slots:
                results[i] = g


def _apply(node: Node, grads: list) -> tuple:
    """Call the node's backward and fit each gradient to its input (torch's validate_outputs).

    A node that got no gradient at all is skipped (its gradients are all None) unless it
    must run anyway (custom Functions); multi-output nodes get zeros for outputs with no
    gradient; gradients for inputs that need none are dropped; broadcast gradients are
    summed back to the input's shape.
    """
    if len(grads) == 1:
        if grads[0] is None and not node.runs_without_grads:
            return (None,) * len(node.next_functions)
    elif not node.runs_without_grads and all(g is None for g in grads):
        return (None,) * len(node.next_functions)
    elif node._output_meta is not None and node.materialize_grads:
        grads = [_zeros(meta) if g is None else g for g, meta in zip(grads, node._output_meta)]
    out = node._backward(grads)
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


def _zeros(meta):
    Tensor = _loaded["disthook.tensor"].Tensor

    return Tensor._make(np.zeros(meta[0], dtype=meta[1]), None, 0)


# ---- anomaly mode: where it meets the engine (autograd/anomaly_mode.py) ----------------------

_plain_apply, _plain_post_hooks = _apply, _run_post_hooks


def set_node_check(check) -> None:
    """``check(node, grad_inputs)`` on each node's gradients after its post-hooks, while
    anomaly mode checks for NaN; None puts the engine back as it is without (no cost)."""
    global _apply, _run_post_hooks
    if check is None:
        _apply, _run_post_hooks = _plain_apply, _plain_post_hooks
        return

    def checked_apply(node: Node, grads: list) -> tuple:
        out = _plain_apply(node, grads)
        if not node._post_hooks:  # otherwise checked after them
            check(node, out)
        return out

    def checked_post_hooks(node: Node, grad_inputs: tuple, grads: list) -> tuple:
        out = _plain_post_hooks(node, grad_inputs, grads)
        check(node, out)
        return out

    _apply, _run_post_hooks = checked_apply, checked_post_hooks


def _report_anomaly(exc: Exception) -> None:
    """In anomaly mode, torch's warning for the node whose evaluation raised ``exc`` (found
    as ``_run``'s current node in the traceback; none when it was raised elsewhere)."""
    anomaly = _loaded.get("disthook.autograd.anomaly_mode")
    if anomaly is None or not anomaly.is_anomaly_enabled():
        return
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is _run.__code__:
            anomaly.report(tb.tb_frame.f_locals["node"])
            return
        tb = tb.tb_next
