"""A forward pre-hook on a module inside a deployed part that changes its argument in place,
under ``inference_mode``, where that argument is an inference tensor the program made (the
model's output of an earlier call through an op here, given to the model again): hook fuzzer
seed 126 with the extras, minimised. In one process the change is made inside the mode and
allowed. Deployed, the worker made the client hook's change to its copy outside the mode
and refused it ("Inplace update to inference tensor outside InferenceMode"); now it makes it
inside the mode, where the hook made it."""
import numpy as np
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class Root(nn.Module):  # its forward runs here: each block a placed call
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(3, 3), nn.Tanh()),
                                     nn.Linear(3, 3)])

    def forward(self, x):
        return self.blocks[1](self.blocks[0](x)) * 2


def root():
    torch.manual_seed(0)
    return Root()


def _program(model):
    def negate(module, args):
        args[0].mul_(-1)

    handle = model.blocks[0][0].register_forward_pre_hook(negate)
    x = torch.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    with torch.inference_mode():
        first = model(x)
        before = first.numpy().copy()
        second = model(first)
    handle.remove()
    return [before, first.numpy().copy(), second.numpy().copy(), x.numpy().copy(),
            first.is_inference(), second.is_inference()]


def test_a_hook_changes_an_inference_argument_in_place_inside_the_mode(cluster):
    got, want = deployed_run(cluster, root, _program)
    np.testing.assert_allclose(want[1], -want[0])  # (the hook changed the program's tensor)
    same_logs(got, want)
