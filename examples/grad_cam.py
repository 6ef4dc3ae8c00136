"""Grad-CAM with hooks: a forward hook keeps the last conv layer's output and asks it to
retain its gradient; backward from the predicted class's score fills it in. On a cluster
the hook runs here and ``retain_grad()`` acts on the worker's tensor.

    python examples/grad_cam.py [--workers 2]
"""
import numpy as np
from common import parser, placed

import disthook as torch
from disthook import nn
from disthook.demo.gradcam import grad_cam


def main():
    args = parser(__doc__.splitlines()[0]).parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 6 * 6, 3))
    x = torch.randn(2, 1, 6, 6)
    kept = []

    def keep(module, args, output):
        output.retain_grad()
        kept.append(output)

    with placed(model, args.workers) as (net, _):
        net[2].register_forward_hook(keep)  # the last conv layer
        logits = net(x)
        predicted = logits.argmax(1)
        logits.gather(1, predicted.unsqueeze(1)).sum().backward()
        (output,) = kept
        cams = grad_cam(output.detach().numpy(), output.grad.numpy())
    for i, cam in enumerate(cams):
        print(f"image {i}: class {predicted[i].item()}, Grad-CAM (peak 1):")
        print(np.array2string(cam, precision=2, suppress_small=True))


if __name__ == "__main__":
    main()
