"""Gradient clipping with a hook on every parameter: each gradient is clamped to
[-CLIP, CLIP] before it accumulates in ``.grad``. In one process the hook is a lambda; on a
cluster it is ``hooks.clamp_grad``, which runs in the worker that owns the parameter.

    python examples/gradient_clipping.py [--workers 2]
"""
from common import optimizer, parameter, parser, placed

import disthook as torch
from disthook import nn
from disthook.distributed import hooks

CLIP = 0.05


def main():
    args = parser(__doc__.splitlines()[0]).parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    x, y = torch.randn(32, 8) * 10, torch.randint(0, 3, (32,))
    with placed(model, args.workers) as (net, cluster):
        clip = hooks.clamp_grad(-CLIP, CLIP) if cluster else lambda g: g.clamp(-CLIP, CLIP)
        params = [parameter(net, name) for name, _ in model.named_parameters()]
        for p in params:
            p.register_hook(clip)
        opt = optimizer(net, cluster, torch.optim.SGD, lr=0.5)
        for step in range(3):
            loss = nn.functional.cross_entropy(net(x), y)
            loss.backward()
            biggest = max(p.grad.abs().max().item() for p in params)
            print(f"step {step}: loss {loss.item():.6f}, largest |grad| {biggest:.6f}")
            opt.step()
            opt.zero_grad()


if __name__ == "__main__":
    main()
