"""Feature extraction with forward hooks: a SaveValues object per layer keeps its output.

    python examples/feature_extraction.py [--workers 2]
"""
from common import parser, placed

import disthook as torch
from disthook import nn


class SaveValues:
    """Registered as a forward hook, keeps the layer's latest output (detached)."""

    def __init__(self, layer):
        self.activations = None
        self.handle = layer.register_forward_hook(self.hook)

    def hook(self, module, args, output):
        self.activations = output.detach()

    def remove(self):
        self.handle.remove()


def main():
    args = parser(__doc__.splitlines()[0]).parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(4 * 3 * 3, 10))
    x = torch.randn(2, 1, 8, 8)
    with placed(model, args.workers) as (net, _):
        saved = {i: SaveValues(net[i]) for i in (1, 2, 4)}  # ReLU, pooling, logits
        with torch.no_grad():
            net(x)
        for i, values in saved.items():
            a = values.activations
            print(f"layer {i} ({type(model[i]).__name__}): shape {tuple(a.shape)}, "
                  f"mean {a.mean().item():.6f}, max {a.max().item():.6f}")
            values.remove()


if __name__ == "__main__":
    main()
