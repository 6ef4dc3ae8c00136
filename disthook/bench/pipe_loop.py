"""``python disthook/bench/pipe_loop.py [--messages N] [--parts]``: the CPU one pipe record
costs between two neighbour stages on one host, both ends (docs/performance.md, *Pipe
messages with fewer steps*).

Two worker processes (``workers.server.Worker``, no coordinator), linked as a training step's
neighbour stages are (``DISTHOOK_LOCAL_LINKS=0``: a ZeroMQ DEALER to the other's endpoint,
as between hosts), play ping-pong with a 32 x 1024 float32 activation and its gradient: one
side sends through the stage's send (``_pipe_send``) and waits as a stage's job waits
(``wait_for_pipe``, then ``sleep_on``, then the mailbox), the other the reverse. Between any
two of a side's sends or waits a 16 MiB numpy sum evicts the caches, as a stage's passes do
(its CPU is left out). Printed per message, as medians of the rounds: each side's sends and
waits (the thread's CPU clock) and its whole process (every thread, ZeroMQ's I/O threads
included), and with ``--parts`` where the waits' CPU goes (``workers.timing``'s timers,
which cost CPU of their own: compare totals without it).

Run it by path with ``PYTHONPATH`` naming the tree to measure, so that one copy of this file
measures two trees alternately (an older tree need not hold it).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import sys
import time
import types

ROWS, WIDTH = 32, 1024  # a micro-batch's activation at batch 512, m = 16, w = 1024
EVICT_BYTES = 16 << 20
READY_SLEEP_S = 0.01  # --ready: how long side a sleeps before each wait


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def _parts():
    """Time the receive path's parts in this process (``workers.timing``)."""
    import zmq

    from disthook import wire
    from workers import links, server, state, steps, timing

    timers = timing.Timers()
    timers.patch(zmq.Poller, "poll", "poll")
    timers.patch(links.Link, "read", "link read")
    timers.patch(server.Worker, "messages_in", "decode")
    timers.patch(state.WorkerState, "handle", "state")
    timers.patch(state.WorkerState, "pipe_arrived", "state")  # (this round's short path)
    timers.patch(server.Worker, "_execute", "execute")
    timers.patch(server.Worker, "_serve_round", "serve round (rest)")
    timers.patch(server.Worker, "sleep_on", "sleep_on (rest)")
    timers.patch(server.Worker, "_recv_pipe", "recv_pipe (rest)")
    timers.patch(server.Worker, "read_monitor", "monitor")
    timers.patch(server.Worker, "_on_router", "router (rest)")
    timers.patch(server.Worker, "on_link", "on_link (rest)")
    timers.patch(server.Worker, "_read_link", "read_link (rest)")
    timers.patch(steps, "send_frames", "send_frames (rest)")
    timers.patch(links.Link, "send_multipart", "link send")
    timers.patch(wire, "encode", "encode (rest)")
    timers.patch(wire, "_validate_fields", "encode: schema check")
    timers.patch(wire, "encode_pipe", "encode (rest)")
    timers.patch(wire, "decode_pipe", "decode")
    timers.patch(server.Worker, "links_first", "links_first (rest)")
    timers.patch(server.Worker, "_pipe_in", "pipe_in (rest)")
    timers.patch(server.Worker, "_count", "send: counting")
    timers.patch(server.Worker, "_pipe_send", "send (rest)")
    return timers


