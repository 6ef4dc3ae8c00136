"""A client process stopped (SIGSTOP, a laptop's suspend, a debugger's pause) past the
workers' patience: they drop its connection, and when it runs again its next call says so,
naming the worker, that it still answers, and what to do, rather than calling a live worker
lost and telling an attached client to recover()."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import connect, local_cluster
from disthook.wire import HEARTBEAT_S, LOST_AFTER_BEATS

pytestmark = pytest.mark.timeout(120)

CLIENT = textwrap.dedent("""
    import sys
    import disthook as torch
    from disthook.distributed import WorkerLost, connect

    with connect(sys.argv[1]) as cluster:
        model = cluster.attach("mlp")
        model(torch.ones(2, 4))
        print("ready", flush=True)
        sys.stdin.readline()  # stopped and continued meanwhile
        for _ in range(2):  # the second call says the same, at once
            try:
                model(torch.ones(2, 4))
                print("no error", flush=True)
            except WorkerLost as exc:
                print(type(exc).__name__, exc, flush=True)
""")


def test_a_client_stopped_past_the_workers_patience_is_told_the_worker_still_answers():
    with local_cluster(workers=2, timeout=30) as cluster:
        remote = cluster.deploy(nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2)),
                                stages=2, name="mlp")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        client = subprocess.Popen([sys.executable, "-c", CLIENT, cluster.address], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert client.stdout.readline().strip() == "ready"
            os.kill(client.pid, signal.SIGSTOP)
            time.sleep(LOST_AFTER_BEATS * HEARTBEAT_S * 3)  # well past the workers' patience
            os.kill(client.pid, signal.SIGCONT)
            started = time.monotonic()
            out, _ = client.communicate("go\n", timeout=60)
            assert time.monotonic() - started < 15  # not a request deadline
        finally:
            if client.poll() is None:
                os.kill(client.pid, signal.SIGCONT)
                client.kill()
            client.wait()
        lines = out.splitlines()
        assert len(lines) == 2 and lines[0].startswith("WorkerLost"), out
        for line in lines:
            assert "still answers, but its connection with this client closed" in line, line
            assert "is lost" not in line, line
            assert "attach" in line, line  # what to do
        # the worker is alive indeed, and serves the deployer and newcomers
        x = torch.ones(2, 4)
        with connect(cluster.address) as other:
            assert bool((other.attach("mlp")(x) == remote(x)).all())
        remote.close()
