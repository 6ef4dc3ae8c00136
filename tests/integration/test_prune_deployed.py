"""torch.nn.utils.prune and a deployed model. A pruning is a forward pre-hook that recomputes
``weight`` from ``weight_orig`` and ``weight_mask``; on a deployed module that hook fires on
the client while the module computes on its worker, which would keep its deployed tensors
(stale after a step, no gradient to ``weight_orig``: a silent wrong result). So pruning a
deployed module, and calling a module deployed pruned, are refused, saying to prune before
deploying and make the pruning permanent with ``prune.remove``, which is then exact. A
model whose own forward runs on the client (a tree of parts) keeps its own parameters here:
those are pruned as in one process."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.nn.utils import prune

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


def chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 6), nn.Tanh(),
                         nn.Linear(6, 2))


def pruned(permanent: bool):
    model = chain()
    prune.l1_unstructured(model[0], "weight", 0.5)
    prune.ln_structured(model[2], "weight", 2, n=2, dim=0)
    if permanent:
        prune.remove(model[0], "weight")
        prune.remove(model[2], "weight")
    return model


class Net(nn.Module):
    """Parts on workers, and a parameter of its own used by its forward on the client."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(4, 6), nn.Linear(6, 2)
        self.scale = nn.Parameter(torch.tensor([1.0, -2.0, 0.5, 3.0, -0.1, 0.2]))

    def forward(self, x):
        return self.b(torch.relu(self.a(x)) * self.scale)


X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def test_pruning_a_deployed_module_is_refused_and_changes_nothing(cluster):
    remote = cluster.deploy(chain(), stages=2)
    try:
        before = remote(torch.tensor(X)).detach().numpy()
        names = [n for n, _ in remote.named_parameters()]
        with pytest.raises(NotImplementedError, match="Prune the model before deploying it"):
            prune.l1_unstructured(remote[0], "weight", 0.3)
        with pytest.raises(NotImplementedError, match="prune.remove"):
            prune.global_unstructured([(remote[0], "weight"), (remote[2], "weight")],
                                      prune.L1Unstructured, amount=0.3)
        assert [n for n, _ in remote.named_parameters()] == names
        assert not prune.is_pruned(remote) and not remote[0]._forward_pre_hooks
        np.testing.assert_array_equal(remote(torch.tensor(X)).detach().numpy(), before)
    finally:
        remote.close()


def test_a_model_deployed_whole_refuses_too(cluster):
    remote = cluster.deploy(nn.Linear(4, 2))
    try:
        with pytest.raises(NotImplementedError, match="Prune the model before deploying it"):
            prune.ln_structured(remote, "weight", 1, n=2, dim=0)
        assert [n for n, _ in remote.named_parameters()] == ["weight", "bias"]
    finally:
        remote.close()
    model = nn.Linear(4, 2)
    prune.l1_unstructured(model, "weight", 3)
    remote = cluster.deploy(model)
    try:
        with pytest.raises(NotImplementedError, match="prune.remove"):
            remote(torch.tensor(X))
    finally:
        remote.close()


def test_a_model_deployed_pruned_is_refused_at_its_call(cluster):
    remote = cluster.deploy(pruned(permanent=False), stages=2)
    try:
        assert prune.is_pruned(remote)
        with pytest.raises(NotImplementedError, match=r"prune\.remove\(module, 'weight'\)"):
            remote(torch.tensor(X))
        with pytest.raises(NotImplementedError, match="deployed Linear"):
            prune.remove(remote[0], "weight")
    finally:
        remote.close()


def test_a_pruning_made_permanent_before_deploying_runs_as_in_one_process(cluster):
    local = pruned(permanent=True)
    want = local(torch.tensor(X))
    want.pow(2).sum().backward()
    remote = cluster.deploy(pruned(permanent=True), stages=2)
    try:
        got = remote(torch.tensor(X))
        got.pow(2).sum().backward()
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
        assert (remote[0].weight.detach().numpy() == 0).sum() == 12
        assert (remote[2].weight.detach().numpy() == 0).all(axis=1).sum() == 2
        for (name, p), (_, q) in zip(remote.named_parameters(), local.named_parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7,
                                       err_msg=name)
    finally:
        remote.close()


def test_the_own_parameter_of_a_model_run_here_is_pruned_as_in_one_process(cluster):
    local = Net()
    prune.l1_unstructured(local, "scale", 2)
    want = local(torch.tensor(X))
    want.pow(2).sum().backward()
    remote = cluster.deploy(Net(), stages=2)
    try:
        prune.l1_unstructured(remote, "scale", 2)
        got = remote(torch.tensor(X))
        got.pow(2).sum().backward()
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
        assert list(remote.state_dict()) == list(local.state_dict())
        for (name, p), (_, q) in zip(remote.named_parameters(), local.named_parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7,
                                       err_msg=name)
        prune.remove(remote, "scale")
        prune.remove(local, "scale")
        assert [n for n, _ in remote.named_parameters()] == [n for n, _ in
                                                            local.named_parameters()]
        np.testing.assert_array_equal(remote.scale.detach().numpy(),
                                      local.scale.detach().numpy())
    finally:
        remote.close()