def side(role: str, conn, messages: int, rounds: int, parts: bool, ready: bool) -> None:
    """One stage: ``a`` sends activations and waits for gradients, ``b`` the reverse."""
    import numpy as np

    from disthook.service.loop import tune_malloc
    from workers.links import links_enabled
    from workers.peers import neighbour_identity
    from workers.server import Worker
    from workers.state import Job
    from workers.step_run import StepRun

    tune_malloc()  # as a worker's main does
    timers = _parts() if parts else None
    w = Worker("tcp://127.0.0.1:9", worker_id=f"loop-{role}")
    w._running = True
    w.state.models.add("m")
    there = {"link": w.listener.path if w.listener is not None else None,
             "link_host": w.host_token, "address": w.address}
    conn.send(there)
    peer = conn.recv()
    side_name = "next" if role == "a" else "prev"
    msg = {side_name: peer["address"], f"{side_name}_link": peer["link"],
           f"{side_name}_link_host": peer["link_host"]}
    neighbour = w.dial_neighbour(msg, side_name, neighbour_identity(w.id, side_name))
    st = types.SimpleNamespace(model="m", neighbours={side_name: neighbour}, name=role)
    job = Job(b"client", None, b"client", "m")
    w.state.jobs.add(job)
    data = np.random.default_rng(0).standard_normal((ROWS, WIDTH), dtype=np.float32)
    evict = np.ones(EVICT_BYTES // 4, np.float32)
    # the first record from each side makes the peer known to the other (a link's hello)
    conn.send("ready")
    deadline = time.monotonic() + 10
    while conn.recv() != "ready" and time.monotonic() < deadline:
        pass
    results = []
    for r in range(rounds + 1):  # round 0 warms up
        step = f"s{r}"
        send_kind, recv_kind = ("act", "grad") if role == "a" else ("grad", "act")
        schedule = []
        for mb in range(messages):
            pair = [(f"send_{send_kind}", mb), (f"recv_{recv_kind}", mb)]
            schedule += pair if role == "a" else pair[::-1]
        run = StepRun("m", step, schedule)
        sends = waits = evicted = 0.0
        if timers is not None:
            timers.seconds.clear()
            timers.calls.clear()
        conn.send("go")
        conn.recv()
        cpu0 = _cpu()
        while True:
            e0 = time.thread_time()
            evict.sum()
            if ready and role == "a" and run.position % 2:  # before a wait: the other
                time.sleep(READY_SLEEP_S)  # side's record comes meanwhile
            evicted += time.thread_time() - e0
            action = run.next(w.state.mailbox)
            if action[0] == "done":
                break
            t0 = time.thread_time()
            if action[0] == "wait":
                wait = w.state.wait_for_pipe(job, action[1], "a record")
                if wait is not None:
                    w.sleep_on(wait)
                waits += time.thread_time() - t0
            elif action[0] == "recv":
                waits += time.thread_time() - t0
            else:
                w._pipe_send(st, side_name, step, send_kind, action[1], data)
                sends += time.thread_time() - t0
        total = _cpu() - cpu0 - evicted
        w.state.finish_step("m", step)
        if r:
            row = {"sends": sends / messages, "waits": waits / messages,
                   "process": total / messages}
            if timers is not None:
                row.update({f"  {k}": v / messages for k, v in timers.seconds.items()})
                row.update({f"  {k} (calls)": v / messages / 1e6
                            for k, v in timers.calls.items()})
            results.append(row)
    conn.send({"role": role, "links": links_enabled(), "rows": results})
    conn.recv()
    w._running = False
    w.close()


class _Timed:
    """A pipe to a side whose answers must come within a minute (a side that failed says
    nothing more)."""

    def __init__(self, conn):
        self.conn = conn

    def send(self, what) -> None:
        self.conn.send(what)

    def recv(self):
        if not self.conn.poll(60):
            raise SystemExit("pipe_loop: a side did not answer in 60 s (see its traceback)")
        return self.conn.recv()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="pipe_loop", description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1000, help="records each way a round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--parts", action="store_true", help="time the receive path by part")
    p.add_argument("--ready", action="store_true",
                   help="side a sleeps 10 ms before each wait, so that the record it waits "
                        "for has come (as in a pipeline's steady state); b's never has")
    args = p.parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    ctx = multiprocessing.get_context("spawn")
    pipes = [ctx.Pipe() for _ in range(2)]
    procs = [ctx.Process(target=side, args=(role, pipes[i][1], args.messages, args.rounds,
                                            args.parts, args.ready))
             for i, role in enumerate("ab")]
    for proc in procs:
        proc.start()
    a, b = (_Timed(pipe[0]) for pipe in pipes)
    there = [a.recv(), b.recv()]
    a.send(there[1])
    b.send(there[0])
    a.recv(), b.recv()
    a.send("ready"), b.send("ready")
    for _ in range(args.rounds + 1):
        a.recv(), b.recv()
        a.send("go"), b.send("go")
    out = [a.recv(), b.recv()]
    a.send("end"), b.send("end")
    for proc in procs:
        proc.join(30)
        if proc.is_alive():
            proc.terminate()
    import disthook

    print(f"tree {os.path.dirname(os.path.dirname(disthook.__file__))}, links "
          f"{out[0]['links']}, {'--ready, ' if args.ready else ''}{args.messages} records "
          f"each way a round, {args.rounds} rounds; µs a record, median of the rounds "
          "(min-max)")
    for res in out:
        names = list(dict.fromkeys(k for row in res["rows"] for k in row))
        for k in names:
            vals = [row.get(k, 0.0) * 1e6 for row in res["rows"]]
            print(f"  {res['role']} {k:<22} {statistics.median(vals):8.1f}  "
                  f"({min(vals):.1f}-{max(vals):.1f})")
    both = [sum(statistics.median(row["process"] for row in res["rows"]) for res in out)]
    print(f"  both processes a record: {both[0] * 1e6:.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
