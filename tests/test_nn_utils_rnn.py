"""torch.nn.utils.rnn: packing and padding variable-length batches, gradients through both,
and RNN / LSTM / GRU over packed input, against torch with the same weights."""
from __future__ import annotations

import numpy as np
import pytest

import disthook
from disthook.nn.utils import rnn

RNG = np.random.default_rng(0)
SEQS = [RNG.standard_normal((n, 3)).astype(np.float32) for n in (2, 5, 3)]


def _libs():
    torch = pytest.importorskip("torch")
    return [(disthook, rnn), (torch, torch.nn.utils.rnn)]


def _np(x):
    return x.detach().numpy()


def test_pack_and_pad_round_trip_without_torch():
    seqs = [disthook.tensor(s) for s in SEQS]
    padded = rnn.pad_sequence(seqs, batch_first=True)
    assert padded.shape == (3, 5, 3)
    packed = rnn.pack_padded_sequence(padded, [2, 5, 3], batch_first=True, enforce_sorted=False)
    assert packed.batch_sizes.tolist() == [3, 3, 2, 1, 1]
    assert packed.sorted_indices.tolist() == [1, 2, 0]
    back, lengths = rnn.pad_packed_sequence(packed, batch_first=True, total_length=6)
    assert lengths.tolist() == [2, 5, 3] and back.shape == (3, 6, 3)
    np.testing.assert_array_equal(_np(back[:, :5]), _np(padded))
    for got, want in zip(rnn.unpack_sequence(packed), SEQS):
        np.testing.assert_array_equal(_np(got), want)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_packing_matches_torch_values_and_gradients(batch_first, padding_side):
    results = []
    for lib, R in _libs():
        seqs = [lib.tensor(s, requires_grad=True) for s in SEQS]
        padded = R.pad_sequence(seqs, batch_first=batch_first, padding_value=-1.0,
                                padding_side=padding_side)
        right = R.pad_sequence(seqs, batch_first=batch_first)
        packed = R.pack_padded_sequence(right, lib.tensor([2, 5, 3]), batch_first=batch_first,
                                        enforce_sorted=False)
        out, lengths = R.pad_packed_sequence(packed, batch_first=batch_first,
                                             padding_value=7.0)
        (out * out).sum().backward()
        also = R.pack_sequence([s.detach() for s in seqs], enforce_sorted=False)
        results.append([_np(padded), _np(packed.data), packed.batch_sizes.tolist(),
                        _np(out), lengths.tolist(), [_np(s.grad) for s in seqs],
                        _np(also.data)])
    ours, theirs = results
    for a, b in zip(ours, theirs):
        if isinstance(a, list) and a and isinstance(a[0], np.ndarray):
            for x, y in zip(a, b):
                np.testing.assert_allclose(x, y, rtol=1e-6)
        elif isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        else:
            assert a == b


@pytest.mark.parametrize("mode", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_recurrent_layers_over_packed_input_match_torch(mode, batch_first):
    results = []
    state = None
    h0_values = RNG.standard_normal((4, 3, 4)).astype(np.float32)
    for lib, R in _libs():
        lib.manual_seed(0)
        layer = getattr(lib.nn, mode)(3, 4, num_layers=2, batch_first=batch_first,
                                      bidirectional=True)
        if state is None:
            state = {k: _np(v).copy() for k, v in layer.state_dict().items()}
        layer.load_state_dict({k: lib.tensor(v) for k, v in state.items()})
        seqs = [lib.tensor(s, requires_grad=True) for s in SEQS]
        packed = R.pack_sequence(seqs, enforce_sorted=False)
        h0 = lib.tensor(h0_values)
        hx = (h0, h0 * 0.5) if mode == "LSTM" else h0
        out, final = layer(packed, hx)
        padded, _ = R.pad_packed_sequence(out, batch_first=batch_first)
        h = final[0] if mode == "LSTM" else final
        (padded.sum() + (h * h).sum()).backward()
        results.append([_np(out.data), _np(padded), _np(h), [_np(s.grad) for s in seqs]])
    (o1, p1, h1, g1), (o2, p2, h2, g2) = results
    np.testing.assert_allclose(o1, o2, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(p1, p2, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h1, h2, rtol=1e-4, atol=1e-5)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("lib_name", ["disthook", "torch"])
def test_errors_are_torchs(lib_name):
    lib = pytest.importorskip(lib_name)
    R = lib.nn.utils.rnn
    with pytest.raises(RuntimeError, match="`lengths` array must be sorted in decreasing order"):
        R.pack_padded_sequence(lib.ones(3, 2), [1, 3])
    with pytest.raises(RuntimeError, match="Length of all samples has to be greater than 0"):
        R.pack_padded_sequence(lib.ones(3, 2), [0, 3], enforce_sorted=False)
    packed = R.pack_padded_sequence(lib.ones(3, 2), [3, 1])
    with pytest.raises(ValueError, match="Expected total_length to be at least the length of "
                       "the longest sequence in input, but got total_length=2 and max "
                       "sequence length being 3"):
        R.pad_packed_sequence(packed, total_length=2)
