"""A worker's ``status`` counts hook calls by hook kind (``hooks_fired``). Before, it
counted every client's together and showed the count to every key: another key (a client
of the same shared model, or of another model on the same workers) read from it which
kinds of hooks the others hold and each call they make through them (a capture hook's
count rose by one per forward of its client). Now, with keys, a key reads the counts of
its own hooks only, as it reads only its own graphs and hooks in ``stage_stats``
(tests/integration/test_s8_status.py); the cluster's own keys read all."""
import os

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import deployment_of, hooks, local_cluster
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(180)


def test_another_key_does_not_read_whose_hooks_fired():
    with local_cluster(workers=1, secure=True) as cluster:
        torch.manual_seed(0)
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 4), nn.ReLU()), stages=1,
                                name="shared")
        remote[1].register_forward_hook(hooks.capture("acts"))
        model = deployment_of(remote)._model_id
        (address,) = [w.address for w in cluster.workers() if f"stage 0 of {model}" in w.stages]
        add_client(cluster.keys.directory, "mallory")
        mallory = Keys.load(cluster.keys.directory, "mallory")
        with Peer(address, keys=mallory, identity=b"mallory-" + os.urandom(8)) as peer:
            before = peer.request("status", timeout=30)["result"]["hooks_fired"]
            for _ in range(3):
                remote(torch.randn(2, 3))
            after = peer.request("status", timeout=30)["result"]["hooks_fired"]
        assert after == before == {}, (before, after)  # before: {'capture': 3} after
        # the deployer's key (the cluster's own client key here) reads them all
        assert cluster.hook_counts()[next(iter(cluster.hook_counts()))] == {"capture": 3}
