"""A client that vanishes (killed, no clean-up) leaves forward graphs on the workers for
backwards that will never come: the workers drop them after their context deadline, and keep
serving everyone else."""
import subprocess
import sys
import textwrap
import time

import pytest

from disthook.distributed import local_cluster
from disthook.distributed.rpc import Peer

pytestmark = pytest.mark.timeout(120)

CLIENT = textwrap.dedent("""
    import os, sys
    import disthook as torch
    from disthook import nn
    from disthook.distributed import connect

    cluster = connect(sys.argv[1])
    remote = cluster.deploy(nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2)),
                            stages=2)
    outs = [remote(torch.ones(3, 4)) for _ in range(5)]  # 5 graphs, no backward
    print("graphs open", flush=True)
    os._exit(0)  # vanish: no close, no release
""")


def open_contexts(cluster) -> int:
    total = 0
    for w in cluster.workers():
        with Peer(w.address) as peer:
            total += peer.request("status", timeout=10)["result"]["contexts"]
    return total


def test_graphs_of_a_vanished_client_are_dropped_at_their_deadline():
    with local_cluster(workers=2, context_ttl=3.0) as cluster:
        run = subprocess.run([sys.executable, "-c", CLIENT, cluster.address],
                             capture_output=True, text=True, timeout=60)
        assert "graphs open" in run.stdout, run.stderr
        assert open_contexts(cluster) == 10  # 5 graphs on each of the 2 stages
        deadline = time.monotonic() + 15
        while open_contexts(cluster) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert open_contexts(cluster) == 0
        from test_remote import data, make_net  # and the cluster serves on

        x, _ = data()
        remote = cluster.deploy(make_net(), stages=2)
        assert remote(x).shape == (5, 3)
        remote.close()
