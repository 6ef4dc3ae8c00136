"""``one_hot`` and ``embedding_bag`` (sums, means or maxima of bags of embeddings)."""
from __future__ import annotations

import numpy as np

import disthook.nn.functional as F
from disthook.tensor import Tensor, cat

__all__ = ["embedding_bag", "one_hot"]


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 ``(*tensor.shape, num_classes)`` with a 1 at each value's position; with
    ``num_classes=-1`` one more than the largest value."""
    data = tensor._data
    if data.dtype != np.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if data.size == 0 and num_classes == -1:
        raise RuntimeError("Can not infer total number of classes from empty tensor.")
    if data.size and data.min() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if num_classes == -1:
        num_classes = int(data.max()) + 1 if data.size else 0
    elif data.size and data.max() >= num_classes:
        raise RuntimeError("Class values must be smaller than num_classes.")
    out = (data[..., None] == np.arange(num_classes)).astype(np.int64)
    return Tensor._make(out, None, 0)


def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None,
                  max_norm: float | None = None, norm_type: float = 2,
                  scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Tensor | None = None, include_last_offset: bool = False,
                  padding_idx: int | None = None) -> Tensor:
    """One row per bag: the sum, mean or max of the embeddings of its indices. Bags are the
    rows of a 2-d ``input``, or the runs of a 1-d ``input`` that ``offsets`` start; indices
    equal to ``padding_idx`` are left out; an empty bag gives zeros."""
    if weight.ndim != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension "
                         f"{weight.ndim}")
    if input._data.dtype.kind not in "iu":
        raise RuntimeError("expected input to be an integer tensor (Long or Int)")
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"mode has to be one of sum, mean or max, got {mode}")
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. "
                                      f"per_sample_weights is only supported for mode='sum' "
                                      f"(got mode='{mode}'). Please open a feature request on "
                                      "GitHub.")
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ValueError(f"embedding_bag: If per_sample_weights ({per_sample_weights.shape})"
                             f" is not None, then it must have the same shape as the input "
                             f"({input.shape})")
    indices = input._data.astype(np.int64)
    if indices.ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated "
                             "is a mini-batch of fixed length sequences. However, found offsets "
                             f"of type {type(offsets).__name__}")
        bags = [np.arange(i * indices.shape[1], (i + 1) * indices.shape[1])
                for i in range(indices.shape[0])]
        flat = indices.reshape(-1)
    elif indices.ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        starts = offsets._data.astype(np.int64).reshape(-1)
        if starts.size and starts[0] != 0:
            raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the "
                               f"mini-batch has to start from position 0. However, got "
                               f"{starts[0]}")
        ends = list(starts[1:]) + ([] if include_last_offset else [len(indices)])
        starts = starts[:-1] if include_last_offset else starts
        bags = [np.arange(s, e) for s, e in zip(starts, ends)]
        flat = indices
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{indices.ndim}")
    if flat.size and (flat.min() < 0 or flat.max() >= weight.shape[0]):
        at = int(np.argmax((flat < 0) | (flat >= weight.shape[0])))  # a RuntimeError here
        raise RuntimeError(f"Index {at} of input takes value {int(flat[at])} which is not in "
                           f"the valid range [0, {weight.shape[0]})")
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    if max_norm is not None:
        F._embedding_renorm(weight, flat, max_norm, norm_type)
    keep = flat != padding_idx if padding_idx is not None else np.ones(flat.shape, bool)
    rows = F.embedding(Tensor._make(flat, None, 0), weight,
                       scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.reshape(-1, 1)
    if mode == "max":
        return _bag_max(rows, bags, keep)
    # sum and mean: one constant (bags x positions) matrix of each position's share
    share = np.zeros((len(bags), len(flat)), dtype=rows._data.dtype)
    for b, positions in enumerate(bags):
        positions = positions[keep[positions]]
        if positions.size:
            share[b, positions] = 1.0 / positions.size if mode == "mean" else 1.0
    return Tensor._make(share, None, 0) @ rows


def _bag_max(rows: Tensor, bags: list, keep: np.ndarray) -> Tensor:
    """Each bag's elementwise maximum: its rows gathered into a ``(bags, longest, D)`` block
    padded with -inf, then the max over the bag; an empty bag gives zeros."""
    longest = max([int(keep[p].sum()) for p in bags] + [1])
    padding_row = len(keep)  # the index of an extra row of -inf
    gather = np.full((len(bags), longest), padding_row, dtype=np.int64)
    for b, positions in enumerate(bags):
        positions = positions[keep[positions]]
        gather[b, :positions.size] = positions
    lowest = rows.new_full((1, rows.shape[1]), -np.inf)
    block = cat([rows, lowest]).index_select(0, Tensor._make(gather.reshape(-1), None, 0))
    best = block.reshape(len(bags), longest, rows.shape[1]).max(1)[0]
    empty = np.array([not keep[p].any() for p in bags])
    if empty.any():
        best = best.new_zeros(()).where(Tensor._make(empty[:, None], None, 0), best)
    return best
