"""An attached client's model follows what its deployer changes beyond the weights'
values: the modules' modes (a dropout that runs on the attached client's side, between two
placed parts, drops only while the deployer's model trains), dtypes (``double()``), buffers
registered since, and ``requires_grad``; at attach it takes the current form, not the one of
the deploy. Before, the attached model kept the form it was published with: its client-side
modules computed in training mode while the workers ran in eval mode, and its parameters
said float32 while the workers held float64."""
from contextlib import contextmanager

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import connect

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class Net(nn.Module):
    """Two placed parts with a dropout between them, which stays on the client."""

    def __init__(self):
        super().__init__()
        self.lin1, self.drop, self.lin2 = nn.Linear(4, 16), nn.Dropout(0.5), nn.Linear(16, 3)

    def forward(self, x):
        return self.lin2(self.drop(self.lin1(x)))


@contextmanager
def shared(cluster, name, model=None, **deploy):
    """The deployer's model (a Net placed over its tree by default), published as ``name``,
    and another client of the cluster, to attach with."""
    torch.manual_seed(0)
    if model is None:
        model, deploy = Net(), {"placement": {"lin1": 0, "lin2": 1}}
    remote = cluster.deploy(model, name=name, **deploy)
    try:
        with connect(cluster.address) as other:
            yield remote, other
    finally:
        remote.close()


def modes(model):
    return {path or "<root>": m.training for path, m in model.named_modules()}


def test_the_deployers_eval_and_train_reach_an_attached_clients_modules(cluster):
    with shared(cluster, "r6-modes") as (remote, other):
        attached = other.attach("r6-modes")
        seen = []  # what a hook on the client-side dropout reads, in each call
        attached.drop.register_forward_hook(lambda m, args, out: seen.append(m.training))
        x = torch.randn(64, 4)
        remote.eval()
        expected = remote(x).detach().numpy()
        got = attached(x).detach().numpy()  # its answers say the form changed
        assert seen == [False] and set(modes(attached).values()) == {False}, modes(attached)
        np.testing.assert_allclose(got, expected, rtol=1e-6)  # the dropout drops nothing
        np.testing.assert_allclose(attached(x).detach().numpy(), expected, rtol=1e-6)
        remote.train()
        dropped = attached(x).detach().numpy()
        assert seen[-1] is True and set(modes(attached).values()) == {True}
        assert np.abs(dropped - expected).max() > 1e-3  # the dropout drops again
        remote.lin2.eval()  # one placed part
        attached(x).detach().numpy()
        assert not attached.lin2.training and attached.lin1.training
        assert attached.training and attached.drop.training


def test_a_hook_on_a_placed_part_reads_the_deployers_mode_in_the_call_that_brings_it(
        cluster):
    with shared(cluster, "r6-hook-mode") as (remote, other):
        attached = other.attach("r6-hook-mode")
        seen = []  # fires on lin1's worker, in the forward's first call
        attached.lin1.register_forward_hook(lambda m, args, out: seen.append(m.training))
        x = torch.randn(4, 4)
        attached(x).detach().numpy()
        remote.eval()
        attached(x).detach().numpy()
        remote.train()
        attached(x).detach().numpy()
        assert seen == [True, False, True]


@pytest.mark.parametrize("stages", [2, 1])  # a chain of stages, the model whole
def test_a_chain_models_mode_attributes_and_dtype_reach_an_attached_client(cluster, stages):
    model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.5), nn.Linear(16, 3))
    with shared(cluster, f"r6-chain-{stages}", model, stages=stages) as (remote, other):
        attached = other.attach(f"r6-chain-{stages}")
        x = torch.randn(8, 4)
        attached(x)
        remote.eval()
        attached(x).detach().numpy()
        assert set(modes(attached).values()) == {False}, modes(attached)
        remote[1].p = 0.25  # a plain attribute of a placed module
        attached(x).detach().numpy()
        assert attached[1].p == 0.25
        remote.double()
        x = x.double()
        got = attached(x)
        assert {p.dtype for p in attached.parameters()} == {torch.float64}
        np.testing.assert_allclose(got.detach().numpy(), remote(x).detach().numpy(),
                                   rtol=1e-12)


def test_an_attached_client_takes_the_mode_of_now_not_of_the_deploy(cluster):
    with shared(cluster, "r6-attach-late") as (remote, other):
        remote.eval()
        attached = other.attach("r6-attach-late")
        assert set(modes(attached).values()) == {False}, modes(attached)  # no call yet
        x = torch.randn(64, 4)
        np.testing.assert_allclose(attached(x).detach().numpy(),
                                   remote(x).detach().numpy(), rtol=1e-6)


def test_the_deployers_double_reaches_an_attached_clients_parameters(cluster):
    with shared(cluster, "r6-double") as (remote, other):
        attached = other.attach("r6-double")
        remote.eval()
        remote.double()
        x = torch.randn(8, 4, dtype=torch.float64)
        expected = remote(x).detach().numpy()
        got = attached(x)
        assert {p.dtype for p in attached.parameters()} == {torch.float64}
        assert got.dtype == torch.float64
        np.testing.assert_allclose(got.detach().numpy(), expected, rtol=1e-12)
        assert attached.lin1.weight.detach().dtype == torch.float64


def test_a_buffer_and_requires_grad_the_deployer_changes_reach_an_attached_client(cluster):
    with shared(cluster, "r6-buffers") as (remote, other):
        attached = other.attach("r6-buffers")
        x = torch.randn(8, 4)
        remote.lin1.register_buffer("scale", torch.full((16,), 2.0))
        remote.lin2.register_buffer("seen", torch.zeros(1), persistent=False)
        remote.lin1.weight.requires_grad_(False)
        attached(x).detach().numpy()
        assert dict(attached.named_buffers()).keys() == {"lin1.scale", "lin2.seen"}
        np.testing.assert_array_equal(attached.lin1.scale.numpy(), np.full(16, 2.0))
        assert "lin1.scale" in attached.state_dict()
        assert "lin2.seen" not in attached.state_dict()  # not persistent
        assert not attached.lin1.weight.requires_grad and attached.lin2.weight.requires_grad
        del remote.lin1.scale
        attached(x).detach().numpy()
        assert dict(attached.named_buffers()).keys() == {"lin2.seen"}


def test_a_backward_brings_what_the_deployer_changed_meanwhile(cluster):
    with shared(cluster, "r6-backward") as (remote, other):
        attached = other.attach("r6-backward")
        x = torch.randn(8, 4, requires_grad=True)
        out = attached(x)
        remote.lin1.weight.requires_grad_(False)  # between the forward and its backward
        out.sum().backward()
        assert not attached.lin1.weight.requires_grad


def test_a_training_step_brings_what_the_deployer_changed_meanwhile(cluster):
    """An attached client's pipelined training step (train_step on a chain) answers with the
    stages' revisions too: the deployer's eval() shows on the attached model after it."""
    model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.5), nn.Linear(16, 3))
    with shared(cluster, "r6-step", model, stages=2, chunks=2) as (remote, other):
        attached = other.attach("r6-step")
        x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
        attached.train_step(x, y, nn.functional.cross_entropy)
        remote.eval()
        attached.train_step(x, y, nn.functional.cross_entropy)
        assert set(modes(attached).values()) == {False}, modes(attached)
