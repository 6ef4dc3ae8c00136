"""The workspan suite's pure parts: the replay of a schedule with each action's cost and the
hop latency, and what it reads from the stages' timelines. No process is started."""
import pytest

from disthook.bench.workspan import (
    _bubble,
    _predict_row,
    costs_from_timelines,
    hop_latency,
    predict,
    predict_interleaved,
    replay,
)
from disthook.distributed.interleaved import interleaved_1f1b
from disthook.distributed.schedule import gpipe, one_f_one_b, zero_bubble_batched, zero_bubble_h1


def costs(forward, backward, send=0.0):
    table = {"forward": forward, "backward": backward, "send_act": send, "send_grad": send}
    return lambda s, kind: table[kind]


@pytest.mark.parametrize("p, m", [(1, 1), (2, 4), (4, 8), (8, 16), (3, 3)])
def test_equal_stages_with_free_hops_take_m_plus_p_minus_one_slots(p, m):
    # the textbook 1F1B and GPipe step: (m + p - 1) * (F + B) with B = 2F
    for plan in (one_f_one_b(p, m), gpipe(p, m)):
        got = replay(plan, costs(1.0, 2.0), latency=0.0)
        assert got["step_s"] == pytest.approx((m + p - 1) * 3.0)
        assert got["busy_s"] == pytest.approx([m * 3.0] * p)


def test_hop_latency_and_send_cost_lie_on_the_critical_path():
    p, m = 2, 2
    plan = one_f_one_b(p, m)
    base = replay(plan, costs(1.0, 2.0), 0.0)["step_s"]
    # stage 1 waits F + send + latency for its first activation; stage 0 waits its
    # first gradient back the same way: two hops and two sends more than free hops
    got = replay(plan, costs(1.0, 2.0, send=0.1), latency=0.5)["step_s"]
    assert got == pytest.approx(base + 2 * (0.5 + 0.1) + 0.1)
    assert got > base


def test_a_stage_waiting_for_a_message_never_sent_is_named():
    plan = [[("forward", 0)], [("recv_act", 0), ("forward", 0)]]  # stage 0 never sends
    with pytest.raises(ValueError, match="never sent"):
        replay(plan, costs(1.0, 1.0), 0.0)


def test_costs_and_hop_latency_come_from_the_stages_timelines():
    # two steps of a 2-stage pipeline, m = 1: [kind, mb, cpu, wall start, wall end]
    def step(t):
        return [[["forward", 0, 0.010, t, t + 0.010],
                 ["send_act", 0, 0.001, t + 0.010, t + 0.011],
                 ["recv_grad", 0, 0.0, t + 0.011, t + 0.050],
                 ["backward", 0, 0.020, t + 0.050, t + 0.070]],
                [["recv_act", 0, 0.0, t + 0.000, t + 0.012],  # waited: 1 ms after the send
                 ["forward", 0, 0.012, t + 0.012, t + 0.024],
                 ["backward", 0, 0.022, t + 0.024, t + 0.046],
                 ["send_grad", 0, 0.002, t + 0.046, t + 0.048]]]

    timelines = [step(0.0), step(1.0)]
    got = costs_from_timelines(timelines, 2)
    assert got[0] == pytest.approx({"forward": 0.010, "send_act": 0.001, "backward": 0.020})
    assert got[1] == pytest.approx({"forward": 0.012, "backward": 0.022, "send_grad": 0.002})
    # the gradient reached stage 0 2 ms after its send, the activation stage 1 after 1 ms
    assert hop_latency(timelines) == pytest.approx(0.001)
    predicted = predict(got, 0.001, 1)["step_s"]
    assert predicted == pytest.approx(0.010 + 0.001 + 0.001 + 0.012 + 0.022 + 0.002 + 0.001
                                      + 0.020)


def test_no_waited_receive_gives_no_latency():
    assert hop_latency([[[["forward", 0, 0.01, 0.0, 0.01]]]]) is None


@pytest.mark.parametrize("p, m", [(2, 8), (4, 16), (8, 16), (3, 4)])
def test_zb_h1_bubble_is_a_third_of_1f1b_when_f_b_and_w_cost_alike(p, m):
    def step(plan, cost):
        return replay(plan, lambda s, kind: cost.get(kind, 0.0), 0.0)["step_s"]

    for f, b, w in ((1.0, 1.0, 1.0), (1.0, 1.2, 0.8)):
        work = m * (f + b + w)
        zb = step(zero_bubble_h1(p, m), {"forward": f, "backward": b, "weight": w}) - work
        plain = step(one_f_one_b(p, m), {"forward": f, "backward": b + w}) - work
        assert plain == pytest.approx((p - 1) * (f + b + w))
        assert zb == pytest.approx((p - 1) * (f + b - w))  # ZB-H1's bubble


