"""Shape inspection: a forward hook on every layer prints what goes in and what comes out.

    python examples/shapes.py [--workers 2]
"""
from common import parser, placed

import disthook as torch
from disthook import nn


def show(name, layer):
    def hook(module, args, output):  # on a cluster too, module is the layer itself
        print(f"{name:>2} {type(layer).__name__:<10} {tuple(args[0].shape)!s:<16} -> "
              f"{tuple(output.shape)}")
    return hook


def main():
    args = parser(__doc__.splitlines()[0]).parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 6 * 6, 5))
    with placed(model, args.workers) as (net, _):
        for name, layer in model.named_children():
            net.get_submodule(name).register_forward_hook(show(name, layer))
        with torch.no_grad():
            out = net(torch.randn(4, 3, 16, 16))
    print("output", tuple(out.shape))


if __name__ == "__main__":
    main()
