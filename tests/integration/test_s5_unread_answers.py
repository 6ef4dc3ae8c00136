"""A client that sends a worker requests and reads none of the answers makes it hold only
so many bytes of answers for it (--max-unread-mb, 256 MiB a connection): past them an
answer is dropped and its request answered with a short error instead (tests/test_s5_unread.py).
Before, the worker held what ZeroMQ queued for the connection (counted, not weighed) and 256
more replies for 30 s, each as large as the model's output: 600 forwards answered with 2 MiB
each, never read, grew a worker by 627 MiB (255 MiB now), and larger outputs grow it further;
meanwhile the other clients' calls went on."""
import time

import numpy as np
import pytest
import zmq

import disthook as torch
from disthook import nn, wire
from disthook.distributed import deployment_of

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 1


def rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) // 1024


def test_answers_a_client_does_not_read_are_bounded_in_bytes(cluster):
    torch.manual_seed(0)
    remote = cluster.deploy(nn.Sequential(nn.Linear(1, 1 << 19)), stages=1)  # 2 MiB out
    model_id = deployment_of(remote)._model_id
    (address,) = deployment_of(remote)._addresses
    (worker,) = [w for w in cluster.workers() if w.address == address]
    x = torch.ones(1, 1)
    expected = remote(x).detach().numpy()
    before = rss_mib(worker.pid)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 1)  # reads nothing, and takes little off the wire
    sock.setsockopt(zmq.RCVBUF, 4096)
    identity = b"s5-unread"
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.connect(worker.address)
    try:
        one = np.ones((1, 1), np.float32)
        for i in range(600):
            sock.send_multipart(wire.encode("forward", {
                "model": model_id, "stage": 0, "inputs": [one], "grad_enabled": False,
                "reply_to": identity.hex()}, req=i + 1, ctx=f"c{i}"))
        start = time.monotonic()  # another client is not held up meanwhile
        np.testing.assert_array_equal(remote(x).detach().numpy(), expected)
        assert time.monotonic() - start < 10
        time.sleep(10)  # (the worker answered them all by now)
        grew = rss_mib(worker.pid) - before
    finally:
        sock.close()
    assert grew < 450, f"the worker holds {grew} MiB of unread answers"
    remote.close()
