"""The keys under which a call's answer form is learnt (disthook.distributed.async_calls):
equal for calls whose arguments have the same forms, different otherwise, and made from a
kept value's metadata without fetching it."""
import numpy as np
import pytest

import disthook as torch
from disthook.distributed import remote_values
from disthook.distributed.async_calls import call_key


def test_keys_are_the_arguments_forms():
    a, b = torch.zeros(2, 3), torch.ones(2, 3)
    assert call_key("h.0", True, args=([a], {})) == call_key("h.0", True, args=([b], {}))
    others = [torch.zeros(2, 4), torch.zeros(2, 3, dtype=torch.float64),
              torch.zeros(2, 3, requires_grad=True)]
    for other in others:
        assert call_key("h.0", args=([a], {})) != call_key("h.0", args=([other], {}))
    assert call_key("h.0", args=([a], {})) != call_key("h.1", args=([a], {}))
    assert call_key(args=((1, 2),)) != call_key(args=([1, 2],))
    assert call_key(args=(np.dtype("float32"),)) != call_key(args=(np.dtype("float64"),))
    assert call_key(args=({"k": 1},)) != call_key(args=({"k": 2},))


class _Hub:
    def drop_values(self, addresses, vid):
        pass

    def settle(self):
        pytest.fail("a call's key fetched a kept value")


class _Model:
    _hub = _Hub()


def test_a_kept_values_key_comes_from_its_metadata():
    def kept(strides):
        ref = remote_values._Ref(_Model(), "tcp://w0", "ctx.0")
        meta = remote_values.meta_array(np.dtype("float32"), (2, 3), strides)
        return remote_values.make_remote(ref, meta, None, 0)

    # a tensor sent by value arrives C-contiguous: as a kept value so laid out
    assert call_key(args=([kept((12, 4))], {})) == call_key(args=([torch.zeros(2, 3)], {}))
    # a transposed one gives its outputs and gradients in another layout
    assert call_key(args=([kept((4, 8))], {})) != call_key(args=([torch.zeros(2, 3)], {}))
