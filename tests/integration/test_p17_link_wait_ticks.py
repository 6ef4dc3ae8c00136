"""A training step's stage waiting for its neighbour's record on a local link runs the
worker's tick inside that wait (workers/link_handlers.py, ``_links_alone``), where it used to
leave the wait for a round of the worker's loop and a general wait opened for it: the first
tick due meanwhile runs there and the wait goes on; a second ends it and the general wait
takes over. Either way the step gives one process's gradients and hooks."""
import threading
import time

import pytest
from clusters import worker_statuses
from test_local_links import assert_one_process
from test_zero_bubble import data, hook_everything, make_net

from disthook import nn

pytestmark = pytest.mark.timeout(240)


def wait_ticks(cluster) -> int:
    """Ticks run inside a step's wait on the links, all workers."""
    return sum(s["links"].get("wait_ticks", 0) for s in worker_statuses(cluster).values())


@pytest.mark.parametrize("hold_s", [0.7, 1.6])
def test_a_wait_on_the_links_that_a_tick_falls_into_stays_there(cluster, hold_s):
    """Stage 1's first forward hook holds ``hold_s`` (one tick interval and more, or several)
    while stage 0 waits on its link for the first gradient: a tick falls due in that wait
    and runs inside it; the step equals one process's."""
    log, first = [], threading.Event()

    def hold(module, args, out):
        if not first.is_set():
            first.set()
            time.sleep(hold_s)

    before = wait_ticks(cluster)
    remote = cluster.deploy(make_net(), stages=2, chunks=4, schedule="1f1b")
    try:
        hook_everything(remote, log)
        remote[5].register_forward_hook(hold)
        x, y = data()
        remote.train_step(x, y, nn.functional.cross_entropy)
        grads = {n: p.grad.numpy() for n, p in remote.named_parameters()}
    finally:
        remote.close()
    assert first.is_set()
    assert_one_process(grads, log)
    assert wait_ticks(cluster) > before
