"""On a model its deployer made writable, an attached client may change the weights, and
nothing more of the deployer's: loading its stage again (which would replace the stage's
modules, neighbours and owner, and drop what every client holds on it) is refused, on a
read-only model as before."""
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, deployment_of, local_cluster
from disthook.distributed.spec import module_spec
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("writable", [True, False], ids=["writable", "read-only"])
def test_an_attached_client_cannot_load_the_deployers_stage_again(writable):
    with local_cluster(workers=2, secure=True) as cluster:
        torch.manual_seed(0)
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)),
                                stages=2, writable=writable, name="shared")
        model = deployment_of(remote)._model_id
        (address,) = [w.address for w in cluster.workers() if f"stage 1 of {model}" in w.stages]
        add_client(cluster.keys.directory, "mallory")
        x = torch.randn(5, 3)
        expected = remote(x).detach().numpy()
        mallory = Keys.load(cluster.keys.directory, "mallory")
        with Peer(address, keys=mallory, identity=b"mallory-1") as peer, pytest.raises(
                RemoteError, match="PermissionError: loading stage 1 of .* again would replace "
                                   "it .* only the client that deployed it may"):
            peer.request("load_stage", {  # another module, its activations sent elsewhere
                "model": model, "stage": 1, "spec": module_spec(nn.Sequential(
                    nn.Linear(4, 2))), "next": "tcp://127.0.0.1:9"}, timeout=30)
        assert (remote(x).detach().numpy() == expected).all()  # the deployer's stage, as it was
        remote.load_state_dict(remote.state_dict())  # still its own to change
