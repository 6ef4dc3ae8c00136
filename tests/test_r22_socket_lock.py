"""A deployed model's socket lock taken without blocking (what a graph's finalizer does when
the garbage collector collects a call's output) from a thread that is itself inside one of
the lock's methods: it says no at once. Before, it waited on the condition's own lock,
held by that same thread, and the program hung (seen as a 300 s timeout of an integration
test whose forward pre-hook kept tensors that formed cycles)."""
import threading

from disthook.distributed.socket_lock import SocketLock


def _in_thread(fn, seconds=5.0):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the call hung"
    return out[0]


def test_non_blocking_acquire_inside_the_lock_says_no():
    lock = SocketLock(lambda: 5.0)

    def collected_while_inside():
        with lock._cond:  # where the collector may run a finalizer
            return lock.acquire(blocking=False)

    assert _in_thread(collected_while_inside) is False


def test_non_blocking_acquire_still_reenters_and_releases():
    lock = SocketLock(lambda: 5.0)

    def nested():
        assert lock.acquire()
        took = lock.acquire(blocking=False)
        lock.release()
        lock.release()
        return took, lock._owner, lock._depth

    assert _in_thread(nested) == (True, None, 0)
