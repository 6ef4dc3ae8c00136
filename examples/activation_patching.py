"""Activation patching: a forward hook that returns a value replaces the layer's output.
Run a clean and a corrupted input, then the corrupted one again with some of the hidden
units patched in from the clean run, and see how the answer moves back.

    python examples/activation_patching.py [--workers 2]
"""
from common import parser, placed

import disthook as torch
from disthook import nn


def main():
    args = parser(__doc__.splitlines()[0]).parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(),
                          nn.Linear(8, 2))
    clean = torch.randn(1, 6)
    corrupted = -clean
    with placed(model, args.workers) as (net, _), torch.no_grad():
        saved = {}
        handle = net[2].register_forward_hook(lambda m, a, out: saved.update(clean=out))
        clean_logits = net(clean)
        handle.remove()
        corrupted_logits = net(corrupted)

        def diff(logits):
            return (logits[0, 0] - logits[0, 1]).item()

        print(f"clean     logit difference {diff(clean_logits):+.6f}")
        print(f"corrupted logit difference {diff(corrupted_logits):+.6f}")
        for first, last in ((0, 3), (4, 7), (0, 7)):
            def patch(module, args, output, first=first, last=last):
                output = output.clone()
                output[:, first:last + 1] = saved["clean"][:, first:last + 1]
                return output  # replaces the layer's output

            with net[2].register_forward_hook(patch):
                patched = net(corrupted)
            print(f"patched units {first}-{last}: logit difference "
                  f"{diff(patched):+.6f}")  # all 8 units: the clean run's exactly


if __name__ == "__main__":
    main()
