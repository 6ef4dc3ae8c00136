"""Load: many clients calling one shared 2-stage model at once (issue 32), on loopback.

Each client is a process of its own that attaches and runs forwards (some under no_grad,
most with a backward, half of the clients with a client hook that fires on every call).
Every client must finish; a client that makes no progress for ``STALL_S`` seconds once
attached (``START_S`` for its start) is a stall: the test then prints each worker's ``waits`` (what runs, what it waits for and how
long, what is queued behind it) and the clients' last output, and fails.

The quick variant (4 clients x 25 calls) is in the default run; the full one (8 clients x
200 calls, ``DISTHOOK_LOAD_ROUNDS`` rounds, default 1) is ``pytest -m load``;
``DISTHOOK_LOAD_LOG=FILE`` writes the worker and coordinator processes' debug log there.
"""
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import local_cluster
from disthook.service.rpc import Peer

STALL_S = 30.0  # a client's call not finished after this long (once it attached)
START_S = 180.0  # a client's start (import, connect, attach) on a busy machine

CLIENT = textwrap.dedent('''
    import faulthandler, signal, sys
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a stall shows its stacks
    import disthook as torch
    from disthook.distributed import connect

    address, name, calls, index, progress = sys.argv[1:6]
    model = connect(address, timeout=120).attach(name)
    if int(index) % 2 == 0:  # a client hook: a round trip to this client on every call
        model[2].register_forward_hook(lambda module, args, out: None)
    torch.manual_seed(int(index))
    x = torch.randn(8, 16)
    with open(progress, "w") as f:  # attached: from now on every call counts
        f.write("0")
    for i in range(int(calls)):
        if i % 3 == 0:
            with torch.no_grad():
                model(x)
        else:
            model(x).square().sum().backward()
        with open(progress, "w") as f:
            f.write(str(i + 1))
    print("done", flush=True)
''')


def worker_waits(cluster) -> list[dict]:
    out = []
    for w in cluster.workers():
        try:
            with Peer(w.address, keys=cluster.keys) as peer:
                out.append(peer.request("waits", timeout=10)["result"])
        except Exception as exc:  # noqa: BLE001 - a diagnosis: say what failed and go on
            out.append({"id": w.id, "error": repr(exc)})
    return out


def run_load(cluster, tmp_path, clients: int, calls: int) -> float:
    """Every client's calls, at once; the seconds it took. Fails on a stall, saying where
    each worker is."""
    (tmp_path / "client.py").write_text(CLIENT)
    progress = [tmp_path / f"progress-{i}" for i in range(clients)]
    for path in progress:  # a round's count, not the last round's: none until attached
        path.unlink(missing_ok=True)
    # each client's output goes to files, never to pipes nobody reads while it runs (a
    # client that writes more than a pipe holds would stop, and look like a stall)
    files = contextlib.ExitStack()
    outs = [files.enter_context(open(tmp_path / f"client-{i}.out", "w+"))  # noqa: SIM115
            for i in range(clients)]
    errs = [files.enter_context(open(tmp_path / f"client-{i}.err", "w+"))  # noqa: SIM115
            for i in range(clients)]
    procs = [subprocess.Popen(
        [sys.executable, str(tmp_path / "client.py"), cluster.address, "load", str(calls),
         str(i), str(progress[i])], stdout=outs[i], stderr=errs[i], text=True)
        for i in range(clients)]
    start = time.monotonic()
    seen = [(-1, start)] * clients  # (calls done, when that count was first seen)
    try:
        while any(p.poll() is None for p in procs):
            time.sleep(0.5)
            now = time.monotonic()
            for i, (p, path) in enumerate(zip(procs, progress)):
                done = int(path.read_text() or -1) if path.exists() else -1
                if done != seen[i][0]:
                    seen[i] = (done, now)
                elif p.poll() is None and now - seen[i][1] > (STALL_S if done >= 0
                                                              else START_S):
                    stuck = {j: seen[j][0] for j in range(clients)}
                    pytest.fail(f"client {i} made no progress for {STALL_S:g} s "
                                f"(calls done per client: {stuck}); workers:\n"
                                + json.dumps(worker_waits(cluster), indent=1)
                                + f"\nclient {i}'s stderr, its stacks last:\n"
                                + client_stacks(p, errs[i]))
        for i, p in enumerate(procs):
            p.wait()
            out, err = read(outs[i]), read(errs[i])
            assert p.returncode == 0 and out.strip().endswith("done"), \
                f"client {i} failed:\n{err[-3000:]}"
        return time.monotonic() - start
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        files.close()


