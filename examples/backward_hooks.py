"""Legacy ``register_backward_hook`` and ``register_full_backward_hook`` side by side.

The legacy hook sees the gradients of the LAST operation of the module's forward only: for
the seed 000 module computing ``2*x + 3*y - 5*z`` that is the subtraction, so its
grad_input has two entries, d/d(2x+3y) and d/d(5z). The full hook sees the gradients with
respect to the module's inputs x, y and z. The seed's module takes three inputs, which a
deployed stage cannot, so it runs here; then both hooks on a deployed Linear layer.

    python examples/backward_hooks.py [--workers 2]
"""
from common import parser, placed

import disthook as torch
from disthook import nn


class Model4cxq(nn.Module):  # the seed 000 program's module
    def forward(self, x, y, z):
        return 2 * x + 3 * y - 5 * z


def show(kind):
    def hook(module, grad_input, grad_output):
        print(f"  {kind:<6} grad_input:  {tuple(grad_input)}")
        print(f"  {kind:<6} grad_output: {tuple(grad_output)}")
    return hook


def main():
    args = parser(__doc__.splitlines()[0]).parse_args()
    # torch refuses both kinds on one module: each kind gets its own copy
    for kind, register in (("legacy", "register_backward_hook"),
                           ("full", "register_full_backward_hook")):
        print(f"{kind}: the seed's module, 2*x + 3*y - 5*z, MSE loss against [9, -1]")
        model = Model4cxq()
        getattr(model, register)(show(kind))
        x = torch.tensor([2.0, 3.0], requires_grad=True)
        y = torch.tensor([6.0, 4.0], requires_grad=True)
        z = torch.tensor([1.0, 5.0], requires_grad=True)
        nn.MSELoss()(model(x, y, z), torch.tensor([9.0, -1.0])).backward()

        print(f"{kind}: Linear(3, 2), the first layer of a Sequential")
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(3, 2), nn.Tanh(), nn.Linear(2, 1))
        with placed(net, args.workers) as (remote, _):
            getattr(remote[0], register)(show(kind))
            remote(torch.tensor([[1.0, -2.0, 0.5]], requires_grad=True)).sum().backward()


if __name__ == "__main__":
    main()
