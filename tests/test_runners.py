"""The worker's threads take turns: a job that waits hands the loop to another thread and
goes on after the round that resumed it; never do two run at once. No sockets."""
import collections
import threading

import pytest

from workers.runners import Runners

pytestmark = pytest.mark.timeout(30)


class Script:
    """A stand-in for the socket loop: each round does the next scripted step and checks
    that it is the only thread running."""

    def __init__(self):
        self.steps = collections.deque()
        self.log = []
        self.inside = 0
        self.parked = {}
        self.runners = Runners(self.round, name="test")

    def round(self):
        self.inside += 1
        assert self.inside == 1, "two threads ran at once"
        self.inside -= 1
        if not self.steps:
            self.runners.stop()
            return
        self.steps.popleft()()

    def job(self, name, waits=1):
        """A job that waits ``waits`` times (each resumed by a later scripted step)."""
        def run():
            self.log.append((name, "start", threading.current_thread().name))
            for i in range(waits):
                me = self.runners.current()
                self.parked[name] = me
                self.runners.sleep(me)
                self.log.append((name, f"resumed {i}", threading.current_thread().name))
            self.log.append((name, "end", threading.current_thread().name))
        return run

    def resume(self, name):
        return lambda: self.runners.resume(self.parked.pop(name))

    def note(self, what):
        return lambda: self.log.append((what, threading.current_thread().name))


def test_a_waiting_job_goes_on_on_its_own_thread_after_others_served():
    s = Script()
    main = threading.current_thread().name
    s.steps.extend([s.job("A"), s.note("status while A waits"), s.resume("A"),
                    s.note("after A")])
    s.runners.run()
    assert [e[:2] for e in s.log] == [("A", "start"), ("status while A waits", s.log[1][1]),
                                      ("A", "resumed 0"), ("A", "end"),
                                      ("after A", s.log[4][1])]
    assert s.log[0][2] == s.log[2][2] == s.log[3][2] == main  # A's stack stays on its thread
    assert s.log[1][1] != main  # the loop went on on another thread meanwhile
    assert s.runners.threads == 1


def test_two_waiting_jobs_resume_in_any_order_and_threads_are_reused():
    s = Script()
    s.steps.extend([s.job("A", waits=2), s.job("B"), s.note("both wait"), s.resume("A"),
                    s.resume("B"), s.note("A waits again"), s.resume("A"), s.note("done")])
    s.runners.run()
    order = [e[:2] for e in s.log]
    assert order == [("A", "start"), ("B", "start"), ("both wait", order[2][1]),
                     ("A", "resumed 0"), ("B", "resumed 0"), ("B", "end"),
                     ("A waits again", order[6][1]), ("A", "resumed 1"), ("A", "end"),
                     ("done", order[9][1])]
    assert s.runners.threads == 2  # one per job waiting at the same time, no more


def test_stopping_while_jobs_wait_returns_on_the_main_thread():
    """The main thread must close the sockets: the job waiting on it goes on (the worker's
    sleep_on then raises, its wait not ended); a job waiting on a helper sleeps on."""
    s = Script()
    s.steps.extend([s.job("A"), s.job("B"), s.runners.stop])
    s.runners.run()
    main = threading.current_thread().name
    assert [e[:2] for e in s.log] == [("A", "start"), ("B", "start"), ("A", "resumed 0"),
                                      ("A", "end")]
    assert s.log[2][2] == main and s.log[1][2] != main


def test_a_failure_in_a_helpers_loop_stops_the_runners_and_is_raised():
    s = Script()

    def broken():
        raise ValueError("a bug in the loop")

    s.steps.extend([s.job("A"), broken])
    with pytest.raises(ValueError, match="a bug in the loop"):
        s.runners.run()
