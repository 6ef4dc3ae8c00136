"""Crafted data on the wire from a client that holds an authorized key of a cluster with
keys: each off message gets a refusal that answers its own request (the header's request
id), from the coordinator and from a worker, and the model computes as before."""
import msgpack
import numpy as np
import pytest
import zmq

import disthook as torch
from disthook import nn, wire
from disthook.distributed import RemoteError, deployment_of, local_cluster
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def served():
    with local_cluster(workers=1, secure=True, allow_code=False,
                       allow_model_modules=()) as cluster:
        torch.manual_seed(0)
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="victim")
        add_client(cluster.keys.directory, "mallory")
        yield cluster, remote, Keys.load(cluster.keys.directory, "mallory")
        remote.close()


def raw(msg_type: str, fields: dict, req: int, arrays=()) -> list:
    """A message as a hostile sender writes it: the project's framing, no schema check."""
    head = msgpack.packb({"v": wire.PROTOCOL_VERSION, "t": msg_type, "r": req, "c": None,
                          "a": [[a.dtype.str, list(a.shape)] for a in arrays],
                          "f": fields}, use_bin_type=True)
    return [head, *(a.tobytes() for a in arrays)]


def answer(sock, req: int, seconds: float = 10.0):
    """The reply to request ``req`` (None if none came within ``seconds``)."""
    while sock.poll(int(seconds * 1000)):
        reply = wire.decode(sock.recv_multipart())
        if reply.req == req:
            return reply
    return None


@pytest.mark.parametrize("where", ["coordinator", "worker"])
@pytest.mark.parametrize("msg_type, fields", [
    ("lookup", {"name": 5}),                                  # a field of the wrong type
    ("status", {"model": "m", "extra": 1}),                   # a field it does not have
    ("forward", {"model": "m", "stage": "0", "inputs": [], "grad_enabled": True,
                 "reply_to": "00"}),
])
def test_an_off_schema_request_is_refused_under_its_own_request_id(served, where, msg_type,
                                                                   fields):
    cluster, remote, mallory = served
    address = cluster.address if where == "coordinator" else cluster.workers()[0].address
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    mallory.dial(sock)
    sock.connect(address)
    try:
        sock.send_multipart(raw(msg_type, fields, req=4242))
        reply = answer(sock, 4242)
        assert reply is not None, "the refusal did not answer the request"
        assert reply.type == "error" and reply["kind"] == "WireError"
    finally:
        sock.close()
    x = torch.randn(4, 3)
    np.testing.assert_array_equal(remote(x).detach().numpy(),
                                  deployment_of(remote).to_local()(x).detach().numpy())


def test_send_value_to_an_address_no_socket_can_dial_says_so(served):
    """(It answered ZeroMQ's ``ZMQError: Invalid argument``, and counted the address among
    the 64 the client may name.)"""
    cluster, remote, mallory = served
    refused = pytest.raises(RemoteError, match="ValueError: send_value's address must look "
                                               "like tcp://HOST:PORT")
    with Peer(cluster.workers()[0].address, keys=mallory) as peer, refused:
        peer.request("send_value", {"model": deployment_of(remote)._model_id,
                                    "values": [], "to": "nowhere"}, timeout=30)
