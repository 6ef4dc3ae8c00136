"""What an op call computes on a worker and sends back (not kept there) is weighed by the
same cap as what it keeps (--max-value-mb, 1 GiB), before it is packed: a raw client that
asked for an ``expand`` of one float to 2^28 + 1 of them, not kept, had the worker copy the
view to 1 GiB for the answer (its peak memory grew by 1 GiB) and send it. Kept, the same
output was refused before anything was copied."""
import numpy as np
import pytest

from disthook import nn
from disthook.distributed import deployment_of
from disthook.service import op_calls
from disthook.service.rpc import Peer, RemoteError
from disthook.service.values import pack

pytestmark = pytest.mark.timeout(180)


def peak_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(status.read().split("VmHWM:")[1].split()[0]) // 1024


def test_an_answer_computed_past_the_value_cap_is_refused_before_it_is_made(cluster):
    import disthook as torch

    remote = cluster.deploy(nn.Sequential(nn.Linear(1, 1)), stages=1)
    model_id = deployment_of(remote)._model_id
    (address,) = deployment_of(remote)._addresses
    (worker,) = [w for w in cluster.workers() if w.address == address]
    identity = b"s5-computed"
    before = peak_mib(worker.pid)
    with Peer(address, identity=identity) as peer, pytest.raises(RemoteError) as refused:
        peer.request("forward", {
            "model": model_id, "stage": 0, "inputs": [], "grad_enabled": False,
            "reply_to": identity.hex(), "op": "disthook.ops.shape.Expand",
            "params": op_calls.encode_params({"shape": ((1 << 28) + 1,)}),
            "call": pack(((torch.ones(1),), {}))}, timeout=60)
    grew = peak_mib(worker.pid) - before
    assert "(--max-value-mb)" in str(refused.value)
    assert grew < 256, f"the worker's peak grew by {grew} MiB"
    np.testing.assert_array_equal(remote(torch.ones(1, 1)).detach().numpy().shape, (1, 1))
    remote.close()
