"""A job that waits (a pipeline step for its neighbour's record, a forward for its client's
hook answer) keeps its client's random stream while its own thread keeps the loop: the
rounds it serves start no job, so nothing else draws, and the stream is neither turned to
text nor swapped out; only a job that hands the loop to another thread leaves its stream
(the others draw from the worker's own) and takes it back when it goes on. No sockets."""
import threading
from types import SimpleNamespace

import numpy as np

import disthook
from disthook import random as streams
from workers import server
from workers.server import Worker


class _Runners:
    """The hand-over as ``workers.runners`` does it, in one thread: ``sleep`` runs what
    others do meanwhile (``meanwhile``), then the wait ends."""

    def __init__(self, meanwhile=None):
        self.ready, self.meanwhile, self.slept = False, meanwhile, 0

    def current(self):
        return "turn"

    def sleep(self, turn):
        self.slept += 1
        if self.meanwhile is not None:
            self.meanwhile()


class _Shell:
    """What ``Worker.sleep_on`` touches of a worker; ``rounds`` rounds of the loop go by
    before the wait ends (None: it ends only once another thread ran, ``runners.sleep``)."""

    def __init__(self, wait, rounds, meanwhile=None):
        self.holding, self._running, self._todo = False, True, []
        self.runners = _Runners(meanwhile)
        self._local = threading.local()
        self.captures = SimpleNamespace(micro_batch=None)
        self._sleepers = {}
        self.wait, self.rounds = wait, rounds

    def flush_replies(self):
        pass

    def links_first(self):
        return False

    def _serve_round(self, start_jobs=True):
        assert not start_jobs
        if self.rounds is None:  # what it waits for needs another job first: hand over
            self._todo.append("a request")
            return
        self.rounds -= 1
        if self.rounds <= 0:
            self.wait.done = True


def _wait(rng):
    job = SimpleNamespace(rng=rng, micro_batch=3, stage=None)
    return SimpleNamespace(done=False, job=job, error=None, outcome="came", id=1,
                           what="the act of micro-batch 3")


def _counting(monkeypatch):
    calls = []
    for owner, name in ((streams, "_stream_state"), (streams, "_set_stream_state"),
                        (server, "leave_stream")):
        real = getattr(owner, name)

        def counted(*args, real=real, name=name):
            calls.append(name)
            return real(*args)

        monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_wait_that_ends_in_the_loop_leaves_the_stream_alone(monkeypatch):
    disthook.manual_seed(7)
    disthook.rand(3)
    stream = streams._stream_state()
    expected = disthook.rand(5).numpy()
    streams._set_stream_state(stream)
    calls = _counting(monkeypatch)
    wait = _wait(stream)
    shell = _Shell(wait, rounds=3)
    assert Worker.sleep_on(shell, wait) == "came"
    assert calls == [] and shell.runners.slept == 0
    assert wait.job.rng == stream  # (as the job had it)
    np.testing.assert_array_equal(disthook.rand(5).numpy(), expected)  # the stream goes on


def test_a_job_that_hands_the_loop_over_keeps_its_stream_from_what_runs_meanwhile(
        monkeypatch):
    disthook.manual_seed(11)
    disthook.rand(2)
    stream = streams._stream_state()
    expected = disthook.rand(5).numpy()
    streams._set_stream_state(stream)
    drawn = []
    wait = _wait(stream)
    shell = _Shell(wait, rounds=None, meanwhile=lambda: (
        drawn.append(disthook.rand(5).numpy()), setattr(wait, "done", True)))
    assert Worker.sleep_on(shell, wait) == "came"
    assert shell.runners.slept == 1
    assert not np.array_equal(drawn[0], expected)  # another job never draws its numbers
    np.testing.assert_array_equal(disthook.rand(5).numpy(), expected)  # its own go on
