"""What a client with an authorized key can write into the servers' logs and an admin's
``disthook status``.

- Refused messages are logged at most 10 lines a minute per key: a client that opened a
  fresh connection for each refused message wrote 10 lines per connection (30 connections:
  30 lines on the worker and 30 on the coordinator).
- A model id of the client's choosing is shown as one line of printable text: an id with a
  newline wrote a line of its own into the worker's log (``12:00:00 worker w1: ...``), and
  one with a terminal's escape sequence cleared the screen of whoever ran ``disthook
  status``."""
import io

import msgpack
import pytest
import zmq

from disthook import nn, wire
from disthook.cli import _print_status
from disthook.distributed import local_cluster
from disthook.distributed.spec import module_spec
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(180)

FORGED = "m\n12:00:00 worker w1: all clients authorized\x1b[2J"


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    path = tmp_path_factory.mktemp("log") / "cluster.log"
    with open(path, "w") as log, local_cluster(workers=1, secure=True, stderr=log,
                                               log_level="INFO") as cluster:
        add_client(cluster.keys.directory, "mallory")
        yield cluster, Keys.load(cluster.keys.directory, "mallory"), path


def refused(address: str, keys: Keys) -> None:
    """A ``status`` whose field is off, sent on a fresh connection; its refusal awaited."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    keys.dial(sock)
    sock.connect(address)
    try:
        sock.send_multipart([msgpack.packb({"v": wire.PROTOCOL_VERSION, "t": "status",
                                            "r": 7, "c": None, "a": [], "f": {"model": 5}})])
        assert sock.poll(20_000), "no refusal came"
        reply = wire.decode(sock.recv_multipart())
        assert reply.type == "error" and reply["kind"] == "WireError"
    finally:
        sock.close()


def test_a_keys_refused_messages_take_one_allowance_of_lines(logged):
    cluster, mallory, path = logged
    (worker,) = cluster.workers()
    for address in (worker.address, cluster.address):
        for _ in range(30):  # a fresh connection each time
            refused(address, mallory)
    lines = path.read_text().splitlines()
    on_worker = [line for line in lines if "worker w1: refused a message from" in line]
    on_coordinator = [line for line in lines if "coordinator: malformed message from" in line]
    assert len(on_worker) == 10 and len(on_coordinator) == 10, (on_worker, on_coordinator)
    assert "further warnings about this peer are left out" in on_worker[-1]


def test_a_clients_model_id_is_one_printable_line_in_the_log_and_status(logged):
    cluster, mallory, path = logged
    (worker,) = cluster.workers()
    with Peer(worker.address, keys=mallory) as peer:
        peer.request("load_stage", {"model": FORGED, "stage": 0,
                                    "spec": module_spec(nn.Sequential(nn.Linear(2, 2)))},
                     timeout=30)
        status = cluster.full_status()
        peer.send("unload", {"model": FORGED})  # (answered by none)
    text = path.read_text()
    assert "\x1b" not in text
    assert not any(line.startswith("12:00:00 worker w1") for line in text.splitlines())
    assert "stage 0 of m\\n12:00:00 worker w1: all clients authorized\\x1b[2J loaded" in text
    out = io.StringIO()
    _print_status(status, stream=out)
    shown = out.getvalue()
    assert "\x1b" not in shown and len(shown.splitlines()) == 3  # coordinator, header, stage
    assert "m\\n12:00:00 worker w1: all clients authorized\\x1b[2J" in shown
