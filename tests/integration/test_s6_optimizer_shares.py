"""The optimizers' shares a client keeps on a stage are capped by count (MAX_OPTIMIZERS a
client and stage). A share is made on a client's first call of an optimizer id, is never
dropped before the client goes, and holds the param-group keys the client sent: a client of
a read-only model that sent 300 ``zero_grad`` calls under fresh ids, each with 900 KiB in a
group's keys, grew a worker by 267 MiB, and more calls grew it further."""
import os

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, deployment_of
from disthook.service.rpc import Peer
from workers.limits import MAX_OPTIMIZERS

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 1


def test_a_client_keeps_a_bounded_number_of_optimizer_shares(cluster):
    torch.manual_seed(0)
    remote = cluster.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="s6-optimizers")
    model = deployment_of(remote)._model_id
    (address,) = deployment_of(remote)._addresses
    x = torch.ones(1, 3)
    expected = remote(x).detach().numpy()

    def zero_grad(i):
        return peer.request("step", {"model": model, "optimizer": {
            "id": i, "class": "SGD", "kwargs": {"lr": 0.1}, "params": ["0.weight"],
            "action": "zero_grad", "groups": [{"index": 0, "params": ["0.weight"],
                                               "hyper": {"lr": 0.1, "note": "n" * 1000}}]}},
            timeout=30)

    with Peer(address, identity=b"s6-" + os.urandom(4)) as peer:
        for i in range(MAX_OPTIMIZERS):
            zero_grad(i)
        zero_grad(0)  # one it has: used again
        with pytest.raises(RemoteError, match=f"keeps the shares of {MAX_OPTIMIZERS} "
                                              "optimizers on stage 0 of"):
            zero_grad(MAX_OPTIMIZERS)
    np.testing.assert_array_equal(remote(x).detach().numpy(), expected)
    remote.close()
