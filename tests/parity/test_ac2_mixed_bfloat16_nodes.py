"""A binary op of a bfloat16 tensor and a float32 (or float64) one, as torch 2.13 records it.

torch's mixed kernel takes both operands as they are: the op's node has the bfloat16
operand as its input, and the engine casts that operand's gradient to bfloat16 before the
node's post-hooks see it (a legacy ``register_backward_hook`` on a Linear under autocast
whose forward adds a float32 buffer sees its grad_input rounded to bfloat16). disthook cast
the bfloat16 operand to the wider dtype first, with a cast node of its own: the node's hooks
saw float32 gradients and its graph held one more node (the hook fuzzer's seed 26160)."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(1)
A = RNG.standard_normal((4, 5)).astype(np.float32)
B = RNG.standard_normal((4, 5)).astype(np.float32)
OPS = {"add": lambda a, b: a + b, "radd": lambda a, b: b + a, "sub": lambda a, b: a - b,
       "rsub": lambda a, b: b - a, "mul": lambda a, b: a * b, "rmul": lambda a, b: b * a,
       "div": lambda a, b: a / b, "add_method": lambda a, b: a.add(b, alpha=2),
       "broadcast": lambda a, b: a + b[0]}


def _depth(node, seen=0):
    """The number of nodes on the first-edge path from ``node`` to the leaf."""
    while node is not None:
        seen += 1
        node = node.next_functions[0][0] if node.next_functions else None
    return seen


def _run(lib, op, other):
    w = lib.tensor(A, requires_grad=True)
    v = lib.tensor(B, requires_grad=True)
    a, b = (w * 1).bfloat16(), (v * 1).to(getattr(lib, other))
    out = OPS[op](a, b)
    seen = []
    out.grad_fn.register_hook(lambda gi, go: seen.append(
        tuple(None if g is None else str(g.dtype).split(".")[-1] for g in gi)))
    depth = _depth(out.grad_fn)
    out.backward(lib.tensor(B).to(out.dtype))
    return (str(out.dtype), seen, depth, w.grad.numpy().view(np.uint32).copy(),
            v.grad.numpy().copy())


@pytest.mark.parametrize("other", ["float32", "float64"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_the_nodes_hooks_see_the_bfloat16_gradient_and_no_cast_node(op, other):
    ours, theirs = _run(disthook, op, other), _run(torch, op, other)
    assert ours[:3] == theirs[:3]
    assert np.array_equal(ours[3], theirs[3])  # the bfloat16 side's gradient, to the bit
    # (div's float32 denominator gradient: one float32 step apart in a few entries, as before)
    np.testing.assert_allclose(ours[4], theirs[4], rtol=1e-6)


class _Shifted:
    """A Linear whose forward adds a float32 buffer (the fuzzer's ``Buffered``)."""

    @staticmethod
    def make(lib):
        lib.manual_seed(0)
        lin = lib.nn.Linear(3, 3)
        with lib.no_grad():
            lin.weight.copy_(lib.tensor(A[:3, :3]))
            lin.bias.copy_(lib.tensor(B[0, :3]))
        shift = lib.full((3,), 0.25)
        return lin, shift


def _legacy_hook_log(lib):
    lin, shift = _Shifted.make(lib)
    log = []

    class Shifted(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lin

        def forward(self, x):
            return self.lin(x) + shift

    m = Shifted()
    m.register_backward_hook(lambda mod, gi, go: log.append(
        [None if g is None else (str(g.dtype).split(".")[-1], g.float().numpy().copy())
         for g in gi]))
    x = lib.tensor(A[:2, :3], requires_grad=True)
    with lib.autocast("cpu", dtype=lib.bfloat16):
        out = m(x).tanh()
    out.sum().backward()
    return log, lin.weight.grad.numpy().copy()


@pytest.mark.filterwarnings("ignore:Using a non-full backward hook")
def test_a_legacy_hook_under_autocast_sees_torchs_rounded_grad_input():
    (log, grad), (want, want_grad) = _legacy_hook_log(disthook), _legacy_hook_log(torch)
    assert len(log) == len(want) == 1
    for g, w in zip(log[0], want[0]):
        assert (g is None) == (w is None)
        if g is not None:
            assert g[0] == w[0]
            np.testing.assert_array_equal(g[1], w[1])
    np.testing.assert_array_equal(grad, want_grad)
