"""Random draws in a deployed model's forward are each client's own stream, in eval mode
too. A call carried the client's stream in training mode only: in eval mode a module that
draws (noise, sampling) drew from whatever stream the worker had last, so a seeded program
did not draw what it draws in one process, and a client calling without a stream drew the
next numbers of the stream another client's call had left there: the numbers that client
was about to draw."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import deployment_of
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(180)


class Noisy(nn.Module):
    def forward(self, x):
        return x + torch.randn_like(x)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_a_seeded_forward_draws_what_it_draws_in_one_process(cluster, training):
    model = nn.Sequential(nn.Linear(2, 2), Noisy()).train(training)
    x = torch.zeros(3, 2)
    torch.manual_seed(0)
    want = model(x).detach().numpy()
    remote = cluster.deploy(model, stages=2)
    torch.manual_seed(0)
    np.testing.assert_allclose(remote(x).detach().numpy(), want, rtol=1e-6)
    remote.close()


def test_a_call_given_no_stream_draws_none_of_another_clients(cluster):
    remote = cluster.deploy(nn.Sequential(Noisy()).train(), stages=1)
    x = torch.zeros(1, 64)
    torch.manual_seed(0)
    remote(x)  # the deployer's stream goes to the worker and comes back
    deployer_next = torch.randn(1, 64).numpy()  # what it draws next, here
    model_id = deployment_of(remote)._model_id
    (address,) = [w.address for w in cluster.workers() if any(model_id in s for s in w.stages)]
    identity = b"mallory-s4"
    with Peer(address, identity=identity) as peer:
        reply = peer.request("forward", {"model": model_id, "stage": 0,
                                         "inputs": [np.zeros((1, 64), np.float32)],
                                         "grad_enabled": False, "reply_to": identity.hex()},
                             timeout=30)
    drawn = np.asarray(reply["result"]["output"])
    assert not np.allclose(drawn, deployer_next), "drew the deployer's next numbers"
    remote.close()
