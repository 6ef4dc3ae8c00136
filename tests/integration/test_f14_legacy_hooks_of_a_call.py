"""A legacy ``register_backward_hook`` on a model deployed as a chain: in one process
``Module.__call__`` puts the hooks the model holds as a call begins on that call's output
node, so a hook removed after the forward still fires in a second backward of the retained
graph, and one registered after the forward does not fire for it (hook fuzzer seed 80 with
the extras, minimised: a retained backward, every hook removed, the round's backward).
Deployed, the chain's last worker ran the hooks the model held when it fired: the second
backward fired none. Now the hooks of each call are kept for its node."""
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


def chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 3))


def _program(model):
    log = []

    def hook(module, grad_input, grad_output):
        log.append([None if g is None else g.numpy().copy() for g in grad_input])

    x = torch.ones(2, 3, requires_grad=True)
    handle = model.register_backward_hook(hook)
    loss = model(x).sum()
    loss.backward(retain_graph=True)
    handle.remove()
    log.append("removed")
    loss.backward()  # on the call's node: fires again
    loss = model(x * 2).sum()
    handle = model.register_backward_hook(hook)
    log.append("added after the call")
    loss.backward()  # not on this call's node: does not fire
    handle.remove()
    return log


def test_a_legacy_hook_fires_as_it_was_when_the_call_began(cluster):
    got, want = deployed_run(cluster, chain, _program)
    assert [type(e) for e in want] == [list, str, list, str]
    same_logs(got, want)
