"""A message whose array table is refused (a shape its frame does not hold, an array past
the caps) is refused under its own request id, as a message with an off field is: the
table comes before the fields (as ``encode`` writes it), and its refusal went out under
request 0, so the request waited for its whole deadline."""
import msgpack
import numpy as np
import pytest

from disthook import wire


def frames(shape: list, data: np.ndarray) -> list:
    head = msgpack.packb({"v": wire.PROTOCOL_VERSION, "t": "fetch", "r": 4242, "c": None,
                          "a": [[data.dtype.str, shape]],
                          "f": {"model": "m", "values": [], "x": msgpack.ExtType(
                              wire.ARRAY_EXT, (0).to_bytes(4, "little"))}})
    return [head, data.tobytes()]


@pytest.mark.parametrize("shape, says", [
    ([1 << 20, 1 << 20], "bytes exceeds"),          # past the caps
    ([3], "frame has 16 bytes"),                    # a shape its frame does not hold
    ([1, 2, 1, 1, 1, 1, 1, 1, 1, 2], "shape must be"),  # too many dimensions
])
def test_a_refused_array_table_answers_its_request(shape, says):
    with pytest.raises(wire.WireError, match=says) as refused:
        wire.decode(frames(shape, np.zeros(4, np.float32)))
    assert refused.value.req == 4242
