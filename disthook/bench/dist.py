"""``disthook bench dist``: the cost of distribution, against baselines run in the same go.

(a) a client hook round trip (a forward hook returning None, on a worker) against a raw
    pyzmq request/reply of a small message between two processes;
(b) moving a 16 MiB float32 activation one stage further against raw pyzmq one-way
    transfer of the same array between two processes (time ratio; throughput is 1/ratio);
(c) an MLP training step on 2 workers against the same step in one process (which keeps
    freed memory mapped, as the workers do);
(d) a GPT whose forward runs on the client: a training step with and without chunks,
    ``generate`` and ``run_with_cache``, on 2 workers against one process
    (``disthook.bench.gpt``).
Every figure is a ratio disthook / baseline, lower is better, taken round by round and the
median reported: each round of (a) times the raw round trip, plain calls and hooked calls;
of (b) a one-stage and a two-stage forward and the raw transfer; of (c) both steps.
"""
from __future__ import annotations

import contextlib
import copy
import statistics
import subprocess
import sys
import time

import numpy as np
import zmq

from disthook.bench.table import comparison
from disthook.bench.timing import paired, paired_ratio

ECHO = r"""
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.ROUTER)
port = s.bind_to_random_port("tcp://127.0.0.1")
pull = ctx.socket(zmq.PULL)
pull_port = pull.bind_to_random_port("tcp://127.0.0.1")
print(port, pull_port, flush=True)
poller = zmq.Poller()
poller.register(s, zmq.POLLIN)
poller.register(pull, zmq.POLLIN)
while True:
    for sock, _ in poller.poll():
        if sock is s:
            frames = s.recv_multipart(copy=False)
            if frames[-1].bytes == b"quit":
                sys.exit(0)
            s.send_multipart(frames, copy=False)
        else:
            frames = pull.recv_multipart(copy=False)
            s.send_multipart([frames[0].bytes, b"got"])  # acknowledge on the ROUTER
"""

ARRAY_MIB = 16


@contextlib.contextmanager
def _raw_peer():
    """A plain pyzmq echo process; yields (round_trip, transfer): the first returns the
    seconds of one small request/reply (the median of 100), the second sends one 16 MiB
    array one way and waits for its acknowledgement."""
    proc = subprocess.Popen([sys.executable, "-c", ECHO], stdout=subprocess.PIPE, text=True)
    ctx = zmq.Context.instance()
    dealer, push = ctx.socket(zmq.DEALER), ctx.socket(zmq.PUSH)
    try:
        port, pull_port = proc.stdout.readline().split()
        dealer.setsockopt(zmq.IDENTITY, b"bench")
        dealer.connect(f"tcp://127.0.0.1:{port}")
        push.connect(f"tcp://127.0.0.1:{pull_port}")
        small = b"x" * 64
        array = np.ones(ARRAY_MIB * 2**20 // 4, np.float32)

        def round_trip():
            times = []
            for _ in range(100):
                t0 = time.perf_counter()
                dealer.send(small)
                dealer.recv()
                times.append(time.perf_counter() - t0)
            return statistics.median(times)

        def transfer():
            push.send_multipart([b"bench", array], copy=False)
            dealer.recv()

        round_trip(), transfer()  # warm-up
        yield round_trip, transfer
        dealer.send(b"quit")
        proc.wait(10)
    finally:
        dealer.close(linger=0)
        push.close(linger=0)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run(quick: bool = False) -> list[dict]:
    import disthook as torch
    from disthook import nn
    from disthook.distributed import DistributedOptimizer, local_cluster
    from disthook.service.loop import tune_malloc

    tune_malloc()  # the one-process baseline of (c) runs with the workers' malloc setting
    repeats = 5 if quick else 15
    rows = []
    with _raw_peer() as (raw_round_trip, raw_transfer), local_cluster(workers=2) as cluster:
        # (a) the extra time a no-op client hook adds to a tiny remote forward; each round
        # times the raw round trip, plain calls and hooked calls, so drift hits all three
        tiny = cluster.deploy(nn.Sequential(nn.Identity()), stages=1)
        x = torch.ones(4)

        def calls(n=50):
            t0 = time.perf_counter()
            for _ in range(n):
                tiny(x)
            return (time.perf_counter() - t0) / n

        rtts, extra = [], []
        with torch.no_grad():
            calls()
            for _ in range(repeats):
                rtts.append(raw_round_trip())
                plain = calls()
                handle = tiny[0].register_forward_hook(lambda m, args, out: None)
                hooked = calls()
                handle.remove()
                extra.append(hooked - plain)
        rows.append(comparison("dist", "client hook round trip vs raw zmq round trip",
                               statistics.median(extra), statistics.median(rtts), 2.0,
                               "raw pyzmq", paired_ratio(extra, rtts)))
        tiny.close()

        # (b) one more stage hop of a 16 MiB activation, the raw transfer timed in turn
        xb = torch.ones(ARRAY_MIB * 2**20 // 4)
        one = cluster.deploy(nn.Sequential(nn.Identity(), nn.Identity()), stages=1)
        two = cluster.deploy(nn.Sequential(nn.Identity(), nn.Identity()), stages=2)
        with torch.no_grad():
            t_one, t_two, bigs = paired([lambda: one(xb), lambda: two(xb), raw_transfer],
                                        repeats)
        hops = [b - a for a, b in zip(t_one, t_two)]
        rows.append(comparison("dist", f"{ARRAY_MIB} MiB activation, one stage hop "
                               "(1/throughput)", statistics.median(hops),
                               statistics.median(bigs), 1.1, "raw pyzmq",
                               paired_ratio(hops, bigs)))
        one.close()
        two.close()

        # (c) an MLP training step on 2 workers against one process
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                            nn.Linear(1024, 10))
        xs, ys = torch.randn(128, 784), torch.randint(0, 10, (128,))
        local_opt = torch.optim.SGD(net.parameters(), lr=0.01)

        def local_step():
            local_opt.zero_grad()
            nn.functional.cross_entropy(net(xs), ys).backward()
            local_opt.step()

        remote = cluster.deploy(copy.deepcopy(net), stages=2)  # net stays the baseline
        remote_opt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.01)

        def remote_step():
            remote_opt.zero_grad()
            nn.functional.cross_entropy(remote(xs), ys).backward()
            remote_opt.step()

        ours, base = paired([remote_step, local_step], repeats)
        rows.append(comparison("dist", "MLP 784-1024-1024-10 SGD step, 2 workers",
                               statistics.median(ours), statistics.median(base), 1.15,
                               "one process", paired_ratio(ours, base)))
        remote.close()

        # (d) a GPT whose forward runs on the client (see disthook.bench.gpt)
        from disthook.bench import gpt

        rows.extend(gpt.rows(cluster, repeats, quick))
    return rows

