"""``torch.nn.utils.rnn``: variable-length sequences packed for the recurrent layers.

A ``PackedSequence`` holds the time steps of a batch of sequences, sorted longest first,
one after another: ``data`` is ``(sum(lengths), *)`` and ``batch_sizes[t]`` says how many
sequences are still running at step ``t``. Packing and padding are built from indexing and
concatenation, so gradients flow through both (padded positions get none). ``RNN``, ``LSTM``
and ``GRU`` accept one (see ``run_packed``).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from disthook.tensor import Tensor, cat, full, stack, tensor

__all__ = ["PackedSequence", "invert_permutation", "pack_padded_sequence", "pack_sequence",
           "pad_packed_sequence", "pad_sequence", "unpack_sequence", "unpad_sequence"]


class PackedSequence(namedtuple("PackedSequence_", ["data", "batch_sizes", "sorted_indices",
                                                    "unsorted_indices"])):
    """What ``pack_padded_sequence`` and ``pack_sequence`` give; made by them, not by hand."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None and sorted_indices is not None:
            unsorted_indices = invert_permutation(sorted_indices)
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs) -> PackedSequence:
        """The same sequences with ``data`` converted (dtype; the device is always the CPU)."""
        data = self.data.to(*args, **kwargs)
        return self if data is self.data else type(self)(data, self.batch_sizes,
                                                         self.sorted_indices,
                                                         self.unsorted_indices)

    def cpu(self) -> PackedSequence:
        return self

    def float(self) -> PackedSequence:
        return self.to(dtype=self.data.new_zeros(()).float().dtype)

    def double(self) -> PackedSequence:
        return self.to(dtype=self.data.new_zeros(()).double().dtype)

    @property
    def is_cuda(self) -> bool:
        return False

    def is_pinned(self) -> bool:
        return False


def invert_permutation(permutation: Tensor | None) -> Tensor | None:
    """The permutation that undoes ``permutation`` (None stays None)."""
    if permutation is None:
        return None
    inverse = np.empty_like(permutation.numpy())
    inverse[permutation.numpy()] = np.arange(len(inverse))
    return tensor(inverse)


def _lengths(lengths) -> np.ndarray:
    values = lengths.numpy() if isinstance(lengths, Tensor) else np.asarray(lengths)
    return values.astype(np.int64).reshape(-1)


