"""Connections from peers that hold no authorized key, by the hundred: a cluster with keys
refuses each, and its log says so in a few lines (at most 10 a minute for refused handshakes
and 10 for refused keys, then how many were left out), not a line each."""
import socket
import time

import pytest
import zmq

from disthook.distributed import local_cluster
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(180)


def test_hundreds_of_refused_connections_take_a_few_lines_of_the_log(tmp_path):
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err, local_cluster(1, secure=True, stderr=err,
                                              log_level="INFO") as cluster:
        host, port = cluster.workers()[0].address.removeprefix("tcp://").rsplit(":", 1)
        for _ in range(150):  # no keys: a greeting of another mechanism, closed at once
            with socket.create_connection((host, int(port))) as s:
                s.sendall(b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00NULL" + b"\x00" * 16
                          + b"\x00" * 32)
                s.recv(64)
        ctx = zmq.Context()
        try:
            for i in range(150):  # fresh keys of its own, each connection
                public, secret = zmq.curve_keypair()
                sock = ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.curve_serverkey = cluster.keys.server_public
                sock.curve_publickey, sock.curve_secretkey = public, secret
                sock.connect(cluster.address)
                try:  # never wait on it: once its handshake is refused, the socket may
                    sock.send(b"x", zmq.NOBLOCK)  # have no peer left to queue for
                except zmq.Again:
                    pass
                # the first ones stay until their handshake has surely been refused (a
                # connection closed first may end before the coordinator's key check)
                time.sleep(0.25 if i < 15 else 0.01)
                sock.close()
        finally:
            ctx.destroy(linger=0)
        time.sleep(1)
        with Peer(cluster.workers()[0].address, keys=cluster.keys) as peer:
            assert peer.request("status", timeout=10)["result"]  # still serving
    text = log.read_text()
    refused = text.count("worker w1: refused a connection: ")  # the greetings without keys
    assert 1 <= refused <= 10, refused
    keys = text.count("coordinator: refused a connection from an unauthorized key")
    assert 1 <= keys <= 10, keys  # (the first 15 waited for their key to be refused)
    # a connection closed before its key check ends as a failed handshake instead: how many
    # do depends on timing, but never more than the allowance
    assert text.count("coordinator: refused a connection: ") <= 10
    assert "further warnings about this peer are left out" in text
