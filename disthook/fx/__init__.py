"""``torch.fx``: disthook has no symbolic tracer, so ``symbolic_trace``, ``GraphModule`` and the
rest refuse at use, saying to trace with PyTorch. ``wrap`` (a registration libraries make at
import, telling the tracer to keep a function whole) is accepted and does nothing."""
from __future__ import annotations

__all__ = ["wrap"]


def wrap(fn_or_name):
    """``torch.fx.wrap``: nothing is traced here; the function (or its name) as given."""
    return fn_or_name
