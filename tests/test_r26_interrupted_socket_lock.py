"""Ctrl-C in a notebook (a KeyboardInterrupt, or any exception a signal handler raises) that
lands in a deployed model's socket lock right after the lock of its bookkeeping was taken:
the lock is given back, and the next call (the next cell's) takes the sockets at once.
Before, that inner lock stayed taken, and every later call of the model hung for ever (seen
driving IPython cells: a SIGALRM timer raising KeyboardInterrupt in a loop of deployed
calls, then the next cell)."""
import threading

import pytest

from disthook.distributed.socket_lock import SocketLock


class _Interrupting(threading.Condition):
    """The lock's condition, over the same lock, whose ``nth`` take (by ``acquire`` or by
    ``with``) raises KeyboardInterrupt just after the lock was taken: where a signal's
    handler runs once the acquire returned."""

    def __init__(self, inner, nth):
        super().__init__(inner)
        take, self.calls = self.acquire, []

        def taken_then_interrupted(*args, **kwargs):
            took = take(*args, **kwargs)
            self.calls.append(took)
            if len(self.calls) == nth:
                raise KeyboardInterrupt
            return took

        self.acquire = taken_then_interrupted

    def __enter__(self):
        return self.acquire()


def _interrupt_after_taking(lock, nth):
    lock._cond = _Interrupting(lock._cond._lock, nth)


def _within(fn, seconds=5.0):
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the lock was never given back: the call hung"
    return out[0]


@pytest.mark.parametrize("where", ["acquire", "release"])
def test_an_interrupt_right_after_the_lock_was_taken_leaves_it_usable(where):
    lock = SocketLock(lambda: 5.0)

    def cell_interrupted_then_next_cell():
        if where == "release":
            assert lock.acquire()
        _interrupt_after_taking(lock, 1)
        with pytest.raises(KeyboardInterrupt):
            lock.acquire() if where == "acquire" else lock.release()
        # the next cell's call, then another thread's
        assert lock.acquire()
        lock.release()
        if where == "release":  # (the interrupted release did not count)
            lock.release()
        return lock._owner, lock._depth

    assert _within(cell_interrupted_then_next_cell) == (None, 0)
    assert _within(lambda: lock.acquire(blocking=False)) is True


def test_an_interrupt_while_a_hook_lends_the_sockets_leaves_them_usable():
    lock = SocketLock(lambda: 5.0)

    def interrupted_in_lend():
        assert lock.acquire()
        _interrupt_after_taking(lock, 1)
        with pytest.raises(KeyboardInterrupt), lock.lent():
            pass
        lock.release()
        return lock._owner, lock._depth

    assert _within(interrupted_in_lend) == (None, 0)
    assert _within(lambda: lock.acquire(blocking=False)) is True


def test_an_interrupt_once_the_sockets_were_taken_by_with_gives_them_back():
    lock = SocketLock(lambda: 5.0)
    take = lock.acquire

    def taken_then_interrupted(*args, **kwargs):
        take(*args, **kwargs)
        raise KeyboardInterrupt  # where a signal's handler runs once acquire returned

    def interrupted_call():
        lock.acquire = taken_then_interrupted
        with pytest.raises(KeyboardInterrupt), lock:
            pass
        del lock.acquire
        return lock._owner, lock._depth

    assert _within(interrupted_call) == (None, 0)
    # another thread's call (a later cell's, run from a thread) takes the sockets at once
    assert _within(lambda: lock.acquire(blocking=False)) is True
