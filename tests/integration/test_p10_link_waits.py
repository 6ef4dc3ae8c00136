"""A training step's stage that waits for its neighbour's record on a local link waits on
the links alone (workers/link_handlers.py, ``wait_on_links``): one blocking poll, no round
of the worker's loop. The step gives one process's gradients and hooks, status counts such
waits, and a request that comes while a stage waits so is served at once, before the
record it waits for comes."""
import threading
import time

import pytest
from clusters import worker_statuses
from test_local_links import assert_one_process, train_and_look
from test_zero_bubble import data, make_net

from disthook import nn

pytestmark = pytest.mark.timeout(240)


def link_waits(cluster) -> int:
    """The waits of training steps that ended on the links alone, all workers."""
    return sum(s["links"]["waits"] for s in worker_statuses(cluster).values())


@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1"])
def test_steps_that_wait_on_the_links_equal_one_process(cluster, schedule):
    before = link_waits(cluster)
    got, log, _ = train_and_look(cluster, 3, schedule)
    assert_one_process(got, log)
    # a later stage waits for its first activation (the first stage computes it first)
    assert link_waits(cluster) > before


def test_a_request_is_served_while_a_stage_waits_on_its_links(cluster):
    """Stage 0 of 2 sends its activations and waits for the first gradient, which stage 1
    sends only once a client hook of its forward returns; the test holds that hook while it
    asks worker 0 for its status: the answer comes while the hook is held."""
    release, held = threading.Event(), threading.Event()

    def hold(module, args, out):
        held.set()
        release.wait(30)

    remote = cluster.deploy(make_net(), stages=2, chunks=2, schedule="1f1b")
    try:
        remote[5].register_forward_hook(hold)
        x, y = data()
        step = threading.Thread(target=remote.train_step,
                                args=(x, y, nn.functional.cross_entropy))
        step.start()
        try:
            assert held.wait(60)
            time.sleep(0.5)  # (stage 0 has sent its forwards and waits for a gradient)
            started = time.monotonic()
            statuses = worker_statuses(cluster)  # (each worker's own answer)
            assert time.monotonic() - started < 5 and not release.is_set()
            assert len(statuses) == 3
        finally:
            release.set()
            step.join(60)
        assert not step.is_alive()
    finally:
        remote.close()
