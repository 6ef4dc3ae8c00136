"""What the differential hook fuzzer's sixth round (test_f1_hook_fuzz_deployed.py) found on
deployed models, each as the small program it came down to.

A forward hook with ``always_call=True`` that raises while the module's forward raises
(seed 1022 with F1_FUZZ_DEPLOYED_EXTRAS=1: a call with the wrong width, the hook reading
its output, None): in one process the forward's own error propagates and the hook's is
silenced with a warning. The worker did the same, but the client, which had seen its hook
fail, raised the hook's error (AttributeError) in place of the forward's (RuntimeError).
Now the client raises its hook's error only where the worker's answer is that error.

A ``backward(inputs=[...])`` naming parameters of a deployed part whose backward a hook
stops on the worker (seed 1316: a full backward hook of the last Linear raises): in one
process the Linear's weight got its gradient before the hook on its input fired; deployed,
the worker sends the named parameters' gradients with the inputs', once its backward is
done, so ``.grad`` stayed None, silently where the call's input did not require grad (the
warning of docs/hooks.md, "Where a hook raises in a backward", spoke of leaf inputs only).
It now says so for the named parameters too.

A part called from a forward that runs here (seed 1187: an ``nn.Identity`` in a ModuleList
of a model with its own forward) with the program's leaf: the worker gave its copy a node
standing for the client's graph whatever the client's tensor was, so a legacy backward
hook on the part found a ``grad_fn`` to go on where one process finds none (the leaf has
none): the hook fired in a backward where one process never fires it, and the part no
longer returned its input as it is, so under ``no_grad`` the call gave a new tensor that
required no grad instead of ``x`` itself. The worker's copy of a leaf is a leaf now."""
import warnings

import numpy as np
import pytest

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


def _a_call_that_raises_with_an_always_call_hook_that_raises(model) -> tuple:
    model[0].register_forward_hook(lambda m, args, out: out.retain_grad(),
                                   always_call=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(Exception) as raised:
            model(torch.ones(2, 4))
    silenced = [w for w in caught if "always_call=True" in str(w.message)]
    return raised.value, silenced


@pytest.mark.parametrize("deployed", [False, True])
def test_an_always_call_hook_s_error_is_silenced_by_the_forward_s(cluster, deployed):
    model = nn.Sequential(nn.Linear(3, 3))
    if deployed:
        model = cluster.deploy(model, stages=1)
    try:
        error, silenced = _a_call_that_raises_with_an_always_call_hook_that_raises(model)
        assert isinstance(error, RuntimeError), repr(error)  # the forward's, as torch's
        assert "retain_grad" in str(silenced[0].message)
        assert len(silenced) == 1
    finally:
        if deployed:
            model.close()


def _a_backward_naming_weights_stopped_by_a_hook(model):
    def stop(module, grad_input, grad_output):
        raise KeyError("stop")

    model[2].register_full_backward_hook(stop)
    loss = model(torch.ones(2, 3)).sum()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(KeyError):
            loss.backward(inputs=[model[0].weight, model[2].weight])
    return [str(w.message) for w in caught]


def test_a_backward_naming_parameters_that_a_hook_stops_says_so(cluster):
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))
    # one process: the last weight's gradient came before the hook on its Linear's input
    assert not _a_backward_naming_weights_stopped_by_a_hook(model)
    assert model[2].weight.grad is not None and model[0].weight.grad is None
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))
    remote = cluster.deploy(model, stages=1)
    try:
        said = _a_backward_naming_weights_stopped_by_a_hook(remote)
        assert remote[2].weight.grad is None  # (the worker's gradients come back together)
        assert any("a parameter the backward names in inputs=" in text
                   and "zero the gradients" in text for text in said), said
    finally:
        remote.close()


class _Root(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Identity()])

    def forward(self, x):
        return self.blocks[0](x)


@pytest.mark.parametrize("region", ["enable_grad", "no_grad"])
@pytest.mark.parametrize("deployed", [False, True])
def test_a_part_given_the_program_s_leaf_takes_it_as_a_leaf(cluster, deployed, region):
    model, fired = _Root(), []
    model.blocks[0].register_backward_hook(lambda m, gi, go: fired.append(gi))
    if deployed:
        model = cluster.deploy(model, stages=1)
    try:
        x = torch.ones(2, 3, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torch's word on legacy hooks)
            with getattr(torch, region)():
                out = model(x)
        assert out is x and out.requires_grad  # the leaf itself, as in one process
        (out * 2).sum().backward()
        assert fired == []  # the leaf has no node for the legacy hook to go on
        assert np.array_equal(x.grad.numpy(), np.full((2, 3), 2.0))
    finally:
        if deployed:
            model.close()
