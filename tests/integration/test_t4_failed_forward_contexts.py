"""A forward through a deployed chain that fails at a later stage (a client hook there raises)
leaves no graph open on the stages that already ran: the error reaches the program, the next
call works, and the workers' contexts stay flat over hundreds of such calls (before, each
failed call left its earlier stages' contexts, one per micro-batch, until their time ran out:
in the T4 soak stage 0's worker counted 2 more for every raised hook)."""
import pytest
from clusters import worker_statuses

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2
pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("chunks", [1, 2])
def test_failed_forwards_leave_no_contexts(cluster, chunks):
    torch.manual_seed(0)
    remote = cluster.deploy(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)),
                            stages=2, chunks=chunks)
    x = torch.randn(4, 8)

    def bad(module, args, out):
        raise ValueError("boom from the hook")

    for _ in range(150):
        handle = remote[2].register_forward_hook(bad)
        with pytest.raises(Exception, match="boom from the hook"):
            remote(x)
        handle.remove()
        remote(x).sum().backward()  # the next call works (and carries the releases)
    remote(x).sum().backward()
    contexts = {wid: s["contexts"] for wid, s in worker_statuses(cluster).items()}
    assert contexts == {wid: 0 for wid in contexts}, contexts
