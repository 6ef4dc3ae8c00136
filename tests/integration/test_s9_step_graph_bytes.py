"""A training step whose later stages never answer: a client sends a pipelined
``train_step`` to the first stage only (the library sends it to every stage), which runs
its forwards and keeps their activations for the gradients that never come, up to
``PIPE_TIMEOUT_S`` (300 s). They were not weighed by ``--max-graph-mb`` nor shown by the
worker's status (measured by S8: a 0.5 MiB input through ``Linear(256, 8192)`` held 43 MiB,
``contexts`` 0). Now a step's kept forwards count against the client's graph cap, with the
error a forward's graph meets, are shown as ``step_bytes`` in the worker's status, and go
when the step is abandoned (its client gone)."""
import time

import pytest
from clusters import wait_until, worker

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, RemoteTimeout, connect, deployment_of

pytestmark = pytest.mark.timeout(180)


def _first_stage_only(remote) -> None:
    """The client's ``train_step`` goes to the first stage alone from now on."""
    hub = deployment_of(remote)._hub
    real = hub.request_all

    def first_only(calls, msg_type, **kw):
        return real(calls[:1] if msg_type == "train_step" else calls, msg_type, **kw)

    hub.request_all = first_only


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 8192), nn.ReLU(), nn.Linear(8192, 2))


def _step_bytes(cluster) -> dict:
    """Per worker id: its status's step_bytes, and its clients' per stage."""
    out = {}
    for w in cluster.full_status(timeout=10)["workers"]:
        own = w["own"]
        out[w["id"]] = (own["step_bytes"], {c: v["step_bytes"]
                                            for s in own["stage_stats"].values()
                                            for c, v in s["clients"].items()})
    return out


def test_a_steps_kept_activations_count_against_the_graph_cap():
    with worker("--max-graph-mb", "8", workers=2) as address:
        cluster = connect(address.coordinator, timeout=20)
        try:
            remote = cluster.deploy(_model(), stages=2)
            _first_stage_only(remote)
            start = time.monotonic()
            # 512 rows through Linear(256, 8192): 16 MiB of output kept, past 8 MiB
            with pytest.raises(RemoteError, match=r"RuntimeError: this client's forward "
                                                  r"graphs kept on this worker .* would pass "
                                                  r"the cap of 8\.0 MiB \(--max-graph-mb\)"):
                remote.train_step(torch.randn(512, 256), torch.randn(512, 2), nn.MSELoss())
            assert time.monotonic() - start < 15, "the step waited (uncounted) for gradients"
            assert all(total == 0 for total, _ in _step_bytes(cluster).values())
        finally:
            cluster.close()


def test_a_steps_kept_activations_show_in_status_and_go_with_their_client():
    with worker("--max-graph-mb", "8", workers=2) as address, \
            connect(address.coordinator, timeout=20) as watcher:
        cluster = connect(address.coordinator, timeout=3)
        remote = cluster.deploy(_model(), stages=2)
        _first_stage_only(remote)
        try:
            with pytest.raises(RemoteTimeout):  # 16 rows: 0.5 MiB kept, under the cap
                remote.train_step(torch.randn(16, 256), torch.randn(16, 2), nn.MSELoss())
            held = _step_bytes(watcher)
            totals = sorted(total for total, _ in held.values())
            assert totals[0] == 0 and 16 * 8192 * 4 <= totals[1] < 8 << 20, held
            per_client = [c for _, clients in held.values() for c in clients.values()]
            assert max(per_client) == totals[1]
        finally:
            cluster.close()  # its connection goes: the worker ends the step
        wait_until(lambda: all(total == 0 for total, _ in _step_bytes(watcher).values()), 20)
