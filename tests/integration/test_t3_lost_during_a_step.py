"""A worker killed while a pipelined training step runs on three stages: the step raises
``WorkerLost`` at once, naming the worker, its stage and the step's context once (before,
the one context was listed once per stage the step was sent to); the survivors hold no
step graph afterwards."""
import os
import re
import signal
import time

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import WorkerLost, local_cluster
from disthook.distributed import channel as channel_module

pytestmark = pytest.mark.timeout(120)


def test_a_worker_killed_mid_step_is_named_with_the_steps_context_once(monkeypatch):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                        nn.Linear(16, 3))
    x, y = torch.randn(8, 8), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    with local_cluster(workers=3, timeout=30) as cluster:
        remote = cluster.deploy(net, stages=3, chunks=4, schedule="zb-h1")
        remote.train_step(x, y, nn.functional.cross_entropy)
        first = next(w for w in cluster.workers() if w.stage == 0)
        real_send, sent = channel_module._Hub.send, []

        def send_then_kill(hub, address, msg_type, fields, **kwargs):
            out = real_send(hub, address, msg_type, fields, **kwargs)
            if msg_type == "train_step":
                sent.append(address)
                if len(sent) == 3:  # every stage has the step: its first stage's worker dies
                    os.kill(first.pid, signal.SIGKILL)
            return out

        monkeypatch.setattr(channel_module._Hub, "send", send_then_kill)
        started = time.monotonic()
        with pytest.raises(WorkerLost) as caught:
            remote.train_step(x, y, nn.functional.cross_entropy)
        assert time.monotonic() - started < 10
        monkeypatch.setattr(channel_module._Hub, "send", real_send)
        message = str(caught.value)
        assert f"worker {first.id}, holding stage 0, is lost" in message, message
        contexts = re.search(r"\(context ([^)]*)\)", message).group(1).split(", ")
        assert len(contexts) == len(set(contexts)) == 1, message
        deadline = time.monotonic() + 10
        while True:  # the survivors drop the step's graphs
            status = cluster.full_status(timeout=5)["workers"]
            held = {w["id"]: w["own"]["step_bytes"] for w in status if w["own"]}
            if len(held) == 2 and not any(held.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(held) == 2 and not any(held.values()), held
