"""Local links carry large activations and gradients in shared memory (workers/arena.py):
steps over them give one process's gradients and hooks, and the same bits as a cluster
started with DISTHOOK_LINK_ARENA_MB=0; a neighbour killed leaves its survivors no arena
mapped and nothing in /dev/shm."""
import os
import signal
import time

import numpy as np
import pytest
from clusters import worker_statuses
from helpers import micro_batched_grads

import disthook as torch
from disthook import nn
from disthook.distributed import WorkerLost, local_cluster
from workers.arena import arena_bytes

pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif(not arena_bytes(), reason="arenas: x86-64 Linux only")]
ROWS, CHUNKS, WIDTH = 64, 4, 512  # a micro-batch's activation: 16 x 512 floats, 32 KiB


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.Tanh(),
                         nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 3))


def data():
    torch.manual_seed(1)
    return torch.randn(ROWS, 16), torch.randint(0, 3, (ROWS,))


def hook(model, log):
    """A hook on a stage-boundary activation's gradient and a full backward hook."""
    model.get_submodule("4").register_full_backward_hook(
        lambda m, gi, go: log.append(("full backward", go[0].numpy().copy())))

    def activation(m, args, out):
        out.register_hook(lambda g: log.append(("activation", g.numpy().copy())))

    model.get_submodule("2").register_forward_hook(activation)


def one_process(log):
    net = make_net()
    hook(net, log)
    return micro_batched_grads(net, *data(), CHUNKS)


def train(cluster, schedule, log):
    remote = cluster.deploy(make_net(), stages=3, split_points=[2, 4], chunks=CHUNKS,
                            schedule=schedule)
    try:
        hook(remote, log)
        x, y = data()
        remote.train_step(x, y, nn.functional.cross_entropy)
        grads = {n: p.grad.numpy() for n, p in remote.named_parameters()}
        counts = [s["links"]["arena_records"] for s in worker_statuses(cluster).values()]
    finally:
        remote.close()
    return grads, counts


@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1"])
def test_steps_through_the_arenas_equal_one_process_and_the_socket_path(
        cluster, monkeypatch, schedule):
    want_log, log, plain_log = [], [], []
    want = one_process(want_log)
    got, counts = train(cluster, schedule, log)
    # 3 stages, 4 micro-batches: 8 activations and 8 gradients, each 32 KiB
    assert sum(c["placed"] for c in counts) == sum(c["taken"] for c in counts) == 16
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-7)
    for kind in ("full backward", "activation"):  # (stages' hooks interleave as they come)
        ours, theirs = ([v for k, v in got_log if k == kind] for got_log in (log, want_log))
        assert len(ours) == len(theirs) == CHUNKS
        for a, b in zip(ours, theirs):  # micro-batch by micro-batch
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    monkeypatch.setenv("DISTHOOK_LINK_ARENA_MB", "0")  # the workers inherit it
    with local_cluster(workers=3, timeout=60) as plain:
        grads, counts = train(plain, schedule, plain_log)
    assert all(c == {"placed": 0, "taken": 0} for c in counts)
    for name in got:
        np.testing.assert_array_equal(grads[name], got[name])  # the same bits


def arena_maps(pid: int) -> int:
    with open(f"/proc/{pid}/maps") as f:
        return sum("memfd:disthook-link" in line for line in f)


def test_a_neighbour_killed_leaves_no_arena_mapped_nor_anything_in_dev_shm():
    shm = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    with local_cluster(workers=3, timeout=60) as cluster:
        remote = cluster.deploy(make_net(), stages=3, split_points=[2, 4], chunks=CHUNKS)
        x, y = data()
        remote.train_step(x, y, nn.functional.cross_entropy)
        stages = {stage: wid for stage, wid, _ in remote.workers()}
        pids = {w.id: w.pid for w in cluster.workers()}
        middle, last = pids[stages[1]], pids[stages[2]]
        assert arena_maps(middle) == 4  # two links each way: its own two, its neighbours'
        os.kill(last, signal.SIGKILL)
        with pytest.raises(WorkerLost):
            remote.train_step(x, y, nn.functional.cross_entropy)
        deadline = time.monotonic() + 20
        while arena_maps(middle) != 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert arena_maps(middle) == 2  # those of its links with the dead one went
        remote.close()
    if os.path.isdir("/dev/shm"):
        assert set(os.listdir("/dev/shm")) <= shm
