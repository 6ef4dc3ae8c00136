"""``torch.nn.modules.utils``: the argument helpers layers written outside torch import from it
(``_pair(kernel_size)`` in timm, detectron2, mmcv-style convolutions), and the state-dict
prefix helper for checkpoints saved from a wrapped model."""
from __future__ import annotations

from collections.abc import Iterable

__all__ = ["consume_prefix_in_state_dict_if_present"]


def _ntuple(n: int, name: str = "parse"):
    """A function making an ``n``-tuple of its argument: an iterable becomes a tuple of its
    items (whatever their number), anything else is repeated ``n`` times."""

    def as_tuple(x) -> tuple:
        return tuple(x) if isinstance(x, Iterable) else (x,) * n

    as_tuple.__name__ = as_tuple.__qualname__ = name
    return as_tuple


_single = _ntuple(1, "_single")
_pair = _ntuple(2, "_pair")
_triple = _ntuple(3, "_triple")
_quadruple = _ntuple(4, "_quadruple")


def _reverse_repeat_tuple(t, n: int) -> tuple:
    """A layer's per-dim padding ``t`` as F.pad wants it: last dim first, each ``n`` times."""
    return tuple(x for x in t[::-1] for _ in range(n))


def _list_with_default(out_size, defaults):
    """An adaptive pool's output size with each None taken from the input's trailing sizes."""
    if isinstance(out_size, int):
        return out_size
    if len(defaults) <= len(out_size):
        raise ValueError(f"Input dimension should be at least {len(out_size) + 1}")
    tail = list(defaults)[len(defaults) - len(out_size):]
    return [d if v is None else v for v, d in zip(out_size, tail)]


def consume_prefix_in_state_dict_if_present(state_dict: dict, prefix: str) -> None:
    """Drop ``prefix`` from the keys that start with it, in place (a checkpoint saved from a
    ``DataParallel`` model has ``module.`` before every key), in its ``_metadata`` too."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        state_dict[key[len(prefix):]] = state_dict.pop(key)
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is None:
        return
    bare = prefix.replace(".", "")
    for key in [k for k in metadata if k]:
        if key == bare:  # the wrapped model itself
            metadata[""] = metadata.pop(key)
        elif key.startswith(prefix):
            metadata[key[len(prefix):]] = metadata.pop(key)
