"""Reuse of another client's ids on a service with keys: once a deployer closed its model
(unpublished, its stages unloaded), another client may not load a stage of its own under
that model's id on the same worker. A client still attached to the old model is bound to its
id and workers, and computed, unwarned, with the newcomer's weights; now its next call
fails, saying the model is gone, and its close() leaves quietly."""
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, connect, deployment_of, local_cluster
from disthook.distributed.spec import module_spec
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(180)


def test_an_unloaded_model_id_is_not_taken_by_another_client():
    with local_cluster(workers=1, secure=True, allow_code=False,
                       allow_model_modules=()) as cluster:
        for name in ("bob", "mallory"):
            add_client(cluster.keys.directory, name)
        torch.manual_seed(0)
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="m")
        model = deployment_of(remote)._model_id
        x = torch.randn(4, 3)
        with connect(cluster.address, keys=cluster.keys.directory, key_name="bob") as bob:
            attached = bob.attach("m")
            first = attached(x).detach().numpy()
            remote.close()  # unpublished, unloaded
            evil = nn.Sequential(nn.Linear(3, 2))
            with torch.no_grad():
                evil[0].weight.fill_(7.0)
            mallory = Keys.load(cluster.keys.directory, "mallory")
            refused = pytest.raises(RemoteError, match="PermissionError: model id .* was "
                                                       "another client's model")
            with Peer(cluster.workers()[0].address, keys=mallory) as peer, refused:
                peer.request("load_stage", {"model": model, "stage": 0,
                                            "spec": module_spec(evil)}, timeout=30)
            with pytest.raises(RemoteError, match="holds no stage of model"):
                attached(x)  # (before: mallory's weights' numbers, unwarned)
            assert first.shape == (4, 2)


def test_an_attached_client_closes_quietly_after_its_deployer_unloaded():
    """Its close() brings back nothing (the model is gone) and raises nothing."""
    with local_cluster(workers=1) as cluster:
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="m")
        with connect(cluster.address) as other:
            attached = other.attach("m")
            attached(torch.randn(2, 3))
            remote.close()
            attached_model = deployment_of(attached)
        assert attached_model._closed
