"""A vector-Jacobian product between two tensors that hooks got in one call of a placed
part: a layer's output to its input, both kept live by a forward hook (BackPACK's
``module.input0`` / ``module.output``), taken with ``torch.autograd.grad(module.output,
module.input0, v)`` in the layer's full backward hook or after the forward. The product
gives what one process gives, and the hooks of the layers below the input do not fire again.
The output's node led to the call's inputs only, so the input was 'not used in the graph'
(and with ``allow_unused=True``, None)."""
import numpy as np
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class Net(nn.Module):
    """``body`` (Linear, Tanh, Linear) and ``head``: over 2 workers, one part each."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4))
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.body(x))


def keep_io(module, args, output):
    module.input0, module.output = args[0], output


def x_and_v():
    rng = np.random.default_rng(0)
    return (torch.tensor(rng.standard_normal((4, 3)).astype(np.float32), requires_grad=True),
            torch.tensor(rng.standard_normal((4, 4)).astype(np.float32)))


def vjps_in_backward_hooks(model) -> list:
    """Each body layer's full backward hook backpropagates a quantity of its own through
    its layer with autograd.grad between the tensors its forward hook kept."""
    log, carried = [], {}
    x, _ = x_and_v()

    def backward_hook(module, grad_input, grad_output):
        w = carried.get("q", torch.ones_like(module.output))
        (back,) = torch.autograd.grad(module.output, module.input0, w, retain_graph=True)
        carried["q"] = back
        log.append((type(module).__name__, back.detach().numpy().copy(),
                    grad_output[0].detach().numpy().copy()))

    for layer in model.body:
        layer.register_forward_hook(keep_io)
        layer.register_full_backward_hook(backward_hook)
    out = model(x)
    out.square().sum().backward(retain_graph=True)
    log.append(x.grad.numpy().copy())
    log.append([p.grad.numpy().copy() for p in model.parameters()])
    return log


def vjp_after_the_forward(model) -> list:
    x, v = x_and_v()
    model.body[2].register_forward_hook(keep_io)
    model(x)
    layer = model.body[2]
    (back,) = torch.autograd.grad(layer.output, layer.input0, v)
    return [back.numpy().copy(), x.grad]


def test_a_vjp_through_a_layer_in_its_backward_hook_is_one_process(cluster):
    got, want = deployed_run(cluster, Net, vjps_in_backward_hooks)
    assert [entry[0] for entry in want[:3]] == ["Linear", "Tanh", "Linear"]
    same_logs(got, want)


def test_a_vjp_between_kept_tensors_after_the_forward_is_one_process(cluster):
    got, want = deployed_run(cluster, Net, vjp_after_the_forward)
    same_logs(got, want)


def test_a_vjp_inside_the_forward_hook_that_got_both_is_refused(cluster):
    """There the worker does not hold the two in its graph yet: refused, naming the hook,
    where it said 'not used in the graph' (and gave None with allow_unused=True)."""
    model = cluster.deploy(Net(), stages=2)
    try:
        for allow_unused in (False, True):
            def probe(module, args, output, allow_unused=allow_unused):
                torch.autograd.grad(output, args[0], torch.ones_like(output),
                                    retain_graph=True, allow_unused=allow_unused)

            handle = model.body[2].register_forward_hook(probe)
            with pytest.raises(NotImplementedError,
                               match="forward hook of 'Linear'.*after the forward"):
                model(x_and_v()[0])
            handle.remove()
    finally:
        model.close()


def test_a_vjp_between_kept_tensors_of_a_chain_in_micro_batches_is_refused(cluster):
    torch.manual_seed(0)
    chain = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4))
    model = cluster.deploy(chain, stages=2, chunks=2)
    try:
        model[2].register_forward_hook(keep_io)
        model(x_and_v()[0])
        layer = model[2]
        with pytest.raises(NotImplementedError, match="in a chain cut into micro-batches"):
            torch.autograd.grad(layer.output, layer.input0, torch.ones_like(layer.output),
                                allow_unused=True)
    finally:
        model.close()
