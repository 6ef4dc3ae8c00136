"""``disthook bench workspan``: a pipeline's work and span, which predict its step time on
p dedicated cores from a machine with fewer.

The model is scaleout's (16 x Linear(w, w) with a ReLU between, cross-entropy, batch 512,
1F1B at m = 16), cut into p = 2, 4, 8 equal stages, at widths 1024 and 512 (``--quick``:
p = 2, width 256, batch 128, m = 8). Every process runs one BLAS thread. For each p, in
disthook and (when installed) in torch.distributed.pipelining over gloo on loopback:

- **work**: the CPU seconds per step of every process (client, coordinator and workers;
  torch: every rank), against the CPU of the same step in one process of the same library;
  work efficiency is the one process's CPU over the pipeline's;
- each stage's **CPU per action** (forward, backward, send) from its own thread's CPU clock
  (``time.thread_time``) around the action, recorded in the stage's timeline; for the
  workers, the share of their CPU spent outside the forwards, backwards and optimizer steps,
  and where it goes: the sends, the stage thread's loop while it waits for a neighbour (a
  receive's CPU in the timeline), ZeroMQ's I/O threads (``/proc``), the rest;
- the **hop latency**: half the shortest of 20 round trips of one micro-batch's activation
  between two processes, the way each library sends it (disthook: encoded, over ZeroMQ,
  decoded; torch: a gloo send and receive): on dedicated cores no trip waits for a core,
  and the shortest is the one that did not; disthook's receives that a stage waited for in the
  timelines are kept too (``waited_latency_s``: on fewer cores than processes they also
  wait for a core);
- the **span**: each library's schedule replayed with those costs and that latency
  (``replay``), the predicted step on p dedicated cores, its ratio to torch's prediction,
  and the predicted speedup over one process against the bound p·m/(m+p-1);
- disthook's **ZB-H1** (``schedule="zb-h1"``) measured the same way, with each stage's
  forward, B and W: its predicted step and its bubble against 1F1B's (a schedule's bubble:
  the replayed step beyond its busiest stage's work; ``_bubble``); and its
  **zb-batched** (``schedule="zb-batched"``: every W at the end of the step, the weights'
  gradients of all micro-batches taken as one product each), a W's cost being its equal
  share of the batched one.

What it cannot carry over: BLAS speed per core differs between CPUs (and with the memory
bandwidth the other cores take), and the predicted step assumes a core per process that
nothing else uses, the ZeroMQ and gloo I/O threads included (their CPU is in the work, not
in the span). A stage's CPU per action is the median over the measured steps.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import statistics
import time

from disthook.bench.stages import LAYERS, LR, bound, check, quiet, spawned, spec, torch_pipeline
from disthook.bench.timing import cpu_seconds, io_thread_seconds
from disthook.distributed.interleaved import interleaved_1f1b
from disthook.distributed.schedule import one_f_one_b, zero_bubble_batched, zero_bubble_h1

STAGES, QUICK_STAGES = (2, 4, 8), (2,)
WIDTHS, QUICK_WIDTHS = (1024, 512), (256,)
BATCH, QUICK_BATCH = 512, 128
MICRO, QUICK_MICRO = 16, 8
STEPS, QUICK_STEPS = 6, 2  # measured steps, after two warm-up steps
# the stages' arithmetic: passes, and the optimizer calls a step runs first (SGD's update of
# the stage's weights); "outside compute" is the rest of the workers' CPU
COMPUTE = ("forward", "backward", "weight", "optimizer")  # "weight" and "weight_batch"
SENDS = ("send_act", "send_grad")
VIRTUAL = 2  # chunks per worker of the interleaved 1F1B prediction


# ---- the replay ---------------------------------------------------------------------------
def replay(plan: list[list[tuple]], cost, latency: float) -> dict:
    """Run each stage's list of ``plan`` (see ``disthook.distributed.schedule``) on a core of
    its own: an action starts when its stage is free and, for a receive, when the message
    arrived (the end of its send plus ``latency`` seconds); ``cost(stage, kind)`` is the
    seconds of a forward, backward or send. An action may name the virtual stage it runs
    (``(kind, mb, stage)``, interleaved 1F1B: ``disthook.distributed.interleaved``); then
    ``cost`` is asked for that stage's. The step's seconds and each core's busy ones."""
    p = len(plan)
    arrival: dict[tuple[str, int, int], float] = {}  # ("act"/"grad", to stage, mb) -> time
    clock, busy, pos = [0.0] * p, [0.0] * p, [0] * p
    while any(pos[s] < len(plan[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            while pos[s] < len(plan[s]):
                action = plan[s][pos[s]]
                kind, mb = action[0], action[1]
                k = action[2] if len(action) > 2 else s  # the (virtual) stage it runs
                if kind.startswith("recv_"):
                    key = (kind[5:], k, mb)
                    if key not in arrival:
                        break
                    clock[s] = max(clock[s], arrival[key])
                else:
                    took = cost(k, kind)
                    clock[s] += took
                    busy[s] += took
                    if kind == "send_act":
                        arrival[("act", k + 1, mb)] = clock[s] + latency
                    elif kind == "send_grad":
                        arrival[("grad", k - 1, mb)] = clock[s] + latency
                pos[s] += 1
                progressed = True
        if not progressed:
            raise ValueError("replay: every unfinished stage waits for a message never sent")
    return {"step_s": max(clock), "busy_s": busy}


def costs_from_timelines(timelines: list[list[list]], p: int) -> dict:
    """Per stage, the median CPU seconds of each action kind over the steps' timelines
    (``timelines[step][stage]``: [kind, mb, cpu, wall start, wall end] per action)."""
    out = []
    for s in range(p):
        by_kind: dict[str, list[float]] = {}
        for step in timelines:
            for kind, _, cpu, _, _ in step[s]:
                by_kind.setdefault(kind, []).append(cpu)
        out.append({k: statistics.median(v) for k, v in by_kind.items()
                    if not k.startswith("recv_")})
    return out


def hop_latency(timelines: list[list[list]]) -> float | None:
    """The lower quartile, over the receives a stage waited for, of the seconds from the
    sender's end of the send to the receiver taking the message (None: no receive waited)."""
    waits = []
    for step in timelines:
        sent = {}
        for s, actions in enumerate(step):
            for kind, mb, _, _, end in actions:
                if kind == "send_act":
                    sent[("act", s + 1, mb)] = end
                elif kind == "send_grad":
                    sent[("grad", s - 1, mb)] = end
        for s, actions in enumerate(step):
            for kind, mb, _, start, end in actions:
                if kind.startswith("recv_"):
                    at = sent.get((kind[5:], s, mb))
                    if at is not None and start < at <= end:
                        waits.append(end - at)
    if not waits:
        return None
    waits.sort()
    return waits[len(waits) // 4]


def predict(costs: list[dict], latency: float, m: int) -> dict:
    """The 1F1B step predicted from per-stage ``costs`` (kind -> seconds) and ``latency``."""
    plan = one_f_one_b(len(costs), m)
    return replay(plan, lambda s, kind: costs[s].get(kind, 0.0), latency)


def predict_interleaved(costs: list[dict], latency: float, m: int,
                        v: int = VIRTUAL) -> dict | None:
    """Interleaved 1F1B with ``v`` chunks per worker, predicted from the 1F1B ``costs`` of
    ``p`` stages: a chunk's forward and backward cost a ``v``-th of its worker's stage's,
    a send what the stage's cost (the activation is as large), the hop as long. None where
    ``m`` is not a multiple of ``p``. Each pass's fixed cost is divided too, so this is a
    little optimistic for both libraries alike."""
    p = len(costs)
    if m % p:
        return None

    def cost(k: int, kind: str) -> float:
        took = costs[k % p].get(kind, 0.0)
        return took if kind in SENDS else took / v

    return replay(interleaved_1f1b(p, m, v), cost, latency)


# ---- disthook's side ----------------------------------------------------------------------
def _one_process_cpu(net_fn, steps: int) -> float:
    """CPU seconds of one call of ``net_fn`` in this process (thread clock; one thread)."""
    net_fn()
    start = time.thread_time()
    for _ in range(steps):
        net_fn()
    return (time.thread_time() - start) / steps


_ONE_PROCESS: dict[tuple, float] = {}  # (library, width, batch) -> CPU per step


def ours(p: int, width: int, batch: int, m: int, steps: int) -> dict:
    """disthook's row at ``p`` stages: work per process, per-stage action costs (under
    1F1B, and under ZB-H1 with its W's), the hop latency."""
    import disthook as torch
    from disthook import nn
    from disthook.distributed import local_cluster

    whole = spec(1, width, batch)
    torch.manual_seed(0)
    net = whole.whole(nn)
    x, y = whole.data(torch)
    opt = torch.optim.SGD(net.parameters(), lr=LR)

    def one_step():
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()

    key = ("disthook", width, batch)
    if key not in _ONE_PROCESS:
        _ONE_PROCESS[key] = _one_process_cpu(one_step, steps)
    one_cpu = _ONE_PROCESS[key]
    cut = spec(p, width, batch)
    with local_cluster(workers=p) as cluster:
        measured = {schedule: _pipelined(cluster, net, cut, x, y, m, schedule, steps)
                    for schedule in ("1f1b", "zb-h1", "zb-batched")}
    timelines, cpu, wall = measured["1f1b"]
    workers = sum(cpu["workers"])

    def per_step(kinds) -> float:
        return sum(c for step in timelines for stage in step
                   for kind, _, c, _, _ in stage if kind.startswith(kinds)) / steps

    compute = per_step(COMPUTE)
    # the workers' CPU outside compute, by where it goes (seconds per step, all workers)
    outside = {"sends": per_step(SENDS), "waits": per_step(("recv_",)),
               "io_threads": sum(cpu["io_threads"])}
    outside["rest"] = workers - compute - sum(outside.values())
    return {"one_process_cpu_s": one_cpu, "client_cpu_s": cpu["client"],
            "coordinator_cpu_s": cpu["coordinator"], "workers_cpu_s": workers,
            "outside_compute": 1 - compute / workers if workers > 0 else None,
            "outside_compute_s": outside,
            "costs": costs_from_timelines(timelines, p),
            "zb_costs": costs_from_timelines(measured["zb-h1"][0], p),
            "zbb_costs": costs_from_timelines(measured["zb-batched"][0], p),
            "latency_s": wire_latency(batch // m, width),
            "waited_latency_s": hop_latency(timelines), "measured_step_s": wall,
            "measured_zb_step_s": measured["zb-h1"][2],
            "measured_zbb_step_s": measured["zb-batched"][2],
            "zbb_work_s": _work(measured["zb-batched"][1])}


def _work(cpu: dict) -> float:
    """Every process's CPU per step of one schedule's run (``_pipelined``'s)."""
    return cpu["client"] + cpu["coordinator"] + sum(cpu["workers"])


def _pipelined(cluster, net, cut, x, y, m: int, schedule: str, steps: int) -> tuple:
    """``steps`` training steps of ``net`` deployed on ``cluster`` cut as ``cut`` under
    ``schedule`` (after two): the stages' timelines per step, each process's CPU per step
    and the wall time per step."""
    import disthook as torch
    from disthook import nn
    from disthook.distributed import DistributedOptimizer

    p = cut.stages
    remote = cluster.deploy(copy.deepcopy(net), stages=p,
                            split_points=cut.split_points() or None, chunks=m,
                            schedule=schedule)
    ropt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=LR)
    timelines = []

    def step():
        ropt.zero_grad()
        remote.train_step(x, y, nn.functional.cross_entropy)
        ropt.step()

    try:
        for _ in range(2):
            step()
        pids = [proc.pid for proc in cluster._processes]  # the coordinator first
        before = [cpu_seconds(pid) for pid in pids]
        io_before = [io_thread_seconds(pid) for pid in pids[1:]]
        client0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(steps):
            step()
            timelines.append([s["timeline"] for s in remote.step_stats])
        wall = (time.perf_counter() - wall0) / steps
        client = (time.process_time() - client0) / steps
        after = [cpu_seconds(pid) for pid in pids]
        io_after = [io_thread_seconds(pid) for pid in pids[1:]]
    finally:
        remote.close()
    per = [(a - b) / steps for a, b in zip(after, before)]
    io = [(a - b) / steps for a, b in zip(io_after, io_before)]
    return timelines, {"client": client, "coordinator": per[0], "workers": per[1:],
                       "io_threads": io}, wall


ECHO = """
import sys, zmq
from disthook import wire
from disthook.service.loop import PIPE_COPY_BELOW, send_frames
sock = zmq.Context.instance().socket(zmq.PAIR)
sock.connect(sys.argv[1])
while True:
    msg = wire.decode(sock.recv_multipart(copy=False))
    if msg["data"] is None:
        break
    send_frames(sock, wire.encode("pipe", dict(msg.fields)), PIPE_COPY_BELOW)
"""


def wire_latency(rows: int, width: int, trips: int = 21) -> float:
    """Half the shortest round trip of one activation (``rows`` x ``width`` float32) as a
    stage sends it: encoded, over ZeroMQ on loopback to another process, decoded there and
    sent back."""
    import subprocess
    import sys

    import numpy as np
    import zmq

    from disthook import wire
    from disthook.service.loop import PIPE_COPY_BELOW, send_frames

    sock = zmq.Context.instance().socket(zmq.PAIR)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    echo = subprocess.Popen([sys.executable, "-c", ECHO, f"tcp://127.0.0.1:{port}"])
    fields = {"model": "m", "step": "s", "kind": "act", "mb": 0,
              "data": np.zeros((rows, width), np.float32), "reason": None}
    times = []
    try:
        for _ in range(trips):
            start = time.perf_counter()
            send_frames(sock, wire.encode("pipe", fields), PIPE_COPY_BELOW)
            wire.decode(sock.recv_multipart(copy=False))
            times.append((time.perf_counter() - start) / 2)
        sock.send_multipart(wire.encode("pipe", {**fields, "data": None}), copy=False)
        echo.wait(timeout=30)
    finally:
        if echo.poll() is None:
            echo.kill()
            echo.wait()
        sock.close(linger=0)
    return min(times[1:])


# ---- torch's side -------------------------------------------------------------------------
def _torch_process(rank: int, port: int, cut, m: int, steps: int, out: str) -> None:
    quiet()
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import schedules

    torch.set_num_threads(1)
    p = cut.stages
    dist.init_process_group("gloo", rank=rank, world_size=p,
                            init_method=f"tcp://127.0.0.1:{port}")
    try:
        stage, step = torch_pipeline(cut, rank, "1f1b", m)
        recorded: dict[str, list[float]] = {}

        def timed(kind, fn):
            def call(*args, **kwargs):
                start = time.thread_time()
                try:
                    return fn(*args, **kwargs)
                finally:
                    recorded.setdefault(kind, []).append(time.thread_time() - start)
            return call

        stage.forward_one_chunk = timed("forward", stage.forward_one_chunk)
        stage.backward_one_chunk = timed("backward", stage.backward_one_chunk)
        # posting a batch of sends (and the receives that go with them): the send's CPU on
        # the stage's thread; gloo moves the bytes in threads of its own (counted in work)
        schedules._batch_p2p = timed("send", schedules._batch_p2p)

        rows = cut.batch // m
        act = torch.zeros(rows, cut.sizes[0])
        trips = []
        for _ in range(21):  # the hop: half a ping-pong of one activation, ranks 0 and 1
            dist.barrier()
            start = time.perf_counter()
            if rank == 0:
                dist.send(act, 1)
                dist.recv(act, 1)
            elif rank == 1:
                dist.recv(act, 0)
                dist.send(act, 0)
            trips.append((time.perf_counter() - start) / 2)
        for _ in range(2):
            step()
        recorded.clear()
        dist.barrier()
        cpu0 = time.process_time()
        for _ in range(steps):
            step()
        cpu = (time.process_time() - cpu0) / steps
        mine = {"cpu_s": cpu, "latency_s": min(trips[1:]),
                "costs": {k: statistics.median(v) for k, v in recorded.items()}}
        gathered = [None] * p if rank == 0 else None
        dist.gather_object(mine, gathered, dst=0)
        if rank == 0:
            with open(out, "w") as f:
                json.dump(gathered, f)
    finally:
        dist.destroy_process_group()


def _one_torch_cpu(whole, steps: int) -> float:
    from disthook.bench.stages import one_torch_step

    key = ("torch", whole.sizes[0], whole.batch)
    if key not in _ONE_PROCESS:
        _ONE_PROCESS[key] = _one_process_cpu(one_torch_step(whole), steps)
    return _ONE_PROCESS[key]


def theirs(p: int, width: int, batch: int, m: int, steps: int) -> dict:
    """torch pipelining's row at ``p`` stages: every rank's CPU per step, per-stage action
    costs (a send: the 1F1B sends as torch posts them), the gloo hop latency."""
    ranks = spawned(_torch_process, p, spec(p, width, batch), m, steps, read=json.load)
    costs = [{"forward": r["costs"].get("forward", 0.0),
              "backward": r["costs"].get("backward", 0.0),
              "send_act": r["costs"].get("send", 0.0),
              "send_grad": r["costs"].get("send", 0.0)} for r in ranks]
    return {"one_process_cpu_s": _one_torch_cpu(spec(1, width, batch), steps),
            "ranks_cpu_s": [r["cpu_s"] for r in ranks], "costs": costs,
            "latency_s": ranks[0]["latency_s"]}


# ---- the suite ----------------------------------------------------------------------------
def settings(quick: bool = False, stages=None, width: int | None = None,
             batch: int | None = None, micro: int | None = None) -> dict:
    """The run's stage counts, widths, batch and micro-batches, checked as scaleout checks
    them."""
    chosen = {"stages": tuple(stages or (QUICK_STAGES if quick else STAGES)),
              "widths": (width,) if width else (QUICK_WIDTHS if quick else WIDTHS),
              "batch": batch or (QUICK_BATCH if quick else BATCH),
              "micro": micro or (QUICK_MICRO if quick else MICRO)}
    for w in chosen["widths"]:
        check(chosen["stages"], w, chosen["batch"], chosen["micro"], "workspan")
    return chosen


def run(quick: bool = False, stages=None, width: int | None = None, batch: int | None = None,
        micro: int | None = None) -> list[dict]:
    from disthook.service.loop import tune_malloc

    chosen = settings(quick, stages, width, batch, micro)
    has_torch = importlib.util.find_spec("torch") is not None
    tune_malloc()  # as in the workers
    steps = QUICK_STEPS if quick else STEPS
    m, rows = chosen["micro"], []
    for w in chosen["widths"]:
        for p in chosen["stages"]:
            row = {"suite": "workspan", "stages": p, "width": w, "layers": LAYERS,
                   "batch": chosen["batch"], "micro": m, "quick": quick, "steps": steps,
                   "bound": bound(p, m), "disthook": ours(p, w, chosen["batch"], m, steps),
                   "torch": (theirs(p, w, chosen["batch"], m, steps)
                             if has_torch and p > 1 else None)}
            _predict_row(row)
            rows.append(row)
    return rows


def _predict_row(row: dict) -> None:
    """Add each side's predicted step, speedup and work efficiency to ``row``."""
    m = row["micro"]
    for side in ("disthook", "torch"):
        r = row[side]
        if r is None:
            continue
        latency = r["latency_s"] or 0.0
        plain = predict(r["costs"], latency, m)
        r["predicted_step_s"] = plain["step_s"]
        if side == "disthook":  # ZB-H1 from its own measured F, B and W
            zb = replay(zero_bubble_h1(row["stages"], m),
                        lambda s, kind, c=r["zb_costs"]: c[s].get(kind, 0.0), latency)
            r["predicted_zb_step_s"] = zb["step_s"]
            # the bubbles compared on one set of costs: 1F1B replayed with ZB-H1's run's F,
            # sends and B + W as its backward, so that the ratio is the two schedules' alone;
            # against 1F1B's own run too, which was timed minutes apart on a machine that
            # changed in between
            same = predict(_unsplit(r["zb_costs"]), latency, m)
            r["zb_bubble_vs_1f1b"] = _ratio(_bubble(zb), _bubble(same))
            r["zb_bubble_vs_1f1b_run"] = _ratio(_bubble(zb), _bubble(plain))
            r["zb_bubble_s"], r["zb_imbalance_s"] = _bubble(zb), _imbalance(zb)
            zbb = replay(zero_bubble_batched(row["stages"], m),
                         lambda s, kind, c=r["zbb_costs"]: c[s].get(kind, 0.0), latency)
            r["predicted_zbb_step_s"] = zbb["step_s"]
            r["zbb_work_efficiency"] = r["one_process_cpu_s"] / r["zbb_work_s"]
        il = predict_interleaved(r["costs"], latency, m)
        r["predicted_interleaved_step_s"] = None if il is None else il["step_s"]
        r["interleaved_bubble_vs_1f1b"] = None if il is None else _ratio(_bubble(il),
                                                                          _bubble(plain))
        r["predicted_speedup"] = r["one_process_cpu_s"] / r["predicted_step_s"]
        total = (r["client_cpu_s"] + r["coordinator_cpu_s"] + r["workers_cpu_s"]
                 if side == "disthook" else sum(r["ranks_cpu_s"]))
        r["work_s"] = total
        r["work_efficiency"] = r["one_process_cpu_s"] / total
    t = row["torch"]
    row["ratio_to_torch"] = (row["disthook"]["predicted_step_s"] / t["predicted_step_s"]
                             if t else None)
    # each library's fastest predicted schedule among those it runs (ours: 1F1B, ZB-H1 and
    # zb-batched, interleaved 1F1B being predicted only; torch's: 1F1B and Interleaved1F1B)
    row["best_ratio_to_torch"] = (
        _best(row["disthook"], ("predicted_step_s", "predicted_zb_step_s",
                                "predicted_zbb_step_s"))
        / _best(t, ("predicted_step_s", "predicted_interleaved_step_s")) if t else None)


def _best(side: dict, keys: tuple) -> float:
    return min(side[k] for k in keys if side.get(k) is not None)


def _unsplit(zb_costs: list[dict]) -> list[dict]:
    """ZB-H1's per-stage costs with B and W run as one backward, as 1F1B runs it."""
    return [{**{k: v for k, v in c.items() if k != "weight"},
             "backward": c.get("backward", 0.0) + c.get("weight", 0.0)} for c in zb_costs]


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _bubble(replayed: dict) -> float:
    """A replayed step's seconds beyond its busiest stage's work: what the schedule adds to
    the shortest step the stages' work allows (the fill, the drain, the hops waited for).
    A stage with less work than the busiest idles the difference (m times its shortfall
    per micro-batch) under every schedule: that is the stages' imbalance
    (``_imbalance``), not a bubble. Counted in, it adds the same seconds to both sides of
    a ratio of bubbles and pulls the ratio towards 1 as far as the stages' measured costs
    differ."""
    return replayed["step_s"] - max(replayed["busy_s"])


def _imbalance(replayed: dict) -> float:
    """The seconds the busiest stage's work exceeds the stages' mean: what the stages idle
    on average whatever the schedule."""
    busy = replayed["busy_s"]
    return max(busy) - sum(busy) / len(busy)


def _percent(share: float | None) -> str:
    return "n/a" if share is None else f"{share * 100:.0f}%"


def _ms(seconds: float | None, digits: int = 1) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.{digits}f}"


def _busiest(costs: list[dict]) -> tuple[int, dict]:
    s = max(range(len(costs)), key=lambda i: sum(costs[i].values()))
    return s, costs[s]


def print_rows(rows: list[dict]) -> None:
    if not rows:
        return
    r0 = rows[0]
    print(f"workspan: {r0['layers']} x Linear(w, w) + ReLU between, cross-entropy, batch "
          f"{r0['batch']}, 1F1B at m={r0['micro']}, p equal stages, one BLAS thread per "
          f"process{' (--quick)' if r0['quick'] else ''}; {r0['steps']} steps after 2")
    print("work: CPU per step summed over every process (ms); efficiency: one process's CPU "
          "/ the pipeline's")
    print(f"{'w':>5} {'p':>2} {'one proc':>9} {'client':>7} {'coord':>6} {'workers':>8} "
          f"{'total':>8} {'effic.':>7} {'outside compute':>16} | {'torch one':>9} "
          f"{'ranks':>8} {'effic.':>7}")
    for r in rows:
        d, t = r["disthook"], r["torch"]
        print(f"{r['width']:>5} {r['stages']:>2} {_ms(d['one_process_cpu_s']):>9} "
              f"{_ms(d['client_cpu_s']):>7} {_ms(d['coordinator_cpu_s']):>6} "
              f"{_ms(d['workers_cpu_s']):>8} {_ms(d['work_s']):>8} "
              f"{d['work_efficiency'] * 100:>6.0f}% {d['outside_compute'] * 100:>15.0f}% | "
              + (f"{_ms(t['one_process_cpu_s']):>9} {_ms(t['work_s']):>8} "
                 f"{t['work_efficiency'] * 100:>6.0f}%" if t else f"{'n/a':>9}"))
    print("outside compute, where the workers' CPU goes (ms per step, all workers): sends; "
          "waits: the stage's thread while it waits for a neighbour (the loop reading, "
          "decoding and handling what comes); ZeroMQ's I/O threads; the rest (the step's "
          "request, bookkeeping, other threads)")
    print(f"{'w':>5} {'p':>2} {'sends':>8} {'waits':>8} {'I/O':>8} {'rest':>8} "
          f"{'per message':>12}")
    for r in rows:
        o = r["disthook"].get("outside_compute_s")
        if o is None:
            continue
        messages = 2 * r["micro"] * (r["stages"] - 1)  # each activation and gradient sent
        each = sum(o.values()) / messages * 1e6 if messages else 0.0
        print(f"{r['width']:>5} {r['stages']:>2} {_ms(o['sends']):>8} {_ms(o['waits']):>8} "
              f"{_ms(o['io_threads']):>8} {_ms(o['rest']):>8} {each:>10.0f}us")
    print("span: the busiest stage's CPU per micro-batch (ms: forward / backward / sends), "
          "the hop latency, and the 1F1B step replayed on p dedicated cores")
    print(f"{'w':>5} {'p':>2} {'stage F/B/send':>18} {'torch F/B/send':>18} {'hop us':>12} "
          f"{'predicted ms':>14} {'ours/torch':>10} {'speedup':>11} {'bound':>6} "
          f"{'of bound':>9}")
    for r in rows:
        d, t = r["disthook"], r["torch"]
        _, c = _busiest(d["costs"])
        mine = (f"{_ms(c.get('forward'), 2)}/{_ms(c.get('backward'), 2)}/"
                f"{_ms(c.get('send_act', 0) + c.get('send_grad', 0), 2)}")
        lat = f"{(d['latency_s'] or 0) * 1e6:.0f}"
        pred = f"{_ms(d['predicted_step_s'], 0)}"
        speed = f"{d['predicted_speedup']:.2f}x"
        theirs_cost = "n/a"
        if t:
            _, tc = _busiest(t["costs"])
            theirs_cost = (f"{_ms(tc['forward'], 2)}/{_ms(tc['backward'], 2)}/"
                           f"{_ms(tc['send_act'] + tc['send_grad'], 2)}")
            lat += f"/{t['latency_s'] * 1e6:.0f}"
            pred += f"/{_ms(t['predicted_step_s'], 0)}"
            speed += f"/{t['predicted_speedup']:.2f}x"
        ratio = "n/a" if r["ratio_to_torch"] is None else f"{r['ratio_to_torch']:.2f}x"
        print(f"{r['width']:>5} {r['stages']:>2} {mine:>18} {theirs_cost:>18} {lat:>12} "
              f"{pred:>14} {ratio:>10} {speed:>11} {r['bound']:>5.2f}x "
              f"{d['predicted_speedup'] / r['bound'] * 100:>8.0f}%")
    print("zero bubble: disthook's ZB-H1 from its own timelines (forward / B / W per "
          "micro-batch on the busiest stage), replayed likewise; its bubble (the step "
          "beyond the busiest stage's work) against 1F1B's replayed with the same costs (B + "
          "W as one backward), and against 1F1B's own run; imbalance: what the stages idle "
          "on average whatever the schedule (the busiest stage's work beyond their mean)")
    print(f"{'w':>5} {'p':>2} {'F/B/W ms':>18} {'1F1B ms':>8} {'ZB-H1 ms':>9} "
          f"{'vs torch':>9} {'bubble ms':>10} {'bubble of 1F1B':>15} {'of its own run':>15} "
          f"{'imbalance ms':>13}")
    for r in rows:
        d, t = r["disthook"], r["torch"]
        _, c = _busiest(d["zb_costs"])
        fbw = "/".join(_ms(c.get(k), 2) for k in ("forward", "backward", "weight"))
        vs = "n/a" if t is None else f"{d['predicted_zb_step_s'] / t['predicted_step_s']:.2f}x"
        of, run = (_percent(d[k]) for k in ("zb_bubble_vs_1f1b", "zb_bubble_vs_1f1b_run"))
        print(f"{r['width']:>5} {r['stages']:>2} {fbw:>18} {_ms(d['predicted_step_s'], 0):>8} "
              f"{_ms(d['predicted_zb_step_s'], 0):>9} {vs:>9} {_ms(d['zb_bubble_s']):>10} "
              f"{of:>15} {run:>15} {_ms(d['zb_imbalance_s']):>13}")
    print("zb-batched: every W at the end of the step, each weight's gradient over the "
          "micro-batches one product (forward / B / a W's share per micro-batch on the "
          "busiest stage), replayed likewise; its run's work and work efficiency")
    print(f"{'w':>5} {'p':>2} {'F/B/W ms':>18} {'zb-batched ms':>14} {'vs torch':>9} "
          f"{'work ms':>8} {'effic.':>7}")
    for r in rows:
        d, t = r["disthook"], r["torch"]
        _, c = _busiest(d["zbb_costs"])
        fbw = "/".join(_ms(c.get(k), 2) for k in ("forward", "backward", "weight_batch"))
        step = d["predicted_zbb_step_s"]
        vs = "n/a" if t is None else f"{step / t['predicted_step_s']:.2f}x"
        print(f"{r['width']:>5} {r['stages']:>2} {fbw:>18} {_ms(step, 0):>14} {vs:>9} "
              f"{_ms(d['zbb_work_s']):>8} {d['zbb_work_efficiency'] * 100:>6.0f}%")
    print(f"interleaved 1F1B, {VIRTUAL} chunks per worker, predicted for both libraries from "
          f"their 1F1B costs (a chunk's pass: 1/{VIRTUAL} of the stage's; sends and hops as "
          "measured); best: each library's fastest predicted schedule of those it runs "
          "(ours: 1F1B, ZB-H1, zb-batched; torch's: 1F1B, Interleaved1F1B)")
    print(f"{'w':>5} {'p':>2} {'interleaved ms':>15} {'bubble of 1F1B':>15} "
          f"{'best ours/torch':>16}")
    for r in rows:
        d, t = r["disthook"], r["torch"]
        mine = _ms(d["predicted_interleaved_step_s"], 0)
        if t:
            mine += f"/{_ms(t['predicted_interleaved_step_s'], 0)}"
        of = _percent(d["interleaved_bubble_vs_1f1b"])
        best = "n/a" if r["best_ratio_to_torch"] is None else f"{r['best_ratio_to_torch']:.2f}x"
        print(f"{r['width']:>5} {r['stages']:>2} {mine:>15} {of:>15} {best:>16}")
    print("a/b: disthook/torch pipelining; speedup: one process's CPU per step / the predicted "
          "step; ours/torch below 1.00x: ours is predicted faster; of bound: disthook's speedup "
          "/ p·m/(m+p-1)")