@pytest.mark.parametrize("p, v, m", [(2, 2, 4), (4, 2, 8), (4, 4, 16), (8, 2, 16), (3, 3, 6)])
def test_interleaved_1f1b_with_free_hops_divides_the_bubble_by_v(p, v, m):
    # a worker's whole share costs F = 1, B = 2 per micro-batch, a chunk a v-th of it:
    # m (F + B) of work and a fill and drain of (p - 1)(F + B) / v
    plan = interleaved_1f1b(p, m, v)
    got = replay(plan, costs(1.0 / v, 2.0 / v), latency=0.0)
    assert got["busy_s"] == pytest.approx([m * 3.0] * p)
    assert got["step_s"] == pytest.approx(m * 3.0 + (p - 1) * 3.0 / v)
    plain = replay(one_f_one_b(p, m), costs(1.0, 2.0), latency=0.0)["step_s"]
    assert got["step_s"] < plain


def test_interleaved_1f1b_pays_v_times_the_hops():
    # with free compute the step is the hops on the critical path: a micro-batch crosses
    # p v - 1 hops forward and as many back
    p, v, m = 2, 2, 2
    got = replay(interleaved_1f1b(p, m, v), costs(0.0, 0.0), latency=1.0)["step_s"]
    assert got >= 2 * (p * v - 1) * 1.0


def test_interleaved_prediction_from_1f1b_costs():
    # 4 stages of F = 1, B = 2, free sends and hops: the chunks of 2 per worker halve the
    # fill and drain; sends are not divided (an activation is as large)
    stage = {"forward": 1.0, "backward": 2.0, "send_act": 0.0, "send_grad": 0.0}
    p, m = 4, 8
    got = predict_interleaved([dict(stage) for _ in range(p)], 0.0, m, v=2)
    plain = predict([dict(stage) for _ in range(p)], 0.0, m)
    assert got["step_s"] == pytest.approx(m * 3.0 + (p - 1) * 3.0 / 2)
    assert plain["step_s"] == pytest.approx((m + p - 1) * 3.0)
    sending = {**stage, "send_act": 0.1, "send_grad": 0.1}
    busy = predict_interleaved([dict(sending) for _ in range(p)], 0.0, m, v=2)["busy_s"]
    # each worker sends for each of its 2 chunks: on (but the last) and back (but the first)
    sends = [sum((k < 2 * p - 1) + (k > 0) for k in (w, w + p)) for w in range(p)]
    assert busy == pytest.approx([m * 3.0 + n * m * 0.1 for n in sends])
    assert predict_interleaved([dict(stage) for _ in range(p)], 0.0, 6, v=2) is None


def test_zb_h1_bubble_is_compared_with_1f1b_on_the_same_costs():
    # ZB-H1's run measured F = B = W = 1; 1F1B's own run, timed apart on a machine that
    # changed, measured a backward of 3: the headline ratio replays 1F1B with B + W = 2 as
    # its backward (a third, the schedules' alone), the other keeps 1F1B's run
    p, m = 4, 8
    sends = {"send_act": 0.0, "send_grad": 0.0}
    ours = {"latency_s": 0.0, "one_process_cpu_s": 1.0, "client_cpu_s": 0.0,
            "coordinator_cpu_s": 0.0, "workers_cpu_s": 1.0,
            "costs": [{"forward": 1.0, "backward": 3.0, **sends} for _ in range(p)],
            "zb_costs": [{"forward": 1.0, "backward": 1.0, "weight": 1.0, **sends}
                         for _ in range(p)],
            "zbb_costs": [{"forward": 1.0, "backward": 1.0, "weight_batch": 0.5, **sends}
                          for _ in range(p)], "zbb_work_s": 2.0}
    row = {"stages": p, "micro": m, "disthook": ours, "torch": None}
    _predict_row(row)
    assert ours["zb_bubble_vs_1f1b"] == pytest.approx(1 / 3)
    assert ours["zb_bubble_vs_1f1b_run"] == pytest.approx((p - 1) * 1.0 / ((p - 1) * 4.0))
    assert ours["zbb_work_efficiency"] == pytest.approx(0.5)


