"""A chunked call's micro-batches and a training step's stages draw (dropout) from streams
made from their client's own: ``manual_seed`` repeats them, and another client's calls in
between change nothing. Before, such a call carried no stream: its parts drew from the
worker's generator, which every other client's calls moved (and whose numbers a client could
learn by drawing)."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import connect

pytestmark = pytest.mark.timeout(240)


def _net():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5), nn.Linear(16, 16),
                         nn.Dropout(0.5)).train()


def _meddle(cluster, name):
    """Another client's calls of the same model: they draw on the same workers."""
    with connect(cluster.address) as other:
        attached = other.attach(name)
        attached(torch.ones(8, 16))
        attached(torch.ones(3, 16))
        attached.close()


def test_a_chunked_call_draws_from_its_clients_stream(cluster):
    remote = cluster.deploy(_net(), stages=2, chunks=2, name="s5-chunked")
    x = torch.ones(8, 16)
    torch.manual_seed(0)
    first = remote(x).detach().numpy()
    after = torch.randn(4).numpy()  # the client's stream moved past the call's
    _meddle(cluster, "s5-chunked")
    torch.manual_seed(0)
    again = remote(x).detach().numpy()
    np.testing.assert_array_equal(again, first)
    np.testing.assert_array_equal(torch.randn(4).numpy(), after)
    # each micro-batch a stream of its own; the next call others again
    assert not np.array_equal(first[:4], first[4:]), "two micro-batches drew the same masks"
    assert not np.array_equal(remote(x).detach().numpy(), first)
    remote.close()


def test_a_chunked_call_that_draws_nothing_leaves_the_stream(cluster):
    remote = cluster.deploy(_net().eval(), stages=2, chunks=2)
    torch.manual_seed(0)
    remote(torch.ones(8, 16))
    got = torch.randn(4).numpy()
    torch.manual_seed(0)
    np.testing.assert_array_equal(got, torch.randn(4).numpy())  # as in one process
    remote.close()


def test_a_training_step_draws_from_its_clients_stream(cluster):
    remote = cluster.deploy(_net(), stages=2, chunks=2, name="s5-step")
    x, y = torch.ones(8, 16), torch.zeros(8, 16)
    torch.manual_seed(0)
    first = remote.train_step(x, y, nn.functional.mse_loss).numpy()
    _meddle(cluster, "s5-step")
    torch.manual_seed(0)
    again = remote.train_step(x, y, nn.functional.mse_loss).numpy()
    np.testing.assert_array_equal(again, first)
    assert not np.array_equal(remote.train_step(x, y, nn.functional.mse_loss).numpy(),
                              first), "the next step drew the same masks"
    remote.close()


class SeedOrDraw(nn.Module):
    def forward(self, x):
        if float(x[0, 0]) >= 0:  # a call that sets the worker's stream, then draws
            torch.manual_seed(int(x[0, 0]))
        return torch.randn_like(x)


def test_a_call_given_no_stream_does_not_draw_the_next_numbers_of_another(cluster):
    """Raw calls carrying no stream (not the client library's): one that seeds the worker's
    generator must not decide what the next one draws."""
    from disthook.distributed import deployment_of
    from disthook.service.rpc import Peer

    remote = cluster.deploy(nn.Sequential(SeedOrDraw()), stages=1)
    model_id = deployment_of(remote)._model_id
    (address,) = deployment_of(remote)._addresses
    identity = b"s5-raw"

    def call(first):
        x = np.zeros((1, 64), np.float32)
        x[0, 0] = first
        reply = peer.request("forward", {"model": model_id, "stage": 0, "inputs": [x],
                                         "grad_enabled": False, "reply_to": identity.hex()},
                             timeout=30)
        return np.asarray(reply["result"]["output"])

    with Peer(address, identity=identity) as peer:
        call(7)
        after_seven = call(-1)
    torch.manual_seed(7)
    torch.randn(1, 64)
    assert not np.allclose(after_seven, torch.randn(1, 64).numpy()), \
        "a call drew the numbers the previous call's seed set up"
    remote.close()
