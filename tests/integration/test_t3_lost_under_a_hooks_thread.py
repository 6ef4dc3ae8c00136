"""A worker killed while a client hook's thread calls the model (the sockets lent to it,
socket_lock.py): the thread's call takes the close of the worker's connection and raises
``WorkerLost``; the call that fired the hook raises ``WorkerLost`` too, at once, naming the
worker (before, nothing told it: it waited for its answer until the request deadline,
then said ``RemoteTimeout``)."""
import os
import signal
import threading
import time

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import WorkerLost, local_cluster

pytestmark = pytest.mark.timeout(120)


def test_a_worker_lost_during_a_hooks_threads_call_fails_the_outer_call_at_once():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    x = torch.randn(4, 8)
    with local_cluster(workers=2, timeout=20) as cluster:
        remote = cluster.deploy(net, stages=2)
        last = next(w for w in cluster.workers() if w.stage == 1)
        fired, inner = [], []

        def call_from_a_thread():
            os.kill(last.pid, signal.SIGKILL)  # the later stage's worker dies now
            try:
                remote(x)
            except WorkerLost as exc:
                inner.append(exc)

        def hook(module, args, out):
            if fired:
                return
            fired.append(module)
            thread = threading.Thread(target=call_from_a_thread)
            thread.start()
            thread.join()

        remote[0].register_forward_hook(hook)
        started = time.monotonic()
        with pytest.raises(WorkerLost, match=f"worker {last.id}, holding stage 1, is lost"):
            remote(x)
        assert time.monotonic() - started < 10  # not the request deadline
        assert len(inner) == 1 and f"worker {last.id}" in str(inner[0])
        remote.close()
