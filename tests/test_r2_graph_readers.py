"""Programs that read the autograd graph (torchviz's ``make_dot``, dependency tracers) see the
nodes torch gives: a built-in op's node has no ``saved_tensors`` (only a custom Function's
node has), so ``hasattr(fn, "saved_tensors")`` picks out custom Functions as in torch, and
``dir(fn)`` lists the op's ``_saved_<name>`` views. disthook's op nodes answered
``saved_tensors`` (a walk drew every saved input as a node and failed on a saved None) and
hid ``_saved_<name>`` from ``dir``."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import disthook


class Double(disthook.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 + x * 0


def _program(T, fn_cls=None):
    """A small net with a scalar product, a custom Function when given, and its graph's
    output."""
    T.manual_seed(0)
    lin = T.nn.Linear(3, 4)
    x = T.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    h = T.tanh(lin(x)) * 2
    if fn_cls is not None:
        h = fn_cls.apply(h)
    return T.softmax(h, dim=-1).sum(), dict(lin.named_parameters(), x=x)


def _make_dot(out, params) -> tuple:
    """torchviz's walk: nodes by discovery, AccumulateGrad's variable named, and the
    tensors of any node that has ``saved_tensors`` drawn as nodes of their own."""
    names = {id(v): k for k, v in params.items()}
    seen, nodes, edges = set(), [], []

    def add(fn):
        if fn in seen:
            return
        seen.add(fn)
        nodes.append(type(fn).__name__)
        if hasattr(fn, "variable"):
            nodes.append(("var", names.get(id(fn.variable), "?"), tuple(fn.variable.shape)))
            edges.append((nodes[-1][1], type(fn).__name__))
        for u, _ in fn.next_functions:
            if u is not None:
                edges.append((type(u).__name__, type(fn).__name__))
                add(u)
        if hasattr(fn, "saved_tensors"):
            for t in fn.saved_tensors:
                nodes.append(("saved", tuple(t.size())))
                edges.append(("saved", type(fn).__name__))

    add(out.grad_fn)
    return nodes, sorted(edges)


def test_built_in_nodes_have_no_saved_tensors():
    out, _ = _program(disthook)
    node = out.grad_fn
    while node is not None:
        assert not hasattr(node, "saved_tensors"), type(node).__name__
        node = node.next_functions[0][0] if node.next_functions else None


def test_a_custom_functions_node_keeps_saved_tensors():
    out, _ = _program(disthook, Double)
    node = out.grad_fn.next_functions[0][0].next_functions[0][0]
    assert type(node).__name__ == "DoubleBackward"
    (saved,) = node.saved_tensors
    assert saved.shape == (2, 4)


@pytest.mark.parametrize("custom", [False, True], ids=["built-in", "custom-function"])
def test_a_torchviz_walk_is_torchs(custom):
    torch = pytest.importorskip("torch")

    TorchDouble = type("Double", (torch.autograd.Function,), {
        "forward": Double.forward, "backward": Double.backward})
    ours = _make_dot(*_program(disthook, Double if custom else None))
    theirs = _make_dot(*_program(torch, TorchDouble if custom else None))
    assert ours == theirs


def test_dir_lists_the_saved_views():
    x = disthook.tensor([0.5, 1.0], requires_grad=True)
    y = disthook.tanh(x) * 3
    mul, tanh = y.grad_fn, y.grad_fn.next_functions[0][0]
    assert {"_saved_self", "_saved_other", "_raw_saved_self"} <= set(dir(mul))
    assert "_saved_result" in dir(tanh)
    assert [n for n in dir(tanh) if n.startswith("_saved_")] == ["_saved_result"]
    np.testing.assert_allclose(tanh._saved_result.detach().numpy(), np.tanh([0.5, 1.0]),
                               rtol=1e-6)


def test_backward_reads_its_saved_tensors_in_threads_and_twice():
    def run(results, i):
        x = disthook.tensor([0.1 * i, 0.2, 0.3], requires_grad=True)
        (g,) = disthook.autograd.grad((disthook.tanh(x) * x).sum(), x, create_graph=True)
        (gg,) = disthook.autograd.grad(g.sum(), x)
        results[i] = (g.detach().numpy(), gg.numpy())

    results = {}
    threads = [threading.Thread(target=run, args=(results, i)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (g, gg) in results.items():
        v = np.array([0.1 * i, 0.2, 0.3])
        t = np.tanh(v)
        np.testing.assert_allclose(g, t + v * (1 - t ** 2), rtol=1e-5)
        np.testing.assert_allclose(gg, 2 * (1 - t ** 2) - 2 * v * t * (1 - t ** 2), rtol=1e-4)


def _changed_behind_autograd(T):
    """A saved tensor's data changed where autograd cannot see it, then marked changed."""
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    z = y * y
    y.detach().numpy()[:] = 0.0  # (a kernel writing the memory)
    T.autograd.graph.increment_version([y])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    T.autograd.graph.increment_version(y)
    return y._version


def test_increment_version_is_torchs():
    torch = pytest.importorskip("torch")
    assert _changed_behind_autograd(disthook) == _changed_behind_autograd(torch) == 2
    for T in (disthook, torch):
        with pytest.raises(RuntimeError, match="expect a Iterable"):
            T.autograd.graph.increment_version(3)


# the other values a node keeps, read by graph tools (torch-pruning's split and concat
# handling reads _saved_dim and _saved_split_sizes of the nodes it walks)
SAVED_VALUE_CASES = {
    "cat": lambda T, x: T.cat([x, x], dim=1),
    "split_with_sizes": lambda T, x: T.split(x, [2, 4], dim=1)[0],
    "split": lambda T, x: T.split(x, 3, dim=1)[1],
    "chunk": lambda T, x: T.chunk(x, 3, dim=1)[0],
    "transpose": lambda T, x: x.transpose(1, 2),
    "permute": lambda T, x: x.permute(2, 0, 1),
    "mean_dim": lambda T, x: x.mean(dim=1),
    "mean_dims_keepdim": lambda T, x: x.mean(dim=(1, 2), keepdim=True),
    "sum_dim": lambda T, x: x.sum(dim=2),
    "sum_all": lambda T, x: x.sum(),
    "view": lambda T, x: x.view(2, 24),
    "flatten": lambda T, x: x.flatten(1),
    "unsqueeze": lambda T, x: x.unsqueeze(1),
}
VALUE_NAMES = ("dim", "dims", "dim0", "dim1", "keepdim", "split_size", "split_sizes",
               "self_sym_sizes")


def _saved_values(T, case: str) -> tuple:
    x = T.ones(2, 6, 4, requires_grad=True)
    fn = SAVED_VALUE_CASES[case](T, x).grad_fn
    values = {n: getattr(fn, f"_saved_{n}") for n in VALUE_NAMES if hasattr(fn, f"_saved_{n}")}
    listed = sorted(n for n in dir(fn) if n[7:] in VALUE_NAMES and n.startswith("_saved_"))
    return fn.name(), {k: tuple(v) if isinstance(v, (list, tuple)) else v
                       for k, v in values.items()}, listed


@pytest.mark.parametrize("case", sorted(SAVED_VALUE_CASES))
def test_saved_values_are_torchs(case):
    torch = pytest.importorskip("torch")
    assert _saved_values(disthook, case) == _saved_values(torch, case)
