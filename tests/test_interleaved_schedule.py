"""Interleaved 1F1B as pure code (disthook.distributed.interleaved), without processes: every
virtual stage forwards and backwards each micro-batch once, in dependency order, nothing
deadlocks, v = 1 is 1F1B, and broken lists are refused with the action named."""
import pytest
from sweeps import where

from disthook.distributed.interleaved import (
    interleaved_1f1b,
    simulate_interleaved,
    virtual_stages,
)
from disthook.distributed.schedule import ScheduleError, one_f_one_b

# every worker and chunk count with one and two groups of micro-batches in the default run;
# every multiple of p up to 24 with -m exhaustive
SIZES = where([(p, v, m) for p in range(1, 9) for v in range(1, 5) for m in range(p, 25, p)],
              lambda n, pvm: pvm[2] in {pvm[0], 2 * pvm[0]}, names=3)


@pytest.mark.parametrize("p,v,m", SIZES)
def test_every_virtual_stage_runs_each_micro_batch_once_in_order(p, v, m):
    devices = interleaved_1f1b(p, m, v)
    order = simulate_interleaved(devices, v, m)
    for w, actions in enumerate(devices):
        assert {k for _, _, k in actions} == set(virtual_stages(p, v)[w])
        kinds = [kind for kind, _, _ in actions]
        assert kinds.count("forward") == kinds.count("backward") == m * v
    when = {(w, a): i for i, (w, a) in enumerate(order)}
    for k in range(p * v - 1):  # forward goes up the virtual stages, backward down
        for mb in range(m):
            assert when[((k + 1) % p, ("forward", mb, k + 1))] > when[(k % p, ("forward", mb, k))]
            assert when[(k % p, ("backward", mb, k))] > when[((k + 1) % p, ("backward", mb, k + 1))]


@pytest.mark.parametrize("p,m", [(1, 3), (2, 4), (4, 8), (8, 16)])
def test_one_chunk_per_worker_is_1f1b(p, m):
    got = [[(kind, mb) for kind, mb, _ in actions] for actions in interleaved_1f1b(p, m, 1)]
    assert got == one_f_one_b(p, m)


def test_two_workers_two_chunks_four_micro_batches():
    # worker 0 holds virtual stages 0 and 2, worker 1 stages 1 and 3; micro-batches go in
    # groups of 2 through chunk 0, then chunk 1; backwards from the last chunk down
    w0 = [(kind, mb, k) for kind, mb, k in interleaved_1f1b(2, 4, 2)[0]
          if kind in ("forward", "backward")]
    assert w0[:4] == [("forward", 0, 0), ("forward", 1, 0), ("forward", 0, 2),
                      ("forward", 1, 2)]
    assert [a for a in w0 if a[0] == "backward"] == [
        ("backward", 0, 2), ("backward", 1, 2), ("backward", 0, 0), ("backward", 1, 0),
        ("backward", 2, 2), ("backward", 3, 2), ("backward", 2, 0), ("backward", 3, 0)]


def test_broken_lists_and_bad_sizes_are_refused():
    devices = interleaved_1f1b(2, 2, 2)
    swapped = [list(d) for d in devices]
    i = next(i for i, a in enumerate(swapped[1]) if a[0] == "forward")
    swapped[1][i - 1], swapped[1][i] = swapped[1][i], swapped[1][i - 1]  # forward first
    with pytest.raises(ScheduleError, match="before"):
        simulate_interleaved(swapped, 2, 2)
    wrong_worker = [list(devices[1]), list(devices[0])]
    with pytest.raises(ScheduleError, match="not an action of its own"):
        simulate_interleaved(wrong_worker, 2, 2)
    with pytest.raises(ScheduleError, match="deadlock"):
        simulate_interleaved([[("recv_act", 0, 2)], devices[1]], 2, 2)
    with pytest.raises(ValueError, match="not a multiple of 4"):
        interleaved_1f1b(4, 6, 2)
    with pytest.raises(ValueError, match="chunks per worker"):
        interleaved_1f1b(2, 2, 0)
