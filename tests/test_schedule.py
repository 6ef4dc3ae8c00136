"""Pipeline schedules, without processes: every micro-batch is forwarded and backwarded
exactly once per stage (and, under ZB-H1, through its W once), every dependency is
respected, nothing deadlocks, 1F1B holds at most p - s micro-batches on stage s and ZB-H1
at most p."""
import pytest
from sweeps import where

from disthook.distributed.schedule import (
    ScheduleError,
    bubble_fraction,
    gpipe,
    in_flight,
    one_f_one_b,
    schedule,
    simulate,
    zero_bubble_h1,
)

# every stage count with the micro-batch counts at its edges (fewer than, as many as, just
# more than the stages, 32) in the default run; every count from 1 to 32 with -m exhaustive
SIZES = where([(p, m) for p in range(1, 9) for m in range(1, 33)],
              lambda n, pm: pm[1] in {1, 2, pm[0] - 1, pm[0], pm[0] + 1, 2 * pm[0] + 1, 32},
              names=2)


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1", "zb-batched"])
@pytest.mark.parametrize("p,m", SIZES)
def test_schedules_run_every_action_once_in_dependency_order(name, p, m):
    stages = schedule(name, p, m)
    assert len(stages) == p
    order = simulate(stages, m)
    for s, actions in enumerate(stages):
        kinds = [k for k, _ in actions]
        assert kinds.count("forward") == kinds.count("backward") == m
        assert kinds.count("recv_act") == (m if s > 0 else 0)
        assert kinds.count("send_act") == (m if s < p - 1 else 0)
        assert kinds.count("recv_grad") == (m if s < p - 1 else 0)
        assert kinds.count("send_grad") == (m if s > 0 else 0)
        assert kinds.count("weight") == (m if name == "zb-h1" else 0)
        assert kinds.count("weight_batch") == (m if name == "zb-batched" else 0)
    # across stages: a micro-batch's forward on stage s+1 comes after it on stage s, its
    # backward on stage s after it on stage s+1
    when = {(s, a): i for i, (s, a) in enumerate(order)}
    for s in range(p - 1):
        for mb in range(m):
            assert when[(s, ("forward", mb))] < when[(s + 1, ("forward", mb))]
            assert when[(s + 1, ("backward", mb))] < when[(s, ("backward", mb))]


@pytest.mark.parametrize("p,m", SIZES)
def test_1f1b_holds_at_most_p_minus_s_micro_batches_and_gpipe_holds_all(p, m):
    for s, actions in enumerate(one_f_one_b(p, m)):
        assert in_flight(actions) <= min(p - s, m)
        assert in_flight(actions) <= p
    for actions in gpipe(p, m):
        assert in_flight(actions) == m


@pytest.mark.parametrize("p,m", SIZES)
def test_zb_h1_holds_at_most_p_micro_batches_and_runs_1f1b_order_of_f_and_b(p, m):
    for s, (zb, plain) in enumerate(zip(zero_bubble_h1(p, m), one_f_one_b(p, m))):
        assert in_flight(zb) <= min(p, m)
        assert [a for a in zb if a[0] != "weight"] == plain
        weights = [mb for kind, mb in zb if kind == "weight"]
        assert weights == list(range(m))  # in micro-batch order: .grad sums as in 1F1B
        assert zb[-(min(s + 1, m)):] == [("weight", mb) for mb in range(m - min(s + 1, m), m)]


def test_zb_h1_for_3_stages_and_4_micro_batches():
    def compute(actions):
        return " ".join(f"{k[0].upper()}{mb}" for k, mb in actions
                        if k in ("forward", "backward", "weight"))

    assert [compute(a) for a in zero_bubble_h1(3, 4)] == [
        "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3",  # each W right behind its B, 1 at the end
        "F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3",  # one behind, 2 at the end
        "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3"]  # two behind, 3 at the end


def test_1f1b_for_4_stages_and_8_micro_batches_interleaves():
    first = [a for a in one_f_one_b(4, 8)[0] if a[0] in ("forward", "backward")]
    assert first[:5] == [("forward", 0), ("forward", 1), ("forward", 2), ("forward", 3),
                         ("backward", 0)]
    last = [a for a in one_f_one_b(4, 8)[3] if a[0] in ("forward", "backward")]
    assert last[:4] == [("forward", 0), ("backward", 0), ("forward", 1), ("backward", 1)]


def test_simulate_finds_broken_schedules():
    good = gpipe(2, 2)
    with pytest.raises(ScheduleError, match="deadlock"):
        simulate([[("recv_grad", 0)] + good[0], good[1]], 2)
    with pytest.raises(ScheduleError, match="appears twice"):
        simulate([good[0] + [("forward", 0)], good[1]], 2)
    with pytest.raises(ScheduleError, match=r"stage 0 never runs \[\('backward', 1\)\]"):
        simulate([[a for a in good[0] if a != ("backward", 1)], good[1]], 2)
    with pytest.raises(ScheduleError, match=r"\('backward', 0\) before \('forward', 0\)"):
        simulate([[("backward", 0)], []], 1)
    with pytest.raises(ScheduleError, match="names no micro-batch of 2"):
        simulate([[("forward", 5)]], 2)


def test_bad_sizes_and_names():
    with pytest.raises(ValueError, match="positive int of stages, got 0"):
        gpipe(0, 4)
    with pytest.raises(ValueError, match="positive int of micro-batches, got 2.0"):
        one_f_one_b(2, 2.0)
    with pytest.raises(ValueError, match=r"schedule must be one of \['1f1b', 'gpipe', "
                                         r"'zb-batched', 'zb-h1'\], got 'zigzag'"):
        schedule("zigzag", 2, 2)
    assert bubble_fraction(2, 8) == pytest.approx(1 / 9)
    assert bubble_fraction(1, 5) == 0


def test_a_schedule_splits_its_backwards_one_way():
    stages = schedule("zb-h1", 2, 2)
    stages[0][-1] = ("weight_batch", stages[0][-1][1])  # one W of the other kind
    with pytest.raises(ScheduleError, match="splits its backwards one way"):
        simulate(stages, 2)


def test_zb_batched_runs_every_w_after_the_stages_last_backward():
    for p, m in [(2, 4), (4, 8), (3, 1)]:
        for actions in schedule("zb-batched", p, m):
            kinds = [k for k, _ in actions]
            last_b = max(i for i, k in enumerate(kinds) if k == "backward")
            after = kinds[last_b + 1:]
            if after[0] == "send_grad":  # the last gradient goes back first
                after = after[1:]
            assert after == ["weight_batch"] * m
            assert in_flight(actions) == m  # every micro-batch's W part is held to the end
