"""The default dtype a call computes under is its own client's, on a worker that other
clients' calls share: a call carries its client's default dtype (``torch.set_default_dtype``)
and the worker sets it while the call computes. The setting is the worker process's, and a
call that waits (on its client's hook, a neighbour's activation) lets others run; before,
they ran under the waiting call's dtype: a client whose own model's hook waited under float16
made another client's model make ``torch.full(shape, 0.1)`` in float16 (0.0999755859375
where 0.1 was right, silently), and the waiting call's own dtype was whatever was left."""
import threading

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import connect

pytestmark = pytest.mark.timeout(120)

CLUSTER_WORKERS = 1


class AddTenth(nn.Module):
    """Adds a tensor it makes with the default dtype."""

    def forward(self, x):
        return x + torch.full(x.shape, 0.1)


def _expected(dtype) -> list:
    torch.set_default_dtype(dtype)
    try:
        return AddTenth()(torch.zeros(1, 3)).tolist()
    finally:
        torch.set_default_dtype(torch.float32)


def test_a_waiting_call_lends_its_default_dtype_to_no_other_call(cluster):
    as_float16, as_float32 = _expected(torch.float16), _expected(torch.float32)
    assert as_float16 != as_float32  # (0.0999755859375 against 0.1 in float32)
    victim = cluster.deploy(nn.Sequential(AddTenth()), stages=1)
    hooked, go, out = threading.Event(), threading.Event(), {}
    with connect(cluster.address, timeout=60) as other:
        mine = other.deploy(nn.Sequential(AddTenth()), stages=1)  # another model, same worker

        def wait_in_hook(module, args):
            hooked.set()
            assert go.wait(60)

        mine[0].register_forward_pre_hook(wait_in_hook)

        def call():
            try:
                out["mine"] = mine(torch.zeros(1, 3)).tolist()
            except Exception as exc:  # noqa: BLE001 - reported below
                out["mine"] = exc

        torch.set_default_dtype(torch.float16)  # the request carries it as it goes
        try:
            thread = threading.Thread(target=call)
            thread.start()
            assert hooked.wait(60)
        finally:
            torch.set_default_dtype(torch.float32)
        try:
            # its call waits on the worker, in its pre-hook, under float16: this one runs
            for _ in range(2):
                assert victim(torch.zeros(1, 3)).tolist() == as_float32
        finally:
            go.set()
            thread.join(60)
        # and the waiting call computed, after its wait, under its own float16
        assert out["mine"] == as_float16, out["mine"]
        assert victim(torch.zeros(1, 3)).tolist() == as_float32
        mine.close()
    victim.close()
