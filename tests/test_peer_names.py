"""How the logs and status name workers and clients: ids a launch numbers, clients by
number (and key), never by the bytes of a connection's identity."""
import logging

from deploy.roles import local_worker_id, worker_role
from disthook.service.loop import PeerLog
from workers.peers import Peers, neighbour_identity

CLIENT = b"\x00k\x8bE\x12"  # ZeroMQ's own identities are bytes like these
OTHER = b"client-4711-0123456789ab"


def test_a_launch_names_its_workers_by_number_and_a_role_takes_a_new_name():
    assert [local_worker_id(n) for n in (1, 2, 10)] == ["w1", "w2", "w10"]
    role = worker_role("tcp://127.0.0.1:5555", worker_id="old")
    named = role.named(local_worker_id(3))
    assert named.args.count("--id") == 1
    assert named.args[named.args.index("--id") + 1] == "w3"
    assert named.args[:2] == role.args[:2]  # the rest as it was
    fresh = worker_role("tcp://127.0.0.1:5555").named("w1")
    assert fresh.args[-2:] == ("--id", "w1")


def test_without_keys_clients_are_numbered_and_neighbours_named_by_worker_id():
    peers = Peers(None)
    neighbour = neighbour_identity("w2", "next")
    assert peers.arrived(3, CLIENT, None) is False
    assert peers.arrived(4, neighbour, None) is True
    assert peers.arrived(5, OTHER, None) is False
    assert peers.who(CLIENT) == "client 1"
    assert peers.who(neighbour) == "worker w2"
    assert peers.who(OTHER) == "client 2"
    assert peers.who(CLIENT) == peers.label(CLIENT)  # the logs name it as status does
    for identity in (CLIENT, OTHER):
        assert identity.hex()[:8] not in peers.who(identity)
    peers.forget(CLIENT)
    assert peers.who(CLIENT) == "client 3"  # a new connection later: a new number


def test_a_peer_log_names_peers_as_its_service_does(caplog):
    clock = [0.0]
    log = PeerLog(logging.getLogger("test.names"), burst=1, window_s=10.0,
                  clock=lambda: clock[0], name=lambda peer: "client 7")
    with caplog.at_level(logging.WARNING, logger="test.names"):
        for _ in range(3):
            log.warning(CLIENT, "bad message from %s", "client 7")
        log.forget(CLIENT)
    assert "(2 more such warnings about client 7 left out)" in caplog.text
    assert repr(CLIENT) not in caplog.text


def test_a_service_names_a_peer_it_knows_nothing_about_by_number_and_itself_by_role():
    from disthook.service.loop import Service

    service = Service("tcp://127.0.0.1:0", name="w2")
    try:
        assert [service.peer_name(p) for p in (CLIENT, OTHER, CLIENT)] == [
            "peer 1", "peer 2", "peer 1"]
        assert service.label == "service w2"
    finally:
        service.close()
