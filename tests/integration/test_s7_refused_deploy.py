"""A deploy that a worker refuses (a shared service's workers take classes only from the
allowed modules) fails with the worker's own reason, and leaves nothing loaded. Before, the
deploy's cleanup asked each worker for its stage's values first: the worker that had refused
held no stage, so the deploy failed saying 'holds no stage of model ...; was the model
closed?', and the stages loaded before the refusal stayed loaded."""
import pytest
from clusters import worker_statuses

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, local_cluster

pytestmark = pytest.mark.timeout(120)


class NotAllowed(nn.Module):
    """A class of this test module, which the workers are not allowed to import."""

    def forward(self, x):
        return x * 2


def test_a_refused_class_is_the_error_and_nothing_stays_loaded():
    with local_cluster(workers=2, allow_code=False, allow_model_modules=()) as cluster:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(3, 3), NotAllowed())
        before = [p.detach().clone() for p in net.parameters()]
        with pytest.raises(RemoteError, match=r"SpecError: .*importing "
                                              r"'test_s7_refused_deploy' is not allowed"):
            cluster.deploy(net, stages=2)
        held = {wid: s["stages"] for wid, s in worker_statuses(cluster).items()}
        assert not any(held.values()), held  # stage 0 loaded, then dropped again
        # the model here is as it was, and deploys where its classes are allowed
        assert all(torch.equal(a, b.detach()) for a, b in zip(before, net.parameters()))
        ok = cluster.deploy(nn.Sequential(nn.Linear(3, 3), nn.ReLU()), stages=2)
        assert ok(torch.ones(1, 3)).shape == (1, 3)
        ok.close()
