"""A call that fails on a worker leaves nothing of its own there. Before, the answer's
error, finding which module failed, read the locals of the worker's frame that caught it
(still running), which kept them in it: the exception, its traceback, and every frame's
locals down to the raise, for as long as the worker ran. Each failed call kept its arrays:
8 more forwards that failed after computing 64 MiB grew a worker by 384 MiB (by nothing
now), and op calls refused at --max-value-mb (a RemoteValue's ``repeat`` to 1 GiB) kept
1 GiB each (a worker at 2097 MiB after two; 49 MiB now), so a client could grow a worker
without bound through the cap itself."""
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import deployment_of

pytestmark = pytest.mark.timeout(240)


class FailsLate(nn.Module):
    def forward(self, x):
        big = x.repeat(1 << 24, 1)  # 64 MiB of float32
        raise ValueError(f"fails after computing {tuple(big.shape)}")


def rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) // 1024


def test_failed_calls_keep_nothing_on_the_worker(cluster):
    remote = cluster.deploy(nn.Sequential(nn.Linear(1, 1), FailsLate()), stages=1)
    (address,) = deployment_of(remote)._addresses
    (worker,) = [w for w in cluster.workers() if w.address == address]
    x = torch.ones(1, 1)
    with pytest.raises(Exception, match="fails after computing"):
        remote(x).detach().numpy()
    before = rss_mib(worker.pid)
    for _ in range(8):
        with pytest.raises(Exception, match="fails after computing"):
            remote(x).detach().numpy()
    grew = rss_mib(worker.pid) - before
    assert grew < 200, f"8 failed calls left {grew} MiB on the worker"
    remote.close()
