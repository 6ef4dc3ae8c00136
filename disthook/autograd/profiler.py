"""``torch.autograd.profiler``: ``record_function``, the label programs put around a region
for a profiler to show. disthook has no profiler (``profile`` refuses at use), so no profiler
is ever recording, and a label does what torch's does then: nothing."""
from __future__ import annotations

import contextlib

# this module's other public torch names refuse at use (see disthook._surface.refusal)
__disthook_partial__ = True


class record_function(contextlib.ContextDecorator):
    """``with record_function("attention"):`` or ``@record_function("attention")``: a label
    for a profiler; with none recording (always, here) it has no effect."""

    def __init__(self, name: str, args: str | None = None) -> None:
        self.name = name
        self.args = args

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None
