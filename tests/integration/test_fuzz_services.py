"""10,000 random and mutated messages at the coordinator and at a worker that holds a stage:
each process keeps serving, and a training step afterwards gives the right values."""
import random

import numpy as np
import pytest
import zmq
from test_remote import data, make_net

from disthook import nn, wire
from disthook.distributed import deployment_of, local_cluster

pytestmark = pytest.mark.timeout(300)

TYPES = sorted(wire.SCHEMAS)
HARMLESS = [t for t in TYPES if t not in ("shutdown",)]


def mutated_messages(rng: random.Random, n: int):
    """Random frames, truncated and corrupted valid messages, unknown types, wrong field
    kinds, huge declared arrays, and well-formed messages for models nobody holds."""
    valid = wire.encode("forward", {"model": "nobody", "stage": 0,
                                    "inputs": [np.ones((2, 8), np.float32)],
                                    "grad_enabled": True, "reply_to": "00"})
    valid = [bytes(f) for f in valid]
    for i in range(n):
        kind = i % 6
        if kind == 0:
            yield [rng.randbytes(rng.randint(0, 64)) for _ in range(rng.randint(1, 4))]
        elif kind == 1:  # a valid message with bytes flipped in its header
            head = bytearray(valid[0])
            for _ in range(rng.randint(1, 4)):
                head[rng.randrange(len(head))] = rng.randrange(256)
            yield [bytes(head), *valid[1:]]
        elif kind == 2:  # truncated frames, or frames missing
            cut = valid[0][:rng.randrange(len(valid[0]))]
            yield [cut] if rng.random() < 0.5 else [valid[0]]
        elif kind == 3:  # a well-formed message of a random type with random fields
            t = rng.choice(HARMLESS)
            fields = {k: rng.choice([None, 1, "x", [1, 2], {"a": 1}, True, 2.5])
                      for k in wire.SCHEMAS[t]}
            try:
                yield [bytes(f) for f in wire.encode(t, fields)]
            except wire.WireError:
                yield [rng.randbytes(8)]
        elif kind == 4:  # a huge declared array behind a tiny frame
            yield [bytes(wire.encode("status", {})[0]).replace(b"\xa1a\x90", b"\xa1a\x91\x92"
                   b"\xa3<f4\x91\xce\x7f\xff\xff\xff"), b"1234"]
        else:  # valid messages for a model nobody holds, including pipeline traffic
            yield [bytes(f) for f in wire.encode("pipe", {
                "model": f"m{rng.randrange(100)}", "step": str(i), "kind": "act",
                "mb": rng.randrange(8), "data": np.zeros(3, np.float32)})]


def _read_until_status(sock, address: str, req: int) -> int:
    """Send a status request ``req`` and read replies until its answer: the number of other
    replies read (the error replies to what was sent before it)."""
    sock.send_multipart(wire.encode("status", {}, req=req))
    others = 0
    while True:
        assert sock.poll(120_000), f"{address} stopped answering"
        reply = wire.decode(sock.recv_multipart())
        if reply.req == req:
            assert reply.type == "ok"
            return others
        others += 1


def test_services_survive_a_storm_of_bad_messages_and_still_train_right():
    with local_cluster(workers=2) as cluster:
        remote = cluster.deploy(make_net(), stages=2)
        targets = [cluster.address] + [w.address for w in cluster.workers()]
        ctx = zmq.Context.instance()
        rng = random.Random(0)
        sent = answered = 0
        for address in targets:
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(address)
            try:
                # a process serves one connection in order: once a status sent after some
                # messages is answered, every one of them was handled. Every 32 messages
                # the client reads its replies that way, as a client that reads its replies
                # does: the coordinator keeps only so many unread ones for a peer (its send
                # queue, then loop.UNROUTABLE_KEPT)
                for frames in mutated_messages(rng, 3400):
                    sock.send_multipart(frames)
                    sent += 1
                    if sent % 32 == 0:
                        answered += _read_until_status(sock, address, 987654 + sent)
                answered += _read_until_status(sock, address, 987654)
            finally:
                sock.close()
        assert sent >= 10_000
        assert answered > 5_000  # most bad messages got an error reply
        # every process still serves, and a training step is exactly right
        assert all(w.alive for w in cluster.workers())
        local = make_net()
        x, y = data()
        nn.functional.cross_entropy(local(x), y).backward()
        nn.functional.cross_entropy(remote(x), y).backward()
        grads = remote.named_gradients()
        for name, p in local.named_parameters():
            np.testing.assert_allclose(grads[name].numpy(), p.grad.numpy(), rtol=1e-6,
                                       atol=1e-7)
        # pipeline messages for a model the worker holds, that no step will ever ask for,
        # are kept up to a bound
        from clusters import wait_until

        from disthook.service.rpc import Peer
        from workers.state import MAILBOX_LIMIT

        first = cluster.workers()[0].address
        # from a client they are refused (issue 32); from a (faulty) neighbour stage, bounded
        with Peer(first) as client, Peer(first, identity=b"w9>prev>1") as neighbour:
            for peer, count in ((client, 100), (neighbour, MAILBOX_LIMIT + 500)):
                for i in range(count):
                    peer._sock.send_multipart(wire.encode("pipe", {
                        "model": deployment_of(remote)._model_id, "step": f"s{i}", "kind": "act", "mb": 0,
                        "data": None}))
                expected = 0 if peer is client else MAILBOX_LIMIT
                # (asked on the client's connection: the neighbour's may still be read)
                wait_until(lambda e=expected: client.request(
                    "status", timeout=60)["result"]["mailbox"] == e, 60)
        remote.close()
