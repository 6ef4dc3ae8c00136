"""The bench's paired timing: rounds run every callable in turn; ratios are taken per round."""
import itertools

from disthook.bench import pipeline, timing
from disthook.bench.timing import paired, paired_ratio


def test_rounds_run_each_callable_in_turn_after_one_warm_up(monkeypatch):
    calls = []
    ticks = itertools.count()
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    times = paired([lambda: calls.append("a"), lambda: calls.append("b")], 3)
    assert calls == ["a", "b"] * 4  # the warm-up round, then three
    assert [len(t) for t in times] == [3, 3]


def test_the_ratio_is_the_median_of_the_rounds_ratios():
    # a drift that doubles both sides in the last round leaves the ratio at 2
    assert paired_ratio([2.0, 2.0, 4.0], [1.0, 1.0, 2.0]) == 2.0
    # the ratio of medians would say 3.0 / 1.0 here; per round it is 1.5
    assert paired_ratio([3.0, 1.5, 3.0], [2.0, 1.0, 1.0]) == 1.5


def test_the_limit_follows_the_per_sample_cost_of_small_batches(monkeypatch):
    # each fake layer "takes" rows x per-sample cost; a full batch costs 1 per sample, a
    # micro-batch `slower` per sample: the limit is 2m/(m+1) / slower
    for slower in (1.0, 1.25):
        def layer(rows, slower=slower):
            def run():
                pass
            run.seconds = rows * (1.0 if rows == pipeline.BATCH else slower)
            return run

        def fake_paired(fns, repeats):
            return [[fn.seconds] * repeats for fn in fns]

        monkeypatch.setattr(pipeline, "_layer", layer)
        monkeypatch.setattr(pipeline, "paired", fake_paired)
        limits = pipeline._limits(3)
        assert sorted(limits) == list(pipeline.MICRO)
        for m, limit in limits.items():
            # (at m = 1 the micro-batch is the full batch)
            assert abs(limit - 2 * m / (m + 1) / (slower if m > 1 else 1.0)) < 1e-12


class _Clock:
    """A fake perf_counter that the fake workloads advance."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def spend(self, seconds):
        def run():
            self.now += seconds
        return run


def test_measure_compares_libraries_round_by_round(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    cost = {"ours": 3.0, "theirs": 2.0}
    times, ratio = timing.measure(lambda lib: clock.spend(cost[lib]), ["ours", "theirs"], 5, 2)
    assert times == [3.0, 2.0] and ratio == 1.5
    times, ratio = timing.measure(lambda lib: clock.spend(cost[lib]), ["ours"], 5, 2)
    assert times == [3.0] and ratio is None


def test_measure_of_a_hooked_and_plain_pair_is_their_difference(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    cost = {"ours": (5.0, 4.0), "theirs": (3.5, 1.5)}  # hooks add 1.0 and 2.0

    def workload(lib):
        hooked, plain = cost[lib]
        return clock.spend(hooked), clock.spend(plain)

    times, ratio = timing.measure(workload, ["ours", "theirs"], 3, 4)
    assert times == [1.0, 2.0] and ratio == 0.5


def test_measure_reads_the_clock_it_is_given(monkeypatch):
    """``bench engine`` and ``nn`` time with this thread's CPU clock: the clock given is the
    one read, not the wall clock."""
    wall, cpu = _Clock(), _Clock()
    monkeypatch.setattr(timing.time, "perf_counter", wall)
    cost = {"ours": 3.0, "theirs": 2.0}
    times, ratio = timing.measure(lambda lib: cpu.spend(cost[lib]), ["ours", "theirs"], 5, 2,
                                  clock=cpu)
    assert times == [3.0, 2.0] and ratio == 1.5 and wall.now == 0.0
