"""torch.nn.utils.prune and a deployed model. A pruning is a forward pre-hook that recomputes
``weight`` from ``weight_orig`` and ``weight_mask``; on a deployed module that hook fires on
the client while the module computes on its worker, which would keep its deployed tensors
(stale after a step, no gradient to ``weight_orig``: a silent wrong result). So pruning a
deployed module, and calling a module deployed pruned, are refused, saying to prune before
deploying and make the pruning permanent with ``prune.remove``, which is then exact."""
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
