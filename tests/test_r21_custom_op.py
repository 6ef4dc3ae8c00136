"""``torch.library.custom_op`` as recent training code writes it (modded-nanogpt's matmul op,
torchtitan's kernels): an opaque forward, ``register_autograd`` with ``setup_context``,
``register_fake`` kept, ``torch.ops.<ns>.<name>``, several outputs, keyword arguments and a
mutated argument; the values, gradients and refusals of torch."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


def define(T, ns):
    @T.library.custom_op(f"{ns}::scaled_mm", mutates_args=())
    def scaled_mm(x: T.Tensor, w: T.Tensor, scale: float = 1.0) -> tuple[T.Tensor, T.Tensor]:
        out = T.from_numpy(x.numpy() @ w.numpy().T * scale)
        return out, out.abs().amax().reshape(1)

    @scaled_mm.register_fake
    def _(x, w, scale=1.0):
        return x.new_empty(x.shape[0], w.shape[0]), x.new_empty(1)

    def setup_context(ctx, inputs, output):
        x, w, scale = inputs
        ctx.save_for_backward(x, w)
        ctx.scale = scale

    def backward(ctx, grad, _grad_amax):
        x, w = ctx.saved_tensors
        return grad @ w * ctx.scale, grad.T @ x * ctx.scale, None

    scaled_mm.register_autograd(backward, setup_context=setup_context)

    @T.library.custom_op(f"{ns}::fill_twice", mutates_args={"out"})
    def fill_twice(x: T.Tensor, out: T.Tensor) -> None:
        out.copy_(x * 2)
    return scaled_mm


@pytest.mark.parametrize("T", [torch, disthook], ids=["torch", "disthook"])
def test_custom_op_forward_backward_and_namespace(T):
    ns = f"r21_{T.__name__}"
    scaled_mm = define(T, ns)
    rng = np.random.default_rng(0)
    x = T.tensor(rng.standard_normal((3, 4)), dtype=T.float32, requires_grad=True)
    w = T.tensor(rng.standard_normal((2, 4)), dtype=T.float32, requires_grad=True)
    out, amax = scaled_mm(x, w, scale=0.5)
    assert "GeneratedBackwardFor" in type(out.grad_fn).__name__
    (out * out).sum().backward()
    want_x, want_w = x.detach().numpy(), w.detach().numpy()
    grad_out = 2 * (want_x @ want_w.T * 0.5)
    np.testing.assert_allclose(out.detach().numpy(), want_x @ want_w.T * 0.5, rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), grad_out @ want_w * 0.5, rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), grad_out.T @ want_x * 0.5, rtol=1e-5)
    assert amax.detach().item() == pytest.approx(out.detach().abs().max().item())
    namespace = getattr(T.ops, ns)
    again, _ = namespace.scaled_mm.default(x.detach(), w.detach())
    np.testing.assert_allclose(again.numpy(), want_x @ want_w.T, rtol=1e-6)
    filled = T.zeros(2)
    namespace.fill_twice(T.ones(2), filled)
    assert filled.tolist() == [2.0, 2.0]


@pytest.mark.parametrize("T", [torch, disthook], ids=["torch", "disthook"])
def test_custom_op_refusals(T):
    ns = f"r21_refuse_{T.__name__}"

    @T.library.custom_op(f"{ns}::no_grad_rule", mutates_args=())
    def no_grad_rule(x: T.Tensor) -> T.Tensor:
        return x * 3
    y = no_grad_rule(T.ones(2, requires_grad=True))
    assert y.requires_grad
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        y.sum().backward()
    with pytest.raises(ValueError, match="must have a type annotation"):
        T.library.custom_op(f"{ns}::bare", mutates_args=())(lambda x: x)

    @T.library.custom_op(f"{ns}::same", mutates_args=())
    def same(x: T.Tensor) -> T.Tensor:
        return x
    with pytest.raises(RuntimeError):
        same(T.ones(1))
