"""What one client may have waiting on a worker behind its running request is capped
(--max-queued 4096 requests, --max-queued-mb 1024 MiB of their arrays, per key): past it a
request is refused with a RuntimeError naming the cap. Before, a client whose forward waited
on its own hook (never answered, for the 300 s hook deadline) and that kept sending made the
worker hold every request it sent: 6000 forwards of 64 KiB queued, and the worker's memory
grew by 390 MiB, without bound but the sender's patience."""
import os
import time

import numpy as np
import pytest

import disthook as torch
from disthook import nn, wire
from disthook.distributed import deployment_of, local_cluster
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(240)


def test_requests_queued_behind_a_clients_waiting_call_are_capped():
    with local_cluster(workers=1, secure=True, log_level="ERROR") as cluster:
        torch.manual_seed(0)
        remote = cluster.deploy(nn.Sequential(nn.Linear(4, 4)), stages=1, name="s")
        x = torch.randn(2, 4)
        expected = remote(x).detach().numpy()
        add_client(cluster.keys.directory, "mallory")
        model = deployment_of(remote)._model_id
        (w,) = cluster.workers()
        me = b"mallory-" + os.urandom(8)
        with Peer(w.address, keys=Keys.load(cluster.keys.directory, "mallory"),
                  identity=me) as peer:
            peer.request("add_hooks", {"model": model, "reply_to": me.hex(), "hooks": [
                {"hook": 1, "kind": "forward", "path": "0", "options": {}}]}, timeout=30)
            one = np.ones((1, 4), np.float32)
            sent = 4096 + 4  # one waits on its hook (never answered), 4096 wait behind it
            for i in range(sent):
                peer.send("forward", {"model": model, "stage": 0, "inputs": [one],
                                      "grad_enabled": False, "reply_to": me.hex()},
                          req=10**9 + i, ctx=f"c{i}")
            refusals, deadline = [], time.monotonic() + 120
            while len(refusals) < 3 and time.monotonic() < deadline:
                if peer._sock.poll(200):
                    reply = wire.decode(peer._sock.recv_multipart())
                    if reply.type == "error":
                        refusals.append(reply["message"])
            assert len(refusals) == 3, f"{len(refusals)} refused of {sent}"
            assert all("this client has 4096 requests waiting on this worker" in r
                       for r in refusals)
            assert "(--max-queued, --max-queued-mb)" in refusals[0]
            with Peer(w.address, keys=cluster.keys) as admin:
                assert admin.request("status", timeout=30)["result"]["queued"] == 4096
            start = time.monotonic()  # the deployer is not held up by it
            np.testing.assert_array_equal(remote(x).detach().numpy(), expected)
            assert time.monotonic() - start < 10
