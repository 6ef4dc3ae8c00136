"""The service loop outlives any message: whatever decoding raises becomes an error reply
(a peer that breaks the protocol is answered, never fatal)."""
import pytest

from disthook import wire
from disthook.service.loop import Service


def test_a_message_the_codec_chokes_on_gets_an_error_reply(monkeypatch):
    service = Service("tcp://127.0.0.1:0")
    try:
        replies = []
        monkeypatch.setattr(service, "reply", lambda sock, to, req, kind, fields, ctx=None:
                            replies.append((to, kind, fields["kind"], fields["message"])))

        def choke(frames):  # as the header check did on a map with int and str keys
            raise TypeError("'<' not supported between instances of 'str' and 'int'")

        monkeypatch.setattr(wire, "decode", choke)
        service.handle(b"peer", [b"junk"], service.router)
        assert replies == [(b"peer", "error", "WireError", "malformed message: TypeError: "
                            "'<' not supported between instances of 'str' and 'int'")]
    finally:
        service.close()


@pytest.mark.parametrize("frames", [[b"\xc1"], [b"\x82\x01\xa1x\xa2zz\x01"]])  # an int header key
def test_real_bad_frames_get_error_replies(frames):
    service = Service("tcp://127.0.0.1:0")
    try:
        replies = []
        service.reply = lambda sock, to, req, kind, fields, ctx=None: replies.append(kind)
        service.handle(b"peer", frames, service.router)
        assert replies == ["error"]
    finally:
        service.close()
