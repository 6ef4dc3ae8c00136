"""The lock that makes a deployed model's sockets one thread's at a time, and lends them to
the threads a client hook starts while it runs; what makes a call of the whole model from
a hook run nested in the call that fired it (``nested_call``).

A call holds the sockets until its answer came; the client hooks the workers ask for run
inside it, in the calling thread. A hook that calls the model itself nests its call inside
(the lock is reentrant). A hook that starts a thread which calls the model, and waits for
it (``join``, a pool's ``result``), must let that thread nest the same way: before, the
thread waited for the lock the hook's call held, the hook for the thread, and the program
hung. While a hook runs, its thread lends the sockets to itself and to the threads started
since the hook began (the ones it may be waiting for); it takes them back when the hook
returned and its borrowers' calls ended, so every borrowed call nests inside the hook's
call, as a call the hook made itself would. Threads that were running before the hook
began wait for the hook's call to end, as before (they are another call's, not the
hook's), up to the model's timeout: one that waits longer while one hook runs is refused
with ``RuntimeError`` rather than left waiting for ever (a hook that waits for a thread it
did not start, a pool made before it, would otherwise hang)."""
import contextlib
import threading
import time


class SocketLock:
    """Reentrant, as ``threading.RLock``, with ``lent()`` for the span of a client hook."""

    def __init__(self, timeout):
        """``timeout()``: the model's timeout in seconds, read when a wait passes it."""
        # reentrant only so that ``_cond._is_owned()`` says whether this thread holds it:
        # see ``_let_go``
        self._cond = threading.Condition(threading.RLock())
        self._owner: int | None = None
        self._depth = 0
        # one entry per hook running now, innermost last: (its thread, the depth it held
        # the lock at, the threads alive when it began, when it began)
        self._loans: list[tuple[int, int, frozenset, float]] = []
        self.timeout = timeout

    def _may_take(self, me: int) -> bool:
        if self._owner == me:
            return True
        if self._owner is not None:
            return False
        if not self._loans:
            return True
        lender, _, before, _ = self._loans[-1]
        return me == lender or me not in before

    def acquire(self, blocking: bool = True) -> bool:
        me = threading.get_ident()
        # a graph's finalizer (releases.py) that the garbage collector runs while this
        # thread is inside one of these methods: its condition's lock is this thread's
        # already, and the bookkeeping half done, so the answer is no, at once
        if self._cond._is_owned():
            if not blocking:
                return False
            raise RuntimeError(
                "a deployed model was called from code that interrupted its own call's "
                "bookkeeping (a finalizer or a signal handler); call it from outside")
        try:
            if not self._cond.acquire(blocking):
                return False
            if not self._may_take(me):
                if not blocking:
                    return False
                self._wait(me)
            self._owner = me
            self._depth += 1
            return True
        finally:
            self._let_go()

    def _let_go(self) -> None:
        """Gives the condition's lock back if this thread holds it. Each method takes that
        lock inside its ``try`` and gives it back here, so a KeyboardInterrupt (Ctrl-C, a
        signal handler's exception) that lands right after the lock was taken cannot keep
        it: before, it stayed taken and every later call of the model (the next notebook
        cell's) hung for ever. (``with self._cond`` has that gap; a generator's context
        would hold the lock as long as the interrupt's traceback lives.)"""
        if self._cond._is_owned():
            self._cond.release()

    def _wait(self, me: int) -> None:
        """Until ``me`` may take the lock; ``RuntimeError`` once it waited ``timeout``
        seconds while one hook ran all along (the hook may be waiting for this thread)."""
        while not self._may_take(me):
            self._cond.wait(0.5)
            if self._loans and not self._may_take(me):
                since = self._loans[-1][3]
                limit = self.timeout()
                if time.monotonic() - since > limit:
                    raise RuntimeError(
                        "this thread called a deployed model while a client hook of one of "
                        f"its calls has been running on another thread for over "
                        f"{limit:g} s (the model's timeout); the model serves one "
                        "call at a time, and a call the hook waits for cannot run behind "
                        "it. If the hook waits for this thread, start the thread (or the "
                        "pool) inside the hook: its calls then run within the hook's call")

    def release(self) -> None:
        try:
            self._cond.acquire()
            if self._owner != threading.get_ident():
                raise RuntimeError("cannot release un-acquired lock")
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._cond.notify_all()
        finally:
            self._let_go()

    def depth_here(self) -> int:
        """How many times this thread holds the lock now (0: not at all)."""
        return self._depth if self._owner == threading.get_ident() else 0

    def __enter__(self) -> bool:
        me = threading.get_ident()
        depth = self.depth_here()
        try:
            return self.acquire()
        except BaseException:
            # a KeyboardInterrupt that lands once ``acquire`` returned, before ``with``
            # could call ``__exit__``: the sockets stayed this thread's for ever, and another
            # thread's call (a later cell's, run from a thread) waited for them for ever
            if self._owner == me and self._depth > depth:
                self.release()
            raise

    def __exit__(self, *exc) -> None:
        self.release()

    @contextlib.contextmanager
    def lent(self):
        """While a client hook runs in this thread: the threads started from now on (and
        this one) may take the sockets; back once they are done with them."""
        me = threading.get_ident()
        lending = False
        try:
            self._cond.acquire()
            if self._owner == me:  # (else a hook served outside a call: nothing to lend)
                before = frozenset(t.ident for t in threading.enumerate()) - {me}
                self._loans.append((me, self._depth, before, time.monotonic()))
                self._owner, self._depth = None, 0
                lending = True
                self._cond.notify_all()
        finally:
            self._let_go()
        try:
            yield
        finally:
            if lending:
                try:
                    self._cond.acquire()
                    while not (self._owner is None and self._loans[-1][0] == me):
                        self._cond.wait()
                    _, depth, _, _ = self._loans.pop()
                    self._owner, self._depth = me, depth
                finally:
                    self._let_go()



def nested_call(hub, first: str) -> dict:
    """The fields of a whole-model call (its first stage's, at ``first``) that make it run
    nested in the call whose client hook makes it (in the hook, or in a thread the hook
    started): ``within`` that call's context, as a part called from a hook carries. The
    worker whose call fired the hook waits for the hook's answer and runs the new call at
    once only when it is asked with ``within``: the first stage's worker is; a later
    stage's gets the call from its neighbour stage, without it, and would keep it behind
    the call that waits (30 s, then ``RemoteTimeout``; from a thread the hook joins, for
    ever before the sockets were lent), so that case is refused at once."""
    if not hub.firing or hub.firing_ctx is None:
        return {}
    if hub.firing_at is not None and hub.firing_at is not hub.socks.get(first):
        raise RuntimeError(
            f"a call of the deployed model {hub.model} was made while a client hook of one "
            "of its calls, fired by a later stage, runs (in the hook, or in a thread the "
            "hook started): that stage's worker waits for the hook's answer, so this call "
            "could only wait behind it. Call the model from a hook on a module of its first "
            "stage, call the part the hook needs (model.head(x) runs nested), or call the "
            "model once the call that fired the hook returned")
    return {"within": hub.firing_ctx}