def pack_padded_sequence(input: Tensor, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded batch ``(T, B, *)`` (``(B, T, *)`` when ``batch_first``) whose sequence
    ``b`` is ``lengths[b]`` long."""
    lengths = _lengths(lengths)
    if enforce_sorted:
        if np.any(np.diff(lengths) > 0):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when "
                               "`enforce_sorted` is True. You can pass `enforce_sorted=False` "
                               "to pack_padded_sequence and/or pack_sequence to sidestep this "
                               "requirement if you do not need ONNX exportability.")
        sorted_indices = None
        order = np.arange(len(lengths))
    else:
        order = np.argsort(-lengths, kind="stable")
        sorted_indices = tensor(order)
    if len(lengths) and lengths.min() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an "
                           "element in 'lengths' that is <= 0")
    steps = input if not batch_first else input.transpose(0, 1)
    if len(lengths) != steps.shape[1]:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got "
                           f"{len(lengths)} (batch_size={steps.shape[1]})")
    if len(lengths) and lengths.max() > steps.shape[0]:
        raise RuntimeError(f"a length in `lengths` ({lengths.max()}) exceeds the padded "
                           f"sequences' length ({steps.shape[0]})")
    if sorted_indices is not None:
        steps = steps.index_select(1, sorted_indices)
    sorted_lengths = lengths[order]
    batch_sizes = np.array([(sorted_lengths > t).sum() for t in range(sorted_lengths.max())],
                           dtype=np.int64)
    data = cat([steps[t, :int(n)] for t, n in enumerate(batch_sizes)])
    return PackedSequence(data, tensor(batch_sizes), sorted_indices, None)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0, total_length: int | None = None):
    """The padded batch ``(T, B, *)`` (``(B, T, *)`` when ``batch_first``) and the lengths, in
    the order the sequences had before packing; the inverse of ``pack_padded_sequence``."""
    data, batch_sizes = sequence.data, sequence.batch_sizes.numpy()
    steps, batch = len(batch_sizes), int(batch_sizes[0])
    if total_length is not None:
        if total_length < steps:
            raise ValueError("Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max "
                             f"sequence length being {steps}")
    else:
        total_length = steps
    tail = tuple(data.shape[1:])
    rows, offset = [], 0
    for n in batch_sizes:
        n = int(n)
        part = data[offset:offset + n]
        if n < batch:
            part = cat([part, full((batch - n, *tail), padding_value, dtype=data.dtype)])
        rows.append(part)
        offset += n
    rows += [full((batch, *tail), padding_value, dtype=data.dtype)] * (total_length - steps)
    padded = stack(rows)
    lengths = np.array([(batch_sizes > b).sum() for b in range(batch)], dtype=np.int64)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(1, sequence.unsorted_indices)
        lengths = lengths[sequence.unsorted_indices.numpy()]
    return (padded.transpose(0, 1) if batch_first else padded), tensor(lengths)


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack sequences of shapes ``(L_i, *)`` into ``(max L, B, *)`` (``(B, max L, *)`` when
    ``batch_first``), padding each on ``padding_side`` with ``padding_value``."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"Expected padding_side to be one of left or right, but got "
                         f"{padding_side}.")
    sequences = list(sequences)
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        gap = longest - s.shape[0]
        if gap:
            filler = full((gap, *s.shape[1:]), padding_value, dtype=s.dtype)
            s = cat([s, filler] if padding_side == "right" else [filler, s])
        padded.append(s)
    return stack(padded, dim=0 if batch_first else 1)


def pack_sequence(sequences, enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of sequences ``(L_i, *)`` (longest first, unless ``enforce_sorted=False``)."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths,
                                enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list:
    """The list of sequences in a padded batch, each cut to its length."""
    steps = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [steps[b, :int(n)] for b, n in enumerate(_lengths(lengths))]


def unpack_sequence(packed_sequences: PackedSequence) -> list:
    """The list of sequences in a PackedSequence, in their order before packing."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)


def run_packed(layer, packed: PackedSequence, hx):
    """``RNN`` / ``LSTM`` / ``GRU`` over a PackedSequence: each sequence runs alone, for its
    own length (so its final state is the one at its last step), from its own slice of ``hx``
    (given, and returned, in the order before packing); the outputs come packed as the input."""
    padded, lengths = pad_packed_sequence(packed, batch_first=layer.batch_first)
    time_dim, batch_dim = (1, 0) if layer.batch_first else (0, 1)
    lstm = layer.mode == "LSTM"
    outs, finals = [], []
    for b, n in enumerate(lengths.tolist()):
        x = padded.narrow(batch_dim, b, 1).narrow(time_dim, 0, n)
        h = None if hx is None else (
            tuple(s.narrow(1, b, 1) for s in hx) if lstm else hx.narrow(1, b, 1))
        out, final = _unpacked_forward(layer, x, h)
        outs.append(out.squeeze(batch_dim))
        finals.append(final)
    padded_out = pad_sequence(outs)  # (T, B, H), order before packing
    if packed.sorted_indices is not None:
        padded_out = padded_out.index_select(1, packed.sorted_indices)
    batch_sizes = packed.batch_sizes.numpy()
    data = cat([padded_out[t, :int(n)] for t, n in enumerate(batch_sizes)])
    out = PackedSequence(data, packed.batch_sizes, packed.sorted_indices,
                         packed.unsorted_indices)
    if lstm:
        return out, (cat([f[0] for f in finals], 1), cat([f[1] for f in finals], 1))
    return out, cat(finals, 1)


def _unpacked_forward(layer, x, h):
    from disthook.nn.modules.rnn import RNNBase

    return RNNBase.forward(layer, x, h)
