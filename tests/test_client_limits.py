"""Per-client caps (workers.limits), without sockets: with keys every connection of one key
shares one allowance; a kept graph's bytes count what it holds, the weights aside."""
import types

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from workers import limits
from workers.limits import LimitChecks, graph_nbytes
from workers.state import Context, WorkerState
from workers.versions import Versions


class _Worker(LimitChecks):
    def __init__(self, names):
        self.peers = types.SimpleNamespace(names=names)
        self.state = WorkerState("w0")
        self.max_contexts, self.max_hooks, self.max_graph_bytes = 2, 2, 1 << 20


def _stage(module):
    return types.SimpleNamespace(model="m", name="stage 0 of m", hooks={},
                                 versions=Versions(module))


def test_with_keys_connections_of_one_key_share_the_hooks_cap():
    worker = _Worker({b"a1": "alice", b"a2": "alice", b"b1": "bob"})
    st = _stage(nn.Linear(2, 2))
    st.hooks = {(b"a1", 1): None, (b"a2", 1): None}
    with pytest.raises(RuntimeError, match=r"holds 2 hooks .* \(--max-hooks\)"):
        worker.check_hooks(st, b"a2", 1)  # a second connection gets no more room
    worker.check_hooks(st, b"b1", 2)  # another key has its own


def test_without_keys_each_connection_is_counted_alone():
    worker = _Worker({})
    st = _stage(nn.Linear(2, 2))
    for ctx in ("c1", "c2"):
        worker.state.keep_context("m", ctx, Context(b"x", [], None, [], 0.0))
    with pytest.raises(RuntimeError, match="keeps 2 forward graphs"):
        worker.check_contexts(st, b"x")
    worker.check_contexts(st, b"y")


def test_a_graphs_bytes_are_its_inputs_outputs_and_saved_arrays_not_the_weights():
    lin = nn.Linear(256, 256)
    x = torch.randn(128, 256, requires_grad=True)
    out = torch.tanh(lin(x))
    context = Context(b"x", [x], out, [], 0.0)
    skip = {id(limits._root(t._data)) for t in (lin.weight, lin.bias)}  # as the worker does
    n = graph_nbytes(context, skip)
    act = 128 * 256 * 4
    assert 2 * act <= n <= 4 * act  # x, out and tanh's saved output; no weight (256 KiB)
    assert graph_nbytes(context, set()) >= n + lin.weight._data.nbytes
    worker = _Worker({})
    st = _stage(lin)
    worker.max_graph_bytes = n - 1
    with pytest.raises(RuntimeError, match=r"\(--max-graph-mb\)"):
        worker.check_graph_bytes(st, b"x", context)
    worker.max_graph_bytes = n
    worker.check_graph_bytes(st, b"x", context)
    assert context.nbytes == n and np.isfinite(n)


@pytest.mark.parametrize("make, nbytes", [
    (lambda x: (x * x).sum(), 128 + 4),  # x saved twice, counted once
    (lambda x: x.exp().sum(), 128 + 128 + 4),  # exp's saved output
    (lambda x: (x[:2] * x[:2]).sum(), 128 + 4),  # views of x are x's bytes
    (lambda x: torch.cat([x, x.exp()]).sum(), 128 + 128 + 4),
    (lambda x: [x.exp(), x * 2], 128 + 128 + 128 + 4),  # two outputs; the 2 as saved
])
def test_graph_bytes_count_each_array_once(make, nbytes):
    x = torch.randn(4, 8, requires_grad=True)  # 128 bytes
    context = Context(b"x", [x], make(x), [], 0.0)
    assert graph_nbytes(context, set()) == nbytes
    assert graph_nbytes(context, {id(x._data)}) == nbytes - 128


def _every_saved_slot(context, skip):
    """The plain count graph_nbytes makes faster: every array reachable from the inputs,
    the outputs and every slot and attribute of the nodes (a reference for the test)."""
    from disthook.autograd.graph import _SavedTensor
    arrays = {}

    def add(v):
        if isinstance(v, torch.Tensor):
            v = v._data
        if isinstance(v, np.ndarray):
            root = limits._root(v)
            if id(root) not in skip:
                arrays[id(root)] = root.nbytes
        elif isinstance(v, _SavedTensor):
            for slot in ("data", "tensor"):
                add(getattr(v, slot, None))
        elif isinstance(v, (tuple, list)):
            for x in v:
                add(x)

    outputs = context.output if isinstance(context.output, list) else [context.output]
    add(context.inputs), add(outputs)
    todo, seen = [o.grad_fn for o in outputs], set()
    while todo:
        node = todo.pop()
        if node is not None and id(node) not in seen:
            seen.add(id(node))
            for v in getattr(node, "__dict__", {}).values():
                add(v)
            todo.extend(fn for fn, _ in node.next_functions)
    return sum(arrays.values())


def _registered(x):
    out = x.exp()
    out.grad_fn._raw_saved_result.register_hooks(lambda t: t * 1, lambda t: t)
    return (out * x).sum()


_SAVES = [lambda x: (x.exp() * x).sum(),  # a saved output (its array), a saved input (tensor)
          lambda x: torch.relu(x @ torch.ones(8, 8)).sum()]  # a saved constant, not x's


# what pack hooks return is not looked into (neither slot is set); a saved output given its
# own hooks has its slots emptied
@pytest.mark.parametrize("make, packed", [(m, p) for m in _SAVES for p in (False, True)]
                         + [(_registered, False)])
def test_graph_bytes_read_each_saved_tensor_as_a_plain_walk_does(make, packed):
    x = torch.randn(4, 8, requires_grad=True)
    if packed:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            out = make(x)
    else:
        out = make(x)
    context = Context(b"x", [x], out, [], 0.0)
    for skip in (set(), {id(x._data)}):
        assert graph_nbytes(context, skip) == _every_saved_slot(context, skip)
