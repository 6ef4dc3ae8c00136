"""A forward hook that returns its module's output rebuilt from views of it (chunk, then
cat), with a tensor hook on one view, on a model called twice in one graph (the second
call takes the first's output), then ``autograd.grad`` to a parameter of the last part
(hook fuzzer seeds 178 and 252 with the extras, minimised). In one process the view's hook
fires once per call whose gradient reaches it: here only the second call's, with its
gradient. Deployed, it fired a second time with None: the hook's result is an edge of the
call's node where the backward names inputs, and the engine ran it, and the views past it,
with the None the worker gave it (the vjp the worker asked for had fired the hook already).
Now that edge exists only where the backward names the result or a tensor between it and
the call's tensors (``tap_node.kept_result_left_out``)."""
import numpy as np
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class Two(nn.Module):  # its forward runs here: each block a placed call
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(3, 4), nn.Linear(4, 3)])

    def forward(self, x):
        return self.blocks[1](self.blocks[0](x).tanh())


def two():
    torch.manual_seed(0)
    return Two()


def _program(named):
    """Hooks a view of the first block's output in a forward hook that returns the output
    rebuilt; calls the model twice; differentiates to ``named(model, kept)``."""
    def run(model):
        log, kept = [], []

        def rebuilt(module, args, out):
            a, b = out.chunk(2, dim=-1)
            n = len(kept)
            a.register_hook(lambda g: log.append(("view", n, None if g is None
                                                  else g.numpy().copy())))
            kept.append(torch.cat([a, b], -1))
            return kept[-1]

        handle = model.blocks[0].register_forward_hook(rebuilt)
        x = torch.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3),
                         requires_grad=True)
        out = model(x)
        out = out + model(out)
        grads = torch.autograd.grad(out.sum(), named(model, kept), allow_unused=True)
        handle.remove()
        log.append(("grads", tuple(None if g is None else g.numpy().copy() for g in grads)))
        return log
    return run


def test_a_view_of_a_hook_result_is_hooked_once_under_autograd_grad(cluster):
    got, want = deployed_run(cluster, two, _program(lambda m, kept: [m.blocks[1].bias]))
    assert [entry[:2] for entry in want[:-1]] == [("view", 1)]  # (the second call's only)
    same_logs(got, want)


def test_naming_the_hook_result_itself_still_stops_there(cluster):
    """The backward names the second call's hook result: the edge to it stays (the backward
    stops there, before the views), and it gets one process's gradient."""
    got, want = deployed_run(cluster, two, _program(lambda m, kept: [kept[1]]))
    assert [entry[0] for entry in want] == ["grads"] and want[0][1][0] is not None
    same_logs(got, want)
