"""The worker's loop does not spin: a round polls until its tick, rounded up to the next
millisecond (a poll of 0 ms returns at once, so rounding down turned the last millisecond
before every tick into a busy loop). No process is started."""
import time

from workers.server import Worker


class _Poller:
    def __init__(self):
        self.timeouts = []

    def poll(self, timeout_ms):
        self.timeouts.append(timeout_ms)
        return []


class _Shell:
    """What one round of the loop touches of a worker."""

    def __init__(self, due_in_s: float):
        self.poller = _Poller()
        self._next_tick = time.monotonic() + due_in_s
        self.tick_interval = 1.0
        self.parent_pid = None
        self.ticks = 0

    def tick(self):
        self.ticks += 1

    tick_now = Worker.tick_now  # (the loop's tick, as a worker runs it)


def test_a_round_under_a_millisecond_before_its_tick_waits_for_it():
    shell = _Shell(due_in_s=0.0004)
    Worker._serve_round(shell, start_jobs=False)
    assert shell.poller.timeouts == [1]  # not 0: that would return at once, round after round


def test_a_round_polls_whole_milliseconds_until_the_tick_and_ticks_when_due():
    shell = _Shell(due_in_s=0.25)
    Worker._serve_round(shell, start_jobs=False)
    assert shell.poller.timeouts[0] in (250, 251) and shell.ticks == 0
    late = _Shell(due_in_s=-0.01)
    Worker._serve_round(late, start_jobs=False)
    assert late.poller.timeouts == [0] and late.ticks == 1
