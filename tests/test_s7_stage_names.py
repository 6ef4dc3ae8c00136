"""The stages of all clients on one worker are capped by what their names take of the
worker's heartbeat, which names each one: before, only each client's count was capped
(--max-models), so about 3700 stages (60 keys' worth, or as many connections without keys)
made a heartbeat pass the coordinator's 1 MiB header cap; the coordinator refused the beats,
listed the worker dead, and every model on it stopped being live. Ids of up to 256
characters may take four bytes a character, so the cap is in bytes."""
import types

import pytest

from disthook import wire
from workers.limits import LimitChecks


class _Worker(LimitChecks):
    max_models, max_model_bytes = 64, 8 << 30

    def __init__(self):
        self.stages = {}
        self.peers = types.SimpleNamespace(account=lambda client: client, names={})

    def load(self, client: bytes, model: str, index: int = 0):
        self.check_models(client, model, 16)
        self.stages[model] = types.SimpleNamespace(
            model=model, name=f"stage {index} of {model}", keeper=client, nbytes=16)


@pytest.mark.parametrize("letter", ["m", "é", "\U0001d52a"])  # 1, 2 and 4 bytes in UTF-8
def test_a_worker_holds_no_more_stages_than_its_heartbeat_can_name(letter):
    worker = _Worker()
    n = 0
    with pytest.raises(RuntimeError, match=r"names take \d+ bytes of each heartbeat, the "
                                           r"most they may .* deploy on other workers"):
        while True:  # each client within its own --max-models: many clients
            model = f"{n:06d}" + letter * 250
            worker.load(f"client {n // 60}".encode(), model, index=n % 7)
            n += 1
            assert n < 6000, "no cap: the heartbeat would pass the coordinator's"
    assert n > 100  # (not refused early)
    # a stage loaded again under its own id still loads (it replaces itself)
    some = next(iter(worker.stages))
    worker.load(worker.stages[some].keeper, some)
    # what the worker beats with at the cap: the coordinator takes it
    frames = wire.encode("heartbeat", {"worker": "w" * 64, "memory": 2**40, "answer": True,
                                       "stages": [st.name for st in worker.stages.values()]})
    assert len(frames[0]) <= wire.Limits().max_header_bytes
    assert wire.decode(frames).type == "heartbeat"
