"""A graph's release runs in a finalizer, wherever the garbage collector runs it: Ctrl-C
landing in it is raised again in the program (a finalizer's own error is only printed), and
the model's socket lock is given back however the interrupt landed."""
import _thread
import threading

from disthook.distributed.releases import Releases
from disthook.distributed.socket_lock import SocketLock


class _Channel(Releases):
    def __init__(self, flush):
        self.lock = SocketLock(lambda: 5.0)
        self.pending_releases = []
        self._busy = 0
        self._thread = threading.get_ident()
        self.flush_releases = flush


def _interrupted():
    raise KeyboardInterrupt


def test_ctrl_c_while_a_release_sends_is_raised_again_and_the_lock_given_back(monkeypatch):
    raised = []
    monkeypatch.setattr(_thread, "interrupt_main", lambda: raised.append(True))
    channel = _Channel(_interrupted)
    channel.release(["ctx-1"])  # before: KeyboardInterrupt out of a finalizer, printed, lost
    assert raised == [True]
    assert channel.lock.depth_here() == 0


def test_ctrl_c_right_after_the_lock_was_taken_gives_it_back(monkeypatch):
    monkeypatch.setattr(_thread, "interrupt_main", lambda: None)
    channel = _Channel(lambda: None)
    take = channel.lock.acquire

    def taken_then_interrupted(blocking=True):
        take(blocking)
        raise KeyboardInterrupt

    channel.lock.acquire = taken_then_interrupted
    channel.release(["ctx-1"])  # before: the lock stayed this thread's for good
    assert channel.lock.depth_here() == 0
    del channel.lock.acquire
    other = []
    thread = threading.Thread(target=lambda: other.append(channel.lock.acquire(False)))
    thread.start()
    thread.join(5)
    assert other == [True]  # another thread's call may take the sockets
