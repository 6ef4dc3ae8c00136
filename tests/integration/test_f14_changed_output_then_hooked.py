"""Two forward hooks on a chain's last module: the first changes the output in place
unrecorded (``no_grad``), the second puts a tensor hook on it (hook fuzzer seed 114 with the
extras, minimised). The call returns the hooks' tensor itself (as one object, as in one
process), whose history is then the call's node; the first hook's change was answered
with a vector-Jacobian product to take through that tensor's graph as the hook left it.
Deployed, the worker's backward asked for that product and the client took it through the
tensor's new history, the call's own node, asking the worker (busy waiting for the answer)
for a backward of its own: RemoteTimeout after 30 s, the tensor hook firing again and
again, where one process raises at once (a Tanh whose saved output the change moved) or
gives the gradients (a Linear)."""
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2

pytestmark = pytest.mark.timeout(120)


def _program(model):
    log = []

    def negate(module, args, out):
        with torch.no_grad():
            out.mul_(-1)

    def hook_it(module, args, out):
        out.register_hook(lambda g: log.append(("hooked", g.numpy().copy())))

    handles = [model[-1].register_forward_hook(negate),
               model[-1].register_forward_hook(hook_it)]
    x = torch.ones(2, 3, requires_grad=True)
    try:
        (model(x) * 2).sum().backward()
        log.append(("x.grad", x.grad.numpy().copy()))
    except RuntimeError as e:  # (a RemoteError is one)
        log.append(("error", "modified by an inplace operation" in str(e)))
    for handle in handles:
        handle.remove()
    return log


@pytest.mark.filterwarnings("ignore:the backward of the deployed:RuntimeWarning")
@pytest.mark.parametrize("last", ["tanh", "linear"])
def test_a_changed_output_hooked_after_the_change(cluster, last):
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(3, 3), nn.Tanh() if last == "tanh" else
                             nn.Linear(3, 3))

    got, want = deployed_run(cluster, make, _program)
    assert want[-1][0] == ("error" if last == "tanh" else "x.grad")
    same_logs(got, want)
