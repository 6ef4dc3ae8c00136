"""Neighbour stages on one host talk over local links (a Unix socket, workers/links.py): a
chunked training step gives one process's gradients over them (1F1B and ZB-H1, 2 and 3
workers), status says the links are local, a cluster started with DISTHOOK_LOCAL_LINKS=0
uses ZeroMQ and gives the same numbers, and a neighbour killed mid-step ends the step as it
does over ZeroMQ."""
import os
import time

import numpy as np
import pytest
from clusters import worker_statuses
from test_worker_lost import Sleepy, kill_later
from test_zero_bubble import by_hook, data, hook_everything, make_net, one_process

import disthook as torch
from disthook import nn
from disthook.distributed import WorkerLost, local_cluster
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(240)


def neighbours(cluster) -> dict[str, dict]:
    """How each stage held reaches its neighbours (status), by stage name."""
    out = {}
    for status in worker_statuses(cluster).values():
        out.update(status["links"]["stages"])
    return out


def train_and_look(cluster, stages, schedule):
    """Gradients and hook log of a chunked step on ``stages`` workers, and how the stages
    reached each other meanwhile."""
    log, seen = [], {}
    remote = cluster.deploy(make_net(), stages=stages,
                            chunks=4, schedule=schedule)
    try:
        hook_everything(remote, log)
        x, y = data()
        remote.train_step(x, y, nn.functional.cross_entropy)
        seen = neighbours(cluster)
        grads = {n: p.grad.numpy() for n, p in remote.named_parameters()}
    finally:
        remote.close()
    return grads, log, seen


def assert_one_process(got: dict, log: list) -> None:
    """``got`` (gradients by name) and ``log`` (``hook_everything``'s) are one process's."""
    want_log = []
    want = one_process(want_log)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-7)
    ours, theirs = by_hook(log), by_hook(want_log)
    assert ours.keys() == theirs.keys() and len(ours) == 7
    for key in ours:
        assert len(ours[key]) == len(theirs[key]) == 4, key
        for a, b in zip(ours[key], theirs[key]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, err_msg=str(key))


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1", "zb-batched"])
def test_chunked_steps_over_local_links_equal_one_process(cluster, stages, schedule):
    got, log, seen = train_and_look(cluster, stages, schedule)
    assert_one_process(got, log)
    # every stage reached every neighbour over a local link
    assert len(seen) == stages
    sides = sorted(side for st in seen.values() for side, how in st.items()
                   if how == "local")
    assert sides == sorted(["next"] * (stages - 1) + ["prev"] * (stages - 1)), seen
    links_in = [s["links"]["in"] for s in worker_statuses(cluster).values()]
    assert all(isinstance(i, list) for i in links_in)


def test_status_cli_names_the_links(cluster, capsys):
    from disthook.cli import _print_status

    remote = cluster.deploy(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), stages=2)
    try:
        status = cluster.status()
        for w in status["workers"]:
            with Peer(w["address"]) as peer:
                w["own"] = peer.request("status", timeout=10)["result"]
        _print_status(status)
        out = capsys.readouterr().out
        assert "next:local" in out and "prev:local" in out
    finally:
        remote.close()


def test_with_links_off_neighbours_use_zeromq_and_give_the_same_numbers(cluster,
                                                                      monkeypatch):
    linked, linked_log, seen = train_and_look(cluster, 3, "1f1b")
    assert {how for st in seen.values() for how in st.values()} == {"local"}
    monkeypatch.setenv("DISTHOOK_LOCAL_LINKS", "0")  # the workers inherit it
    with local_cluster(workers=3, timeout=60) as plain:
        assert all(w.link is None for w in plain.workers())  # none registered a link
        grads, log, seen = train_and_look(plain, 3, "1f1b")
    assert {how for st in seen.values() for how in st.values()} == {"zeromq"}
    for name in linked:
        np.testing.assert_array_equal(grads[name], linked[name])  # the same bits
    ours, theirs = by_hook(log), by_hook(linked_log)  # (the order across workers may vary)
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert len(ours[key]) == len(theirs[key])
        for a, b in zip(ours[key], theirs[key]):  # micro-batch by micro-batch
            np.testing.assert_array_equal(a, b)


