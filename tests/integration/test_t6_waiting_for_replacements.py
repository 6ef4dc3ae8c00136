"""``wait_for_workers`` on a cluster that replaces the processes that end
(``local_cluster(restart=True)``) waits for the replacement of a worker killed meanwhile.
Before, it raised at once that the killed worker "exited with code -9 during start-up"."""
import os
import signal

import pytest
from clusters import wait_until

from disthook.distributed import local_cluster

pytestmark = pytest.mark.timeout(120)


def test_waiting_for_workers_while_a_killed_one_is_replaced():
    with local_cluster(workers=1, restart=True) as cluster:
        first = cluster._processes[1]
        os.kill(first.pid, signal.SIGKILL)
        wait_until(lambda: first.poll() is not None, 10)  # dead, not yet replaced (0.2 s)
        cluster.wait_for_workers(1, timeout=60)
        wait_until(lambda: any(w.alive and w.pid != first.pid for w in cluster.workers()), 60)
