"""A client's kept values are weighed by ``--max-value-mb`` with what keeping each costs
besides its array. Before, only the arrays were: a value of one float counted 4 bytes and
took about 417 (its tensor, its id, its entry; measured with tracemalloc), so 65536 of them
on one model held 26 MiB where the cap counted 0.25 MiB, and one key keeping them on each
of its 64 models would hold 1.7 GiB under the default cap of 1 GiB."""
import types

import pytest

import disthook
from workers import values
from workers.limits import LimitChecks
from workers.state import WorkerState
from workers.values import ValueHandlers


class _Worker(ValueHandlers, LimitChecks):
    id = "w1"

    def __init__(self, max_value_bytes: int):
        self.max_value_bytes = max_value_bytes
        self.state = WorkerState("w1")
        self.peers = types.SimpleNamespace(names={}, account=lambda c: c)
        self.peer_log = types.SimpleNamespace(warning=lambda *a, **k: None)

    def who(self, client: bytes) -> str:
        return "client 1"


def test_many_small_kept_values_are_weighed_with_what_keeping_them_costs():
    worker = _Worker(max_value_bytes=1 << 20)  # --max-value-mb 1
    job = types.SimpleNamespace(client=b"c", sender=b"c")
    one = disthook.ones(1)
    kept = 0
    with pytest.raises(RuntimeError, match=r"\(--max-value-mb\)"):
        while kept < 5000:  # before: all kept (20 KB counted of 1 MiB)
            worker.check_value_room(job, "m", 1, one._data.nbytes)
            worker.state.keep_value("m", b"c", f"v{kept}", one.detach())
            kept += 1
    assert kept == (1 << 20) // (4 + values.VALUE_OVERHEAD_BYTES)
