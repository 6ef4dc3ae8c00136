"""A worker (or a coordinator) that answers a request with a message the client cannot read:
an off-schema field, an older protocol version, an array table that is not one. The client
dropped such an answer and waited for the request's deadline, then said that no answer had
come (a lying or mismatched server held each call for its whole timeout, 30 s by default).
Now an answer whose header names a waiting request fails that request at once, saying who
sent what and what to check; one that names no request is still left out alone."""
import time

import msgpack
import pytest
from test_answers_ahead import FakeWorker

from disthook import wire
from disthook.distributed import RemoteError
from disthook.distributed.channel import _Hub
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 20.0  # the requests' deadline: an answer dropped would cost this much


def _header(req: int, version: int = wire.PROTOCOL_VERSION, fields=None, table=()) -> bytes:
    return msgpack.packb({"v": version, "t": "ok", "r": req, "c": None, "a": list(table),
                          "f": {"result": 1} if fields is None else fields})


OFF = {  # what a lying worker answers a request ``req`` with: its frames, and the error's words
    "an unknown field": (lambda req: [_header(req, fields={"result": 1, "zzz": 2})],
                         r"unexpected field\(s\) \['zzz'\]"),
    "an older protocol": (lambda req: [_header(req, version=wire.PROTOCOL_VERSION - 1)],
                          f"protocol version {wire.PROTOCOL_VERSION - 1}, expected"),
    "a bad array table": (lambda req: [_header(req, table=[{"dtype": "float32"}],
                                               fields={"result": msgpack.ExtType(
                                                   wire.ARRAY_EXT, bytes(4))}), b"x" * 8],
                          "descriptor must be"),
    "a bad answer in a batch": (lambda req: wire.encode_batch([
        wire.encode("ok", {"result": "a late answer"}, req=0),
        [_header(req, fields={"zzz": 2})]]), r"unexpected field\(s\) \['zzz'\]"),
}


@pytest.mark.parametrize("what", list(OFF))
def test_a_worker_answer_the_client_cannot_read_fails_its_request_at_once(what):
    frames, says = OFF[what]
    worker = FakeWorker()
    hub = _Hub("m", [worker.address], timeout=TIMEOUT)
    hub.holders[worker.address] = ("w9", 0)

    def lie(client, msg):
        worker.sock.send_multipart([client, *frames(msg.req)])

    try:
        thread = worker.serve(lie)
        start = time.monotonic()
        with pytest.raises(RemoteError, match=f"WireError: worker w9 at {worker.address} "
                                              f"answered this request with a message this "
                                              f"client cannot read .*{says}") as caught:
            hub.request(worker.address, "status", {})
        assert time.monotonic() - start < TIMEOUT / 4, "the request waited for its deadline"
        assert "run the same disthook version" in str(caught.value)
        thread.join(10)
        assert worker.failure is None
    finally:
        hub.close(unload=False)


def test_an_unreadable_message_that_names_no_request_is_left_out_and_the_answer_taken():
    worker = FakeWorker()
    hub = _Hub("m", [worker.address], timeout=TIMEOUT)

    def noise_then_answer(client, msg):
        worker.sock.send_multipart([client, _header(0, fields={"zzz": 1})])
        worker.sock.send_multipart([client, _header(msg.req + 1000, fields={"zzz": 1})])
        worker.send(client, "ok", {"result": "fine"}, msg.req)

    try:
        worker.serve(noise_then_answer)
        assert hub.request(worker.address, "status", {})["result"] == "fine"
    finally:
        hub.close(unload=False)


def test_a_coordinator_answer_the_client_cannot_read_fails_its_request_at_once():
    fake = FakeWorker()  # (a ROUTER like any: here it plays the coordinator)

    def lie(client, msg):
        fake.sock.send_multipart([client, _header(msg.req, fields={"zzz": 2})])

    with Peer(fake.address, name=f"the coordinator at {fake.address}") as peer:
        fake.serve(lie)
        start = time.monotonic()
        with pytest.raises(RemoteError, match="WireError: the coordinator at .* answered this "
                                              "request with a message this client cannot "
                                              r"read .*unexpected field\(s\) \['zzz'\]"):
            peer.request("status", timeout=TIMEOUT)
        assert time.monotonic() - start < TIMEOUT / 4
