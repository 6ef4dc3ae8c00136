"""``disthook/bench/idle_cost.py``: an idle cluster's CPU a second, by role."""
import pytest

from disthook.bench.idle_cost import measure

pytestmark = pytest.mark.timeout(120)


def test_idle_cost_measures_each_role_and_its_zeromq_threads():
    out = measure(workers=2, seconds=0.5)
    for role in ("coordinator", "workers", "client"):
        total, io = out[role]
        assert 0 <= io <= total, (role, out[role])
    assert out["workers"][0] > 0 and out["coordinator"][0] > 0  # beats, ticks, pings
