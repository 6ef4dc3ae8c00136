"""Reshapes that ``F.linear`` without bias records under torch's own node names."""
from __future__ import annotations

from disthook.ops import shape as S


class SqueezeDim(S.Squeeze):
    """``mm(x.unsqueeze(0), w.t()).squeeze(0)`` for 1-D input: ``SqueezeBackward4``."""

    node_name = "SqueezeBackward4"


class UnsafeView(S.View):
    """The reshape back to ``(*batch, out)`` after ``mm`` for N-D input (not a view)."""

    node_name = "UnsafeViewBackward0"
    view = False
