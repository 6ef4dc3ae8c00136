"""Requests queued behind a client's waiting call are counted by what they hold, their
headers as decoded included. The cap counted their arrays only: a header of 1 MiB of empty
msgpack maps, no array at all, decodes into about 72 MiB of Python objects, and 20 such
forwards, queued behind a forward waiting on its client hook (never answered), held 1447 MiB
of a worker; 4096 of them (the count cap) would have held hundreds of GiB."""
import os
import time

import numpy as np
import pytest
import zmq
from clusters import worker

from disthook import nn, wire
from disthook.distributed import connect, deployment_of
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(180)


def test_queued_headers_count_as_what_they_decode_into():
    with worker("--max-queued-mb", "64") as address, connect(address.coordinator,
                                                             timeout=30) as cluster:
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 2)))
        model = deployment_of(remote)._model_id
        with Peer(address, identity=b"mallory-" + os.urandom(8)) as peer:
            me = peer._sock.getsockopt(zmq.IDENTITY).hex()
            peer.request("add_hooks", {"model": model, "reply_to": me, "hooks": [
                {"hook": 1, "kind": "forward", "path": "0", "options": {}}]}, timeout=30)
            call = {"model": model, "stage": 0, "grad_enabled": False, "reply_to": me}
            peer.send("forward", {**call, "inputs": [np.ones((1, 3), np.float32)]}, req=1)
            bulky = {**call, "inputs": [], "params": [{}] * (64 << 10)}  # a 64 KiB header
            for i in range(40):  # behind the first, whose hook is never answered
                peer.send("forward", bulky, req=100 + i)
            refused, deadline = [], time.monotonic() + 60
            while len(refused) < 20 and time.monotonic() < deadline:
                if peer._sock.poll(200):
                    reply = wire.decode(peer._sock.recv_multipart())
                    if reply.type == "error":
                        refused.append(reply["message"])
            assert len(refused) >= 20, f"{len(refused)} of 40 refused"
            assert all("would pass the cap of 4096 requests or 64 MiB" in r for r in refused)
