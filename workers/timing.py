"""A worker's CPU per part of its request path, for ``disthook.bench.request_cost``: each
part is timed with its thread's CPU clock (``time.thread_time``), the parts inside it
subtracted, so that the parts add up to what the worker spent in them. Installed only in a
worker started for that bench (its ``OUT_VAR`` names the folder each worker writes its
totals to when it exits); a worker never loads this module otherwise.

cProfile would mislead here: it costs several times this code's own time per call.
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import threading
import time
from collections import defaultdict

__all__ = ["Timers", "install"]


class Timers:
    """Exclusive thread CPU per part: ``wrap(name, fn)`` times each call of ``fn`` as
    ``name``, less what parts called inside it took (a part called inside another part,
    itself included, counts as its own: every CPU second is counted once)."""

    def __init__(self, clock=time.thread_time):
        self.clock = clock
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._local = threading.local()

    def wrap(self, name, fn):
        """``fn`` timed as ``name`` (or as ``name(args)`` when ``name`` is callable)."""
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            part = name(args) if callable(name) else name
            stack = self._local.__dict__.setdefault("stack", [])
            frame = [part, self.clock(), 0.0]  # name, start, CPU of the parts inside
            stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                stack.pop()
                spent = self.clock() - frame[1]
                self.seconds[part] += spent - frame[2]
                self.calls[part] += 1
                if stack:
                    stack[-1][2] += spent
        return timed

    def patch(self, owner, attr: str, name) -> None:
        """Time ``owner.attr`` as ``name``; nothing when ``owner`` has none (an older tree,
        timed to compare with)."""
        if hasattr(owner, attr):
            setattr(owner, attr, self.wrap(name, getattr(owner, attr)))


def install(out_dir: str) -> Timers:
    """Time this worker's parts from now on (the table of docs/performance.md, *A request's
    cost on a worker*); their totals go to ``out_dir/<pid>.json`` at exit."""
    import zmq

    from disthook import autograd, wire
    from disthook.nn.modules import module
    from disthook.service import loop, op_calls
    from workers import compute, limits, server, state, values

    timers = Timers()
    timers.patch(wire, "decode_all", "decode")
    timers.patch(wire, "decode", "decode")
    timers.patch(wire, "encode", "encode")
    for owner in (loop, server):
        timers.patch(owner, "recv_now", "zmq")
    for owner in (loop, compute, values):
        timers.patch(owner, "send_frames", "zmq")
    timers.patch(loop.Service, "_send", "zmq")
    for attr in ("send_multipart", "recv_multipart", "send"):
        timers.patch(zmq.Socket, attr, "zmq")
    timers.patch(autograd, "backward", "compute")
    timers.patch(autograd, "grad", "compute")
    timers.patch(module.Module, "__call__", "compute")
    # an op run where its operands live, and the optimizer calls a forward carries: the
    # stage's arithmetic, as workspan counts them
    function_of = op_calls.op_function
    op_calls.op_function = lambda *a, **k: timers.wrap("compute", function_of(*a, **k))
    timers.patch(server.Worker, "_optimizer_action", "compute")
    timers.patch(server.Worker, "_run", lambda args: "job:" + args[1].msg.type)
    timers.patch(server.Worker, "_serve_round", "loop")
    timers.patch(state.WorkerState, "handle", "state")
    timers.patch(limits, "graph_nbytes", "graph_nbytes")
    started = time.process_time()

    def write() -> None:
        with open(os.path.join(out_dir, f"{os.getpid()}.json"), "w") as f:
            json.dump({"seconds": timers.seconds, "calls": timers.calls,
                       "process_s": time.process_time() - started}, f)

    atexit.register(write)
    return timers