def test_zb_batched_is_replayed_with_every_w_at_the_end():
    """zb-batched: 1F1B's forwards and B's (here F = B = 1, no latency), then each stage's
    m W's at half a B each: the first stage, the last to finish its B's, ends the step."""
    p, m = 4, 8
    sends = {"send_act": 0.0, "send_grad": 0.0}
    costs = [{"forward": 1.0, "backward": 1.0, "weight_batch": 0.5, **sends}
             for _ in range(p)]
    got = replay(zero_bubble_batched(p, m), lambda s, kind: costs[s].get(kind, 0.0), 0.0)
    plain = replay(one_f_one_b(p, m), lambda s, kind: costs[s].get(kind, 0.0), 0.0)
    assert got["step_s"] == pytest.approx(plain["step_s"] + m * 0.5)
    assert got["busy_s"] == pytest.approx([m * 2.5] * p)


def per_stage(*stages):
    """A cost function of stages that differ: ``stages[s]`` maps a kind to its seconds."""
    return lambda s, kind: stages[s].get(kind, 0.0)


@pytest.mark.parametrize("m", [2, 4, 16])
def test_a_bubble_is_the_step_beyond_the_busiest_stage_s_work(m):
    """1F1B on 2 stages of unequal work, free hops. The heavier stage (F = B = 2) never
    waits once it started: the step is its m (F + B) plus the light stage's one forward
    before it and one backward after it when it is the last (a bubble of 2, whatever m),
    nothing when it is the first. The light stage idles 2m more under any schedule: that
    is the stages' imbalance, not a bubble (the mean over stages of their idle would give
    m + 2 and m, growing with m)."""
    light, heavy = {"forward": 1.0, "backward": 1.0}, {"forward": 2.0, "backward": 2.0}
    last_heavy = replay(one_f_one_b(2, m), per_stage(light, heavy), 0.0)
    assert last_heavy["step_s"] == pytest.approx(4 * m + 2)
    assert _bubble(last_heavy) == pytest.approx(2.0)
    first_heavy = replay(one_f_one_b(2, m), per_stage(heavy, light), 0.0)
    assert first_heavy["step_s"] == pytest.approx(4 * m)
    assert _bubble(first_heavy) == pytest.approx(0.0)


@pytest.mark.parametrize("m", [4, 8, 16])
def test_zb_h1_bubble_against_1f1b_with_a_first_stage_whose_b_is_free(m):
    """The first stage computes no input gradient: its B costs nothing, its backward is all
    W (F = 1, B = 0, W = 1); the second F = B = W = 1. Free hops. Under ZB-H1 the second
    stage runs without a gap from the first activation to its last W: the step is
    1 + 3m, a bubble of F. 1F1B (backward B + W) ends on the first stage's last backward:
    1 + 3m + 1, a bubble of 2. Half of it, at every m (the mean over stages of the idle
    would read (m/2 + 1) / (m/2 + 2): 90% at m = 16)."""
    first = {"forward": 1.0, "backward": 0.0, "weight": 1.0, "send_act": 0.0}
    second = {"forward": 1.0, "backward": 1.0, "weight": 1.0, "send_grad": 0.0}
    zb = replay(zero_bubble_h1(2, m), per_stage(first, second), 0.0)
    assert zb["step_s"] == pytest.approx(3 * m + 1)
    plain = replay(one_f_one_b(2, m), per_stage({**first, "backward": 1.0},
                                                {**second, "backward": 2.0}), 0.0)
    assert plain["step_s"] == pytest.approx(3 * m + 2)
    ours = {"latency_s": 0.0, "one_process_cpu_s": 1.0, "client_cpu_s": 0.0,
            "coordinator_cpu_s": 0.0, "workers_cpu_s": 1.0,
            "costs": [{**first, "backward": 1.0}, {**second, "backward": 2.0}],
            "zb_costs": [first, second], "zbb_costs": [first, second], "zbb_work_s": 1.0}
    row = {"stages": 2, "micro": m, "disthook": ours, "torch": None}
    _predict_row(row)
    assert ours["zb_bubble_vs_1f1b"] == pytest.approx(0.5)
    assert ours["zb_bubble_s"] == pytest.approx(1.0)
    assert ours["zb_imbalance_s"] == pytest.approx(m / 2)  # 3m against 2m of work
