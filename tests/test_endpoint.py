"""One endpoint parser and one default port (disthook.service.endpoint), and the places
that read an address through it: bad addresses fail before any socket, with the form."""
import re
import socket
import time
from pathlib import Path

import pytest
import zmq

from deploy.roles import coordinator_role, worker_role
from disthook.distributed import cluster as cluster_module
from disthook.distributed import connect
from disthook.distributed.cluster import CoordinatorUnreachable
from disthook.service.endpoint import (
    DEFAULT_COORDINATOR,
    DEFAULT_PORT,
    Endpoint,
    EndpointInUse,
    check_free,
    parse,
)
from disthook.service.loop import bind_endpoint
from disthook.service.rpc import DEFAULT_TIMEOUT, Peer
from disthook.service.security import is_loopback

ROOT = Path(__file__).resolve().parents[1]
FORM = re.escape("must look like tcp://HOST:PORT (e.g. tcp://127.0.0.1:5555) or ipc://PATH")


@pytest.mark.parametrize("address, endpoint", [
    ("tcp://127.0.0.1:5555", Endpoint("tcp", "127.0.0.1", 5555)),
    ("127.0.0.1:5555", Endpoint("tcp", "127.0.0.1", 5555)),
    ("node7:6000", Endpoint("tcp", "node7", 6000)),
    ("tcp://[::1]:80", Endpoint("tcp", "[::1]", 80)),
    ("tcp://*:*", Endpoint("tcp", "*", 0)),
    ("ipc:///tmp/dh.sock", Endpoint("ipc", path="/tmp/dh.sock")),
])
def test_the_forms_an_address_may_take(address, endpoint):
    assert parse(address) == endpoint
    assert parse(str(endpoint)) == endpoint  # str() is the full form, read back the same


@pytest.mark.parametrize("bad", ["http://x:1", "tcp://h", "127.0.0.1", "", "inproc://x",
                                 "tcp://:5", "tcp://h:99999", "udp://h:1", "tcp://a b:1", 5555])
def test_anything_else_is_a_value_error_showing_the_form(bad):
    with pytest.raises(ValueError, match=FORM):
        parse(bad)


def test_one_default_port():
    assert DEFAULT_COORDINATOR == f"tcp://127.0.0.1:{DEFAULT_PORT}"
    sources = [p for d in ("disthook", "coordinator", "deploy", "workers")
               for p in (ROOT / d).rglob("*.py") if p.name != "endpoint.py"]
    assert [str(p) for p in sources if str(DEFAULT_PORT) in p.read_text()] == []


def test_connect_refuses_a_bad_address_before_any_socket(monkeypatch):
    def no_socket(*args, **kwargs):
        raise AssertionError("a socket was made")

    monkeypatch.setattr(cluster_module, "dial_once", no_socket)
    monkeypatch.setattr(cluster_module, "Cluster", no_socket)
    with pytest.raises(ValueError, match="connect\\(\\)'s address " + FORM + ", got 'http://x:1'"):
        connect("http://x:1")
    with pytest.raises(ValueError, match="connect\\(\\) needs timeout > 0 seconds, got 0"):
        connect("127.0.0.1:5555", timeout=0)


def test_connect_to_nothing_says_what_to_do_at_once():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(CoordinatorUnreachable) as info:
        connect(f"127.0.0.1:{port}")  # HOST:PORT is tcp
    # at once: after the grace for a coordinator still starting (3 s), not the timeout (30 s)
    assert time.monotonic() - started < DEFAULT_TIMEOUT / 2
    assert str(info.value) == (
        f"no coordinator at tcp://127.0.0.1:{port}: nothing listens there (connection refused); "
        f"start one with `disthook launch --bind tcp://127.0.0.1:{port}`, or check the address")
    # the same path, its grace cut short by a shorter timeout (what is checked is the message)
    with pytest.raises(CoordinatorUnreachable, match="the host 'no-such-host.invalid' is "
                                                     "unknown; check the address"):
        connect("tcp://no-such-host.invalid:5555", timeout=0.3)


def test_a_listener_that_never_answers_is_waited_for_and_the_message_names_the_wait():
    with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as mute:
        port = mute.bind_to_random_port("tcp://127.0.0.1")
        address = f"tcp://127.0.0.1:{port}"
        with pytest.raises(CoordinatorUnreachable) as info:
            connect(address, timeout=0.3)
        mute.setsockopt(zmq.LINGER, 0)
    assert str(info.value) == (
        f"no coordinator at {address}: something listens there but no answer to a status "
        f"request within 0.3 s; check the address, start one with `disthook launch --bind "
        f"{address}`, or, if the cluster runs with keys, pass keys=DIR")
    assert info.value.advice("--keys DIR").endswith("pass --keys DIR")


def test_peers_roles_and_loopback_read_addresses_the_same_way():
    with Peer("127.0.0.1:9") as peer:
        assert peer.address == "tcp://127.0.0.1:9"
    with pytest.raises(ValueError, match=FORM):
        Peer("http://127.0.0.1:9")
    assert coordinator_role("0.0.0.0:6000").args == ("--bind", "tcp://0.0.0.0:6000")
    assert worker_role("h:6000").args[:4] == ("--coordinator", "tcp://h:6000",
                                              "--bind", "tcp://0.0.0.0:0")
    assert is_loopback("127.0.0.1:1") and not is_loopback("10.0.0.1:1")


def test_a_busy_port_is_named_with_what_to_do():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        address = f"tcp://127.0.0.1:{held.getsockname()[1]}"
        with pytest.raises(EndpointInUse) as info:
            check_free(address)
        assert str(info.value) == (
            f"{address} is in use: another process listens there (a cluster already "
            "running?); pass another port (0 picks a free one), or stop what holds it")
        assert "pick another port with --bind (tcp://127.0.0.1:0 picks a free one)" in (
            info.value.advice("--bind"))
        with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as sock:
            sock.setsockopt(zmq.LINGER, 0)
            with pytest.raises(EndpointInUse, match="is in use"):
                bind_endpoint(sock, address)
            assert bind_endpoint(sock, "127.0.0.1:0").startswith("tcp://127.0.0.1:")
    check_free(address)  # free again
    check_free("tcp://127.0.0.1:0")  # any free port: nothing to check