def test_a_neighbour_killed_mid_step_ends_the_step_with_worker_lost():
    with local_cluster(workers=3, timeout=60) as cluster:
        remote = cluster.deploy(
            nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), Sleepy(), nn.Linear(4, 2)),
            stages=3, split_points=[1, 2], chunks=2)
        assert {how for st in neighbours(cluster).values() for how in st.values()} == {
            "local"}
        stages = {stage: wid for stage, wid, _ in remote.workers()}
        workers = {w.id: w for w in cluster.workers()}
        kill_later(workers[stages[2]].pid, 0.5)
        with pytest.raises(WorkerLost, match="holding stage 2"):
            remote.train_step(torch.ones(4, 4), torch.tensor([0, 1, 0, 1]),
                              nn.functional.cross_entropy)
        started = time.monotonic()
        for stage in (0, 1):  # the survivors no longer wait for it
            with Peer(workers[stages[stage]].address) as peer:
                assert peer.request("status", timeout=20)["result"]["id"] == stages[stage]
        assert time.monotonic() - started < 10
        remote.close()


def test_the_link_directory_goes_with_the_worker():
    with local_cluster(workers=1, timeout=60) as cluster:
        (w,) = cluster.workers()
        assert w.link and os.path.exists(w.link)
        assert os.stat(os.path.dirname(w.link)).st_mode & 0o777 == 0o700
    assert not os.path.exists(os.path.dirname(w.link))  # removed on SIGTERM


def test_with_keys_the_neighbours_link_too_and_train_exactly():
    want = one_process([])
    with local_cluster(workers=2, secure=True, timeout=60) as cluster:
        assert all(w.link for w in cluster.workers())
        remote = cluster.deploy(make_net(), stages=2, chunks=4, schedule="1f1b")
        try:
            x, y = data()
            remote.train_step(x, y, nn.functional.cross_entropy)
            got = {n: p.grad.numpy() for n, p in remote.named_parameters()}
        finally:
            remote.close()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-7)


def test_a_cluster_closed_with_linked_stages_loaded_says_nothing_of_its_links(capfd):
    """Closing a cluster whose stages are still loaded (a script that ends or fails in
    its with block) stops each worker, which closes its neighbours' links: an ordinary
    end, not a warning on the user's terminal."""
    with local_cluster(workers=3, timeout=60) as cluster:
        remote = cluster.deploy(make_net(), stages=3, chunks=4, schedule="1f1b")
        x, y = data()
        remote.train_step(x, y, nn.functional.cross_entropy)
        procs = list(cluster._processes)
    for proc in procs:  # every line the workers wrote has been relayed
        relay = getattr(proc, "stderr_relay", None)
        if relay is not None:
            relay.join(10)
    said = capfd.readouterr().err
    assert "link" not in said, said


def test_what_is_off_on_a_link_closes_it_and_the_worker_goes_on(cluster):
    """A same-user process that connects to a worker's link and sends junk, a hello that
    is off, or a malformed message after a good hello: the worker closes that link (or
    refuses that message) and goes on serving."""
    import socket

    from disthook import wire
    from workers.links import Link

    target = cluster.workers()[0]

    def closed_by_worker(sock) -> bool:
        sock.settimeout(10)
        try:
            return sock.recv(1) == b""
        except ConnectionResetError:
            return True

    for junk in (b"GET / HTTP/1.1\r\n\r\n" + b"\xff" * 64,  # a length way over the caps
                 None):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(target.link)
        if junk:
            sock.sendall(junk)
        else:  # a well-framed first message that is not a hello
            Link(sock, b"x>next>1").send_multipart([b"not a hello"])
            sock.setblocking(True)
        assert closed_by_worker(sock)
        sock.close()
    # a good hello, then a message the wire refuses: refused alone, the link stays
    link = Link.dial(target.link, b"intruder>next>1")
    link.send_multipart(wire.encode("status", {}) + [b"extra frame"])
    link.send_multipart([b"\x93not msgpack"])
    link.sock.setblocking(True)
    link.sock.settimeout(10)
    answers = []
    while len(answers) < 2:
        ready = link.read(1)  # (blocking: one at a time)
        answers += [wire.decode(m) for m in ready]
    assert all(a.type == "error" for a in answers)
    link.close()
    # the worker still trains over its links
    got, _, seen = train_and_look(cluster, 2, "1f1b")
    assert {how for st in seen.values() for how in st.values()} == {"local"}
    want = one_process([])
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-7)


def test_a_stage_unloaded_closes_its_links_and_a_new_deploy_makes_new_ones(cluster):
    from clusters import wait_until

    def links_in():
        return sorted(i for s in worker_statuses(cluster).values() for i in s["links"]["in"])

    # (the links of what the tests before deployed on this shared cluster close as it closes,
    # a moment after: under load one was still held here)
    wait_until(lambda: links_in() == [], 30)
    for _ in range(2):
        remote = cluster.deploy(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4),
                                              nn.Linear(4, 2)), stages=3)
        held = links_in()
        assert len(held) == 4, held  # stage 0 -> 1, 1 -> 0, 1 -> 2, 2 -> 1
        remote(torch.ones(2, 4)).sum().backward()
        remote.close()
        wait_until(lambda: links_in() == [], 30)