def read(f) -> str:
    f.flush()
    f.seek(0)
    return f.read()


def client_stacks(proc, err) -> str:
    """A stuck client's stderr, with the stacks of its threads at the end (it dumps them on
    SIGUSR1), at most its last 80 lines."""
    try:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
    except OSError:
        pass
    return "\n".join(read(err).splitlines()[-80:])


@pytest.fixture
def shared():
    log = os.environ.get("DISTHOOK_LOAD_LOG")  # a file for the processes' debug log
    with open(log or os.devnull, "w") as err, local_cluster(
            workers=2, log_level="DEBUG" if log else "WARNING",
            stderr=err if log else None) as cluster:
        torch.manual_seed(0)
        remote = cluster.deploy(nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 8)),
                                stages=2, name="load")
        yield cluster, remote


@pytest.mark.timeout(300)
def test_four_clients_at_once_all_finish(shared, tmp_path):
    cluster, _ = shared
    run_load(cluster, tmp_path, clients=4, calls=25)
    for status in worker_waits(cluster):  # nothing left behind
        assert status["running"] == [] or all(r["kind"] == "waits" for r in status["running"])
        assert status["queued"] == [] and status["waits"] == []


@pytest.mark.load
@pytest.mark.timeout(3600)
def test_eight_clients_two_hundred_calls_each(shared, tmp_path):
    cluster, _ = shared
    for r in range(int(os.environ.get("DISTHOOK_LOAD_ROUNDS", "1"))):
        took = run_load(cluster, tmp_path, clients=8, calls=200)
        print(f"round {r}: 8 clients x 200 calls in {took:.1f} s", flush=True)


def test_an_answer_to_a_client_not_yet_connected_to_the_last_stage_waits_for_it(shared):
    """The last stage answers a client directly; a client whose connection to that worker
    is not up yet (still in its handshake) gets the answer once it is, never loses it."""
    import numpy as np
    import zmq

    from disthook import wire
    from disthook.distributed import deployment_of

    cluster, remote = shared
    model = deployment_of(remote)._model_id
    held = {int(name.split()[1]): w.address for w in cluster.workers() for name in w.stages
            if name.endswith(model)}
    first, last = held[0], held[1]
    ctx = zmq.Context()
    me = b"client-late-" + os.urandom(4).hex().encode()
    to_first, to_last = ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
    try:
        for sock in (to_first, to_last):
            sock.setsockopt(zmq.IDENTITY, me)
            sock.setsockopt(zmq.LINGER, 0)
        to_first.connect(first)
        to_first.send_multipart(wire.encode("forward", {
            "model": model, "stage": 0,
            "inputs": [np.ones((2, 16), np.float32)], "grad_enabled": False,
            "reply_to": me.hex()}, req=1, ctx="late"))
        time.sleep(1.0)  # the last stage has answered by now, to no connection of ours
        to_last.connect(last)
        assert to_last.poll(10_000), "the last stage's answer was lost"
        msg = wire.decode(to_last.recv_multipart())
        assert msg.type == "ok" and np.asarray(msg["result"]["output"]).shape == (2, 8)
    finally:
        to_first.close(0)
        to_last.close(0)
        ctx.term()
