"""One large input costs a stage a small multiple of its size (issue 32): the first stage's
peak memory grows by at most twice a 64 MiB input over a forward and backward, with no
client hook on it (received as a view of its frame, kept in the graph, no other copy). A
client hook that sees the input costs more: its firing sends the input to the client, and
a pass run ahead of its answers keeps a copy of it (see docs/service.md)."""
import time

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import local_cluster

pytestmark = pytest.mark.timeout(180)


def peak_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc")


def test_a_large_input_costs_the_first_stage_at_most_twice_its_size():
    with local_cluster(workers=2) as cluster:
        torch.manual_seed(0)
        remote = cluster.deploy(nn.Sequential(nn.Linear(1024, 16), nn.ReLU(),
                                              nn.Linear(16, 4)), stages=2)
        (pid,) = [w.pid for w in cluster.workers()
                  if any(s.startswith("stage 0 ") for s in w.stages)]
        remote(torch.randn(4, 1024)).sum().backward()  # warm: imports, first allocations
        x = torch.randn(16384, 1024)  # 64 MiB
        time.sleep(0.3)
        before = peak_bytes(pid)
        remote(x).sum().backward()
        grown = peak_bytes(pid) - before
        assert grown <= 2 * x.numpy().nbytes, f"stage 0's peak grew by {grown >> 20} MiB"
        assert np.isfinite(remote[0].weight.grad.numpy()).all()
