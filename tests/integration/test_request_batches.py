"""A client's requests to one worker may travel as one batch (``wire.encode_batch``, sent by
``disthook.distributed.send_together``): the worker takes each message of it as if it had
come alone, so each is checked on its own (a batch lets no client act for another), a
message that is off fails alone, and each request is answered under its own id."""
import os

import numpy as np
import pytest

import disthook as torch
import disthook.nn.functional as F
from disthook import nn, wire
from disthook.distributed import deployment_of, local_cluster
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(180)


def _answers(peer, count: int, timeout_s: float = 30.0) -> list:
    """The next ``count`` messages on ``peer``'s socket, decoded (a batch's one by one)."""
    out = []
    while len(out) < count:
        assert peer._sock.poll(int(timeout_s * 1000)), f"only {len(out)} of {count} answers came"
        out.extend(wire.decode_all(peer._sock.recv_multipart(copy=False)))
    return out


def test_each_request_of_a_batch_is_checked_and_answered_as_if_alone():
    with local_cluster(workers=1) as cluster:
        torch.manual_seed(0)
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 4), nn.ReLU()), stages=1)
        remote(torch.randn(2, 3))
        hub = deployment_of(remote)._hub
        model, victim = deployment_of(remote)._model_id, hub.reply_to
        address = next(iter(hub.socks))
        x = np.ones((5, 3), np.float32)
        me = b"mallory-" + os.urandom(8)
        with Peer(address, identity=me) as peer:
            batch = wire.encode_batch([
                # a forward in the deployer's name: refused, this one alone
                wire.encode("forward", {"model": model, "stage": 0, "inputs": [x],
                                        "grad_enabled": False, "reply_to": victim},
                            req=11, ctx="evil"),
                [b"\x93not a header"],  # off: refused alone, under no request id
                # its own forward, and a status: they run
                wire.encode("forward", {"model": model, "stage": 0, "inputs": [x],
                                        "grad_enabled": False, "reply_to": me.hex()},
                            req=12, ctx="own"),
                wire.encode("status", {}, req=13)])
            peer._sock.send_multipart(batch, copy=False)
            got = {m.req: m for m in _answers(peer, 4)}
        assert got[11].type == "error" and got[11]["kind"] == "PermissionError"
        assert got[0].type == "error" and "header" in got[0]["message"]
        assert got[12].type == "ok" and got[12]["result"] is not None
        assert got[13].type == "ok" and "contexts" in got[13]["result"]
        # the deployer's model still answers, unchanged
        assert remote(torch.ones(5, 3)).shape == (5, 4)


class _Gpt(nn.Module):
    """A forward that runs on the client: a few placed parts with ops between them."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.h = nn.ModuleList([nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8))
                                for _ in range(4)])
        self.head = nn.Linear(8, 11)

    def forward(self, idx):
        x = self.emb(idx)
        for block in self.h:
            x = x + block(x)
        return self.head(x)


def _loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1))


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_a_chunked_step_sends_its_bursts_as_batches_with_one_process_gradients(schedule):
    torch.manual_seed(0)
    local = _Gpt()
    idx, target = torch.randint(0, 11, (8, 5)), torch.randint(0, 11, (8, 5))
    import copy

    with local_cluster(workers=2) as cluster:
        model = cluster.deploy(copy.deepcopy(local), stages=2, chunks=4, schedule=schedule)
        hub = deployment_of(model)._hub
        for _ in range(2):  # (the first step learns the calls' forms: it waits more)
            for p in model.parameters():
                p.grad = None
            model.stats(reset=True)
            sent = hub.together.sent
            model.train_step(idx, target, _loss)
            requests, messages = model.stats()["requests"], hub.together.sent - sent
        got = {n: p.grad.numpy() for n, p in model.named_parameters()}
    losses = [_loss(local(idx[i:i + 2]), target[i:i + 2]) * 0.25 for i in range(0, 8, 2)]
    sum(losses).backward()
    for name, p in local.named_parameters():
        np.testing.assert_allclose(got[name], p.grad.numpy(), rtol=1e-5, atol=1e-6)
    if schedule == "1f1b":  # (GPipe sends as issued: no outbox holds its calls)
        assert messages * 2 < requests, (messages, requests)


def test_the_answers_to_a_run_of_a_clients_jobs_come_as_one_message():
    with local_cluster(workers=1) as cluster:
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 4)), stages=1)
        hub = deployment_of(remote)._hub
        model, address = deployment_of(remote)._model_id, next(iter(hub.socks))
        me = b"client-" + os.urandom(8)
        x = np.ones((2, 3), np.float32)

        def forward(req):
            return wire.encode("forward", {"model": model, "stage": 0, "inputs": [x],
                                           "grad_enabled": False, "reply_to": me.hex()},
                               req=req, ctx=f"c{req}")

        with Peer(address, identity=me) as peer:
            # a peer that never sent a batch is answered message by message
            assert peer.request("status", timeout=30).type == "ok"
            peer._sock.send_multipart(wire.encode_batch([forward(1), forward(2),
                                                         wire.encode("status", {}, req=3)]))
            assert peer._sock.poll(30_000)
            frames = peer._sock.recv_multipart(copy=False)
            got = wire.decode_all(frames)
            # (a status runs at once, beside the model's lane: its order may differ)
            assert sorted((m.req, m.type) for m in got) == [(1, "ok"), (2, "ok"), (3, "ok")]
            assert [m.req for m in got if m.req != 3] == [1, 2]


class _Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 64)  # (outputs past what comes with an answer: read apart)

    def forward(self, x):
        return self.a(x), self.a(x * 2)


def test_the_drops_of_values_ride_with_the_next_waited_request_to_their_worker():
    with local_cluster(workers=1) as cluster:
        torch.manual_seed(0)
        model = cluster.deploy(_Twice(), stages=1)
        hub = deployment_of(model)._hub
        x = torch.randn(8, 3)
        with torch.no_grad():
            model(x)  # (learns the calls' forms)
            first, second = model(x)
            expected = second.numpy().copy()
            first, second = model(x)
        model.stats(reset=True)
        del first  # its value on the worker is dropped with the next request that waits
        assert hub.pending_drops
        sent = hub.together.sent
        np.testing.assert_allclose(second.numpy(), expected)
        messages = hub.together.sent - sent
        assert not hub.pending_drops
        assert model.stats()["requests"] == 2 and messages == 1  # the drop and the read
