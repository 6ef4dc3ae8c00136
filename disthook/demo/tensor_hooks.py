"""Tensor hooks from the seed documents, run on disthook with ``import disthook as torch``.

1. Printing a gradient in flight (seed 002): ``y.register_hook(print)``.
2. Replacing a gradient: a hook's return value is what flows on and what ``.grad`` gets.
3. Gradient clipping (seed 004): a hook per parameter clamps its gradient.
4. Removing a hook with its handle, and hooks on a leaf firing before accumulation.
"""
import disthook as torch


def print_gradient() -> None:
    print("1. y.register_hook(print); z = torch.mean(y); z.backward()")
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.register_hook(print)
    z = torch.mean(y)
    z.backward()
    print("   x.grad =", x.grad)


def replace_gradient() -> None:
    print("2. a hook that doubles the gradient of an intermediate")
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = a * a
    b.register_hook(lambda g: g * 2)
    b.sum().backward()
    print("   a.grad =", a.grad, "(2 * 2a)")


def clip_gradients() -> None:
    print("3. gradient clipping: every parameter's gradient clamped to [-0.1, 0.1]")
    torch.manual_seed(0)
    w = torch.randn(3, 2, requires_grad=True)
    b = torch.zeros(2, requires_grad=True)
    for p in (w, b):
        p.register_hook(lambda grad: torch.clamp(grad, -0.1, 0.1))
    x = torch.tensor([[10.0, -20.0, 30.0]])
    loss = ((x @ w + b) ** 2).sum()
    loss.backward()
    print("   w.grad =", w.grad)
    print("   b.grad =", b.grad)


def remove_and_order() -> None:
    print("4. hook order on a leaf: hooks run before accumulation; a removed hook never runs")
    x = torch.tensor([1.0, 1.0], requires_grad=True)
    log = []
    x.register_hook(lambda g: log.append(("first", g.tolist(), x.grad)))
    h = x.register_hook(lambda g: log.append(("removed", g.tolist())))
    x.register_post_accumulate_grad_hook(lambda t: log.append(("after", t.grad.tolist())))
    h.remove()
    (x * 3).sum().backward()
    for entry in log:
        print("  ", entry)


def main() -> None:
    print_gradient()
    replace_gradient()
    clip_gradients()
    remove_and_order()


if __name__ == "__main__":
    main()
